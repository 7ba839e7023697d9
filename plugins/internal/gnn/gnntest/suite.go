package gnntest

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// Suite holds the tests every model built on gnn must pass: each model's
// test file calls them with its own architectures and parameters, so the
// models are held to one contract and a fix to a test reaches all of them.
type Suite[A gnn.Arch, N gnn.Network[A]] struct {
	// New returns an unconfigured model, as the plugin's main serves it.
	New  func() forward.Model
	Spec *gnn.Spec[A, N]
}

// FittedState returns the state of a freshly initialised network, with
// its weights jittered so no parameter sits at a special value such as a
// zero bias.
func (s Suite[A, N]) FittedState(t testing.TB, g *graph.Graph, arch A, seed uint64) []byte {
	t.Helper()
	net := s.Spec.NewNetwork(g, arch, seed)
	Jitter(net.Params(), rand.New(rand.NewPCG(seed, 3)))
	state, err := s.Spec.EncodeState(net, g)
	require.NoError(t, err)
	return state
}

// FittedModel returns a model configured with FittedState.
func (s Suite[A, N]) FittedModel(t testing.TB, g *graph.Graph, arch A, seed uint64) forward.Model {
	t.Helper()
	m := s.New()
	require.NoError(t, m.Configure(context.Background(), g, nil, s.FittedState(t, g, arch, seed)))
	return m
}

// VJPCase is one graph and architecture of CheckVJP.
type VJPCase[A gnn.Arch] struct {
	Name               string
	Directed, Weighted bool
	Arch               A
}

// CheckVJP compares the model's VJP with central differences of
// sum(dy ∘ f(x)), and its y with Predict's, for each case.
func (s Suite[A, N]) CheckVJP(t *testing.T, cases []VJPCase[A]) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			ctx := context.Background()
			g := RandomGraph(9, 20, tt.Directed, tt.Weighted, 7)
			m := s.FittedModel(t, g, tt.Arch, 11)
			rng := rand.New(rand.NewPCG(5, 5))
			x := RandomMatrix(3, g.N(), 0, 1, rng)
			dy := RandomMatrix(3, g.N(), -1, 1, rng)
			y, dx, err := m.VJP(ctx, x, dy)
			require.NoError(t, err)
			py, err := m.Predict(ctx, x)
			require.NoError(t, err)
			require.True(t, mat.Equal(y, py), "VJP's y differs from Predict")

			loss := func() float64 {
				p, err := m.Predict(ctx, x)
				require.NoError(t, err)
				var sum float64
				for i := 0; i < 3; i++ {
					for j := 0; j < g.N(); j++ {
						sum += p.At(i, j) * dy.At(i, j)
					}
				}
				return sum
			}
			rel, worst := nn.CheckGradient(loss, x.RawMatrix().Data, dx.RawMatrix().Data, 1e-6)
			require.Less(t, rel, 1e-4, "worst entry %d", worst)
		})
	}
}

// CheckFitReducesValidationMSE fits a network of params for epochs on SI cascades
// of a 60-node graph and requires the validation error to close most of
// the gap between two references: the best constant guess for
// non-sources, which the output bias starts from, and the empirical
// infection rate by hop distance to the nearest source, learned on the
// training pairs. The reported validation error must be that of the model
// Fit leaves behind.
func (s Suite[A, N]) CheckFitReducesValidationMSE(t *testing.T, params map[string]string, epochs int) {
	ctx := context.Background()
	g := RandomGraph(60, 150, false, false, 21)
	pairs := SimulateSI(g, 160, 4, 0.3, 22)
	train, val := pairs[:120], pairs[120:]
	m := s.New()
	require.NoError(t, m.Configure(ctx, g, params, nil))
	var reports []forward.Progress
	res, err := m.Fit(ctx, train, forward.FitOptions{Epochs: epochs, Seed: 1, Validation: val}, func(p forward.Progress) {
		reports = append(reports, p)
		t.Logf("epoch %d train %.4f val %.4f", p.Epoch, p.TrainLoss, p.ValLoss)
	})
	require.NoError(t, err)
	require.NotEmpty(t, reports)
	require.Equal(t, len(reports), int(res.Metrics["epochs"]))

	c := gnn.BackgroundRate(train, g.N())
	byDist := map[int][2]float64{}
	for _, p := range train {
		y := Indicator(g.N(), p.Infected, p.Sources)
		for v, d := range g.BFS(p.Sources, nil) {
			r := byDist[d]
			r[0] += y[v]
			r[1]++
			byDist[d] = r
		}
	}
	var constant, hops float64
	for _, p := range val {
		y := Indicator(g.N(), p.Infected, p.Sources)
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
		for j, o := range Indicator(g.N(), p.Infected, p.Sources) {
			d := y.At(i, j) - o
			sum += d * d
		}
	}
	require.InDelta(t, got, sum/float64(len(val)*g.N()), 1e-9)
}

// CheckStateRoundTrip requires the state of a network of params, fitted,
// to configure a model that predicts exactly as the fitted one, with
// repeat (a subset of params:
// the architecture comes from the state, and repeating it is fine), and
// Fit to be deterministic for a seed.
func (s Suite[A, N]) CheckStateRoundTrip(t *testing.T, params, repeat map[string]string) {
	ctx := context.Background()
	g := RandomGraph(30, 60, false, false, 31)
	pairs := SimulateSI(g, 20, 3, 0.3, 32)
	m := s.New()
	require.NoError(t, m.Configure(ctx, g, params, nil))
	res, err := m.Fit(ctx, pairs, forward.FitOptions{Epochs: 2, Seed: 3}, nil)
	require.NoError(t, err)

	x := RandomMatrix(4, g.N(), 0, 1, rand.New(rand.NewPCG(1, 1)))
	want, err := m.Predict(ctx, x)
	require.NoError(t, err)

	m2 := s.New()
	require.NoError(t, m2.Configure(ctx, g, repeat, res.State))
	got, err := m2.Predict(ctx, x)
	require.NoError(t, err)
	require.True(t, mat.Equal(want, got))

	m3 := s.New()
	require.NoError(t, m3.Configure(ctx, g, params, nil))
	res3, err := m3.Fit(ctx, pairs, forward.FitOptions{Epochs: 2, Seed: 3}, nil)
	require.NoError(t, err)
	require.Equal(t, res.State, res3.State)
}

// CheckConfigureRejectsBadState requires a state of another graph, a blob
// that is no state, a truncated one and one with a flipped weight bit to
// be refused with forward.ErrBadState, each naming what is wrong.
func (s Suite[A, N]) CheckConfigureRejectsBadState(t *testing.T) {
	ctx := context.Background()
	g := RandomGraph(12, 20, false, false, 41)
	other := RandomGraph(12, 21, false, false, 42)
	state, err := s.Spec.EncodeState(s.Spec.NewNetwork(g, s.Spec.DefaultArch(), 1), g)
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
		{"truncated header", g, state[:len(s.Spec.StateMagic())+6], "header length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := s.New().Configure(ctx, tt.g, nil, tt.state)
			require.ErrorIs(t, err, forward.ErrBadState)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// ParamCase is a Configure that must fail with an error containing Want.
type ParamCase struct {
	Name   string
	Params map[string]string
	Want   string
}

// CheckErrors requires the model to refuse calls out of order, bad
// params (the model's own cases besides an unknown name and a bad
// patience), a param that disagrees with a state of arch (disagree,
// failing with disagreeWant), and bad shapes, NaN and out-of-range nodes,
// each naming the problem, and Fit to stop on a cancelled context.
func (s Suite[A, N]) CheckErrors(t *testing.T, bad []ParamCase, arch A, disagree map[string]string, disagreeWant string) {
	ctx := context.Background()
	g := RandomGraph(8, 12, false, false, 51)
	x := mat.NewDense(1, g.N(), nil)

	m := s.New()
	_, err := m.Predict(ctx, x)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	_, err = m.Fit(ctx, []forward.Pair{{Sources: []int{1}}}, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrNotConfigured)

	require.NoError(t, m.Configure(ctx, g, nil, nil))
	_, _, err = m.VJP(ctx, x, x)
	require.ErrorIs(t, err, forward.ErrNotFitted)

	cases := append([]ParamCase{
		{"unknown", map[string]string{"layers": "3"}, `unknown param "layers"`},
		{"patience", map[string]string{"patience": "0"}, "patience=0"},
	}, bad...)
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			require.ErrorContains(t, s.New().Configure(ctx, g, tt.Params, nil), tt.Want)
		})
	}

	state, err := s.Spec.EncodeState(s.Spec.NewNetwork(g, arch, 1), g)
	require.NoError(t, err)
	require.ErrorContains(t, m.Configure(ctx, g, disagree, state), disagreeWant)
	require.NoError(t, m.Configure(ctx, g, nil, state))

	_, err = m.Predict(ctx, mat.NewDense(1, g.N()+1, nil))
	require.ErrorContains(t, err, "x has 9 columns, graph has 8 nodes")
	nan := mat.NewDense(1, g.N(), nil)
	nan.Set(0, 3, math.NaN())
	_, err = m.Predict(ctx, nan)
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

// CheckSourcesAreInfected requires every prediction in (0, 1] and
// exactly 1 at the sources.
func (s Suite[A, N]) CheckSourcesAreInfected(t *testing.T) {
	ctx := context.Background()
	g := RandomGraph(15, 30, false, false, 61)
	m := s.FittedModel(t, g, s.Spec.DefaultArch(), 2)
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

// CheckChunkedBatchesMatchSingleRows requires each row's result not to
// depend on the batch it came in, where a batch larger than one pass's
// rows is split into chunks. arch must make several chunks of several
// rows each on a 3000-node graph, so both the boundaries and the rows
// sharing a pass are covered.
func (s Suite[A, N]) CheckChunkedBatchesMatchSingleRows(t *testing.T, arch A) {
	ctx := context.Background()
	g := RandomGraph(3000, 6000, false, false, 81)
	per := gnn.ChunkRows(g.N(), s.Spec.NewNetwork(g, arch, 3).CacheFloats())
	require.Greater(t, per, 1)
	require.Less(t, per, 10)
	m := s.FittedModel(t, g, arch, 3)
	rng := rand.New(rand.NewPCG(9, 9))
	x, dy := RandomMatrix(10, g.N(), 0, 1, rng), RandomMatrix(10, g.N(), -1, 1, rng)
	y, dx, err := m.VJP(ctx, x, dy)
	require.NoError(t, err)
	for _, i := range []int{0, 9} {
		yi, dxi, err := m.VJP(ctx, mat.NewDense(1, g.N(), x.RawRowView(i)), mat.NewDense(1, g.N(), dy.RawRowView(i)))
		require.NoError(t, err)
		require.InDeltaSlice(t, yi.RawRowView(0), y.RawRowView(i), 1e-12)
		require.InDeltaSlice(t, dxi.RawRowView(0), dx.RawRowView(i), 1e-12)
	}
}

// CheckThroughPluginProcess requires the real plugin binary, configured
// with params, to compute
// exactly what the package does: its Info is the package's, its VJP
// passes the finite-difference check through gRPC, it fits with streamed
// progress, its state configures the in-process model to the same VJP,
// and a state for another graph is refused through the process as well.
func (s Suite[A, N]) CheckThroughPluginProcess(t *testing.T, params map[string]string) {
	ctx := t.Context()
	g := RandomGraph(40, 90, false, false, 71)
	p, err := forward.Launch(ctx, forwardtest.Build(t, s.Spec.Name))
	require.NoError(t, err)
	defer p.Close()

	info, err := p.Info(ctx)
	require.NoError(t, err)
	want, err := s.New().Info(ctx)
	require.NoError(t, err)
	require.Equal(t, want, info)

	require.NoError(t, p.Configure(ctx, g, params, nil))
	pairs := SimulateSI(g, 40, 3, 0.3, 72)
	var reports []forward.Progress
	res, err := p.Fit(ctx, pairs[:30], forward.FitOptions{Epochs: 3, Seed: 9, Validation: pairs[30:]},
		func(pr forward.Progress) { reports = append(reports, pr) })
	require.NoError(t, err)
	require.Len(t, reports, 3)
	require.Contains(t, res.Metrics, "val_mse")

	forwardtest.CheckVJP(t, p, g, forward.VJPCheckOptions{Rows: 2, Coords: 20})

	in := s.New()
	require.NoError(t, in.Configure(ctx, g, params, res.State))
	forwardtest.CheckSameVJP(t, p, in, g.N())

	other := RandomGraph(40, 91, false, false, 73)
	require.ErrorIs(t, p.Configure(ctx, other, nil, res.State), forward.ErrBadState)
}

// CheckConformance requires the shipped plugin to pass the contract's
// conformance checks (what `sourcewatch plugin check` runs).
func (s Suite[A, N]) CheckConformance(t *testing.T) {
	g := RandomGraph(40, 90, false, false, 75)
	rep := forward.CheckPlugin(t.Context(), forwardtest.Build(t, s.Spec.Name), g, SimulateSI(g, 40, 3, 0.3, 76),
		forward.PluginCheckOptions{Fit: forward.FitOptions{Epochs: 3, Seed: 1}, Seed: 1})
	for _, r := range rep.Results {
		t.Logf("%-18s %-4s %s", r.Name, r.Status, r.Detail)
	}
	require.True(t, rep.Passed())
}

// BenchmarkVJP times one VJP of a batch of 8 (the default restarts),
// in-process and through the plugin process, on the shared graphs.
func (s Suite[A, N]) BenchmarkVJP(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		g := LoadShared(b, name)
		state := s.FittedState(b, g, s.Spec.DefaultArch(), 1)
		in := s.New()
		require.NoError(b, in.Configure(b.Context(), g, nil, state))
		p, err := forward.Launch(b.Context(), forwardtest.Build(b, s.Spec.Name))
		require.NoError(b, err)
		require.NoError(b, p.Configure(b.Context(), g, nil, state))
		rng := rand.New(rand.NewPCG(1, 1))
		x, dy := RandomMatrix(8, g.N(), 0, 1, rng), RandomMatrix(8, g.N(), -1, 1, rng)
		forwardtest.BenchmarkVJP(b, name, in, p, x, dy)
		require.NoError(b, p.Close())
	}
}
