// Package forward owns the forward-model contract of sourcewatch: the Model
// interface, the gRPC protocol and its translators, the go-plugin host that
// launches and supervises plugin processes, and Serve for plugin authors.
package forward
