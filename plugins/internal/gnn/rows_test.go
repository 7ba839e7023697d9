package gnn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// TestRowsMatchTheirMatrix checks every product of Rows against the dense
// matrix it stands for, on a weighted directed graph with a node no arc
// reaches: row v holds W_vv first, then W_vu for each arc u -> v.
func TestRowsMatchTheirMatrix(t *testing.T) {
	edges := []graph.Edge{{From: 0, To: 1, W: 0.5}, {From: 1, To: 2, W: 2}, {From: 3, To: 2, W: 0.25}, {From: 2, To: 0, W: 1.5}, {From: 0, To: 2, W: 3}}
	g := graph.New(5, edges, nil, true, true)
	rows := gnn.NewInRows(g,
		func(v int) float64 { return float64(v + 1) },
		func(v, u int, w float64) float64 { return w * float64(10*v+u+1) })
	const n, batches, c = 5, 2, 3
	want := mat.NewDense(n, n, nil)
	for v := 0; v < n; v++ {
		want.Set(v, v, float64(v+1))
	}
	for _, e := range edges {
		want.Set(e.To, e.From, e.W*float64(10*e.To+e.From+1))
	}
	require.Equal(t, n+len(edges), rows.NNZ())
	for v := 0; v < n; v++ {
		require.Equal(t, v, rows.Src[rows.Off[v]], "row %d starts with its self-loop", v)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	src := mat.NewDense(batches*n, c, nil)
	for i := range batches * n {
		for j := range c {
			src.Set(i, j, rng.Float64()-0.5)
		}
	}
	for _, transpose := range []bool{false, true} {
		m := mat.Matrix(want)
		if transpose {
			m = want.T()
		}
		dense := mat.NewDense(batches*n, c, nil)
		if transpose {
			rows.PropagateDenseT(dense, src, batches)
		} else {
			rows.PropagateDense(dense, src, batches)
		}
		for b := range batches {
			var block mat.Dense
			block.Mul(m, src.Slice(b*n, (b+1)*n, 0, c))
			for j := range c {
				col := make([]float64, batches*n)
				got := make([]float64, batches*n)
				mat.Col(col, j, src)
				if transpose {
					rows.PropagateT(got, col, batches)
				} else {
					rows.Propagate(got, col, batches)
				}
				for v := range n {
					require.InDelta(t, block.At(v, j), dense.At(b*n+v, j), 1e-12, "dense transpose=%v batch %d node %d", transpose, b, v)
					require.InDelta(t, block.At(v, j), got[b*n+v], 1e-12, "vector transpose=%v batch %d node %d", transpose, b, v)
				}
			}
		}
	}
}
