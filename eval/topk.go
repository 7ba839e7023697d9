package eval

import (
	"context"
	"fmt"
	"math"
	"sort"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// rankMethod is the skeleton shared by methods whose answer is a score per
// node (or an ordered pick list) cut at k: the score differs per method, k
// is chosen on validation by ChooseK unless fixed by the "k" parameter.
type rankMethod struct {
	name string
	env  Env
	g    *graph.Graph
	rk   *ranker
	// usesY is false for methods that never look at y; they may not use
	// k rules that depend on the infected count.
	usesY bool
	fixed int
	rule  KRule
	// prepare, if set, runs at the start of Fit (e.g. to learn from train).
	prepare func(train []diffusion.Cascade) error
	// rank fills scores (len n) for y and returns the nodes in predicted
	// order, best first, at least maxPicks long when possible. The slice
	// may be reused by the next call.
	rank func(ctx context.Context, y []float64, infected []int, maxPicks int, scores []float64) ([]int, error)
	// alternatives, if set, replaces rank on validation when k is not
	// fixed: it returns one order per setting of the method (NetSleuth's
	// pick cap), all from one computation, in the same order every call.
	// Fit chooses the setting whose order has the highest validation F1
	// (ties to the first) and calls choose with its index.
	alternatives func(ctx context.Context, y []float64, infected []int, maxPicks int, scores []float64) ([][]int, error)
	choose       func(i int)
	// extras are the settings Fit chose, for Extras.
	extras map[string]float64
}

// Extras reports the settings chosen on validation beside k (NetSleuth's
// pick cap); nil for methods without any.
func (m *rankMethod) Extras() map[string]float64 { return m.extras }

func (m *rankMethod) Name() string { return m.name }

// byScore is the rank function for methods whose order is just their
// scores' order.
func (m *rankMethod) byScore(score func(ctx context.Context, y []float64, infected []int, scores []float64) error) func(context.Context, []float64, []int, int, []float64) ([]int, error) {
	return func(ctx context.Context, y []float64, infected []int, _ int, scores []float64) ([]int, error) {
		if err := score(ctx, y, infected, scores); err != nil {
			return nil, err
		}
		return m.rk.rank(scores), nil
	}
}

func (m *rankMethod) Fit(ctx context.Context, g *graph.Graph, train, val []diffusion.Cascade) error {
	m.g = g
	m.rk = newRanker(g.N(), m.env.Seed)
	if m.prepare != nil {
		if err := m.prepare(train); err != nil {
			return err
		}
	}
	if m.fixed > 0 {
		m.rule = KRule{Fixed: m.fixed}
		return nil
	}
	n := g.N()
	// k is tried up to the largest infected count (n for methods that
	// ignore y); rank is asked for that many nodes
	maxK := n
	if m.usesY {
		maxK = 0
		for _, c := range val {
			maxK = max(maxK, len(c.Infected))
		}
	}
	alternatives := m.alternatives
	if alternatives == nil {
		alternatives = func(ctx context.Context, y []float64, infected []int, maxPicks int, scores []float64) ([][]int, error) {
			order, err := m.rank(ctx, y, infected, maxPicks, scores)
			return [][]int{order}, err
		}
	}
	var ranked [][][]int // [setting][cascade]
	truths := make([][]int, len(val))
	var counts []int
	if m.usesY {
		counts = make([]int, len(val))
	}
	y := make([]float64, n)
	scores := make([]float64, n)
	for c, cas := range val {
		if err := ctx.Err(); err != nil {
			return err
		}
		y = observe(n, cas, y)
		orders, err := alternatives(ctx, y, cas.Infected, maxK, scores)
		if err != nil {
			return fmt.Errorf("%s: validation cascade %d: %w", m.name, c, err)
		}
		if ranked == nil {
			ranked = make([][][]int, len(orders))
			for i := range ranked {
				ranked[i] = make([][]int, len(val))
			}
		}
		if len(orders) != len(ranked) {
			panic(fmt.Sprintf("eval: %s: %d alternative orders, %d before", m.name, len(orders), len(ranked)))
		}
		for i, order := range orders {
			ranked[i][c] = append([]int(nil), order...)
		}
		truths[c] = cas.Sources
		if counts != nil {
			counts[c] = len(cas.Infected)
		}
	}
	if ranked == nil { // no validation cascades
		ranked = [][][]int{nil}
	}
	best, bestF1 := 0, math.Inf(-1)
	for i, r := range ranked {
		rule, f1 := ChooseK(r, truths, counts, maxK)
		if i == 0 || f1 > bestF1 {
			best, bestF1, m.rule = i, f1, rule
		}
	}
	if m.choose != nil {
		m.choose(best)
	}
	m.env.Logger.Debug("k chosen on validation", zap.String("method", m.name), zap.String("rule", m.rule.String()), zap.Int("setting", best))
	return nil
}

func (m *rankMethod) Localize(ctx context.Context, y []float64) (Prediction, error) {
	if m.g == nil {
		return Prediction{}, ErrNotFitted
	}
	n := m.g.N()
	if err := checkY(n, y); err != nil {
		return Prediction{}, err
	}
	infected := infectedOf(y)
	k := m.rule.K(len(infected))
	scores := make([]float64, n)
	order, err := m.rank(ctx, y, infected, k, scores)
	if err != nil {
		return Prediction{}, err
	}
	k = min(k, len(order))
	src := append([]int(nil), order[:k]...)
	sort.Ints(src)
	return Prediction{Scores: scores, Sources: src}, nil
}
