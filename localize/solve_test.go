package localize

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
)

// meanField is a small differentiable forward model for unit tests of this
// package: one mean-field step y = 1 - (1 - x) ⊙ (1 - P^T x) on a dense
// matrix P.
type meanField struct{ p *mat.Dense }

func (m meanField) Predict(_ context.Context, x *mat.Dense) (*mat.Dense, error) {
	r, n := x.Dims()
	var px mat.Dense
	px.Mul(x, m.p)
	y := mat.NewDense(r, n, nil)
	for i := 0; i < r; i++ {
		for v := 0; v < n; v++ {
			q := math.Min(1, px.At(i, v))
			y.Set(i, v, 1-(1-x.At(i, v))*(1-q))
		}
	}
	return y, nil
}

func (m meanField) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, _ := m.Predict(ctx, x)
	r, n := x.Dims()
	var px mat.Dense
	px.Mul(x, m.p)
	// dy/dx_v (direct) = 1 - q_v ; dy_v/dq_v = 1 - x_v; dq/dx = P^T.
	direct := mat.NewDense(r, n, nil)
	dq := mat.NewDense(r, n, nil)
	for i := 0; i < r; i++ {
		for v := 0; v < n; v++ {
			q := px.At(i, v)
			if q < 1 {
				dq.Set(i, v, dy.At(i, v)*(1-x.At(i, v)))
			}
			direct.Set(i, v, dy.At(i, v)*(1-math.Min(1, q)))
		}
	}
	var dx mat.Dense
	dx.Mul(dq, m.p.T())
	dx.Add(&dx, direct)
	return y, &dx, nil
}

// densePrior implements Prior with explicit a, b, D and c.
type densePrior struct {
	a, b []float64
	d    *mat.Dense // N x n
	c    []float64
}

func (p densePrior) Init(x, grad *mat.Dense) []float64 {
	r, n := x.Dims()
	loss := make([]float64, r)
	for i := 0; i < r; i++ {
		for v := 0; v < n; v++ {
			loss[i] -= x.At(i, v)*p.a[v] + (1-x.At(i, v))*p.b[v]
			grad.Set(i, v, -(p.a[v] - p.b[v]))
		}
	}
	return loss
}

func (p densePrior) Pred(x, grad *mat.Dense) []float64 {
	r, n := x.Dims()
	k, _ := p.d.Dims()
	loss := make([]float64, r)
	for i := 0; i < r; i++ {
		logits := make([]float64, k)
		mx := math.Inf(-1)
		for j := 0; j < k; j++ {
			logits[j] = p.c[j]
			for v := 0; v < n; v++ {
				logits[j] += p.d.At(j, v) * x.At(i, v)
			}
			mx = math.Max(mx, logits[j])
		}
		var z float64
		for _, l := range logits {
			z += math.Exp(l - mx)
		}
		loss[i] = -(mx + math.Log(z))
		for v := 0; v < n; v++ {
			var g float64
			for j := 0; j < k; j++ {
				g -= p.d.At(j, v) * math.Exp(logits[j]-mx) / z
			}
			grad.Set(i, v, g)
		}
	}
	return loss
}

func testProblem(n, protos int, seed uint64) (*Problem, meanField, densePrior) {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := mat.NewDense(n, n, nil)
	for u := 0; u < n; u++ {
		for v := 0; v < n; v++ {
			if u != v && rng.Float64() < 0.3 {
				p.Set(u, v, 0.3*rng.Float64())
			}
		}
	}
	f := meanField{p}
	pr := densePrior{a: make([]float64, n), b: make([]float64, n), d: mat.NewDense(protos, n, nil), c: make([]float64, protos)}
	for v := 0; v < n; v++ {
		d := 0.05 + 0.9*rng.Float64()
		pr.a[v], pr.b[v] = math.Log(d), math.Log(1-d)
	}
	for j := 0; j < protos; j++ {
		for v := 0; v < n; v++ {
			d := 0.05 + 0.9*rng.Float64()
			pr.d.Set(j, v, math.Log(d)-math.Log(1-d))
			pr.c[j] += math.Log(1 - d)
		}
	}
	y := make([]float64, n)
	for v := range y {
		if rng.Float64() < 0.4 {
			y[v] = 1
		}
	}
	return &Problem{Forward: f, Prior: pr, Y: y, PriorWeight: 0.7}, f, pr
}

func TestObjectiveGradient(t *testing.T) {
	const n, r = 7, 3
	for _, s := range []struct {
		name  string
		stage stage
	}{{"init", stageInit}, {"pred", stagePred}, {"forward", stageForward}} {
		t.Run(s.name, func(t *testing.T) {
			p, _, _ := testProblem(n, 5, 3)
			rng := rand.New(rand.NewPCG(9, 9))
			x := mat.NewDense(r, n, nil)
			for i := 0; i < r; i++ {
				for v := 0; v < n; v++ {
					x.Set(i, v, 0.1+0.3*rng.Float64()) // keep P^T x < 1: smooth region
				}
			}
			grad := mat.NewDense(r, n, nil)
			scratch := mat.NewDense(r, n, nil)
			var clock Timing
			_, err := p.evaluate(context.Background(), s.stage, x, grad, scratch, &clock)
			require.NoError(t, err)
			total := func() float64 {
				l, err := p.evaluate(context.Background(), s.stage, x, nil, mat.NewDense(r, n, nil), &clock)
				require.NoError(t, err)
				var sum float64
				for _, v := range l {
					sum += v
				}
				return sum
			}
			const eps = 1e-6
			raw := x.RawMatrix().Data
			g := grad.RawMatrix().Data
			for i := range raw {
				orig := raw[i]
				raw[i] = orig + eps
				up := total()
				raw[i] = orig - eps
				down := total()
				raw[i] = orig
				num := (up - down) / (2 * eps)
				require.InDelta(t, num, g[i], 1e-5*math.Max(1, math.Abs(num)), "entry %d", i)
			}
		})
	}
}

// allVariants is every Variant Solve accepts.
var allVariants = []Variant{Full, NoPriorPred, NoInit, NoPrior, DataInit}

func TestSolveDescendsAndIsDeterministic(t *testing.T) {
	const n = 12
	p, f, pr := testProblem(n, 6, 5)
	b := &Bundle{Manifest: Manifest{Graph: GraphRef{Nodes: n}, Threshold: 0.5}}
	solveWith := func(variant Variant) *Result {
		opts := DefaultOptions()
		opts.Trace = true
		opts.Variant = variant
		opts.Restarts = 4
		res, err := solve(context.Background(), n, b.Manifest.Threshold, pr, f, p.Y, opts)
		require.NoError(t, err)
		return res
	}
	for _, v := range allVariants {
		t.Run(string(v), func(t *testing.T) {
			res := solveWith(v)
			require.Len(t, res.Scores, n)
			require.Len(t, res.Trace, DefaultOptions().InitSteps+DefaultOptions().OptSteps)
			for vtx, s := range res.Scores {
				require.GreaterOrEqual(t, s, 0.0)
				require.LessOrEqual(t, s, 1.0)
				require.GreaterOrEqual(t, res.Probability[vtx], 0.0)
				require.LessOrEqual(t, res.Probability[vtx], 1.0)
			}
			// The last stage is a descent: its final objective is below its first.
			last := res.Trace[len(res.Trace)-1]
			first := res.Trace[len(res.Trace)-DefaultOptions().OptSteps]
			if v == NoInit {
				first = res.Trace[0]
			}
			require.Less(t, last, first)
			again := solveWith(v)
			require.Equal(t, res.Scores, again.Scores)
			for i := 1; i < len(res.Sources); i++ {
				require.GreaterOrEqual(t, res.Scores[res.Sources[i-1]], res.Scores[res.Sources[i]])
			}
		})
	}
}

func TestSolveRejectsBadObservation(t *testing.T) {
	const n = 5
	p, f, pr := testProblem(n, 3, 1)
	_ = p
	_, err := solve(context.Background(), n, 0.5, pr, f, []float64{0, 1}, DefaultOptions())
	require.ErrorIs(t, err, ErrBadObservation)
	_, err = solve(context.Background(), n, 0.5, pr, f, []float64{0, 1, 2, 0, 0}, DefaultOptions())
	require.ErrorIs(t, err, ErrBadObservation)
	require.ErrorContains(t, err, "node 2")
	_, err = solve(context.Background(), n, 0.5, pr, f, []float64{0, 1, math.NaN(), 0, 0}, DefaultOptions())
	require.ErrorIs(t, err, ErrBadObservation)
}

// Settings that withDefaults would silently replace are refused by name.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"negative init steps", func(o *Options) { o.InitSteps = -1 }, "init_steps: -1 outside 0..100000"},
		{"negative opt steps", func(o *Options) { o.OptSteps = -2 }, "opt_steps: -2 outside 0..100000"},
		{"too many steps", func(o *Options) { o.OptSteps = 200000 }, "opt_steps: 200000 outside 0..100000"},
		{"too many restarts", func(o *Options) { o.Restarts = MaxRestarts + 1 }, "restarts: 4097 outside 0..4096"},
		{"negative prior weight", func(o *Options) { o.PriorWeight = -0.5 }, "prior_weight: -0.5"},
		{"NaN prior weight", func(o *Options) { o.PriorWeight = math.NaN() }, "prior_weight: NaN"},
		{"variant", func(o *Options) { o.Variant = "fast" }, `variant: want full, a, b, noprior or datainit, got "fast"`},
		{"too many init steps", func(o *Options) { o.InitSteps = maxSteps + 1 }, "init_steps: 100001 outside 0..100000"},
		{"negative restarts", func(o *Options) { o.Restarts = -1 }, "restarts: -1 outside 0..4096"},
		{"threshold above 1", func(o *Options) { o.Threshold = 1.01 }, "threshold: 1.01 outside [0, 1]"},
		{"negative threshold", func(o *Options) { o.Threshold = -0.01 }, "threshold: -0.01 outside [0, 1]"},
		{"prior weight above the bound", func(o *Options) { o.PriorWeight = 2 * MaxPriorWeight }, "prior_weight: 2e+06"},
		{"learning rate above 1", func(o *Options) { o.LearningRate = 1.5 }, "learning_rate: 1.5"},
		{"negative learning rate", func(o *Options) { o.LearningRate = -0.1 }, "learning_rate: -0.1"},
		{"start", func(o *Options) { o.Start = "uniform" }, `start: want "bernoulli" or "sigmoid", got "uniform"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.edit(&o)
			require.ErrorContains(t, o.Validate(), tc.want)
		})
	}
	require.NoError(t, DefaultOptions().Validate())
	require.NoError(t, Options{}.Validate(), "zero fields take the defaults")
	// Each bound itself is in range, as the manifest's are.
	require.NoError(t, Options{Restarts: MaxRestarts, InitSteps: maxSteps, OptSteps: maxSteps, Threshold: 1,
		PriorWeight: MaxPriorWeight, LearningRate: MaxLearningRate}.Validate())
}

func TestChooseThresholdUsesOnlyGivenPairs(t *testing.T) {
	scores := [][]float64{{0.9, 0.6, 0.1}, {0.2, 0.8, 0.7}}
	pairs := []forward.Pair{{Sources: []int{0}}, {Sources: []int{1, 2}}}
	delta, f1 := ChooseThreshold(scores, pairs, []float64{0.3, 0.65, 0.85})
	// At 0.65: {0}, {1, 2} -> F1 1 and 1.
	require.Equal(t, 0.65, delta)
	require.InDelta(t, 1.0, f1, 1e-12)
	// An empty prediction scores F1 0, never 1.
	require.Equal(t, 0.0, f1At([]float64{0.1, 0.2}, []int{0}, 0.5))
}

// fusedCounter counts which forward calls Solve makes.
type fusedCounter struct {
	meanField
	predicts, vjps, fused int
}

func (f *fusedCounter) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	f.predicts++
	return f.meanField.Predict(ctx, x)
}

func (f *fusedCounter) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	f.vjps++
	return f.meanField.VJP(ctx, x, dy)
}

func (f *fusedCounter) SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	f.fused++
	return forward.SquaredErrorVJP(ctx, f.meanField, x, target)
}

// TestSolveUsesOneForwardCallPerStep: with a model offering the fused
// data-term call (as plugin processes do), each step is one round trip.
func TestSolveUsesOneForwardCallPerStep(t *testing.T) {
	const n = 10
	p, f, pr := testProblem(n, 4, 2)
	fc := &fusedCounter{meanField: f}
	opts := DefaultOptions()
	_, err := solve(context.Background(), n, 0.5, pr, fc, p.Y, opts)
	require.NoError(t, err)
	steps := opts.InitSteps + opts.OptSteps
	require.Zero(t, fc.vjps)
	require.GreaterOrEqual(t, fc.fused, steps)
	require.LessOrEqual(t, fc.fused+fc.predicts, steps+2)
}

// Result.Objective is the last stage's objective at the final x, which
// objective reproduces: with one restart, the final x is Result.Mean.
func TestObjectiveMatchesSolve(t *testing.T) {
	const n = 12
	p, f, pr := testProblem(n, 6, 5)
	for _, v := range allVariants {
		t.Run(string(v), func(t *testing.T) {
			opts := DefaultOptions()
			opts.Variant, opts.Restarts, opts.PriorWeight = v, 1, 0.7
			res, err := solve(context.Background(), n, 0.5, pr, f, p.Y, opts)
			require.NoError(t, err)
			require.Len(t, res.Objective, 1)
			got, err := objective(context.Background(), n, pr, f, p.Y, mat.NewDense(1, n, res.Mean), opts)
			require.NoError(t, err)
			require.InDelta(t, res.Objective[0], got[0], 1e-9)

			// The descent beats a random binary point of its own objective.
			x := mat.NewDense(1, n, nil)
			for i := 0; i < n; i += 3 {
				x.Set(0, i, 1)
			}
			other, err := objective(context.Background(), n, pr, f, p.Y, x, opts)
			require.NoError(t, err)
			require.Less(t, res.Objective[0], other[0])
		})
	}
	_, err := objective(context.Background(), n, pr, f, p.Y, mat.NewDense(1, n-1, nil), DefaultOptions())
	require.ErrorIs(t, err, errShape)
}

// A checkpoint at n_opt = k holds exactly the scores a Solve with OptSteps
// = k returns, for every variant.
func TestCheckpointsMatchShorterSolves(t *testing.T) {
	const n = 12
	p, f, pr := testProblem(n, 6, 5)
	for _, v := range allVariants {
		t.Run(string(v), func(t *testing.T) {
			opts := DefaultOptions()
			opts.Variant, opts.Restarts, opts.PriorWeight = v, 3, 0.7
			opts.InitSteps, opts.OptSteps = 6, 12
			opts.Checkpoints = []int{12, 3, 7}
			res, err := solve(context.Background(), n, 0.5, pr, f, p.Y, opts)
			require.NoError(t, err)
			require.Len(t, res.Checkpoints, 3)
			for i, k := range []int{3, 7, 12} {
				cp := res.Checkpoints[i]
				require.Equal(t, k, cp.Steps)
				short := opts
				short.OptSteps, short.Checkpoints = k, nil
				want, err := solve(context.Background(), n, 0.5, pr, f, p.Y, short)
				require.NoError(t, err)
				require.Equal(t, want.Scores, cp.Scores, "n_opt = %d", k)
			}
			require.Equal(t, res.Scores, res.Checkpoints[2].Scores)
		})
	}
	opts := DefaultOptions()
	opts.Checkpoints = []int{51}
	_, err := solve(context.Background(), n, 0.5, pr, f, p.Y, opts)
	require.ErrorContains(t, err, "checkpoints: 51 outside 1..opt_steps (50)")
}

// Options.Start picks the restarts' starting x: Bernoulli at 0 or 1,
// SigmoidNoise strictly inside (0, 1). One step of 1e-9 (Adam moves each
// entry by about the learning rate) leaves the final x where it started,
// and NoInit runs a single stage, so nothing binarises it.
func TestSolveStarts(t *testing.T) {
	const n = 12
	_, f, pr := testProblem(n, 4, 17)
	y := make([]float64, n)
	y[3] = 1
	for _, start := range []Start{Bernoulli, SigmoidNoise} {
		t.Run(string(start), func(t *testing.T) {
			opts := Options{Restarts: 4, OptSteps: 1, LearningRate: 1e-9, Variant: NoInit, Start: start, Seed: 23}
			res, err := solve(context.Background(), n, 0.5, pr, f, y, opts)
			require.NoError(t, err)
			var zeros, ones int
			for _, x := range res.final.RawMatrix().Data {
				switch {
				case x < 1e-8:
					zeros++
				case x > 1-1e-8:
					ones++
				}
			}
			if start == Bernoulli {
				require.Equal(t, 4*n, zeros+ones)
				require.Positive(t, zeros)
				require.Positive(t, ones)
			} else {
				require.Zero(t, zeros+ones)
			}
		})
	}
}

// badShape is meanField whose fused loss call answers with a loss or
// gradient of another shape than asked, as a broken plugin might.
type badShape struct {
	meanField
	lossRows, gradRows, gradCols int // added to the right sizes
}

func (b badShape) SquaredErrorLoss(ctx context.Context, x, target *mat.Dense) ([]float64, *mat.Dense, error) {
	r, n := x.Dims()
	return make([]float64, r+b.lossRows), mat.NewDense(r+b.gradRows, n+b.gradCols, nil), nil
}

// The data term refuses a forward answer of the wrong shape, whichever
// part is wrong.
func TestDataTermRefusesWrongShapes(t *testing.T) {
	const n = 6
	p, f, pr := testProblem(n, 3, 29)
	x := mat.NewDense(2, n, nil)
	for _, tt := range []struct {
		name string
		bad  badShape
	}{
		{"losses", badShape{f, 1, 0, 0}},
		{"gradient rows", badShape{f, 0, 1, 0}},
		{"gradient columns", badShape{f, 0, 0, -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := &Problem{Forward: tt.bad, Prior: pr, Y: p.Y, PriorWeight: 1}
			_, err := q.dataTerm(context.Background(), x, mat.NewDense(2, n, nil))
			require.ErrorIs(t, err, errShape)
		})
	}
	ok := &Problem{Forward: badShape{meanField: f}, Prior: pr, Y: p.Y, PriorWeight: 1}
	_, err := ok.dataTerm(context.Background(), x, mat.NewDense(2, n, nil))
	require.NoError(t, err)
}
