package diffusion

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func loadKarate(t testing.TB) *graph.Graph {
	t.Helper()
	g, err := graph.Load("testdata/karate.edges")
	require.NoError(t, err)
	return g
}

// randomGraph is an Erdős–Rényi graph on n nodes with edge probability p;
// at this size it is usually disconnected, which the laws must survive.
func randomGraph(seed uint64, n int, p float64, directed, weighted bool) *graph.Graph {
	rng := rand.New(rand.NewPCG(seed, 7))
	var edges []graph.Edge
	for a := range n {
		for b := range n {
			if a == b || (!directed && b < a) {
				continue
			}
			if rng.Float64() < p {
				edges = append(edges, graph.Edge{From: a, To: b, W: 0.2 + 0.8*rng.Float64()})
			}
		}
	}
	return graph.New(n, edges, nil, directed, weighted)
}

// testGraphs are the graphs every law is checked on.
func testGraphs(t testing.TB) map[string]*graph.Graph {
	return map[string]*graph.Graph{
		"karate":            loadKarate(t),
		"sparse undirected": randomGraph(1, 80, 0.03, false, false),
		"sparse directed":   randomGraph(2, 80, 0.04, true, false),
		"dense directed":    randomGraph(3, 40, 0.15, true, false),
	}
}

func drawSources(rng *rand.Rand, n, k int) []int {
	return rng.Perm(n)[:k]
}

// reach is the set of nodes reachable from sources along out-arcs.
func reach(g *graph.Graph, sources []int) []int {
	var out []int
	for v, d := range g.BFS(sources, nil) {
		if d >= 0 {
			out = append(out, v)
		}
	}
	return out
}

func infectedAt(c Cascade) []int {
	var out []int
	for v, t := range c.Times {
		if t >= 0 {
			out = append(out, v)
		}
	}
	return out
}

// trace records the S/I/R counts of every step of one run.
type trace struct{ s, i, r []int }

func runTraced(g *graph.Graph, cfg Config, sources []int, rng *rand.Rand) (Cascade, trace) {
	s := newSim(g, cfg)
	var tr trace
	s.trace = func(step, sus, inf, rec int) {
		tr.s = append(tr.s, sus)
		tr.i = append(tr.i, inf)
		tr.r = append(tr.r, rec)
	}
	step, _ := s.run(sources, rng, 0, cfg.MaxSteps, nil)
	return s.cascade(sources, step), tr
}

// causedBy checks that every infected non-source node has an in-neighbour
// that was infectious in the step it was infected.
func requireCaused(t *testing.T, g *graph.Graph, c Cascade) {
	t.Helper()
	for v, tv := range c.Times {
		if tv <= 0 {
			continue
		}
		nbr, _ := g.In(v)
		ok := false
		for _, u := range nbr {
			tu := c.Times[u]
			infectious := tu >= 0 && tu < tv
			if c.Recovered != nil && c.Recovered[u] >= 0 && c.Recovered[u] < tv {
				infectious = false
			}
			ok = ok || infectious
		}
		require.True(t, ok, "node %d infected at step %d without an infectious in-neighbour", v, tv)
	}
}

func TestSIIsMonotoneAndFillsTheReachableSet(t *testing.T) {
	for name, g := range testGraphs(t) {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Beta = 0.2
			rng := rand.New(rand.NewPCG(11, 0))
			for range 20 {
				src := drawSources(rng, g.N(), 1+rng.IntN(4))
				c, tr := runTraced(g, cfg, src, rng)
				for k := 1; k < len(tr.i); k++ {
					require.GreaterOrEqual(t, tr.i[k], tr.i[k-1], "SI infected count shrank at step %d", k)
					require.Equal(t, g.N(), tr.s[k]+tr.i[k])
				}
				// Run to completion, SI with beta > 0 infects everything reachable.
				require.Equal(t, reach(g, src), c.Infected)
				require.Equal(t, c.Infected, infectedAt(c))
				requireCaused(t, g, c)
				require.Nil(t, c.Recovered)
			}
		})
	}
}

func TestICWithProbabilityOneInfectsTheSourcesComponents(t *testing.T) {
	graphs := testGraphs(t)
	graphs["weighted all ones"] = func() *graph.Graph {
		base := randomGraph(4, 60, 0.04, false, false)
		return graph.New(base.N(), base.Edges(), nil, false, true) // W = 1 everywhere
	}()
	for name, g := range graphs {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.P = IC, 1
			rng := rand.New(rand.NewPCG(12, 0))
			for range 20 {
				src := drawSources(rng, g.N(), 1+rng.IntN(3))
				c := RunFull(g, cfg, src, rng)
				require.Equal(t, reach(g, src), c.Infected)
				if !g.Directed() {
					comp, _ := g.Components()
					for v := range g.N() {
						inComp := slices.ContainsFunc(src, func(s int) bool { return comp[s] == comp[v] })
						require.Equal(t, inComp, slices.Contains(c.Infected, v), "node %d", v)
					}
				}
				// With certain transmission the infection front is the BFS front.
				require.Equal(t, g.BFS(src, nil), c.Times)
			}
		})
	}
}

func TestICGivesEachArcOneChance(t *testing.T) {
	// A path 0-1-2 with a single source: node 2 is infected iff both arcs
	// fire, probability p^2, never later than step 2.
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	cfg := DefaultConfig()
	cfg.Model, cfg.P = IC, 0.5
	rng := rand.New(rand.NewPCG(13, 0))
	const trials = 20000
	hit := 0
	for range trials {
		c := RunFull(g, cfg, []int{0}, rng)
		require.LessOrEqual(t, c.Step, 2)
		if c.Times[2] >= 0 {
			require.Equal(t, 2, c.Times[2])
			hit++
		}
	}
	requireNear(t, 0.25, float64(hit)/trials, trials)
}

func TestSIRKeepsIPlusRGrowingAndRecoversAfterInfection(t *testing.T) {
	for name, g := range testGraphs(t) {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.Beta, cfg.Gamma = SIR, 0.3, 0.2
			rng := rand.New(rand.NewPCG(14, 0))
			for range 20 {
				src := drawSources(rng, g.N(), 1+rng.IntN(4))
				c, tr := runTraced(g, cfg, src, rng)
				for k := range tr.i {
					require.Equal(t, g.N(), tr.s[k]+tr.i[k]+tr.r[k])
					if k > 0 {
						require.GreaterOrEqual(t, tr.i[k]+tr.r[k], tr.i[k-1]+tr.r[k-1], "I+R shrank at step %d", k)
						require.GreaterOrEqual(t, tr.r[k], tr.r[k-1])
					}
				}
				// Run to completion the epidemic is over: nobody is infected.
				require.Zero(t, tr.i[len(tr.i)-1])
				require.Empty(t, c.Infected)
				for v := range g.N() {
					if c.Recovered[v] >= 0 {
						require.Greater(t, c.Recovered[v], c.Times[v], "node %d recovered before infection", v)
					} else {
						require.Equal(t, -1, c.Times[v], "node %d infected but never recovered", v)
					}
				}
				requireCaused(t, g, c)
			}
		})
	}
}

func TestLTWithThresholdZeroInfectsTheComponent(t *testing.T) {
	for name, g := range testGraphs(t) {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.Threshold = LT, 0
			rng := rand.New(rand.NewPCG(15, 0))
			for range 20 {
				src := drawSources(rng, g.N(), 1+rng.IntN(3))
				c := RunFull(g, cfg, src, rng)
				require.Equal(t, reach(g, src), c.Infected)
				require.Equal(t, g.BFS(src, nil), c.Times)
			}
		})
	}
}

func TestLTFixedThresholdLaw(t *testing.T) {
	// With a fixed threshold theta and weights 1/in-degree, a node turns
	// at the first step where the infected fraction of its in-neighbours
	// reaches theta, and a node left uninfected stays below theta.
	for name, g := range testGraphs(t) {
		t.Run(name, func(t *testing.T) {
			for _, theta := range []float64{0.3, 0.5, 1} {
				cfg := DefaultConfig()
				cfg.Model, cfg.Threshold = LT, theta
				rng := rand.New(rand.NewPCG(16, 0))
				for range 10 {
					src := drawSources(rng, g.N(), 2+rng.IntN(6))
					c := RunFull(g, cfg, src, rng)
					fracBefore := func(v, step int) float64 {
						nbr, _ := g.In(v)
						k := 0
						for _, u := range nbr {
							if c.Times[u] >= 0 && c.Times[u] < step {
								k++
							}
						}
						return float64(k) / float64(len(nbr))
					}
					for v, tv := range c.Times {
						switch {
						case tv > 0:
							require.GreaterOrEqual(t, fracBefore(v, tv)+1e-9, theta, "node %d", v)
							require.Less(t, fracBefore(v, tv-1), theta-1e-9, "node %d turned late", v)
						case tv == -1 && g.InDegree(v) > 0:
							require.Less(t, fracBefore(v, c.Step+1), theta-1e-9, "node %d should have turned", v)
						}
					}
				}
			}
		})
	}
}

// requireNear checks an empirical frequency from trials Bernoulli draws
// against its expectation, allowing five standard errors.
func requireNear(t *testing.T, want, got float64, trials int) {
	t.Helper()
	se := math.Sqrt(want*(1-want)/float64(trials)) + 1e-9
	require.InDelta(t, want, got, 5*se, "want %.4f got %.4f (se %.4f)", want, got, se)
}

func TestSIOneStepMatchesTheExactExpectation(t *testing.T) {
	// After one step, P(v infected) = 1 - (1 - beta)^k with k the number of
	// infected in-neighbours; IC from sources alike with p.
	g := loadKarate(t)
	sources := []int{0, 5, 16, 33}
	for _, tc := range []struct {
		model Model
		prob  float64
	}{{SI, 0.15}, {SIR, 0.15}, {IC, 0.3}} {
		t.Run(string(tc.model), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.Beta, cfg.P, cfg.Gamma, cfg.MaxSteps = tc.model, tc.prob, tc.prob, 0.25, 1
			s := newSim(g, cfg)
			rng := rand.New(rand.NewPCG(17, 0))
			const trials = 20000
			hits := make([]int, g.N())
			recovered := 0
			for range trials {
				s.run(sources, rng, 0, 1, nil)
				for v, tv := range s.times {
					if tv == 1 {
						hits[v]++
					}
				}
				for _, v := range sources {
					if s.rec[v] == 1 {
						recovered++
					}
				}
			}
			for v := range g.N() {
				k := 0
				nbr, _ := g.In(v)
				for _, u := range nbr {
					if slices.Contains(sources, u) {
						k++
					}
				}
				want := 1 - math.Pow(1-tc.prob, float64(k))
				if slices.Contains(sources, v) {
					want = 0
				}
				requireNear(t, want, float64(hits[v])/trials, trials)
			}
			if tc.model == SIR {
				requireNear(t, cfg.Gamma, float64(recovered)/(trials*float64(len(sources))), trials*len(sources))
			}
		})
	}
}

func TestSITwoStepsMatchTheExactExpectation(t *testing.T) {
	// Path 0-1-2 from source 0: node 2 is infected by step 2 only if node 1
	// was infected at step 1 and then passed it on: beta^2.
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	cfg := DefaultConfig()
	cfg.Beta = 0.4
	s := newSim(g, cfg)
	rng := rand.New(rand.NewPCG(18, 0))
	const trials = 20000
	by2, at2 := 0, 0
	for range trials {
		s.run([]int{0}, rng, 0, 2, nil)
		if s.times[1] >= 0 {
			by2++
		}
		if s.times[2] == 2 {
			at2++
		}
	}
	requireNear(t, 1-0.6*0.6, float64(by2)/trials, trials)
	requireNear(t, 0.4*0.4, float64(at2)/trials, trials)
}

func TestWeightedOneStepMatchesTheExactExpectation(t *testing.T) {
	// On a weighted graph, after one step from the sources:
	//   IC: P(v) = 1 - prod_{u source} (1 - w_uv)
	//   LT with theta ~ U[0,1]: P(v) = min(1, sum_{u source} w_uv)
	// and unweighted LT uses w_uv = 1/in-degree(v).
	base := randomGraph(31, 30, 0.15, true, true)
	edges := base.Edges()
	for i := range edges {
		edges[i].W *= 0.5 // keep LT sums mostly below 1
	}
	weighted := graph.New(base.N(), edges, nil, true, true)
	unweighted := graph.New(base.N(), edges, nil, true, false)
	sources := []int{0, 1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name  string
		g     *graph.Graph
		model Model
	}{{"IC weighted", weighted, IC}, {"LT weighted", weighted, LT}, {"LT in-degree", unweighted, LT}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.Threshold, cfg.P = tc.model, -1, 0.99 // P must be ignored when weighted
			s := newSim(tc.g, cfg)
			rng := rand.New(rand.NewPCG(32, 0))
			const trials = 20000
			hits := make([]int, tc.g.N())
			for range trials {
				s.run(sources, rng, 0, 1, nil)
				for v, tv := range s.times {
					if tv == 1 {
						hits[v]++
					}
				}
			}
			checked := 0
			for v := range tc.g.N() {
				if slices.Contains(sources, v) {
					require.Zero(t, hits[v])
					continue
				}
				nbr, w := tc.g.In(v)
				miss, sum := 1.0, 0.0
				for k, u := range nbr {
					if !slices.Contains(sources, u) {
						continue
					}
					wk := w[k]
					if !tc.g.Weighted() {
						wk = 1 / float64(len(nbr))
					}
					miss *= 1 - wk
					sum += wk
				}
				want := 1 - miss
				if tc.model == LT {
					want = min(1, sum)
				}
				if want > 0 {
					checked++
				}
				requireNear(t, want, float64(hits[v])/trials, trials)
			}
			require.Greater(t, checked, 5, "too few nodes next to the sources to test anything")
		})
	}
}

// RunFull runs until nothing changes when MaxSteps is 0, and its Step is
// the last step that changed anything, a recovery included. By hand, on
// the path 0 - 1 - 2 - 3 from 0: SI with beta 1 infects node t at step t,
// and step 4 changes nothing, so Step is 3. SIR with beta 1 and gamma 1
// on the path 0 - 1: at step 1 node 0 infects 1 and recovers; at step 2
// node 1 only recovers, which is still a change, so Step is 2.
func TestRunFullStepIsTheLastChange(t *testing.T) {
	path := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}}, nil, false, false)
	cfg := DefaultConfig()
	cfg.Beta, cfg.MaxSteps = 1, 0
	c := RunFull(path, cfg, []int{0}, rand.New(rand.NewPCG(43, 43)))
	require.Equal(t, 3, c.Step)
	require.Equal(t, []int{0, 1, 2, 3}, c.Times)
	require.Equal(t, []int{0, 1, 2, 3}, c.Infected)

	pair := graph.New(2, []graph.Edge{{From: 0, To: 1}}, nil, false, false)
	cfg.Model, cfg.Gamma = SIR, 1
	c = RunFull(pair, cfg, []int{0}, rand.New(rand.NewPCG(43, 43)))
	require.Equal(t, 2, c.Step)
	require.Equal(t, []int{0, 1}, c.Times)
	require.Equal(t, []int{1, 2}, c.Recovered)
	require.Empty(t, c.Infected)
}
