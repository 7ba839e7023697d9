package gat

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn/gnntest"
)

// fittedModel returns a Model configured with fittedState.
func fittedModel(t testing.TB, g *graph.Graph, arch Arch, seed uint64) *Model {
	t.Helper()
	m := New()
	require.NoError(t, m.Configure(context.Background(), g, nil, fittedState(t, g, arch, seed)))
	return m
}

// fittedState returns the state of a freshly initialised network, with its
// weights jittered so no parameter sits at a special value such as a zero
// bias.
func fittedState(t testing.TB, g *graph.Graph, arch Arch, seed uint64) []byte {
	t.Helper()
	net := newNetwork(g, arch, seed)
	gnntest.Jitter(net.params, rand.New(rand.NewPCG(seed, 3)))
	state, err := spec.EncodeState(net, g)
	require.NoError(t, err)
	return state
}

func TestVJPMatchesFiniteDifferences(t *testing.T) {
	for _, tt := range []struct {
		name               string
		directed, weighted bool
		arch               Arch
	}{
		{"undirected", false, false, Arch{Heads: 3, HeadDim: 2, Hops: 2}},
		{"directed weighted", true, true, Arch{Heads: 2, HeadDim: 3, Hops: 1}},
		{"no hops", false, true, Arch{Heads: 2, HeadDim: 2, Hops: 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			g := gnntest.RandomGraph(9, 20, tt.directed, tt.weighted, 7)
			m := fittedModel(t, g, tt.arch, 11)
			rng := rand.New(rand.NewPCG(5, 5))
			x := gnntest.RandomMatrix(3, g.N(), 0, 1, rng)
			dy := gnntest.RandomMatrix(3, g.N(), -1, 1, rng)
			y, dx, err := m.VJP(ctx, x, dy)
			require.NoError(t, err)
			py, err := m.Predict(ctx, x)
			require.NoError(t, err)
			require.True(t, mat.Equal(y, py), "VJP's y differs from Predict")

			xs := x.RawMatrix().Data
			loss := func() float64 {
				p, err := m.Predict(ctx, x)
				require.NoError(t, err)
				var s float64
				for i := 0; i < 3; i++ {
					for j := 0; j < g.N(); j++ {
						s += p.At(i, j) * dy.At(i, j)
					}
				}
				return s
			}
			rel, worst := nn.CheckGradient(loss, xs, dx.RawMatrix().Data, 1e-6)
			require.Less(t, rel, 1e-4, "worst entry %d", worst)
		})
	}
}

func TestLossGradientMatchesFiniteDifferences(t *testing.T) {
	g := gnntest.RandomGraph(10, 24, false, false, 3)
	net := newNetwork(g, Arch{Heads: 2, HeadDim: 3, Hops: 2}, 4)
	gnntest.CheckLossGradient[Arch](t, net, gnntest.SimulateSI(g, 4, 3, 0.4, 9), rand.New(rand.NewPCG(8, 8)))
}

// fitEpochs is enough for the network to close most of the gap between
// the references below on this small problem.
const fitEpochs = 15

func TestFitReducesValidationMSE(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(60, 150, false, false, 21)
	pairs := gnntest.SimulateSI(g, 160, 4, 0.3, 22)
	train, val := pairs[:120], pairs[120:]
	m := New()
	require.NoError(t, m.Configure(ctx, g, map[string]string{"heads": "4", "head_dim": "4"}, nil))
	var reports []forward.Progress
	res, err := m.Fit(ctx, train, forward.FitOptions{Epochs: fitEpochs, Seed: 1, Validation: val}, func(p forward.Progress) {
		reports = append(reports, p)
		t.Logf("epoch %d train %.4f val %.4f", p.Epoch, p.TrainLoss, p.ValLoss)
	})
	require.NoError(t, err)
	require.NotEmpty(t, reports)
	require.Equal(t, len(reports), int(res.Metrics["epochs"]))

	// Two references: the best constant guess for non-sources, which the
	// output bias starts from, and the empirical infection rate by hop
	// distance to the nearest source, learned on the training pairs. The
	// network must close most of the gap between them.
	c := gnn.BackgroundRate(train, g.N())
	byDist := map[int][2]float64{}
	for _, p := range train {
		y := gnntest.Indicator(g.N(), p.Infected, p.Sources)
		for v, d := range g.BFS(p.Sources, nil) {
			r := byDist[d]
			r[0] += y[v]
			r[1]++
			byDist[d] = r
		}
	}
	var constant, hops float64
	for _, p := range val {
		y := gnntest.Indicator(g.N(), p.Infected, p.Sources)
		for v, d := range g.BFS(p.Sources, nil) {
			pc := c
			if d == 0 {
				pc = 1
			}
			ph := byDist[d][0] / byDist[d][1]
			constant += (pc - y[v]) * (pc - y[v])
			hops += (ph - y[v]) * (ph - y[v])
		}
	}
	constant /= float64(len(val) * g.N())
	hops /= float64(len(val) * g.N())
	got := res.Metrics["val_mse"]
	t.Logf("val mse %.4f, constant %.4f, by hop distance %.4f", got, constant, hops)
	require.Less(t, hops, constant)
	require.Less(t, got, constant-0.6*(constant-hops))

	// The reported validation MSE is that of the model Fit leaves behind.
	x := mat.NewDense(len(val), g.N(), nil)
	for i, p := range val {
		for _, v := range p.Sources {
			x.Set(i, v, 1)
		}
	}
	y, err := m.Predict(ctx, x)
	require.NoError(t, err)
	var sum float64
	for i, p := range val {
		for j, o := range gnntest.Indicator(g.N(), p.Infected, p.Sources) {
			d := y.At(i, j) - o
			sum += d * d
		}
	}
	require.InDelta(t, got, sum/float64(len(val)*g.N()), 1e-9)
}

func TestStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(30, 60, false, false, 31)
	pairs := gnntest.SimulateSI(g, 20, 3, 0.3, 32)
	m := New()
	require.NoError(t, m.Configure(ctx, g, map[string]string{"heads": "2", "head_dim": "3", "hops": "1"}, nil))
	res, err := m.Fit(ctx, pairs, forward.FitOptions{Epochs: 2, Seed: 3}, nil)
	require.NoError(t, err)

	x := gnntest.RandomMatrix(4, g.N(), 0, 1, rand.New(rand.NewPCG(1, 1)))
	want, err := m.Predict(ctx, x)
	require.NoError(t, err)

	// Architecture comes from the state; repeating it is fine.
	m2 := New()
	require.NoError(t, m2.Configure(ctx, g, map[string]string{"heads": "2"}, res.State))
	got, err := m2.Predict(ctx, x)
	require.NoError(t, err)
	require.True(t, mat.Equal(want, got))

	// Fit is deterministic for a seed.
	m3 := New()
	require.NoError(t, m3.Configure(ctx, g, map[string]string{"heads": "2", "head_dim": "3", "hops": "1"}, nil))
	res3, err := m3.Fit(ctx, pairs, forward.FitOptions{Epochs: 2, Seed: 3}, nil)
	require.NoError(t, err)
	require.Equal(t, res.State, res3.State)
}

func TestConfigureRejectsBadState(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(12, 20, false, false, 41)
	other := gnntest.RandomGraph(12, 21, false, false, 42)
	net := newNetwork(g, DefaultArch(), 1)
	state, err := spec.EncodeState(net, g)
	require.NoError(t, err)
	flipped := append([]byte(nil), state...)
	flipped[len(flipped)-9] ^= 0x40

	for _, tt := range []struct {
		name  string
		g     *graph.Graph
		state []byte
		want  string
	}{
		{"other graph", other, state, "state made for graph"},
		{"not a state", g, []byte("hello"), "missing magic"},
		{"truncated", g, state[:len(state)-20], "bad forward model state"},
		{"corrupt weights", g, flipped, "bad forward model state"},
		{"truncated header", g, state[:len(spec.StateMagic())+6], "header length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := New().Configure(ctx, tt.g, nil, tt.state)
			require.ErrorIs(t, err, forward.ErrBadState)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(8, 12, false, false, 51)
	x := mat.NewDense(1, g.N(), nil)

	m := New()
	_, err := m.Predict(ctx, x)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	_, err = m.Fit(ctx, []forward.Pair{{Sources: []int{1}}}, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrNotConfigured)

	require.NoError(t, m.Configure(ctx, g, nil, nil))
	_, _, err = m.VJP(ctx, x, x)
	require.ErrorIs(t, err, forward.ErrNotFitted)

	for _, tt := range []struct {
		name   string
		params map[string]string
		want   string
	}{
		{"unknown", map[string]string{"layers": "3"}, `unknown param "layers"`},
		{"not a number", map[string]string{"heads": "many"}, `param heads="many": not an integer`},
		{"range", map[string]string{"head_dim": "0"}, "head_dim 0"},
		{"patience", map[string]string{"patience": "0"}, "patience=0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, New().Configure(ctx, g, tt.params, nil), tt.want)
		})
	}

	state, err := spec.EncodeState(newNetwork(g, Arch{Heads: 2, HeadDim: 2, Hops: 1}, 1), g)
	require.NoError(t, err)
	require.ErrorContains(t, m.Configure(ctx, g, map[string]string{"heads": "8"}, state), "param heads=8 disagrees")
	require.NoError(t, m.Configure(ctx, g, nil, state))

	_, err = m.Predict(ctx, mat.NewDense(1, g.N()+1, nil))
	require.ErrorContains(t, err, "x has 9 columns, graph has 8 nodes")
	bad := mat.NewDense(1, g.N(), nil)
	bad.Set(0, 3, math.NaN())
	_, err = m.Predict(ctx, bad)
	require.ErrorContains(t, err, "x row 0 node 3 is NaN")
	_, _, err = m.VJP(ctx, mat.NewDense(2, g.N(), nil), mat.NewDense(1, g.N(), nil))
	require.ErrorContains(t, err, "x has 2 rows, dy has 1")

	_, err = m.Fit(ctx, []forward.Pair{{Sources: []int{1}, Infected: []int{8}}}, forward.FitOptions{}, nil)
	require.ErrorContains(t, err, "training pair 0: infected node index 8 out of range")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Fit(cctx, []forward.Pair{{Sources: []int{1}}}, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSourcesAreInfected(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(15, 30, false, false, 61)
	m := fittedModel(t, g, DefaultArch(), 2)
	x := mat.NewDense(2, g.N(), nil)
	x.Set(0, 4, 1)
	x.Set(1, 7, 1)
	x.Set(1, 9, 1)
	y, err := m.Predict(ctx, x)
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		for j := 0; j < g.N(); j++ {
			require.True(t, y.At(i, j) > 0 && y.At(i, j) <= 1)
			if x.At(i, j) == 1 {
				require.Equal(t, 1.0, y.At(i, j), "source %d of row %d", j, i)
			}
		}
	}
}

// A batch larger than one pass's rows is split into chunks; each row's
// result must not depend on the batch it came in.
func TestChunkedBatchesMatchSingleRows(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(3000, 6000, false, false, 81)
	arch := DefaultArch()
	// Several chunks of several rows each, so both the boundaries and
	// the rows sharing a pass are covered.
	per := gnn.ChunkRows(g.N(), newNetwork(g, arch, 3).CacheFloats())
	require.Greater(t, per, 1)
	require.Less(t, per, 10)
	m := fittedModel(t, g, arch, 3)
	rng := rand.New(rand.NewPCG(9, 9))
	x, dy := gnntest.RandomMatrix(10, g.N(), 0, 1, rng), gnntest.RandomMatrix(10, g.N(), -1, 1, rng)
	y, dx, err := m.VJP(ctx, x, dy)
	require.NoError(t, err)
	for _, i := range []int{0, 9} {
		yi, dxi, err := m.VJP(ctx, mat.NewDense(1, g.N(), x.RawRowView(i)), mat.NewDense(1, g.N(), dy.RawRowView(i)))
		require.NoError(t, err)
		require.InDeltaSlice(t, yi.RawRowView(0), y.RawRowView(i), 1e-12)
		require.InDeltaSlice(t, dxi.RawRowView(0), dx.RawRowView(i), 1e-12)
	}
}

// CacheFloats is what a pass holds per node and row, measured over every
// buffer the network keeps.
func TestCacheFloats(t *testing.T) {
	for _, tt := range []struct {
		name     string
		directed bool
		arch     Arch
	}{
		{"narrowest", false, Arch{Heads: 1, HeadDim: 1, Hops: 0}},
		{"default", false, DefaultArch()},
		{"directed", true, Arch{Heads: 3, HeadDim: 5, Hops: 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gnntest.RandomGraph(12, 40, tt.directed, false, 91)
			gnntest.CheckCacheFloats[Arch](t, func() *network { return newNetwork(g, tt.arch, 1) })
		})
	}
}

// Every dimension of the architecture widens what a pass holds per node
// and row, so a pass takes fewer rows and stays within gnn.PassFloats.
func TestCacheFloatsGrowsWithWidth(t *testing.T) {
	g := gnntest.RandomGraph(4941, 6594, false, false, 93)
	for _, tt := range []struct {
		name  string
		archs []Arch
	}{
		{"heads", []Arch{{Heads: 1, HeadDim: 8, Hops: 2}, {Heads: 8, HeadDim: 8, Hops: 2}, {Heads: 64, HeadDim: 8, Hops: 2}}},
		{"head_dim", []Arch{{Heads: 8, HeadDim: 1, Hops: 2}, {Heads: 8, HeadDim: 8, Hops: 2}, {Heads: 8, HeadDim: 256, Hops: 2}}},
		{"hops", []Arch{{Heads: 8, HeadDim: 8, Hops: 0}, {Heads: 8, HeadDim: 8, Hops: 2}, {Heads: 8, HeadDim: 8, Hops: 16}}},
		{"widest", []Arch{{Heads: 1, HeadDim: 1, Hops: 0}, {Heads: 64, HeadDim: 256, Hops: 16}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gnntest.CheckWidening(t, tt.archs, func(a Arch) *network { return newNetwork(g, a, 1) })
		})
	}
}

// On a graph of Power Grid's size (4941 nodes, 6594 edges) the default
// architecture takes about as many rows per pass as under the earlier
// fixed bound of 2^14 node-rows, whatever the width: not fewer, which
// would cost speed (attention runs a pass's rows in parallel), nor many
// more, which would cost memory.
func TestChunkRowsAtDefaultArch(t *testing.T) {
	g := gnntest.RandomGraph(4941, 6594, false, false, 95)
	gnntest.CheckDefaultChunk[Arch](t, newNetwork(g, DefaultArch(), 1))
}

// An architecture whose single row would not fit gnn.MaxRowFloats on the
// configured graph is refused at Configure, naming it; the same
// architecture fits a small graph, and the default fits a large one.
func TestConfigureRefusesTooWideForGraph(t *testing.T) {
	gnntest.CheckRefusesTooWide(t, func() forward.Model { return New() }, map[string]string{"heads": "64", "head_dim": "256", "hops": "16"},
		"gat: configure: architecture {Heads:64 HeadDim:256 Hops:16}: one row of this 4941-node graph needs")
}
