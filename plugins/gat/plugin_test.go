package gat

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn/gnntest"
)

func TestMain(m *testing.M) { forwardtest.Main(m) }

// The real plugin binary must compute exactly what the package does: its
// VJP passes the finite-difference check through gRPC, it fits with
// streamed progress, and its state configures the in-process model.
func TestThroughPluginProcess(t *testing.T) {
	ctx := t.Context()
	g := gnntest.RandomGraph(40, 90, false, false, 71)
	p, err := forward.Launch(ctx, forwardtest.Build(t, Name))
	require.NoError(t, err)
	defer p.Close()

	info, err := p.Info(ctx)
	require.NoError(t, err)
	want, err := New().Info(ctx)
	require.NoError(t, err)
	require.Equal(t, want, info)

	params := map[string]string{"heads": "4", "head_dim": "4"}
	require.NoError(t, p.Configure(ctx, g, params, nil))
	pairs := gnntest.SimulateSI(g, 40, 3, 0.3, 72)
	var reports []forward.Progress
	res, err := p.Fit(ctx, pairs[:30], forward.FitOptions{Epochs: 3, Seed: 9, Validation: pairs[30:]},
		func(pr forward.Progress) { reports = append(reports, pr) })
	require.NoError(t, err)
	require.Len(t, reports, 3)
	require.Contains(t, res.Metrics, "val_mse")

	forwardtest.CheckVJP(t, p, g, forward.VJPCheckOptions{Rows: 2, Coords: 20})

	in := New()
	require.NoError(t, in.Configure(ctx, g, params, res.State))
	forwardtest.CheckSameVJP(t, p, in, g.N())

	// A state for another graph is refused through the process as well.
	other := gnntest.RandomGraph(40, 91, false, false, 73)
	require.ErrorIs(t, p.Configure(ctx, other, nil, res.State), forward.ErrBadState)
}

// BenchmarkVJP times one VJP of a batch of 8 (the default restarts),
// in-process and through the plugin process, on the shared graphs.
func BenchmarkVJP(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		g := gnntest.LoadShared(b, name)
		state := fittedState(b, g, DefaultArch(), 1)
		in := New()
		require.NoError(b, in.Configure(b.Context(), g, nil, state))
		p, err := forward.Launch(b.Context(), forwardtest.Build(b, Name))
		require.NoError(b, err)
		require.NoError(b, p.Configure(b.Context(), g, nil, state))
		rng := rand.New(rand.NewPCG(1, 1))
		x, dy := gnntest.RandomMatrix(8, g.N(), 0, 1, rng), gnntest.RandomMatrix(8, g.N(), -1, 1, rng)
		for _, m := range []struct {
			name  string
			model forward.Model
		}{{"inprocess", in}, {"process", p}} {
			b.Run(name+"/"+m.name, func(b *testing.B) {
				for b.Loop() {
					if _, _, err := m.model.VJP(context.Background(), x, dy); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		require.NoError(b, p.Close())
	}
}

// The shipped plugin passes the contract's conformance checks (what
// `sourcewatch plugin check` runs).
func TestConformance(t *testing.T) {
	g := gnntest.RandomGraph(40, 90, false, false, 75)
	rep := forward.CheckPlugin(t.Context(), forwardtest.Build(t, Name), g, gnntest.SimulateSI(g, 40, 3, 0.3, 76),
		forward.PluginCheckOptions{Fit: forward.FitOptions{Epochs: 3, Seed: 1}, Seed: 1})
	for _, r := range rep.Results {
		t.Logf("%-18s %-4s %s", r.Name, r.Status, r.Detail)
	}
	require.True(t, rep.Passed())
}
