package localize

import (
	"fmt"
	"math"
	"slices"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// ComponentSizeClasses are the upper bounds of the classes Calibration
// groups the infected nodes by, by the size of their infected component:
// 1, 2, 3, 4, 5, 6-10 and more than 10. Where nothing recovers and every
// infection is observed, each infected component holds at least one
// source, so the smaller a node's component the likelier it is one (a
// component of one is a lone infected node, always a source there); how
// much likelier, and whether it holds at all under recovery or lost
// events, is what Train measures on validation.
var ComponentSizeClasses = []int{1, 2, 3, 4, 5, 10}

// minCalibrationNodes is the fewest infected validation nodes a class
// needs for its own fit; a class with fewer takes the fit of all classes
// pooled, so that a handful of nodes does not decide a step function.
const minCalibrationNodes = 20

// calibrationTieBreak is the weight of the descent's score in a
// calibrated score (see Calibration): within a class the calibration is
// nondecreasing in the score, so any positive weight keeps the descent's
// order there, and a small one lets the probability decide across
// classes.
const calibrationTieBreak = 1e-3

// Calibration maps the descent's score s of a node observed infected to
// the fraction of such validation nodes that were sources, given s and the
// size class of the node's infected component (the weakly connected
// component of the infected nodes holding it; see ComponentSizeClasses):
// per class, the isotonic (pool-adjacent-violators) regression of the
// source indicator on s, a step function nondecreasing in s. A calibrated
// score is
//
//	s' = (p_c(s) + ε·s) / (1 + ε),  ε = 10⁻³,
//
// so within a class the descent's order stands and across classes the
// measured probability decides. It generalises LoneInfectedFirst, which is
// the case p = 1 for components of one and p < 1 elsewhere, and it learns
// what the deduction cannot: how often a component of two, three, ...
// nodes holds its source at the node the descent ranks highest.
type Calibration struct {
	// ComponentSizes are the classes' upper bounds, ascending; class k
	// holds components of size in (ComponentSizes[k-1], ComponentSizes[k]]
	// and the last class every larger one.
	ComponentSizes []int `json:"component_sizes"`
	// Classes holds one step function per class, len(ComponentSizes)+1.
	Classes []CalibrationSteps `json:"classes"`
}

// CalibrationSteps is a nondecreasing step function of the score: a score
// s takes Probabilities[k] for the first k with s <= Scores[k], and the last
// probability above the last score.
type CalibrationSteps struct {
	Scores        []float64 `json:"scores"`
	Probabilities []float64 `json:"probabilities"`
}

// at returns the step function's value at s.
func (st CalibrationSteps) at(s float64) float64 {
	k, _ := slices.BinarySearch(st.Scores, s)
	if k == len(st.Scores) {
		k--
	}
	return st.Probabilities[k]
}

// class returns the class index of a component of size n.
func (c *Calibration) class(n int) int {
	for k, hi := range c.ComponentSizes {
		if n <= hi {
			return k
		}
	}
	return len(c.ComponentSizes)
}

// check reports the first malformed part of c, naming its JSON field.
func (c *Calibration) check() error {
	for k, hi := range c.ComponentSizes {
		if hi < 1 || (k > 0 && hi <= c.ComponentSizes[k-1]) {
			return fmt.Errorf("calibration.component_sizes[%d]: %d, want positive and ascending", k, hi)
		}
	}
	if len(c.Classes) != len(c.ComponentSizes)+1 {
		return fmt.Errorf("calibration.classes: %d, want %d (one more than component_sizes)", len(c.Classes), len(c.ComponentSizes)+1)
	}
	for k, st := range c.Classes {
		if err := st.check(fmt.Sprintf("calibration.classes[%d]", k)); err != nil {
			return err
		}
	}
	return nil
}

// check reports the first malformed part of st, named as field.
func (st CalibrationSteps) check(field string) error {
	if len(st.Scores) == 0 || len(st.Scores) != len(st.Probabilities) {
		return fmt.Errorf("%s: %d scores and %d probabilities, want as many and at least one", field, len(st.Scores), len(st.Probabilities))
	}
	for i, s := range st.Scores {
		if math.IsNaN(s) || math.IsInf(s, 0) || (i > 0 && s <= st.Scores[i-1]) {
			return fmt.Errorf("%s.scores[%d]: %g, want finite and ascending", field, i, s)
		}
	}
	for i, p := range st.Probabilities {
		if !(p >= 0 && p <= 1) || (i > 0 && p < st.Probabilities[i-1]) {
			return fmt.Errorf("%s.probabilities[%d]: %g, want in [0, 1] and nondecreasing", field, i, p)
		}
	}
	return nil
}

// apply calibrates scores in place for observation y, sizes[v] the size of
// node v's infected component (see InfectedComponentSizes): each infected
// node's score becomes s' (see Calibration), and the uninfected nodes'
// scores are scaled by m'/m, m and m' the lowest infected score before and
// after, so a ranking that put them below every infected node still does.
func (c *Calibration) apply(scores, y []float64, sizes []int) {
	if len(scores) != len(y) || len(sizes) != len(y) {
		panic(fmt.Sprintf("localize: calibration: %d scores, %d observations, %d component sizes", len(scores), len(y), len(sizes)))
	}
	before, after := math.Inf(1), math.Inf(1)
	for v, s := range scores {
		if y[v] < 0.5 {
			continue
		}
		before = math.Min(before, s)
		scores[v] = (c.Classes[c.class(sizes[v])].at(s) + calibrationTieBreak*s) / (1 + calibrationTieBreak)
		after = math.Min(after, scores[v])
	}
	if math.IsInf(before, 1) || before <= 0 {
		return // nothing infected, or the uninfected are already at 0
	}
	for v := range scores {
		if y[v] < 0.5 {
			scores[v] *= after / before
		}
	}
}

// InfectedComponentSizes returns in dst (grown to g.N()) the size of each
// node's infected component in observation y: the weakly connected
// component, along arcs either way, of the nodes observed infected
// (y_v >= 1/2) holding it; 0 for a node observed uninfected.
func InfectedComponentSizes(g *graph.Graph, y []float64, dst []int) []int {
	if len(y) != g.N() {
		panic(fmt.Sprintf("localize: InfectedComponentSizes: %d observations for %d nodes", len(y), g.N()))
	}
	dst = InfectedComponents(g, y, dst)
	var sizes []int
	for _, c := range dst {
		if c >= 0 {
			for len(sizes) <= c {
				sizes = append(sizes, 0)
			}
			sizes[c]++
		}
	}
	for v, c := range dst {
		dst[v] = 0
		if c >= 0 {
			dst[v] = sizes[c]
		}
	}
	return dst
}

// InfectedComponents labels in dst (grown to g.N()) each node's infected
// component in observation y, the weakly connected component, along arcs
// either way, of the nodes observed infected (y_v >= 1/2) holding it, by
// 0, 1, ... in the order of their lowest node; -1 for a node observed
// uninfected. Where nothing recovers and every infection is observed,
// each holds a source: an infected node's infector is an infected
// in-neighbour, and following infectors back ends at one.
func InfectedComponents(g *graph.Graph, y []float64, dst []int) []int {
	n := g.N()
	if len(y) != n {
		panic(fmt.Sprintf("localize: InfectedComponents: %d observations for %d nodes", len(y), n))
	}
	if cap(dst) < n {
		dst = make([]int, n)
	}
	dst = dst[:n]
	for v := range dst {
		dst[v] = -1
	}
	var stack []int
	label := 0
	for v := range dst {
		if y[v] < 0.5 || dst[v] >= 0 {
			continue
		}
		stack = append(stack[:0], v)
		dst[v] = label
		for len(stack) > 0 {
			u := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out, _ := g.Out(u)
			in, _ := g.In(u)
			for _, nbrs := range [2][]int{out, in} {
				for _, w := range nbrs {
					if y[w] >= 0.5 && dst[w] < 0 {
						dst[w] = label
						stack = append(stack, w)
					}
				}
			}
		}
		label++
	}
	return dst
}

// calibrationPoint is one infected validation node: its class, score and
// whether it was a source.
type calibrationPoint struct {
	class  int
	score  float64
	source bool
}

// FitCalibration fits the calibration of the validation scores (scores[c]
// for pairs[c], ranked, lone nodes not lifted) over their infected nodes;
// nil when no validation node is infected.
func FitCalibration(g *graph.Graph, scores [][]float64, pairs []forward.Pair) *Calibration {
	return fitCalibration(calibrationPoints(g, scores, pairs, nil))
}

// calibrationPoints gathers the infected nodes of the cascades c with
// keep(c) (every cascade when keep is nil).
func calibrationPoints(g *graph.Graph, scores [][]float64, pairs []forward.Pair, keep func(c int) bool) []calibrationPoint {
	if len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: calibration: %d solves for %d pairs", len(scores), len(pairs)))
	}
	n := g.N()
	c := &Calibration{ComponentSizes: ComponentSizeClasses}
	y := make([]float64, n)
	var sizes []int
	var isSource []bool
	var pts []calibrationPoint
	for i, s := range scores {
		if keep != nil && !keep(i) {
			continue
		}
		if len(s) != n {
			panic(fmt.Sprintf("localize: calibration: cascade %d: %d scores for %d nodes", i, len(s), n))
		}
		observe(y, pairs[i].Infected)
		sizes = InfectedComponentSizes(g, y, sizes)
		isSource = growBools(isSource, n)
		for _, v := range pairs[i].Sources {
			isSource[v] = true
		}
		for v, sv := range s {
			if y[v] >= 0.5 {
				pts = append(pts, calibrationPoint{class: c.class(sizes[v]), score: sv, source: isSource[v]})
			}
		}
	}
	return pts
}

func fitCalibration(pts []calibrationPoint) *Calibration {
	if len(pts) == 0 {
		return nil
	}
	c := &Calibration{
		ComponentSizes: slices.Clone(ComponentSizeClasses),
		Classes:        make([]CalibrationSteps, len(ComponentSizeClasses)+1),
	}
	byClass := make([][]calibrationPoint, len(c.Classes))
	for _, p := range pts {
		byClass[p.class] = append(byClass[p.class], p)
	}
	pooled := isotonic(pts)
	for k, ps := range byClass {
		if len(ps) < minCalibrationNodes {
			c.Classes[k] = pooled
			continue
		}
		c.Classes[k] = isotonic(ps)
	}
	return c
}

// isotonic is the pool-adjacent-violators fit of the source indicator on
// the score: the nondecreasing step function with the least squared error,
// equal scores pooled first. pts is reordered.
func isotonic(pts []calibrationPoint) CalibrationSteps {
	slices.SortFunc(pts, func(a, b calibrationPoint) int {
		switch {
		case a.score < b.score:
			return -1
		case a.score > b.score:
			return 1
		}
		return 0
	})
	type block struct {
		sum, count, hi float64
	}
	var blocks []block
	for i := 0; i < len(pts); {
		b := block{hi: pts[i].score}
		for ; i < len(pts) && pts[i].score == b.hi; i++ {
			b.count++
			if pts[i].source {
				b.sum++
			}
		}
		blocks = append(blocks, b)
		for len(blocks) > 1 {
			last, prev := blocks[len(blocks)-1], blocks[len(blocks)-2]
			if prev.sum*last.count < last.sum*prev.count {
				break
			}
			blocks = blocks[:len(blocks)-1]
			blocks[len(blocks)-1] = block{sum: prev.sum + last.sum, count: prev.count + last.count, hi: last.hi}
		}
	}
	st := CalibrationSteps{Scores: make([]float64, len(blocks)), Probabilities: make([]float64, len(blocks))}
	for k, b := range blocks {
		st.Scores[k], st.Probabilities[k] = b.hi, b.sum/b.count
	}
	return st
}

// ChooseCalibration measures the calibration of the validation scores
// (scores[c] for pairs[c], ranked, lone nodes not lifted; cascade[c] the
// validation cascade they solved, the same for the solves of one cascade
// at several n_opt) by two-fold cross-fitting: the cascades are split by
// the parity of cascade[c], each half is calibrated by the fit of the
// other, and the mean ROC-AUC over the cascades with a ranking to judge is
// returned with the calibration fitted on them all. Fitting and measuring
// on the same cascades would flatter it; Train uses it only when the
// cross-fitted mean is strictly above the ROC-AUC it would rank with
// otherwise. A nil calibration (and NaN) means there was nothing to fit or
// judge.
func ChooseCalibration(g *graph.Graph, scores [][]float64, pairs []forward.Pair, cascade []int) (*Calibration, float64) {
	if len(cascade) != len(scores) || len(pairs) < len(scores) {
		panic(fmt.Sprintf("localize: ChooseCalibration: %d solves, %d cascade ids, %d pairs", len(scores), len(cascade), len(pairs)))
	}
	n := g.N()
	y := make([]float64, n)
	var sizes []int
	var isSource []bool
	var calibrated []float64
	sum, count := 0.0, 0
	for fold := 0; fold < 2; fold++ {
		fit := fitCalibration(calibrationPoints(g, scores, pairs, func(c int) bool { return cascade[c]%2 != fold }))
		for c, s := range scores {
			if cascade[c]%2 != fold {
				continue
			}
			isSource = growBools(isSource, n)
			for _, v := range pairs[c].Sources {
				isSource[v] = true
			}
			if math.IsNaN(ROCAUC(s, isSource)) {
				continue
			}
			if fit == nil {
				return nil, math.NaN() // one half has no infected node to learn from
			}
			observe(y, pairs[c].Infected)
			sizes = InfectedComponentSizes(g, y, sizes)
			calibrated = append(calibrated[:0], s...)
			fit.apply(calibrated, y, sizes)
			sum += ROCAUC(calibrated, isSource)
			count++
		}
	}
	if count == 0 {
		return nil, math.NaN()
	}
	return FitCalibration(g, scores, pairs), sum / float64(count)
}
