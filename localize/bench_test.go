package localize_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/deepis"
	"github.com/sourcewatch/sourcewatch/prior"
)

// TestMain removes the plugin binaries the benchmarks build.
func TestMain(m *testing.M) { forwardtest.Main(m) }

// BenchmarkSolve times one Solve (R = 8, 20 + 50 steps, and 20 + 25 through
// the process) with the deepis forward model, through its real plugin
// process and in process, on the
// shared Jazz and Power Grid graphs (skipped where ../shared is absent:
// a benchmark, not a test). It reports the split of the time between the
// forward model (plugin compute plus round trips) and the prior; the
// in-process run gives the compute alone, so the difference is the cost
// of the round trips.
func BenchmarkSolve(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		path := filepath.Join("..", "..", "shared", "data", name+".edges")
		if _, err := os.Stat(path); err != nil {
			b.Logf("skipping %s: %v", name, err)
			continue
		}
		g, err := graph.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		bundle, state, y := benchSetup(b, g)
		inproc := deepis.New()
		if err := inproc.Configure(b.Context(), g, nil, state); err != nil {
			b.Fatal(err)
		}
		proc, err := forward.Launch(b.Context(), forwardtest.Build(b, "deepis"))
		if err != nil {
			b.Fatal(err)
		}
		if err := proc.Configure(b.Context(), g, nil, state); err != nil {
			b.Fatal(err)
		}
		half := localize.DefaultOptions()
		half.OptSteps = 25
		for _, mode := range []struct {
			name string
			f    localize.Forward
			opts localize.Options
		}{
			{"process", proc, localize.DefaultOptions()},
			{"inprocess", inproc, localize.DefaultOptions()},
			// n_opt = 25, as validation chooses on Cora-ML and Power Grid:
			// a Solve's time is its round trips.
			{"process/steps=20+25", proc, half},
		} {
			b.Run(name+"/"+mode.name, func(b *testing.B) {
				var fwd, pri float64
				for b.Loop() {
					res, err := localize.Solve(b.Context(), bundle, mode.f, y, mode.opts)
					if err != nil {
						b.Fatal(err)
					}
					fwd += res.Timing.ForwardSeconds
					pri += res.Timing.PriorSeconds
				}
				b.ReportMetric(fwd/float64(b.N)*1e3, "forward-ms/op")
				b.ReportMetric(pri/float64(b.N)*1e3, "prior-ms/op")
			})
		}
		proc.Close()
	}
}

// benchSetup fits a small deepis model and prior on simulated SI cascades.
func benchSetup(b *testing.B, g *graph.Graph) (*localize.Bundle, []byte, []float64) {
	b.Helper()
	start := time.Now()
	cfg := diffusion.DefaultConfig()
	cs, _, err := diffusion.Simulate(b.Context(), g, cfg, 48, 1)
	if err != nil {
		b.Fatal(err)
	}
	pairs := make([]forward.Pair, len(cs))
	sources := make([][]int, len(cs))
	for i, c := range cs {
		pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
		sources[i] = c.Sources
	}
	m := deepis.New()
	if err := m.Configure(b.Context(), g, nil, nil); err != nil {
		b.Fatal(err)
	}
	fit, err := m.Fit(b.Context(), pairs[:40], forward.FitOptions{Epochs: 2, Validation: pairs[40:]}, nil)
	if err != nil {
		b.Fatal(err)
	}
	pc := prior.DefaultConfig()
	pc.Epochs = 2
	vae := prior.NewVAE(g.N(), pc)
	if _, err := vae.Fit(b.Context(), sources[:40], sources[40:], nil); err != nil {
		b.Fatal(err)
	}
	terms := vae.Terms(sources[:40], 1024, rand.New(rand.NewPCG(1, 2)))
	bundle := &localize.Bundle{
		Manifest: localize.Manifest{Graph: localize.GraphRef{Nodes: g.N()}, Threshold: 0.5},
		VAE:      vae, Terms: terms, Graph: g,
	}
	b.Logf("%s: setup %s", g, time.Since(start).Round(time.Millisecond))
	return bundle, fit.State, cs[47].Y(nil)
}
