package monstor

import (
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// adjacency is the normalised propagation matrix of the GCN,
//
//	Â = D_in^-1/2 (A + I) D_out^-1/2,   Â_vu = w_uv / sqrt(din_v dout_u)
//
// with din_v = 1 + sum of v's in-arc weights and dout_u = 1 + sum of u's
// out-arc weights (w = 1 on an unweighted graph and on the self-loop). On
// an undirected graph both degrees agree and Â = D^-1/2 (A + I) D^-1/2.
// Row v lists v itself first, then its in-neighbours, since infection
// travels along arcs u -> v.
type adjacency struct {
	n   int
	off []int
	src []int
	w   []float64
}

func newAdjacency(g *graph.Graph) *adjacency {
	n := g.N()
	inOff, inFrom, inW := g.InCSR()
	weight := func(w float64) float64 {
		if g.Weighted() {
			return w
		}
		return 1
	}
	din, dout := make([]float64, n), make([]float64, n)
	for v := 0; v < n; v++ {
		din[v], dout[v] = 1, 1
	}
	for v := 0; v < n; v++ {
		for e := inOff[v]; e < inOff[v+1]; e++ {
			w := weight(inW[e])
			din[v] += w
			dout[inFrom[e]] += w
		}
	}
	a := &adjacency{
		n:   n,
		off: make([]int, n+1),
		src: make([]int, 0, len(inFrom)+n),
		w:   make([]float64, 0, len(inFrom)+n),
	}
	for v := 0; v < n; v++ {
		a.src = append(a.src, v)
		a.w = append(a.w, 1/math.Sqrt(din[v]*dout[v]))
		for e := inOff[v]; e < inOff[v+1]; e++ {
			u := inFrom[e]
			a.src = append(a.src, u)
			a.w = append(a.w, weight(inW[e])/math.Sqrt(din[v]*dout[u]))
		}
		a.off[v+1] = len(a.src)
	}
	return a
}

// propagate writes dst = Â src for each of the batches blocks of n rows of
// the (batches n) x c matrices (rows of a block are nodes).
func (a *adjacency) propagate(dst, src *mat.Dense, batches int) {
	n := a.n
	d, s := dst.RawMatrix(), src.RawMatrix()
	c := d.Cols
	for b := 0; b < batches; b++ {
		for v := 0; v < n; v++ {
			row := d.Data[(b*n+v)*d.Stride : (b*n+v)*d.Stride+c]
			clear(row)
			for e := a.off[v]; e < a.off[v+1]; e++ {
				w := a.w[e]
				sr := s.Data[(b*n+a.src[e])*s.Stride : (b*n+a.src[e])*s.Stride+c]
				for j, x := range sr {
					row[j] += w * x
				}
			}
		}
	}
}

// propagateT writes dst = Â^T src blockwise, the adjoint of propagate:
// each entry Â_vu scatters row v of src into row u of dst.
func (a *adjacency) propagateT(dst, src *mat.Dense, batches int) {
	n := a.n
	d, s := dst.RawMatrix(), src.RawMatrix()
	c := d.Cols
	for r := 0; r < batches*n; r++ {
		clear(d.Data[r*d.Stride : r*d.Stride+c])
	}
	for b := 0; b < batches; b++ {
		for v := 0; v < n; v++ {
			sr := s.Data[(b*n+v)*s.Stride : (b*n+v)*s.Stride+c]
			for e := a.off[v]; e < a.off[v+1]; e++ {
				w := a.w[e]
				row := d.Data[(b*n+a.src[e])*d.Stride : (b*n+a.src[e])*d.Stride+c]
				for j, x := range sr {
					row[j] += w * x
				}
			}
		}
	}
}

// propagateVec writes dst = Â src for each of the batches vectors of
// length n stored back to back.
func (a *adjacency) propagateVec(dst, src []float64, batches int) {
	n := a.n
	for b := 0; b < batches; b++ {
		s, d := src[b*n:(b+1)*n], dst[b*n:(b+1)*n]
		for v := 0; v < n; v++ {
			var sum float64
			for e := a.off[v]; e < a.off[v+1]; e++ {
				sum += a.w[e] * s[a.src[e]]
			}
			d[v] = sum
		}
	}
}

// propagateVecT writes dst = Â^T src, the adjoint of propagateVec.
func (a *adjacency) propagateVecT(dst, src []float64, batches int) {
	n := a.n
	clear(dst[:batches*n])
	for b := 0; b < batches; b++ {
		s, d := src[b*n:(b+1)*n], dst[b*n:(b+1)*n]
		for v := 0; v < n; v++ {
			g := s[v]
			for e := a.off[v]; e < a.off[v+1]; e++ {
				d[a.src[e]] += a.w[e] * g
			}
		}
	}
}
