package gnn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// Arch is a network architecture; it is stored as JSON in the state blob.
type Arch interface {
	// Validate reports an architecture that cannot be built.
	Validate() error
}

// Network is what the model needs from a network mapping source
// indicators x (batches x n) to infection probabilities (batches x n).
type Network[A Arch] interface {
	// Forward returns f(x); the result may be overwritten by the next call.
	Forward(x *mat.Dense) *mat.Dense
	// Backward returns (df/dx)^T dy for the x of the last Forward and
	// accumulates the parameter gradients.
	Backward(dy *mat.Dense) *mat.Dense
	// SetOutputBias makes an untrained network predict about p everywhere.
	SetOutputBias(p float64)
	// CacheFloats is an upper estimate of the floats the forward caches
	// and backward buffers hold per node and row of a pass; ChunkRows
	// sizes passes by it, so a wide architecture gets fewer rows per pass.
	CacheFloats() int
	Params() []*nn.Param
	Arch() A
	Nodes() int
}

// Spec describes one model built on this package.
type Spec[A Arch, N Network[A]] struct {
	// Name prefixes errors and names the model in Info and in the state.
	Name    string
	Version string
	// StateVersion is bumped whenever the layout or the meaning of a
	// parameter changes.
	StateVersion int
	// Params is what Info reports, in order. ArchFields maps those of them
	// that set the architecture to the integer fields of a; the parameter
	// "patience" is handled here.
	Params      []forward.Param
	ArchFields  func(a *A) map[string]*int
	DefaultArch func() A
	// NewNetwork builds a network for g initialised from seed.
	NewNetwork func(g *graph.Graph, arch A, seed uint64) N

	Defaults Defaults
}

// Defaults are the training settings used where FitOptions leaves a zero
// value; Patience is the default of the parameter "patience".
type Defaults struct {
	Epochs       int
	LearningRate float64
	BatchSize    int
	Lambda       float64
	Patience     int
}

// Model implements forward.Model for the networks of a Spec. It is safe
// for concurrent use (calls are serialised).
type Model[A Arch, N Network[A]] struct {
	spec *Spec[A, N]
	log  *zap.Logger

	mu       sync.Mutex
	g        *graph.Graph
	arch     A
	patience int
	net      N
	fitted   bool
}

// NewModel returns an unconfigured Model that logs nowhere.
func NewModel[A Arch, N Network[A]](spec *Spec[A, N]) *Model[A, N] {
	return &Model[A, N]{spec: spec, log: zap.NewNop(), arch: spec.DefaultArch(), patience: spec.Defaults.Patience}
}

// SetLogger sets the logger (nil: zap.NewNop()).
func (m *Model[A, N]) SetLogger(l *zap.Logger) {
	if l == nil {
		l = zap.NewNop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = l
}

// Info describes the model and its Configure parameters.
func (m *Model[A, N]) Info(ctx context.Context) (forward.Info, error) {
	s := m.spec
	return forward.Info{Name: s.Name, Version: s.Version, Trainable: true, Params: append([]forward.Param(nil), s.Params...)}, nil
}

// parseParams reads Configure's params over the defaults and returns which
// architecture keys were given explicitly.
func (s *Spec[A, N]) parseParams(p map[string]string) (A, int, map[string]bool, error) {
	arch, patience := s.DefaultArch(), s.Defaults.Patience
	fields := s.ArchFields(&arch)
	set := map[string]bool{}
	for k, v := range p {
		i, err := strconv.Atoi(v)
		if err != nil {
			return arch, 0, nil, fmt.Errorf("param %s=%q: not an integer", k, v)
		}
		if k == "patience" {
			if i < 1 {
				return arch, 0, nil, fmt.Errorf("param patience=%d: want >= 1", i)
			}
			patience = i
		} else if f, ok := fields[k]; ok {
			*f = i
		} else {
			known := make([]string, len(s.Params))
			for j, q := range s.Params {
				known[j] = q.Name
			}
			return arch, 0, nil, fmt.Errorf("unknown param %q (known: %s)", k, strings.Join(known, ", "))
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
func (m *Model[A, N]) Configure(ctx context.Context, g *graph.Graph, p map[string]string, state []byte) error {
	name := m.spec.Name
	if g == nil {
		return errors.New(name + ": configure: nil graph")
	}
	if g.N() == 0 {
		return fmt.Errorf("%s: configure: %w", name, graph.ErrEmpty)
	}
	arch, patience, set, err := m.spec.parseParams(p)
	if err != nil {
		return fmt.Errorf("%s: configure: %w", name, err)
	}
	var net N
	if state != nil {
		net, err = m.spec.DecodeState(state, g)
		if err != nil {
			return fmt.Errorf("%s: configure: %w", name, err)
		}
		sa := net.Arch()
		given, stored := m.spec.ArchFields(&arch), m.spec.ArchFields(&sa)
		for _, q := range m.spec.Params {
			if f, ok := given[q.Name]; ok && set[q.Name] && *f != *stored[q.Name] {
				return fmt.Errorf("%s: configure: param %s=%s disagrees with the state's architecture %+v", name, q.Name, p[q.Name], sa)
			}
		}
		arch = sa
	}
	probe := net
	if state == nil {
		probe = m.spec.NewNetwork(g, arch, 0)
	}
	if err := checkRowFloats(g.N(), probe.CacheFloats()); err != nil {
		return fmt.Errorf("%s: configure: architecture %+v: %w", name, arch, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.g, m.arch, m.patience, m.net, m.fitted = g, arch, patience, net, state != nil
	return nil
}

// ready returns the fitted network or the reason there is none.
func (m *Model[A, N]) ready() (N, error) {
	var none N
	if m.g == nil {
		return none, fmt.Errorf("%s: %w", m.spec.Name, forward.ErrNotConfigured)
	}
	if !m.fitted {
		return none, fmt.Errorf("%s: %w", m.spec.Name, forward.ErrNotFitted)
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
func (m *Model[A, N]) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	net, err := m.ready()
	if err != nil {
		return nil, err
	}
	if x.IsEmpty() {
		return &mat.Dense{}, nil
	}
	if err := checkBatch("x", x, net.Nodes()); err != nil {
		return nil, fmt.Errorf("%s: predict: %w", m.spec.Name, err)
	}
	r, n := x.Dims()
	y := mat.NewDense(r, n, nil)
	per := ChunkRows(n, net.CacheFloats())
	for lo := 0; lo < r; lo += per {
		hi := min(lo+per, r)
		y.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.Forward(x.Slice(lo, hi, 0, n).(*mat.Dense)))
	}
	return y, nil
}

// VJP returns y = f(x) and dx = (df/dx)^T dy for each row, as new
// matrices.
func (m *Model[A, N]) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	net, err := m.ready()
	if err != nil {
		return nil, nil, err
	}
	if x.IsEmpty() && dy.IsEmpty() {
		return &mat.Dense{}, &mat.Dense{}, nil
	}
	name := m.spec.Name
	if err := checkBatch("x", x, net.Nodes()); err != nil {
		return nil, nil, fmt.Errorf("%s: vjp: %w", name, err)
	}
	if err := checkBatch("dy", dy, net.Nodes()); err != nil {
		return nil, nil, fmt.Errorf("%s: vjp: %w", name, err)
	}
	xr, _ := x.Dims()
	if dr, _ := dy.Dims(); dr != xr {
		return nil, nil, fmt.Errorf("%s: vjp: x has %d rows, dy has %d", name, xr, dr)
	}
	n := net.Nodes()
	y, dx := mat.NewDense(xr, n, nil), mat.NewDense(xr, n, nil)
	per := ChunkRows(n, net.CacheFloats())
	for lo := 0; lo < xr; lo += per {
		hi := min(lo+per, xr)
		y.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.Forward(x.Slice(lo, hi, 0, n).(*mat.Dense)))
		dx.Slice(lo, hi, 0, n).(*mat.Dense).Copy(net.Backward(dy.Slice(lo, hi, 0, n).(*mat.Dense)))
	}
	return y, dx, nil
}

// PassFloats bounds the floats the network's buffers hold in one pass:
// 2^24 floats, 128 MiB. That is what the default GAT (8 heads x 8, about
// 1,030 floats per node and row on Power Grid) held in its passes of 3
// rows on Power Grid's 4941 nodes when a pass was capped at 2^14
// node-rows whatever the width, so that pass, and its speed, stay as they
// were; the default MONSTOR (460 per node and row) now takes 7 rows per
// pass there instead of 3, within the same bound. A wider architecture
// gets proportionally fewer rows, down to one: the widest GAT (64 heads x
// 256, over 200,000 per node and row) exceeds the bound with one row on
// 73 nodes or more, which splitting rows cannot help; Configure refuses an
// architecture whose one row would exceed MaxRowFloats.
const PassFloats = 1 << 24

// MaxRowFloats bounds the floats one row of a pass may hold (2 GiB):
// rows are never split, so an architecture that needs more for one row of
// the configured graph is refused at Configure rather than left to run
// the plugin out of memory in the middle of a Fit or a Solve.
const MaxRowFloats = 1 << 28

// checkRowFloats reports a network whose buffers, perNode floats per node
// and row, exceed MaxRowFloats for one row on n nodes.
func checkRowFloats(n, perNode int) error {
	if need := float64(n) * float64(perNode); need > MaxRowFloats {
		return fmt.Errorf("one row of this %d-node graph needs %d floats per node, %.1f GiB, over the %d GiB one row may hold: use a narrower architecture",
			n, perNode, need*8/(1<<30), MaxRowFloats*8/(1<<30))
	}
	return nil
}

// ChunkRows is the number of rows of x per pass on n nodes for a network
// whose buffers hold perNode floats per node and row (its CacheFloats):
//
//	max(1, PassFloats / (n perNode))
//
// Rows are not split, so a single row holding more than PassFloats still
// makes a pass of its own.
func ChunkRows(n, perNode int) int {
	if n < 1 || perNode < 1 {
		panic(fmt.Sprintf("gnn: ChunkRows(%d, %d): want positive sizes", n, perNode))
	}
	return max(1, PassFloats/(n*perNode))
}
