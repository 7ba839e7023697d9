package diffusion

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcewatch/sourcewatch/graph"
)

// ForwardFloor estimates the smallest mean squared error per node that any
// forward model can reach on cascades of cfg. A forward model predicts the
// observation y from the sources; the best possible prediction is
// E[y | sources], whose error is the variance of y given the sources:
//
//	floor = mean over source sets S of (1/n) sum_v p_v(S) (1 - p_v(S)),
//	p_v(S) = P(y_v = 1 | S),
//
// where y is observed as Simulate observes it (a target fraction drawn per
// observation, the snapshot at the first step that reaches it). p_v(S) is
// estimated from draws observations from each S, and each term is
// corrected by draws/(draws-1) so the estimate is unbiased. Runs from S
// that die out below their target are redrawn, as Simulate does, up to
// cfg.MaxRedraws in a row; a source set that never reaches a target is
// left out. A forward model whose test error is near the floor has nothing
// left to learn; the gap is what a better one could gain.
//
// With the ObservedCounts option every observation of source set i is
// taken at counts[i] infected nodes instead: the floor given the
// observation time, which a forward model told |y| could reach. The gap
// between the two floors is the part of a forward model's error that
// comes from not knowing when the snapshot was taken.
//
// The result depends only on (g, cfg, sources, draws, seed) and the
// counts, not on the Workers option (OnProgress is not used). It returns
// an error wrapping ErrUnreachable when no source set reaches its targets.
func ForwardFloor(ctx context.Context, g *graph.Graph, cfg Config, sources [][]int, draws int, seed int64, opts ...Option) (float64, error) {
	if err := cfg.Validate(g); err != nil {
		return 0, err
	}
	if draws < 2 {
		return 0, fmt.Errorf("%w: forward floor needs at least 2 draws per source set, got %d", ErrConfig, draws)
	}
	n := g.N()
	for i, s := range sources {
		for _, v := range s {
			if v < 0 || v >= n {
				return 0, fmt.Errorf("%w: source set %d: node %d out of range for %d nodes", ErrConfig, i, v, n)
			}
		}
	}
	o := newOptions(opts)
	if o.counts != nil {
		if len(o.counts) != len(sources) {
			return 0, fmt.Errorf("%w: forward floor: %d observed counts for %d source sets", ErrConfig, len(o.counts), len(sources))
		}
		for i, k := range o.counts {
			if k < 1 || k > n {
				return 0, fmt.Errorf("%w: forward floor: source set %d: observed count %d outside 1..%d", ErrConfig, i, k, n)
			}
		}
	}
	terms := make([]float64, len(sources))
	ok := make([]bool, len(sources))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range o.workersFor(len(sources)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSim(g, cfg)
			hits := make([]float64, n)
			stop := func() bool { return ctx.Err() != nil }
			for i := range jobs {
				count := 0 // a target drawn per observation
				if o.counts != nil {
					count = o.counts[i]
				}
				terms[i], ok[i] = s.variance(sources[i], count, draws, seed, i, hits, stop)
			}
		}()
	}
feed:
	for i := range sources {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("forward floor: %w", err)
	}
	var sum float64
	var used int
	for i, t := range terms {
		if ok[i] {
			sum += t
			used++
		}
	}
	if used == 0 {
		return 0, fmt.Errorf("forward floor: no source set reached its observation targets: %w", ErrUnreachable)
	}
	return sum / float64(used), nil
}

// variance returns (1/n) sum_v p_v (1 - p_v) draws/(draws-1) for source
// set i, with p_v the fraction of draws observations in which v is
// infected, and false when the source set cannot reach its targets. Each
// observation is taken at count infected nodes, or at a target drawn as
// Simulate draws it when count is 0.
func (s *sim) variance(sources []int, count, draws int, seed int64, i int, hits []float64, stop func() bool) (float64, bool) {
	rng := cascadeRNG(seed, i)
	clear(hits)
	for d := 0; d < draws; d++ {
		need := count
		if need == 0 {
			_, need = s.drawTarget(rng)
		}
		reached := false
		for attempt := 0; attempt < s.cfg.MaxRedraws && !reached; attempt++ {
			if stop() {
				return 0, false
			}
			step, ok := s.run(sources, rng, need, s.cfg.MaxSteps, stop)
			if ok {
				for _, v := range s.cascade(sources, step).Infected {
					hits[v]++
				}
				reached = true
			}
		}
		if !reached {
			return 0, false
		}
	}
	var sum float64
	for _, h := range hits {
		p := h / float64(draws)
		sum += p * (1 - p)
	}
	return sum / float64(s.n) * float64(draws) / float64(draws-1), true
}
