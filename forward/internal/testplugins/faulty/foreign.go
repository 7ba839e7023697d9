package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

// serveForeign speaks the plugin protocol the way forward/README.md tells
// authors in other languages to: no go-plugin at all, only gRPC, the health
// service, hand-made mTLS and the stdout handshake line. The binary does
// this when it is started under the name sourcewatch-forward-foreign (a
// link made by the test), which keeps the README honest without building a
// second test plugin. It then acts as a plugin built before the fused
// SquaredErrorVJP call; by mode, the rest of its name, "-fused" as one
// built before that call's loss_only flag, "-tworesults" as one whose Fit
// breaks the contract by sending its result twice.
func serveForeign(mode string) error {
	if os.Getenv("SOURCEWATCH_FORWARD_PLUGIN") != "b1f3e0a4c7d2.forward.v1" {
		return fmt.Errorf("this is a sourcewatch forward-model plugin; sourcewatch runs it")
	}
	if !slices.Contains(strings.Split(os.Getenv("PLUGIN_PROTOCOL_VERSIONS"), ","), "1") {
		return fmt.Errorf("host does not speak protocol 1 (PLUGIN_PROTOCOL_VERSIONS=%q)", os.Getenv("PLUGIN_PROTOCOL_VERSIONS"))
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM([]byte(os.Getenv("PLUGIN_CLIENT_CERT"))) {
		return fmt.Errorf("PLUGIN_CLIENT_CERT: no PEM certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
		MinVersion:   tls.VersionTLS12,
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	limit := 256 << 20
	if mode == "-smallmsg" {
		limit = 4 << 20 // the default of gRPC libraries other than Go's
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit)}
	if mode != "-plaintext" { // an author who skipped the mTLS step
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	var impl forwardpb.ForwardServer = olderServer{forward.NewServer(icmf.New())}
	switch mode {
	case "-fused":
		impl = beforeLossOnly{forward.NewServer(icmf.New())}
	case "-tworesults":
		impl = twoResults{impl}
	}
	forwardpb.RegisterForwardServer(s, impl)
	h := health.NewServer()
	h.SetServingStatus("plugin", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, h)
	fmt.Printf("1|1|tcp|%s|grpc|%s\n", lis.Addr(), base64.RawStdEncoding.EncodeToString(der))
	// An hclog JSON line stamped the way JavaScript's toISOString does,
	// with milliseconds, which go-plugin's own parser refuses.
	fmt.Fprintf(os.Stderr, `{"@level":"warn","@message":"foreign: serving","@timestamp":%q,"impl":"foreign"}`+"\n",
		time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	return s.Serve(lis)
}

// olderServer answers like a plugin built before SquaredErrorVJP existed
// (the proto's later, additive call), so the host's fallback is tested.
type olderServer struct{ forwardpb.ForwardServer }

func (olderServer) SquaredErrorVJP(context.Context, *forwardpb.SquaredErrorVJPRequest) (*forwardpb.VJPResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method SquaredErrorVJP not implemented")
}

// beforeLossOnly answers like a plugin built after SquaredErrorVJP but
// before its loss_only flag: the flag never reaches it and it sends y.
type beforeLossOnly struct{ forwardpb.ForwardServer }

func (s beforeLossOnly) SquaredErrorVJP(ctx context.Context, req *forwardpb.SquaredErrorVJPRequest) (*forwardpb.VJPResponse, error) {
	return s.ForwardServer.SquaredErrorVJP(ctx, &forwardpb.SquaredErrorVJPRequest{X: req.GetX(), Target: req.GetTarget()})
}

// twoResults sends Fit's result event twice, against the contract
// (exactly one, last), which the host must refuse rather than take the
// first and miss what the plugin meant.
type twoResults struct{ forwardpb.ForwardServer }

func (s twoResults) Fit(req *forwardpb.FitRequest, stream grpc.ServerStreamingServer[forwardpb.FitEvent]) error {
	return s.ForwardServer.Fit(req, resendResult{stream})
}

type resendResult struct {
	grpc.ServerStreamingServer[forwardpb.FitEvent]
}

func (r resendResult) Send(ev *forwardpb.FitEvent) error {
	if err := r.ServerStreamingServer.Send(ev); err != nil {
		return err
	}
	if ev.GetResult() != nil {
		return r.ServerStreamingServer.Send(ev)
	}
	return nil
}
