package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"gonum.org/v1/gonum/stat/combin"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// The bayes control is the exact posterior of the simulation that made the
// cascades. It is a ceiling, not a localizer: it is told the model and its
// parameters, and it only runs where the posterior can be summed exactly.
func init() {
	register("bayes", newBayes, true)
	optIn["bayes"] = true
}

// optIn holds the methods that "all" leaves out because they refuse most
// settings: they are asked for by name.
var optIn = map[string]bool{}

// ErrNoExactPosterior is wrapped by the bayes control's errors for a
// setting or an observation whose posterior it cannot sum exactly.
var ErrNoExactPosterior = errors.New("no exact posterior")

// DefaultBayesMaxInfected bounds the infected count the bayes control
// sums over: its time grows about 3x and its memory 2x with each infected
// node (at 22 on Karate, 11 s and 32 MiB a snapshot; at 24, minutes).
const DefaultBayesMaxInfected = 22

// maxBayesInfected is the largest bayes.max_infected accepted.
const maxBayesInfected = 28

// maxBayesFallback is the largest share of validation snapshots over
// bayes.max_infected that bayes accepts: above it its ceiling would be
// mostly the infected control's.
const maxBayesFallback = 0.1

// newBayes scores each node by its exact posterior probability of being a
// source, P(v in S | y), under the SI simulation with uniformly placed
// sources that made the cascades, and predicts the top k (k chosen on
// validation). Ranking by these marginals maximises the expected ROC-AUC
// of every observation when the source count is fixed, so no method
// can beat it on average: the gap between a method and bayes is what is
// left to find, and the gap between bayes and infected is the most any
// method can lead the infected control by.
//
// A snapshot of more than bayes.max_infected infected nodes is ranked as
// the infected control ranks it (every infected node alike), which can
// only lower the ceiling; the share of test snapshots so ranked is the
// extra bayes_fallback_fraction, and Fit refuses a setting where more
// than a tenth of the validation snapshots would be.
func newBayes(env Env) (Method, error) {
	p := newParams("bayes", env.Params)
	m := &bayesMethod{rankMethod: &rankMethod{name: "bayes", env: env, usesY: true, fixed: p.count("k", 0)}}
	m.maxInfected = p.count("max_infected", DefaultBayesMaxInfected)
	if err := p.done(); err != nil {
		return nil, err
	}
	if m.maxInfected > maxBayesInfected {
		return nil, fmt.Errorf("%w: bayes.max_infected %d: at most %d (the sum holds 2^max_infected numbers, 2 GiB at %d, and takes hours there)", ErrBadParam, m.maxInfected, maxBayesInfected, maxBayesInfected)
	}
	m.prepare = func([]diffusion.Cascade) error {
		var err error
		m.post, err = newSIPosterior(m.g, env.Simulation, m.maxInfected)
		return err
	}
	m.rank = m.byScore(func(ctx context.Context, _ []float64, infected []int, scores []float64) error {
		if m.fitted {
			m.localized++
		}
		if len(infected) <= m.maxInfected {
			return m.post.marginals(ctx, infected, scores)
		}
		if m.fitted {
			m.fallbacks++
		}
		for i := range scores {
			scores[i] = 0
		}
		for _, v := range infected {
			scores[v] = 1
		}
		return nil
	})
	return m, nil
}

// bayesMethod is the bayes control: a rankMethod that counts the test
// snapshots it ranked as the infected control does.
type bayesMethod struct {
	*rankMethod
	post        *siPosterior
	maxInfected int
	// fitted is set once Fit is done, so only test snapshots count.
	fitted               bool
	localized, fallbacks int
}

func (m *bayesMethod) Fit(ctx context.Context, g *graph.Graph, train, val []diffusion.Cascade) error {
	m.fitted, m.localized, m.fallbacks = false, 0, 0
	over := 0
	for _, c := range val {
		if len(c.Infected) > m.maxInfected {
			over++
		}
	}
	if len(val) > 0 && float64(over) > maxBayesFallback*float64(len(val)) {
		return fmt.Errorf("%w: %d of the %d validation snapshots hold more than bayes.max_infected %d infected nodes; the exact sum is for small graphs (raise max_infected, up to %d, at about 3x the time a node)",
			ErrNoExactPosterior, over, len(val), m.maxInfected, maxBayesInfected)
	}
	if err := m.rankMethod.Fit(ctx, g, train, val); err != nil {
		return err
	}
	m.fitted = true
	return nil
}

// Diagnose reports the share of the test snapshots ranked as the infected
// control ranks them (more than max_infected infected nodes); it reads no
// truth.
func (m *bayesMethod) Diagnose(context.Context, []diffusion.Cascade) (map[string]float64, error) {
	if m.localized == 0 {
		return nil, nil
	}
	return map[string]float64{"bayes_fallback_fraction": float64(m.fallbacks) / float64(m.localized)}, nil
}

// siPosterior sums the posterior of SI cascades observed by
// diffusion.Simulate's rule: the snapshot is the first step at which at
// least need nodes are infected, need = ceil(f n), f ~ U[ObserveMin,
// ObserveMax].
//
// For the observed infected set I the likelihood of sources S is a sum
// over the paths S = A_0 ⊂ A_1 ⊂ ... ⊂ A_L ⊂ I of infected sets, the
// last set before I being A_L, weighted by P(|A_L| < need <= |I|). In
// one step from A a susceptible node v with k in-neighbours in A is
// infected with probability 1 - (1-beta)^k, independently, so the
// probability of moving from A to B (A ⊆ B ⊆ I) is
//
//	T(A, B) = prod_{v in B\A} (1 - q_v) prod_{v in I\B} q_v prod_{v not in I} q_v,  q_v = (1-beta)^{k_A(v)}.
//
// With h(A) the probability, from A, of the observation I (self-loops
// summed as a geometric series),
//
//	h(A) = [ T(A, I) P(|A| < need <= |I|) + sum_{A ⊂ B ⊂ I} T(A, B) h(B) ] / (1 - T(A, A)),
//
// one pass over the subsets of I from the largest down gives h(S) =
// P(I | S) for every candidate S at once. The posterior is P(S | I) ∝
// P(S) h(S), P(S) = P(|S|) / C(n, |S|) for uniform sources, and the
// marginals sum it over the S holding each node.
type siPosterior struct {
	g           *graph.Graph
	minK, maxK  int
	countProb   []float64 // P(|S| = j), j <= maxK
	needProb    []float64 // P(need = t), t = 0..n
	maxInfected int

	// byProducts makes step take the product over each subset always
	// (tests compare it with the sum by odds).
	byProducts bool

	// pow[c] = (1-beta)^c
	pow []float64

	// per observation, over the indices of the infected nodes: in[j] and
	// weak[j] are the masks of j's in-neighbours and of all its
	// neighbours among them, outside[j] the count of j's out-arcs to
	// uninfected nodes
	in, weak []uint32
	outside  []int

	// scratch, reused across observations
	h     []float64
	pos   []int
	front []int
	q     []float64
	odds  []float64
}

func newSIPosterior(g *graph.Graph, sim *diffusion.Config, maxInfected int) (*siPosterior, error) {
	if sim == nil {
		return nil, fmt.Errorf("%w: the cascades are recorded, and bayes needs the simulation that made them", ErrNoExactPosterior)
	}
	if sim.Model != diffusion.SI {
		return nil, fmt.Errorf("%w: diffusion %s: bayes sums SI only", ErrNoExactPosterior, sim.Model)
	}
	if sim.Pattern != "" && sim.Pattern != diffusion.Uniform {
		return nil, fmt.Errorf("%w: source pattern %s: bayes sums uniformly placed sources only", ErrNoExactPosterior, sim.Pattern)
	}
	if float64(sim.MaxSteps)*sim.Beta < minStepsTimesBeta {
		// The sum runs every chain to its end; a cap that cuts runs
		// short (and redraws them) would make it another distribution.
		return nil, fmt.Errorf("%w: max_steps %d with beta %g could cut runs short, and bayes sums runs of any length (max_steps x beta at least %g)",
			ErrNoExactPosterior, sim.MaxSteps, sim.Beta, float64(minStepsTimesBeta))
	}
	n := g.N()
	p := &siPosterior{g: g, maxInfected: maxInfected, pos: make([]int, n)}
	p.pow = make([]float64, g.Arcs()+1)
	for c := range p.pow {
		p.pow[c] = math.Pow(1-sim.Beta, float64(c))
	}
	switch s := sim.Sources; {
	case s.Count > 0:
		p.minK, p.maxK = s.Count, s.Count
	case s.Ratio > 0:
		k := max(1, min(int(math.Round(s.Ratio*float64(n))), n))
		p.minK, p.maxK = k, k
	default:
		p.minK, p.maxK = s.Min, s.Max
	}
	p.countProb = make([]float64, p.maxK+1)
	for j := p.minK; j <= p.maxK; j++ {
		p.countProb[j] = 1 / float64(p.maxK-p.minK+1)
	}
	p.needProb = needDistribution(n, sim.ObserveMin, sim.ObserveMax)
	return p, nil
}

// minStepsTimesBeta is the least max_steps x beta bayes accepts: a node
// with an infected in-neighbour then stays uninfected through the cap
// with chance about exp(-100).
const minStepsTimesBeta = 100

// needDistribution is P(need = t), t = 0..n, for need = max(1, min(n,
// ceil(f n))) and f ~ U[lo, hi] (a point mass at lo when lo == hi), as
// diffusion.Simulate draws it.
func needDistribution(n int, lo, hi float64) []float64 {
	need := func(f float64) int { return max(1, min(n, int(math.Ceil(f*float64(n)-1e-9)))) }
	out := make([]float64, n+1)
	if hi <= lo {
		out[need(lo)] = 1
		return out
	}
	for t := 1; t <= n; t++ {
		// need(f) = t for f in ((t-1+1e-9)/n, (t+1e-9)/n], open below for t = 1, above for t = n
		a, b := (float64(t-1)+1e-9)/float64(n), (float64(t)+1e-9)/float64(n)
		if t == 1 {
			a = math.Inf(-1)
		}
		if t == n {
			b = math.Inf(1)
		}
		if w := math.Min(b, hi) - math.Max(a, lo); w > 0 {
			out[t] = w / (hi - lo)
		}
	}
	return out
}

// marginals writes P(v in S | I) into scores for the infected nodes I
// (0 elsewhere: under SI a source is always infected).
func (p *siPosterior) marginals(ctx context.Context, infected []int, scores []float64) error {
	m := len(infected)
	for i := range scores {
		scores[i] = 0
	}
	if m == 0 {
		return fmt.Errorf("%w: no node is infected", ErrNoExactPosterior)
	}
	if m > p.maxInfected {
		return fmt.Errorf("%w: %d infected nodes, more than bayes.max_infected %d (the sum takes about 3^m steps and 2^m numbers)", ErrNoExactPosterior, m, p.maxInfected)
	}
	full := uint32(1)<<m - 1
	if cap(p.h) < 1<<m {
		p.h = make([]float64, 1<<m)
	}
	h := p.h[:1<<m]
	for i := range p.pos {
		p.pos[i] = -1
	}
	for i, v := range infected {
		p.pos[v] = i
	}
	// last[a] = P(a < need <= m): the chance that a set of a nodes was the
	// last one before the snapshot.
	last := make([]float64, m+1)
	for a := m - 1; a >= 0; a-- {
		last[a] = last[a+1] + p.needProb[a+1]
	}
	p.q, p.odds = resized(p.q, m), resized(p.odds, m)
	p.in, p.weak, p.outside = resized(p.in, m), resized(p.weak, m), resized(p.outside, m)
	for j := range m {
		p.in[j], p.weak[j], p.outside[j] = 0, 0, 0
	}
	for j, u := range infected {
		nbr, _ := p.g.Out(u)
		for _, v := range nbr {
			if i := p.pos[v]; i >= 0 {
				p.in[i] |= 1 << j
				p.weak[i] |= 1 << j
				p.weak[j] |= 1 << i
			} else {
				p.outside[j]++
			}
		}
	}
	for mask := full - 1; mask > 0; mask-- {
		if mask&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		size := bits.OnesCount32(mask)
		// Each component of an infected set holds a source: one with more
		// components than sources is never reached.
		if size < p.minK || p.components(mask, p.maxK) > p.maxK {
			h[mask] = 0
			continue
		}
		// While A is summed, h[full] is the chance that the jump from A
		// to I was the snapshot: P(|A| < need <= |I|).
		h[full] = last[size]
		h[mask] = p.step(mask, full, h)
	}
	// A source set that is I itself is the snapshot at step 0, whenever
	// need <= m.
	h[full] = last[0]
	prior := make([]float64, min(p.maxK, m)+1) // P(S) for |S| = j
	for j := p.minK; j < len(prior); j++ {
		prior[j] = p.countProb[j] / combin.GeneralizedBinomial(float64(p.g.N()), float64(j))
	}
	var z float64
	for mask := uint32(1); mask <= full; mask++ {
		j := bits.OnesCount32(mask)
		if j < p.minK || j >= len(prior) || h[mask] == 0 {
			continue
		}
		w := h[mask] * prior[j]
		z += w
		for b := mask; b != 0; b &= b - 1 {
			scores[infected[bits.TrailingZeros32(b)]] += w
		}
	}
	if !(z > 0) {
		count := fmt.Sprintf("%d sources", p.minK)
		switch {
		case p.maxK > p.minK:
			count = fmt.Sprintf("%d-%d sources", p.minK, p.maxK)
		case p.minK == 1:
			count = "1 source"
		}
		return fmt.Errorf("%w: the observation of %d infected nodes is impossible under the simulation (no set of %s among them reaches it)", ErrNoExactPosterior, m, count)
	}
	for _, v := range infected {
		scores[v] /= z
	}
	return nil
}

// step is h(A) for the set mask: the probability, from A, of observing
// full, given h of every larger subset (h[full] holding P(|A| < need <=
// |I|), set by the caller).
func (p *siPosterior) step(mask, full uint32, h []float64) float64 {
	outside := 0 // arcs from A to nodes never infected
	for b := mask; b != 0; b &= b - 1 {
		outside += p.outside[bits.TrailingZeros32(b)]
	}
	escape := p.pow[outside]
	stay, minQ := escape, 1.0
	p.front = p.front[:0]
	for b := full &^ mask; b != 0; b &= b - 1 {
		j := bits.TrailingZeros32(b)
		if c := bits.OnesCount32(p.in[j] & mask); c > 0 {
			p.q[j] = p.pow[c]
			stay *= p.q[j]
			minQ = min(minQ, p.q[j])
			p.front = append(p.front, j)
		}
	}
	if len(p.front) == 0 || stay >= 1 {
		return 0 // A can infect no node of I: the run stops short of it
	}
	if minQ < minGrayQ || p.byProducts {
		return p.paths(0, mask, escape, mask, h) / (1 - stay)
	}
	// The sum over the nonempty subsets C of the frontier in Gray-code
	// order: each B = A ∪ C differs from the one before by one node, so
	// its weight is the last one's times, or over, that node's odds
	// (1-q)/q.
	for k, j := range p.front {
		p.odds[k] = (1 - p.q[j]) / p.q[j]
	}
	var sum float64
	w, b := stay, mask
	for i := uint32(1); i < 1<<len(p.front); i++ {
		k := bits.TrailingZeros32(i)
		bit := uint32(1) << p.front[k]
		if b&bit == 0 {
			w *= p.odds[k]
		} else {
			w /= p.odds[k]
		}
		b ^= bit
		sum += w * h[b]
	}
	return sum / (1 - stay)
}

// minGrayQ is the smallest chance of a frontier node staying uninfected
// for which step sums by odds; below it (beta near 1) the odds would
// lose precision, and it takes the slower product over each subset.
const minGrayQ = 1e-6

// components counts the weakly connected components of the subgraph the
// set mask induces, stopping once it passes limit.
func (p *siPosterior) components(mask uint32, limit int) int {
	n := 0
	for rest := mask; rest != 0; n++ {
		if n == limit {
			return n + 1
		}
		comp := rest & -rest
		for {
			grown := comp
			for b := comp; b != 0; b &= b - 1 {
				grown |= p.weak[bits.TrailingZeros32(b)]
			}
			grown &= mask
			if grown == comp {
				break
			}
			comp = grown
		}
		rest &^= comp
	}
	return n
}

// paths sums T(A, B) h(B) over the sets B that add to A a nonempty
// subset of the frontier from index i on.
func (p *siPosterior) paths(i int, b uint32, w float64, mask uint32, h []float64) float64 {
	if w == 0 {
		return 0
	}
	if i == len(p.front) {
		if b == mask {
			return 0 // the self-loop, summed in step
		}
		return w * h[b]
	}
	j := p.front[i]
	q := p.q[j]
	return p.paths(i+1, b, w*q, mask, h) + p.paths(i+1, b|1<<j, w*(1-q), mask, h)
}
