package monstor

import (
	"math/rand/v2"
	"testing"

	"github.com/sourcewatch/sourcewatch/forward"
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
