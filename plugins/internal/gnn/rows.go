package gnn

import (
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// Rows is a node-by-node aggregation matrix W in compressed rows: row v
// lists the nodes v hears from, v itself first and then its
// in-neighbours, since infection travels along arcs u -> v. Entries
// Off[v]..Off[v+1]-1 of Src and W hold row v's columns and weights.
type Rows struct {
	N   int
	Off []int
	Src []int
	W   []float64
}

// NewInRows builds the rows of g with W_vv = self(v) and W_vu = arc(v, u,
// w_uv) for each arc u -> v, w_uv its weight (1 on an unweighted graph).
func NewInRows(g *graph.Graph, self func(v int) float64, arc func(v, u int, w float64) float64) *Rows {
	n := g.N()
	inOff, inFrom, inW := g.InCSR()
	r := &Rows{
		N:   n,
		Off: make([]int, n+1),
		Src: make([]int, 0, len(inFrom)+n),
		W:   make([]float64, 0, len(inFrom)+n),
	}
	for v := 0; v < n; v++ {
		r.Src = append(r.Src, v)
		r.W = append(r.W, self(v))
		for e := inOff[v]; e < inOff[v+1]; e++ {
			w := 1.0
			if g.Weighted() {
				w = inW[e]
			}
			r.Src = append(r.Src, inFrom[e])
			r.W = append(r.W, arc(v, inFrom[e], w))
		}
		r.Off[v+1] = len(r.Src)
	}
	return r
}

// NNZ returns the number of entries, arcs plus self-loops.
func (r *Rows) NNZ() int { return len(r.Src) }

// Propagate writes dst = W src for each of the batches vectors of length
// N stored back to back.
func (r *Rows) Propagate(dst, src []float64, batches int) {
	n := r.N
	for b := 0; b < batches; b++ {
		s, d := src[b*n:(b+1)*n], dst[b*n:(b+1)*n]
		for v := 0; v < n; v++ {
			var sum float64
			for e := r.Off[v]; e < r.Off[v+1]; e++ {
				sum += r.W[e] * s[r.Src[e]]
			}
			d[v] = sum
		}
	}
}

// PropagateT writes dst = W^T src, the adjoint of Propagate: each entry
// W_vu scatters src_v into dst_u.
func (r *Rows) PropagateT(dst, src []float64, batches int) {
	n := r.N
	clear(dst[:batches*n])
	for b := 0; b < batches; b++ {
		s, d := src[b*n:(b+1)*n], dst[b*n:(b+1)*n]
		for v := 0; v < n; v++ {
			g := s[v]
			if g == 0 {
				continue
			}
			for e := r.Off[v]; e < r.Off[v+1]; e++ {
				d[r.Src[e]] += r.W[e] * g
			}
		}
	}
}

// PropagateDense writes dst = W src for each of the batches blocks of N
// rows of the (batches N) x c matrices (rows of a block are nodes).
func (r *Rows) PropagateDense(dst, src *mat.Dense, batches int) {
	n := r.N
	d, s := dst.RawMatrix(), src.RawMatrix()
	c := d.Cols
	for b := 0; b < batches; b++ {
		for v := 0; v < n; v++ {
			row := d.Data[(b*n+v)*d.Stride : (b*n+v)*d.Stride+c]
			clear(row)
			for e := r.Off[v]; e < r.Off[v+1]; e++ {
				w := r.W[e]
				sr := s.Data[(b*n+r.Src[e])*s.Stride : (b*n+r.Src[e])*s.Stride+c]
				for j, x := range sr {
					row[j] += w * x
				}
			}
		}
	}
}

// PropagateDenseT writes dst = W^T src blockwise, the adjoint of
// PropagateDense: each entry W_vu scatters row v of src into row u of dst.
func (r *Rows) PropagateDenseT(dst, src *mat.Dense, batches int) {
	n := r.N
	d, s := dst.RawMatrix(), src.RawMatrix()
	c := d.Cols
	for i := 0; i < batches*n; i++ {
		clear(d.Data[i*d.Stride : i*d.Stride+c])
	}
	for b := 0; b < batches; b++ {
		for v := 0; v < n; v++ {
			sr := s.Data[(b*n+v)*s.Stride : (b*n+v)*s.Stride+c]
			for e := r.Off[v]; e < r.Off[v+1]; e++ {
				w := r.W[e]
				row := d.Data[(b*n+r.Src[e])*d.Stride : (b*n+r.Src[e])*d.Stride+c]
				for j, x := range sr {
					row[j] += w * x
				}
			}
		}
	}
}
