package localize

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"
)

func TestAverageRanks(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want []float64
	}{
		{"distinct", []float64{0.3, -1, 2}, []float64{2, 1, 3}},
		{"ties share their mean", []float64{5, 1, 5, 1, 5}, []float64{4, 1.5, 4, 1.5, 4}},
		{"all tied", []float64{0, 0, 0}, []float64{2, 2, 2}},
		{"empty", nil, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, averageRanks(tc.in))
		})
	}
}

func TestSummarizeBreaksTiesByGradient(t *testing.T) {
	// Two restarts over five nodes. Nodes 0 and 1 end at 1 in both, nodes
	// 2, 3, 4 at 0 in both; node 3's objective falls fastest as it grows
	// (most negative gradient), node 1's is pulled down hardest among the
	// ones.
	x := mat.NewDense(2, 5, []float64{
		1, 1, 0, 0, 0,
		1, 1, 0, 0, 0,
	})
	grad := mat.NewDense(2, 5, []float64{
		-1, 0.5, 2, -3, 0.2,
		-2, 0.1, 1, -1, 0.4,
	})
	res := summarize(x, grad, 0.5)
	require.Equal(t, []float64{1, 1, 0, 0, 0}, res.Mean)
	require.Equal(t, []float64{1, 1, 0, 0, 0}, res.Probability)
	require.Equal(t, []int{0, 1}, res.Sources)
	// Within each tie, the order is that of -g; the tie-break never lifts
	// a node over one with a larger mean.
	require.Greater(t, res.Scores[0], res.Scores[1])
	require.Greater(t, res.Scores[3], res.Scores[4])
	require.Greater(t, res.Scores[4], res.Scores[2])
	require.Greater(t, res.Scores[1], res.Scores[3])
	for v, s := range res.Scores {
		require.GreaterOrEqual(t, s, 0.0)
		require.LessOrEqual(t, s, 1.0)
		require.InDelta(t, res.Mean[v], s, tieWeight)
	}
}

func TestSummarizeSourcesAreScoresAtLeastDelta(t *testing.T) {
	// Nodes 0 and 2 sit exactly at delta = 0.5 (one restart of two); the
	// tie-break keeps node 2 (pulled up hardest) at or over delta and lets
	// node 0 fall just under it, so the set is {v : score_v >= delta}.
	x := mat.NewDense(2, 4, []float64{
		1, 0, 0, 1,
		0, 0, 1, 1,
	})
	grad := mat.NewDense(2, 4, []float64{
		5, -1, -5, 0,
		5, -1, -5, 0,
	})
	res := summarize(x, grad, 0.5)
	require.Equal(t, []float64{0.5, 0, 0.5, 1}, res.Mean)
	require.Equal(t, []int{3, 2}, res.Sources)
	for v, s := range res.Scores {
		require.Equal(t, s >= 0.5, slices.Contains(res.Sources, v), "node %d score %g", v, s)
	}
	require.Equal(t, []float64{0.5, 0, 0.5, 1}, res.Probability)
}

func TestCalibratedPriorWeight(t *testing.T) {
	for _, tc := range []struct {
		mse, want float64
	}{
		{0.15, 0.3},
		{0.5, 1},
		{0, minPriorWeight},
		{1e-9, minPriorWeight},
		{math.NaN(), 1},
		{-1, 1},
		{math.Inf(1), 1},
	} {
		require.InDelta(t, tc.want, CalibratedPriorWeight(tc.mse), 1e-12, "mse %g", tc.mse)
	}
}

func TestSolveTakesBundlePriorWeight(t *testing.T) {
	b := testBundle(t)
	b.Manifest.Solve.PriorWeight = 0.25
	p, f, _ := testProblem(12, 2, 4)
	run := func(w float64) []float64 {
		opts := DefaultOptions()
		opts.PriorWeight = w
		opts.Restarts = 3
		opts.Trace = true
		res, err := Solve(t.Context(), b, f, p.Y, opts)
		require.NoError(t, err)
		return res.Trace
	}
	require.Equal(t, run(0.25), run(0), "zero takes the bundle's weight")
	require.NotEqual(t, run(0.25), run(2), "an explicit weight wins, and the weight matters")
	b.Manifest.Solve.PriorWeight = 0
	require.Equal(t, run(1), run(0), "a bundle without a weight gets the paper's 1")
}

// Under the threshold rule a restart votes for the nodes its own x, tie-
// broken by its own gradient as Result.Scores are, puts at delta or over.
// By hand, with n = 3 and eps = 1e-3: restart 0 has every x at 0.5 and
// gradient (-1, 0, 1), so -g ranks the nodes 3, 2, 1 and scores them
// 0.4995 + 0.001·(3, 2, 1)/4 = (0.50025, 0.5, 0.49975): a cut at 0.4999
// takes nodes 0 and 1. Restart 1, x = (1, 0, 0.2) with a flat gradient,
// names node 0 alone. So the fractions are (1, 1/2, 0).
func TestNamedFractionTieBreaksEachRestartByItsGradient(t *testing.T) {
	x := mat.NewDense(2, 3, []float64{0.5, 0.5, 0.5, 1, 0, 0.2})
	grad := mat.NewDense(2, 3, []float64{-1, 0, 1, 0, 0, 0})
	got := namedFraction(x, grad, reranking{}, restartVote{at: 0.4999, tieBreak: true}, nil)
	require.InDeltaSlice(t, []float64{1, 0.5, 0}, got, 1e-12)
}
