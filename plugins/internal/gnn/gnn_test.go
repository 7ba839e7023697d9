package gnn_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn/gnntest"
)

// fakeArch and fakeNet are the smallest network the shared code can run:
// y = σ(x W + b) with a dense n x n W, where Extra only has to survive the
// state round trip.
type fakeArch struct {
	Scale int `json:"scale"`
	Extra int `json:"extra"`
}

func (a fakeArch) Validate() error {
	if a.Scale < 1 || a.Scale > 9 {
		return fmt.Errorf("scale %d: want 1..9", a.Scale)
	}
	return nil
}

type fakeNet struct {
	n    int
	arch fakeArch
	w, b *nn.Param
	x, y *mat.Dense
}

func newFake(g *graph.Graph, arch fakeArch, seed uint64) *fakeNet {
	n := g.N()
	rng := rand.New(rand.NewPCG(seed, 1))
	w := &nn.Param{Name: "w", Value: make([]float64, n*n), Grad: make([]float64, n*n), Rows: n, Cols: n}
	for i := range w.Value {
		w.Value[i] = float64(arch.Scale) * 0.1 * rng.NormFloat64()
	}
	b := &nn.Param{Name: "b", Value: make([]float64, n), Grad: make([]float64, n), Rows: 1, Cols: n}
	return &fakeNet{n: n, arch: arch, w: w, b: b}
}

func (f *fakeNet) Params() []*nn.Param { return []*nn.Param{f.w, f.b} }
func (f *fakeNet) Arch() fakeArch      { return f.arch }
func (f *fakeNet) Nodes() int          { return f.n }

// CacheFloats counts x, y, dz and dx.
func (f *fakeNet) CacheFloats() int { return 4 }

func (f *fakeNet) SetOutputBias(p float64) {
	for i := range f.b.Value {
		f.b.Value[i] = 0.5 * p
	}
}

func (f *fakeNet) Forward(x *mat.Dense) *mat.Dense {
	r, _ := x.Dims()
	f.x = mat.DenseCopyOf(x)
	f.y = mat.NewDense(r, f.n, nil)
	f.y.Mul(x, mat.NewDense(f.n, f.n, f.w.Value))
	f.y.Apply(func(_, j int, z float64) float64 { return gnn.Sigmoid(z + f.b.Value[j]) }, f.y)
	return f.y
}

func (f *fakeNet) Backward(dy *mat.Dense) *mat.Dense {
	r, _ := dy.Dims()
	dz := mat.NewDense(r, f.n, nil)
	dz.Apply(func(i, j int, g float64) float64 { y := f.y.At(i, j); return g * y * (1 - y) }, dy)
	var gw mat.Dense
	gw.Mul(f.x.T(), dz)
	acc := mat.NewDense(f.n, f.n, f.w.Grad)
	acc.Add(acc, &gw)
	for i := 0; i < r; i++ {
		for j, v := range dz.RawRowView(i) {
			f.b.Grad[j] += v
		}
	}
	dx := mat.NewDense(r, f.n, nil)
	dx.Mul(dz, mat.NewDense(f.n, f.n, f.w.Value).T())
	return dx
}

func fakeSpec() *gnn.Spec[fakeArch, *fakeNet] {
	return &gnn.Spec[fakeArch, *fakeNet]{
		Name: "fake", Version: "0.1.0", StateVersion: 2,
		Params: []forward.Param{{Name: "scale"}, {Name: "extra"}, {Name: "patience"}},
		ArchFields: func(a *fakeArch) map[string]*int {
			return map[string]*int{"scale": &a.Scale, "extra": &a.Extra}
		},
		DefaultArch: func() fakeArch { return fakeArch{Scale: 1} },
		NewNetwork:  newFake,
		Defaults:    gnn.Defaults{Epochs: 5, LearningRate: 0.05, BatchSize: 4, Lambda: 1, Patience: 3},
	}
}

func TestLossGradientMatchesFiniteDifferences(t *testing.T) {
	g := gnntest.RandomGraph(8, 16, true, false, 1)
	gnntest.CheckLossGradient[fakeArch](t, newFake(g, fakeArch{Scale: 3}, 2), gnntest.SimulateSI(g, 4, 2, 0.5, 3), rand.New(rand.NewPCG(4, 4)))
}

func TestConfigureErrors(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(8, 16, false, false, 1)
	spec := fakeSpec()
	state, err := spec.EncodeState(newFake(g, fakeArch{Scale: 2, Extra: 7}, 1), g)
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		g      *graph.Graph
		params map[string]string
		state  []byte
		want   string
	}{
		{"nil graph", nil, nil, nil, "fake: configure: nil graph"},
		{"unknown", g, map[string]string{"depth": "2"}, nil, `fake: configure: unknown param "depth" (known: scale, extra, patience)`},
		{"not a number", g, map[string]string{"scale": "x"}, nil, `param scale="x": not an integer`},
		{"invalid arch", g, map[string]string{"scale": "0"}, nil, "fake: configure: param scale 0: want 1..9"},
		{"patience", g, map[string]string{"patience": "0"}, nil, "param patience=0: want >= 1"},
		{"disagrees", g, map[string]string{"extra": "6"}, state, "fake: configure: param extra=6 disagrees with the state's architecture"},
		{"other model", g, nil, append([]byte("sourcewatch-forward-gat\n"), state[len(spec.StateMagic()):]...), "not a fake state (missing magic)"},
		// Behind the right magic, a header naming another model or an
		// architecture that cannot be built (a mutation audit: dropping
		// either check passed).
		{"other model in the header", g, nil, bytes.Replace(state, []byte(`"model":"fake"`), []byte(`"model":"fakx"`), 1), `state of model "fakx", want "fake"`},
		{"invalid arch in the header", g, nil, bytes.Replace(state, []byte(`"scale":2`), []byte(`"scale":0`), 1), "architecture: scale 0: want 1..9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorContains(t, gnn.NewModel(spec).Configure(ctx, tt.g, tt.params, tt.state), tt.want)
		})
	}
	// A newer build refuses an older state instead of misreading it.
	newer := fakeSpec()
	newer.StateVersion = 3
	err = gnn.NewModel(newer).Configure(ctx, g, nil, state)
	require.ErrorIs(t, err, forward.ErrBadState)
	require.ErrorContains(t, err, "state version 2, this build reads 3")
	// An agreeing explicit parameter is fine and the state's architecture wins.
	require.NoError(t, gnn.NewModel(spec).Configure(ctx, g, map[string]string{"extra": "7"}, state))
}

func TestFitPredictAndState(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(10, 20, true, false, 5)
	spec := fakeSpec()
	m := gnn.NewModel(spec)
	x := mat.NewDense(1, g.N(), gnntest.Indicator(g.N(), []int{1, 2}))
	_, err := m.Predict(ctx, x)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	require.NoError(t, m.Configure(ctx, g, map[string]string{"extra": "4"}, nil))
	_, err = m.Predict(ctx, x)
	require.ErrorIs(t, err, forward.ErrNotFitted)

	pairs := gnntest.SimulateSI(g, 12, 2, 0.5, 6)
	_, err = m.Fit(ctx, []forward.Pair{{Sources: []int{99}}}, forward.FitOptions{}, nil)
	require.ErrorContains(t, err, "fake: fit: training pair 0: source node index 99 out of range [0,10)")
	var epochs []int
	res, err := m.Fit(ctx, pairs[:8], forward.FitOptions{Validation: pairs[8:], Seed: 1}, func(p forward.Progress) { epochs = append(epochs, p.Epoch) })
	require.NoError(t, err)
	require.NotEmpty(t, epochs)
	require.Equal(t, []int{1, 2, 3, 4, 5}[:len(epochs)], epochs)
	require.Contains(t, res.Metrics, "val_mse")
	require.Equal(t, float64(len(epochs)), res.Metrics["epochs"])

	y, err := m.Predict(ctx, x)
	require.NoError(t, err)
	_, err = m.Predict(ctx, mat.NewDense(1, 3, nil))
	require.ErrorContains(t, err, "fake: predict: x has 3 columns, graph has 10 nodes")
	_, _, err = m.VJP(ctx, x, mat.NewDense(2, g.N(), nil))
	require.ErrorContains(t, err, "fake: vjp: x has 1 rows, dy has 2")

	// The state of Fit reproduces the fitted model, Extra included.
	m2 := gnn.NewModel(spec)
	require.NoError(t, m2.Configure(ctx, g, nil, res.State))
	y2, err := m2.Predict(ctx, x)
	require.NoError(t, err)
	require.Equal(t, y.RawMatrix().Data, y2.RawMatrix().Data)
	require.ErrorContains(t, m2.Configure(ctx, g, map[string]string{"extra": "5"}, res.State), "param extra=5 disagrees")
	// Bytes after the parameters are not a state this package wrote.
	err = m2.Configure(ctx, g, nil, append(append([]byte(nil), res.State...), "trailing garbage"...))
	require.ErrorIs(t, err, forward.ErrBadState)
	require.ErrorContains(t, err, "16 bytes after the parameters")

	// Options that are not numbers are refused by name, not as a NaN loss.
	for _, opts := range []forward.FitOptions{
		{Lambda: math.NaN()}, {Lambda: math.Inf(1)}, {LearningRate: math.Inf(1)},
	} {
		_, err = m.Fit(ctx, pairs[:8], opts, nil)
		require.ErrorContains(t, err, "fake: fit: learning rate")
		require.ErrorContains(t, err, "want finite values")
	}
}

func TestChunkRows(t *testing.T) {
	// Power Grid's 4941 nodes, from a one-column network through the
	// default MONSTOR (460) and GAT (about 1,030) to the widest GAT.
	const n = 4941
	prev := math.MaxInt
	for _, tt := range []struct{ perNode, want int }{
		{1, 3395}, {460, 7}, {1028, 3}, {3000, 1}, {3400, 1}, {230000, 1},
	} {
		t.Run(fmt.Sprint(tt.perNode), func(t *testing.T) {
			per := gnn.ChunkRows(n, tt.perNode)
			require.Equal(t, tt.want, per)
			require.LessOrEqual(t, per, prev, "wider networks get fewer rows per pass")
			if n*tt.perNode <= gnn.PassFloats {
				require.LessOrEqual(t, per*n*tt.perNode, gnn.PassFloats)
			}
			prev = per
		})
	}
	require.PanicsWithValue(t, "gnn: ChunkRows(4941, 0): want positive sizes", func() { gnn.ChunkRows(n, 0) })
	require.PanicsWithValue(t, "gnn: ChunkRows(0, 10): want positive sizes", func() { gnn.ChunkRows(0, 10) })
}

// Early stopping, replayed from the progress reports by the documented
// rule: an epoch improves on a lower validation MSE, and Fit stops after
// patience epochs without one. The metrics name the best epoch and its
// MSE, and the model left behind is that epoch's (a mutation audit:
// best_epoch reported as the last epoch, the stale count not kept or
// compared with >, and the best weights not restored passed the suite).
func TestFitStopsEarlyAndKeepsTheBestEpoch(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(10, 20, true, false, 5)
	pairs := gnntest.SimulateSI(g, 16, 2, 0.5, 6)
	train, val := pairs[:8], pairs[8:]
	for _, patience := range []int{1, 2} {
		m := gnn.NewModel(fakeSpec())
		require.NoError(t, m.Configure(ctx, g, map[string]string{"patience": fmt.Sprint(patience)}, nil))
		var reports []forward.Progress
		res, err := m.Fit(ctx, train, forward.FitOptions{Epochs: 200, LearningRate: 0.2, Seed: 9, Validation: val},
			func(p forward.Progress) { reports = append(reports, p) })
		require.NoError(t, err)

		best, bestEpoch, stale, stop := math.Inf(1), 0, 0, 0
		for i, p := range reports {
			if p.ValLoss < best {
				best, bestEpoch, stale = p.ValLoss, i+1, 0
			} else if stale++; stale == patience {
				stop = i + 1
				break
			}
		}
		require.NotZero(t, stop, "patience %d: the fit must stop early for the test to see it", patience)
		require.Len(t, reports, stop, "patience %d", patience)
		require.Equal(t, float64(stop), res.Metrics["epochs"])
		require.Equal(t, float64(bestEpoch), res.Metrics["best_epoch"])
		require.Equal(t, best, res.Metrics["val_mse"])
		require.Less(t, bestEpoch, stop)

		x := mat.NewDense(len(val), g.N(), nil)
		for i, p := range val {
			x.SetRow(i, gnntest.Indicator(g.N(), p.Sources))
		}
		y, err := m.Predict(ctx, x)
		require.NoError(t, err)
		var sum float64
		for i, p := range val {
			for j, o := range gnntest.Indicator(g.N(), p.Infected, p.Sources) {
				sum += (y.At(i, j) - o) * (y.At(i, j) - o)
			}
		}
		require.InDelta(t, best, sum/float64(len(val)*g.N()), 1e-12, "patience %d: the model left behind is the best epoch's", patience)
	}
}

// A Lambda of zero takes the spec's default, not zero: the monotonicity
// penalty stays on; a negative one turns it off (a mutation audit:
// lambda == 0 left at zero passed). That the fit depends on λ at all is
// shown by 0.5.
func TestFitLambdaZeroIsTheDefault(t *testing.T) {
	ctx := context.Background()
	g := gnntest.RandomGraph(10, 20, true, false, 5)
	pairs := gnntest.SimulateSI(g, 12, 3, 0.5, 6)
	fit := func(lambda float64) []byte {
		m := gnn.NewModel(fakeSpec())
		require.NoError(t, m.Configure(ctx, g, nil, nil))
		res, err := m.Fit(ctx, pairs, forward.FitOptions{Epochs: 2, Seed: 7, Lambda: lambda}, nil)
		require.NoError(t, err)
		return res.State
	}
	def := fit(fakeSpec().Defaults.Lambda)
	require.Equal(t, def, fit(0))
	require.NotEqual(t, def, fit(0.5))
	require.NotEqual(t, def, fit(-1))
}

// BackgroundRate is the share of non-source nodes infected, counted by
// hand: pair 0 has 2 of its 4 non-sources infected, pair 1 one of 4 (node
// 0, a source only in pair 0); no non-source at all gives 0.5 (a mutation
// audit: counting sources, not clearing a pair's marks, or a NaN for no
// non-source passed: only the output bias's start depends on it, and
// nothing checked that).
func TestBackgroundRate(t *testing.T) {
	require.Equal(t, 3.0/8, gnn.BackgroundRate([]forward.Pair{
		{Sources: []int{0}, Infected: []int{0, 1, 2}},
		{Sources: []int{3}, Infected: []int{0, 3}},
	}, 5))
	require.Equal(t, 0.5, gnn.BackgroundRate([]forward.Pair{{Sources: []int{0, 1}, Infected: []int{0, 1}}}, 2))

	// Fit starts the output bias from it: the fake's SetOutputBias sets
	// b = p/2, and a rate of 1e-300 leaves it there (a mutation audit:
	// Fit not calling SetOutputBias passed).
	g := gnntest.RandomGraph(5, 6, false, false, 5)
	spec := fakeSpec()
	m := gnn.NewModel(spec)
	require.NoError(t, m.Configure(context.Background(), g, nil, nil))
	res, err := m.Fit(context.Background(), []forward.Pair{
		{Sources: []int{0}, Infected: []int{0, 1, 2}},
		{Sources: []int{3}, Infected: []int{0, 3}},
	}, forward.FitOptions{Epochs: 1, LearningRate: 1e-300, Seed: 3}, nil)
	require.NoError(t, err)
	net, err := spec.DecodeState(res.State, g)
	require.NoError(t, err)
	for _, b := range net.b.Value {
		require.InDelta(t, 3.0/16, b, 1e-15)
	}
}

// Trainer.Loss is mean (f(x) - y)^2 + λ mean max(0, f(x_sub) - f(x))^2,
// computed here from the network's own forward pass on the X and XS that
// Fill drew, where y marks the infected and the sources; each x_sub drops
// at least one source and keeps each of the others about half the time
// (a mutation audit: a penalty counting f(x_sub) < f(x) too, and subsets
// that kept nothing, passed: the gradient check holds the loss to its own
// definition).
func TestTrainerLossByDefinition(t *testing.T) {
	g := gnntest.RandomGraph(10, 20, true, false, 5)
	n := g.N()
	net := newFake(g, fakeArch{Scale: 3}, 8)
	batch := []forward.Pair{
		{Sources: []int{0, 3, 7, 9}, Infected: []int{1, 2}},
		{Sources: []int{2, 5}, Infected: []int{6}},
		{Sources: []int{4, 6, 8}},
	}
	const lambda = 0.7
	tr := &gnn.Trainer[fakeArch, *fakeNet]{Net: net, Lambda: lambda}
	rng := rand.New(rand.NewPCG(12, 13))
	kept := 0
	for rep := 0; rep < 200; rep++ {
		tr.Fill(batch, rng)
		for i, p := range batch {
			var in, sub int
			for v := 0; v < n; v++ {
				if tr.XS[i*n+v] == 1 {
					require.Equal(t, 1.0, tr.X[i*n+v], "x_sub is a subset of x")
					sub++
				}
				if tr.X[i*n+v] == 1 {
					in++
				}
			}
			require.Equal(t, len(p.Sources), in)
			require.Less(t, sub, in, "at least one source dropped")
			kept += sub
		}
	}
	// Of 4, 2 and 3 sources one is dropped and the others kept half the
	// time: 1.5 + 0.5 + 1 = 3 kept per fill.
	require.InDelta(t, 3, float64(kept)/200, 0.3)

	loss, mse := tr.Loss(false)
	x := mat.NewDense(len(batch), n, tr.X)
	xs := mat.NewDense(len(batch), n, tr.XS)
	f := mat.DenseCopyOf(net.Forward(x))
	fs := mat.DenseCopyOf(net.Forward(xs))
	var sq, pen float64
	live := false
	for i, p := range batch {
		y := gnntest.Indicator(n, p.Infected, p.Sources)
		for v := 0; v < n; v++ {
			d := f.At(i, v) - y[v]
			sq += d * d
			if r := fs.At(i, v) - f.At(i, v); r > 0 {
				pen += r * r
				live = true
			}
		}
	}
	require.True(t, live, "the penalty must be live for the check to see it")
	cells := float64(len(batch) * n)
	require.InDelta(t, sq/cells, mse, 1e-12)
	require.InDelta(t, (sq+lambda*pen)/cells, loss, 1e-12)
}
