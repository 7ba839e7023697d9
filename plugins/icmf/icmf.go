package icmf

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Name and Version identify the model in forward.Info.
const (
	Name    = "icmf"
	Version = "1.0.0"
)

// Parameter defaults.
const (
	DefaultSteps = 4
	DefaultP     = 0.1
	// MaxSteps bounds steps; the mean field converges long before.
	MaxSteps = 1000
)

// saturation caps w_uv y_u below 1 so log1p(-w y) stays finite; at the cap
// the term is flat and contributes no gradient.
const saturation = 1 - 1e-12

// Model is the mean-field IC forward model. Predict, VJP and Fit may run
// concurrently with each other, but not with Configure.
type Model struct {
	n     int
	steps int
	p     float64
	// In-adjacency in CSR form with effective weights: node v's in-arcs
	// are from[off[v]:off[v+1]] with probabilities w[off[v]:off[v+1]].
	off  []int
	from []int
	w    []float64
	// uniform: every arc has probability p (an unweighted graph), so the
	// log factor and its derivative depend on the sender only and are
	// computed once per node instead of once per arc.
	uniform bool
}

var _ forward.Model = (*Model)(nil)

// New returns an unconfigured model.
func New() *Model { return &Model{} }

// Info implements forward.Model.
func (m *Model) Info(context.Context) (forward.Info, error) {
	return forward.Info{
		Name: Name, Version: Version, Trainable: false,
		Params: []forward.Param{
			{Name: "steps", Default: strconv.Itoa(DefaultSteps), Help: "mean-field propagation steps T (1.." + strconv.Itoa(MaxSteps) + ")"},
			{Name: "p", Default: strconv.FormatFloat(DefaultP, 'g', -1, 64), Help: "infection probability of every edge of an unweighted graph, in [0,1]; a weighted graph uses its edge weights"},
		},
	}, nil
}

// Configure implements forward.Model. icmf keeps no state, so a non-empty
// state is ErrBadState; unknown or malformed params are errors naming them.
func (m *Model) Configure(_ context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	if len(state) != 0 {
		return fmt.Errorf("icmf: got a %d-byte state, but icmf is untrained and keeps none: %w", len(state), forward.ErrBadState)
	}
	steps, p := DefaultSteps, DefaultP
	for k, v := range params {
		switch k {
		case "steps":
			s, err := strconv.Atoi(v)
			if err != nil || s < 1 || s > MaxSteps {
				return fmt.Errorf("icmf: param steps=%q: want an integer in 1..%d", v, MaxSteps)
			}
			steps = s
		case "p":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return fmt.Errorf("icmf: param p=%q: want a number in [0,1]", v)
			}
			p = f
		default:
			return fmt.Errorf("icmf: unknown param %q (known: steps, p)", k)
		}
	}
	off, from, w := g.InCSR()
	m.n, m.steps, m.p, m.uniform = g.N(), steps, p, !g.Weighted()
	m.off, m.from = off, from
	m.w = make([]float64, len(w))
	for k := range w {
		if g.Weighted() {
			m.w[k] = w[k]
		} else {
			m.w[k] = p
		}
	}
	return nil
}

func (m *Model) checkShape(x, dy *mat.Dense) {
	r, c := x.Dims()
	if c != m.n {
		panic(fmt.Sprintf("icmf: x has %d columns for a %d-node graph", c, m.n))
	}
	if dy != nil {
		if dr, dc := dy.Dims(); dr != r || dc != c {
			panic(fmt.Sprintf("icmf: dy is %dx%d, x is %dx%d", dr, dc, r, c))
		}
	}
}

// tape holds one row's forward pass: y[t] = y^t for t = 0..T and
// e[t] = prod_u (1 - w_uv y^t_u), the factor that made y^{t+1}.
type tape struct {
	y [][]float64
	e [][]float64
	// node is per-node scratch of the uniform case: log1p(-p y_u).
	node []float64
}

func (m *Model) newTape() *tape {
	t := &tape{y: make([][]float64, m.steps+1), e: make([][]float64, m.steps)}
	buf := make([]float64, (2*m.steps+2)*m.n)
	t.node, buf = buf[:m.n], buf[m.n:]
	for i := range t.y {
		t.y[i], buf = buf[:m.n], buf[m.n:]
	}
	for i := range t.e {
		t.e[i], buf = buf[:m.n], buf[m.n:]
	}
	return t
}

// run fills the tape for one row x and returns y^T (aliasing the tape).
func (m *Model) run(t *tape, x []float64) []float64 {
	copy(t.y[0], x)
	for s := 0; s < m.steps; s++ {
		prev, next, e := t.y[s], t.y[s+1], t.e[s]
		if m.uniform {
			for u, yu := range prev {
				t.node[u] = math.Log1p(-min(m.p*yu, saturation))
			}
		}
		for v := 0; v < m.n; v++ {
			var logProd float64
			if m.uniform {
				for _, u := range m.from[m.off[v]:m.off[v+1]] {
					logProd += t.node[u]
				}
			} else {
				for k := m.off[v]; k < m.off[v+1]; k++ {
					logProd += math.Log1p(-min(m.w[k]*prev[m.from[k]], saturation))
				}
			}
			e[v] = math.Exp(logProd)
			next[v] = 1 - (1-x[v])*e[v]
		}
	}
	return t.y[m.steps]
}

// back writes dx = (df/dx)^T dy for the row on the tape. Per step, with
// s_v = log e_v: dL/dx_v += g_v e_v, dL/ds_v = -g_v (1 - x_v) e_v, and
// dL/dy^t_u = sum_{u->v} dL/ds_v * (-w_uv / (1 - w_uv y^t_u)); finally
// y^0 = x adds dL/dy^0 to dx. g and tmp are scratch of length n.
func (m *Model) back(t *tape, x, dy, dx, g, tmp []float64) {
	copy(g, dy)
	for i := range dx {
		dx[i] = 0
	}
	for s := m.steps - 1; s >= 0; s-- {
		prev, e := t.y[s], t.e[s]
		for i := range tmp {
			tmp[i] = 0
		}
		for v := 0; v < m.n; v++ {
			if g[v] == 0 {
				continue
			}
			dx[v] += g[v] * e[v]
			ds := -g[v] * (1 - x[v]) * e[v]
			if m.uniform {
				// Sum dL/ds over receivers; the sender's factor comes below.
				for _, u := range m.from[m.off[v]:m.off[v+1]] {
					tmp[u] += ds
				}
				continue
			}
			for k := m.off[v]; k < m.off[v+1]; k++ {
				u := m.from[k]
				a := m.w[k] * prev[u]
				if a > saturation {
					continue
				}
				tmp[u] -= ds * m.w[k] / (1 - a)
			}
		}
		if m.uniform {
			for u, yu := range prev {
				if a := m.p * yu; a > saturation {
					tmp[u] = 0
				} else {
					tmp[u] *= -m.p / (1 - a)
				}
			}
		}
		g, tmp = tmp, g
	}
	for i := range dx {
		dx[i] += g[i]
	}
}

// Predict implements forward.Model: each row of the result is f(x_i).
func (m *Model) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	if m.n == 0 {
		return nil, fmt.Errorf("icmf: predict: %w", forward.ErrNotConfigured)
	}
	m.checkShape(x, nil)
	r, _ := x.Dims()
	y := mat.NewDense(r, m.n, nil)
	t := m.newTape()
	for i := 0; i < r; i++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("icmf: predict: %w", err)
		}
		y.SetRow(i, m.run(t, x.RawRowView(i)))
	}
	return y, nil
}

// VJP implements forward.Model.
func (m *Model) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	if m.n == 0 {
		return nil, nil, fmt.Errorf("icmf: vjp: %w", forward.ErrNotConfigured)
	}
	m.checkShape(x, dy)
	r, _ := x.Dims()
	y := mat.NewDense(r, m.n, nil)
	dx := mat.NewDense(r, m.n, nil)
	t := m.newTape()
	g, tmp := make([]float64, m.n), make([]float64, m.n)
	for i := 0; i < r; i++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("icmf: vjp: %w", err)
		}
		xi := x.RawRowView(i)
		y.SetRow(i, m.run(t, xi))
		m.back(t, xi, dy.RawRowView(i), dx.RawRowView(i), g, tmp)
	}
	return y, dx, nil
}

// Fit implements forward.Model. There is nothing to learn: it returns an
// empty state and the fixed model's mean squared error on the pairs
// ("train_mse") and on the validation pairs ("val_mse").
func (m *Model) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	if m.n == 0 {
		return forward.FitResult{}, fmt.Errorf("icmf: fit: %w", forward.ErrNotConfigured)
	}
	train, err := m.mse(ctx, pairs, "pairs")
	if err != nil {
		return forward.FitResult{}, err
	}
	metrics := map[string]float64{"train_mse": train}
	val := math.NaN()
	if len(opts.Validation) > 0 {
		if val, err = m.mse(ctx, opts.Validation, "validation"); err != nil {
			return forward.FitResult{}, err
		}
		metrics["val_mse"] = val
	}
	if progress != nil {
		progress(forward.Progress{Epoch: 1, Epochs: 1, TrainLoss: train, ValLoss: val})
	}
	return forward.FitResult{State: []byte{}, Metrics: metrics}, nil
}

// mse is mean over pairs and nodes of (f(x) - y)^2; NaN for no pairs.
func (m *Model) mse(ctx context.Context, pairs []forward.Pair, field string) (float64, error) {
	if len(pairs) == 0 {
		return math.NaN(), nil
	}
	t := m.newTape()
	x, y := make([]float64, m.n), make([]float64, m.n)
	var sum float64
	for k, p := range pairs {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("icmf: fit: %w", err)
		}
		for i := range x {
			x[i], y[i] = 0, 0
		}
		for _, set := range []struct {
			idx  []int
			dst  []float64
			name string
		}{{p.Sources, x, "sources"}, {p.Infected, y, "infected"}} {
			for _, i := range set.idx {
				if i < 0 || i >= m.n {
					return 0, fmt.Errorf("icmf: fit: %s[%d].%s: node %d out of range for %d nodes", field, k, set.name, i, m.n)
				}
				set.dst[i] = 1
			}
		}
		pred := m.run(t, x)
		for i, v := range pred {
			d := v - y[i]
			sum += d * d
		}
	}
	return sum / float64(len(pairs)*m.n), nil
}
