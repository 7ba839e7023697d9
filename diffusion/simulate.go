package diffusion

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/sourcewatch/sourcewatch/graph"
)

// Report summarises a Simulate call.
type Report struct {
	// Cascades is the number of cascades returned.
	Cascades int
	// Redrawn counts draws discarded because they died out (or hit
	// MaxSteps) below their observation target.
	Redrawn int
}

// Option configures Simulate.
type Option func(*options)

type options struct {
	workers  int
	progress func(done, total int)
	counts   []int
}

// Workers sets how many cascades run in parallel; n < 1 means GOMAXPROCS.
// The result does not depend on it.
func Workers(n int) Option { return func(o *options) { o.workers = n } }

// OnProgress is called after each finished cascade with the number done so
// far. Calls come from one goroutine, in order, never concurrently.
func OnProgress(f func(done, total int)) Option { return func(o *options) { o.progress = f } }

// ObservedCounts makes ForwardFloor observe source set i at counts[i]
// infected nodes (the snapshot at the first step with at least that many)
// instead of at a target fraction drawn per observation: the floor of a
// forward model that is also told how many nodes were infected when the
// snapshot was taken. Simulate ignores it.
func ObservedCounts(counts []int) Option { return func(o *options) { o.counts = counts } }

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// workersFor is how many goroutines share jobs independent jobs: the
// Workers option (GOMAXPROCS when unset), at least 1 and at most jobs.
func (o options) workersFor(jobs int) int {
	w := o.workers
	if w < 1 {
		w = runtime.GOMAXPROCS(0)
	}
	return max(1, min(w, jobs))
}

// cascadeRNG derives cascade i's private stream from the seed, so cascade
// i is the same whichever worker runs it and however many there are.
func cascadeRNG(seed int64, i int) *rand.Rand {
	// splitmix64 finaliser: neighbouring indices get unrelated streams.
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return rand.New(rand.NewPCG(uint64(seed), z))
}

// MaxCascades bounds one Simulate call's count: the cascades are held in
// memory, and a count typed with a few zeros too many ran the machine out
// of it before the first was drawn.
const MaxCascades = 1_000_000

// Simulate draws count cascades of cfg on g, each observed once: cascade i
// draws a target fraction f ~ U[ObserveMin, ObserveMax] and then source
// sets and runs until one run has at least ceil(f n) nodes infected at
// once; the snapshot is that step. Runs that stop below the target are
// redrawn (with the same target) and counted in Report.Redrawn; MaxRedraws
// failures in a row end Simulate with an *UnreachableError (which wraps
// ErrUnreachable).
//
// The output depends only on (g, cfg, count, seed): cascade i uses its own
// random stream derived from (seed, i). Cancelling ctx stops the workers and
// returns ctx's error.
func Simulate(ctx context.Context, g *graph.Graph, cfg Config, count int, seed int64, opts ...Option) ([]Cascade, Report, error) {
	if err := cfg.Validate(g); err != nil {
		return nil, Report{}, err
	}
	if count < 0 {
		return nil, Report{}, fmt.Errorf("%w: cascade count %d is negative", ErrConfig, count)
	}
	if count > MaxCascades {
		return nil, Report{}, fmt.Errorf("%w: cascade count %d is over %d: a run holds every cascade in memory; simulate in several runs with other seeds", ErrConfig, count, MaxCascades)
	}
	o := newOptions(opts)
	workers := o.workersFor(count)

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]Cascade, count)
	redrawn := make([]int, count)
	errs := make([]error, count)
	jobs := make(chan int)
	done := make(chan int, workers)

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSim(g, cfg)
			stop := func() bool { return ctx.Err() != nil }
			for i := range jobs {
				out[i], redrawn[i], errs[i] = s.observe(i, seed, stop)
				if errs[i] != nil {
					cancel()
				}
				done <- i
			}
		}()
	}
	// The feeder owns jobs; it stops handing out work once ctx is done.
	go func() {
		defer close(jobs)
		for i := range count {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
	finished := 0
	for range done {
		finished++
		if o.progress != nil && ctx.Err() == nil {
			o.progress(finished, count)
		}
	}

	rep := Report{}
	for i := range count {
		// Workers stopped by our own cancel report context.Canceled; the
		// error that caused the cancel is the one to return.
		if errs[i] != nil && !errors.Is(errs[i], context.Canceled) {
			var ue *UnreachableError
			if errors.As(errs[i], &ue) {
				for j := range count {
					// Each cascade draws its own target: only one that
					// infected as many shows this one's is reachable.
					if errs[j] == nil && out[j].N > 0 && len(out[j].Infected) >= ue.Need {
						ue.Reached++
					}
				}
			}
			return nil, rep, errs[i]
		}
		rep.Redrawn += redrawn[i]
	}
	if err := parent.Err(); err != nil {
		return nil, rep, fmt.Errorf("simulating cascades: %w", err)
	}
	rep.Cascades = count
	return out, rep, nil
}

// observe produces cascade i: it draws the target, then sources and runs
// until a run reaches the target. It returns the number of failed draws.
func (s *sim) observe(i int, seed int64, stop func() bool) (Cascade, int, error) {
	rng := cascadeRNG(seed, i)
	target, need := s.drawTarget(rng)
	peak, capped := 0, false
	// filled: every draw infected all a spread from its sources can
	// reach, so no model parameter could have taken it further.
	filled := true
	for attempt := 0; attempt < s.cfg.MaxRedraws; attempt++ {
		if stop() {
			return Cascade{}, attempt, context.Canceled
		}
		sources := s.sample(rng)
		step, ok := s.run(sources, rng, need, s.cfg.MaxSteps, stop)
		if ok {
			return s.cascade(sources, step), attempt, nil
		}
		peak = max(peak, s.peak)
		// still spreading when the step cap stopped it
		capped = capped || (step == s.cfg.MaxSteps && len(s.active) > 0)
		filled = filled && s.peak >= s.reach(sources)
	}
	suspects := s.cfg.suspects(s.g, capped, 10*peak >= 9*need)
	if filled {
		// Only other sources (another draw) or another target can help.
		suspects = slices.DeleteFunc(suspects, func(x Suspect) bool { return x.Param != "MaxRedraws" && x.Param != "Observe" })
	}
	return Cascade{}, s.cfg.MaxRedraws, &UnreachableError{
		Cascade: i, Draws: s.cfg.MaxRedraws, Need: need, Target: target, Peak: peak,
		Suspects: suspects, Directed: s.g.Directed(),
		Largest: s.largestComponent(),
	}
}

// components labels g's weakly connected components once per sim, at
// the first failed draw: s.comp[v] is v's, s.compSize[c] its node count.
func (s *sim) components() {
	if s.comp != nil {
		return
	}
	var count int
	s.comp, count = s.g.Components()
	s.compSize = make([]int, count)
	for _, c := range s.comp {
		s.compSize[c]++
	}
}

// reach is the most nodes a spread from sources can infect: on an
// undirected graph the node count of the components holding them, on a
// directed one the nodes the out-arcs lead to from them (a search per
// failed draw, which only a cascade about to fail pays for).
func (s *sim) reach(sources []int) int {
	if s.g.Directed() {
		s.reachDist = s.g.BFS(sources, s.reachDist)
		total := 0
		for _, d := range s.reachDist {
			if d >= 0 {
				total++
			}
		}
		return total
	}
	s.components()
	total := 0
	seen := make(map[int]bool, len(sources))
	for _, v := range sources {
		if c := s.comp[v]; !seen[c] {
			seen[c] = true
			total += s.compSize[c]
		}
	}
	return total
}

// largestComponent is the node count of g's largest weakly connected
// component.
func (s *sim) largestComponent() int {
	s.components()
	return slices.Max(s.compSize)
}

// drawTarget draws an observation's target fraction f ~ U[ObserveMin,
// ObserveMax] and returns it with the infected count it needs, ceil(f n).
func (s *sim) drawTarget(rng *rand.Rand) (float64, int) {
	target := s.cfg.ObserveMin + rng.Float64()*(s.cfg.ObserveMax-s.cfg.ObserveMin)
	// The tiny slack keeps f n that is an integer up to rounding (0.2 * 35)
	// from demanding one node more.
	need := int(math.Ceil(target*float64(s.n) - 1e-9))
	return target, max(1, min(need, s.n))
}
