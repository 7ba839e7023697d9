//go:build diag

package diffusion

import "github.com/sourcewatch/sourcewatch/graph"

// SnapshotMarginals estimates p_v(S) = P(y_v = 1 | S), the infection
// probability of every node in a snapshot of a cascade from sources S, as
// Simulate observes it: at a target drawn per observation (count 0) or at
// count infected nodes. It is the forward model no learned one can beat
// (ForwardFloor's p_v), from draws observations with the stream (seed,
// i); a run that dies out below its target is redrawn, as Simulate does.
//
// Only the diag build has it: eval's objective diagnostic
// (objective_diag_test.go) reads SL-VAE's objective with it in place of
// the learned forward model.
func SnapshotMarginals(g *graph.Graph, cfg Config, sources []int, count, draws int, seed int64, i int) []float64 {
	s := newSim(g, cfg)
	rng := cascadeRNG(seed, i)
	p := make([]float64, s.n)
	got := 0
	for range draws {
		need := count
		if need == 0 {
			_, need = s.drawTarget(rng)
		}
		for range cfg.MaxRedraws {
			if step, ok := s.run(sources, rng, need, cfg.MaxSteps, nil); ok {
				for _, v := range s.cascade(sources, step).Infected {
					p[v]++
				}
				got++
				break
			}
		}
	}
	for v := range p {
		p[v] /= float64(max(got, 1))
	}
	return p
}
