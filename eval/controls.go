package eval

import (
	"context"
	"math/rand/v2"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// The controls are reference points a localizer must beat, not localizers.
func init() {
	register("infected", newInfected, true)
	register("degree", newDegree, true)
	register("prior", newPrior, true)
	register("random", newRandom, true)
}

// infectedMethod scores each node by its observation y and predicts every
// infected node: every infected node is equally suspect.
type infectedMethod struct{ n int }

func newInfected(env Env) (Method, error) {
	if err := newParams("infected", env.Params).done(); err != nil {
		return nil, err
	}
	return &infectedMethod{}, nil
}

func (m *infectedMethod) Name() string { return "infected" }

func (m *infectedMethod) Fit(_ context.Context, g *graph.Graph, _, _ []diffusion.Cascade) error {
	m.n = g.N()
	return nil
}

func (m *infectedMethod) Localize(_ context.Context, y []float64) (Prediction, error) {
	if m.n == 0 {
		return Prediction{}, ErrNotFitted
	}
	if err := checkY(m.n, y); err != nil {
		return Prediction{}, err
	}
	return Prediction{Scores: append([]float64(nil), y...), Sources: infectedOf(y)}, nil
}

// newDegree ranks infected nodes by degree (score 1 + degree, so every
// infected node outranks every uninfected one, which scores 0) and predicts
// the top k.
func newDegree(env Env) (Method, error) {
	p := newParams("degree", env.Params)
	m := &rankMethod{name: "degree", env: env, usesY: true, fixed: p.count("k", 0)}
	if err := p.done(); err != nil {
		return nil, err
	}
	m.rank = m.byScore(func(_ context.Context, y []float64, _ []int, scores []float64) error {
		for i, v := range y {
			scores[i] = 0
			if v >= 0.5 {
				scores[i] = 1 + float64(m.g.Degree(i))
			}
		}
		return nil
	})
	return m, nil
}

// newPrior scores each node by how often it was a source in the training
// cascades and predicts the top k. It never reads y: it measures what the
// source pattern alone gives away.
func newPrior(env Env) (Method, error) {
	p := newParams("prior", env.Params)
	m := &rankMethod{name: "prior", env: env, usesY: false, fixed: p.count("k", 0)}
	if err := p.done(); err != nil {
		return nil, err
	}
	var freq []float64
	m.prepare = func(train []diffusion.Cascade) error {
		freq = make([]float64, m.g.N())
		for _, c := range train {
			for _, s := range c.Sources {
				freq[s]++
			}
		}
		if len(train) > 0 {
			for i := range freq {
				freq[i] /= float64(len(train))
			}
		}
		return nil
	}
	m.rank = m.byScore(func(_ context.Context, _ []float64, _ []int, scores []float64) error {
		copy(scores, freq)
		return nil
	})
	return m, nil
}

// newRandom scores nodes uniformly at random and predicts the top k; it
// never reads y.
func newRandom(env Env) (Method, error) {
	p := newParams("random", env.Params)
	m := &rankMethod{name: "random", env: env, usesY: false, fixed: p.count("k", 0)}
	if err := p.done(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(env.Seed), 0xabad1dea))
	m.rank = m.byScore(func(_ context.Context, _ []float64, _ []int, scores []float64) error {
		for i := range scores {
			scores[i] = rng.Float64()
		}
		return nil
	})
	return m, nil
}
