package localize

import (
	"fmt"
	"math"
	"slices"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
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

// rankings are the rankings Train chooses from, simplest first.
var rankings = []Ranking{RankByScore, InfectedFirst, InfectedThenPredicted}

// preference is the order in which ChooseRanking lets a ranking displace
// the one it holds: only by ranking strictly better on validation.
// InfectedFirst comes first because a validation tie does not make the
// rankings the same: it can mean only that no source was outscored by an
// uninfected node in those cascades, and where the observation proves the
// sources infected (SI, IC) putting the infected first is a deduction,
// which the descent's scores can break on the next observation (a dense
// graph's bundle whose validation tied all three named an uninfected node
// for a one-node outbreak).
var preference = []Ranking{InfectedFirst, RankByScore, InfectedThenPredicted}

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
// validation solves (in[c] for pairs[c]), with each ranking's mean
// (InfectedThenPredicted's only when every input has Predicted). Ties go
// to InfectedFirst, then RankByScore: a ranking displaces another only
// when strictly higher. With no cascade to judge (none, or every one with
// no source or all sources) it returns RankByScore and no means.
func ChooseRanking(in []RankingInput, pairs []forward.Pair) (Ranking, map[Ranking]float64) {
	if len(pairs) < len(in) {
		panic(fmt.Sprintf("localize: ChooseRanking: %d solves for %d pairs", len(in), len(pairs)))
	}
	candidates := rankings
	for _, s := range in {
		if s.Predicted == nil {
			candidates = rankings[:2] // RankByScore, InfectedFirst
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
	for k, r := range candidates {
		means[r] = sums[k] / float64(count)
	}
	best := preference[0]
	for _, r := range preference[1:] {
		if mean, ok := means[r]; ok && mean > means[best]+1e-12 {
			best = r
		}
	}
	return best, means
}

// LoneInfected marks in dst (grown to g.N()) the lone infected nodes of
// observation y: observed infected (y_v >= 1/2) with no in-neighbour
// observed infected. Where nothing recovers (SI, IC, LT) and every
// infected node is observed, a node is infected only by a source's
// infection reaching it along arcs from infected nodes, so a lone infected
// node can only be a source. The forward term does not know that: it
// reads y as independent noise around f(x), where leaving a lone node
// unexplained costs at most 1 and making it a source costs the squared
// error of the infection it would then predict at its uninfected
// neighbours, so the descent often leaves it out (on Power Grid SI,
// development cascades, lone nodes are a tenth of the sources and scored
// 0.34 on average).
func LoneInfected(g *graph.Graph, y []float64, dst []bool) []bool {
	n := g.N()
	if len(y) != n {
		panic(fmt.Sprintf("localize: LoneInfected: %d observations for %d nodes", len(y), n))
	}
	dst = growBools(dst, n)
	for v := range dst {
		dst[v] = false
		if y[v] < 0.5 {
			continue
		}
		lone := true
		in, _ := g.In(v)
		for _, u := range in {
			if y[u] >= 0.5 {
				lone = false
				break
			}
		}
		dst[v] = lone
	}
	return dst
}

// liftLone raises the score of every lone node (lone[v]) above every
// other node's, keeping the order among the lone nodes: with M the highest
// score of the others,
//
//	s' = M + (1 - M)·(1 + s)/2,
//
// in (M, 1] for scores in [0, 1] (Result.Scores' tie-break keeps M below
// 1). The other scores do not change.
func liftLone(scores []float64, lone []bool) {
	if len(lone) != len(scores) {
		panic(fmt.Sprintf("localize: liftLone: %d marks for %d scores", len(lone), len(scores)))
	}
	m, found := math.Inf(-1), false
	for v, s := range scores {
		if lone[v] {
			found = true
		} else {
			m = math.Max(m, s)
		}
	}
	if !found || math.IsInf(m, -1) {
		return // no lone node, or nothing but lone nodes: the order stands
	}
	for v, s := range scores {
		if lone[v] {
			scores[v] = m + (1-m)*(1+s)/2
		}
	}
}

// ChooseLoneFirst reports whether lifting the lone infected nodes (see
// LoneInfected) above every other node raises the mean ROC-AUC of the
// validation scores (scores[c] for pairs[c], already ranked), with the mean
// without and with the lift; like ChooseRanking it counts only cascades
// with a ranking to judge (with none, both means are NaN), and the lift
// must be strictly better. Under SIR
// a lone node may have been infected by a neighbour that has since
// recovered, which is why this is a choice on validation and not a rule.
func ChooseLoneFirst(g *graph.Graph, scores [][]float64, pairs []forward.Pair) (lift bool, without, with float64) {
	if len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: ChooseLoneFirst: %d solves for %d pairs", len(scores), len(pairs)))
	}
	n := g.N()
	y := make([]float64, n)
	var isSource, lone []bool
	var lifted []float64
	count := 0
	for c, s := range scores {
		if len(s) != n {
			panic(fmt.Sprintf("localize: ChooseLoneFirst: cascade %d: %d scores for %d nodes", c, len(s), n))
		}
		observe(y, pairs[c].Infected)
		isSource = growBools(isSource, n)
		for _, v := range pairs[c].Sources {
			isSource[v] = true
		}
		base := ROCAUC(s, isSource)
		if math.IsNaN(base) {
			continue
		}
		lone = LoneInfected(g, y, lone)
		lifted = append(lifted[:0], s...)
		liftLone(lifted, lone)
		without += base
		with += ROCAUC(lifted, isSource)
		count++
	}
	if count == 0 {
		return false, math.NaN(), math.NaN()
	}
	without, with = without/float64(count), with/float64(count)
	return with > without+1e-12, without, with
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
