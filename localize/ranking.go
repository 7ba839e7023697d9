package localize

import (
	"fmt"
	"math"
	"slices"

	"github.com/sourcewatch/sourcewatch/forward"
)

// Ranking is how Solve orders the nodes the observation calls uninfected
// against the infected ones. The zero ranking leaves the scores as the
// descent made them. Train may choose InfectedFirst or
// InfectedThenPredicted on validation.
type Ranking string

const (
	// RankByScore keeps the descent's scores.
	RankByScore Ranking = ""
	// InfectedFirst ranks every node observed infected (y_v >= 1/2) above
	// every node observed uninfected, keeping the order within each group
	// and the infected nodes' scores: with m the lowest score of an
	// infected node, an uninfected node's score s becomes
	//
	//	s' = m·s / (1 + s),
	//
	// below m/2 for scores in [0, 1] (0, a tie, when m is 0, which
	// Result.Scores' tie-break never gives). Under SI (and IC) a source is infected when observed, so
	// this cannot lower any observation's ROC-AUC there; the descent
	// itself may still use uninfected nodes to explain y (restricting x to
	// the infected nodes in the descent ranks worse, see the README).
	InfectedFirst Ranking = "infected-first"
	// InfectedThenPredicted ranks as InfectedFirst does, but orders the
	// uninfected nodes by the forward model's infection probability at the
	// mean of the restarts' final x, p_v = f(xbar)_v, instead of by their
	// descent scores: s' = m·p/(1 + p). An uninfected node the model
	// expects infected has most likely recovered (under SIR the observation
	// marks only the infected), and the earliest infected, the sources
	// first, are the likeliest to have. The descent itself rarely names a
	// recovered source (its own output would then say it is infected), so
	// its scores barely order them. Under SI no source is uninfected and
	// this ranks exactly as InfectedFirst. It costs Solve one Predict.
	InfectedThenPredicted Ranking = "infected-then-predicted"
)

// rankings are the rankings Train chooses from, simplest first: a later
// one is chosen only when it ranks strictly better on validation.
var rankings = []Ranking{RankByScore, InfectedFirst, InfectedThenPredicted}

// Rankings returns the rankings Train chooses from, simplest first.
func Rankings() []Ranking { return slices.Clone(rankings) }

// needsPrediction is whether apply needs f(xbar).
func (r Ranking) needsPrediction() bool { return r == InfectedThenPredicted }

func (r Ranking) String() string {
	if r == RankByScore {
		return "by score"
	}
	return string(r)
}

// check reports a ranking this version does not know.
func (r Ranking) check() error {
	switch r {
	case RankByScore, InfectedFirst, InfectedThenPredicted:
		return nil
	}
	return fmt.Errorf("ranking: %q, want %q, %q or absent", string(r), InfectedFirst, InfectedThenPredicted)
}

// apply reorders scores in place for observation y; predicted is f(xbar),
// which only InfectedThenPredicted reads.
func (r Ranking) apply(scores, y, predicted []float64) {
	if r == RankByScore {
		return
	}
	if len(scores) != len(y) {
		panic(fmt.Sprintf("localize: ranking: %d scores for %d observations", len(scores), len(y)))
	}
	by := scores
	if r.needsPrediction() {
		if len(predicted) != len(y) {
			panic(fmt.Sprintf("localize: ranking %s: %d predictions for %d observations", r, len(predicted), len(y)))
		}
		by = predicted
	}
	m := math.Inf(1)
	for v, s := range scores {
		if y[v] >= 0.5 {
			m = math.Min(m, s)
		}
	}
	if math.IsInf(m, 1) {
		return // nothing observed infected: nothing to put first
	}
	for v, s := range by {
		if y[v] < 0.5 {
			scores[v] = m * s / (1 + s)
		}
	}
}

// RankingInput is one validation solve as ChooseRanking reads it: the
// descent's scores and, for InfectedThenPredicted, f(xbar) (nil leaves
// that ranking out).
type RankingInput struct {
	Scores, Predicted []float64
}

// ChooseRanking returns the ranking with the highest mean ROC-AUC over the
// validation solves (in[c] for pairs[c]), a later one of RankByScore,
// InfectedFirst and InfectedThenPredicted only when strictly higher than
// every earlier one, with each ranking's mean (InfectedThenPredicted's
// only when every input has Predicted). With no cascade to judge (none,
// or every one with no source or all sources) it returns RankByScore and
// no means.
func ChooseRanking(in []RankingInput, pairs []forward.Pair) (Ranking, map[Ranking]float64) {
	if len(pairs) < len(in) {
		panic(fmt.Sprintf("localize: ChooseRanking: %d solves for %d pairs", len(in), len(pairs)))
	}
	candidates := rankings
	for _, s := range in {
		if s.Predicted == nil {
			candidates = rankings[:2]
			break
		}
	}
	sums := make([]float64, len(candidates))
	count := 0
	adjusted, y := []float64(nil), []float64(nil)
	var isSource []bool
	for c, s := range in {
		p := pairs[c]
		n := len(s.Scores)
		y = growTo(y, n)
		clear(y)
		for _, v := range p.Infected {
			if v < 0 || v >= n {
				panic(fmt.Sprintf("localize: ChooseRanking: cascade %d: infected node %d outside 0..%d", c, v, n-1))
			}
			y[v] = 1
		}
		isSource = growBools(isSource, n)
		for _, v := range p.Sources {
			if v < 0 || v >= n {
				panic(fmt.Sprintf("localize: ChooseRanking: cascade %d: source %d outside 0..%d", c, v, n-1))
			}
			isSource[v] = true
		}
		if math.IsNaN(ROCAUC(s.Scores, isSource)) {
			continue // every node or no node a source: no ranking to judge
		}
		for k, r := range candidates {
			adjusted = append(adjusted[:0], s.Scores...)
			r.apply(adjusted, y, s.Predicted)
			sums[k] += ROCAUC(adjusted, isSource)
		}
		count++
	}
	if count == 0 {
		return RankByScore, nil
	}
	means := make(map[Ranking]float64, len(candidates))
	best := RankByScore
	for k, r := range candidates {
		means[r] = sums[k] / float64(count)
		if means[r] > means[best]+1e-12 {
			best = r
		}
	}
	return best, means
}

// ROCAUC is the probability that a positive node outscores a negative
// one, ties counting one half: the Mann-Whitney statistic over average
// ranks,
//
//	(Σ_{v positive} rank_v - P(P+1)/2) / (P N),
//
// with P positives and N negatives. It is NaN when either class is empty
// and panics if the lengths differ. eval's AUC is this function.
func ROCAUC(scores []float64, positive []bool) float64 {
	if len(scores) != len(positive) {
		panic(fmt.Sprintf("localize: ROCAUC: %d scores for %d labels", len(scores), len(positive)))
	}
	rank := averageRanks(scores)
	var sum float64
	pos := 0
	for v, isPos := range positive {
		if isPos {
			sum += rank[v]
			pos++
		}
	}
	neg := len(scores) - pos
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (sum - float64(pos)*float64(pos+1)/2) / (float64(pos) * float64(neg))
}

// growBools returns s with length n, all false, reusing its memory when
// it can.
func growBools(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// growTo returns s with length n, reusing its memory when it can.
func growTo(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// ParseRankingChoice reads how Train may rank: "auto" (the descent's
// ranking or InfectedFirst, by validation ROC-AUC) or "score" (the
// descent's; TrainConfig.ScoreRankingOnly).
func ParseRankingChoice(name string) (scoreOnly bool, err error) {
	switch name {
	case "auto":
		return false, nil
	case "score":
		return true, nil
	}
	return false, fmt.Errorf("want auto or score, got %q", name)
}
