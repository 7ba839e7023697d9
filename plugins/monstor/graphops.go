package monstor

import (
	"math"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// newAdjacency is the normalised propagation matrix of the GCN,
//
//	Â = D_in^-1/2 (A + I) D_out^-1/2,   Â_vu = w_uv / sqrt(din_v dout_u)
//
// with din_v = 1 + sum of v's in-arc weights and dout_u = 1 + sum of u's
// out-arc weights (w = 1 on an unweighted graph and on the self-loop). On
// an undirected graph both degrees agree and Â = D^-1/2 (A + I) D^-1/2.
func newAdjacency(g *graph.Graph) *gnn.Rows {
	n := g.N()
	inOff, inFrom, inW := g.InCSR()
	din, dout := make([]float64, n), make([]float64, n)
	for v := 0; v < n; v++ {
		din[v], dout[v] = 1, 1
	}
	for v := 0; v < n; v++ {
		for e := inOff[v]; e < inOff[v+1]; e++ {
			w := 1.0
			if g.Weighted() {
				w = inW[e]
			}
			din[v] += w
			dout[inFrom[e]] += w
		}
	}
	return gnn.NewInRows(g,
		func(v int) float64 { return 1 / math.Sqrt(din[v]*dout[v]) },
		func(v, u int, w float64) float64 { return w / math.Sqrt(din[v]*dout[u]) })
}
