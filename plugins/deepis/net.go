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

// initialSourceLogit starts the source gate nearly shut (rho = 0.018):
// a source is observed infected until the training pairs say otherwise.
const initialSourceLogit = -4

// arch is the architecture; it travels in the state blob.
type arch struct {
	Hops, Steps, Hidden, Layers int
	// P is the fixed edge probability of an unweighted graph.
	P float64
	// Gate is whether the net has the source gate rho (see doc.go).
	Gate bool
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
	p0w []float64
	// uniform is whether every arc has the same P0 (an unweighted graph):
	// then a factor 1 - P y_u depends on u alone and is computed once per
	// node instead of once per arc.
	uniform bool
	// Out-CSR, arcs v->w for v are outTo[outOff[v]:outOff[v+1]]: with a
	// uniform P the backward passes gather over the out-arcs.
	outOff, outTo []int
	logdeg        []float64

	mlp      *nn.MLP
	logScale *nn.Param // a, with s = exp(a)
	// srcLogit is b, with rho = sigmoid(b) the chance that a source is
	// observed uninfected (recovered, under SIR): f_v = y^T_v (1 - rho x_v).
	// nil without the gate.
	srcLogit *nn.Param
	params   []*nn.Param

	// workers[0] runs on mlp itself; the others on replicas, for
	// concurrent Predict and VJP passes over disjoint rows.
	workers []*worker
}

// worker is what one concurrent pass owns: its tape and an MLP whose
// caches are its own.
type worker struct {
	tp  tape
	mlp *nn.MLP
	// gSrc accumulates dL/db over this worker's training passes.
	gSrc float64
}

// worker returns the i-th worker, creating it on first use.
func (nt *net) worker(i int) *worker {
	for len(nt.workers) <= i {
		if len(nt.workers) == 0 {
			nt.workers = append(nt.workers, &worker{mlp: nt.mlp})
			continue
		}
		nt.workers = append(nt.workers, &worker{mlp: nt.mlp.Replica()})
	}
	return nt.workers[i]
}

// tape holds one pass's intermediate values for backward, reused across
// passes. Cells are node-major, c = v*rows + b, so the arcs of a node are
// walked once for all rows of the batch and each arc touches rows
// contiguous values.
type tape struct {
	rows int
	xt   []float64 // x, node-major
	feat *mat.Dense
	q    []float64   // MLP output per cell
	ys   [][]float64 // Steps+1 iterates
	prod [][]float64 // Steps products Π(1 - P y)
	pe   []float64   // P per in-arc for this pass
	peOK []bool      // s P0 <= 1, so dP/da = P (else clamped, 0); at 1, the derivative from below
	rho  float64     // the source gate of this pass (0 without it)
	gxe  []float64   // dL/dx through the source gate, node-major
	outT []float64   // the gated output, node-major
	// scratch
	h1, h2, g, gp, hv []float64
	blk               []float64 // one node's rows values
	fac               []float64 // per cell: 1 - P y (forward) or its inverse (backward), uniform P only
	dq                *mat.Dense
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
	nt.uniform = len(nt.p0w) > 0
	for _, wk := range nt.p0w {
		nt.uniform = nt.uniform && wk == nt.p0w[0]
	}
	if nt.uniform {
		nt.outOff = make([]int, n+1)
		for v := 0; v < n; v++ {
			nbr, _ := g.Out(v)
			nt.outTo = append(nt.outTo, nbr...)
			nt.outOff[v+1] = len(nt.outTo)
		}
	}
	nt.logdeg = make([]float64, n)
	for v := 0; v < n; v++ {
		nt.logdeg[v] = math.Log1p(float64(off[v+1] - off[v]))
	}
	nt.mlp = nn.NewMLP(a.layerSizes(), nn.LeakyReLU, nn.Sigmoid, rng)
	// Start with small initial probabilities, so early training sees the
	// propagation rather than a saturated MLP.
	out := nt.mlp.Layers[len(nt.mlp.Layers)-1]
	out.B[0] = -3
	nt.logScale = &nn.Param{Name: "edge.logscale", Value: []float64{0}, Grad: []float64{0}, Rows: 1, Cols: 1}
	nt.params = append(append([]*nn.Param(nil), nt.mlp.Params()...), nt.logScale)
	if a.Gate {
		nt.srcLogit = &nn.Param{Name: "source.logit", Value: []float64{initialSourceLogit}, Grad: []float64{0}, Rows: 1, Cols: 1}
		nt.params = append(nt.params, nt.srcLogit)
	}
	return nt
}

func (nt *net) features() int { return nt.Hops + 2 }

// layerSizes are the widths of the MLP's layers: the features (x and its
// Hops propagations, and log(1 + in-degree)), Layers hidden ones, and the
// one output.
func (a arch) layerSizes() []int {
	sizes := []int{a.Hops + 2}
	for i := 0; i < a.Layers; i++ {
		sizes = append(sizes, a.Hidden)
	}
	return append(sizes, 1)
}

// chunkRows is how many batch rows one pass handles.
func (nt *net) chunkRows() int { return max(1, nt.chunkCells/max(nt.n, 1)) }

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// forward runs rows batch rows of x (row-major rows x n) and writes f(x),
// row-major, into y.
func (nt *net) forward(w *worker, x []float64, rows int, y []float64) {
	n, F, tp := nt.n, nt.features(), &w.tp
	cells := rows * n
	tp.rows = rows
	tp.xt = grow(tp.xt, cells)
	transpose(tp.xt, x, rows, n)
	xt := tp.xt

	if tp.feat == nil || tp.feat.RawMatrix().Rows != cells {
		tp.feat = mat.NewDense(cells, F, nil)
	}
	fd := tp.feat.RawMatrix().Data
	for v := 0; v < n; v++ {
		for b := 0; b < rows; b++ {
			c := v*rows + b
			fd[c*F] = xt[c]
			fd[c*F+F-1] = nt.logdeg[v]
		}
	}
	// Hops h_k = P0^T h_{k-1}, gathered over the in-CSR.
	tp.h1, tp.h2 = grow(tp.h1, cells), grow(tp.h2, cells)
	prev, cur := xt, tp.h1
	for k := 1; k <= nt.Hops; k++ {
		for v := 0; v < n; v++ {
			acc := cur[v*rows : (v+1)*rows]
			if nt.uniform {
				sumGather(acc, prev, nt.inFrom[nt.inOff[v]:nt.inOff[v+1]], rows)
				for b := range acc {
					acc[b] *= nt.p0w[0]
				}
			} else {
				clear(acc)
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					wa, src := nt.p0w[a], prev[nt.inFrom[a]*rows:][:rows]
					for b, s := range src {
						acc[b] += wa * s
					}
				}
			}
			for b, s := range acc {
				fd[(v*rows+b)*F+k] = s
			}
		}
		if k == 1 {
			prev, cur = cur, tp.h2
		} else {
			prev, cur = cur, prev
		}
	}

	q := w.mlp.Forward(tp.feat).RawMatrix().Data
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
	for c := 0; c < cells; c++ {
		y0[c] = clamp01(1 - (1-xt[c])*(1-tp.q[c]))
	}

	s := math.Exp(nt.logScale.Value[0])
	tp.pe = grow(tp.pe, len(nt.p0w))
	if cap(tp.peOK) < len(nt.p0w) {
		tp.peOK = make([]bool, len(nt.p0w))
	}
	tp.peOK = tp.peOK[:len(nt.p0w)]
	for a, wa := range nt.p0w {
		p := s * wa
		// At exactly 1 (P0 = 1: a weight of 1, or p=auto on a graph with
		// fewer arcs than nodes) the scale must still be able to learn
		// down; with the clamp's zero derivative it stayed at P = 1 and the
		// model saturated (forward error 2-3 times the floor).
		tp.peOK[a] = p <= 1
		tp.pe[a] = math.Min(p, 1)
	}
	if nt.uniform {
		tp.fac = grow(tp.fac, cells)
	}
	for t := 1; t <= nt.Steps; t++ {
		yp, yn, pr := tp.ys[t-1], tp.ys[t], tp.prod[t-1]
		if nt.uniform {
			p := tp.pe[0]
			for c, yu := range yp {
				m := 1 - p*yu
				if m < minFactor {
					m = minFactor
				}
				tp.fac[c] = m
			}
		}
		for v := 0; v < n; v++ {
			prod := pr[v*rows : (v+1)*rows]
			if nt.uniform {
				prodGather(prod, tp.fac, nt.inFrom[nt.inOff[v]:nt.inOff[v+1]], rows)
			} else {
				for b := range prod {
					prod[b] = 1
				}
				for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
					p, src := tp.pe[a], yp[nt.inFrom[a]*rows:][:rows]
					for b, yu := range src {
						m := 1 - p*yu
						if m < minFactor {
							m = minFactor
						}
						prod[b] *= m
					}
				}
			}
			old, nw := yp[v*rows:(v+1)*rows], yn[v*rows:(v+1)*rows]
			for b, e := range prod {
				nw[b] = 1 - (1-old[b])*e
			}
		}
	}
	if !nt.Gate {
		transpose(y, tp.ys[nt.Steps], n, rows)
		return
	}
	tp.rho = nt.rho()
	tp.outT = grow(tp.outT, cells)
	yT := tp.ys[nt.Steps]
	for c := range tp.outT {
		tp.outT[c] = yT[c] * (1 - tp.rho*xt[c])
	}
	transpose(y, tp.outT, n, rows)
}

// rho is the source gate sigmoid(b), 0 without it.
func (nt *net) rho() float64 {
	if nt.srcLogit == nil {
		return 0
	}
	return 1 / (1 + math.Exp(-nt.srcLogit.Value[0]))
}

// transpose writes the r x c row-major src into dst as c x r.
func transpose(dst, src []float64, r, c int) {
	for i := 0; i < r; i++ {
		row := src[i*c : (i+1)*c]
		for j, v := range row {
			dst[j*r+i] = v
		}
	}
}

// clamp01 is min(max(v, 0), 1) as comparisons: math.Max and math.Min are
// calls (they order signed zeros), and this runs once per cell.
func clamp01(v float64) float64 {
	if v < 0 {
		return 0
	}
	if v > 1 {
		return 1
	}
	return v
}

// backward takes dy = dL/df (row-major) for the last forward of w. With dx
// nil it accumulates the MLP's parameter gradients in w's MLP and returns
// dL/da for the edge scale (training), which the caller owns because
// workers share a; otherwise it writes dL/dx (row-major) into dx, leaves
// the parameter gradients alone and returns 0.
func (nt *net) backward(w *worker, dy, dx []float64) float64 {
	n, F, tp := nt.n, nt.features(), &w.tp
	rows := tp.rows
	cells := rows * n
	tp.g, tp.gp = grow(tp.g, cells), grow(tp.gp, cells)
	g, gp := tp.g, tp.gp
	transpose(g, dy, rows, n)
	var gScale float64
	training := dx == nil
	if nt.Gate {
		// Through f = y^T (1 - rho x): to y^T, to x directly, and to b.
		yT, xt := tp.ys[nt.Steps], tp.xt
		tp.gxe = grow(tp.gxe, cells)
		var gRho float64
		for c := range g {
			gRho -= g[c] * xt[c] * yT[c]
			tp.gxe[c] = -g[c] * tp.rho * yT[c]
			g[c] *= 1 - tp.rho*xt[c]
		}
		if training {
			w.gSrc += gRho * tp.rho * (1 - tp.rho)
		}
	}
	for t := nt.Steps; t >= 1; t-- {
		yp, pr := tp.ys[t-1], tp.prod[t-1]
		if nt.uniform {
			gScale += nt.stepBackUniform(tp, g, gp, yp, pr, training)
		} else {
			nt.stepBackWeighted(tp, g, gp, yp, pr, training, &gScale)
		}
		g, gp = gp, g
	}

	// g is now dL/dy⁰; y⁰ = 1 - (1-x)(1-q), clamped.
	xt := tp.xt
	if tp.dq == nil || tp.dq.RawMatrix().Rows != cells {
		tp.dq = mat.NewDense(cells, 1, nil)
	}
	dq := tp.dq.RawMatrix().Data
	// gx collects dL/dx node-major in gp, free again after the steps.
	gx := gp
	for c := 0; c < cells; c++ {
		raw := 1 - (1-xt[c])*(1-tp.q[c])
		if raw < 0 || raw > 1 {
			dq[c], gx[c] = 0, 0
			continue
		}
		dq[c] = g[c] * (1 - xt[c])
		gx[c] = g[c] * (1 - tp.q[c])
	}
	if dx == nil {
		w.mlp.Layers[0].SkipInputGrad(true)
		w.mlp.Backward(tp.dq)
		return gScale
	}
	fd := w.mlp.BackwardInput(tp.dq).RawMatrix().Data
	// Back through the hops: h_k = P0^T h_{k-1}, so dh_{k-1} = P0 dh_k plus
	// the feature column's own gradient.
	acc, nxt := tp.h1, tp.h2
	for c := 0; c < cells; c++ {
		acc[c] = fd[c*F+nt.Hops]
	}
	for k := nt.Hops; k >= 1; k-- {
		for c := 0; c < cells; c++ {
			nxt[c] = fd[c*F+k-1]
		}
		if nt.uniform {
			// dh_{k-1,u} += P0 sum_{u->v} dh_{k,v}, a gather over out-arcs.
			tp.blk = grow(tp.blk, rows)
			for u := 0; u < n; u++ {
				sumGather(tp.blk, acc, nt.outTo[nt.outOff[u]:nt.outOff[u+1]], rows)
				dst := nxt[u*rows : (u+1)*rows]
				for b, s := range tp.blk {
					dst[b] += nt.p0w[0] * s
				}
			}
			acc, nxt = nxt, acc
			continue
		}
		for v := 0; v < n; v++ {
			d := acc[v*rows : (v+1)*rows]
			for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
				dst := nxt[nt.inFrom[a]*rows:][:rows]
				wa := nt.p0w[a]
				for b, s := range d {
					dst[b] += wa * s
				}
			}
		}
		acc, nxt = nxt, acc
	}
	for c := 0; c < cells; c++ {
		gx[c] += acc[c]
	}
	if nt.Gate {
		for c := 0; c < cells; c++ {
			gx[c] += tp.gxe[c]
		}
	}
	transpose(dx, gx, n, rows)
	return 0
}

// stepBackUniform takes g = dL/dy^t for one propagation step of a uniform
// P, y^t_v = 1 - (1 - y^{t-1}_v) E_v with E_v = prod_{u->v} m_u and
// m_u = 1 - P y^{t-1}_u, and writes dL/dy^{t-1} into gp:
//
//	gp_u = g_u E_u - P/m_u sum_{u->v} h_v,   h_v = -g_v (1 - y^{t-1}_v) E_v,
//
// the sum a gather over u's out-arcs (0 where m_u is clamped). It returns
// the step's dL/da for the edge scale when training.
func (nt *net) stepBackUniform(tp *tape, g, gp, yp, pr []float64, training bool) float64 {
	rows, cells := tp.rows, len(g)
	tp.hv, tp.fac = grow(tp.hv, cells), grow(tp.fac, cells)
	tp.blk = grow(tp.blk, rows)
	hv, inv, sum := tp.hv, tp.fac, tp.blk
	p, scaled := tp.pe[0], training && tp.peOK[0]
	for c, yu := range yp {
		gv, e := g[c], pr[c]
		gp[c] = gv * e
		hv[c] = -gv * (1 - yu) * e
		// Past the clamp (P = 1, y_u = 1) the factor's derivative is the
		// one from inside [0, 1], where m > 0: E/m with m the clamped
		// value is still the product of the other factors.
		inv[c] = 1 / max(1-p*yu, minFactor)
	}
	var gScale float64
	for u := 0; u < nt.n; u++ {
		sumGather(sum, hv, nt.outTo[nt.outOff[u]:nt.outOff[u+1]], rows)
		o := u * rows
		for b, h := range sum {
			dm := h * inv[o+b]
			gp[o+b] -= dm * p
			if scaled {
				gScale -= dm * yp[o+b] * p
			}
		}
	}
	return gScale
}

// stepBackWeighted is stepBackUniform for a P per arc: each factor
// m_uv = 1 - P_uv y_u has its own value, so the arcs are walked from v.
func (nt *net) stepBackWeighted(tp *tape, g, gp, yp, pr []float64, training bool, gScale *float64) {
	rows := tp.rows
	tp.hv = grow(tp.hv, rows)
	hv := tp.hv
	clear(gp)
	for v := 0; v < nt.n; v++ {
		o := v * rows
		live := false
		for b := 0; b < rows; b++ {
			gv, e := g[o+b], pr[o+b]
			gp[o+b] += gv * e
			// dL/dm_uv = -g_v (1 - y_v) E_v / m_uv for each factor m_uv.
			hv[b] = -gv * (1 - yp[o+b]) * e
			live = live || hv[b] != 0
		}
		if !live {
			continue
		}
		for a := nt.inOff[v]; a < nt.inOff[v+1]; a++ {
			u := nt.inFrom[a] * rows
			p, ok := tp.pe[a], tp.peOK[a] && training
			src, dst := yp[u:u+rows], gp[u:u+rows]
			for b, yu := range src {
				if hv[b] == 0 {
					continue
				}
				// As in stepBackUniform, the clamped factor keeps the
				// derivative from inside [0, 1].
				dm := hv[b] / max(1-p*yu, minFactor)
				dst[b] -= dm * p
				if ok {
					*gScale -= dm * yu * p
				}
			}
		}
	}
}
