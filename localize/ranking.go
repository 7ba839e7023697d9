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
	var isSource []bool
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
		isSource = growBools(isSource, len(s))
		for _, v := range p.Sources {
			if v < 0 || v >= len(s) {
				panic(fmt.Sprintf("localize: ChooseRanking: cascade %d: source %d outside 0..%d", c, v, len(s)-1))
			}
			isSource[v] = true
		}
		a := ROCAUC(s, isSource)
		if math.IsNaN(a) {
			continue // every node or no node a source: no ranking to judge
		}
		adjusted = append(adjusted[:0], s...)
		InfectedFirst.apply(adjusted, y)
		b := ROCAUC(adjusted, isSource)
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
