package eval

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

// path returns the path 0-1-...-(n-1).
func path(n int) *graph.Graph {
	var e []graph.Edge
	for i := 0; i+1 < n; i++ {
		e = append(e, graph.Edge{From: i, To: i + 1})
	}
	return graph.New(n, e, nil, false, false)
}

func TestPRF(t *testing.T) {
	for _, tc := range []struct {
		name        string
		truth, pred []int
		p, r, f1    float64
	}{
		{"partial", []int{1, 2, 3}, []int{2, 3, 4, 5}, 0.5, 2.0 / 3, 4.0 / 7},
		{"exact", []int{1, 2}, []int{2, 1}, 1, 1, 1},
		{"empty prediction is precision 0", []int{1}, nil, 0, 0, 0},
		{"disjoint", []int{1}, []int{2}, 0, 0, 0},
		{"duplicates count once", []int{1, 2}, []int{1, 1}, 1, 0.5, 2.0 / 3},
		// p + r below 1 (by hand: p = 1/4, r = 1/2, F1 = 2(1/8)/(3/4) = 1/3):
		// F1 is not 0 just because p + r is small
		{"low precision and recall", []int{1, 2}, []int{2, 3, 4, 5}, 0.25, 0.5, 1.0 / 3},
		{"empty truth is recall 0", nil, []int{1}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, r, f1 := PRF(tc.truth, tc.pred)
			require.InDelta(t, tc.p, p, 1e-12)
			require.InDelta(t, tc.r, r, 1e-12)
			require.InDelta(t, tc.f1, f1, 1e-12)
		})
	}
}

func TestAUC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scores []float64
		pos    []bool
		want   float64
	}{
		// the textbook example: 3 of 4 positive-negative pairs ordered
		{"textbook", []float64{0.1, 0.4, 0.35, 0.8}, []bool{false, false, true, true}, 0.75},
		// the positive shares ranks 3 and 4 with a negative: (3.5-1)/3
		{"ties averaged", []float64{1, 1, 0, 0}, []bool{true, false, false, false}, 2.5 / 3},
		{"all tied is one half", []float64{2, 2, 2, 2}, []bool{true, false, true, false}, 0.5},
		{"perfect", []float64{0, 1, 2}, []bool{false, false, true}, 1},
		{"reversed", []float64{3, 1, 2}, []bool{true, false, false}, 1},
		{"worst", []float64{0, 1, 2}, []bool{true, false, false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, AUC(tc.scores, tc.pos), 1e-12)
		})
	}
	require.True(t, math.IsNaN(AUC([]float64{1, 2}, []bool{true, true})))
	require.True(t, math.IsNaN(AUC([]float64{1, 2}, []bool{false, false})))
}

func TestTopK(t *testing.T) {
	// k = 2; the 2nd highest score 2 is shared by nodes 1,2,3 of which one
	// is a source: 1 place of 3 tied -> 1/3 hit; 1/3 of 2 sources = 1/6
	require.InDelta(t, 1.0/6, TopK([]float64{3, 2, 2, 2, 1}, []int{1, 4}), 1e-12)
	require.InDelta(t, 1, TopK([]float64{3, 2, 0, 0, 1}, []int{0, 1}), 1e-12)
	require.InDelta(t, 0.5, TopK([]float64{3, 2, 0, 0, 1}, []int{0, 4}), 1e-12)
	// scores not in order: the 2 highest are nodes 1 and 2 (3 and 2), so
	// of the sources 0 and 2 one is found, 1/2; the 2nd score in node
	// order (3) is not the cut
	require.InDelta(t, 0.5, TopK([]float64{1, 3, 2}, []int{0, 2}), 1e-12)
	require.True(t, math.IsNaN(TopK([]float64{1}, nil)))
}

func TestErrorDistance(t *testing.T) {
	p := path(5)
	require.InDelta(t, 2, ErrorDistance(p, []int{0, 4}, []int{1}, nil), 1e-12)
	require.InDelta(t, 0, ErrorDistance(p, []int{0, 4}, []int{4, 0}, nil), 1e-12)
	// no prediction: 1 + eccentricity, 5 for both ends of the path
	require.InDelta(t, 5, ErrorDistance(p, []int{0, 4}, nil, nil), 1e-12)
	// 0: ecc 4 -> 5, 2: ecc 2 -> 3
	require.InDelta(t, 4, ErrorDistance(p, []int{0, 2}, nil, nil), 1e-12)
	// unreachable: path 0-1-2 and edge 3-4; source 3 is unreachable from 0
	g := graph.New(5, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 3, To: 4}}, nil, false, false)
	require.InDelta(t, 2, ErrorDistance(g, []int{3}, []int{0}, nil), 1e-12)
	// 3 pays the penalty 2, 2 is two hops from 0
	require.InDelta(t, 2, ErrorDistance(g, []int{3, 2}, []int{0}, nil), 1e-12)
}

// On a directed graph the error distance ignores direction, so a guess
// upstream of a true source is as close as one downstream, and an empty
// prediction always costs more than any guess in the source's component.
func TestErrorDistanceDirected(t *testing.T) {
	// 0 -> 1 -> 2 -> 3
	dpath := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}}, nil, true, false)
	// 0 -> 1 <- 2, and 3 alone
	vee := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 2, To: 1}}, nil, true, false)
	for _, tc := range []struct {
		name        string
		g           *graph.Graph
		truth, pred []int
		want        float64
	}{
		{"guess upstream", dpath, []int{3}, []int{0}, 3},
		{"no guess at the end: 1 + ecc 3", dpath, []int{3}, nil, 4},
		{"guess downstream", dpath, []int{1}, []int{2}, 1},
		{"no guess in the middle: 1 + ecc 2", dpath, []int{1}, nil, 3},
		{"guess reaches only against the arcs", vee, []int{2}, []int{0}, 2},
		{"other component pays the penalty", vee, []int{0}, []int{3}, 3},
		{"isolated source: 1 + ecc 0", vee, []int{3}, []int{0}, 1},
		// undirected graphs keep their numbers
		{"undirected path", path(5), []int{0, 4}, []int{1}, 2},
		{"undirected no guess", path(5), []int{0, 2}, nil, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, ErrorDistance(tc.g, tc.truth, tc.pred, nil), 1e-12)
		})
	}
}

// The error distance on a directed graph is that of the same edges
// undirected, and never rewards predicting nothing.
func TestErrorDistanceDirectedIsFootprintDistance(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	const n = 30
	var edges []graph.Edge
	for len(edges) < 40 {
		a, b := rng.IntN(n), rng.IntN(n)
		if a != b {
			edges = append(edges, graph.Edge{From: a, To: b})
		}
	}
	dir := graph.New(n, edges, nil, true, false)
	und := graph.New(n, edges, nil, false, false)
	comp, _ := dir.Components()
	for s := range n {
		empty := ErrorDistance(dir, []int{s}, nil, nil)
		require.InDelta(t, ErrorDistance(und, []int{s}, nil, nil), empty, 1e-12, "source %d", s)
		for p := range n {
			d := ErrorDistance(dir, []int{s}, []int{p}, nil)
			require.InDelta(t, ErrorDistance(und, []int{s}, []int{p}, nil), d, 1e-12, "source %d, guess %d", s, p)
			if comp[p] == comp[s] {
				require.Less(t, d, empty, "source %d, guess %d", s, p)
			}
		}
	}
}

func TestScore(t *testing.T) {
	p := path(5)
	m := Score(p, []int{2}, Prediction{Scores: []float64{0, 1, 2, 1, 0}, Sources: []int{2, 3}})
	require.InDelta(t, 0.5, m.Precision, 1e-12)
	require.InDelta(t, 1, m.Recall, 1e-12)
	require.InDelta(t, 2.0/3, m.F1, 1e-12)
	require.InDelta(t, 1, m.AUC, 1e-12)
	require.InDelta(t, 1, m.TopK, 1e-12)
	require.InDelta(t, 0, m.ErrorDistance, 1e-12)
	require.False(t, m.Empty)

	m = Score(p, []int{2}, Prediction{Scores: make([]float64, 5)})
	require.True(t, m.Empty)
	require.Zero(t, m.Precision)
	require.InDelta(t, 0.5, m.AUC, 1e-12)
	require.InDelta(t, 0.2, m.TopK, 1e-12)
	require.InDelta(t, 3, m.ErrorDistance, 1e-12)
}

func TestSummarize(t *testing.T) {
	st := Summarize([]float64{1, 2, 3, math.NaN()})
	require.InDelta(t, 2, st.Mean, 1e-12)
	require.InDelta(t, 1, st.SD, 1e-12)
	require.Equal(t, 3, st.N)
	require.Equal(t, 1, st.Undefined)

	st = Summarize([]float64{4})
	require.Equal(t, Stat{Mean: 4, N: 1}, st)

	st = Summarize([]float64{math.NaN()})
	require.True(t, math.IsNaN(st.Mean))
	require.True(t, math.IsNaN(st.SD), "no defined value: SD is NaN, not 0")
	require.Equal(t, 1, st.Undefined)

	// two values are enough for a sample SD: by hand, mean 2, squares
	// 1 + 1 over n - 1 = 1, SD sqrt(2)
	st = Summarize([]float64{1, 3})
	require.InDelta(t, 2, st.Mean, 1e-12)
	require.InDelta(t, math.Sqrt2, st.SD, 1e-12)
}

func TestChooseK(t *testing.T) {
	ranked := [][]int{{5, 1, 2, 3}, {7, 8, 1, 2}}
	truths := [][]int{{5, 1}, {7, 8}}
	rule, f1 := ChooseK(ranked, truths, nil, 4)
	require.Equal(t, KRule{Fixed: 2}, rule)
	require.InDelta(t, 1, f1, 1e-12)

	// true counts scale with the infected count: only a ratio fits both
	ranked = [][]int{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	truths = [][]int{{1}, {1, 2, 3, 4}}
	rule, f1 = ChooseK(ranked, truths, []int{5, 20}, 10)
	require.Equal(t, KRule{Ratio: 0.2}, rule)
	require.InDelta(t, 1, f1, 1e-12)
	require.Equal(t, 1, rule.K(5))
	require.Equal(t, 4, rule.K(20))
	require.Equal(t, 1, rule.K(0))

	// the edges, by hand: F1 of the top k of {1, 2} against {1, 2} is
	// 2/3 at k = 1 and 1 at k = 2
	for _, tc := range []struct {
		name string
		maxK int
		want KRule
		f1   float64
	}{
		{"the largest k is tried", 2, KRule{Fixed: 2}, 1},
		{"no k above maxK", 1, KRule{Fixed: 1}, 2.0 / 3},
		{"maxK 0 tries k = 1", 0, KRule{Fixed: 1}, 2.0 / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule, f1 := ChooseK([][]int{{1, 2}}, [][]int{{1, 2}}, nil, tc.maxK)
			require.Equal(t, tc.want, rule)
			require.InDelta(t, tc.f1, f1, 1e-12)
		})
	}
	rule, f1 = ChooseK(nil, nil, nil, 3)
	require.Equal(t, KRule{Fixed: 1}, rule)
	require.True(t, math.IsNaN(f1), "no validation cascade: F1 undefined")
	// ties, by hand: F1 of the top k of {1, 2, 3, 4} against {1, 4} is
	// 2/3 at k = 1 and again at k = 4 (2·2/(4+2)), and at 0.1·10
	// infected (k = 1): the smaller fixed k wins, then fixed over ratio
	rule, f1 = ChooseK([][]int{{1, 2, 3, 4}}, [][]int{{1, 4}}, nil, 4)
	require.Equal(t, KRule{Fixed: 1}, rule)
	require.InDelta(t, 2.0/3, f1, 1e-12)
	rule, _ = ChooseK([][]int{{1, 2, 3, 4}}, [][]int{{1, 4}}, []int{10}, 4)
	require.Equal(t, KRule{Fixed: 1}, rule)
	require.Panics(t, func() { ChooseK([][]int{{1}}, nil, nil, 1) })
	require.Panics(t, func() { ChooseK([][]int{{1}}, [][]int{{1}}, []int{1, 2}, 1) })
}

func TestChooseThreshold(t *testing.T) {
	scores := [][]float64{{0.9, 0.8, 0.1, 0.2}, {0.1, 0.95, 0.3, 0.85}}
	truths := [][]int{{0, 1}, {1, 3}}
	th, f1 := ChooseThreshold(scores, truths)
	require.InDelta(t, 1, f1, 1e-12)
	require.Greater(t, th, 0.3)
	require.LessOrEqual(t, th, 0.8)

	// a tie, by hand: against {0, 3}, t = 0.9 predicts {0} (F1 2/3) and
	// t = 0.1 all four (p 1/2, r 1: F1 2/3 too); the larger t wins
	th, f1 = ChooseThreshold([][]float64{{0.9, 0.8, 0.5, 0.1}}, [][]int{{0, 3}})
	require.InDelta(t, 0.9, th, 0)
	require.InDelta(t, 2.0/3, f1, 1e-12)

	th, f1 = ChooseThreshold(nil, nil)
	require.InDelta(t, 0.5, th, 0)
	require.True(t, math.IsNaN(f1), "no score: F1 undefined")
	require.Panics(t, func() { ChooseThreshold([][]float64{{1}}, nil) })

	// 1000 distinct scores i/1000, the largest moved to node 500: more
	// than the 200 candidates, so only sorted quantiles are sure to hold
	// the extremes. One source, the top node: the cut is the top score.
	// Every node a source: the cut is the lowest score (F1 1 only there).
	big := make([]float64, 1000)
	for i := range big {
		big[i] = float64(i) / 1000
	}
	big[500], big[999] = big[999], big[500]
	all := make([]int, len(big))
	for i := range all {
		all[i] = i
	}
	for _, tc := range []struct {
		name  string
		truth []int
		want  float64
	}{
		{"the top score", []int{500}, 0.999},
		{"the lowest score", all, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, f1 := ChooseThreshold([][]float64{big}, [][]int{tc.truth})
			require.InDelta(t, tc.want, th, 0)
			require.InDelta(t, 1, f1, 1e-12)
		})
	}
}
