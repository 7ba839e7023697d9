package deepis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Name and Version identify the model in Info and in bundles.
const (
	Name    = "deepis"
	Version = "1.1.0"
)

// Defaults of the parameters and of the FitOptions left at zero.
const (
	DefaultHops     = 3
	DefaultSteps    = 4
	DefaultHidden   = 8
	DefaultLayers   = 1
	DefaultPatience = 3

	DefaultEpochs       = 20
	DefaultMinSteps     = 120 // Adam steps: 20 epochs of 180 pairs in batches of 32
	DefaultLearningRate = 0.01
	DefaultBatchSize    = 32
	DefaultLambda       = 1.0
)

var paramHelp = []forward.Param{
	{Name: "p", Default: "auto", Help: "edge infection probability of an unweighted graph (auto: 1/mean in-degree, at most 0.5); weighted graphs use their weights"},
	{Name: "hops", Default: strconv.Itoa(DefaultHops), Help: "feature hops H: features x, P^T x, ..., (P^T)^H x, log(1+in-degree)"},
	{Name: "steps", Default: strconv.Itoa(DefaultSteps), Help: "differentiable propagation steps T"},
	{Name: "hidden", Default: strconv.Itoa(DefaultHidden), Help: "width of the MLP's hidden layers"},
	{Name: "layers", Default: strconv.Itoa(DefaultLayers), Help: "number of hidden layers of the MLP"},
	{Name: "gate", Default: gateAuto, Help: "source gate rho, f(x)_v = y^T_v (1 - rho x_v), for sources observed uninfected (recovered, under SIR): auto gives it when at least 1% of the training pairs' sources are observed uninfected; on, off"},
	{Name: "patience", Default: strconv.Itoa(DefaultPatience), Help: "epochs without validation improvement before Fit stops"},
}

// The values of the gate parameter.
const (
	gateAuto = "auto"
	gateOn   = "on"
	gateOff  = "off"
)

// config is the parsed parameters.
type config struct {
	arch
	autoP    bool
	gate     string
	patience int
	// given records the parameters set explicitly, which must agree with
	// a state's architecture.
	given map[string]bool
}

func parseConfig(g *graph.Graph, params map[string]string) (config, error) {
	c := config{
		arch:     arch{Hops: DefaultHops, Steps: DefaultSteps, Hidden: DefaultHidden, Layers: DefaultLayers},
		autoP:    true,
		gate:     gateAuto,
		patience: DefaultPatience,
		given:    map[string]bool{},
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ints := map[string]struct {
		dst      *int
		min, max int
	}{
		"hops":     {&c.Hops, 0, 16},
		"steps":    {&c.Steps, 0, 64},
		"hidden":   {&c.Hidden, 1, 4096},
		"layers":   {&c.Layers, 0, 8},
		"patience": {&c.patience, 1, 1 << 20},
	}
	for _, k := range keys {
		v := strings.TrimSpace(params[k])
		c.given[k] = true
		if k == "p" {
			if v == "auto" || v == "" {
				continue
			}
			p, err := strconv.ParseFloat(v, 64)
			if err != nil || !(p > 0 && p <= 1) {
				return c, fmt.Errorf("deepis: param p=%q: want a probability in (0, 1] or auto", v)
			}
			c.P, c.autoP = p, false
			continue
		}
		if k == "gate" {
			switch v {
			case gateAuto, gateOn, gateOff:
				c.gate = v
			case "":
			default:
				return c, fmt.Errorf("deepis: param gate=%q: want auto, on or off", v)
			}
			c.Gate = c.gate == gateOn
			continue
		}
		spec, ok := ints[k]
		if !ok {
			return c, fmt.Errorf("deepis: unknown param %q (known: p, hops, steps, hidden, layers, gate, patience)", k)
		}
		i, err := strconv.Atoi(v)
		if err != nil || i < spec.min || i > spec.max {
			return c, fmt.Errorf("deepis: param %s=%q: want an integer in [%d, %d]", k, v, spec.min, spec.max)
		}
		*spec.dst = i
	}
	if c.autoP {
		c.P = autoP(g)
	}
	return c, nil
}

// autoP is 1/mean in-degree: each infected node then infects about one
// neighbour per step, a spread that neither dies nor floods; at most
// maxAutoP.
func autoP(g *graph.Graph) float64 {
	if g.Arcs() == 0 {
		return maxAutoP
	}
	return min(maxAutoP, float64(g.N())/float64(g.Arcs()))
}

// maxAutoP caps autoP below 1 for graphs with fewer arcs than nodes
// (chains, trees, out-stars): at P = 1 a source's neighbours saturate
// after one step, y^T is flat in P to first order, and nothing learns
// (an out-star stayed at 3 times the floor; with 0.5 it fits within 20%).
// The tables' graphs take 0.04-0.38, below it.
const maxAutoP = 0.5

// Model is the deepis forward model. It is safe for concurrent use; calls
// are serialised, and one Predict or VJP spreads its rows over up to
// Workers goroutines.
type Model struct {
	mu      sync.Mutex
	g       *graph.Graph
	cfg     config
	nt      *net
	fitted  bool
	workers int
	// minCells is the smallest rows*n worth a second goroutine
	// (minParallelCells; tests lower it).
	minCells int
}

// Option configures a Model.
type Option func(*Model)

// Workers sets how many goroutines one Predict or VJP may use (default
// GOMAXPROCS, at most 8). Rows are independent, so the result does not
// depend on it; nor does a fit's, which splits its passes into fitParts
// parts whatever the workers.
func Workers(n int) Option { return func(m *Model) { m.workers = max(1, n) } }

// New returns an unconfigured model.
func New(opts ...Option) *Model {
	m := &Model{workers: min(runtime.GOMAXPROCS(0), 8), minCells: minParallelCells}
	for _, o := range opts {
		o(m)
	}
	return m
}

var _ forward.Model = (*Model)(nil)

// Info describes the model and its parameters.
func (m *Model) Info(ctx context.Context) (forward.Info, error) {
	return forward.Info{Name: Name, Version: Version, Trainable: true, Params: append([]forward.Param(nil), paramHelp...)}, nil
}

// Configure sets the graph and parameters and, with a non-nil state from
// Fit, the trained weights. A state made for another graph, another
// architecture than the given params, or corrupt, is forward.ErrBadState.
func (m *Model) Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	if g == nil {
		return fmt.Errorf("deepis: configure: nil graph")
	}
	cfg, err := parseConfig(g, params)
	if err != nil {
		return err
	}
	var nt *net
	if state != nil {
		nt, err = decodeState(g, &cfg, state)
		if err != nil {
			return err
		}
	} else {
		nt = newNet(g, cfg.arch, rand.New(rand.NewPCG(1, 0)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.g, m.cfg, m.nt, m.fitted = g, cfg, nt, state != nil
	return nil
}

// ready checks that the model can predict and that x (and dy) have the
// graph's width and finite entries.
func (m *Model) ready(x, dy *mat.Dense) error {
	if m.nt == nil {
		return fmt.Errorf("deepis: %w", forward.ErrNotConfigured)
	}
	if !m.fitted {
		return fmt.Errorf("deepis: %w", forward.ErrNotFitted)
	}
	r, c := x.Dims()
	if c != m.nt.n {
		return fmt.Errorf("deepis: batch has %d columns, graph has %d nodes", c, m.nt.n)
	}
	if dy != nil {
		if dr, dc := dy.Dims(); dr != r || dc != c {
			return fmt.Errorf("deepis: dy is %dx%d, x is %dx%d", dr, dc, r, c)
		}
	}
	for _, in := range []struct {
		name string
		m    *mat.Dense
	}{{"x", x}, {"dy", dy}} {
		if in.m == nil {
			continue
		}
		for i := 0; i < r; i++ {
			for j, v := range in.m.RawRowView(i) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("deepis: %s row %d node %d is %v", in.name, i, j, v)
				}
			}
		}
	}
	return nil
}

// minParallelCells is the smallest rows*n worth a second goroutine.
const minParallelCells = 4096

// run computes f(x) and, when dy is given, dx = (df/dx)^T dy, spreading
// the rows over the workers.
// run computes y = f(x) and, when dy is not nil, dx = J^T dy. With target
// not nil, dy is an output: each chunk's dy = 2 (y - target) is written
// between its forward and backward pass (target has 1 or r rows).
func (m *Model) run(ctx context.Context, x, dy, target *mat.Dense) (y, dx *mat.Dense, err error) {
	if err := m.ready(x, dy); err != nil {
		return nil, nil, err
	}
	var ts []float64
	var trows int
	if target != nil {
		trows = target.RawMatrix().Rows
		ts = packed(target)
	}
	nt := m.nt
	r, n := x.Dims()
	y = mat.NewDense(r, n, nil)
	xs, ys := packed(x), y.RawMatrix().Data
	var gs, dxs []float64
	if dy != nil {
		dx = mat.NewDense(r, n, nil)
		gs, dxs = packed(dy), dx.RawMatrix().Data
	}
	parts := max(1, min(m.workers, r, r*n/m.minCells))
	for p := 0; p < parts; p++ {
		nt.worker(p) // created here, not inside the goroutines
	}
	step := nt.chunkRows()
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			w := nt.worker(p)
			lo, hi := p*r/parts, (p+1)*r/parts
			for b := lo; b < hi; b += step {
				if err := ctx.Err(); err != nil {
					errs[p] = err
					return
				}
				e := min(hi, b+step)
				nt.forward(w, xs[b*n:e*n], e-b, ys[b*n:e*n])
				for i := b; target != nil && i < e; i++ {
					t := ts[min(i, trows-1)*n:][:n]
					for v, yv := range ys[i*n : (i+1)*n] {
						gs[i*n+v] = 2 * (yv - t[v])
					}
				}
				if dy != nil {
					nt.backward(w, gs[b*n:e*n], dxs[b*n:e*n])
				}
			}
		}(p)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("deepis: %w", err)
		}
	}
	return y, dx, nil
}

// Predict returns f(x) for each row of x.
func (m *Model) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	y, _, err := m.run(ctx, x, nil, nil)
	return y, err
}

// VJP returns y = f(x) and dx = (df/dx)^T dy for each row.
func (m *Model) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run(ctx, x, dy, nil)
}

// SquaredErrorVJP implements forward.SquaredErrorVJPer in one pass: y =
// f(x) and dx = J^T 2 (y - target), target having 1 or as many rows as x.
func (m *Model) SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, n := x.Dims()
	if tr, tc := target.Dims(); (tr != 1 && tr != r) || tc != n {
		return nil, nil, fmt.Errorf("deepis: target is %dx%d for x %dx%d", tr, tc, r, n)
	}
	return m.run(ctx, x, mat.NewDense(r, n, nil), target)
}

// packed returns m's data as one row-major slice, copying only when m is a
// strided view.
func packed(m *mat.Dense) []float64 {
	raw := m.RawMatrix()
	if raw.Stride == raw.Cols {
		return raw.Data[:raw.Rows*raw.Cols]
	}
	return mat.DenseCopyOf(m).RawMatrix().Data
}
