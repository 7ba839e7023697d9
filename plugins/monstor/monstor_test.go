package monstor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn/gnntest"
)

var suite = gnntest.Suite[Arch, *network]{
	New:  func() forward.Model { return New() },
	Spec: spec,
}

func TestVJPMatchesFiniteDifferences(t *testing.T) {
	suite.CheckVJP(t, []gnntest.VJPCase[Arch]{
		{Name: "undirected", Arch: Arch{Stacks: 3, Hidden: 4}},
		{Name: "directed weighted", Directed: true, Weighted: true, Arch: Arch{Stacks: 2, Hidden: 5}},
		{Name: "one stack", Weighted: true, Arch: Arch{Stacks: 1, Hidden: 3}},
	})
}

func TestLossGradientMatchesFiniteDifferences(t *testing.T) {
	g := gnntest.RandomGraph(10, 24, false, false, 3)
	net := newNetwork(g, Arch{Stacks: 3, Hidden: 4}, 4)
	gnntest.CheckLossGradient[Arch](t, net, gnntest.SimulateSI(g, 4, 3, 0.4, 9), rand.New(rand.NewPCG(8, 8)))
}

// 20 epochs are enough for the network to close most of the gap
// between the check's references on its small problem.
func TestFitReducesValidationMSE(t *testing.T) {
	suite.CheckFitReducesValidationMSE(t, map[string]string{"hidden": "16"}, 20)
}

func TestStateRoundTrip(t *testing.T) {
	suite.CheckStateRoundTrip(t, map[string]string{"stacks": "2", "hidden": "6"}, map[string]string{"stacks": "2"})
}

func TestConfigureRejectsBadState(t *testing.T) { suite.CheckConfigureRejectsBadState(t) }

func TestErrors(t *testing.T) {
	suite.CheckErrors(t, []gnntest.ParamCase{
		{Name: "not a number", Params: map[string]string{"stacks": "many"}, Want: `param stacks="many": not an integer`},
		{Name: "range", Params: map[string]string{"hidden": "0"}, Want: "hidden 0"},
		{Name: "stacks 0", Params: map[string]string{"stacks": "0"}, Want: "stacks 0: want 1..16"},
		{Name: "stacks 17", Params: map[string]string{"stacks": "17"}, Want: "stacks 17: want 1..16"},
		{Name: "hidden 1025", Params: map[string]string{"hidden": "1025"}, Want: "hidden 1025: want 1..1024"},
	}, Arch{Stacks: 2, Hidden: 3}, map[string]string{"stacks": "3"}, "param stacks=3 disagrees")
}

func TestSourcesAreInfected(t *testing.T) { suite.CheckSourcesAreInfected(t) }

func TestChunkedBatchesMatchSingleRows(t *testing.T) {
	suite.CheckChunkedBatchesMatchSingleRows(t, Arch{Stacks: 3, Hidden: 64})
}

// CacheFloats is what a pass holds per node and row, measured over every
// buffer the network keeps.
func TestCacheFloats(t *testing.T) {
	for _, tt := range []struct {
		name     string
		directed bool
		arch     Arch
	}{
		{"narrowest", false, Arch{Stacks: 1, Hidden: 1}},
		{"default", false, DefaultArch()},
		{"directed", true, Arch{Stacks: 2, Hidden: 7}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gnntest.RandomGraph(12, 40, tt.directed, false, 91)
			gnntest.CheckCacheFloats[Arch](t, func() *network { return newNetwork(g, tt.arch, 1) })
		})
	}
}

// Both dimensions of the architecture widen what a pass holds per node
// and row, so a pass takes fewer rows and stays within gnn.PassFloats.
func TestCacheFloatsGrowsWithWidth(t *testing.T) {
	g := gnntest.RandomGraph(4941, 6594, false, false, 93)
	for _, tt := range []struct {
		name  string
		archs []Arch
	}{
		{"hidden", []Arch{{Stacks: 3, Hidden: 1}, {Stacks: 3, Hidden: 32}, {Stacks: 3, Hidden: 1024}}},
		{"stacks", []Arch{{Stacks: 1, Hidden: 32}, {Stacks: 3, Hidden: 32}, {Stacks: 16, Hidden: 32}}},
		{"widest", []Arch{{Stacks: 1, Hidden: 1}, {Stacks: 16, Hidden: 1024}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gnntest.CheckWidening(t, tt.archs, func(a Arch) *network { return newNetwork(g, a, 1) })
		})
	}
}

// On a graph of Power Grid's size (4941 nodes, 6594 edges) the default
// architecture takes about as many rows per pass as under the earlier
// fixed bound of 2^14 node-rows, whatever the width: not fewer, which
// would cost speed, nor many more, which would cost memory.
func TestChunkRowsAtDefaultArch(t *testing.T) {
	g := gnntest.RandomGraph(4941, 6594, false, false, 95)
	gnntest.CheckDefaultChunk[Arch](t, newNetwork(g, DefaultArch(), 1))
}

// An architecture whose single row would not fit gnn.MaxRowFloats on the
// configured graph is refused at Configure, naming it; the same
// architecture fits a small graph, and the default fits a large one.
func TestConfigureRefusesTooWideForGraph(t *testing.T) {
	gnntest.CheckRefusesTooWide(t, func() forward.Model { return New() }, map[string]string{"stacks": "16", "hidden": "1024"},
		"monstor: configure: architecture {Stacks:16 Hidden:1024}: one row of this 4941-node graph needs 65924 floats per node")
}

// The propagation matrix is Â_vu = w_uv / sqrt(din_v dout_u) with the
// self-loop counted in both degrees (a mutation audit: the degrees, the
// weights and the normalisation could all change and the finite-
// difference checks pass, since they hold the network to its own
// definition). On 0->1 (0.5), 1->2 (2), 0->2 (1), by hand: din = 1, 1.5,
// 4 and dout = 2.5, 3, 1.
func TestAdjacencyByHand(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1, W: 0.5}, {From: 1, To: 2, W: 2}, {From: 0, To: 2, W: 1}}, nil, true, true)
	want := map[[2]int]float64{
		{0, 0}: 1 / math.Sqrt(2.5), {1, 1}: 1 / math.Sqrt(4.5), {2, 2}: 1 / math.Sqrt(4),
		{1, 0}: 0.5 / math.Sqrt(1.5*2.5), {2, 1}: 2 / math.Sqrt(4*3), {2, 0}: 1 / math.Sqrt(4*2.5),
	}
	rows := newAdjacency(g)
	got := map[[2]int]float64{}
	for v := 0; v < 3; v++ {
		for e := rows.Off[v]; e < rows.Off[v+1]; e++ {
			got[[2]int{v, rows.Src[e]}] = rows.W[e]
		}
	}
	require.Len(t, got, len(want))
	for k, w := range want {
		require.InDelta(t, w, got[k], 1e-15, "Â[%d][%d]", k[0], k[1])
	}
	// Unweighted, the arcs count 1 each: a path 0-1 undirected has
	// degrees 2, 2 and every entry 1/2.
	rows = newAdjacency(graph.New(2, []graph.Edge{{From: 0, To: 1, W: 7}}, nil, false, false))
	for _, w := range rows.W {
		require.InDelta(t, 0.5, w, 1e-15)
	}
}

// Each block's input row is [x, the previous block's estimate (x for the
// first), log(1 + in-degree)], and the output is 1 - (1 - x)(1 - q) (a
// mutation audit: feeding x twice or dropping the degree passed).
func TestBlockInputs(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 0, To: 2}, {From: 1, To: 2}}, nil, true, false)
	net := newNetwork(g, Arch{Stacks: 2, Hidden: 3}, 5)
	gnntest.Jitter(net.Params(), rand.New(rand.NewPCG(6, 6)))
	x := mat.NewDense(2, 3, []float64{1, 0, 0, 0, 0.5, 0})
	y := mat.DenseCopyOf(net.Forward(x))
	deg := []float64{0, math.Log(2), math.Log(3)} // in-degrees 0, 1, 2
	first := net.blocks[0].p.RawMatrix().Data
	for _, tc := range []struct {
		b    *block
		prev func(r int) float64
	}{
		{net.blocks[0], func(r int) float64 { return x.RawMatrix().Data[r] }},
		{net.blocks[1], func(r int) float64 { return first[r] }},
	} {
		for r := 0; r < 6; r++ {
			require.Equal(t, []float64{x.RawMatrix().Data[r], tc.prev(r), deg[r%3]}, tc.b.h0.RawRowView(r), "row %d", r)
		}
	}
	for r := 0; r < 6; r++ {
		xv, q := x.RawMatrix().Data[r], net.blocks[1].q[r]
		require.InDelta(t, 1-(1-xv)*(1-q), y.At(r/3, r%3), 1e-15)
	}
	require.NotEqual(t, first, y.RawMatrix().Data, "the blocks differ, so the second's input is not the first's")
}

// SetOutputBias makes the untrained network predict p: with the output
// layer's weights at zero every block's q is sigmoid(b2) = p exactly, and
// p is held within [1e-3, 1 - 1e-3] (a mutation audit: a bias of log p
// instead of the logit passed every test).
func TestSetOutputBias(t *testing.T) {
	g := gnntest.RandomGraph(8, 12, false, false, 71)
	gnntest.CheckOutputBias(t, func() *network { return newNetwork(g, Arch{Stacks: 2, Hidden: 3}, 3) }, func(net *network) {
		for _, b := range net.blocks {
			clear(b.w2)
			clear(b.ws)
		}
	})
}

// The ends of the architecture's ranges are taken, one past them refused
// in TestErrors (a mutation audit: moving an upper bound by one passed).
func TestArchRangeEnds(t *testing.T) {
	g := gnntest.RandomGraph(8, 12, false, false, 51)
	for _, params := range []map[string]string{{"stacks": "1"}, {"stacks": "16"}, {"hidden": "1"}, {"hidden": "1024"}} {
		require.NoError(t, New().Configure(t.Context(), g, params, nil), "%v", params)
	}
}
