package gat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Name and Version identify the model in Info and in its state blobs.
const (
	Name    = "gat"
	Version = "1.0.0"
)

// Arch is the architecture of the network; it is stored in the state blob.
type Arch struct {
	// Heads and HeadDim shape the first attention layer (the paper: 8 x 8).
	Heads   int `json:"heads"`
	HeadDim int `json:"head_dim"`
	// Hops is the number of multi-hop source-count features.
	Hops int `json:"hops"`
}

// DefaultArch is the paper's setup: 8 heads of 8 dimensions, plus 2 hops
// of source-count features.
func DefaultArch() Arch { return Arch{Heads: 8, HeadDim: 8, Hops: 2} }

// Validate reports an architecture that cannot be built.
func (a Arch) Validate() error {
	switch {
	case a.Heads < 1 || a.Heads > 64:
		return fmt.Errorf("heads %d: want 1..64", a.Heads)
	case a.HeadDim < 1 || a.HeadDim > 256:
		return fmt.Errorf("head_dim %d: want 1..256", a.HeadDim)
	case a.Hops < 0 || a.Hops > 16:
		return fmt.Errorf("hops %d: want 0..16", a.Hops)
	}
	return nil
}

// Training defaults used where FitOptions leaves a zero value.
const (
	DefaultEpochs       = 60
	DefaultLearningRate = 5e-3
	DefaultBatchSize    = 16
	DefaultLambda       = 1.0
	DefaultPatience     = 8
)

var params = []forward.Param{
	{Name: "heads", Default: "8", Help: "attention heads of the first layer"},
	{Name: "head_dim", Default: "8", Help: "dimensions per head of the first layer"},
	{Name: "hops", Default: "2", Help: "multi-hop source-count input features log(1 + ((A+I)^k x)_v), k = 1..hops"},
	{Name: "patience", Default: strconv.Itoa(DefaultPatience), Help: "epochs without validation improvement before Fit stops early"},
}

// Option configures a Model.
type Option func(*Model)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(m *Model) { m.log = l } }

// Model is the GAT forward model. It implements forward.Model in-process
// and is safe for concurrent use (calls are serialised).
type Model struct {
	log *zap.Logger

	mu       sync.Mutex
	g        *graph.Graph
	arch     Arch
	patience int
	net      *network
}

var _ forward.Model = (*Model)(nil)

// New returns an unconfigured Model.
func New(opts ...Option) *Model {
	m := &Model{log: zap.NewNop(), arch: DefaultArch(), patience: DefaultPatience}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Info describes the model and its Configure parameters.
func (m *Model) Info(ctx context.Context) (forward.Info, error) {
	return forward.Info{Name: Name, Version: Version, Trainable: true, Params: append([]forward.Param(nil), params...)}, nil
}

// parseParams reads Configure's params over the defaults and returns which
// architecture keys were given explicitly.
func parseParams(p map[string]string) (Arch, int, map[string]bool, error) {
	arch, patience := DefaultArch(), DefaultPatience
	set := map[string]bool{}
	for k, v := range p {
		i, err := strconv.Atoi(v)
		if err != nil {
			return arch, 0, nil, fmt.Errorf("param %s=%q: not an integer", k, v)
		}
		switch k {
		case "heads":
			arch.Heads = i
		case "head_dim":
			arch.HeadDim = i
		case "hops":
			arch.Hops = i
		case "patience":
			if i < 1 {
				return arch, 0, nil, fmt.Errorf("param patience=%d: want >= 1", i)
			}
			patience = i
		default:
			return arch, 0, nil, fmt.Errorf("unknown param %q (known: heads, head_dim, hops, patience)", k)
		}
		set[k] = true
	}
	if err := arch.Validate(); err != nil {
		return arch, 0, nil, fmt.Errorf("param %w", err)
	}
	return arch, patience, set, nil
}

// Configure sets the graph, parameters and, if state is not nil, the
// fitted weights of an earlier Fit. A state made for another graph, another
// model or a corrupt one wraps forward.ErrBadState. When a state is given
// its architecture wins; an explicit architecture parameter that disagrees
// with it is an error.
func (m *Model) Configure(ctx context.Context, g *graph.Graph, p map[string]string, state []byte) error {
	if g == nil {
		return errors.New("gat: configure: nil graph")
	}
	if g.N() == 0 {
		return fmt.Errorf("gat: configure: %w", graph.ErrEmpty)
	}
	arch, patience, set, err := parseParams(p)
	if err != nil {
		return fmt.Errorf("gat: configure: %w", err)
	}
	var net *network
	if state != nil {
		net, err = decodeState(state, g)
		if err != nil {
			return fmt.Errorf("gat: configure: %w", err)
		}
		sa := net.arch
		for k, ok := range map[string]bool{"heads": arch.Heads == sa.Heads, "head_dim": arch.HeadDim == sa.HeadDim, "hops": arch.Hops == sa.Hops} {
			if set[k] && !ok {
				return fmt.Errorf("gat: configure: param %s=%s disagrees with the state's architecture %+v", k, p[k], sa)
			}
		}
		arch = sa
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.g, m.arch, m.patience, m.net = g, arch, patience, net
	return nil
}

// ready returns the fitted network or the reason there is none.
func (m *Model) ready() (*network, error) {
	if m.g == nil {
		return nil, fmt.Errorf("gat: %w", forward.ErrNotConfigured)
	}
	if m.net == nil {
		return nil, fmt.Errorf("gat: %w", forward.ErrNotFitted)
	}
	return m.net, nil
}

// checkBatch reports a batch whose shape does not match the graph or that
// holds NaN or Inf.
func checkBatch(what string, x *mat.Dense, n int) error {
	r, c := x.Dims()
	if c != n {
		return fmt.Errorf("%s has %d columns, graph has %d nodes", what, c, n)
	}
	for i := 0; i < r; i++ {
		for j, v := range x.RawRowView(i) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%s row %d node %d is %v", what, i, j, v)
			}
		}
	}
	return nil
}

// Predict returns f(x) for each row of x as a new matrix.
func (m *Model) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	net, err := m.ready()
	if err != nil {
		return nil, err
	}
	if x.IsEmpty() {
		return &mat.Dense{}, nil
	}
	if err := checkBatch("x", x, net.n); err != nil {
		return nil, fmt.Errorf("gat: predict: %w", err)
	}
	r, n := x.Dims()
	y := mat.NewDense(r, n, nil)
	per := chunkRows(n)
	for lo := 0; lo < r; lo += per {
		hi := min(lo+per, r)
		y.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.forward(x.Slice(lo, hi, 0, n).(*mat.Dense)))
	}
	return y, nil
}

// VJP returns y = f(x) and dx = (df/dx)^T dy for each row, as new
// matrices.
func (m *Model) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	net, err := m.ready()
	if err != nil {
		return nil, nil, err
	}
	if x.IsEmpty() && dy.IsEmpty() {
		return &mat.Dense{}, &mat.Dense{}, nil
	}
	if err := checkBatch("x", x, net.n); err != nil {
		return nil, nil, fmt.Errorf("gat: vjp: %w", err)
	}
	if err := checkBatch("dy", dy, net.n); err != nil {
		return nil, nil, fmt.Errorf("gat: vjp: %w", err)
	}
	xr, _ := x.Dims()
	if dr, _ := dy.Dims(); dr != xr {
		return nil, nil, fmt.Errorf("gat: vjp: x has %d rows, dy has %d", xr, dr)
	}
	n := net.n
	y, dx := mat.NewDense(xr, n, nil), mat.NewDense(xr, n, nil)
	per := chunkRows(n)
	for lo := 0; lo < xr; lo += per {
		hi := min(lo+per, xr)
		y.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.forward(x.Slice(lo, hi, 0, n).(*mat.Dense)))
		dx.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.backward(dy.Slice(lo, hi, 0, n).(*mat.Dense)))
	}
	return y, dx, nil
}

// nodeRows bounds the rows x nodes one forward pass handles: the caches
// hold several hundred values per node and row, so larger batches are
// split into chunks of rows, which keeps a pass on a large graph to about
// a hundred megabytes.
const nodeRows = 1 << 14

// chunkRows is the number of rows of x per forward pass on n nodes.
func chunkRows(n int) int { return max(1, nodeRows/n) }
