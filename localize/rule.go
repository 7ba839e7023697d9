package localize

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/sourcewatch/sourcewatch/forward"
)

// SourceRule is how Solve cuts the scores into the source set. The zero
// rule is the threshold, {v : score_v >= delta}. Train may choose instead,
// on the same validation solves and by the same F1, a number of
// top-scored nodes: Count of them, or Fraction of the observed infected
// nodes (rounded, at least 1). A score is mostly a vote of R restarts, so
// a threshold on it can only take R + 1 sizes of set per observation; a
// count cuts the ranking where the baselines of `eval` cut theirs.
//
// AfterLone counts K after the lone infected nodes (LoneInfected) where
// the bundle names them all as proven sources (Manifest.LoneSourcesProven):
// the set is those nodes, then the K highest-scored of the rest, K from
// the rest's infected count. Without it they fill K: an audit's graph
// with isolated nodes had two of them infected, each a proven source, and
// a count of 2 then named them and not the 151-node outbreak's source.
// A lone node is a deduction, not an estimate, so the count is left for
// what must be estimated. Train sets it with every count rule it chooses
// for such a bundle, and chooses the count on validation the same way.
type SourceRule struct {
	Count     int     `json:"count,omitempty"`
	Fraction  float64 `json:"fraction_of_infected,omitempty"`
	AfterLone bool    `json:"after_lone_infected,omitempty"`
}

// IsThreshold reports whether r is the threshold rule (the zero rule).
func (r SourceRule) IsThreshold() bool { return r == SourceRule{} }

// K is the number of nodes r predicts for an observation with infected
// infected nodes (0 for the threshold rule).
func (r SourceRule) K(infected int) int {
	switch {
	case r.Count > 0:
		return r.Count
	case r.Fraction > 0:
		return max(1, int(math.Round(r.Fraction*float64(infected))))
	}
	return 0
}

func (r SourceRule) String() string {
	if r.AfterLone && !r.IsThreshold() {
		c := r
		c.AfterLone = false
		return "the lone infected nodes, then " + c.String() + " of the rest"
	}
	switch {
	case r.Count == 1:
		return "the highest score"
	case r.Count > 0:
		return "the " + strconv.Itoa(r.Count) + " highest scores"
	case r.Fraction > 0:
		return "the highest scores, " + strconv.FormatFloat(r.Fraction, 'g', 3, 64) + " of the infected count"
	}
	return "scores >= delta"
}

// check reports a rule out of range for an n-node graph.
func (r SourceRule) check(n int) error {
	switch {
	case r.Count < 0 || r.Count > n:
		return fmt.Errorf("source_rule.count: %d outside 0..%d (the graph's nodes)", r.Count, n)
	case !(r.Fraction >= 0 && r.Fraction <= 1):
		return fmt.Errorf("source_rule.fraction_of_infected: %g outside [0, 1]", r.Fraction)
	case r.Count > 0 && r.Fraction > 0:
		return fmt.Errorf("source_rule: count and fraction_of_infected both set")
	case r.AfterLone && r.Count == 0 && r.Fraction == 0:
		return fmt.Errorf("source_rule: after_lone_infected set without a count or fraction_of_infected")
	}
	return nil
}

// sourceFractions are the fractions of the infected count ChooseSourceRule
// tries.
var sourceFractions = []float64{0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1}

// sourceCut is how Solve cuts a ranking into the source set: by rule,
// or by the threshold delta when rule is the threshold rule.
type sourceCut struct {
	rule     SourceRule
	delta    float64
	infected int // nodes observed infected (y_v >= 1/2)
	// atLeast is how many of the ranking's first nodes the set holds
	// whatever the rule says: the lone infected nodes, lifted first,
	// where the training snapshots proved each one a source
	// (Manifest.LoneSourcesProven). A rule with AfterLone counts after
	// them.
	atLeast int
}

// apply returns the source set of scores, highest score first, and the
// score that cut it: the nodes with scores >= delta and delta under the
// threshold rule; under a count rule the first K nodes of the ranking
// (descending score, ties by index: the order ChooseSourceRule scored),
// K from the infected count and never more than it (at least one), and
// the K-th score. Nodes tied with the K-th beyond it are left out, as
// validation left them out when it chose K: keeping them turned a count
// of 12 into 50 suspects where the scores of the uninfected nodes tie.
//
// Either way the set holds at least the first atLeast nodes (the proven
// lone nodes), cut then at the lower of delta and the last one's score.
// A count rule with AfterLone names them and then K of the rest, K from
// the infected count less theirs and never more than it.
//
// The cap is for observations smaller than any validation snapshot, as a
// live monitor sees early in an outbreak: twelve suspects for one
// infected node name eleven that, where nothing recovers, cannot be
// sources. Validation snapshots hold far more infected nodes than the
// counts it chooses, so ChooseSourceRule does not cap (capping there
// too let large counts pass for "every infected node" on the smaller
// snapshots and cost Karate SI's test F1 0.013).
func (c sourceCut) apply(scores []float64) ([]int, float64) {
	order := byScore(scores)
	least := min(c.atLeast, len(order))
	if c.rule.IsThreshold() {
		k := 0
		for k < len(order) && scores[order[k]] >= c.delta {
			k++
		}
		if k < least {
			return order[:least], min(c.delta, scores[order[least-1]])
		}
		return order[:k], c.delta
	}
	var k int
	if c.rule.AfterLone && least > 0 {
		rest := max(0, c.infected-least)
		k = min(least+min(c.rule.K(rest), rest), len(order))
	} else {
		k = min(c.rule.K(c.infected), len(order))
		if c.rule.Count > 0 {
			k = min(k, max(1, c.infected))
		}
	}
	k = max(k, least)
	if k == 0 {
		return nil, c.delta // no node to name
	}
	return order[:k], scores[order[k-1]]
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// countInfected is the number of nodes observed infected (y_v >= 1/2).
func countInfected(y []float64) int {
	infected := 0
	for _, v := range y {
		if v >= 0.5 {
			infected++
		}
	}
	return infected
}

// byScore returns the nodes by descending score, ties by index.
func byScore(scores []float64) []int {
	order := make([]int, len(scores))
	for v := range order {
		order[v] = v
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	return order
}

// ChooseSourceRule returns the count rule (a Count up to the largest
// infected count, or a Fraction of sourceFractions) with the highest mean
// F1 of its set against the pairs' true sources, given each validation
// cascade's scores, and that rule's F1 per cascade. Ties go to the smaller
// count, then to a count over a fraction.
//
// lone, when not nil, is each cascade's number of lone infected nodes,
// ranked first in its scores and named whatever the count (see
// SourceRule.AfterLone): every rule is then scored as the set of those
// and K more, K from the infected count less theirs, and the rule
// returned has AfterLone set.
func ChooseSourceRule(scores [][]float64, pairs []forward.Pair, lone []int) (SourceRule, []float64) {
	if len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: ChooseSourceRule: %d score vectors for %d pairs", len(scores), len(pairs)))
	}
	if lone != nil && len(lone) != len(scores) {
		panic(fmt.Sprintf("localize: ChooseSourceRule: %d lone counts for %d score vectors", len(lone), len(scores)))
	}
	if len(scores) == 0 {
		return SourceRule{Count: 1, AfterLone: lone != nil}, nil
	}
	maxK := 1
	for _, p := range pairs[:len(scores)] {
		maxK = max(maxK, len(p.Infected))
	}
	// hits[c][k] are the true sources among cascade c's k highest scores.
	hits := make([][]int, len(scores))
	for c, s := range scores {
		truth := make(map[int]bool, len(pairs[c].Sources))
		for _, v := range pairs[c].Sources {
			truth[v] = true
		}
		order := byScore(s)
		h := make([]int, len(order)+1)
		for i, v := range order {
			h[i+1] = h[i]
			if truth[v] {
				h[i+1]++
			}
		}
		hits[c] = h
	}
	f1s := func(r SourceRule) []float64 {
		out := make([]float64, len(scores))
		for c, h := range hits {
			infected, least := len(pairs[c].Infected), 0
			if lone != nil {
				least = min(lone[c], len(h)-1)
			}
			k := min(least+r.K(max(0, infected-least)), len(h)-1)
			if t := len(pairs[c].Sources); k > 0 && h[k] > 0 {
				out[c] = 2 * float64(h[k]) / float64(k+t)
			}
		}
		return out
	}
	candidates := make([]SourceRule, 0, maxK+len(sourceFractions))
	for k := 1; k <= maxK; k++ {
		candidates = append(candidates, SourceRule{Count: k})
	}
	for _, f := range sourceFractions {
		candidates = append(candidates, SourceRule{Fraction: f})
	}
	var best SourceRule
	var bestF1 []float64
	for _, r := range candidates {
		f := f1s(r)
		if bestF1 == nil || mean(f) > mean(bestF1)+1e-12 {
			best, bestF1 = r, f
		}
	}
	best.AfterLone = lone != nil
	return best, bestF1
}
