package eval

import (
	"context"
	"math/rand/v2"
	"testing"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// gridLike is a sparse, long-path graph shaped like a power grid (4970
// nodes, about 6600 edges, mean degree 2.7): a snake through a 70x71 grid
// plus a third of the remaining grid edges.
func gridLike(seed uint64) *graph.Graph {
	const rows, cols = 70, 71
	rng := rand.New(rand.NewPCG(seed, 3))
	id := func(r, c int) int { return r*cols + c }
	var e []graph.Edge
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if c+1 < cols {
				e = append(e, graph.Edge{From: id(r, c), To: id(r, c+1)})
			}
			if r+1 < rows {
				// the snake turns at alternating ends
				turn := (r%2 == 0 && c == cols-1) || (r%2 == 1 && c == 0)
				if turn || rng.Float64() < 0.34 {
					e = append(e, graph.Edge{From: id(r, c), To: id(r+1, c)})
				}
			}
		}
	}
	return graph.New(rows*cols, e, nil, false, false)
}

// benchMethod fits name on a small split of gridLike cascades and measures
// one Localize per iteration, cycling over test observations.
func benchMethod(b *testing.B, name string, params map[string]string) {
	g := gridLike(1)
	cs, _, err := diffusion.Simulate(context.Background(), g, diffusion.DefaultConfig(), 30, 1)
	if err != nil {
		b.Fatal(err)
	}
	f, err := Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	m, err := f(Env{Graph: g, Seed: 1, Logger: zap.NewNop(), Params: params})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Fit(ctx, g, cs[:10], cs[10:20]); err != nil {
		b.Fatal(err)
	}
	ys := make([][]float64, 0, 10)
	for _, c := range cs[20:] {
		ys = append(ys, observe(g.N(), c, nil))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := m.Localize(ctx, ys[i%len(ys)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLPSIGrid(b *testing.B)      { benchMethod(b, "lpsi", nil) }
func BenchmarkNetSleuthGrid(b *testing.B) { benchMethod(b, "netsleuth", map[string]string{"k": "100"}) }
func BenchmarkOJCGrid(b *testing.B)       { benchMethod(b, "ojc", map[string]string{"k": "50"}) }
func BenchmarkJordanGrid(b *testing.B)    { benchMethod(b, "jordan", map[string]string{"k": "1"}) }
func BenchmarkInfectedGrid(b *testing.B)  { benchMethod(b, "infected", nil) }
func BenchmarkDegreeGrid(b *testing.B)    { benchMethod(b, "degree", map[string]string{"k": "500"}) }
func BenchmarkPriorGrid(b *testing.B)     { benchMethod(b, "prior", map[string]string{"k": "500"}) }
func BenchmarkRandomGrid(b *testing.B)    { benchMethod(b, "random", map[string]string{"k": "500"}) }

func BenchmarkScoreGrid(b *testing.B) {
	g := gridLike(1)
	cs, _, err := diffusion.Simulate(context.Background(), g, diffusion.DefaultConfig(), 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	scores := make([]float64, g.N())
	for i := range scores {
		scores[i] = float64(i % 97)
	}
	p := Prediction{Scores: scores, Sources: cs[0].Infected[:50]}
	for b.Loop() {
		Score(g, cs[0].Sources, p)
	}
}

// BenchmarkBayesKarateSI is one exact SI posterior per iteration on the
// Karate club's observations at the default simulation (10% sources,
// snapshots at 20-50% infected), cycling over 40 of them: the bayes
// control's cost per cascade in eval, dominated by the observations with
// the most infected nodes (2^m subsets).
func BenchmarkBayesKarateSI(b *testing.B) {
	g, err := graph.Load("../configs/demo/karate.edges")
	if err != nil {
		b.Fatal(err)
	}
	cfg := diffusion.DefaultConfig()
	cs, _, err := diffusion.Simulate(context.Background(), g, cfg, 40, 2)
	if err != nil {
		b.Fatal(err)
	}
	post, err := newSIPosterior(g, &cfg, DefaultBayesMaxInfected)
	if err != nil {
		b.Fatal(err)
	}
	scores := make([]float64, g.N())
	b.ResetTimer()
	for i := range b.N {
		if err := post.marginals(context.Background(), cs[i%len(cs)].Infected, scores); err != nil {
			b.Fatal(err)
		}
	}
}
