package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

func init() {
	Register("jordan", newJordan)
	registerUndirected("ojc", newOJC)
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
// hop distance to an infected node. Scores are, for infected v,
//
//	score_v = -(u(v)·(n+1) + ecc(v)),   ecc(v) = max_{i infected, reachable} d(v, i),
//
// u(v) the number of infected nodes v cannot reach (0 on a connected
// undirected graph), and -(n+1)^2 for uninfected nodes, below every
// infected one: the nodes that reach the most infected ones first, by
// eccentricity among those. (Counting an unreachable node as n hops
// instead tied every infected node wherever the infected span several
// components or no node reaches them all along the arcs, and the method
// became the infected control.) The top k are the predicted sources, k
// chosen on validation unless given as "k" (k = 1 is the classical single
// Jordan center).
func newJordan(env Env) (Method, error) {
	p := newParams("jordan", env.Params)
	m := &rankMethod{name: "jordan", env: env, usesY: true, fixed: p.count("k", 0)}
	if err := p.done(); err != nil {
		return nil, err
	}
	if m.fixed < 0 {
		return nil, fmt.Errorf("%w jordan.k=%d: want k >= 1", ErrBadParam, m.fixed)
	}
	// Scratch and components of the fitted graph, made at the first
	// cascade and reused (the cascades of a run are localized in turn).
	var dist, queue, comp []int
	var sc *eccScratch
	m.rank = m.byScore(func(ctx context.Context, y []float64, infected []int, scores []float64) error {
		n := m.g.N()
		if len(dist) != n {
			dist, queue, comp = make([]int, n), make([]int, 0, n), nil
			sc = newEccScratch(n)
		}
		for i, v := range y {
			scores[i] = 0
			if v < 0.5 {
				scores[i] = -float64(n+1) * float64(n+1)
			}
		}
		if !m.g.Directed() {
			// Per component of the graph, whose infected nodes all reach
			// each other; u(v) is the infected count outside v's.
			if comp == nil {
				comp, _ = m.g.Components()
			}
			groups := map[int][]int{}
			for _, v := range infected {
				groups[comp[v]] = append(groups[comp[v]], v)
			}
			for _, group := range groups {
				if err := eccentricities(ctx, m.g, group, scores, sc); err != nil {
					return err
				}
				for _, v := range group {
					scores[v] -= float64(len(infected)-len(group)) * float64(n+1)
				}
			}
			return nil
		}
		// d(v, i) is a path v -> i, so search backwards from i.
		off, from, _ := m.g.InCSR()
		unreached := make([]int, n)
		for k, i := range infected {
			if k%32 == 31 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			bfsFrom(off, from, i, nil, dist, queue)
			for _, v := range infected {
				if d := dist[v]; d < 0 {
					unreached[v]++
				} else {
					scores[v] = math.Min(scores[v], -float64(d))
				}
			}
		}
		for _, v := range infected {
			scores[v] -= float64(unreached[v]) * float64(n+1)
		}
		return nil
	})
	return m, nil
}

// slowOJCBytes is the size of OJC's distance matrix above which its cost
// is worth a warning: 8,192 infected nodes, a 16,000-node graph observed
// half infected (Power Grid's largest cascades hold about 2,500).
const slowOJCBytes = 1 << 28

// newOJC is the optimal Jordan cover (Zhu, Chen and Ying, AAAI 2017): the k
// infected nodes minimising the largest distance from any infected node to
// its nearest chosen node, distances measured inside the infected subgraph
// (a spread travels through infected nodes). It is built greedily: each
// step adds the infected node that most improves (uncovered count, cover
// radius, total distance), in that order; the first k picks are the
// prediction, k chosen on validation unless given as "k". At most "max_k"
// (default 50) nodes are picked, which bounds the O(|I|^2)-per-pick cost;
// a larger k continues the ranking by score after the picks. The scores are
// 1/(1 + e_v), e_v the eccentricity of infected node v within its infected
// component (0 for uninfected nodes); they do not depend on k. Needs an
// undirected graph.
//
// Simplification: the paper's candidate selection by a radius search with
// its sample-path argument is replaced by this plain greedy cover.
func newOJC(env Env) (Method, error) {
	p := newParams("ojc", env.Params)
	m := &rankMethod{name: "ojc", env: env, usesY: true, fixed: p.count("k", 0)}
	maxPicks := p.int("max_k", 50)
	if err := p.done(); err != nil {
		return nil, err
	}
	if maxPicks < 1 {
		return nil, fmt.Errorf("%w ojc.max_k=%d: want >= 1", ErrBadParam, maxPicks)
	}
	m.prepare = func(train []diffusion.Cascade) error {
		if m.g.Directed() {
			return errors.New("ojc: needs an undirected graph")
		}
		largest := 0
		for _, c := range train {
			largest = max(largest, len(c.Infected))
		}
		if bytes := 4 * int64(largest) * int64(largest); bytes > slowOJCBytes {
			env.Logger.Warn(fmt.Sprintf("ojc keeps the distances between every two infected nodes of a cascade, a BFS from each: "+
				"up to %d infected nodes here, %.1f GB and seconds to minutes a cascade (16 s at 20,000 nodes); leave it out of --methods on graphs this large",
				largest, float64(bytes)/1e9), zap.Int("infected", largest))
		}
		return nil
	}
	var dist, queue, picks []int
	var allow []bool
	m.rank = func(ctx context.Context, _ []float64, infected []int, want int, scores []float64) ([]int, error) {
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
					row[b] = coverInf
				}
			}
			scores[s] = 1 / (1 + float64(ecc))
		}
		picks = picks[:0]
		for _, a := range greedyCover(ctx, D, ni, min(want, maxPicks), func(a int) int { return m.rk.tie[infected[a]] }) {
			picks = append(picks, infected[a])
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return m.rk.extend(picks, scores), nil
	}
	return m, nil
}

// eccScratch is eccentricities' scratch for a graph of n nodes.
type eccScratch struct {
	lo, hi, dist, queue []int
	isInf               []bool
}

func newEccScratch(n int) *eccScratch {
	sc := &eccScratch{lo: make([]int, n), hi: make([]int, n), dist: make([]int, n), queue: make([]int, 0, n), isInf: make([]bool, n)}
	for i := range sc.dist {
		sc.dist[i] = -1
	}
	return sc
}

// eccentricities writes -ecc(v) into scores for every infected v of an
// undirected graph, ecc(v) = max_{i infected} d(v, i) (n when some infected
// node is unreachable), without a BFS from every infected node: a BFS from
// an infected w gives ecc(w) = e exactly and, by the triangle inequality,
//
//	max(d(v,w), e - d(v,w)) <= ecc(v) <= e + d(v,w)
//
// for every v. BFS sources alternate between the unresolved node with the
// largest upper bound and the one with the smallest lower bound until every
// bound is tight (the bounding-eccentricities scheme of Takes and Kosters,
// restricted to the infected set). Sparse, long-path graphs resolve after
// a few BFS; the worst case is one BFS per infected node.
//
// sc is scratch of g's size, reused across calls (a cascade spread over many
// components calls once per component): its lo and hi are read only at the
// infected nodes, set here, and isInf and dist, all false and -1 on entry,
// are left so.
func eccentricities(ctx context.Context, g *graph.Graph, infected []int, scores []float64, sc *eccScratch) error {
	n := g.N()
	off, to, _ := g.CSR()
	lo, hi, isInf, dist, queue := sc.lo, sc.hi, sc.isInf, sc.dist, sc.queue
	defer func() {
		for _, v := range infected {
			isInf[v] = false
		}
	}()
	open := make([]int, 0, len(infected))
	for _, v := range infected {
		lo[v], hi[v] = 0, math.MaxInt
		isInf[v] = true
		open = append(open, v)
	}
	for turn := 0; len(open) > 0; turn++ {
		if turn%32 == 31 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		w := open[0]
		for _, v := range open[1:] {
			if turn%2 == 0 && (hi[v] > hi[w] || (hi[v] == hi[w] && g.Degree(v) > g.Degree(w))) {
				w = v
			}
			if turn%2 == 1 && (lo[v] < lo[w] || (lo[v] == lo[w] && g.Degree(v) > g.Degree(w))) {
				w = v
			}
		}
		// BFS from w, stopped once every infected node is reached: only
		// their distances enter the bounds
		dist[w] = 0
		queue = append(queue[:0], w)
		reached, e := 1, 0
		for head := 0; head < len(queue) && reached < len(infected); head++ {
			u := queue[head]
			for _, v := range to[off[u]:off[u+1]] {
				if dist[v] == -1 {
					dist[v] = dist[u] + 1
					queue = append(queue, v)
					if isInf[v] {
						reached++
						e = dist[v]
					}
				}
			}
		}
		if reached < len(infected) {
			e = n
		}
		lo[w], hi[w] = e, e
		kept := open[:0]
		for _, v := range open {
			d := dist[v]
			switch {
			case d < 0 || e == n:
				// v cannot reach w, or shares w's component and with it
				// the infected nodes w cannot reach
				lo[v], hi[v] = n, n
			default:
				lo[v] = max(lo[v], d, e-d)
				hi[v] = min(hi[v], e+d)
			}
			if lo[v] < hi[v] {
				kept = append(kept, v)
			}
		}
		open = kept
		for _, v := range queue {
			dist[v] = -1
		}
	}
	for _, v := range infected {
		scores[v] = -float64(lo[v])
	}
	return nil
}

// coverInf marks an unreachable pair in greedyCover's distance matrix.
const coverInf = math.MaxInt32

// greedyCover returns up to maxPicks indices a in 0..ni-1, in pick order,
// each minimising, given the earlier picks P, the tuple
//
//	(#{b : d(P+a, b) = inf}, max_b d(P+a, b), sum_b d(P+a, b), tie(a))
//
// lexicographically over the finite distances, d(P, b) = min_{p in P}
// D[p*ni+b]. The result equals the plain O(ni^2)-per-pick scan, but a
// candidate is dropped as soon as it is certainly worse: its uncovered
// count is known per component, and nodes are visited farthest-first so
// the radius bound bites early.
func greedyCover(ctx context.Context, D []int32, ni, maxPicks int, tie func(a int) int) []int {
	// comp labels the infected components (D is finite within one)
	comp := make([]int, ni)
	for a := range comp {
		comp[a] = -1
	}
	ncomp := 0
	for a := 0; a < ni; a++ {
		if comp[a] >= 0 {
			continue
		}
		for b, d := range D[a*ni : (a+1)*ni] {
			if d != coverInf {
				comp[b] = ncomp
			}
		}
		ncomp++
	}
	uncIn := make([]int64, ncomp) // uncovered nodes per component
	for _, c := range comp {
		uncIn[c]++
	}
	unc := int64(ni)
	cur := make([]int32, ni)
	for b := range cur {
		cur[b] = coverInf
	}
	picked := make([]bool, ni)
	order := make([]int, ni) // nodes, farthest from the picks first
	cands := make([]int, ni) // candidates, closest to the farthest node first
	for i := range order {
		order[i], cands[i] = i, i
	}
	var picks []int
	for len(picks) < min(maxPicks, ni) && ctx.Err() == nil {
		sort.Slice(order, func(i, j int) bool { return cur[order[i]] > cur[order[j]] })
		far := order[0]
		sort.Slice(cands, func(i, j int) bool { return D[cands[i]*ni+far] < D[cands[j]*ni+far] })
		best := -1
		var bu, br, bs int64
	next:
		for _, a := range cands {
			if picked[a] {
				continue
			}
			u := unc - uncIn[comp[a]]
			if best >= 0 && u > bu {
				continue
			}
			var rad, sum int64
			row := D[a*ni : (a+1)*ni]
			for _, b := range order {
				d := min(row[b], cur[b])
				if d == coverInf {
					continue
				}
				rad = max(rad, int64(d))
				if best >= 0 && u == bu && rad > br {
					continue next
				}
				sum += int64(d)
			}
			if best < 0 || u < bu || (u == bu && (rad < br || (rad == br && (sum < bs ||
				(sum == bs && tie(a) < tie(best)))))) {
				best, bu, br, bs = a, u, rad, sum
			}
		}
		picked[best] = true
		picks = append(picks, best)
		if uncIn[comp[best]] > 0 {
			unc -= uncIn[comp[best]]
			uncIn[comp[best]] = 0
		}
		for b, d := range D[best*ni : (best+1)*ni] {
			cur[b] = min(cur[b], d)
		}
	}
	return picks
}
