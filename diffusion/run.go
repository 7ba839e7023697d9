package diffusion

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/sourcewatch/sourcewatch/graph"
)

// sim holds one worker's state. Every buffer is fully reset at the start of
// a run, so a cascade's outcome depends only on its own random stream and
// never on which worker ran it before.
type sim struct {
	g   *graph.Graph
	cfg Config
	n   int

	times  []int // infection step, -1 while susceptible
	rec    []int // recovery step (SIR), -1 otherwise
	active []int // nodes that may still infect someone
	next   []int
	newly  []int
	cand   []int     // LT nodes touched this step
	mark   []int     // LT: step a node was last added to cand
	acc    []float64 // LT accumulated influence
	theta  []float64 // LT thresholds
	invIn  []float64 // LT 1/in-degree, unweighted graphs

	// sampling buffers
	perm  []int
	keys  []float64
	dist  []int
	queue []int
	chose []bool

	// comp labels each node's weakly connected component and compSize
	// counts them; set at the first failed draw (reach).
	comp, compSize []int
	// reachDist is reach's search buffer on a directed graph.
	reachDist []int

	infected int // currently infected (y = 1)
	peak     int // largest infected count seen in this run

	// trace, when set, sees the S/I/R counts after every step (tests).
	trace func(step, s, i, r int)
}

func newSim(g *graph.Graph, cfg Config) *sim {
	n := g.N()
	s := &sim{
		g: g, cfg: cfg, n: n,
		times: make([]int, n),
		rec:   make([]int, n),
		chose: make([]bool, n),
	}
	if cfg.Pattern == "" {
		s.cfg.Pattern = Uniform
	}
	if cfg.Model == LT {
		s.mark = make([]int, n)
		s.acc = make([]float64, n)
		s.theta = make([]float64, n)
		if !g.Weighted() {
			s.invIn = make([]float64, n)
			for v := range n {
				if d := g.InDegree(v); d > 0 {
					s.invIn[v] = 1 / float64(d)
				}
			}
		}
	}
	return s
}

// RunFull runs cfg's process from sources until it stops spreading (or for
// cfg.MaxSteps steps when that is positive) and returns the final state:
// Infected are the nodes infected at the end, Step the last step that
// changed anything (or MaxSteps). cfg must
// be valid for g (see Config.Validate); only the model parameters and
// MaxSteps are used. RunFull panics if a source index is out of range.
func RunFull(g *graph.Graph, cfg Config, sources []int, rng *rand.Rand) Cascade {
	s := newSim(g, cfg)
	steps := cfg.MaxSteps
	if steps <= 0 {
		steps = int(^uint(0) >> 1)
	}
	for _, v := range sources {
		if v < 0 || v >= s.n {
			panic(fmt.Sprintf("diffusion: source %d out of range for %d nodes", v, s.n))
		}
	}
	step, _ := s.run(sources, rng, 0, steps, nil)
	return s.cascade(sources, step)
}

// run spreads from sources until at least need nodes are infected at once
// (need <= 0: never stop early), the process stops, or maxSteps steps
// have run. It reports the last step and whether need was reached. stop, if
// non-nil, is polled now and then so a cancelled context ends long runs.
func (s *sim) run(sources []int, rng *rand.Rand, need, maxSteps int, stop func() bool) (int, bool) {
	for i := range s.times {
		s.times[i] = -1
		s.rec[i] = -1
	}
	s.active = s.active[:0]
	for _, v := range sources {
		if s.times[v] == -1 {
			s.times[v] = 0
			s.active = append(s.active, v)
		}
	}
	s.infected = len(s.active)
	s.peak = s.infected
	ever, recovered := s.infected, 0
	if s.cfg.Model == LT {
		for i := range s.acc {
			s.acc[i] = 0
			s.mark[i] = -1
		}
		if s.cfg.Threshold < 0 {
			for i := range s.theta {
				s.theta[i] = rng.Float64()
			}
		} else {
			for i := range s.theta {
				s.theta[i] = s.cfg.Threshold
			}
		}
	}
	if s.trace != nil {
		s.trace(0, s.n-ever, s.infected, recovered)
	}
	if need > 0 && s.infected >= need {
		return 0, true
	}
	last := 0 // the last step that changed anything: where a finished run ends
	for t := 1; t <= maxSteps; t++ {
		if len(s.active) == 0 {
			return last, false
		}
		if stop != nil && t%256 == 0 && stop() {
			return t - 1, false
		}
		var gained, lost int
		switch s.cfg.Model {
		case SI:
			gained = s.stepSI(t, rng)
		case SIR:
			gained, lost = s.stepSIR(t, rng)
		case IC:
			gained = s.stepIC(t, rng)
		case LT:
			gained = s.stepLT(t)
		default:
			panic(fmt.Sprintf("diffusion: unknown model %q", s.cfg.Model))
		}
		if gained > 0 || lost > 0 {
			last = t
		}
		ever += gained
		recovered += lost
		s.infected += gained - lost
		s.peak = max(s.peak, s.infected)
		if s.trace != nil {
			s.trace(t, s.n-ever, s.infected, recovered)
		}
		if need > 0 && s.infected >= need {
			return t, true
		}
	}
	return maxSteps, false
}

// stepSI lets every active node try each susceptible out-neighbour once
// with probability beta. Nodes infected in step t only spread from t+1, and
// an active node with no susceptible neighbour left is dropped for good.
func (s *sim) stepSI(t int, rng *rand.Rand) int {
	beta := s.cfg.Beta
	s.newly = s.newly[:0]
	keep := s.next[:0]
	for _, u := range s.active {
		nbr, _ := s.g.Out(u)
		left := false
		for _, v := range nbr {
			if s.times[v] != -1 {
				continue
			}
			if rng.Float64() < beta {
				s.times[v] = t
				s.newly = append(s.newly, v)
			} else {
				left = true
			}
		}
		if left {
			keep = append(keep, u)
		}
	}
	keep = append(keep, s.newly...)
	s.active, s.next = keep, s.active
	return len(s.newly)
}

// stepSIR is stepSI for the nodes infectious at the start of step t, after
// which each of them recovers with probability gamma.
func (s *sim) stepSIR(t int, rng *rand.Rand) (gained, lost int) {
	beta, gamma := s.cfg.Beta, s.cfg.Gamma
	s.newly = s.newly[:0]
	for _, u := range s.active {
		nbr, _ := s.g.Out(u)
		for _, v := range nbr {
			if s.times[v] == -1 && rng.Float64() < beta {
				s.times[v] = t
				s.newly = append(s.newly, v)
			}
		}
	}
	keep := s.next[:0]
	for _, u := range s.active {
		if rng.Float64() < gamma {
			s.rec[u] = t
			lost++
		} else {
			keep = append(keep, u)
		}
	}
	keep = append(keep, s.newly...)
	s.active, s.next = keep, s.active
	return len(s.newly), lost
}

// stepIC gives each node infected in step t-1 its single chance on each
// out-arc: probability p, or the arc's weight on a weighted graph.
func (s *sim) stepIC(t int, rng *rand.Rand) int {
	weighted := s.g.Weighted()
	p := s.cfg.P
	s.newly = s.newly[:0]
	for _, u := range s.active {
		nbr, w := s.g.Out(u)
		for k, v := range nbr {
			if s.times[v] != -1 {
				continue
			}
			q := p
			if weighted {
				q = w[k]
			}
			if rng.Float64() < q {
				s.times[v] = t
				s.newly = append(s.newly, v)
			}
		}
	}
	s.active, s.newly = s.newly, s.active
	return len(s.active)
}

// ltEps absorbs rounding in sums like k * (1/k), so a node whose in-
// neighbours are all infected always meets a threshold of 1.
const ltEps = 1e-12

// stepLT adds the influence of the nodes infected in step t-1 to their
// susceptible out-neighbours and activates those whose total influence
// reaches their threshold. Only touched nodes are candidates: a threshold
// of 0 does not infect a node with no infected in-neighbour.
func (s *sim) stepLT(t int) int {
	weighted := s.g.Weighted()
	s.cand = s.cand[:0]
	for _, u := range s.active {
		nbr, w := s.g.Out(u)
		for k, v := range nbr {
			if s.times[v] != -1 {
				continue
			}
			if weighted {
				s.acc[v] += w[k]
			} else {
				s.acc[v] += s.invIn[v]
			}
			if s.mark[v] != t {
				s.mark[v] = t
				s.cand = append(s.cand, v)
			}
		}
	}
	s.newly = s.newly[:0]
	for _, v := range s.cand {
		if s.acc[v]+ltEps >= s.theta[v] {
			s.times[v] = t
			s.newly = append(s.newly, v)
		}
	}
	s.active, s.newly = s.newly, s.active
	return len(s.active)
}

// cascade copies the current state out as a Cascade snapshotted at step.
func (s *sim) cascade(sources []int, step int) Cascade {
	c := Cascade{
		Sources: slices.Clone(sources),
		Times:   slices.Clone(s.times),
		Step:    step,
		N:       s.n,
	}
	slices.Sort(c.Sources)
	c.Sources = slices.Compact(c.Sources)
	c.Infected = make([]int, 0, s.infected)
	for v, tv := range s.times {
		if tv != -1 && s.rec[v] == -1 {
			c.Infected = append(c.Infected, v)
		}
	}
	if s.cfg.Model == SIR {
		c.Recovered = slices.Clone(s.rec)
	}
	return c
}
