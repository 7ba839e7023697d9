package diffusion

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func modelConfigs() map[string]Config {
	out := map[string]Config{}
	for _, m := range []Model{SI, SIR, IC, LT} {
		cfg := DefaultConfig()
		cfg.Model = m
		switch m {
		case SIR:
			cfg.Beta, cfg.Gamma = 0.3, 0.05
		case IC:
			cfg.P = 0.5
		case LT:
			cfg.Threshold = -1
		}
		out[string(m)] = cfg
	}
	return out
}

func TestSimulateIsDeterministicWhateverTheWorkers(t *testing.T) {
	g := loadKarate(t)
	for name, cfg := range modelConfigs() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, ra, err := Simulate(ctx, g, cfg, 40, 7, Workers(1))
			require.NoError(t, err)
			b, rb, err := Simulate(ctx, g, cfg, 40, 7, Workers(4))
			require.NoError(t, err)
			require.Equal(t, a, b)
			require.Equal(t, ra, rb)
			require.Equal(t, 40, ra.Cascades)
			c, _, err := Simulate(ctx, g, cfg, 40, 8, Workers(3))
			require.NoError(t, err)
			require.NotEqual(t, a, c, "a different seed gave the same cascades")
		})
	}
}

// TestSnapshotIsTheFirstStepReachingTheTarget checks the observation law:
// at the snapshot at least ceil(ObserveMin n) nodes are infected, one step
// earlier fewer than ceil(ObserveMax n) were, and Infected is exactly the
// infected-and-not-recovered set at the snapshot.
func TestSnapshotIsTheFirstStepReachingTheTarget(t *testing.T) {
	for gname, g := range map[string]*graph.Graph{"karate": loadKarate(t), "directed": randomGraph(5, 80, 0.08, true, false)} {
		for name, cfg := range modelConfigs() {
			t.Run(gname+"/"+name, func(t *testing.T) {
				cfg.ObserveMin, cfg.ObserveMax = 0.3, 0.6
				cs, rep, err := Simulate(context.Background(), g, cfg, 30, 3)
				require.NoError(t, err)
				require.Len(t, cs, 30)
				n := g.N()
				lo := int(math.Ceil(0.3*float64(n) - 1e-9))
				hi := int(math.Ceil(0.6*float64(n) - 1e-9))
				targets := map[int]bool{}
				for _, c := range cs {
					require.Equal(t, n, c.N)
					require.True(t, slices.IsSorted(c.Sources))
					require.True(t, slices.IsSorted(c.Infected))
					infectedAt := func(step int) []int {
						var out []int
						for v, tv := range c.Times {
							rec := -1
							if c.Recovered != nil {
								rec = c.Recovered[v]
							}
							if tv >= 0 && tv <= step && (rec == -1 || rec > step) {
								out = append(out, v)
							}
						}
						return out
					}
					require.Equal(t, infectedAt(c.Step), c.Infected)
					require.GreaterOrEqual(t, len(c.Infected), lo)
					if c.Step > 0 {
						require.Less(t, len(infectedAt(c.Step-1)), hi)
					}
					for _, tv := range c.Times {
						require.LessOrEqual(t, tv, c.Step)
					}
					for _, s := range c.Sources {
						require.Zero(t, c.Times[s])
					}
					require.Equal(t, cfg.Model == SIR, c.Recovered != nil)
					requireCaused(t, g, c)
					targets[len(c.Infected)] = true
				}
				require.Greater(t, len(targets), 1, "every cascade stopped at the same size: targets are not drawn")
				require.GreaterOrEqual(t, rep.Redrawn, 0)
			})
		}
	}
}

// A count no run could hold in memory is refused before anything is
// allocated for it.
func TestSimulateRefusesTooManyCascades(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	cfg := DefaultConfig()
	cfg.Sources = SourceSpec{Count: 1}
	_, _, err := Simulate(context.Background(), g, cfg, MaxCascades+1, 1)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "simulate in several runs")
}

func TestSimulateRedrawsCascadesThatDieOut(t *testing.T) {
	// Two triangles and a long path: a source in a triangle can never reach
	// 40% of the 14 nodes, so those draws must be redrawn.
	edges := []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 0, To: 2}, {From: 3, To: 4}, {From: 4, To: 5}, {From: 3, To: 5}}
	for v := 6; v < 13; v++ {
		edges = append(edges, graph.Edge{From: v, To: v + 1})
	}
	g := graph.New(14, edges, nil, false, false)
	cfg := DefaultConfig()
	cfg.Sources = SourceSpec{Count: 1}
	cfg.Beta = 0.9
	cfg.ObserveMin, cfg.ObserveMax = 0.4, 0.5
	cs, rep, err := Simulate(context.Background(), g, cfg, 50, 1, Workers(2))
	require.NoError(t, err)
	require.Positive(t, rep.Redrawn)
	for _, c := range cs {
		require.GreaterOrEqual(t, c.Sources[0], 6, "a cascade from a triangle cannot reach the target")
	}
}

func TestSimulateNamesTheProblemWhenTheTargetIsUnreachable(t *testing.T) {
	g := loadKarate(t)
	weighted := graph.New(g.N(), weightAll(g.Edges(), 0.001), nil, false, true)
	for _, tc := range []struct {
		name     string
		g        *graph.Graph
		cfg      func(*Config)
		want     string
		suspects []Suspect
	}{
		// three steps stop SI while it still spreads: MaxSteps is to blame
		{"SI beta and steps", g, func(c *Config) { c.Beta, c.MaxSteps = 0.001, 3 },
			"Beta too low, MaxSteps too low or the observation range ObserveMin-ObserveMax too high",
			[]Suspect{{"Beta", true}, {"MaxSteps", true}, {"Observe", false}}},
		// SIR dies out long before the cap: MaxSteps is not named
		{"SIR gamma", g, func(c *Config) { c.Model, c.Beta, c.Gamma = SIR, 0.01, 1 },
			"Beta too low, Gamma too high or the observation range ObserveMin-ObserveMax too high",
			[]Suspect{{"Beta", true}, {"Gamma", false}, {"Observe", false}}},
		{"IC p", g, func(c *Config) { c.Model, c.P = IC, 0.001 },
			"P too low or the observation range",
			[]Suspect{{"P", true}, {"Observe", false}}},
		// a weighted graph's weights replace p
		{"IC weights", weighted, func(c *Config) { c.Model, c.P = IC, 1 },
			"the arc weights too low or the observation range",
			[]Suspect{{"Weights", true}, {"Observe", false}}},
		{"LT thresholds", g, func(c *Config) { c.Model, c.Threshold = LT, 1 },
			"Threshold too high or the observation range",
			[]Suspect{{"Threshold", false}, {"Observe", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Sources = SourceSpec{Count: 1}
			cfg.ObserveMin, cfg.ObserveMax = 0.9, 0.9
			cfg.MaxRedraws = 20
			tc.cfg(&cfg)
			_, _, err := Simulate(context.Background(), tc.g, cfg, 4, 1)
			require.ErrorIs(t, err, ErrUnreachable)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "20 draws in a row")
			var ue *UnreachableError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, tc.suspects, ue.Suspects)
			require.Equal(t, 20, ue.Draws)
			require.Equal(t, 31, ue.Need) // ceil(0.9 * 34)
			require.Less(t, ue.Peak, ue.Need)
			// Karate is connected: its one component is no excuse
			require.Equal(t, 34, ue.Largest)
			require.NotContains(t, err.Error(), "the largest has")
		})
	}
}

// unreachableOnPaths simulates one-source cascades, observed at the
// fraction observe, on disjoint paths of the given lengths (arcs from
// each path's first node to its last when directed), and returns the
// UnreachableError they end in.
func unreachableOnPaths(t *testing.T, lengths []int, directed bool, observe float64, model func(*Config)) (*UnreachableError, error) {
	t.Helper()
	var edges []graph.Edge
	n := 0
	for _, l := range lengths {
		for i := range l - 1 {
			edges = append(edges, graph.Edge{From: n + i, To: n + i + 1, W: 1})
		}
		n += l
	}
	cfg := DefaultConfig()
	model(&cfg)
	cfg.Sources = SourceSpec{Count: 1}
	cfg.ObserveMin, cfg.ObserveMax = observe, observe
	cfg.MaxRedraws = 5
	_, _, err := Simulate(context.Background(), graph.New(n, edges, nil, directed, false), cfg, 2, 3)
	var ue *UnreachableError
	require.ErrorAs(t, err, &ue)
	return ue, err
}

func TestUnreachableNamesTheLargestComponentWhenTooSmall(t *testing.T) {
	// four paths of five nodes: one source reaches at most five
	ue, err := unreachableOnPaths(t, []int{5, 5, 5, 5}, false, 0.5, func(c *Config) { c.Beta = 0.5 })
	require.Equal(t, 5, ue.Largest)
	require.Equal(t, 10, ue.Need)
	// every draw filled its path: beta is not to blame, only the target
	// or the graph
	require.Equal(t, []Suspect{{"Observe", false}}, ue.Suspects)
	require.ErrorContains(t, err, "the most infected at once was 5: the observation range ObserveMin-ObserveMax too high, or the graph's components too small (the largest has 5 nodes)")
}

func TestUnreachableStillBlamesTheModelWhenADrawFellShort(t *testing.T) {
	// a path of five and one of twenty: a draw in the long path that
	// stops short could have gone on with a higher beta
	ue, _ := unreachableOnPaths(t, []int{5, 20}, false, 0.9, func(c *Config) { c.Model, c.Beta, c.Gamma = SIR, 0.3, 0.9 })
	require.Equal(t, 20, ue.Largest)
	require.Contains(t, ue.Suspects, Suspect{"Beta", true})
	require.Contains(t, ue.Suspects, Suspect{"Gamma", false})
}

func TestUnreachableOnArcsBlamesTheModelOnlyWhenASpreadFellShort(t *testing.T) {
	// Directed paths: a source reaches only the nodes after it, so each
	// draw's reach is its own. SI with beta 0.5 infects all of it.
	ue, err := unreachableOnPaths(t, []int{5, 5, 5, 5}, true, 0.5, func(c *Config) { c.Beta = 0.5 })
	require.True(t, ue.Directed)
	require.Equal(t, []Suspect{{"Observe", false}}, ue.Suspects)
	require.ErrorContains(t, err, "the observation range ObserveMin-ObserveMax too high, or too few nodes reachable from the sources along the arcs")
	// SIR that recovers fast stops short of what its arcs reach
	ue, _ = unreachableOnPaths(t, []int{5, 20}, true, 0.9, func(c *Config) { c.Model, c.Beta, c.Gamma = SIR, 0.3, 0.9 })
	require.Contains(t, ue.Suspects, Suspect{"Beta", true})
	require.Contains(t, ue.Suspects, Suspect{"Gamma", false})
}

// weightAll gives every edge weight w.
func weightAll(edges []graph.Edge, w float64) []graph.Edge {
	out := make([]graph.Edge, len(edges))
	for i, e := range edges {
		e.W = w
		out[i] = e
	}
	return out
}

func TestUnreachableErrorExplainNamesParamsAsTold(t *testing.T) {
	e := &UnreachableError{Cascade: 2, Draws: 3, Need: 31, Target: 0.9, Peak: 4,
		Suspects: []Suspect{{"Beta", true}, {"MaxSteps", true}, {"Observe", false}}}
	require.Equal(t, "cascade 2: 3 draws in a row stayed below the observation target of 31 infected nodes (90%); the most infected at once was 4: "+
		"Beta too low, MaxSteps too low or the observation range ObserveMin-ObserveMax too high, or the graph's components too small: observation target unreachable",
		e.Error())
	flags := map[string]string{"Beta": "--beta", "Observe": "--observe"}
	got := e.Explain(func(p string) string { return flags[p] })
	// unnamed parameters fall back to Config's names
	require.Contains(t, got, "the most infected at once was 4: --beta too low, MaxSteps too low or --observe too high, or the graph's components too small")
	require.ErrorIs(t, e, ErrUnreachable)
}

func TestSimulateStopsWhenCancelled(t *testing.T) {
	g := loadKarate(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := Simulate(ctx, g, DefaultConfig(), 10, 1)
	require.ErrorIs(t, err, context.Canceled)

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, _, err = Simulate(ctx, g, DefaultConfig(), 2000, 1, Workers(2), OnProgress(func(done, total int) {
		calls++
		if done == 5 {
			cancel()
		}
	}))
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, calls, 2000)
}

func TestOnProgressCountsEveryCascade(t *testing.T) {
	g := loadKarate(t)
	var seen []int
	_, _, err := Simulate(context.Background(), g, DefaultConfig(), 25, 1, Workers(3), OnProgress(func(done, total int) {
		require.Equal(t, 25, total)
		seen = append(seen, done)
	}))
	require.NoError(t, err)
	want := make([]int, 25)
	for i := range want {
		want[i] = i + 1
	}
	require.Equal(t, want, seen)
}

func TestSourceCounts(t *testing.T) {
	g := loadKarate(t)
	for _, tc := range []struct {
		name     string
		spec     SourceSpec
		min, max int
	}{
		{"count", SourceSpec{Count: 4}, 4, 4},
		{"ratio rounds", SourceSpec{Ratio: 0.1}, 3, 3},
		{"tiny ratio gives one", SourceSpec{Ratio: 0.001}, 1, 1},
		{"range", SourceSpec{Min: 1, Max: 5}, 1, 5},
	} {
		for _, p := range []Pattern{Uniform, Degree, Cluster} {
			t.Run(tc.name+"/"+string(p), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Sources, cfg.Pattern = tc.spec, p
				cs, _, err := Simulate(context.Background(), g, cfg, 200, 2)
				require.NoError(t, err)
				seen := map[int]bool{}
				for _, c := range cs {
					k := len(c.Sources)
					require.GreaterOrEqual(t, k, tc.min)
					require.LessOrEqual(t, k, tc.max)
					require.Equal(t, k, len(slices.Compact(slices.Clone(c.Sources))), "repeated source")
					seen[k] = true
				}
				require.Len(t, seen, tc.max-tc.min+1, "not every count in the range occurred")
			})
		}
	}
}

func sampler(g *graph.Graph, spec SourceSpec, p Pattern) *sim {
	cfg := DefaultConfig()
	cfg.Sources, cfg.Pattern = spec, p
	return newSim(g, cfg)
}

func TestUniformPatternIsUniform(t *testing.T) {
	g := loadKarate(t)
	s := sampler(g, SourceSpec{Count: 5}, Uniform)
	rng := rand.New(rand.NewPCG(21, 0))
	const trials = 10000
	freq := make([]int, g.N())
	for range trials {
		for _, v := range s.sample(rng) {
			freq[v]++
		}
	}
	for v := range freq {
		requireNear(t, 5.0/34, float64(freq[v])/trials, trials)
	}
}

func TestDegreePatternIsProportionalToDegree(t *testing.T) {
	// With one source, P(v) = deg(v) / sum of degrees exactly.
	g := loadKarate(t)
	s := sampler(g, SourceSpec{Count: 1}, Degree)
	rng := rand.New(rand.NewPCG(22, 0))
	const trials = 20000
	freq := make([]int, g.N())
	for range trials {
		freq[s.sample(rng)[0]]++
	}
	total := 2 * g.Stats().Edges
	for v := range freq {
		requireNear(t, float64(g.Degree(v))/float64(total), float64(freq[v])/trials, trials)
	}

	// With several sources high-degree nodes still dominate: the mean
	// degree of drawn sources beats the uniform mean.
	s = sampler(g, SourceSpec{Count: 4}, Degree)
	var sum, count float64
	for range 2000 {
		for _, v := range s.sample(rng) {
			sum += float64(g.Degree(v))
			count++
		}
	}
	require.Greater(t, sum/count, 1.5*float64(total)/float64(g.N()))
}

func TestDegreePatternReachesIsolatedNodesOnlyWhenItMust(t *testing.T) {
	// Nodes 3 and 4 are isolated; with 4 sources one of them must be drawn.
	g := graph.New(5, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	rng := rand.New(rand.NewPCG(23, 0))
	s3 := sampler(g, SourceSpec{Count: 3}, Degree)
	s4 := sampler(g, SourceSpec{Count: 4}, Degree)
	iso := 0
	for range 500 {
		src := slices.Sorted(slices.Values(s3.sample(rng)))
		require.Equal(t, []int{0, 1, 2}, src)
		src = s4.sample(rng)
		if slices.Contains(src, 3) {
			iso++
		}
	}
	require.InDelta(t, 250, iso, 60, "isolated nodes are not drawn at random among themselves")
}

// TestClusterPatternIsABFSBall checks that each source set is a ball: for
// some source c and radius r, every node closer than r to c is a source
// and every source is within r of c.
func TestClusterPatternIsABFSBall(t *testing.T) {
	for name, g := range map[string]*graph.Graph{"karate": loadKarate(t), "sparse connected": ringWithChords(60)} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(24, 0))
			for _, k := range []int{1, 3, 7, 12} {
				s := sampler(g, SourceSpec{Count: k}, Cluster)
				centres := map[int]bool{}
				for range 300 {
					src := slices.Clone(s.sample(rng))
					require.Len(t, src, k)
					require.True(t, isBall(g, src), "sources %v are not a BFS ball", src)
					centres[src[0]] = true
				}
				require.Greater(t, len(centres), g.N()/2, "centres are not spread over the graph")
			}
		})
	}
}

func isBall(g *graph.Graph, src []int) bool {
	in := make([]bool, g.N())
	for _, v := range src {
		in[v] = true
	}
	for _, c := range src {
		dist := g.BFS([]int{c}, nil)
		r := 0
		for _, v := range src {
			r = max(r, dist[v])
		}
		ok := true
		for v, d := range dist {
			if d >= 0 && d < r && !in[v] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func ringWithChords(n int) *graph.Graph {
	var edges []graph.Edge
	for v := range n {
		edges = append(edges, graph.Edge{From: v, To: (v + 1) % n})
		if v%5 == 0 {
			edges = append(edges, graph.Edge{From: v, To: (v + n/2) % n})
		}
	}
	return graph.New(n, edges, nil, false, false)
}

func TestClusterPatternCrossesComponents(t *testing.T) {
	// Components of sizes 2 and 3: 4 sources need both, and nothing repeats.
	g := graph.New(5, []graph.Edge{{From: 0, To: 1}, {From: 2, To: 3}, {From: 3, To: 4}}, nil, false, false)
	s := sampler(g, SourceSpec{Count: 4}, Cluster)
	rng := rand.New(rand.NewPCG(25, 0))
	for range 200 {
		src := slices.Sorted(slices.Values(s.sample(rng)))
		require.Len(t, slices.Compact(src), 4)
		require.True(t, src[0] <= 1 && src[len(src)-1] >= 2, "sources %v stay in one component", src)
	}
}

func TestCascadeIndicators(t *testing.T) {
	c := Cascade{Sources: []int{1}, Infected: []int{1, 3}, N: 4}
	require.Equal(t, []float64{0, 1, 0, 0}, c.X(nil))
	dst := []float64{9, 9, 9, 9}
	require.Equal(t, []float64{0, 1, 0, 1}, c.Y(dst))
	require.Panics(t, func() { c.X(make([]float64, 3)) })
	bad := Cascade{Sources: []int{7}, N: 4}
	require.PanicsWithValue(t, "diffusion: X: node 7 out of range for length 4", func() { bad.X(nil) })
}

func TestSimulateRejectsBadInput(t *testing.T) {
	g := loadKarate(t)
	_, _, err := Simulate(context.Background(), g, DefaultConfig(), -1, 1)
	require.ErrorIs(t, err, ErrConfig)
	cfg := DefaultConfig()
	cfg.Beta = 2
	_, _, err = Simulate(context.Background(), g, cfg, 1, 1)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "beta")
	require.False(t, errors.Is(err, ErrUnreachable))
}

// The advice leaves out what cannot help: no higher beta than 1, and on a
// directed graph it names what the arcs reach rather than components.
func TestUnreachableAdviceFitsTheGraph(t *testing.T) {
	var e []graph.Edge
	for _, start := range []int{0, 5} { // two directed chains of five
		for i := start; i < start+4; i++ {
			e = append(e, graph.Edge{From: i, To: i + 1})
		}
	}
	g := graph.New(10, e, nil, true, false)
	cfg := DefaultConfig()
	cfg.Beta, cfg.Sources = 1, SourceSpec{Count: 1}
	cfg.ObserveMin, cfg.ObserveMax = 0.9, 0.9
	cfg.MaxRedraws = 5
	_, _, err := Simulate(context.Background(), g, cfg, 2, 1)
	var ue *UnreachableError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []Suspect{{"Observe", false}}, ue.Suspects, "beta is 1 already")
	require.ErrorContains(t, err, "the observation range ObserveMin-ObserveMax too high, or too few nodes reachable from the sources along the arcs")

	// A draw that came within a tenth of the target names the redraws; a
	// random LT threshold is not called too high.
	lt := DefaultConfig()
	lt.Model = LT
	require.Equal(t, []Suspect{{"RandomThreshold", false}, {"MaxRedraws", true}, {"Observe", false}}, lt.suspects(g, false, true))
}
