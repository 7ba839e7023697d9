package eval

import (
	"context"
	"fmt"
	"math"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

func init() { Register("lpsi", newLPSI) }

// lpsiAlphas is the validation grid for LPSI's alpha.
var lpsiAlphas = []float64{0.1, 0.3, 0.5, 0.7, 0.9, 0.95}

// lpsi is label propagation based source identification (Wang et al., AAAI
// 2017). With labels l_v = 2y_v - 1 (+1 infected, -1 not) and
// S = D^-1/2 A D^-1/2 it iterates
//
//	g <- alpha S g + (1 - alpha) l
//
// from g = l until max_v |Δg_v| < tol (the fixed point is
// (1-alpha)(I - alpha S)^-1 l, reached without forming the inverse). The
// predicted sources are the infected nodes whose g exceeds every
// neighbour's. The scores are g rescaled to [0,1], plus 1 for infected
// nodes: LPSI only ever names infected nodes, so its ranking puts every
// infected node above every uninfected one, by g within each group. alpha
// is chosen on
// validation from lpsiAlphas by mean F1 unless given as "alpha".
type lpsi struct {
	env     Env
	g       *graph.Graph
	alpha   float64
	fixed   bool
	tol     float64
	maxIter int
	// w[a] = 1/sqrt(d_u d_v) for arc a = u->v of the CSR
	w []float64
}

func newLPSI(env Env) (Method, error) {
	p := newParams("lpsi", env.Params)
	m := &lpsi{env: env, alpha: p.float("alpha", 0), tol: p.float("tol", 1e-6), maxIter: p.int("max_iter", 1000)}
	if err := p.done(); err != nil {
		return nil, err
	}
	if _, ok := env.Params["alpha"]; ok {
		if !(m.alpha > 0 && m.alpha < 1) {
			return nil, fmt.Errorf("%w lpsi.alpha=%g: want 0 < alpha < 1", ErrBadParam, m.alpha)
		}
		m.fixed = true
	}
	if !(m.tol > 0) || m.maxIter < 1 {
		return nil, fmt.Errorf("%w lpsi: want tol > 0 and max_iter >= 1, got %g and %d", ErrBadParam, m.tol, m.maxIter)
	}
	return m, nil
}

func (m *lpsi) Name() string { return "lpsi" }

func (m *lpsi) Fit(ctx context.Context, g *graph.Graph, _, val []diffusion.Cascade) error {
	m.g = g
	off, to, _ := g.CSR()
	m.w = make([]float64, len(to))
	for u := 0; u < g.N(); u++ {
		for a := off[u]; a < off[u+1]; a++ {
			m.w[a] = 1 / math.Sqrt(float64(max(1, g.Degree(u)))*float64(max(1, g.Degree(to[a]))))
		}
	}
	if m.fixed {
		return nil
	}
	n := g.N()
	y := make([]float64, n)
	gv, tmp := make([]float64, n), make([]float64, n)
	best, bestF1 := lpsiAlphas[0], math.Inf(-1)
	for _, alpha := range lpsiAlphas {
		var sum float64
		for _, c := range val {
			y = observe(n, c, y)
			if err := m.propagate(ctx, y, alpha, gv, tmp); err != nil {
				return err
			}
			_, _, f1 := PRF(c.Sources, m.peaks(y, gv))
			sum += f1
		}
		if sum > bestF1+1e-12 {
			best, bestF1 = alpha, sum
		}
	}
	m.alpha = best
	m.env.Logger.Debug("lpsi alpha chosen on validation", zap.Float64("alpha", best), zap.Float64("f1", bestF1/float64(max(1, len(val)))))
	return nil
}

// propagate writes the converged g for y into gv; tmp is scratch.
func (m *lpsi) propagate(ctx context.Context, y []float64, alpha float64, gv, tmp []float64) error {
	off, to, _ := m.g.CSR()
	for i, v := range y {
		gv[i] = 2*v - 1
	}
	for it := 0; it < m.maxIter; it++ {
		if it%64 == 63 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var change float64
		for u := range gv {
			var s float64
			for a := off[u]; a < off[u+1]; a++ {
				s += m.w[a] * gv[to[a]]
			}
			tmp[u] = alpha*s + (1-alpha)*(2*y[u]-1)
			change = math.Max(change, math.Abs(tmp[u]-gv[u]))
		}
		copy(gv, tmp)
		if change < m.tol {
			break
		}
	}
	return nil
}

// peaks returns the infected nodes whose g is larger than every
// neighbour's.
func (m *lpsi) peaks(y, gv []float64) []int {
	var out []int
	for u, v := range y {
		if v < 0.5 {
			continue
		}
		nbr, _ := m.g.Out(u)
		peak := true
		for _, w := range nbr {
			if gv[w] >= gv[u] {
				peak = false
				break
			}
		}
		if peak {
			out = append(out, u)
		}
	}
	return out
}

func (m *lpsi) Localize(ctx context.Context, y []float64) (Prediction, error) {
	if m.g == nil {
		return Prediction{}, ErrNotFitted
	}
	n := m.g.N()
	if err := checkY(n, y); err != nil {
		return Prediction{}, err
	}
	gv, tmp := make([]float64, n), make([]float64, n)
	if err := m.propagate(ctx, y, m.alpha, gv, tmp); err != nil {
		return Prediction{}, err
	}
	src := m.peaks(y, gv)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range gv {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	for i, v := range gv {
		tmp[i] = 0
		if hi > lo {
			tmp[i] = (v - lo) / (hi - lo)
		}
		if y[i] >= 0.5 {
			tmp[i]++
		}
	}
	return Prediction{Scores: tmp, Sources: src}, nil
}
