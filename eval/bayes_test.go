package eval

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// TestBayesMatchesTheSimulator checks the exact posterior against
// diffusion.Simulate itself: over many simulated cascades, the sources of
// those with the same observation are where the posterior says, node by
// node, within sampling error.
func TestBayesMatchesTheSimulator(t *testing.T) {
	// a triangle with a tail and a branch: paths of different lengths, a
	// node with three in-neighbours
	edges := []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 0}, {From: 2, To: 3}, {From: 3, To: 4}, {From: 4, To: 5}, {From: 3, To: 6}, {From: 6, To: 5}}
	for _, tc := range []struct {
		name     string
		directed bool
		sources  diffusion.SourceSpec
		observe  [2]float64
		beta     float64
	}{
		{name: "two sources", sources: diffusion.SourceSpec{Count: 2}, observe: [2]float64{0.4, 0.75}, beta: 0.3},
		{name: "one to three sources", sources: diffusion.SourceSpec{Min: 1, Max: 3}, observe: [2]float64{0.3, 0.9}, beta: 0.5},
		{name: "directed, fixed target", directed: true, sources: diffusion.SourceSpec{Ratio: 0.15}, observe: [2]float64{0.5, 0.5}, beta: 0.4},
		// beta near 1: a node with two infected in-neighbours stays
		// uninfected with chance below minGrayQ, so step sums products
		{name: "beta near 1", sources: diffusion.SourceSpec{Count: 1}, observe: [2]float64{0.5, 0.9}, beta: 0.9995},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New(7, edges, nil, tc.directed, false)
			cfg := diffusion.DefaultConfig()
			cfg.Beta, cfg.Sources, cfg.ObserveMin, cfg.ObserveMax = tc.beta, tc.sources, tc.observe[0], tc.observe[1]
			const draws = 200_000
			cascades, _, err := diffusion.Simulate(context.Background(), g, cfg, draws, 3)
			require.NoError(t, err)
			type tally struct {
				n        int
				sources  []int
				infected []int
			}
			byObs := map[string]*tally{}
			for _, c := range cascades {
				key := fmt.Sprint(c.Infected)
				tl := byObs[key]
				if tl == nil {
					tl = &tally{sources: make([]int, g.N()), infected: c.Infected}
					byObs[key] = tl
				}
				tl.n++
				for _, s := range c.Sources {
					tl.sources[s]++
				}
			}
			post, err := newSIPosterior(g, &cfg, DefaultBayesMaxInfected)
			require.NoError(t, err)
			scores := make([]float64, g.N())
			checked := 0
			for key, tl := range byObs {
				if tl.n < 3000 {
					continue
				}
				require.NoError(t, post.marginals(context.Background(), tl.infected, scores))
				for v := range g.N() {
					want := float64(tl.sources[v]) / float64(tl.n)
					// five standard errors of the empirical frequency
					tol := 5*math.Sqrt(math.Max(scores[v]*(1-scores[v]), 1e-4)/float64(tl.n)) + 1e-9
					require.InDeltaf(t, want, scores[v], tol, "observation %s (%d cascades), node %d", key, tl.n, v)
					if !slices.Contains(tl.infected, v) {
						require.Zero(t, scores[v], "an uninfected node is never an SI source")
					}
				}
				checked++
			}
			require.GreaterOrEqual(t, checked, 3, "too few frequent observations to check against")
		})
	}
}

// TestBayesSumByOddsIsTheSumOfProducts: step's Gray-code sum by odds
// gives the marginals the product over every subset gives.
func TestBayesSumByOddsIsTheSumOfProducts(t *testing.T) {
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	cfg := diffusion.DefaultConfig()
	cs, _, err := diffusion.Simulate(context.Background(), g, cfg, 20, 5)
	require.NoError(t, err)
	byOdds, err := newSIPosterior(g, &cfg, DefaultBayesMaxInfected)
	require.NoError(t, err)
	byProducts, err := newSIPosterior(g, &cfg, DefaultBayesMaxInfected)
	require.NoError(t, err)
	byProducts.byProducts = true
	a, b := make([]float64, g.N()), make([]float64, g.N())
	for i, c := range cs {
		if len(c.Infected) > 16 {
			continue // the product sum is the slow one
		}
		require.NoError(t, byOdds.marginals(context.Background(), c.Infected, a))
		require.NoError(t, byProducts.marginals(context.Background(), c.Infected, b))
		require.InDeltaSlicef(t, b, a, 1e-9, "cascade %d", i)
		var sum float64
		for _, v := range a {
			sum += v
		}
		require.InDeltaf(t, 3, sum, 1e-9, "cascade %d: the marginals add up to the source count", i)
	}
}

func TestNeedDistributionMatchesTheSimulatorsRule(t *testing.T) {
	for _, tc := range []struct {
		n      int
		lo, hi float64
	}{{34, 0.2, 0.5}, {7, 0.3, 0.9}, {10, 0.5, 0.5}, {5, 0, 0.1}} {
		p := needDistribution(tc.n, tc.lo, tc.hi)
		var sum float64
		for _, v := range p {
			sum += v
		}
		require.InDelta(t, 1, sum, 1e-12)
		// the rule evaluated on a fine grid of f
		const steps = 100_000
		counts := make([]float64, tc.n+1)
		for i := range steps {
			f := tc.lo + (tc.hi-tc.lo)*(float64(i)+0.5)/steps
			counts[max(1, min(tc.n, int(math.Ceil(f*float64(tc.n)-1e-9))))]++
		}
		for t2 := range counts {
			require.InDeltaf(t, counts[t2]/steps, p[t2], 1e-4, "n %d, f in [%g, %g], need %d", tc.n, tc.lo, tc.hi, t2)
		}
	}
}

func TestBayesRefusesWhatItCannotSum(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	sir := diffusion.DefaultConfig()
	sir.Model = diffusion.SIR
	cluster := diffusion.DefaultConfig()
	cluster.Pattern = diffusion.Cluster
	capped := diffusion.DefaultConfig()
	capped.MaxSteps = 50
	for _, tc := range []struct {
		name string
		sim  *diffusion.Config
		want string
	}{
		{"recorded", nil, "recorded"},
		{"SIR", &sir, "SI only"},
		{"clustered", &cluster, "uniformly placed"},
		{"a step cap that binds", &capped, "max_steps 50 with beta 0.1 could cut runs short"},
	} {
		_, err := newSIPosterior(g, tc.sim, 10)
		require.ErrorIs(t, err, ErrNoExactPosterior, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	si := diffusion.DefaultConfig()
	si.Sources = diffusion.SourceSpec{Count: 1}
	post, err := newSIPosterior(g, &si, 2)
	require.NoError(t, err)
	// one source cannot infect 0 and 2 without 1
	err = post.marginals(context.Background(), []int{0, 2}, make([]float64, 3))
	require.ErrorIs(t, err, ErrNoExactPosterior)
	require.ErrorContains(t, err, "the observation of 2 infected nodes is impossible under the simulation (no set of 1 source among them reaches it)")
	err = post.marginals(context.Background(), []int{0, 1, 2}, make([]float64, 3))
	require.ErrorIs(t, err, ErrNoExactPosterior)
	require.ErrorContains(t, err, "3 infected nodes, more than bayes.max_infected 2")
	f, err := Lookup("bayes")
	require.NoError(t, err)
	_, err = f(Env{Graph: g, Params: map[string]string{"max_infected": "29"}})
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, "at most 28")
	require.NotContains(t, DefaultMethods(), "bayes", `"all" leaves bayes out: it refuses most settings`)
}

// TestBayesInRun runs the bayes control through the harness, which hands
// it the simulation: on simulated cascades it ranks above the infected
// control, and on recorded ones, which it cannot sum, it is reported as
// failed while the other methods go on.
func TestBayesInRun(t *testing.T) {
	// a 12-node path: where on it the sources sit is well determined
	var e []graph.Edge
	for v := 1; v < 12; v++ {
		e = append(e, graph.Edge{From: v - 1, To: v})
	}
	g := graph.New(12, e, nil, false, false)
	cfg := DefaultConfig()
	cfg.Sim.Beta, cfg.Sim.Sources = 0.5, diffusion.SourceSpec{Count: 1}
	cfg.Cascades, cfg.Runs, cfg.Seed, cfg.Workers = 200, 1, 3, 1
	cfg.Methods = []string{"bayes", "infected"}
	rep, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Failed)
	require.Equal(t, "bayes", rep.Results[0].Method)
	require.True(t, rep.Results[0].Control)
	require.Greater(t, rep.Results[0].AUC.Mean, rep.Results[1].AUC.Mean+0.05, "the posterior ranks the middle of the infected stretch first")

	sim, _, err := diffusion.Simulate(context.Background(), g, cfg.Sim, 60, 4)
	require.NoError(t, err)
	cfg.Recorded = sim
	rep, err = Run(context.Background(), g, cfg)
	require.ErrorIs(t, err, ErrNoExactPosterior)
	require.NotNil(t, rep)
	require.Len(t, rep.Failed, 1)
	require.Contains(t, rep.Failed[0].Error, "recorded")
	require.Len(t, rep.Results, 1)
	require.Equal(t, "infected", rep.Results[0].Method)
}

// TestBayesFallsBackAboveMaxInfected: a snapshot over max_infected is
// ranked as the infected control ranks it and counted; a setting where
// more than a tenth of the validation snapshots are over is refused.
func TestBayesFallsBackAboveMaxInfected(t *testing.T) {
	var e []graph.Edge
	for v := 1; v < 12; v++ {
		e = append(e, graph.Edge{From: v - 1, To: v})
	}
	g := graph.New(12, e, nil, false, false)
	sim := diffusion.DefaultConfig()
	sim.Sources = diffusion.SourceSpec{Count: 1}
	f, err := Lookup("bayes")
	require.NoError(t, err)
	m, err := f(Env{Graph: g, Simulation: &sim, Params: map[string]string{"max_infected": "5"}})
	require.NoError(t, err)
	small := diffusion.Cascade{Sources: []int{4}, Infected: []int{3, 4, 5}}
	large := diffusion.Cascade{Sources: []int{4}, Infected: []int{1, 2, 3, 4, 5, 6, 7}}
	val := []diffusion.Cascade{small, small, small, small, small, small, small, small, small, large, large}
	err = m.Fit(context.Background(), g, nil, val)
	require.ErrorIs(t, err, ErrNoExactPosterior)
	require.ErrorContains(t, err, "2 of the 11 validation snapshots hold more than bayes.max_infected 5")

	require.NoError(t, m.Fit(context.Background(), g, nil, val[:10]), "one in ten over is accepted")
	p, err := m.Localize(context.Background(), observe(12, small, nil))
	require.NoError(t, err)
	require.Greater(t, p.Scores[4], p.Scores[3], "the middle of a stretch of three on a path is the likeliest source")
	p, err = m.Localize(context.Background(), observe(12, large, nil))
	require.NoError(t, err)
	require.Equal(t, observe(12, large, nil), p.Scores, "over max_infected: every infected node alike")
	extra, err := m.(Diagnoser).Diagnose(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"bayes_fallback_fraction": 0.5}, extra)
}
