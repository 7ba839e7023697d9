package prior

import (
	"fmt"
	"math"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// DefaultPrototypes is the number of prototypes Terms uses when asked for
// maxPrototypes <= 0.
const DefaultPrototypes = 1024

// minWeight is the softmax weight below which Pred's gradient skips a
// prototype; the skipped terms change the gradient by less than
// N * minWeight * max|D|, far below what the optimiser resolves.
const minWeight = 1e-15

// Terms holds the prior terms of inference (Algorithm 1), precomputed from a
// trained VAE. With l(z) the decoder's logits and d(z) = sigmoid(l(z)):
//
//	a = log d(z_bar),  b0 = log(1 - d(z_bar))          (mean latent z_bar)
//	D_j = l(z_j) = H_j W + b,  c_j = sum_i log(1 - d_i(z_j))  (prototypes)
//
// H_j is the decoder's last hidden layer at prototype z_j. Both methods take
// a batch x (one candidate per row, entries in [0,1]) and return one loss
// per row. Terms is safe for concurrent use.
type Terms struct {
	n, hidden, protos int

	h  *mat.Dense // protos x hidden
	ht *mat.Dense // h transposed: S = (X W^T) H^T as a NoTrans product is about twice as fast
	w  *mat.Dense // hidden x n: the decoder's output weights
	wt *mat.Dense // w transposed, for X W^T as a sum over the nonzeros of X
	b  []float64  // n: the decoder's output bias
	c  []float64  // protos

	barLogit []float64 // n: a - b0 = logit d(z_bar)
	sumB0    float64   // sum_i b0_i

	pool sync.Pool // *workspace
}

type workspace struct{ xw, s, ph []float64 }

// newTerms builds Terms from the decoder's last hidden layer h at the
// prototypes, its output layer (w, b) and the logits at the mean latent. It
// keeps h, w, b and barLogit.
func newTerms(h, w *mat.Dense, b, barLogit []float64) *Terms {
	protos, hidden := h.Dims()
	hw, n := w.Dims()
	if hw != hidden || len(b) != n || len(barLogit) != n || protos == 0 {
		panic(fmt.Sprintf("prior: terms shapes h %dx%d, w %dx%d, b %d, bar %d", protos, hidden, hw, n, len(b), len(barLogit)))
	}
	t := &Terms{n: n, hidden: hidden, protos: protos, h: h, w: w, b: b, barLogit: barLogit}
	t.c = make([]float64, protos)
	// c needs every logit once; a chunk of rows at a time bounds memory.
	const chunk = 64
	pre := mat.NewDense(min(chunk, protos), n, nil)
	for lo := 0; lo < protos; lo += chunk {
		hi := min(lo+chunk, protos)
		p := pre.Slice(0, hi-lo, 0, n).(*mat.Dense)
		p.Mul(h.Slice(lo, hi, 0, hidden), w)
		for j := lo; j < hi; j++ {
			row := p.RawRowView(j - lo)
			var s float64
			for i, v := range row {
				s += softplus(v + b[i])
			}
			t.c[j] = -s
		}
	}
	t.initDerived()
	return t
}

// initDerived computes what the encoding does not store.
func (t *Terms) initDerived() {
	t.ht = mat.DenseCopyOf(t.h.T())
	t.wt = mat.DenseCopyOf(t.w.T())
	t.sumB0 = 0
	for _, l := range t.barLogit {
		t.sumB0 -= softplus(l)
	}
}

// Nodes returns n, the length of x.
func (t *Terms) Nodes() int { return t.n }

// Prototypes returns N, the number of prototypes of Pred.
func (t *Terms) Prototypes() int { return t.protos }

// Hidden returns the width of the stored decoder layer.
func (t *Terms) Hidden() int { return t.hidden }

func (t *Terms) check(x, grad *mat.Dense) int {
	r, c := x.Dims()
	if c != t.n {
		panic(fmt.Sprintf("prior: x has %d columns, terms have %d nodes", c, t.n))
	}
	if grad != nil {
		if gr, gc := grad.Dims(); gr != r || gc != c {
			panic(fmt.Sprintf("prior: grad is %dx%d, x is %dx%d", gr, gc, r, c))
		}
	}
	return r
}

// Init returns, per row of x, the negative log-likelihood at the mean latent
//
//	L_init(x) = -sum_i [x_i a_i + (1 - x_i) b0_i]
//
// and writes dL/dx = -(a - b0) into grad (skipped when grad is nil).
func (t *Terms) Init(x, grad *mat.Dense) []float64 {
	rows := t.check(x, grad)
	loss := make([]float64, rows)
	xr := x.RawMatrix()
	for r := range rows {
		var s float64
		for i, v := range xr.Data[r*xr.Stride : r*xr.Stride+t.n] {
			s += v * t.barLogit[i]
		}
		loss[r] = -(s + t.sumB0)
		if grad != nil {
			g := grad.RawRowView(r)
			for i, l := range t.barLogit {
				g[i] = -l
			}
		}
	}
	return loss
}

// Pred returns, per row of x, the negative log of the prototype mixture
//
//	L_pred(x) = -logsumexp_j (D x + c)_j
//
// and writes dL/dx = -D^T softmax(D x + c) into grad (skipped when grad is
// nil). With D = H W + 1 b^T the batch costs three matrix products and a
// sparse one: S = (X W^T) H^T, P = softmax(S) by rows, and
// grad = -((P H) W + (P 1) b^T), where P H sums only the prototypes with a
// weight of at least 1e-15.
func (t *Terms) Pred(x, grad *mat.Dense) []float64 {
	rows := t.check(x, grad)
	loss := make([]float64, rows)
	if rows == 0 {
		return loss
	}
	ws := t.get(rows)
	defer t.pool.Put(ws)

	xr := x.RawMatrix()
	xw := blas64.General{Rows: rows, Cols: t.hidden, Stride: t.hidden, Data: ws.xw}
	s := blas64.General{Rows: rows, Cols: t.protos, Stride: t.protos, Data: ws.s}
	h, w := t.h.RawMatrix(), t.w.RawMatrix()
	// Clamping to [0, 1] leaves many restarts' entries at exactly 0, and
	// then X W^T is cheaper as a sum of rows of W^T over the nonzeros.
	nnz := 0
	for r := range rows {
		for _, v := range xr.Data[r*xr.Stride : r*xr.Stride+t.n] {
			if v != 0 {
				nnz++
			}
		}
	}
	if 2*nnz < rows*t.n {
		wt := t.wt.RawMatrix()
		for r := range rows {
			dst := ws.xw[r*t.hidden : (r+1)*t.hidden]
			clear(dst)
			for i, v := range xr.Data[r*xr.Stride : r*xr.Stride+t.n] {
				if v != 0 {
					floats.AddScaled(dst, v, wt.Data[i*wt.Stride:i*wt.Stride+t.hidden])
				}
			}
		}
	} else {
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, xr, w, 0, xw)
	}
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, xw, t.ht.RawMatrix(), 0, s)

	psum := ws.xw[:rows] // xw is no longer needed; reuse for sum_j P_rj
	for r := range rows {
		xrow := xr.Data[r*xr.Stride : r*xr.Stride+t.n]
		var xb float64
		for i, v := range xrow {
			xb += v * t.b[i]
		}
		srow := s.Data[r*t.protos : (r+1)*t.protos]
		m := math.Inf(-1)
		for j := range srow {
			srow[j] += xb + t.c[j]
			if srow[j] > m {
				m = srow[j]
			}
		}
		var e float64
		for j, v := range srow {
			srow[j] = math.Exp(v - m)
			e += srow[j]
		}
		loss[r] = -(m + math.Log(e))
		if grad == nil {
			continue
		}
		// P H by rows, skipping negligible weights: softmax over
		// log-likelihoods is usually peaked on a few prototypes, and the
		// skipped mass (< N * minWeight) cannot move the gradient.
		ph := ws.ph[r*t.hidden : (r+1)*t.hidden]
		clear(ph)
		var ps float64
		for j, v := range srow {
			if p := v / e; p >= minWeight {
				floats.AddScaled(ph, p, h.Data[j*h.Stride:j*h.Stride+t.hidden])
				ps += p
			}
		}
		psum[r] = ps
	}
	if grad == nil {
		return loss
	}
	ph := blas64.General{Rows: rows, Cols: t.hidden, Stride: t.hidden, Data: ws.ph}
	gr := grad.RawMatrix()
	blas64.Gemm(blas.NoTrans, blas.NoTrans, -1, ph, w, 0, gr)
	for r := range rows {
		g := gr.Data[r*gr.Stride : r*gr.Stride+t.n]
		for i, v := range t.b {
			g[i] -= psum[r] * v
		}
	}
	return loss
}

func (t *Terms) get(rows int) *workspace {
	ws, _ := t.pool.Get().(*workspace)
	if ws == nil {
		ws = &workspace{}
	}
	ws.xw = grow(ws.xw, rows*t.hidden)
	ws.s = grow(ws.s, rows*t.protos)
	ws.ph = grow(ws.ph, rows*t.hidden)
	return ws
}

func grow(v []float64, k int) []float64 {
	if cap(v) < k {
		return make([]float64, k)
	}
	return v[:k]
}

const termsMagic, termsVersion = "SWPT", 1

// MarshalBinary encodes the terms (sizes, H, W, b, c and the mean-latent
// logits) with a format version and a CRC-32.
func (t *Terms) MarshalBinary() ([]byte, error) {
	w := newWriter(termsMagic, termsVersion)
	w.u64(uint64(t.n))
	w.u64(uint64(t.hidden))
	w.u64(uint64(t.protos))
	w.floats(t.h.RawMatrix().Data)
	w.floats(t.w.RawMatrix().Data)
	w.floats(t.b)
	w.floats(t.c)
	w.floats(t.barLogit)
	return w.finish(), nil
}

// TermsBytes is the size of what MarshalBinary writes for the terms of n
// nodes, hidden width hidden and protos prototypes: a caller can tell
// before fitting whether they will fit where they are to be stored.
func TermsBytes(n, hidden, protos int) uint64 {
	return uint64(len(termsMagic)+4+24+4) + 8*(uint64(protos)*uint64(hidden)+uint64(hidden)*uint64(n)+uint64(n)+uint64(protos)+uint64(n))
}

// maxDim bounds decoded sizes so corrupt headers cannot ask for huge
// allocations before the length check.
const maxDim = 1 << 24

// UnmarshalBinary decodes what MarshalBinary wrote, checking the magic,
// version, checksum, sizes and that every value is finite.
func (t *Terms) UnmarshalBinary(data []byte) error {
	r, err := newReader("terms", data, termsMagic, termsVersion)
	if err != nil {
		return err
	}
	n := r.size("nodes", 1, maxDim)
	hidden := r.size("hidden", 1, maxDim)
	protos := r.size("prototypes", 1, maxDim)
	if r.err == nil && uint64(len(data)) != TermsBytes(n, hidden, protos) {
		r.fail("length %d does not match sizes n=%d hidden=%d prototypes=%d", len(data), n, hidden, protos)
	}
	h := r.floats(protos*hidden, "H")
	wv := r.floats(hidden*n, "W")
	b := r.floats(n, "b")
	c := r.floats(protos, "c")
	bar := r.floats(n, "mean-latent logits")
	if err := r.done(); err != nil {
		return err
	}
	*t = Terms{
		n: n, hidden: hidden, protos: protos,
		h: mat.NewDense(protos, hidden, h), w: mat.NewDense(hidden, n, wv),
		b: b, c: c, barLogit: bar,
	}
	t.initDerived()
	return nil
}

// softplus is log(1 + e^v), computed without overflow.
func softplus(v float64) float64 {
	if v > 0 {
		return v + math.Log1p(math.Exp(-v))
	}
	return math.Log1p(math.Exp(v))
}
