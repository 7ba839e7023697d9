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

// tape holds one row's forward pass: y[t] = y^t for t = 0..T, and for the
// factors f_uv = 1 - w_uv y^t_u of e_v = prod_u f_uv, which made y^{t+1}:
// prod[t][v], the product of v's non-zero factors, and zeros[t][v], how
// many are zero (w_uv y_u = 1: an arc of probability 1 from a node
// infected for sure). e_v is prod when zeros is 0 and 0 otherwise; keeping
// the two apart gives the exact gradient there, where a cap or a log
// would lose it.
type tape struct {
	y     [][]float64
	prod  [][]float64
	zeros [][]int32
	// node is per-node scratch of the uniform case: 1 - p y_u.
	node []float64
	// sum and sumOne are per-sender scratch of back's uniform case.
	sum, sumOne []float64
}

func (m *Model) newTape() *tape {
	t := &tape{y: make([][]float64, m.steps+1), prod: make([][]float64, m.steps), zeros: make([][]int32, m.steps)}
	buf := make([]float64, (2*m.steps+4)*m.n)
	t.node, buf = buf[:m.n], buf[m.n:]
	t.sum, buf = buf[:m.n], buf[m.n:]
	t.sumOne, buf = buf[:m.n], buf[m.n:]
	for i := range t.y {
		t.y[i], buf = buf[:m.n], buf[m.n:]
	}
	for i := range t.prod {
		t.prod[i], buf = buf[:m.n], buf[m.n:]
	}
	zbuf := make([]int32, m.steps*m.n)
	for i := range t.zeros {
		t.zeros[i], zbuf = zbuf[:m.n], zbuf[m.n:]
	}
	return t
}

// factor is 1 - a for a = w·y in [0, 1], never below 0.
func factor(a float64) float64 { return max(0, 1-a) }

// effective is e_v from its tape entries.
func effective(prod float64, zeros int32) float64 {
	if zeros > 0 {
		return 0
	}
	return prod
}

// run fills the tape for one row x and returns y^T (aliasing the tape).
func (m *Model) run(t *tape, x []float64) []float64 {
	copy(t.y[0], x)
	for s := 0; s < m.steps; s++ {
		prev, next, prod, zeros := t.y[s], t.y[s+1], t.prod[s], t.zeros[s]
		if m.uniform {
			for u, yu := range prev {
				t.node[u] = factor(m.p * yu)
			}
		}
		for v := 0; v < m.n; v++ {
			pv, zv := 1.0, int32(0)
			for k := m.off[v]; k < m.off[v+1]; k++ {
				var f float64
				if m.uniform {
					f = t.node[m.from[k]]
				} else {
					f = factor(m.w[k] * prev[m.from[k]])
				}
				if f == 0 {
					zv++
				} else {
					pv *= f
				}
			}
			prod[v], zeros[v] = pv, zv
			next[v] = 1 - (1-x[v])*effective(pv, zv)
		}
	}
	return t.y[m.steps]
}

// back writes dx = (df/dx)^T dy for the row on the tape. Per step, with
// g = dL/dy^{t+1}: dL/dx_v += g_v e_v, dL/de_v = -g_v (1 - x_v), and
//
//	dL/dy^t_u = sum_{u->v} dL/de_v · (-w_uv) · prod_{u'->v, u' != u} f_u'v,
//
// the product of v's other factors: prod_v / f_uv when v has no zero
// factor, prod_v when f_uv is its only zero one, 0 otherwise. Finally
// y^0 = x adds dL/dy^0 to dx. g and tmp are scratch of length n.
func (m *Model) back(t *tape, x, dy, dx, g, tmp []float64) {
	copy(g, dy)
	for i := range dx {
		dx[i] = 0
	}
	for s := m.steps - 1; s >= 0; s-- {
		prev, prod, zeros := t.y[s], t.prod[s], t.zeros[s]
		for i := range tmp {
			tmp[i] = 0
		}
		if m.uniform {
			clear(t.sum)
			clear(t.sumOne)
		}
		for v := 0; v < m.n; v++ {
			if g[v] == 0 {
				continue
			}
			dx[v] += g[v] * effective(prod[v], zeros[v])
			de := -g[v] * (1 - x[v])
			if zeros[v] > 1 {
				continue // every factor has another zero beside it
			}
			if m.uniform {
				// The sender's factor is the same on all its arcs:
				// sum de·prod over receivers now, divide below.
				for _, u := range m.from[m.off[v]:m.off[v+1]] {
					if zeros[v] == 0 {
						t.sum[u] += de * prod[v]
					} else {
						t.sumOne[u] += de * prod[v]
					}
				}
				continue
			}
			for k := m.off[v]; k < m.off[v+1]; k++ {
				u := m.from[k]
				f := factor(m.w[k] * prev[u])
				switch {
				case zeros[v] == 0:
					tmp[u] -= de * m.w[k] * prod[v] / f
				case f == 0:
					tmp[u] -= de * m.w[k] * prod[v]
				}
			}
		}
		if m.uniform {
			for u, yu := range prev {
				// A zero factor's receivers all have a zero (sum holds
				// none of them); a non-zero one's single-zero receivers
				// have their zero elsewhere (sumOne's are not its).
				if f := factor(m.p * yu); f == 0 {
					tmp[u] = -m.p * t.sumOne[u]
				} else {
					tmp[u] = -m.p * t.sum[u] / f
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
