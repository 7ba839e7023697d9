package localize

import (
	"fmt"

	"github.com/sourcewatch/sourcewatch/forward"
)

// SourceChance maps a node's score, as Solve reports it with every one of
// the bundle's ranking rules applied, to the chance that the node is a
// source: per class of node, observed infected or not, the isotonic
// (pool-adjacent-violators) regression of the source indicator on the
// score over the nodes of cascades solved by the finished bundle
// (FitSourceChance; Train's TrainConfig.ChancePairs, or else its
// validation cascades). For a node v of class c with score s_v,
//
//	chance_v = p_c(s_v),  p_c nondecreasing,
//
// the fraction of those nodes of its class with a score like its own that
// were sources. Result.Probability, the share of restarts that name a
// node, says how steady the descent is, not how often it is right (on
// development cascades of the four graphs with uniform sources, the
// nodes it gave 0.8 or more were sources 25-37% of the time); the chance
// is that measured rate. The regression keeps each class's total, so over the cascades it
// was fitted on the chances sum to the number of sources, and sum_v
// chance_v estimates an observation's source count. Where every infected
// component holds a source (Manifest.NamesInfectedComponents), Solve
// raises a component's chances to sum to at least 1 (floorComponents).
type SourceChance struct {
	Infected   CalibrationSteps `json:"infected"`
	Uninfected CalibrationSteps `json:"uninfected"`
}

// FitSourceChance fits the chance of the final scores (scores[c] for
// pairs[c], as Solve returned them); nil when there are none. A class no
// node fell in takes the fit of both pooled.
func FitSourceChance(scores [][]float64, pairs []forward.Pair) *SourceChance {
	if len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: source chance: %d solves for %d pairs", len(scores), len(pairs)))
	}
	var infected, uninfected []calibrationPoint
	var y []float64
	var isSource []bool
	for i, s := range scores {
		n := len(s)
		if cap(y) < n {
			y = make([]float64, n)
		}
		y = y[:n]
		observe(y, pairs[i].Infected)
		isSource = growBools(isSource, n)
		for _, v := range pairs[i].Sources {
			isSource[v] = true
		}
		for v, sv := range s {
			p := calibrationPoint{score: sv, source: isSource[v]}
			if y[v] >= 0.5 {
				infected = append(infected, p)
			} else {
				uninfected = append(uninfected, p)
			}
		}
	}
	switch {
	case len(infected) == 0 && len(uninfected) == 0:
		return nil
	case len(infected) == 0 || len(uninfected) == 0:
		pooled := isotonic(append(infected, uninfected...))
		return &SourceChance{Infected: pooled, Uninfected: pooled}
	}
	return &SourceChance{Infected: isotonic(infected), Uninfected: isotonic(uninfected)}
}

// ExpectedSources returns the sum of an observation's chances, the
// number of sources they expect it to have; nil for nil chances (a
// bundle without a SourceChance).
func ExpectedSources(chance []float64) *float64 {
	if chance == nil {
		return nil
	}
	var sum float64
	for _, c := range chance {
		sum += c
	}
	return &sum
}

// apply writes into dst (grown to len(scores)) each node's chance for
// observation y.
func (sc *SourceChance) apply(dst, scores, y []float64) []float64 {
	if len(y) != len(scores) {
		panic(fmt.Sprintf("localize: source chance: %d scores, %d observations", len(scores), len(y)))
	}
	if cap(dst) < len(scores) {
		dst = make([]float64, len(scores))
	}
	dst = dst[:len(scores)]
	for v, s := range scores {
		if y[v] >= 0.5 {
			dst[v] = sc.Infected.at(s)
		} else {
			dst[v] = sc.Uninfected.at(s)
		}
	}
	return dst
}

// floorComponents raises in place, for each infected component of comp
// (InfectedComponents' labels) whose chances sum to less than 1, its
// nodes' chances to sum to 1: where nothing recovers and every infection
// is observed (Manifest.NamesInfectedComponents), every infected
// component holds a source, so an expected count below 1 there is the
// fit read outside what it saw (an outbreak smaller than the training
// ones, whose scores it never met). The chances are scaled by 1/sum, which
// keeps their order and leaves each at most 1, or where they are all 0
// shared by score (equally where the scores are all 0 too).
func floorComponents(chance, scores []float64, comp []int) {
	if len(chance) != len(comp) || len(scores) != len(comp) {
		panic(fmt.Sprintf("localize: source chance floor: %d chances, %d scores, %d labels", len(chance), len(scores), len(comp)))
	}
	k := 0
	for _, c := range comp {
		k = max(k, c+1)
	}
	if k == 0 {
		return
	}
	chanceSum, scoreSum, size := make([]float64, k), make([]float64, k), make([]float64, k)
	for v, c := range comp {
		if c >= 0 {
			chanceSum[c] += chance[v]
			scoreSum[c] += scores[v]
			size[c]++
		}
	}
	for v, c := range comp {
		switch {
		case c < 0 || chanceSum[c] >= 1:
		case chanceSum[c] > 0:
			chance[v] = min(chance[v]/chanceSum[c], 1)
		case scoreSum[c] > 0:
			chance[v] = scores[v] / scoreSum[c]
		default:
			chance[v] = 1 / size[c]
		}
	}
}

// check reports the first malformed part of sc, naming its JSON field.
func (sc *SourceChance) check() error {
	if err := sc.Infected.check("source_chance.infected"); err != nil {
		return err
	}
	return sc.Uninfected.check("source_chance.uninfected")
}
