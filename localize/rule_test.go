package localize

import (
	"bytes"
	"encoding/json"
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
			sources, ruled, cut := sourceCut{rule: tc.rule, delta: 0.95, infected: countInfected(y)}.apply(tc.scores)
			require.Equal(t, tc.sources, sources)
			require.Len(t, sources, ruled, "no floor, no node after the rule's")
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
		sources, _, _ := sourceCut{rule: SourceRule{Count: 3}, infected: countInfected(tc.y)}.apply([]float64{0.2, 0.9, 0.5, 0.1})
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

// Where the training snapshots proved every lone infected node a source,
// a bundle that ranks the infected first names them all, whatever its
// count or threshold would cut; without that proof, or ranking by score
// (`train --ranking score`, for observations that may miss an
// infection), its rule stands.
func TestSolveNamesEveryProvenLoneNode(t *testing.T) {
	b := testBundle(t) // a ring of 12
	_, f, _ := testProblem(12, 2, 4)
	y := make([]float64, 12)
	for _, v := range []int{0, 4, 8} { // three lone infected nodes
		y[v] = 1
	}
	proven := map[string]float64{LoneSourceRateMetric: 1}
	none := map[string]float64{}
	simulated := func(model string) json.RawMessage {
		return json.RawMessage(`{"cascades": 300, "simulated": {"model": "` + model + `", "beta": 0.1}}`)
	}
	for _, tc := range []struct {
		name      string
		metrics   map[string]float64
		diffusion json.RawMessage
		ranking   Ranking
		lone      bool
		rule      SourceRule
		want      int
	}{
		{"proven, count", proven, nil, InfectedFirst, true, SourceRule{Count: 1}, 3},
		{"proven, threshold over every score", proven, nil, InfectedFirst, true, SourceRule{}, 3},
		{"proven, not lifted", proven, nil, InfectedThenPredicted, false, SourceRule{Count: 1}, 3},
		{"not every one a source", map[string]float64{LoneSourceRateMetric: 0.9}, simulated("SI"), InfectedFirst, true, SourceRule{Count: 1}, 1},
		{"no measurement (an older bundle)", none, nil, InfectedFirst, true, SourceRule{Count: 1}, 1},
		{"ranked by score", proven, nil, RankByScore, false, SourceRule{Count: 1}, 1},
		// No lone node in the training snapshots to measure (clustered
		// sources): simulated SI, IC or LT proves it by construction.
		{"no measurement, simulated SI", none, simulated("SI"), InfectedFirst, false, SourceRule{Count: 1}, 3},
		{"no measurement, simulated LT", none, simulated("LT"), InfectedFirst, false, SourceRule{Count: 1}, 3},
		{"no measurement, simulated SIR", none, simulated("SIR"), InfectedFirst, false, SourceRule{Count: 1}, 1},
		{"no measurement, recorded cascades", none, json.RawMessage(`{"file": "c.jsonl", "cascades": 30}`), InfectedFirst, false, SourceRule{Count: 1}, 1},
		{"simulated SI, ranked by score", none, simulated("SI"), RankByScore, false, SourceRule{Count: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.Manifest.Metrics = tc.metrics
			b.Manifest.Diffusion = tc.diffusion
			b.Manifest.Ranking = tc.ranking
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
			ruled := res.Sources[:len(res.Sources)-res.Floor]
			for _, v := range ruled {
				require.GreaterOrEqual(t, res.Scores[v], res.Threshold, "every source the rule names at or over the cut")
			}
			for _, v := range res.Sources[len(ruled):] {
				require.LessOrEqual(t, res.Scores[v], res.Threshold, "the floor's after it")
			}
			for _, v := range res.Sources {
				require.Equal(t, 1.0, res.Probability[v], "source %d: every restart's set holds it", v)
			}
		})
	}
}

// Every infected component holds a source where nothing recovers and
// every infection is observed, so the set names the first-ranked node of
// each: an audit's graph had two isolated infected nodes fill a count of
// 2 and a 151-node outbreak beside them with no node named.
func TestSolveNamesEveryInfectedComponent(t *testing.T) {
	b := testBundle(t) // a ring of 12
	b.Manifest.Ranking = InfectedFirst
	b.Manifest.LoneInfectedFirst = true
	b.Manifest.Metrics = map[string]float64{LoneSourceRateMetric: 1}
	b.Manifest.Threshold = 0.4
	_, f, _ := testProblem(12, 2, 4)
	y := make([]float64, 12)
	for _, v := range []int{0, 3, 6, 7, 8} { // 0 and 3 lone, 6-8 an outbreak
		y[v] = 1
	}
	for _, tc := range []struct {
		name    string
		rule    SourceRule
		floor   bool
		want    int
		floored int
	}{
		{"count filled by the lone nodes", SourceRule{Count: 2}, true, 3, 1},
		{"threshold over every score", SourceRule{}, true, 3, 3},
		{"no floor", SourceRule{Count: 2}, false, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.Manifest.SourceRule = tc.rule
			if tc.rule.IsThreshold() {
				b.Manifest.Threshold = 1.5 // over every score
			}
			b.Manifest.Metrics[LoneSourceRateMetric] = 0.5
			if tc.floor {
				b.Manifest.Metrics[LoneSourceRateMetric] = 1
			}
			res, err := Solve(t.Context(), b, f, y, DefaultOptions())
			require.NoError(t, err)
			require.Len(t, res.Sources, tc.want)
			require.Equal(t, tc.floored, res.Floor)
			require.ElementsMatch(t, []int{0, 3}, res.Sources[:2], "the lone nodes first")
			if tc.floor {
				out := res.Sources[2]
				require.Contains(t, []int{6, 7, 8}, out, "then the outbreak's first-ranked node")
				for _, v := range []int{6, 7, 8} {
					require.LessOrEqual(t, res.Scores[v], res.Scores[out])
				}
				require.Less(t, res.Scores[out], res.Threshold, "below the rule's cut")
				require.Positive(t, res.Probability[out], "a restart's set names its component's first node")
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

// Where a count (or the floor of proven sources) cut the set, a restart votes
// for a node whose x, reranked, reaches the mean x of the set's last
// node, reranked: not at its own K-th, not at the mean's K-th score with
// its tie-break, and a node no restart moved off 0 gets no vote.
func TestRestartVotesUnderACount(t *testing.T) {
	oneStep := func(p float64) *Calibration {
		return &Calibration{Classes: []CalibrationSteps{{Scores: []float64{1}, Probabilities: []float64{p}}}}
	}
	infected := func(n int) reranking {
		y := make([]float64, n)
		for v := range y {
			y[v] = 1
		}
		return reranking{ranking: InfectedFirst, y: y}
	}
	calibrated := func(n int, p float64) reranking {
		rr := infected(n)
		rr.cal, rr.sizes = oneStep(p), slices.Repeat([]int{n}, n)
		return rr
	}
	clamp := []float64{-2, 10, 10, -1, 10, -2, 10, -1, 10, 10, -2, -1}
	g6 := []float64{-6, -5, -4, -3, -2, -1}
	for _, tc := range []struct {
		name    string
		x, grad *mat.Dense
		rr      reranking
		count   int
		sources []int
		want    []float64
	}{
		// Node 0 at 0.98 in all three restarts, each restart with two
		// other nodes at 1: each restart's own top two never held node
		// 0, which the mean ranks first.
		{"not each restart's own top K", mat.NewDense(3, 7, []float64{
			0.98, 1, 1, 0, 0, 0, 0,
			0.98, 0, 0, 1, 1, 0, 0,
			0.98, 0, 0, 0, 0, 1, 1,
		}), mat.NewDense(3, 7, nil), reranking{}, 2, nil, []float64{1, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3}},
		// Every node at the clamp's 1 in every restart: the tie-break
		// names node 3, and every restart put every node as high.
		{"at the clamp", mat.NewDense(3, 4, slices.Repeat([]float64{1}, 12)), mat.NewDense(3, 4, clamp), reranking{}, 1, []int{3}, []float64{1, 1, 1, 1}},
		{"at the clamp, calibrated to 0", mat.NewDense(3, 4, slices.Repeat([]float64{1}, 12)), mat.NewDense(3, 4, clamp), calibrated(4, 0), 1, []int{3}, []float64{1, 1, 1, 1}},
		// Node 1 named by the tie-break alone, at 0 everywhere: at 0 (or
		// less the tie-break's share) every node had every vote.
		{"the last named at 0", mat.NewDense(3, 6, slices.Concat([]float64{1, 0, 0, 0, 0, 0}, []float64{1, 0, 0, 0, 0, 0}, []float64{1, 0, 0, 0, 0, 0})),
			mat.NewDense(3, 6, slices.Concat(g6, g6, g6)), reranking{}, 2, []int{0, 1}, []float64{1, 0, 0, 0, 0, 0}},
		{"all at 0", mat.NewDense(3, 4, nil), mat.NewDense(3, 4, clamp), reranking{}, 1, []int{3}, []float64{0, 0, 0, 0}},
		// The tie-break ranks node 1 (mean 0.5) above node 2 (mean
		// 0.5004), the set's last: node 1's restarts, all at 0.5, reach
		// the lowest mean x of the set, not the last one's.
		{"a lower mean ranked above the last", mat.NewDense(3, 4, slices.Repeat([]float64{1, 0.5, 0.5004, 0}, 3)), mat.NewDense(3, 4, slices.Repeat([]float64{-3, -4, -1, -2}, 3)),
			reranking{}, 3, []int{0, 1, 2}, []float64{1, 1, 1, 0}},
		// Node 1 at 0.445 in all three restarts: their mean, summed in
		// thirds, rounds to 0.44500000000000006, which no restart reaches.
		{"a mean rounded above every restart", mat.NewDense(3, 3, slices.Repeat([]float64{1, 0.445, 0}, 3)), mat.NewDense(3, 3, nil),
			reranking{}, 2, []int{0, 1}, []float64{1, 1, 0}},
		// Calibrated into one step of 0.5, a node at 0 everywhere is no
		// nearer the source at 1 than uncalibrated.
		{"calibrated, a node at 0", mat.NewDense(3, 4, slices.Repeat([]float64{1, 1, 0, 0}, 3)), mat.NewDense(3, 4, slices.Repeat([]float64{-4, -3, -2, -1}, 3)),
			calibrated(4, 0.5), 1, []int{0}, []float64{1, 1, 0, 0}},
		{"infected first, a node at 0", mat.NewDense(3, 4, slices.Repeat([]float64{1, 1, 0, 0}, 3)), mat.NewDense(3, 4, slices.Repeat([]float64{-4, -3, -2, -1}, 3)),
			infected(4), 1, []int{0}, []float64{1, 1, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := summarize(tc.x, tc.grad, 0.5)
			tc.rr.apply(res.Scores, nil)
			_, n := tc.x.Dims()
			cut := sourceCut{rule: SourceRule{Count: tc.count}, infected: n}
			sources, _, threshold := cut.apply(res.Scores)
			if tc.sources != nil {
				require.Equal(t, tc.sources, sources)
			}
			votes := namedFraction(tc.x, tc.grad, tc.rr, voteAt(cut, threshold, sources, res.Mean, tc.rr, nil), nil)
			require.InDeltaSlice(t, tc.want, votes, 1e-12)
		})
	}
	// Under the threshold rule the cut is delta, with each restart's own
	// tie-break.
	require.Equal(t, restartVote{at: 0.4, tieBreak: true}, voteAt(sourceCut{delta: 0.4}, 0.4, []int{1}, []float64{0, 1}, reranking{}, nil))
}
