package deepis

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// minFactor is the lower clamp of each propagation factor 1 - P_uv y_u.
const minFactor = 1e-12

// maxChunkCells bounds rows*n per pass, so the MLP's per-node activations
// stay a few MB whatever the graph and batch sizes.
const maxChunkCells = 1 << 16

// arch is the architecture; it travels in the state blob.
type arch struct {
	Hops, Steps, Hidden, Layers int
	// P is the fixed edge probability of an unweighted graph.
	P float64
}

// net is the differentiable model on one graph. It is not safe for
// concurrent use; Model serialises calls.
type net struct {
	arch
	n int
	// chunkCells bounds rows*n per pass (maxChunkCells; tests lower it).
	chunkCells int
	// In-CSR: arcs u->v for v are inFrom[inOff[v]:inOff[v+1]].
	inOff, inFrom []int
	// p0w is P0 per in-arc: the feature hop weights.
	p0w    []float64
	logdeg []float64

	mlp      *nn.MLP
	logScale *nn.Param // a, with s = exp(a)
	params   []*nn.Param

	tp tape
}

// tape holds one pass's intermediate values for backward, reused across
// passes.
type tape struct {
	rows int
	x    []float64 // rows*n, borrowed from the caller
	feat *mat.Dense
	q    []float64   // MLP output per (row, node)
	ys   [][]float64 // Steps+1 iterates
	prod [][]float64 // Steps products Π(1 - P y)
	pe   []float64   // P per in-arc for this pass
	peOK []bool      // P < 1, so dP/da = P (else clamped, 0)
	// scratch
	h1, h2, g, gp []float64
	dq            *mat.Dense
}

func newNet(g *graph.Graph, a arch, rng *rand.Rand) *net {
	n := g.N()
	off, from, w := g.InCSR()
	nt := &net{arch: a, n: n, chunkCells: maxChunkCells, inOff: off, inFrom: from}
	nt.p0w = make([]float64, len(w))
	for k, wk := range w {
		if g.Weighted() {
			nt.p0w[k] = wk
		} else {
			nt.p0w[k] = a.P
		}
	}
	nt.logdeg = make([]float64, n)
	for v := 0; v < n; v++ {
		nt.logdeg[v] = math.Log1p(float64(off[v+1] - off[v]))
	}
	sizes := []int{a.Hops + 2}
	for i := 0; i < a.Layers; i++ {
		sizes = append(sizes, a.Hidden)
	}
	sizes = append(sizes, 1)
	nt.mlp = nn.NewMLP(sizes, nn.LeakyReLU, nn.Sigmoid, rng)
	// Start with small initial probabilities, so early training sees the
	// propagation rather than a saturated MLP.
	out := nt.mlp.Layers[len(nt.mlp.Layers)-1]
	out.B[0] = -3
	nt.logScale = &nn.Param{Name: "edge.logscale", Value: []float64{0}, Grad: []float64{0}, Rows: 1, Cols: 1}
	nt.params = append(append([]*nn.Param(nil), nt.mlp.Params()...), nt.logScale)
	return nt
}

func (nt *net) features() int { return nt.Hops + 2 }

// chunkRows is how many batch rows one pass handles.
func (nt *net) chunkRows() int { return max(1, nt.chunkCells/max(nt.n, 1)) }

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// forward runs rows batch rows of x (rows*n, row-major) and returns the
// output y^T (rows*n), owned by the tape until the next forward.
func (nt *net) forward(x []float64, rows int) []float64 {
	n, F, tp := nt.n, nt.features(), &nt.tp
	cells := rows * n
	tp.rows, tp.x = rows, x

	// Features: gather hops over the in-CSR.
	if tp.feat == nil || tp.feat.RawMatrix().Rows != cells {
		tp.feat = mat.NewDense(cells, F, nil)
	}
	fd := tp.feat.RawMatrix().Data
	for i := 0; i < cells; i++ {
		fd[i*F] = x[i]
		fd[i*F+F-1] = nt.logdeg[i%n]
	}
	tp.h1, tp.h2 = grow(tp.h1, cells), grow(tp.h2, cells)
	prev, cur := tp.h1, tp.h2
	copy(prev, x)
	for k := 1; k <= nt.Hops; k++ {
		for b := 0; b < rows; b++ {
			o := b * n
			for v := 0; v < n; v++ {
				var s float64
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					s += nt.p0w[a] * prev[o+nt.inFrom[a]]
				}
				cur[o+v] = s
				fd[(o+v)*F+k] = s
			}
		}
		prev, cur = cur, prev
	}

	q := nt.mlp.Forward(tp.feat).RawMatrix().Data
	tp.q = grow(tp.q, cells)
	copy(tp.q, q)

	if len(tp.ys) != nt.Steps+1 {
		tp.ys = make([][]float64, nt.Steps+1)
		tp.prod = make([][]float64, nt.Steps)
	}
	for t := range tp.ys {
		tp.ys[t] = grow(tp.ys[t], cells)
	}
	for t := range tp.prod {
		tp.prod[t] = grow(tp.prod[t], cells)
	}
	y0 := tp.ys[0]
	for i := 0; i < cells; i++ {
		y0[i] = clamp01(1 - (1-x[i])*(1-tp.q[i]))
	}

	s := math.Exp(nt.logScale.Value[0])
	tp.pe = grow(tp.pe, len(nt.p0w))
	if cap(tp.peOK) < len(nt.p0w) {
		tp.peOK = make([]bool, len(nt.p0w))
	}
	tp.peOK = tp.peOK[:len(nt.p0w)]
	for a, w := range nt.p0w {
		p := s * w
		tp.peOK[a] = p < 1
		tp.pe[a] = math.Min(p, 1)
	}
	for t := 1; t <= nt.Steps; t++ {
		y, yn, pr := tp.ys[t-1], tp.ys[t], tp.prod[t-1]
		for b := 0; b < rows; b++ {
			o := b * n
			for v := 0; v < n; v++ {
				prod := 1.0
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					prod *= math.Max(1-tp.pe[a]*y[o+nt.inFrom[a]], minFactor)
				}
				pr[o+v] = prod
				yn[o+v] = 1 - (1-y[o+v])*prod
			}
		}
	}
	return tp.ys[nt.Steps]
}

func clamp01(v float64) float64 { return math.Min(math.Max(v, 0), 1) }

// backward takes dy = dL/df for the last forward (rows*n), accumulates the
// parameter gradients and, when dx is not nil, writes dL/dx into it.
func (nt *net) backward(dy, dx []float64) {
	n, F, tp := nt.n, nt.features(), &nt.tp
	cells := tp.rows * n
	tp.g, tp.gp = grow(tp.g, cells), grow(tp.gp, cells)
	g, gp := tp.g, tp.gp
	copy(g, dy)
	var gScale float64
	for t := nt.Steps; t >= 1; t-- {
		y, pr := tp.ys[t-1], tp.prod[t-1]
		clear(gp)
		for b := 0; b < tp.rows; b++ {
			o := b * n
			for v := 0; v < n; v++ {
				gv := g[o+v]
				if gv == 0 {
					continue
				}
				e := pr[o+v]
				gp[o+v] += gv * e
				// dL/dm_uv = -g_v (1 - y_v) E_v / m_uv for each factor m_uv.
				h := -gv * (1 - y[o+v]) * e
				if h == 0 {
					continue
				}
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					u := o + nt.inFrom[a]
					m := 1 - tp.pe[a]*y[u]
					if m < minFactor {
						continue
					}
					dm := h / m
					gp[u] -= dm * tp.pe[a]
					if tp.peOK[a] {
						gScale -= dm * y[u] * tp.pe[a]
					}
				}
			}
		}
		g, gp = gp, g
	}
	nt.logScale.Grad[0] += gScale

	// g is now dL/dy⁰; y⁰ = 1 - (1-x)(1-q), clamped.
	x := tp.x
	if tp.dq == nil || tp.dq.RawMatrix().Rows != cells {
		tp.dq = mat.NewDense(cells, 1, nil)
	}
	dq := tp.dq.RawMatrix().Data
	for i := 0; i < cells; i++ {
		raw := 1 - (1-x[i])*(1-tp.q[i])
		if raw < 0 || raw > 1 {
			dq[i] = 0
			if dx != nil {
				dx[i] = 0
			}
			continue
		}
		dq[i] = g[i] * (1 - x[i])
		if dx != nil {
			dx[i] = g[i] * (1 - tp.q[i])
		}
	}
	nt.mlp.Layers[0].SkipInputGrad(dx == nil)
	dfeat := nt.mlp.Backward(tp.dq)
	if dx == nil {
		return
	}
	fd := dfeat.RawMatrix().Data
	// Back through the hops: h_k = P0^T h_{k-1}, so dh_{k-1} = P0 dh_k plus
	// the feature column's own gradient.
	acc, nxt := tp.h1, tp.h2
	for i := 0; i < cells; i++ {
		acc[i] = fd[i*F+nt.Hops]
	}
	for k := nt.Hops; k >= 1; k-- {
		for i := 0; i < cells; i++ {
			nxt[i] = fd[i*F+k-1]
		}
		for b := 0; b < tp.rows; b++ {
			o := b * n
			for v := 0; v < n; v++ {
				d := acc[o+v]
				if d == 0 {
					continue
				}
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					nxt[o+nt.inFrom[a]] += nt.p0w[a] * d
				}
			}
		}
		acc, nxt = nxt, acc
	}
	for i := 0; i < cells; i++ {
		dx[i] += acc[i]
	}
}
