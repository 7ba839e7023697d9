package deepis

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
)

func TestMain(m *testing.M) { forwardtest.Main(m) }

// The real plugin binary computes exactly what the package does: its VJP
// passes the finite-difference check through gRPC, it fits with streamed
// progress, and its state configures the in-process model.
func TestThroughPluginProcess(t *testing.T) {
	ctx := t.Context()
	g := randomGraph(40, 60, false, false, 71)
	p, err := forward.Launch(ctx, forwardtest.Build(t, Name))
	require.NoError(t, err)
	defer p.Close()

	info, err := p.Info(ctx)
	require.NoError(t, err)
	want, err := New().Info(ctx)
	require.NoError(t, err)
	require.Equal(t, want, info)

	pairs := cascades(t, g, 40, 72)
	// Without and with the source gate (which SI pairs leave nearly shut,
	// so the gated net's is opened by hand before the check).
	var res forward.FitResult
	for _, gate := range []string{"off", "on"} {
		params := map[string]string{"hops": "2", "hidden": "6", "gate": gate}
		require.NoError(t, p.Configure(ctx, g, params, nil))
		var reports []forward.Progress
		res, err = p.Fit(ctx, pairs[:30], forward.FitOptions{Epochs: 3, Seed: 9, Validation: pairs[30:], Lambda: 0.5},
			func(pr forward.Progress) { reports = append(reports, pr) })
		require.NoError(t, err)
		require.NotEmpty(t, reports)
		require.Equal(t, float64(len(reports)), res.Metrics["epochs"])
		require.Contains(t, res.Metrics, "val_mse")
		state := res.State
		if gate == "on" {
			require.Contains(t, res.Metrics, "source_gate")
			in := New()
			require.NoError(t, in.Configure(ctx, g, params, state))
			in.nt.srcLogit.Value[0] = -0.5
			state, err = encodeState(g, in.nt)
			require.NoError(t, err)
			require.NoError(t, p.Configure(ctx, g, params, state))
		}

		forwardtest.CheckVJP(t, p, g, forward.VJPCheckOptions{Rows: 2, Coords: 40})

		in := New()
		require.NoError(t, in.Configure(ctx, g, params, state))
		forwardtest.CheckSameVJP(t, p, in, g.N())
	}

	other := randomGraph(40, 61, false, false, 73)
	require.ErrorIs(t, p.Configure(ctx, other, nil, res.State), forward.ErrBadState)
}

// benchModels loads a shared graph and returns an untrained (but usable)
// model in process and the same model in launched plugin processes, one
// per set of launch options; the processes close with the benchmark.
func benchModels(b *testing.B, name string, launches ...[]forward.LaunchOption) (*graph.Graph, *Model, []*forward.Process) {
	b.Helper()
	path := filepath.Join("..", "..", "..", "shared", "data", name+".edges")
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no %s (the shared data sets, beside the repository): %v", path, err)
	}
	g, err := graph.Load(path)
	require.NoError(b, err)
	in := New()
	require.NoError(b, in.Configure(b.Context(), g, nil, nil))
	in.fitted = true
	state, err := encodeState(g, in.nt)
	require.NoError(b, err)
	procs := make([]*forward.Process, len(launches))
	for i, opts := range launches {
		p, err := forward.Launch(b.Context(), forwardtest.Build(b, Name), opts...)
		require.NoError(b, err)
		b.Cleanup(func() { _ = p.Close() })
		require.NoError(b, p.Configure(b.Context(), g, nil, state))
		procs[i] = p
	}
	return g, in, procs
}

// BenchmarkVJP times one VJP of a batch of 8 (the default restarts),
// in-process and through the plugin process, on the shared graphs.
func BenchmarkVJP(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		g, in, procs := benchModels(b, name, nil)
		rng := rand.New(rand.NewPCG(1, 1))
		x, dy := randDense(rng, 8, g.N(), 0, 1), randDense(rng, 8, g.N(), -1, 1)
		forwardtest.BenchmarkVJP(b, name, in, procs[0], x, dy)
	}
}

// BenchmarkSquaredErrorLoss times inference's per-step call (the fused
// data term with loss_only, batch 8) in process, through the plugin process
// with the batches in the shared region, and with them as bytes through
// gRPC: the differences are the cost of a round trip and of moving the
// batches.
func BenchmarkSquaredErrorLoss(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		g, in, procs := benchModels(b, name, nil, []forward.LaunchOption{forward.WithoutSharedMemory()})
		shared, viaBytes := procs[0], procs[1]
		rng := rand.New(rand.NewPCG(1, 1))
		x, target := randDense(rng, 8, g.N(), 0, 1), randDense(rng, 1, g.N(), 0, 1)
		for _, m := range []struct {
			name  string
			model forward.Model
		}{{"inprocess", in}, {"process", shared}, {"process-bytes", viaBytes}} {
			b.Run(name+"/"+m.name, func(b *testing.B) {
				for b.Loop() {
					if _, _, err := forward.SquaredErrorLoss(b.Context(), m.model, x, target); err != nil {
						b.Fatal(err)
					}
				}
				if m.model == shared {
					require.NotZero(b, shared.SharedCalls(), "the batches went through the shared region")
				}
			})
		}
	}
}
