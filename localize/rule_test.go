package localize

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
)

func TestChooseSourceRule(t *testing.T) {
	// Six nodes; the true sources are the two best-scored in every
	// cascade, so the count 2 is exact, and a fraction can match it only
	// where the infected counts allow.
	scores := [][]float64{
		{0.9, 0.8, 0.3, 0.2, 0.1, 0},
		{0.1, 0.2, 0.95, 0.9, 0.3, 0},
		{0.7, 0.1, 0.2, 0.3, 0.6, 0},
	}
	pairs := []forward.Pair{
		{Sources: []int{0, 1}, Infected: []int{0, 1, 2}},
		{Sources: []int{2, 3}, Infected: []int{1, 2, 3, 4, 5}},
		{Sources: []int{0, 4}, Infected: []int{0, 4}},
	}
	rule, f1 := ChooseSourceRule(scores, pairs)
	require.Equal(t, SourceRule{Count: 2}, rule)
	require.Equal(t, []float64{1, 1, 1}, f1)

	// With the infected counts (5 and 10) proportional to the source
	// counts (1 and 2), a fraction fits where no single count does: 0.15
	// is the first of the grid that rounds to 1 and 2 (0.1 gives 1 and 1).
	pairs = []forward.Pair{
		{Sources: []int{0}, Infected: []int{0, 1, 2, 3, 4}},
		{Sources: []int{2, 3}, Infected: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
	}
	scores = scores[:2]
	rule, f1 = ChooseSourceRule(scores, pairs)
	require.Equal(t, SourceRule{Fraction: 0.15}, rule)
	require.Equal(t, []float64{1, 1}, f1)
}

func TestSourceRuleCut(t *testing.T) {
	y := []float64{1, 1, 1, 1, 0, 0}
	for _, tc := range []struct {
		name    string
		rule    SourceRule
		scores  []float64
		sources []int
		cut     float64
	}{
		{"count", SourceRule{Count: 2}, []float64{0.1, 0.9, 0.5, 0.7, 0, 0}, []int{1, 3}, 0.7},
		// ChooseSourceRule scored exactly k nodes, ties by index.
		{"tie with the k-th left out", SourceRule{Count: 2}, []float64{0.1, 0.9, 0.7, 0.7, 0, 0}, []int{1, 2}, 0.7},
		{"fraction of four infected", SourceRule{Fraction: 0.5}, []float64{0.1, 0.9, 0.5, 0.7, 0, 0}, []int{1, 3}, 0.7},
		{"at least one", SourceRule{Fraction: 0.02}, []float64{0.1, 0.9, 0.5, 0.7, 0, 0}, []int{1}, 0.9},
		{"count capped at the infected count", SourceRule{Count: 9}, []float64{0.1, 0.9, 0.5, 0.7, 0.2, 0}, []int{1, 3, 2, 4}, 0.2},
		{"all tied", SourceRule{Count: 3}, []float64{0.001, 0.001, 0.001, 0.001, 0.001, 0.001}, []int{0, 1, 2}, 0.001},
		{"threshold", SourceRule{}, []float64{0.1, 0.95, 0.5, 0.97, 0.99, 0}, []int{4, 3, 1}, 0.95},
		{"threshold, none over", SourceRule{}, []float64{0.1, 0.9, 0.5, 0.7, 0, 0}, []int{}, 0.95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sources, cut := sourceCut{rule: tc.rule, delta: 0.95, infected: countInfected(y)}.apply(tc.scores)
			require.Equal(t, tc.sources, sources)
			require.Equal(t, tc.cut, cut)
		})
	}
	// One infected node: a count of 3 names one suspect, at least one
	// even with none infected.
	for _, tc := range []struct {
		y    []float64
		want []int
	}{
		{[]float64{0, 0, 1, 0}, []int{1}},
		{[]float64{0, 0, 0, 0}, []int{1}},
	} {
		sources, _ := sourceCut{rule: SourceRule{Count: 3}, infected: countInfected(tc.y)}.apply([]float64{0.2, 0.9, 0.5, 0.1})
		require.Equal(t, tc.want, sources)
	}
}

// A bundle's count rule cuts Solve's source set, survives a write and a
// read, and an explicit threshold overrides it.
func TestSolveWithSourceRule(t *testing.T) {
	b := testBundle(t)
	b.Manifest.SourceRule = SourceRule{Count: 3}
	var buf bytes.Buffer
	require.NoError(t, b.Write(&buf))
	got, err := readBytes(buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, SourceRule{Count: 3}, got.Manifest.SourceRule)

	p, f, _ := testProblem(12, 2, 4)
	res, err := Solve(t.Context(), got, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.Len(t, res.Sources, 3)
	require.Equal(t, byScore(res.Scores)[:3], res.Sources)
	require.Equal(t, res.Scores[res.Sources[2]], res.Threshold)
	for v, s := range res.Scores {
		if s > res.Threshold {
			require.Contains(t, res.Sources, v)
		}
	}
	// Each restart is cut where the count cut the scores: the
	// probabilities are how often a restart reaches the third score, and
	// every source has at least one restart's vote.
	restarts, _ := res.final.Dims()
	for v, pv := range res.Probability {
		require.GreaterOrEqual(t, pv, 0.0)
		require.LessOrEqual(t, pv, 1.0+1e-12)
		require.InDelta(t, math.Round(pv*float64(restarts)), pv*float64(restarts), 1e-9, "a fraction of the restarts")
		if slices.Contains(res.Sources, v) {
			require.Positive(t, pv, "source %d", v)
		}
	}

	res2, err := Solve(t.Context(), got, f, p.Y, Options{Threshold: 0.9})
	require.NoError(t, err)
	require.Equal(t, 0.9, res2.Threshold)
	for _, v := range res2.Sources {
		require.GreaterOrEqual(t, res2.Scores[v], 0.9)
	}
	// Under a threshold the probability is the fraction of restarts with x
	// at it or over, but for the tie-break's share at the boundary.
	restarts, _ = res2.final.Dims()
	for v, pv := range res2.Probability {
		over, sure := 0, 0
		for i := 0; i < restarts; i++ {
			if x := res2.final.At(i, v); x >= 0.9+tieWeight {
				sure++
				over++
			} else if x >= 0.9 {
				over++
			}
		}
		require.GreaterOrEqual(t, pv, float64(sure)/float64(restarts)-1e-12, "node %d", v)
		require.LessOrEqual(t, pv, float64(over)/float64(restarts)+1e-12, "node %d", v)
	}
	require.NotEmpty(t, res2.Sources)
	require.Equal(t, 1.0, res2.Probability[res2.Sources[0]])
}

// Bundles of formats 1 (before source rules) and 2 (before rankings)
// still load, with the threshold rule and the descent's ranking.
func TestReadOlderFormatBundles(t *testing.T) {
	good := encodeBundle(t, testBundle(t))
	for _, format := range []int{1, 2} {
		old := withFormat(t, good, format)
		b, err := readBytes(old)
		require.NoError(t, err)
		require.Equal(t, format, b.Manifest.Format)
		require.True(t, b.Manifest.SourceRule.IsThreshold())
		require.Equal(t, RankByScore, b.Manifest.Ranking)
	}
}

func TestKeepCountRule(t *testing.T) {
	for _, tc := range []struct {
		count, threshold float64
		keep             bool
	}{
		{0.55, 0.50, true},
		{0.50, 0.55, false},
		{0.50, 0.50, false}, // a tie keeps the threshold
		{0.004, 0.0, false}, // nothing finds sources: noise, not a better rule
		{0.01, 0.0, true},
	} {
		require.Equal(t, tc.keep, keepCountRule(tc.count, tc.threshold), "%+v", tc)
	}
}

// Under a count rule every restart is cut at the mean's K-th score, not
// at its own K-th: node 0 sits at 0.98 in all three restarts while each
// restart has two other nodes at 1 (different ones), so each restart's own
// top two never hold node 0, which the mean ranks first.
func TestNamedFractionUnderACountRuleCutsAtTheMeansCut(t *testing.T) {
	x := mat.NewDense(3, 7, []float64{
		0.98, 1, 1, 0, 0, 0, 0,
		0.98, 0, 0, 1, 1, 0, 0,
		0.98, 0, 0, 0, 0, 1, 1,
	})
	grad := mat.NewDense(3, 7, nil)
	res := summarize(x, grad, 0.5)
	cut := sourceCut{rule: SourceRule{Count: 2}, infected: 7}
	sources, threshold := cut.apply(res.Scores)
	require.Equal(t, 0, sources[0])
	require.InDelta(t, 1.0/3, threshold, tieWeight)
	votes := namedFraction(x, grad, reranking{}, cut.voteCut(threshold), nil)
	require.Equal(t, []float64{1, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3}, votes)
	for _, v := range sources {
		require.Positive(t, votes[v], "source %d", v)
	}
}

// Where the training snapshots proved every lone infected node a source,
// a bundle that ranks them first names them all, whatever its count or
// threshold would cut; without that proof its rule stands.
func TestSolveNamesEveryProvenLoneNode(t *testing.T) {
	b := testBundle(t) // a ring of 12
	b.Manifest.SourceRule = SourceRule{Count: 1}
	b.Manifest.LoneInfectedFirst = true
	_, f, _ := testProblem(12, 2, 4)
	y := make([]float64, 12)
	for _, v := range []int{0, 4, 8} { // three lone infected nodes
		y[v] = 1
	}
	for _, tc := range []struct {
		name    string
		metrics map[string]float64
		lone    bool
		rule    SourceRule
		want    int
	}{
		{"proven, count", map[string]float64{LoneSourceRateMetric: 1}, true, SourceRule{Count: 1}, 3},
		{"proven, threshold over every score", map[string]float64{LoneSourceRateMetric: 1}, true, SourceRule{}, 3},
		{"not every one a source", map[string]float64{LoneSourceRateMetric: 0.9}, true, SourceRule{Count: 1}, 1},
		{"no measurement (an older bundle)", map[string]float64{}, true, SourceRule{Count: 1}, 1},
		{"not ranked first", map[string]float64{LoneSourceRateMetric: 1}, false, SourceRule{Count: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.Manifest.Metrics = tc.metrics
			b.Manifest.LoneInfectedFirst = tc.lone
			b.Manifest.SourceRule = tc.rule
			b.Manifest.Threshold = 1.5 // over every score: the threshold names none
			if !tc.rule.IsThreshold() {
				b.Manifest.Threshold = 0.4
			}
			res, err := Solve(t.Context(), b, f, y, DefaultOptions())
			require.NoError(t, err)
			require.Len(t, res.Sources, tc.want)
			if tc.want == 3 {
				require.ElementsMatch(t, []int{0, 4, 8}, res.Sources)
			}
			for _, v := range res.Sources {
				require.GreaterOrEqual(t, res.Scores[v], res.Threshold, "every source at or over the cut")
				require.Positive(t, res.Probability[v], "source %d", v)
			}
		})
	}
}

func TestLoneSourceRate(t *testing.T) {
	g := ringGraph(t, 12)
	_, ok := LoneSourceRate(g, []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1, 2}}})
	require.False(t, ok, "no lone node")
	rate, ok := LoneSourceRate(g, []forward.Pair{
		{Sources: []int{0, 6}, Infected: []int{0, 1, 6}}, // 6 is lone and a source
		{Sources: []int{3}, Infected: []int{3, 9}},       // 3 and 9 lone, 9 not a source
	})
	require.True(t, ok)
	require.InDelta(t, 2.0/3, rate, 1e-12)
}

// A count cuts at the mean's K-th score, whose tie-break (the mean
// gradient's rank) no single restart need reach: with every node at the
// clamp's 1 in every restart, the source is still voted for.
func TestCountRuleSourceAtTheClampHasAVote(t *testing.T) {
	x := mat.NewDense(3, 4, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	grad := mat.NewDense(3, 4, []float64{-2, 10, 10, -1, 10, -2, 10, -1, 10, 10, -2, -1})
	res := summarize(x, grad, 0.5)
	cut := sourceCut{rule: SourceRule{Count: 1}, infected: 4}
	sources, threshold := cut.apply(res.Scores)
	require.Equal(t, []int{3}, sources)
	votes := namedFraction(x, grad, reranking{}, cut.voteCut(threshold), nil)
	require.Positive(t, votes[3])
	require.Equal(t, threshold, sourceCut{delta: threshold}.voteCut(threshold), "delta itself under the threshold rule")
}

// Where the K-th named node is at x = 0 in every restart (named by the
// tie-break alone), the vote cut stays its score: less the tie-break's
// share it fell below 0 and gave every node of the graph probability 1.
func TestVoteCutWithinTheTieBreakBand(t *testing.T) {
	x := mat.NewDense(3, 6, []float64{1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0})
	g := []float64{-6, -5, -4, -3, -2, -1}
	grad := mat.NewDense(3, 6, slices.Concat(g, g, g))
	res := summarize(x, grad, 0.5)
	cut := sourceCut{rule: SourceRule{Count: 2}, infected: 2}
	sources, threshold := cut.apply(res.Scores)
	require.Equal(t, []int{0, 1}, sources)
	votes := namedFraction(x, grad, reranking{}, cut.voteCut(threshold), nil)
	require.Equal(t, []float64{1, 1, 0, 0, 0, 0}, votes)
}
