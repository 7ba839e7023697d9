package icmf_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func TestMain(m *testing.M) { forwardtest.Main(m) }

func karate(t testing.TB) *graph.Graph {
	t.Helper()
	g, err := graph.Load("../../configs/demo/karate.edges")
	require.NoError(t, err)
	return g
}

func configured(t testing.TB, g *graph.Graph, params map[string]string) *icmf.Model {
	t.Helper()
	m := icmf.New()
	require.NoError(t, m.Configure(t.Context(), g, params, nil))
	return m
}

// randomWeighted is a small random directed weighted graph, including
// weights of 1, where a factor 1 - w y can reach 0.
func randomWeighted(seed uint64) *graph.Graph {
	rng := rand.New(rand.NewPCG(seed, 7))
	var edges []graph.Edge
	for u := 0; u < 20; u++ {
		for k := 0; k < 3; k++ {
			w := rng.Float64()
			if k == 0 {
				w = 1
			}
			edges = append(edges, graph.Edge{From: u, To: rng.IntN(20), W: w})
		}
	}
	return graph.New(20, edges, nil, true, true)
}

func TestVJPFiniteDifference(t *testing.T) {
	for _, tc := range []struct {
		name   string
		g      *graph.Graph
		params map[string]string
	}{
		{"karate default", karate(t), nil},
		{"karate one step", karate(t), map[string]string{"steps": "1"}},
		{"karate p=0.4 steps=8", karate(t), map[string]string{"p": "0.4", "steps": "8"}},
		{"directed weighted", randomWeighted(1), map[string]string{"steps": "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := configured(t, tc.g, tc.params)
			res := forwardtest.CheckVJP(t, m, tc.g, forward.VJPCheckOptions{Rows: 3})
			require.Equal(t, (3+1)*tc.g.N(), res.Checked, "three points inside and a corner")
		})
	}
}

// Where an arc of probability 1 leaves a node infected for sure (x_u = 1),
// its factor 1 - w y_u is exactly 0 and the gradient through it is not:
// lowering x_u raises the factor at rate w. The VJP must match the
// left-sided difference there (x <= 1, and lowering any x_i lowers every
// y, so each factor moves along one side).
func TestVJPAtCertainInfection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		g      *graph.Graph
		params map[string]string
	}{
		{"path p=1 one step", graph.New(2, []graph.Edge{{From: 0, To: 1}}, nil, true, false), map[string]string{"p": "1", "steps": "1"}},
		{"karate p=1", karate(t), map[string]string{"p": "1", "steps": "3"}},
		{"karate p=0.6", karate(t), map[string]string{"p": "0.6", "steps": "3"}},
		{"directed weighted", randomWeighted(3), map[string]string{"steps": "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := configured(t, tc.g, tc.params)
			n := tc.g.N()
			rng := rand.New(rand.NewPCG(5, 6))
			x := mat.NewDense(1, n, nil)
			dy := mat.NewDense(1, n, nil)
			for v := 0; v < n; v++ {
				x.Set(0, v, 0.05+0.9*rng.Float64())
				if v%3 == 0 {
					x.Set(0, v, 1) // certain: its out-arcs of weight 1 saturate
				}
				dy.Set(0, v, rng.NormFloat64())
			}
			_, dx, err := m.VJP(t.Context(), x, dy)
			require.NoError(t, err)
			y0, err := m.Predict(t.Context(), x)
			require.NoError(t, err)
			const h = 1e-7
			for i := 0; i < n; i++ {
				xm := mat.DenseCopyOf(x)
				xm.Set(0, i, x.At(0, i)-h)
				ym, err := m.Predict(t.Context(), xm)
				require.NoError(t, err)
				var num float64
				for v := 0; v < n; v++ {
					num += dy.At(0, v) * (y0.At(0, v) - ym.At(0, v)) / h
				}
				require.InDelta(t, num, dx.At(0, i), 1e-5*(1+math.Abs(num)), "node %d (x = %g)", i, x.At(0, i))
			}
		})
	}
}

// On a path 0-1-2 with x = e_0 the mean field has a closed form: node 1 is
// infected with probability p after any step >= 1, node 2 with p^2 after
// step >= 2.
func TestPredictClosedFormOnPath(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false)
	for _, p := range []float64{0.1, 0.5, 0.9} {
		for steps := 1; steps <= 3; steps++ {
			m := configured(t, g, map[string]string{"p": strconv.FormatFloat(p, 'g', -1, 64), "steps": strconv.Itoa(steps)})
			y, err := m.Predict(t.Context(), mat.NewDense(1, 3, []float64{1, 0, 0}))
			require.NoError(t, err)
			want2 := 0.0
			if steps >= 2 {
				want2 = p * p
			}
			if steps == 3 {
				// Step 3 feeds node 2's p^2 back to node 1.
				want1 := 1 - (1-p)*(1-p*p*p)
				require.InDelta(t, want1, y.At(0, 1), 1e-12)
			} else {
				require.InDelta(t, p, y.At(0, 1), 1e-12)
			}
			require.InDelta(t, 1, y.At(0, 0), 1e-12)
			require.InDelta(t, want2, y.At(0, 2), 1e-12)
		}
	}
}

func TestWeightedGraphUsesEdgeWeights(t *testing.T) {
	g := graph.New(2, []graph.Edge{{From: 0, To: 1, W: 0.3}}, nil, true, true)
	m := configured(t, g, map[string]string{"p": "0.9", "steps": "1"})
	y, err := m.Predict(t.Context(), mat.NewDense(2, 2, []float64{1, 0, 0, 1}))
	require.NoError(t, err)
	require.InDelta(t, 0.3, y.At(0, 1), 1e-12)
	require.InDelta(t, 0, y.At(1, 0), 1e-12, "the arc is 0->1 only")
}

func TestMonotoneAndInRange(t *testing.T) {
	g := karate(t)
	m := configured(t, g, map[string]string{"p": "0.3"})
	rng := rand.New(rand.NewPCG(3, 4))
	n := g.N()
	x := mat.NewDense(2, n, nil)
	for j := 0; j < n; j++ {
		if rng.Float64() < 0.2 {
			x.Set(0, j, 1)
			if rng.Float64() < 0.5 {
				x.Set(1, j, 1) // row 1 is a subset of row 0
			}
		}
	}
	y, err := m.Predict(t.Context(), x)
	require.NoError(t, err)
	for j := 0; j < n; j++ {
		require.GreaterOrEqual(t, y.At(0, j), y.At(1, j), "node %d", j)
		require.GreaterOrEqual(t, y.At(1, j), x.At(1, j))
		require.LessOrEqual(t, y.At(0, j), 1.0)
	}
}

func TestConfigureErrors(t *testing.T) {
	g := karate(t)
	for _, tc := range []struct {
		name   string
		params map[string]string
		state  []byte
		want   string
		is     error
	}{
		{"unknown param", map[string]string{"beta": "1"}, nil, `unknown param "beta"`, nil},
		{"steps not int", map[string]string{"steps": "x"}, nil, `steps="x"`, nil},
		{"steps zero", map[string]string{"steps": "0"}, nil, `steps="0"`, nil},
		{"steps above MaxSteps", map[string]string{"steps": "1001"}, nil, `steps="1001": want an integer in 1..1000`, nil},
		{"p above 1", map[string]string{"p": "1.5"}, nil, `p="1.5"`, nil},
		{"p below 0", map[string]string{"p": "-0.1"}, nil, `p="-0.1": want a number in [0,1]`, nil},
		{"p NaN", map[string]string{"p": "NaN"}, nil, `p="NaN"`, nil},
		{"state", nil, []byte{1}, "1-byte state", forward.ErrBadState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := icmf.New().Configure(t.Context(), g, tc.params, tc.state)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
	// The ends of both ranges are taken (a mutation audit: steps >=
	// MaxSteps or p > 0 refused them and no case failed).
	for _, params := range []map[string]string{{"steps": "1"}, {"steps": "1000"}, {"p": "0"}, {"p": "1"}} {
		require.NoError(t, icmf.New().Configure(t.Context(), g, params, nil), "%v", params)
	}
}

// With p = 0 no arc passes anything: f(x) = x whatever the steps.
func TestPredictAtZeroP(t *testing.T) {
	m := configured(t, karate(t), map[string]string{"p": "0", "steps": "3"})
	x := mat.NewDense(1, 34, nil)
	x.Set(0, 0, 1)
	x.Set(0, 5, 0.25)
	y, err := m.Predict(t.Context(), x)
	require.NoError(t, err)
	require.Equal(t, x.RawMatrix().Data, y.RawMatrix().Data)
}

func TestNotConfigured(t *testing.T) {
	m := icmf.New()
	_, err := m.Predict(t.Context(), mat.NewDense(1, 3, nil))
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	_, _, err = m.VJP(t.Context(), mat.NewDense(1, 3, nil), mat.NewDense(1, 3, nil))
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	_, err = m.Fit(t.Context(), nil, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
}

// A cancelled context stops Predict, VJP and Fit with its error (a
// mutation audit: dropping the check in VJP or in Fit's pass passed).
func TestCancelled(t *testing.T) {
	m := configured(t, karate(t), nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	x := mat.NewDense(2, 34, nil)
	_, err := m.Predict(ctx, x)
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = m.VJP(ctx, x, x)
	require.ErrorIs(t, err, context.Canceled)
	_, err = m.Fit(ctx, []forward.Pair{{Sources: []int{0}}}, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestShapePanics(t *testing.T) {
	m := configured(t, karate(t), nil)
	require.PanicsWithValue(t, "icmf: x has 3 columns for a 34-node graph", func() {
		_, _ = m.Predict(t.Context(), mat.NewDense(1, 3, nil))
	})
	require.PanicsWithValue(t, "icmf: dy is 2x34, x is 1x34", func() {
		_, _, _ = m.VJP(t.Context(), mat.NewDense(1, 34, nil), mat.NewDense(2, 34, nil))
	})
}

func TestFitReportsMSEOfFixedModel(t *testing.T) {
	g := karate(t)
	m := configured(t, g, nil)
	pairs := []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1, 2}}, {Sources: []int{33, 5}, Infected: []int{33, 5, 32}}}
	val := []forward.Pair{{Sources: []int{10}, Infected: []int{10}}}
	var reports []forward.Progress
	res, err := m.Fit(t.Context(), pairs, forward.FitOptions{Validation: val}, func(p forward.Progress) { reports = append(reports, p) })
	require.NoError(t, err)
	require.Empty(t, res.State)
	mse := func(ps []forward.Pair) float64 {
		var sum float64
		for _, p := range ps {
			x, y := make([]float64, g.N()), make([]float64, g.N())
			for _, i := range p.Sources {
				x[i] = 1
			}
			for _, i := range p.Infected {
				y[i] = 1
			}
			pred, err := m.Predict(t.Context(), mat.NewDense(1, g.N(), x))
			require.NoError(t, err)
			for i := range y {
				sum += (pred.At(0, i) - y[i]) * (pred.At(0, i) - y[i])
			}
		}
		return sum / float64(len(ps)*g.N())
	}
	require.InDelta(t, mse(pairs), res.Metrics["train_mse"], 1e-12)
	require.InDelta(t, mse(val), res.Metrics["val_mse"], 1e-12)
	require.Len(t, reports, 1)
	require.InDelta(t, res.Metrics["train_mse"], reports[0].TrainLoss, 0)
	// The one report is epoch 1 of 1 and carries the validation MSE (a
	// mutation audit: ValLoss: train or Epoch: 0 passed).
	require.Equal(t, 1, reports[0].Epoch)
	require.Equal(t, 1, reports[0].Epochs)
	require.InDelta(t, res.Metrics["val_mse"], reports[0].ValLoss, 0)
	require.NotEqual(t, reports[0].TrainLoss, reports[0].ValLoss)

	_, err = m.Fit(t.Context(), []forward.Pair{{Sources: []int{34}}}, forward.FitOptions{}, nil)
	require.ErrorContains(t, err, "pairs[0].sources: node 34 out of range")
	// A bad validation pair is refused too, naming it; a negative index
	// as well as one past the end.
	_, err = m.Fit(t.Context(), pairs, forward.FitOptions{Validation: []forward.Pair{{Sources: []int{1}}, {Infected: []int{-1}}}}, nil)
	require.ErrorContains(t, err, "validation[1].infected: node -1 out of range for 34 nodes")
	res, err = m.Fit(t.Context(), pairs, forward.FitOptions{}, nil)
	require.NoError(t, err)
	require.NotContains(t, res.Metrics, "val_mse")
	require.False(t, math.IsNaN(res.Metrics["train_mse"]))
}

// The real plugin binary must compute exactly what the package does, and
// its VJP must pass the same finite-difference check through gRPC.
func TestThroughPluginProcess(t *testing.T) {
	g := karate(t)
	params := map[string]string{"p": "0.2", "steps": "5"}
	p, err := forward.Launch(t.Context(), forwardtest.Build(t, icmf.Name))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Configure(t.Context(), g, params, nil))
	forwardtest.CheckVJP(t, p, g, forward.VJPCheckOptions{Rows: 3})

	in := configured(t, g, params)
	forwardtest.CheckSameVJP(t, p, in, g.N())
	info, err := p.Info(t.Context())
	require.NoError(t, err)
	want, err := in.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, want, info)
}

func BenchmarkVJP(b *testing.B) {
	for _, name := range []string{"jazz", "power_grid"} {
		path := "../../../shared/data/" + name + ".edges"
		if _, err := os.Stat(path); err != nil {
			b.Skipf("no %s (the shared data sets, beside the repository): %v", path, err)
		}
		g, err := graph.Load(path)
		require.NoError(b, err)
		x, dy := mat.NewDense(8, g.N(), nil), mat.NewDense(8, g.N(), nil)
		rng := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < 8; i++ {
			for j := 0; j < g.N(); j++ {
				x.Set(i, j, rng.Float64())
				dy.Set(i, j, rng.NormFloat64())
			}
		}
		in := configured(b, g, nil)
		p, err := forward.Launch(b.Context(), forwardtest.Build(b, icmf.Name))
		require.NoError(b, err)
		require.NoError(b, p.Configure(b.Context(), g, nil, nil))
		forwardtest.BenchmarkVJP(b, name, in, p, x, dy)
		require.NoError(b, p.Close())
	}
}
