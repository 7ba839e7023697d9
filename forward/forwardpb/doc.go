// Package forwardpb is the generated Go code of the sourcewatch.forward.v1
// gRPC protocol (forward/proto). Do not edit the .pb.go files: change the
// proto and run forward/proto/gen.sh (make proto).
package forwardpb
