package gat

import (
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// newAdjacency is the aggregation structure of the network: row v lists
// the nodes v hears from, v itself and its in-neighbours, with the arc
// weights (1 for the self-loop and for an unweighted graph).
func newAdjacency(g *graph.Graph) *gnn.Rows {
	return gnn.NewInRows(g,
		func(int) float64 { return 1 },
		func(_, _ int, w float64) float64 { return w })
}
