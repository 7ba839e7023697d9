package forward

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
)

// ProtocolVersion is the go-plugin handshake version of the
// sourcewatch.forward.v1 protocol. It is bumped on every breaking change to
// the proto, so an old plugin is refused at launch instead of misbehaving.
const ProtocolVersion = 1

// MaxMessageBytes bounds a gRPC message in either direction; a batch of
// vectors on a large graph is one message.
const MaxMessageBytes = 256 << 20

// pluginName is the key of the forward plugin in go-plugin's plugin set.
const pluginName = "forward"

// Handshake is the go-plugin handshake shared by host and plugins. The
// cookie only stops a plugin binary from being run by hand by mistake; it
// is not a security feature (the checksum and mTLS are).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "SOURCEWATCH_FORWARD_PLUGIN",
	MagicCookieValue: "b1f3e0a4c7d2.forward.v1",
}

// Serve runs m as a forward-model plugin over gRPC; it is the whole body of
// a plugin's main function and returns only when the host stops the plugin.
// Run by hand (without the host's handshake environment) it prints a
// message and exits non-zero.
func Serve(m Model) {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		// Run by hand: go-plugin's own message does not say whose plugin
		// this is or how to use it.
		name := filepath.Base(os.Args[0])
		model := strings.TrimPrefix(name, BinaryPrefix)
		fmt.Fprintf(os.Stderr, "%s is a sourcewatch forward-model plugin: sourcewatch starts it (train --forward %s, plugin check %s, serve); it is not run by hand.\n",
			name, model, model)
		os.Exit(1)
	}
	// A service manager stopping the host often signals its whole process
	// group or cgroup (systemd's default), which would kill the plugin under
	// the host in the middle of its clean shutdown. The host stops its
	// plugins itself, and the parent-death signal covers a host that dies,
	// so a plugin ignores SIGTERM, as go-plugin makes it ignore SIGINT.
	signal.Ignore(syscall.SIGTERM)
	dieWithParent()
	shared, err := pluginShared()
	if err != nil {
		// The host sends bytes to a plugin that does not claim the region.
		fmt.Fprintf(os.Stderr, "batches travel through gRPC: %v\n", err)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{pluginName: &grpcPlugin{impl: m, shared: shared}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return plugin.DefaultGRPCServer(append(opts,
				grpc.MaxRecvMsgSize(MaxMessageBytes),
				grpc.MaxSendMsgSize(MaxMessageBytes)))
		},
	})
}

// grpcPlugin binds the Forward service to go-plugin on both sides.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl   Model         // plugin side only
	shared *sharedRegion // plugin side only; nil without a region
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	forwardpb.RegisterForwardServer(s, &server{m: p.impl, shared: p.shared})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return forwardpb.NewForwardClient(c), nil
}

// NewServer adapts a Model to the gRPC service. Calls are serialised, since
// a Model need not be safe for concurrent use, and inputs are checked
// against the configured graph before the model sees them, so a bad
// request is an InvalidArgument status rather than a panic in the plugin.
func NewServer(m Model) forwardpb.ForwardServer {
	return &server{m: m}
}

type server struct {
	forwardpb.UnimplementedForwardServer
	m      Model
	mu     sync.Mutex
	n      int           // nodes of the configured graph; 0 before Configure
	shared *sharedRegion // the host's batch region, if it handed one over
}

// toStatus maps an error to a gRPC status whose message keeps the sentinel
// text, which the host maps back (see fromStatus).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, ErrSharedMemory):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrNotConfigured), errors.Is(err, ErrNotFitted):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrBadState), errors.Is(err, ErrBadMessage):
		code = codes.InvalidArgument
	}
	return status.Error(code, err.Error())
}

// guard turns a panic in the model into an Internal status so one bad
// request does not kill the plugin process. The status names where the
// panic happened, since the plugin's author sees only the host's log.
func guard(err *error) {
	if r := recover(); r != nil {
		*err = status.Errorf(codes.Internal, "plugin panic: %v (%s)", r, panicSite(3))
	}
}

// panicSite returns up to limit frames of the panicking goroutine's stack
// below the runtime's panic machinery, innermost first, as "at
// file:line (function)". Called from a deferred recover.
func panicSite(limit int) string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var sites []string
	for len(sites) < limit {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") && f.Function != "" {
			sites = append(sites, fmt.Sprintf("%s:%d (%s)", f.File, f.Line, f.Function))
		}
		if !more {
			break
		}
	}
	if len(sites) == 0 {
		return "at an unknown place"
	}
	return "at " + strings.Join(sites, ", called from ")
}

func (s *server) Info(ctx context.Context, _ *forwardpb.InfoRequest) (_ *forwardpb.InfoResponse, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.m.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := infoToProto(in)
	resp.SharedMemory = s.shared != nil
	return resp, nil
}

func (s *server) Configure(ctx context.Context, req *forwardpb.ConfigureRequest) (_ *forwardpb.ConfigureResponse, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A failed Configure leaves the server unconfigured whatever the model
	// kept, so no call runs against a half-replaced graph.
	s.n = 0
	g, err := GraphFromProto(req.GetGraph())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.m.Configure(ctx, g, req.GetParams(), req.GetState()); err != nil {
		return nil, toStatus(err)
	}
	s.n = g.N()
	return &forwardpb.ConfigureResponse{}, nil
}

func (s *server) Fit(req *forwardpb.FitRequest, stream forwardpb.Forward_FitServer) (err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return toStatus(fmt.Errorf("fit: %w", ErrNotConfigured))
	}
	pairs, err := PairsFromProto(req.GetPairs(), s.n, "pairs")
	if err != nil {
		return toStatus(err)
	}
	o := req.GetOptions()
	val, err := PairsFromProto(o.GetValidation(), s.n, "options.validation")
	if err != nil {
		return toStatus(err)
	}
	opts := FitOptions{
		Epochs: int(o.GetEpochs()), LearningRate: o.GetLearningRate(), BatchSize: int(o.GetBatchSize()),
		Lambda: o.GetLambda(), Seed: o.GetSeed(), Validation: val,
	}
	var sendErr error
	res, err := s.m.Fit(stream.Context(), pairs, opts, func(p Progress) {
		if sendErr != nil {
			return
		}
		sendErr = stream.Send(&forwardpb.FitEvent{Event: &forwardpb.FitEvent_Progress{Progress: &forwardpb.FitProgress{
			Epoch: int32(p.Epoch), Epochs: int32(p.Epochs), TrainLoss: p.TrainLoss, ValLoss: p.ValLoss,
		}}})
	})
	if err != nil {
		return toStatus(err)
	}
	if sendErr != nil {
		return sendErr
	}
	return stream.Send(&forwardpb.FitEvent{Event: &forwardpb.FitEvent_Result{Result: &forwardpb.FitResult{
		State: res.State, Metrics: res.Metrics,
	}}})
}

// checkX validates a batch against the configured graph.
func (s *server) checkX(p *forwardpb.Matrix, field string) error {
	if s.n == 0 {
		return fmt.Errorf("%s: %w", field, ErrNotConfigured)
	}
	if int(p.GetCols()) != s.n {
		return fmt.Errorf("%s: %d columns for a %d-node graph: %w", field, p.GetCols(), s.n, ErrBadMessage)
	}
	return nil
}

func (s *server) Predict(ctx context.Context, req *forwardpb.PredictRequest) (_ *forwardpb.PredictResponse, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.decodeX(req.GetX())
	if err != nil {
		return nil, toStatus(err)
	}
	y, err := s.m.Predict(ctx, x)
	if err == nil {
		err = nilOutput(y, nil, false)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &forwardpb.PredictResponse{Y: MatrixToProto(y)}, nil
}

func (s *server) VJP(ctx context.Context, req *forwardpb.VJPRequest) (_ *forwardpb.VJPResponse, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := s.decodeX(req.GetX())
	if err != nil {
		return nil, toStatus(err)
	}
	dy, err := MatrixFromProto(req.GetDy(), "dy")
	if err != nil {
		return nil, toStatus(err)
	}
	if r, c := dy.Dims(); r != x.RawMatrix().Rows || c != s.n {
		return nil, toStatus(fmt.Errorf("dy: %dx%d for x %dx%d: %w", r, c, x.RawMatrix().Rows, s.n, ErrBadMessage))
	}
	y, dx, err := s.m.VJP(ctx, x, dy)
	if err == nil {
		err = nilOutput(y, dx, true)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &forwardpb.VJPResponse{Y: MatrixToProto(y), Dx: MatrixToProto(dx)}, nil
}

// SquaredErrorVJP answers the fused data-term call: the model's own fused
// method when it has one (SquaredErrorVJPer), otherwise Predict then VJP in
// this process, which still saves the host a round trip.
func (s *server) SquaredErrorVJP(ctx context.Context, req *forwardpb.SquaredErrorVJPRequest) (_ *forwardpb.VJPResponse, err error) {
	defer guard(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := req.GetShared(); sh != nil {
		resp, err := s.sharedSquaredErrorVJP(ctx, sh, req.GetLossOnly())
		return resp, toStatus(err)
	}
	x, err := s.decodeX(req.GetX())
	if err != nil {
		return nil, toStatus(err)
	}
	target, err := MatrixFromProto(req.GetTarget(), "target")
	if err != nil {
		return nil, toStatus(err)
	}
	rows := x.RawMatrix().Rows
	if r, c := target.Dims(); (r != 1 && r != rows) || c != s.n {
		return nil, toStatus(fmt.Errorf("target: %dx%d for x %dx%d: %w", r, c, rows, s.n, ErrBadMessage))
	}
	y, dx, err := SquaredErrorVJP(ctx, s.m, x, target)
	if err == nil {
		err = nilOutput(y, dx, true)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetLossOnly() {
		return &forwardpb.VJPResponse{Loss: squaredErrors(y, target), Dx: MatrixToProto(dx)}, nil
	}
	return &forwardpb.VJPResponse{Y: MatrixToProto(y), Dx: MatrixToProto(dx)}, nil
}

// nilOutput is the error of a model call that returned a nil y (or, with
// wantDx, a nil dx) and no error: the model's bad output, said so, rather
// than a panic in the encoding that points at gonum.
func nilOutput(y, dx *mat.Dense, wantDx bool) error {
	var missing []string
	if y == nil {
		missing = append(missing, "y")
	}
	if wantDx && dx == nil {
		missing = append(missing, "dx")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the model returned a nil %s and no error: %w", strings.Join(missing, " and "), ErrBadOutput)
}

// decodeX checks a request's x against the configured graph and decodes it.
func (s *server) decodeX(m *forwardpb.Matrix) (*mat.Dense, error) {
	if err := s.checkX(m, "x"); err != nil {
		return nil, err
	}
	return MatrixFromProto(m, "x")
}

// sharedSquaredErrorVJP answers a fused call whose x and target are in the
// shared region (SharedBatch's layout), writing dx there.
func (s *server) sharedSquaredErrorVJP(ctx context.Context, sh *forwardpb.SharedBatch, lossOnly bool) (*forwardpb.VJPResponse, error) {
	if s.shared == nil {
		return nil, fmt.Errorf("shared: this plugin has no shared memory region: %w", ErrSharedMemory)
	}
	if s.n == 0 {
		return nil, fmt.Errorf("x: %w", ErrNotConfigured)
	}
	rows, cols, targetRows := int(sh.GetRows()), int(sh.GetCols()), int(sh.GetTargetRows())
	if cols != s.n {
		return nil, fmt.Errorf("shared: %d columns for a %d-node graph: %w", cols, s.n, ErrBadMessage)
	}
	if targetRows != 1 && targetRows != rows {
		return nil, fmt.Errorf("shared: %d target rows for %d rows of x: %w", targetRows, rows, ErrBadMessage)
	}
	xOff, targetOff, dxOff, size, ok := sharedLayout(rows, cols, targetRows)
	if !ok {
		return nil, fmt.Errorf("shared: a %dx%d batch does not fit the region: %w", rows, cols, ErrBadMessage)
	}
	mem, err := s.shared.view(size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrSharedMemory)
	}
	// Copies, not views: a model may keep what it is given, and the host
	// writes the next call's batch here.
	x := denseAt(mem, xOff, rows, cols)
	target := denseAt(mem, targetOff, targetRows, cols)
	y, dx, err := SquaredErrorVJP(ctx, s.m, x, target)
	if err == nil {
		err = nilOutput(y, dx, true)
	}
	if err != nil {
		return nil, err
	}
	if r, c := dx.Dims(); r != rows || c != cols {
		return nil, fmt.Errorf("shared: the model's dx is %dx%d for x %dx%d: %w", r, c, rows, cols, ErrBadOutput)
	}
	putDense(mem, dxOff, dx)
	if lossOnly {
		return &forwardpb.VJPResponse{Loss: squaredErrors(y, target), DxShared: true}, nil
	}
	return &forwardpb.VJPResponse{Y: MatrixToProto(y), DxShared: true}, nil
}
