package gat

import (
	"github.com/sourcewatch/sourcewatch/graph"
)

// adjacency is the aggregation structure of the network: row v lists the
// nodes v hears from, its in-neighbours plus v itself (the self-loop comes
// first), with the arc weights (1 for the self-loop and for an unweighted
// graph). Infection travels along arcs u -> v, so v aggregates over In(v).
type adjacency struct {
	n   int
	off []int
	src []int
	w   []float64
}

func newAdjacency(g *graph.Graph) *adjacency {
	n := g.N()
	inOff, inFrom, inW := g.InCSR()
	a := &adjacency{
		n:   n,
		off: make([]int, n+1),
		src: make([]int, 0, len(inFrom)+n),
		w:   make([]float64, 0, len(inFrom)+n),
	}
	for v := 0; v < n; v++ {
		a.src = append(a.src, v)
		a.w = append(a.w, 1)
		for e := inOff[v]; e < inOff[v+1]; e++ {
			a.src = append(a.src, inFrom[e])
			if g.Weighted() {
				a.w = append(a.w, inW[e])
			} else {
				a.w = append(a.w, 1)
			}
		}
		a.off[v+1] = len(a.src)
	}
	return a
}

// nnz returns the number of entries, arcs plus self-loops.
func (a *adjacency) nnz() int { return len(a.src) }

// propagate writes dst_v = sum_{u in row v} w_vu src_u for each of the
// batches vectors of length n stored back to back.
func (a *adjacency) propagate(dst, src []float64, batches int) {
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

// propagateT writes dst = W^T src, the adjoint of propagate: each entry
// w_vu scatters src_v into dst_u.
func (a *adjacency) propagateT(dst, src []float64, batches int) {
	n := a.n
	clear(dst[:batches*n])
	for b := 0; b < batches; b++ {
		s, d := src[b*n:(b+1)*n], dst[b*n:(b+1)*n]
		for v := 0; v < n; v++ {
			g := s[v]
			if g == 0 {
				continue
			}
			for e := a.off[v]; e < a.off[v+1]; e++ {
				d[a.src[e]] += a.w[e] * g
			}
		}
	}
}
