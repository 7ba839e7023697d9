package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// siCascades spreads SI by hand (beta per contact per step) from random
// sources until target nodes are infected: enough for fitting tests without
// depending on the diffusion simulators.
func siCascades(g *graph.Graph, count, sources int, beta, frac float64, seed uint64) []diffusion.Cascade {
	rng := rand.New(rand.NewPCG(seed, 1))
	n := g.N()
	out := make([]diffusion.Cascade, 0, count)
	for len(out) < count {
		inf := make([]bool, n)
		src := rng.Perm(n)[:sources]
		for _, s := range src {
			inf[s] = true
		}
		target := int(frac * float64(n))
		for step := 0; step < 10*n; step++ {
			cnt := 0
			for _, v := range inf {
				if v {
					cnt++
				}
			}
			if cnt >= target {
				break
			}
			next := append([]bool(nil), inf...)
			for u := 0; u < n; u++ {
				if !inf[u] {
					continue
				}
				nbr, _ := g.Out(u)
				for _, v := range nbr {
					if !inf[v] && rng.Float64() < beta {
						next[v] = true
					}
				}
			}
			inf = next
		}
		c := diffusion.Cascade{Sources: append([]int(nil), src...)}
		sort.Ints(c.Sources)
		for v, ok := range inf {
			if ok {
				c.Infected = append(c.Infected, v)
			}
		}
		out = append(out, c)
	}
	return out
}

// randomGraph is a connected random graph: a spanning path plus extra edges.
func randomGraph(n, extra int, seed uint64) *graph.Graph {
	rng := rand.New(rand.NewPCG(seed, 2))
	var e []graph.Edge
	perm := rng.Perm(n)
	for i := 0; i+1 < n; i++ {
		e = append(e, graph.Edge{From: perm[i], To: perm[i+1]})
	}
	for i := 0; i < extra; i++ {
		e = append(e, graph.Edge{From: rng.IntN(n), To: rng.IntN(n)})
	}
	return graph.New(n, e, nil, false, false)
}

func newMethod(t *testing.T, name string, g *graph.Graph, params map[string]string) Method {
	t.Helper()
	f, err := Lookup(name)
	require.NoError(t, err)
	m, err := f(Env{Graph: g, Seed: 7, Logger: zap.NewNop(), Params: params})
	require.NoError(t, err)
	require.Equal(t, name, m.Name())
	return m
}

func yOf(n int, infected ...int) []float64 {
	y := make([]float64, n)
	for _, v := range infected {
		y[v] = 1
	}
	return y
}

var builtin = []string{"lpsi", "netsleuth", "ojc", "jordan", "infected", "degree", "prior", "random"}

func TestRegistry(t *testing.T) {
	names := Names()
	for _, want := range builtin {
		require.Contains(t, names, want)
	}
	require.True(t, sort.StringsAreSorted(names))
	_, err := Lookup("nope")
	require.ErrorIs(t, err, ErrUnknownMethod)
	require.True(t, IsControl("infected"))
	require.False(t, IsControl("lpsi"))

	// a bare Env works: no logger, no params
	for _, name := range builtin {
		f, err := Lookup(name)
		require.NoError(t, err)
		g := path(5)
		m, err := f(Env{Graph: g})
		require.NoError(t, err)
		require.NoError(t, m.Fit(context.Background(), g, nil, []diffusion.Cascade{{Sources: []int{2}, Infected: []int{1, 2, 3}}}))
	}

	f, _ := Lookup("lpsi")
	_, err = f(Env{Logger: zap.NewNop(), Params: map[string]string{"alpah": "0.5"}})
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, "lpsi.alpah")
	_, err = f(Env{Logger: zap.NewNop(), Params: map[string]string{"alpha": "x"}})
	require.ErrorContains(t, err, `lpsi.alpha="x"`)
	_, err = f(Env{Logger: zap.NewNop(), Params: map[string]string{"alpha": "1.5"}})
	require.ErrorIs(t, err, ErrBadParam)
	f, _ = Lookup("ojc")
	_, err = f(Env{Logger: zap.NewNop(), Params: map[string]string{"k": "-1"}})
	require.ErrorIs(t, err, ErrBadParam)
}

// Every method, on a graph it has never seen, fits, rejects bad input and
// returns well-formed predictions.
func TestMethodsContract(t *testing.T) {
	g := randomGraph(60, 60, 3)
	cs := siCascades(g, 30, 3, 0.3, 0.35, 4)
	ctx := context.Background()
	for _, name := range builtin {
		t.Run(name, func(t *testing.T) {
			m := newMethod(t, name, g, nil)
			_, err := m.Localize(ctx, make([]float64, g.N()))
			require.ErrorIs(t, err, ErrNotFitted)
			require.NoError(t, m.Fit(ctx, g, cs[:20], cs[20:25]))
			_, err = m.Localize(ctx, make([]float64, 3))
			require.ErrorIs(t, err, ErrBadObservation)
			y := make([]float64, g.N())
			y[1] = 2
			_, err = m.Localize(ctx, y)
			require.ErrorIs(t, err, ErrBadObservation)
			var aucs []float64
			for _, c := range cs[25:] {
				p, err := m.Localize(ctx, yOf(g.N(), c.Infected...))
				require.NoError(t, err)
				require.Len(t, p.Scores, g.N())
				for _, s := range p.Scores {
					require.False(t, math.IsNaN(s) || math.IsInf(s, 0))
				}
				require.True(t, sort.IntsAreSorted(p.Sources))
				for _, s := range p.Sources {
					require.True(t, s >= 0 && s < g.N())
				}
				aucs = append(aucs, Score(g, c.Sources, p).AUC)
			}
			require.Equal(t, 0, Summarize(aucs).Undefined)
		})
	}
}

func TestJordanCenterOfPath(t *testing.T) {
	g := path(7)
	m := newMethod(t, "jordan", g, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(context.Background(), g, nil, nil))
	p, err := m.Localize(context.Background(), yOf(7, 1, 2, 3, 4, 5))
	require.NoError(t, err)
	require.Equal(t, []int{3}, p.Sources)
	// eccentricity w.r.t. infected {1..5}: 3 -> 2, 2 and 4 -> 3; uninfected
	// 0 and 6 score -(n+1)^2
	require.Equal(t, []float64{-64, -4, -3, -2, -3, -4, -64}, p.Scores)
}

// Where the infected nodes span several components, or no node reaches
// them all along the arcs, the Jordan center is still a ranking: the nodes
// that reach the most infected ones first, by eccentricity among those,
// not every infected node tied (which made the method the infected
// control).
func TestJordanAcrossComponentsAndArcs(t *testing.T) {
	// Two paths, 0-1-2-3-4 and 5-6-7, all infected.
	e := []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}, {From: 3, To: 4}, {From: 5, To: 6}, {From: 6, To: 7}}
	g := graph.New(8, e, nil, false, false)
	m := newMethod(t, "jordan", g, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(context.Background(), g, nil, nil))
	p, err := m.Localize(context.Background(), yOf(8, 0, 1, 2, 3, 4, 5, 6, 7))
	require.NoError(t, err)
	require.Equal(t, []int{2}, p.Sources, "the center of the larger infected component")
	// n+1 = 9: the 5-node component's nodes miss 3 infected ones, the
	// 3-node component's 5.
	require.Equal(t, []float64{-31, -30, -29, -30, -31, -47, -46, -47}, p.Scores)

	// A directed out-tree 0->1, 0->2, 1->3: only the root reaches every
	// infected node along the arcs.
	dg := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 0, To: 2}, {From: 1, To: 3}}, nil, true, false)
	m = newMethod(t, "jordan", dg, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(context.Background(), dg, nil, nil))
	p, err = m.Localize(context.Background(), yOf(4, 0, 1, 2, 3))
	require.NoError(t, err)
	require.Equal(t, []int{0}, p.Sources)
	require.Equal(t, []float64{-2, -11, -15, -15}, p.Scores)
}

func TestLPSIFindsCentre(t *testing.T) {
	g := path(9)
	y := yOf(9, 2, 3, 4, 5, 6)
	for _, params := range []map[string]string{{"alpha": "0.5"}, nil} {
		m := newMethod(t, "lpsi", g, params)
		val := []diffusion.Cascade{{Sources: []int{4}, Infected: []int{2, 3, 4, 5, 6}}, {Sources: []int{3}, Infected: []int{2, 3, 4}}}
		require.NoError(t, m.Fit(context.Background(), g, nil, val))
		p, err := m.Localize(context.Background(), y)
		require.NoError(t, err)
		require.Equal(t, []int{4}, p.Sources)
		for i := range p.Scores {
			if i >= 2 && i <= 6 {
				require.True(t, p.Scores[i] >= 1 && p.Scores[i] <= 2, "infected in [1,2]")
			} else {
				require.True(t, p.Scores[i] >= 0 && p.Scores[i] <= 1, "uninfected in [0,1]")
			}
			// symmetric around the centre, falling away from it
			require.InDelta(t, p.Scores[i], p.Scores[8-i], 1e-9)
			if i < 4 {
				require.Less(t, p.Scores[i], p.Scores[i+1])
			}
		}
	}
}

func TestNetSleuth(t *testing.T) {
	ctx := context.Background()
	// a path's Dirichlet eigenvector is a sine arch peaking in the middle
	g := path(9)
	m := newMethod(t, "netsleuth", g, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err := m.Localize(ctx, yOf(9, 1, 2, 3, 4, 5))
	require.NoError(t, err)
	require.Equal(t, []int{3}, p.Sources)
	require.InDelta(t, 2, p.Scores[3], 1e-9)
	// 1 + sin(pi j/6) for j = 1..5: the arch scaled to max 1, above the
	// uninfected nodes' 0
	for j := 1; j <= 5; j++ {
		require.InDelta(t, 1+math.Sin(math.Pi*float64(j)/6), p.Scores[j], 1e-6)
	}
	require.Zero(t, p.Scores[0])

	// An infected path of 2,000 nodes whose nodes, all but the middle 20,
	// each have an uninfected leaf: the leaves' boundary makes the
	// eigenvector decay exponentially away from the middle, far below what
	// Lanczos resolves, and the tails come out 0. Every infected node still
	// ranks above every uninfected one (the tails tied with them before).
	const pathLen = 2000
	var comb []graph.Edge
	for i := 0; i+1 < pathLen; i++ {
		comb = append(comb, graph.Edge{From: i, To: i + 1})
	}
	leaf := pathLen
	for i := 0; i < pathLen; i++ {
		if i < 990 || i >= 1010 {
			comb = append(comb, graph.Edge{From: i, To: leaf})
			leaf++
		}
	}
	cg := graph.New(leaf, comb, nil, false, false)
	m = newMethod(t, "netsleuth", cg, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(ctx, cg, nil, nil))
	infected := make([]int, pathLen)
	for i := range infected {
		infected[i] = i
	}
	p, err = m.Localize(ctx, yOf(leaf, infected...))
	require.NoError(t, err)
	maxLeaf := slices.Max(p.Scores[pathLen:])
	for _, v := range infected {
		require.Greater(t, p.Scores[v], maxLeaf, "infected node %d", v)
	}

	// past max_k picks the ranking continues by score
	m = newMethod(t, "netsleuth", g, map[string]string{"k": "3", "max_k": "1"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err = m.Localize(ctx, yOf(9, 1, 2, 3, 4, 5))
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 4}, p.Sources)

	// two infected blobs on a long path: two seeds, one in each, the
	// larger blob (smaller eigenvalue) first
	g = path(20)
	m = newMethod(t, "netsleuth", g, map[string]string{"k": "2"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err = m.Localize(ctx, yOf(20, 2, 3, 4, 12, 13, 14, 15, 16))
	require.NoError(t, err)
	require.Equal(t, []int{3, 14}, p.Sources)

	// a component too large for the dense solve: Lanczos finds the middle
	g = path(300)
	m = newMethod(t, "netsleuth", g, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	var mid []int
	for v := 50; v <= 250; v++ {
		mid = append(mid, v)
	}
	p, err = m.Localize(ctx, yOf(300, mid...))
	require.NoError(t, err)
	require.Equal(t, []int{150}, p.Sources)
	require.InDelta(t, 1+math.Sin(math.Pi*51/202), p.Scores[100], 1e-3)

	// on a larger graph the Lanczos eigenpair agrees with the dense one
	g = randomGraph(120, 150, 9)
	ls := newLanczos(g.N())
	nodes := make([]int, 0, 120)
	for v := 0; v < 120; v++ {
		nodes = append(nodes, v)
	}
	// take a connected infected set: a BFS ball
	dist := g.BFS([]int{0}, nil)
	var ball []int
	for _, v := range nodes {
		if dist[v] >= 0 && dist[v] <= 3 {
			ball = append(ball, v)
		}
	}
	for a, v := range ball {
		ls.pos[v] = a
	}
	lz, dn := &component{nodes: ball}, &component{nodes: ball}
	require.NoError(t, ls.solveLanczos(g, lz, nil))
	require.NoError(t, ls.solveDense(g, dn))
	lam := denseSmallest(g, ball)
	require.InDelta(t, lam, lz.lambda, 1e-6)
	require.InDelta(t, lam, dn.lambda, 1e-9)
	for a := range ball {
		require.InDelta(t, dn.u[a], lz.u[a], 1e-4)
	}
	require.Greater(t, len(ball), 40)
}

// denseSmallest is the smallest eigenvalue of L_C by a dense
// eigendecomposition, as a reference for the test only.
func denseSmallest(g *graph.Graph, nodes []int) float64 {
	pos := map[int]int{}
	for a, v := range nodes {
		pos[v] = a
	}
	m := len(nodes)
	l := make([][]float64, m)
	for a, v := range nodes {
		l[a] = make([]float64, m)
		l[a][a] = float64(g.Degree(v))
		nbr, _ := g.Out(v)
		for _, w := range nbr {
			if b, ok := pos[w]; ok {
				l[a][b] = -1
			}
		}
	}
	return symSmallest(l)
}

func TestOJCCoversTwoBlobs(t *testing.T) {
	// two stars joined by an uninfected path 3-20-21-10
	e := []graph.Edge{{From: 0, To: 1}, {From: 0, To: 2}, {From: 0, To: 3}, {From: 3, To: 20}, {From: 20, To: 21}, {From: 21, To: 10},
		{From: 10, To: 11}, {From: 10, To: 12}, {From: 10, To: 13}, {From: 10, To: 14}}
	g := graph.New(22, e, nil, false, false)
	ctx := context.Background()
	m := newMethod(t, "ojc", g, map[string]string{"k": "2"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err := m.Localize(ctx, yOf(22, 0, 1, 2, 3, 10, 11, 12, 13, 14))
	require.NoError(t, err)
	require.Equal(t, []int{0, 10}, p.Sources)
	require.InDelta(t, 0.5, p.Scores[0], 1e-12)   // eccentricity 1
	require.InDelta(t, 1.0/3, p.Scores[1], 1e-12) // eccentricity 2
	require.Zero(t, p.Scores[20])
}

func TestDegreeAndInfected(t *testing.T) {
	// star with centre 0 and leaves 1..6, plus a tail 6-7
	e := []graph.Edge{{From: 6, To: 7}}
	for i := 1; i <= 6; i++ {
		e = append(e, graph.Edge{From: 0, To: i})
	}
	g := graph.New(8, e, nil, false, false)
	ctx := context.Background()
	y := yOf(8, 0, 1, 2, 6)
	m := newMethod(t, "degree", g, map[string]string{"k": "1"})
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err := m.Localize(ctx, y)
	require.NoError(t, err)
	require.Equal(t, []int{0}, p.Sources)
	require.Equal(t, []float64{7, 2, 2, 0, 0, 0, 3, 0}, p.Scores)

	m = newMethod(t, "infected", g, nil)
	require.NoError(t, m.Fit(ctx, g, nil, nil))
	p, err = m.Localize(ctx, y)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 6}, p.Sources)
	require.Equal(t, y, p.Scores)
}

func TestPriorIgnoresY(t *testing.T) {
	g := randomGraph(30, 20, 5)
	ctx := context.Background()
	train := []diffusion.Cascade{
		{Sources: []int{5, 9}, Infected: []int{5, 9}},
		{Sources: []int{5}, Infected: []int{5}},
		{Sources: []int{5, 11}, Infected: []int{5, 11}},
	}
	val := []diffusion.Cascade{{Sources: []int{5}, Infected: []int{5, 6, 7}}, {Sources: []int{5}, Infected: []int{5, 1}}}
	m := newMethod(t, "prior", g, nil)
	require.NoError(t, m.Fit(ctx, g, train, val))
	a, err := m.Localize(ctx, yOf(30, 1, 2, 3))
	require.NoError(t, err)
	b, err := m.Localize(ctx, yOf(30, 20, 21, 22, 23, 24, 25))
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, []int{5}, a.Sources)
	require.InDelta(t, 1, a.Scores[5], 1e-12)
	require.InDelta(t, 1.0/3, a.Scores[9], 1e-12)
	require.Zero(t, a.Scores[1])
}

func TestRandomIsChance(t *testing.T) {
	g := randomGraph(200, 200, 6)
	cs := siCascades(g, 60, 10, 0.3, 0.3, 8)
	m := newMethod(t, "random", g, nil)
	ctx := context.Background()
	require.NoError(t, m.Fit(ctx, g, cs[:20], cs[20:30]))
	var aucs []float64
	for _, c := range cs[30:] {
		p, err := m.Localize(ctx, yOf(g.N(), c.Infected...))
		require.NoError(t, err)
		aucs = append(aucs, Score(g, c.Sources, p).AUC)
	}
	require.InDelta(t, 0.5, Summarize(aucs).Mean, 0.06)
}

// The bounded eccentricity search gives exactly the BFS-from-every-node
// answer (which jordan uses on directed graphs: feed it the same graph with
// both arcs of every edge).
func TestJordanBoundsMatchBruteForce(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 6; seed++ {
		g := randomGraph(90, int(seed)*15, seed)
		if seed%2 == 0 { // add a second component
			e := g.Edges()
			e = append(e, graph.Edge{From: 90, To: 91}, graph.Edge{From: 91, To: 92})
			g = graph.New(93, e, nil, false, false)
		}
		var both []graph.Edge
		for _, e := range g.Edges() {
			both = append(both, e, graph.Edge{From: e.To, To: e.From})
		}
		d := graph.New(g.N(), both, nil, true, false)
		rng := rand.New(rand.NewPCG(seed, 9))
		y := make([]float64, g.N())
		for i := range y {
			if rng.Float64() < 0.4 {
				y[i] = 1
			}
		}
		if seed%2 == 0 {
			y[91] = 0
			if seed%4 == 0 {
				y[92] = 1 // infected nodes in two components: ecc is n
			}
		}
		fast := newMethod(t, "jordan", g, map[string]string{"k": "1"})
		slow := newMethod(t, "jordan", d, map[string]string{"k": "1"})
		require.NoError(t, fast.Fit(ctx, g, nil, nil))
		require.NoError(t, slow.Fit(ctx, d, nil, nil))
		pf, err := fast.Localize(ctx, y)
		require.NoError(t, err)
		ps, err := slow.Localize(ctx, y)
		require.NoError(t, err)
		require.Equal(t, ps.Scores, pf.Scores, "seed %d", seed)
	}
}

// greedyCover with its pruning picks exactly what the plain scan picks.
func TestGreedyCoverMatchesPlainScan(t *testing.T) {
	plain := func(D []int32, ni, maxPicks int, tie func(int) int) []int {
		cur := make([]int32, ni)
		for b := range cur {
			cur[b] = coverInf
		}
		picked := make([]bool, ni)
		var picks []int
		for len(picks) < min(maxPicks, ni) {
			best := -1
			var bu, br, bs int64
			for a := 0; a < ni; a++ {
				if picked[a] {
					continue
				}
				var unc, rad, sum int64
				for b, d := range D[a*ni : (a+1)*ni] {
					d = min(d, cur[b])
					if d == coverInf {
						unc++
						continue
					}
					rad = max(rad, int64(d))
					sum += int64(d)
				}
				if best < 0 || unc < bu || (unc == bu && (rad < br || (rad == br && (sum < bs || (sum == bs && tie(a) < tie(best)))))) {
					best, bu, br, bs = a, unc, rad, sum
				}
			}
			picked[best] = true
			picks = append(picks, best)
			for b, d := range D[best*ni : (best+1)*ni] {
				cur[b] = min(cur[b], d)
			}
		}
		return picks
	}
	for seed := uint64(1); seed <= 8; seed++ {
		g := randomGraph(120, 20+int(seed)*10, seed)
		rng := rand.New(rand.NewPCG(seed, 10))
		var infected []int
		allow := make([]bool, g.N())
		for v := 0; v < g.N(); v++ {
			if rng.Float64() < 0.5 {
				infected = append(infected, v)
				allow[v] = true
			}
		}
		ni := len(infected)
		D := make([]int32, ni*ni)
		off, to, _ := g.CSR()
		dist, queue := make([]int, g.N()), make([]int, 0, g.N())
		for a, s := range infected {
			bfsFrom(off, to, s, allow, dist, queue)
			for b, v := range infected {
				D[a*ni+b] = coverInf
				if dist[v] >= 0 {
					D[a*ni+b] = int32(dist[v])
				}
			}
		}
		perm := rng.Perm(ni)
		tie := func(a int) int { return perm[a] }
		require.Equal(t, plain(D, ni, 25, tie), greedyCover(context.Background(), D, ni, 25, tie), "seed %d", seed)
	}
}

// Warm-started re-solves after each pick choose the seeds that cold,
// exact solves choose.
func TestNetSleuthWarmStartMatchesCold(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 4; seed++ {
		g := randomGraph(150, 80, seed)
		cs := siCascades(g, 1, 5, 0.4, 0.5, seed)
		rm := &rankMethod{g: g, rk: newRanker(g.N(), 1)}
		scores := make([]float64, g.N())
		warm, err := newLanczos(g.N()).seeds(ctx, rm, cs[0].Infected, 25, scores)
		require.NoError(t, err)
		coldL := newLanczos(g.N())
		coldL.cold = true
		cold, err := coldL.seeds(ctx, rm, cs[0].Infected, 25, scores)
		require.NoError(t, err)
		require.Equal(t, cold, warm, "seed %d", seed)
	}
}

// TestRankMethodChoosesSetting checks that a method with alternative
// orders keeps the setting whose order scores the higher validation F1,
// the first on a tie, and reports it.
func TestRankMethodChoosesSetting(t *testing.T) {
	ctx := context.Background()
	g := path(6)
	val := []diffusion.Cascade{
		{Sources: []int{4}, Infected: []int{3, 4, 5}},
		{Sources: []int{4}, Infected: []int{2, 3, 4}},
	}
	for _, tc := range []struct {
		name   string
		orders [][]int
		want   int
	}{
		{"second better", [][]int{{0, 1, 2, 3, 4, 5}, {4, 0, 1, 2, 3, 5}}, 1},
		{"first better", [][]int{{4, 0, 1, 2, 3, 5}, {0, 1, 2, 3, 4, 5}}, 0},
		{"tie to first", [][]int{{4, 0, 1, 2, 3, 5}, {4, 0, 1, 2, 3, 5}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chosen := -1
			m := &rankMethod{name: "fake", env: Env{Seed: 1, Logger: zap.NewNop()}, usesY: true}
			m.rank = func(_ context.Context, _ []float64, _ []int, _ int, _ []float64) ([]int, error) {
				return tc.orders[chosen], nil
			}
			m.alternatives = func(_ context.Context, _ []float64, _ []int, _ int, _ []float64) ([][]int, error) {
				return tc.orders, nil
			}
			m.choose = func(i int) { chosen = i }
			require.NoError(t, m.Fit(ctx, g, nil, val))
			require.Equal(t, tc.want, chosen)
			p, err := m.Localize(ctx, yOf(6, 3, 4, 5))
			require.NoError(t, err)
			// the kept order puts 4 first, so it is among the sources
			require.Contains(t, p.Sources, 4)
		})
	}
}

// TestNetSleuthPickCap checks which pick caps NetSleuth's validation
// chooses from: 100 alone when twice the largest training source count is
// not above it, else 100 and that count; a fixed max_k is kept.
func TestNetSleuthPickCap(t *testing.T) {
	ctx := context.Background()
	g := path(400)
	few := siCascades(g, 6, 40, 0.5, 0.3, 3)
	many := siCascades(g, 6, 80, 0.5, 0.4, 4)
	for _, tc := range []struct {
		name   string
		params map[string]string
		train  []diffusion.Cascade
		want   []float64
	}{
		{"few sources", nil, few, []float64{100}},
		{"many sources", nil, many, []float64{100, 160}},
		{"fixed", map[string]string{"max_k": "7"}, many, []float64{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMethod(t, "netsleuth", g, tc.params)
			require.NoError(t, m.Fit(ctx, g, tc.train, tc.train))
			got := m.(Extraser).Extras()["max_k"]
			require.Contains(t, tc.want, got)
			p, err := m.Localize(ctx, observe(g.N(), tc.train[0], nil))
			require.NoError(t, err)
			require.NotEmpty(t, p.Sources)
		})
	}
}

// The paper's variants solve with the paper's deepis, without the source
// gate, unless told otherwise; slvae and its no-prior ablation leave the
// gate to deepis (auto), and other plugins are not sent a param they do
// not know.
func TestSLVAEForwardGateDefault(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	for _, tt := range []struct {
		method string
		params map[string]string
		gate   string // "" for no gate param sent
	}{
		{"slvae", nil, ""},
		{"slvae-noprior", nil, ""},
		{"slvae-paper", nil, "off"},
		{"slvae-a", nil, "off"},
		{"slvae-b", nil, "off"},
		{"slvae-paper", map[string]string{"forward.gate": "auto"}, "auto"},
		{"slvae", map[string]string{"forward.gate": "on"}, "on"},
		{"slvae-paper", map[string]string{"forward": "icmf"}, ""},
	} {
		m, err := newSLVAE(Env{Graph: g, Params: tt.params}, tt.method, slvaeVariants[tt.method])
		require.NoError(t, err, tt.method)
		gate, sent := m.fparams["gate"]
		require.Equal(t, tt.gate != "", sent, "%s %v", tt.method, tt.params)
		require.Equal(t, tt.gate, gate, "%s %v", tt.method, tt.params)
	}
}

// A pick cap over slowNetSleuthPicks is said once at Fit, with the
// parameter that bounds it; the caps of the tables' graphs are not.
func TestNetSleuthWarnsOfASlowPickCap(t *testing.T) {
	g := path(1300)
	for _, tc := range []struct {
		sources int
		warned  bool
	}{{60, false}, {520, true}} {
		core, logs := observer.New(zap.WarnLevel)
		f, err := Lookup("netsleuth")
		require.NoError(t, err)
		m, err := f(Env{Graph: g, Seed: 7, Logger: zap.New(core), Params: map[string]string{"k": "1"}})
		require.NoError(t, err)
		train := siCascades(g, 2, tc.sources, 0.5, 0.6, 5)
		rm := m.(*rankMethod)
		rm.g = g // as Fit sets it, without Fit's validation picks
		require.NoError(t, rm.prepare(train))
		warnings := logs.FilterMessageSnippet("netsleuth.max_k=100 bounds it").All()
		if !tc.warned {
			require.Empty(t, warnings)
			continue
		}
		require.Len(t, warnings, 1)
		require.Contains(t, warnings[0].Message, fmt.Sprintf("up to %d seeds a cascade", 2*tc.sources))
	}
}

// OJC says when its distance matrix will be large, naming the size.
func TestOJCWarnsOfALargeDistanceMatrix(t *testing.T) {
	g := path(9000)
	for _, tc := range []struct {
		infected int
		warned   bool
	}{{2000, false}, {8200, true}} {
		core, logs := observer.New(zap.WarnLevel)
		f, err := Lookup("ojc")
		require.NoError(t, err)
		m, err := f(Env{Graph: g, Seed: 7, Logger: zap.New(core), Params: map[string]string{"k": "1"}})
		require.NoError(t, err)
		infected := make([]int, tc.infected)
		for i := range infected {
			infected[i] = i
		}
		rm := m.(*rankMethod)
		rm.g = g // as Fit sets it, without Fit's validation
		require.NoError(t, rm.prepare([]diffusion.Cascade{{Sources: []int{0}, Infected: infected}}))
		warnings := logs.FilterMessageSnippet("ojc keeps the distances").All()
		if !tc.warned {
			require.Empty(t, warnings)
			continue
		}
		require.Len(t, warnings, 1)
		require.Contains(t, warnings[0].Message, "up to 8200 infected nodes here, 0.3 GB")
	}
}

// TestRankMethodFitChoosesKOnValidation runs the rank skeleton's Fit with a
// fake ranking (the infected nodes, highest index first, then the rest in
// index order) and checks the rule it keeps. Expected rules by hand: the
// sources are the first few of that order, so a rule is right on a cascade
// when it predicts exactly their count.
func TestRankMethodFitChoosesKOnValidation(t *testing.T) {
	ctx := context.Background()
	order := func(y []float64) []int {
		var inf, rest []int
		for i := len(y) - 1; i >= 0; i-- {
			if y[i] >= 0.5 {
				inf = append(inf, i)
			}
		}
		for i := range y {
			if y[i] < 0.5 {
				rest = append(rest, i)
			}
		}
		return append(inf, rest...)
	}
	upTo := func(n int) []int {
		var s []int
		for i := range n {
			s = append(s, i)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		n     int
		fixed int
		val   []diffusion.Cascade
		want  KRule
	}{
		{
			// 3 sources of 5 and of 11 infected: k = 3 fits both; no
			// fraction does (round(5r) = 3 needs r = 0.5, and round(5.5)
			// = 6), so k is tried up to the infected counts, beyond 1
			name: "a count", n: 12,
			val: []diffusion.Cascade{
				{Sources: []int{2, 3, 4}, Infected: upTo(5)},
				{Sources: []int{8, 9, 10}, Infected: upTo(11)},
			},
			want: KRule{Fixed: 3},
		},
		{
			// 1 source of 10 infected, 2 of 20: only 0.1·infected fits both
			// (k = 1: F1 1 and 2/3; k = 2: 2/3 and 1)
			name: "a fraction of the infected", n: 21,
			val: []diffusion.Cascade{
				{Sources: []int{9}, Infected: upTo(10)},
				{Sources: []int{19, 18}, Infected: upTo(20)},
			},
			want: KRule{Ratio: 0.1},
		},
		{
			// the source 5 was not infected (recovered): k = 6 would find
			// it, but k goes no further than the 2 infected, and every k
			// up to 2 scores 0, so the first, 1, stays
			name: "no k above the largest infected count", n: 6,
			val:  []diffusion.Cascade{{Sources: []int{5}, Infected: []int{0, 1}}},
			want: KRule{Fixed: 1},
		},
		{
			name: "a fixed k is kept", n: 12, fixed: 1,
			val: []diffusion.Cascade{
				{Sources: []int{2, 3, 4}, Infected: upTo(5)},
				{Sources: []int{8, 9, 10}, Infected: upTo(11)},
			},
			want: KRule{Fixed: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen [][]int
			m := &rankMethod{name: "fake", env: Env{Seed: 7, Logger: zap.NewNop()}, usesY: true, fixed: tc.fixed}
			m.rank = func(_ context.Context, y []float64, infected []int, _ int, _ []float64) ([]int, error) {
				// what the method is shown is the cascade's observation
				require.Equal(t, infectedOf(y), infected)
				seen = append(seen, infected)
				return order(y), nil
			}
			require.NoError(t, m.Fit(ctx, path(tc.n), nil, tc.val))
			require.Equal(t, tc.want, m.rule)
			if tc.fixed == 0 {
				require.Len(t, seen, len(tc.val))
				for i, c := range tc.val {
					require.Equal(t, c.Infected, seen[i], "validation cascade %d", i)
				}
			}
		})
	}
}

// TestRankMethodErrors checks that the rank skeleton passes on its
// ranking's errors and a cancelled context, and predicts no more nodes
// than the ranking returned.
func TestRankMethodErrors(t *testing.T) {
	boom := errors.New("boom")
	g := path(4)
	val := []diffusion.Cascade{{Sources: []int{1}, Infected: []int{0, 1}}}
	newFake := func(fixed int, rank func() ([]int, error)) *rankMethod {
		m := &rankMethod{name: "fake", env: Env{Seed: 7, Logger: zap.NewNop()}, usesY: true, fixed: fixed}
		m.rank = func(context.Context, []float64, []int, int, []float64) ([]int, error) { return rank() }
		return m
	}
	fail := func() ([]int, error) { return nil, boom }
	two := func() ([]int, error) { return []int{3, 1}, nil }

	require.ErrorIs(t, newFake(0, fail).Fit(context.Background(), g, nil, val), boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, newFake(0, two).Fit(ctx, g, nil, val), context.Canceled)

	m := newFake(2, fail)
	require.NoError(t, m.Fit(context.Background(), g, nil, val))
	_, err := m.Localize(context.Background(), yOf(4, 0, 1))
	require.ErrorIs(t, err, boom)

	// k = 3 but the ranking names two nodes: those two
	m = newFake(3, two)
	require.NoError(t, m.Fit(context.Background(), g, nil, val))
	p, err := m.Localize(context.Background(), yOf(4, 0, 1))
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, p.Sources)

	m = newFake(0, two)
	m.rk = newRanker(4, 7)
	_, err = m.byScore(func(context.Context, []float64, []int, []float64) error { return boom })(context.Background(), yOf(4), nil, 0, make([]float64, 4))
	require.ErrorIs(t, err, boom)
}

// TestControlsChooseKAndCheckParams: degree, prior and random choose k on
// validation unless given one, refuse an unknown parameter, and score as
// their documentation says at the edges.
func TestControlsChooseKAndCheckParams(t *testing.T) {
	ctx := context.Background()
	// star with centre 0 and leaves 1..6, plus a tail 6-7 (degrees 6, 1,
	// ..., 1, 2, 1)
	e := []graph.Edge{{From: 6, To: 7}}
	for i := 1; i <= 6; i++ {
		e = append(e, graph.Edge{From: 0, To: i})
	}
	star := graph.New(8, e, nil, false, false)
	for _, name := range []string{"degree", "prior", "random"} {
		t.Run(name+" refuses an unknown parameter", func(t *testing.T) {
			f, err := Lookup(name)
			require.NoError(t, err)
			_, err = f(Env{Graph: star, Seed: 7, Logger: zap.NewNop(), Params: map[string]string{"bogus": "1"}})
			require.ErrorIs(t, err, ErrBadParam)
		})
	}
	for _, tc := range []struct {
		name        string
		train, val  []diffusion.Cascade
		y           []float64
		wantSources []int
	}{
		// the two highest degrees among the infected are the sources: k = 2
		{"degree", nil, []diffusion.Cascade{{Sources: []int{0, 6}, Infected: []int{0, 1, 2, 6}}}, yOf(8, 0, 1, 2, 6), []int{0, 6}},
		// each validation cascade ranked on its own: in the second, the
		// centre 0 is not infected and must not keep the first's score
		// (it would take k = 1's place: k = 2 would win with F1 2/3 + 2/3
		// over k = 1's 1 + 0); k = 1 is right on both
		{"degree, one cascade after another", nil, []diffusion.Cascade{
			{Sources: []int{0}, Infected: []int{0, 1, 2}},
			{Sources: []int{6}, Infected: []int{6, 7}},
		}, yOf(8, 0, 1, 2), []int{0}},
		// the two training sources are the validation's: k = 2
		{"prior", []diffusion.Cascade{{Sources: []int{1, 2}}, {Sources: []int{1, 2}}},
			[]diffusion.Cascade{{Sources: []int{1, 2}, Infected: []int{1, 2}}}, yOf(8), []int{1, 2}},
		// every node a source: only k = 8 has F1 1, whatever the order
		{"random", nil, []diffusion.Cascade{{Sources: []int{0, 1, 2, 3, 4, 5, 6, 7}, Infected: []int{0, 1, 2, 3, 4, 5, 6, 7}}},
			yOf(8, 0, 1, 2, 3, 4, 5, 6, 7), []int{0, 1, 2, 3, 4, 5, 6, 7}},
	} {
		t.Run(tc.name+" chooses k", func(t *testing.T) {
			method, _, _ := strings.Cut(tc.name, ",")
			m := newMethod(t, method, star, nil)
			require.NoError(t, m.Fit(ctx, star, tc.train, tc.val))
			p, err := m.Localize(ctx, tc.y)
			require.NoError(t, err)
			require.Equal(t, tc.wantSources, p.Sources)
		})
	}
	t.Run("prior without training cascades scores 0", func(t *testing.T) {
		m := newMethod(t, "prior", star, map[string]string{"k": "1"})
		require.NoError(t, m.Fit(ctx, star, nil, nil))
		p, err := m.Localize(ctx, yOf(8, 1))
		require.NoError(t, err)
		require.Equal(t, make([]float64, 8), p.Scores)
	})
	t.Run("random draws scores anew for each observation", func(t *testing.T) {
		m := newMethod(t, "random", star, map[string]string{"k": "1"})
		require.NoError(t, m.Fit(ctx, star, nil, nil))
		a, err := m.Localize(ctx, yOf(8, 1))
		require.NoError(t, err)
		b, err := m.Localize(ctx, yOf(8, 1))
		require.NoError(t, err)
		require.Len(t, a.Scores, 8)
		require.NotEqual(t, a.Scores, b.Scores)
		require.NotEqual(t, make([]float64, 8), a.Scores)
	})
	t.Run("degree counts y = 0.5 as infected", func(t *testing.T) {
		// as infectedOf does: node 6 (degree 2) scores 1 + 2
		m := newMethod(t, "degree", star, map[string]string{"k": "1"})
		require.NoError(t, m.Fit(ctx, star, nil, nil))
		y := yOf(8, 0)
		y[6] = 0.5
		p, err := m.Localize(ctx, y)
		require.NoError(t, err)
		require.Equal(t, []float64{7, 0, 0, 0, 0, 0, 3, 0}, p.Scores)
	})
}

// TestParamsRefuseBadValues: each kind of parameter refuses what it cannot
// read, and an unknown key is named (the first in sorted order) with the
// known ones, sorted.
func TestParamsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		val  string
		read func(p *params)
	}{
		{"float not a number", "x", func(p *params) { p.float("a", 1) }},
		{"float -Inf", "-Inf", func(p *params) { p.float("a", 1) }},
		{"float +Inf", "+Inf", func(p *params) { p.float("a", 1) }},
		{"float NaN", "NaN", func(p *params) { p.float("a", 1) }},
		{"int not an integer", "1.5", func(p *params) { p.int("a", 1) }},
		{"count negative", "-1", func(p *params) { p.count("a", 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newParams("m", map[string]string{"a": tc.val})
			tc.read(p)
			require.ErrorIs(t, p.done(), ErrBadParam)
		})
	}
	p := newParams("m", map[string]string{"c": "1", "b": "1", "k": "2"})
	require.Equal(t, 2, p.count("k", 0))
	p.int("j", 0)
	require.EqualError(t, p.done(), "bad method parameter m.b: unknown (known: [j k])")
}

// TestInfectedOfIsHalfOrMore: a node is infected at y >= 0.5.
func TestInfectedOfIsHalfOrMore(t *testing.T) {
	require.Equal(t, []int{0, 2, 4}, infectedOf([]float64{0.5, 0.49, 1, 0, 0.6}))
	require.Nil(t, infectedOf([]float64{0, 0.25}))
}

// LPSI names infected nodes only, keeps a given alpha, and checks its
// iteration parameters.
func TestLPSIEdges(t *testing.T) {
	ctx := context.Background()
	// the path 0-1-2 infected, node 3 alone and not: a node without
	// neighbours outranks them all, yet is no source
	g := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	m := newMethod(t, "lpsi", g, map[string]string{"alpha": "0.42"})
	val := []diffusion.Cascade{{Sources: []int{0}, Infected: []int{0, 1}}}
	require.NoError(t, m.Fit(ctx, g, nil, val))
	require.InDelta(t, 0.42, m.(*lpsi).alpha, 0, "a given alpha is not chosen again on validation")
	p, err := m.Localize(ctx, yOf(4, 0, 1, 2))
	require.NoError(t, err)
	require.Equal(t, []int{1}, p.Sources)

	for _, tc := range []struct {
		params map[string]string
		ok     bool
	}{
		{map[string]string{"max_iter": "1"}, true},
		{map[string]string{"max_iter": "0"}, false},
		{map[string]string{"tol": "0"}, false},
		{map[string]string{"alpha": "1"}, false},
		{map[string]string{"alpha": "0"}, false},
	} {
		f, err := Lookup("lpsi")
		require.NoError(t, err)
		_, err = f(Env{Graph: g, Seed: 7, Logger: zap.NewNop(), Params: tc.params})
		if tc.ok {
			require.NoError(t, err, "%v", tc.params)
		} else {
			require.ErrorIs(t, err, ErrBadParam, "%v", tc.params)
		}
	}
}
