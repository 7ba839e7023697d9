package localize

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

func TestInfectedFirstApply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scores []float64
		y      []float64
		want   []float64
	}{
		{"uninfected below the lowest infected, order kept",
			[]float64{0.9, 0.2, 0.6, 0.4, 0},
			[]float64{0, 1, 0, 1, 0},
			[]float64{0.2 * 0.9 / 1.9, 0.2, 0.2 * 0.6 / 1.6, 0.4, 0}},
		{"already first: infected scores untouched",
			[]float64{0.1, 0.8, 0.05},
			[]float64{0, 1, 0},
			[]float64{0.8 * 0.1 / 1.1, 0.8, 0.8 * 0.05 / 1.05}},
		{"an infected node at 0 sends the uninfected to 0",
			[]float64{0.5, 0, 1},
			[]float64{0, 1, 1},
			[]float64{0, 0, 1}},
		{"nothing infected: unchanged",
			[]float64{0.3, 0.7},
			[]float64{0, 0},
			[]float64{0.3, 0.7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := append([]float64(nil), tc.scores...)
			InfectedFirst.apply(s, tc.y, nil)
			require.InDeltaSlice(t, tc.want, s, 1e-15)
			s = append(s[:0], tc.scores...)
			RankByScore.apply(s, tc.y, nil)
			require.Equal(t, tc.scores, s, "by score leaves the scores alone")
			// With the uninfected nodes' own scores as the prediction,
			// InfectedThenPredicted is InfectedFirst.
			s = append(s[:0], tc.scores...)
			InfectedThenPredicted.apply(s, tc.y, tc.scores)
			require.InDeltaSlice(t, tc.want, s, 1e-15)
		})
	}
	require.PanicsWithValue(t, "localize: ranking: 2 scores for 3 observations", func() {
		InfectedFirst.apply(make([]float64, 2), make([]float64, 3), nil)
	})
	require.PanicsWithValue(t, "localize: ranking infected-then-predicted: 0 predictions for 2 observations", func() {
		InfectedThenPredicted.apply(make([]float64, 2), make([]float64, 2), nil)
	})
}

// InfectedThenPredicted keeps the infected nodes' scores and orders the
// uninfected ones by the prediction, below every infected one.
func TestInfectedThenPredictedApply(t *testing.T) {
	scores := []float64{0.9, 0.2, 0.1, 0.4, 0}
	y := []float64{0, 1, 0, 1, 0}
	predicted := []float64{0.1, 0.9, 0.8, 0.99, 0.5}
	InfectedThenPredicted.apply(scores, y, predicted)
	require.InDeltaSlice(t, []float64{0.2 * 0.1 / 1.1, 0.2, 0.2 * 0.8 / 1.8, 0.4, 0.2 * 0.5 / 1.5}, scores, 1e-15)
	require.Greater(t, scores[2], scores[4])
	require.Greater(t, scores[4], scores[0])
}

func TestROCAUC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		scores   []float64
		positive []bool
		want     float64
	}{
		{"perfect", []float64{0.9, 0.1, 0.8, 0.2}, []bool{true, false, true, false}, 1},
		{"reversed", []float64{0.1, 0.9, 0.2, 0.8}, []bool{true, false, true, false}, 0},
		{"ties count a half", []float64{0.5, 0.5, 0.5}, []bool{false, true, false}, 0.5},
		{"one of two pairs", []float64{0.6, 0.9, 0.3}, []bool{true, false, false}, 0.5},
		{"no positives", []float64{0.1, 0.2}, []bool{false, false}, math.NaN()},
		{"all positives", []float64{0.1, 0.2}, []bool{true, true}, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ROCAUC(tc.scores, tc.positive)
			if math.IsNaN(tc.want) {
				require.True(t, math.IsNaN(got), "got %g", got)
				return
			}
			require.InDelta(t, tc.want, got, 1e-15)
		})
	}
	require.PanicsWithValue(t, "localize: ROCAUC: 2 scores for 1 labels", func() {
		ROCAUC([]float64{1, 2}, []bool{true})
	})
}

func TestChooseRanking(t *testing.T) {
	pair := func(sources, infected []int) forward.Pair {
		return forward.Pair{Sources: sources, Infected: infected}
	}
	in := func(scores ...[]float64) []RankingInput {
		out := make([]RankingInput, len(scores))
		for i, s := range scores {
			out[i] = RankingInput{Scores: s}
		}
		return out
	}
	// Node 0 is an uninfected non-source the descent scores high: putting
	// the infected first fixes the ranking.
	helps := in([]float64{0.9, 0.8, 0.1, 0.05})
	helpsPairs := []forward.Pair{pair([]int{1}, []int{1, 2})}
	r, means := ChooseRanking(helps, helpsPairs)
	require.Equal(t, InfectedFirst, r)
	require.Len(t, means, 2, "no predictions: InfectedThenPredicted is not a candidate")
	require.InDelta(t, 2.0/3, means[RankByScore], 1e-12)
	require.InDelta(t, 1, means[InfectedFirst], 1e-12)

	// A source the observation calls uninfected (recovered, under SIR)
	// loses by it: the descent's ranking stays.
	hurts := in([]float64{0.9, 0.3, 0.1, 0.05})
	hurtsPairs := []forward.Pair{pair([]int{0}, []int{1, 2})}
	r, means = ChooseRanking(hurts, hurtsPairs)
	require.Equal(t, RankByScore, r)
	require.InDelta(t, 1, means[RankByScore], 1e-12)
	require.InDelta(t, 1.0/3, means[InfectedFirst], 1e-12)

	// A tie puts the infected first: here every infected node is already
	// first, and the next observation's descent may not put them there.
	r, means = ChooseRanking(in([]float64{0.1, 0.8, 0.9, 0.05}), []forward.Pair{pair([]int{1}, []int{1, 2})})
	require.Equal(t, InfectedFirst, r)
	require.Equal(t, means[RankByScore], means[InfectedFirst])
	// So does a tie the uninfected nodes' scores do not decide: the
	// uninfected node 0 outscores the infected non-source 2 but not the
	// source 1.
	r, means = ChooseRanking(in([]float64{0.5, 0.8, 0.1, 0.05}), []forward.Pair{pair([]int{1}, []int{1, 2})})
	require.Equal(t, InfectedFirst, r)
	require.Equal(t, 1.0, means[RankByScore])
	require.Equal(t, 1.0, means[InfectedFirst])

	// The means are over every cascade; the scores are not changed.
	both := append(append([]RankingInput(nil), helps...), hurts...)
	r, means = ChooseRanking(both, append(append([]forward.Pair(nil), helpsPairs...), hurtsPairs...))
	require.Equal(t, RankByScore, r)
	require.InDelta(t, (2.0/3+1)/2, means[RankByScore], 1e-12)
	require.InDelta(t, (1+1.0/3)/2, means[InfectedFirst], 1e-12)
	require.Equal(t, []float64{0.9, 0.8, 0.1, 0.05}, both[0].Scores)

	// Under SIR: node 3 is a recovered source the descent scores low among
	// the uninfected but the forward model expects infected. Ordering the
	// uninfected by the prediction ranks it above the other uninfected
	// nodes 0 and 4, where the descent's scores and InfectedFirst leave it
	// last.
	recovered := []RankingInput{{Scores: []float64{0.6, 0.8, 0.3, 0.01, 0.2}, Predicted: []float64{0.1, 0.9, 0.8, 0.7, 0.2}}}
	recoveredPairs := []forward.Pair{pair([]int{1, 3}, []int{1, 2})}
	r, means = ChooseRanking(recovered, recoveredPairs)
	require.Equal(t, InfectedThenPredicted, r)
	require.InDelta(t, 3.0/6, means[RankByScore], 1e-12)
	require.InDelta(t, 3.0/6, means[InfectedFirst], 1e-12)
	require.InDelta(t, 5.0/6, means[InfectedThenPredicted], 1e-12)

	// Under SI no source is uninfected, so the prediction cannot rank
	// better than InfectedFirst; the tie keeps InfectedFirst, which needs
	// no Predict.
	si := []RankingInput{{Scores: []float64{0.9, 0.8, 0.1, 0.05}, Predicted: []float64{0.1, 0.9, 0.8, 0.7}}}
	r, means = ChooseRanking(si, helpsPairs)
	require.Equal(t, InfectedFirst, r)
	require.Equal(t, means[InfectedFirst], means[InfectedThenPredicted])

	r, means = ChooseRanking(nil, nil)
	require.Equal(t, RankByScore, r)
	require.Empty(t, means)
	require.PanicsWithValue(t, "localize: ChooseRanking: 2 solves for 1 pairs", func() {
		ChooseRanking(both, helpsPairs)
	})
	require.PanicsWithValue(t, "localize: ChooseRanking: cascade 0: source 7 outside 0..3", func() {
		ChooseRanking(helps, []forward.Pair{pair([]int{7}, []int{1})})
	})
	require.PanicsWithValue(t, "localize: ChooseRanking: cascade 0: infected node 4 outside 0..3", func() {
		ChooseRanking(helps, []forward.Pair{pair([]int{1}, []int{1, 4})})
	})
}

func TestParseRankingChoice(t *testing.T) {
	scoreOnly, err := ParseRankingChoice("auto")
	require.NoError(t, err)
	require.False(t, scoreOnly)
	scoreOnly, err = ParseRankingChoice("score")
	require.NoError(t, err)
	require.True(t, scoreOnly)
	_, err = ParseRankingChoice("infected")
	require.EqualError(t, err, `want auto or score, got "infected"`)
}

// A bundle ranking the infected first survives a write and a read, and
// Solve puts every infected node above every uninfected one, with the
// source set still the top of the ranking, under the threshold rule and a
// count rule; with InfectedThenPredicted the uninfected nodes follow
// f(Mean), which Solve reports and which matches the model's prediction.
func TestSolveWithInfectedFirst(t *testing.T) {
	p, f, _ := testProblem(12, 2, 4)
	plain := testBundle(t)
	before, err := Solve(t.Context(), plain, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.Nil(t, before.Predicted, "no prediction unless asked or needed")
	for _, ranking := range []Ranking{InfectedFirst, InfectedThenPredicted} {
		b := testBundle(t)
		b.Manifest.Ranking = ranking
		var buf bytes.Buffer
		require.NoError(t, b.Write(&buf))
		got, err := readBytes(buf.Bytes())
		require.NoError(t, err)
		require.Equal(t, ranking, got.Manifest.Ranking)
		for _, rule := range []SourceRule{{}, {Count: 3}} {
			got.Manifest.SourceRule = rule
			res, err := Solve(t.Context(), got, f, p.Y, DefaultOptions())
			require.NoError(t, err)
			require.Equal(t, ranking == InfectedThenPredicted, res.Predicted != nil)
			lowestInfected := 2.0
			for v, s := range res.Scores {
				if p.Y[v] == 1 {
					lowestInfected = min(lowestInfected, s)
					require.Equal(t, before.Scores[v], s, "an infected node's score is the descent's")
				}
			}
			order := before.Scores
			if ranking == InfectedThenPredicted {
				want, err := f.Predict(t.Context(), mat.NewDense(1, len(res.Mean), res.Mean))
				require.NoError(t, err)
				require.Equal(t, want.RawRowView(0), res.Predicted)
				order = res.Predicted
			}
			for v, s := range res.Scores {
				if p.Y[v] == 0 {
					require.Less(t, s, lowestInfected, "uninfected node %d", v)
					for u := range res.Scores {
						if p.Y[u] == 0 && order[u] < order[v] {
							require.Less(t, res.Scores[u], s, "%s: uninfected %d below %d", ranking, u, v)
						}
					}
				}
				require.Equal(t, s >= res.Threshold, slices.Contains(res.Sources, v), "node %d", v)
			}
			for i := 1; i < len(res.Sources); i++ {
				require.GreaterOrEqual(t, res.Scores[res.Sources[i-1]], res.Scores[res.Sources[i]])
			}
			if rule.Count > 0 {
				require.Len(t, res.Sources, 3)
			}
		}
	}
}

func TestLoneInfected(t *testing.T) {
	edges := []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 3, To: 2}, {From: 5, To: 6}}
	y := []float64{1, 1, 1, 0, 1, 0, 1}
	for _, tc := range []struct {
		name     string
		directed bool
		want     []bool
	}{
		// 0 and 4 have no in-arc, 6 only one from the uninfected 5; 1 and
		// 2 have an infected in-neighbour.
		{"directed: in-neighbours only", true, []bool{true, false, false, false, true, false, true}},
		// Undirected, 0 has the infected 1 beside it.
		{"undirected", false, []bool{false, false, false, false, true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New(7, edges, nil, tc.directed, false)
			stale := []bool{true, true, true, true, true, true, true, true}
			require.Equal(t, tc.want, LoneInfected(g, y, stale), "the destination is reused without stale marks")
		})
	}
	require.PanicsWithValue(t, "localize: LoneInfected: 2 observations for 7 nodes", func() {
		LoneInfected(graph.New(7, edges, nil, true, false), make([]float64, 2), nil)
	})
}

func TestLiftLone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scores []float64
		lone   []bool
		want   []float64
	}{
		{"lone above the highest other, their order kept, the rest untouched",
			[]float64{0.2, 0.9, 0.5, 0.1},
			[]bool{true, false, true, false},
			[]float64{0.9 + 0.1*1.2/2, 0.9, 0.9 + 0.1*1.5/2, 0.1}},
		{"no lone node: unchanged",
			[]float64{0.2, 0.9},
			[]bool{false, false},
			[]float64{0.2, 0.9}},
		{"only lone nodes: unchanged",
			[]float64{0.2, 0.9},
			[]bool{true, true},
			[]float64{0.2, 0.9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := append([]float64(nil), tc.scores...)
			liftLone(s, tc.lone)
			require.InDeltaSlice(t, tc.want, s, 1e-15)
			for _, v := range s {
				require.LessOrEqual(t, v, 1.0)
			}
		})
	}
	require.Panics(t, func() { liftLone(make([]float64, 3), make([]bool, 2)) })
}

func TestChooseLoneFirst(t *testing.T) {
	// A path 0 - 1 - 2 - 3 - 4 - 5: with 0, 1 and 4 infected, 4 is lone.
	g := graph.New(6, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}, {From: 3, To: 4}, {From: 4, To: 5}}, nil, false, false)
	infected := []int{0, 1, 4}
	scores := []float64{0.9, 0.6, 0.1, 0.05, 0.3, 0.0}

	// The lone source 4 ranked below the non-source 1: lifting it helps.
	lift, without, with := ChooseLoneFirst(g, [][]float64{scores}, []forward.Pair{{Sources: []int{0, 4}, Infected: infected}})
	require.True(t, lift)
	require.InDelta(t, 7.0/8, without, 1e-12) // 4 loses to 1 only
	require.InDelta(t, 1.0, with, 1e-12)

	// The lone node not a source (a stray infection, as a recovered
	// neighbour under SIR leaves): lifting it hurts, so it is not chosen.
	lift, without, with = ChooseLoneFirst(g, [][]float64{scores}, []forward.Pair{{Sources: []int{0}, Infected: infected}})
	require.False(t, lift)
	require.Greater(t, without, with)

	// Over several cascades the means are the cascades' means, counting
	// only those with a source to judge: (7/8 + 1)/2 without the lift;
	// with it the stray lone node outranks the source 0, which then beats
	// 4 of its 5 negatives, so (1 + 4/5)/2.
	lift, without, with = ChooseLoneFirst(g, [][]float64{scores, scores, scores}, []forward.Pair{
		{Sources: []int{0, 4}, Infected: infected}, {Infected: infected}, {Sources: []int{0}, Infected: infected}})
	require.False(t, lift)
	require.InDelta(t, 15.0/16, without, 1e-12)
	require.InDelta(t, 9.0/10, with, 1e-12)

	// Nothing to judge (no source): no lift.
	lift, _, _ = ChooseLoneFirst(g, [][]float64{scores}, []forward.Pair{{Infected: infected}})
	require.False(t, lift)
	require.Panics(t, func() { ChooseLoneFirst(g, [][]float64{scores, scores}, []forward.Pair{{}}) })
}

// A bundle that puts the lone infected nodes first lifts exactly those
// above every other node, after its ranking, and survives a round trip.
func TestSolveWithLoneInfectedFirst(t *testing.T) {
	p, f, _ := testProblem(12, 2, 4)
	b := testBundle(t) // a ring of 12
	b.Manifest.Ranking = InfectedFirst
	before, err := Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)

	b.Manifest.LoneInfectedFirst = true
	got, err := readBytes(encodeBundle(t, b))
	require.NoError(t, err)
	require.True(t, got.Manifest.LoneInfectedFirst)
	res, err := Solve(t.Context(), got, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	lone := LoneInfected(got.Graph, p.Y, nil)
	require.True(t, slices.Contains(lone, true), "the test observation has a lone infected node")
	lowestLone := 2.0
	for v, s := range res.Scores {
		if lone[v] {
			lowestLone = min(lowestLone, s)
		} else {
			require.Equal(t, before.Scores[v], s, "node %d is not lone: its score stands", v)
		}
	}
	for v, s := range res.Scores {
		if !lone[v] {
			require.Less(t, s, lowestLone, "node %d below every lone node", v)
		}
		require.Equal(t, s >= res.Threshold, slices.Contains(res.Sources, v), "node %d", v)
	}
}
