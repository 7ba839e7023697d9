package eval

import (
	"context"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/prior"
)

func TestNodeFeaturesOnPath(t *testing.T) {
	// 0 - 1 - 2 - 3 - 4 with 0, 1, 2 infected: node 0 is deepest.
	g := path(5)
	y := yOf(5, 0, 1, 2)
	for _, width := range []int{basicFeatures, fullFeatures} {
		f := make([]float64, 5*width)
		var s nodeFeatureScratch
		nodeFeatures(g, y, f, width, &s)
		row := func(v int) []float64 { return f[v*width : (v+1)*width] }

		// y, a, log(1+c), log(1+d), mean a of neighbours, |y|/n, y·a, y·ā, δ, y·δ
		want := map[int][]float64{
			0: {1, 1, math.Log(2), math.Log(2), 1, 0.6, 1, 1, 3.0 / 6, 3.0 / 6},
			1: {1, 1, math.Log(3), math.Log(3), 0.75, 0.6, 1, 0.75, 2.0 / 6, 2.0 / 6},
			2: {1, 0.5, math.Log(2), math.Log(3), 0.75, 0.6, 0.5, 0.75, 1.0 / 6, 1.0 / 6},
			4: {0, 0, 0, math.Log(2), 0.5, 0.6, 0, 0, 0, 0},
		}
		for v, w := range want {
			require.InDeltaSlice(t, w, row(v)[:basicFeatures], 1e-12, "node %d, width %d", v, width)
		}

		// With nothing uninfected, every node is at the maximum depth; the
		// scratch is reused without stale values.
		nodeFeatures(g, yOf(5, 0, 1, 2, 3, 4), f, width, &s)
		for v := 0; v < 5; v++ {
			require.Equal(t, 1.0, row(v)[8], "node %d", v)
		}
		require.Panics(t, func() { nodeFeatures(g, y, f[:3], width, &s) })
	}
	require.Panics(t, func() { nodeFeatures(g, y, make([]float64, 5*12), 12, &nodeFeatureScratch{}) })
}

func TestRegionFeaturesOnPath(t *testing.T) {
	g := path(5)
	f := make([]float64, 5*fullFeatures)
	var s nodeFeatureScratch
	row := func(v int) []float64 { return f[v*fullFeatures+basicFeatures : (v+1)*fullFeatures] }
	const H = maxRegionDepth

	// 0 - 1 - 2 - 3 - 4 with 0, 1, 2 infected: one component of three,
	// node 0 its deepest (3 hops from 3, the nearest uninfected node).
	nodeFeatures(g, yOf(5, 0, 1, 2), f, fullFeatures, &s)
	// b2, b3, h/H, mean h/H, max h/H, log(1+|C|), h/max h, isolated, log(1+i2), y·b2
	want := map[int][]float64{
		0: {1, 0.75, 3.0 / H, 2.0 / H, 2.0 / H, math.Log(4), 1, 0, math.Log(4), 1},
		2: {0.6, 0.6, 1.0 / H, 1.0 / H, 2.0 / H, math.Log(4), 1.0 / 3, 0, math.Log(4), 0.6},
		4: {1.0 / 3, 0.5, 0, 0, 0, 0, 0, 0, math.Log(2), 0},
	}
	for v, w := range want {
		require.InDeltaSlice(t, w, row(v), 1e-12, "node %d", v)
	}

	// 0, 2 and 4 infected, none next to another: under SI each can only
	// be a source, which the isolated flag says; each is its own component.
	nodeFeatures(g, yOf(5, 0, 2, 4), f, fullFeatures, &s)
	for _, v := range []int{0, 2, 4} {
		require.Equal(t, 1.0, row(v)[7], "node %d isolated", v)
		require.InDelta(t, math.Log(2), row(v)[5], 1e-12, "node %d component", v)
		require.Equal(t, 1.0, row(v)[6], "node %d depth ratio", v)
	}
	for _, v := range []int{1, 3} {
		require.Equal(t, 0.0, row(v)[7], "node %d", v)
	}

	// All infected: no uninfected node is reachable, so every depth is H.
	nodeFeatures(g, yOf(5, 0, 1, 2, 3, 4), f, fullFeatures, &s)
	for v := 0; v < 5; v++ {
		require.Equal(t, 1.0, row(v)[2], "node %d", v)
		require.InDelta(t, math.Log(6), row(v)[5], 1e-12, "node %d", v)
	}
}

func TestBCEGradMatchesFiniteDifferences(t *testing.T) {
	for _, c := range []struct{ p, l float64 }{{0.2, 1}, {0.2, 0}, {0.9, 1}, {0.6, 0}} {
		_, dp := bceGrad(c.p, c.l)
		const h = 1e-6
		up, _ := bceGrad(c.p+h, c.l)
		down, _ := bceGrad(c.p-h, c.l)
		require.InDelta(t, (up-down)/(2*h), dp, 1e-5, "p=%g l=%g", c.p, c.l)
	}
	loss, dp := bceGrad(0, 1) // clamped: finite
	require.False(t, math.IsInf(loss, 0) || math.IsInf(dp, 0))
}

// On a graph it has never seen, local-mlp learns from the training
// cascades to rank sources above the other infected nodes: its ROC-AUC on
// held-out cascades beats the infected control's, with either feature set.
func TestLocalMLPLearnsToRankSources(t *testing.T) {
	for _, features := range []string{"full", "basic"} {
		t.Run(features, func(t *testing.T) { testLocalMLPLearnsToRankSources(t, features) })
	}
}

func testLocalMLPLearnsToRankSources(t *testing.T, features string) {
	g := randomGraph(120, 120, 11)
	cfg := diffusion.DefaultConfig()
	cfg.Beta = 0.3
	cs, _, err := diffusion.Simulate(context.Background(), g, cfg, 260, 5)
	require.NoError(t, err)
	ctx := context.Background()
	m := newMethod(t, "local-mlp", g, map[string]string{"steps": "1500", "features": features})
	_, err = m.Localize(ctx, make([]float64, g.N()))
	require.ErrorIs(t, err, ErrNotFitted)
	require.NoError(t, m.Fit(ctx, g, cs[:160], cs[160:200]))
	_, err = m.Localize(ctx, make([]float64, 3))
	require.ErrorIs(t, err, ErrBadObservation)

	infected := newMethod(t, "infected", g, nil)
	require.NoError(t, infected.Fit(ctx, g, cs[:160], cs[160:200]))
	var learned, control []float64
	for _, c := range cs[200:] {
		y := yOf(g.N(), c.Infected...)
		p, err := m.Localize(ctx, y)
		require.NoError(t, err)
		require.True(t, sort.IntsAreSorted(p.Sources))
		for _, s := range p.Scores {
			require.True(t, s >= 0 && s <= 1)
		}
		learned = append(learned, Score(g, c.Sources, p).AUC)
		q, err := infected.Localize(ctx, y)
		require.NoError(t, err)
		control = append(control, Score(g, c.Sources, q).AUC)
	}
	l, i := Summarize(learned).Mean, Summarize(control).Mean
	t.Logf("local-mlp AUC %.3f, infected %.3f", l, i)
	require.Greater(t, l, i+0.02)

	// Its probabilities, read as chances, forecast better than the base
	// rate does (every node at the share of sources, Brier r(1-r)), and
	// expect about as many sources as there were.
	d, err := m.(Diagnoser).Diagnose(ctx, cs[200:])
	require.NoError(t, err)
	r := d["true_sources"] / float64(g.N())
	t.Logf("local-mlp Brier %.4f (base rate %.4f), ECE %.4f, sources expected %.2f of %.2f",
		d["chance_brier"], r*(1-r), d["chance_ece"], d["chance_expected_sources"], d["true_sources"])
	require.Less(t, d["chance_brier"], r*(1-r))
	require.InDelta(t, d["true_sources"], d["chance_expected_sources"], 0.3*d["true_sources"])
}

func TestLocalMLPParams(t *testing.T) {
	f, err := Lookup("local-mlp")
	require.NoError(t, err)
	for _, params := range []map[string]string{
		{"hiden": "8"}, {"steps": "0"}, {"lr": "-1"}, {"batch": "x"}, {"features": "rich"},
		// Sizes it would allocate from (hidden 2000000000 died of it).
		{"hidden": "2000000000"}, {"batch": "2000000000"},
	} {
		_, err := f(Env{Graph: path(3), Logger: zap.NewNop(), Params: params})
		require.ErrorIs(t, err, ErrBadParam, "%v", params)
	}
	m, err := f(Env{Graph: path(3)})
	require.NoError(t, err)
	err = m.Fit(context.Background(), path(3), nil, []diffusion.Cascade{{Sources: []int{1}, Infected: []int{0, 1, 2}}})
	require.ErrorContains(t, err, "training and validation cascades")
}

func TestSLVAEParams(t *testing.T) {
	f, err := Lookup("slvae")
	require.NoError(t, err)
	_, err = f(Env{Graph: path(3), Params: map[string]string{"init_steps": "-1"}})
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, "slvae.init_steps=-1")
	// A negative count is refused, not read as the default.
	for _, key := range []string{"epochs", "prior_epochs", "val_solves"} {
		_, err = f(Env{Graph: path(3), Params: map[string]string{key: "-5"}})
		require.ErrorIs(t, err, ErrBadParam, key)
		require.ErrorContains(t, err, "slvae."+key+`="-5": want a count >= 0`, key)
	}
	m, err := f(Env{Graph: path(3), Params: map[string]string{"init_steps": "5", "opt_steps": "10"}})
	require.NoError(t, err)
	require.Equal(t, 5, m.(*slvae).solve.InitSteps)
	require.Equal(t, 10, m.(*slvae).solve.OptSteps)
	require.Nil(t, m.(*slvae).optGrid, "a given n_opt is not chosen")
	require.Equal(t, prior.DefaultPrototypes, m.(*slvae).prototypes)
	m, err = f(Env{Graph: path(3), Params: map[string]string{"prototypes": "256"}})
	require.NoError(t, err)
	require.Equal(t, 256, m.(*slvae).prototypes)
	_, err = f(Env{Graph: path(3), Params: map[string]string{"prototypes": "0"}})
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, "slvae.prototypes=0")
	m, err = f(Env{Graph: path(3), Params: map[string]string{"prior_weight_scale": "0.5"}})
	require.NoError(t, err)
	require.Equal(t, 0.5, m.(*slvae).weightScale)
	for _, bad := range []string{"0", "-2", "x"} {
		_, err = f(Env{Graph: path(3), Params: map[string]string{"prior_weight_scale": bad}})
		require.ErrorIs(t, err, ErrBadParam)
		require.ErrorContains(t, err, "slvae.prior_weight_scale=", bad)
	}
	m, err = f(Env{Graph: path(3)})
	require.NoError(t, err)
	require.Equal(t, 1.0, m.(*slvae).weightScale)
	require.Equal(t, int64(1), m.(*slvae).prior.Seed, "the tables' prior seed, the same in every run")
	m, err = f(Env{Graph: path(3), Seed: 42, Params: map[string]string{"prior_seed": "0"}})
	require.NoError(t, err)
	require.Equal(t, int64(42), m.(*slvae).prior.Seed, "prior_seed=0 takes the run's seed")
	m, err = f(Env{Graph: path(3), Params: map[string]string{"prior_seed": "9"}})
	require.NoError(t, err)
	require.Equal(t, int64(9), m.(*slvae).prior.Seed)
	m, err = f(Env{Graph: path(3)})
	require.NoError(t, err)
	require.Equal(t, localize.DefaultOptStepsGrid(), m.(*slvae).optGrid)
	require.Equal(t, 50, m.(*slvae).solve.OptSteps)
	// slvae solves as a bundle from `sourcewatch train` does by default;
	// slvae-paper is the paper's Algorithm 1.
	require.Equal(t, localize.DataInit, m.(*slvae).solve.Variant)
	paper, err := Lookup("slvae-paper")
	require.NoError(t, err)
	m, err = paper(Env{Graph: path(3)})
	require.NoError(t, err)
	require.Equal(t, localize.Full, m.(*slvae).solve.Variant)
	require.False(t, m.(*slvae).fewestSteps, "slvae-paper keeps the best rule of its published rows")
	m, err = f(Env{Graph: path(3)})
	require.NoError(t, err)
	require.True(t, m.(*slvae).fewestSteps, "slvae chooses n_opt as train does by default")
	noprior, err := Lookup("slvae-noprior")
	require.NoError(t, err)
	m, err = noprior(Env{Graph: path(3)})
	require.NoError(t, err)
	require.True(t, m.(*slvae).fewestSteps, "the ablation differs from slvae only by the prior")
	m, err = f(Env{Graph: path(3), Params: map[string]string{"opt_steps_rule": "best"}})
	require.NoError(t, err)
	require.False(t, m.(*slvae).fewestSteps)
	_, err = f(Env{Graph: path(3), Params: map[string]string{"opt_steps_rule": "least"}})
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, `slvae.opt_steps_rule: want best or 1se, got "least"`)
}

// On a directed graph the region features do not depend on how the nodes
// are numbered: a chain a -> b -> c -> d with a, b and c infected is one
// component of three whichever end is numbered first (a search along
// out-arcs from the lowest node split it into three when c came first),
// and only a, with no infected in-neighbour, is lone.
func TestRegionFeaturesIgnoreNumbering(t *testing.T) {
	chain := func(order []int) *graph.Graph { // order[k]: the index of the k-th of a, b, c, d
		var e []graph.Edge
		for k := 0; k+1 < len(order); k++ {
			e = append(e, graph.Edge{From: order[k], To: order[k+1], W: 1})
		}
		return graph.New(len(order), e, nil, true, false)
	}
	rows := func(order []int) [][]float64 {
		g := chain(order)
		f := make([]float64, g.N()*fullFeatures)
		nodeFeatures(g, yOf(g.N(), order[0], order[1], order[2]), f, fullFeatures, &nodeFeatureScratch{})
		out := make([][]float64, len(order))
		for k, v := range order {
			out[k] = f[v*fullFeatures : (v+1)*fullFeatures]
		}
		return out
	}
	forward, backward := rows([]int{0, 1, 2, 3}), rows([]int{3, 2, 1, 0})
	for k, name := range []string{"a", "b", "c", "d"} {
		require.Equal(t, forward[k], backward[k], "node %s", name)
	}
	const component, lone = basicFeatures + 5, basicFeatures + 7
	for k, name := range []string{"a", "b", "c"} {
		require.InDelta(t, math.Log(4), forward[k][component], 1e-12, "node %s's component", name)
	}
	require.Equal(t, []float64{1, 0, 0, 0}, []float64{forward[0][lone], forward[1][lone], forward[2][lone], forward[3][lone]})
}
