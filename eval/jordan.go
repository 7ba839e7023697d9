package eval

import (
	"context"
	"fmt"
	"math"
)

func init() {
	Register("jordan", newJordan)
	Register("ojc", newOJC)
}

// bfsFrom writes hop distances from s along the arcs of (off, to) into
// dist (-1 unreachable), visiting only nodes with allow[v] when allow is
// not nil. queue is scratch of capacity n.
func bfsFrom(off, to []int, s int, allow []bool, dist, queue []int) {
	for i := range dist {
		dist[i] = -1
	}
	dist[s] = 0
	queue = append(queue[:0], s)
	for head := 0; head < len(queue); head++ {
		u := queue[head]
		for _, v := range to[off[u]:off[u+1]] {
			if dist[v] == -1 && (allow == nil || allow[v]) {
				dist[v] = dist[u] + 1
				queue = append(queue, v)
			}
		}
	}
}

// newJordan is the Jordan center: the infected node minimising its largest
// hop distance to an infected node. Scores are -ecc(v) with
// ecc(v) = max_{i infected} d(v, i) over the whole graph (an unreachable
// infected node counts as n hops) for infected v, and -(n+1) for uninfected
// nodes, below every infected one; the top k are the predicted sources, k chosen on validation unless given as "k" (k = 1 is
// the classical single Jordan center).
func newJordan(env Env) (Method, error) {
	p := newParams("jordan", env.Params)
	m := &rankMethod{name: "jordan", env: env, usesY: true, fixed: p.count("k", 0)}
	if err := p.done(); err != nil {
		return nil, err
	}
	if m.fixed < 0 {
		return nil, fmt.Errorf("%w jordan.k=%d: want k >= 1", ErrBadParam, m.fixed)
	}
	var dist, queue []int
	m.rank = m.byScore(func(ctx context.Context, y []float64, infected []int, scores []float64) error {
		n := m.g.N()
		if len(dist) != n {
			dist, queue = make([]int, n), make([]int, 0, n)
		}
		for i, v := range y {
			scores[i] = 0
			if v < 0.5 {
				scores[i] = -float64(n + 1)
			}
		}
		// d(v, i) is a path v -> i, so search backwards from i.
		off, from, _ := m.g.InCSR()
		for k, i := range infected {
			if k%32 == 31 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			bfsFrom(off, from, i, nil, dist, queue)
			for _, v := range infected {
				d := dist[v]
				if d < 0 {
					d = n
				}
				scores[v] = math.Min(scores[v], -float64(d))
			}
		}
		return nil
	})
	return m, nil
}

// newOJC is the optimal Jordan cover (Zhu, Chen and Ying, AAAI 2017): the k
// infected nodes minimising the largest distance from any infected node to
// its nearest chosen node, distances measured inside the infected subgraph
// (a spread travels through infected nodes). It is built greedily: each
// step adds the infected node that most improves (uncovered count, cover
// radius, total distance), in that order; the first k picks are the
// prediction, k chosen on validation up to "max_k" (default 50, which
// bounds the O(|I|^2) cost per pick) unless given as "k". The scores are
// 1/(1 + e_v), e_v the eccentricity of infected node v within its infected
// component (0 for uninfected nodes); they do not depend on k.
//
// Simplification: the paper's candidate selection by a radius search with
// its sample-path argument is replaced by this plain greedy cover.
func newOJC(env Env) (Method, error) {
	p := newParams("ojc", env.Params)
	m := &rankMethod{name: "ojc", env: env, usesY: true, fixed: p.count("k", 0), maxK: p.int("max_k", 50)}
	if err := p.done(); err != nil {
		return nil, err
	}
	if m.fixed < 0 || m.maxK < 1 {
		return nil, fmt.Errorf("%w ojc: want k >= 0 and max_k >= 1, got %d and %d", ErrBadParam, m.fixed, m.maxK)
	}
	var dist, queue, picks []int
	var allow []bool
	m.rank = func(ctx context.Context, _ []float64, infected []int, maxPicks int, scores []float64) ([]int, error) {
		n := m.g.N()
		if len(dist) != n {
			dist, queue, allow = make([]int, n), make([]int, 0, n), make([]bool, n)
		}
		for i := range scores {
			scores[i] = 0
			allow[i] = false
		}
		ni := len(infected)
		for _, v := range infected {
			allow[v] = true
		}
		const inf = math.MaxInt32
		// D[a*ni+b] = d(infected[a] -> infected[b]) inside the infected subgraph
		D := make([]int32, ni*ni)
		off, to, _ := m.g.CSR()
		for a, s := range infected {
			if a%32 == 31 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			bfsFrom(off, to, s, allow, dist, queue)
			ecc := 0
			row := D[a*ni : (a+1)*ni]
			for b, t := range infected {
				if d := dist[t]; d >= 0 {
					row[b] = int32(d)
					ecc = max(ecc, d)
				} else {
					row[b] = inf
				}
			}
			scores[s] = 1 / (1 + float64(ecc))
		}
		// greedy cover; cur[b] = distance from the picks to infected[b]
		cur := make([]int32, ni)
		for b := range cur {
			cur[b] = inf
		}
		picked := make([]bool, ni)
		picks = picks[:0]
		for len(picks) < min(maxPicks, ni) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			best := -1
			var bu, br, bs int64
			for a := 0; a < ni; a++ {
				if picked[a] {
					continue
				}
				var unc, rad, sum int64
				row := D[a*ni : (a+1)*ni]
				for b, d := range row {
					// a cover is reached from its picks: use d(a -> b)
					d = min(d, cur[b])
					if d == inf {
						unc++
						continue
					}
					rad = max(rad, int64(d))
					sum += int64(d)
				}
				if best < 0 || unc < bu || (unc == bu && (rad < br || (rad == br && (sum < bs ||
					(sum == bs && m.rk.tie[infected[a]] < m.rk.tie[infected[best]]))))) {
					best, bu, br, bs = a, unc, rad, sum
				}
			}
			picked[best] = true
			picks = append(picks, infected[best])
			row := D[best*ni : (best+1)*ni]
			for b, d := range row {
				cur[b] = min(cur[b], d)
			}
		}
		return picks, nil
	}
	return m, nil
}
