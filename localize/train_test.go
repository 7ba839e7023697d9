package localize_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/deepis"
	"github.com/sourcewatch/sourcewatch/prior"
)

// TestTrainCalibratesPriorWeight trains small bundles with the deepis
// model in process and checks that the prior weight comes from the forward
// model's validation error unless the caller sets it, and that delta is
// one of the grid.
func TestTrainCalibratesPriorWeight(t *testing.T) {
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	sim := diffusion.DefaultConfig()
	sim.Beta = 0.25
	cs, _, err := diffusion.Simulate(t.Context(), g, sim, 40, 3, diffusion.Workers(1))
	require.NoError(t, err)
	pairs := make([]forward.Pair, len(cs))
	for i, c := range cs {
		pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}
	train, val := pairs[:30], pairs[30:]
	pc := prior.DefaultConfig()
	pc.Hidden, pc.Latent, pc.Epochs = 16, 4, 3
	for _, tc := range []struct {
		name   string
		weight float64
	}{{"calibrated", 0}, {"explicit", 0.7}} {
		t.Run(tc.name, func(t *testing.T) {
			m := deepis.New()
			require.NoError(t, m.Configure(t.Context(), g, nil, nil))
			opts := localize.DefaultOptions()
			opts.PriorWeight = tc.weight
			opts.Restarts = 2
			b, err := localize.Train(t.Context(), g, m, train, val, localize.TrainConfig{
				Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16,
				Solve: opts, ValidationSolves: 3, Seed: 5,
			}, nil)
			require.NoError(t, err)
			mse, err := localize.ForwardMSE(t.Context(), m, g.N(), val)
			require.NoError(t, err)
			require.InDelta(t, mse, b.Manifest.Metrics["noise_variance"], 1e-12)
			want := tc.weight
			if want == 0 {
				want = localize.CalibratedPriorWeight(mse)
				require.Greater(t, mse, 0.0)
				require.InDelta(t, 2*mse, want, 1e-12)
			}
			require.InDelta(t, want, b.Manifest.Solve.PriorWeight, 1e-12)
			require.InDelta(t, want, b.Manifest.Metrics["prior_weight"], 1e-12)
			require.InDelta(t, want, b.Options().PriorWeight, 1e-12)
			require.Contains(t, localize.Thresholds, b.Manifest.Threshold)
		})
	}
}
