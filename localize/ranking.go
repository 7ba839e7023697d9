package localize

import (
	"fmt"
	"math"

	"github.com/sourcewatch/sourcewatch/forward"
)

// Ranking is how Solve orders the nodes the observation calls uninfected
// against the infected ones. The zero ranking leaves the scores as the
// descent made them. Train may choose InfectedFirst on validation.
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
)

func (r Ranking) String() string {
	if r == RankByScore {
		return "by score"
	}
	return string(r)
}

// check reports a ranking this version does not know.
func (r Ranking) check() error {
	switch r {
	case RankByScore, InfectedFirst:
		return nil
	}
	return fmt.Errorf("ranking: %q, want %q or absent", string(r), InfectedFirst)
}

// apply reorders scores in place for observation y.
func (r Ranking) apply(scores, y []float64) {
	if r != InfectedFirst {
		return
	}
	if len(scores) != len(y) {
		panic(fmt.Sprintf("localize: ranking: %d scores for %d observations", len(scores), len(y)))
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
	for v, s := range scores {
		if y[v] < 0.5 {
			scores[v] = m * s / (1 + s)
		}
	}
}

// ChooseRanking returns InfectedFirst when it raises the mean ROC-AUC of
// the validation cascades' scores (scores[c] for pairs[c]) over the
// descent's own, and RankByScore otherwise (ties too), with both means.
func ChooseRanking(scores [][]float64, pairs []forward.Pair) (r Ranking, byScore, infectedFirst float64) {
	if len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: ChooseRanking: %d score vectors for %d pairs", len(scores), len(pairs)))
	}
	if len(scores) == 0 {
		return RankByScore, math.NaN(), math.NaN()
	}
	var sumBy, sumFirst float64
	count := 0
	adjusted, y := []float64(nil), []float64(nil)
	for c, s := range scores {
		p := pairs[c]
		y = growTo(y, len(s))
		clear(y)
		for _, v := range p.Infected {
			if v < 0 || v >= len(y) {
				panic(fmt.Sprintf("localize: ChooseRanking: cascade %d: infected node %d outside 0..%d", c, v, len(y)-1))
			}
			y[v] = 1
		}
		a, ok := rocAUC(s, p.Sources)
		if !ok {
			continue // every node or no node a source: no ranking to judge
		}
		adjusted = append(adjusted[:0], s...)
		InfectedFirst.apply(adjusted, y)
		b, _ := rocAUC(adjusted, p.Sources)
		sumBy += a
		sumFirst += b
		count++
	}
	if count == 0 {
		return RankByScore, math.NaN(), math.NaN()
	}
	byScore, infectedFirst = sumBy/float64(count), sumFirst/float64(count)
	if infectedFirst > byScore+1e-12 {
		return InfectedFirst, byScore, infectedFirst
	}
	return RankByScore, byScore, infectedFirst
}

// rocAUC is the probability that a source outscores a non-source, ties
// counting one half (the Mann-Whitney statistic over average ranks); ok is
// false when either class is empty.
func rocAUC(scores []float64, sources []int) (auc float64, ok bool) {
	pos := 0
	isSource := make([]bool, len(scores))
	for _, v := range sources {
		if v >= 0 && v < len(scores) && !isSource[v] {
			isSource[v] = true
			pos++
		}
	}
	neg := len(scores) - pos
	if pos == 0 || neg == 0 {
		return 0, false
	}
	rank := averageRanks(scores)
	var sum float64
	for v, src := range isSource {
		if src {
			sum += rank[v]
		}
	}
	return (sum - float64(pos)*float64(pos+1)/2) / (float64(pos) * float64(neg)), true
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
