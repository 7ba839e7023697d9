package forward

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// Sentinel errors of the forward-model contract. Implementations and the
// host wrap them with %w and lowercase context.
var (
	// ErrNotConfigured is returned by calls that need Configure first.
	ErrNotConfigured = errors.New("forward model not configured")
	// ErrNotFitted is returned by Predict or VJP on a trainable model that
	// has neither been fitted nor given a fitted state.
	ErrNotFitted = errors.New("forward model not fitted")
	// ErrBadState is returned by Configure when the state blob is corrupt or
	// was made for another graph or model.
	ErrBadState = errors.New("bad forward model state")
	// ErrBadOutput is returned by the host when a plugin answers with the
	// wrong shape, NaN or Inf.
	ErrBadOutput = errors.New("bad forward model output")
	// ErrBadInfo is returned by Info.Validate for a description a host
	// cannot record (an empty name or version).
	ErrBadInfo = errors.New("bad forward model info")
)

// Param describes one model parameter, set through Configure's params.
type Param struct {
	Name    string `json:"name"`
	Default string `json:"default"`
	Help    string `json:"help"`
}

// Info describes a forward model.
type Info struct {
	Name      string  `json:"name"`
	Version   string  `json:"version"`
	Trainable bool    `json:"trainable"`
	Params    []Param `json:"params"`
}

// UnknownParam returns the first name of params, in sorted order, that in
// does not list, with the names it does list; "" where in lists every
// name, or lists none (a plugin that describes no params is taken at its
// word by Configure alone). A plugin that ignores a param it does not
// know would fit without the setting meant and say nothing, so a new fit
// checks; a bundle's recorded params are not checked (an older build of
// the plugin may have had others).
func (in Info) UnknownParam(params map[string]string) (name string, known []string) {
	if len(in.Params) == 0 {
		return "", nil
	}
	known = make([]string, len(in.Params))
	for i, q := range in.Params {
		known[i] = q.Name
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !slices.Contains(known, k) {
			return k, known
		}
	}
	return "", known
}

// Validate reports what a host cannot accept in in: an empty name or
// version (a bundle records the version, and a relaunched plugin must
// report the same one), or a parameter name empty or repeated.
func (in Info) Validate() error {
	var probs []string
	if in.Name == "" {
		probs = append(probs, "empty name (set Info.Name)")
	}
	if in.Version == "" {
		probs = append(probs, "empty version (set Info.Version: a bundle records it, and a relaunch must report the same)")
	}
	seen := map[string]bool{}
	for _, q := range in.Params {
		if q.Name == "" || seen[q.Name] {
			probs = append(probs, fmt.Sprintf("param name %q empty or repeated", q.Name))
		}
		seen[q.Name] = true
	}
	if len(probs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadInfo, strings.Join(probs, "; "))
	}
	return nil
}

// Pair is one training example: the source set x (as node indices) and the
// nodes observed infected y (as node indices).
type Pair struct {
	Sources  []int
	Infected []int
}

// FitOptions are the model-independent training settings. Zero values mean
// the model's own defaults.
type FitOptions struct {
	Epochs       int
	LearningRate float64
	BatchSize    int
	// Lambda weighs the monotonicity penalty
	// lambda * ||max(0, f(x_sub) - f(x))||^2 over subsets x_sub of x.
	Lambda float64
	Seed   int64
	// Validation pairs are used for early stopping and the reported
	// validation metrics; never for the gradient.
	Validation []Pair
}

// Progress is one report from a running Fit.
type Progress struct {
	Epoch, Epochs int
	TrainLoss     float64
	// ValLoss is NaN when there is no validation set.
	ValLoss float64
}

// FitResult is what Fit returns: an opaque state blob that Configure
// accepts, and metrics such as "train_mse" and "val_mse".
type FitResult struct {
	State   []byte
	Metrics map[string]float64
}

// CheckMetricName reports a Fit metric name a host cannot keep: an empty
// one, or one holding a space or control character (train lists the
// metrics as name value pairs, and a bundle keeps them as
// forward_<name>). plugin check and train both apply it.
func CheckMetricName(name string) error {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("metric name %q: want a name that is not empty and holds no space or control character", name)
	}
	return nil
}

// Model is a differentiable forward model of a spread: it maps source
// indicators x in [0,1]^n to predicted infection probabilities y in
// [0,1]^n. One Model serves one graph. Batches are row-major matrices with
// one row per vector and N() columns.
//
// A Model keeps no files of its own: everything it learns is in the state
// blob Fit returns, so a plugin process can be restarted at any time and
// brought back with Configure.
type Model interface {
	// Info describes the model. It works before Configure.
	Info(ctx context.Context) (Info, error)
	// Configure sets the graph, the parameters and, for a trained model,
	// the state returned by an earlier Fit (nil if untrained).
	Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error
	// Fit trains on pairs, reporting progress, and leaves the model in the
	// fitted state it returns. An untrainable model returns an empty state.
	Fit(ctx context.Context, pairs []Pair, opts FitOptions, progress func(Progress)) (FitResult, error)
	// Predict returns f(x) for each row of x.
	Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error)
	// VJP returns y = f(x) and the vector-Jacobian product
	// dx = (df/dx)^T dy for each row.
	VJP(ctx context.Context, x, dy *mat.Dense) (y, dx *mat.Dense, err error)
}

// SquaredErrorVJPer is implemented by models that can compute the gradient
// of inference's data term ||target - f(x)||^2 in one call: y = f(x) and
// dx = (df/dx)^T 2 (y - target). target has one row (used for every row
// of x) or as many rows as x. The plugin host implements it with a single
// round trip; see SquaredErrorVJP for the generic version.
type SquaredErrorVJPer interface {
	SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (y, dx *mat.Dense, err error)
}

// SquaredErrorVJP computes y = f(x) and dx = (df/dx)^T 2 (y - target) with
// m's own fused method when it has one, otherwise with Predict then VJP.
func SquaredErrorVJP(ctx context.Context, m interface {
	Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error)
	VJP(ctx context.Context, x, dy *mat.Dense) (y, dx *mat.Dense, err error)
}, x, target *mat.Dense) (y, dx *mat.Dense, err error) {
	if f, ok := m.(SquaredErrorVJPer); ok {
		return f.SquaredErrorVJP(ctx, x, target)
	}
	rows, n := x.Dims()
	if tr, tc := target.Dims(); (tr != 1 && tr != rows) || tc != n {
		panic("forward: SquaredErrorVJP target shape does not match x")
	}
	y, err = m.Predict(ctx, x)
	if err == nil {
		err = nilOutput(y, nil, false)
	}
	if err != nil {
		return nil, nil, err
	}
	if yr, yc := y.Dims(); yr != rows || yc != n {
		return nil, nil, fmt.Errorf("predict returned %dx%d for %dx%d: %w", yr, yc, rows, n, ErrBadOutput)
	}
	dy := mat.NewDense(rows, n, nil)
	for i := 0; i < rows; i++ {
		t := target.RawRowView(min(i, target.RawMatrix().Rows-1))
		d := dy.RawRowView(i)
		for v, f := range y.RawRowView(i) {
			d[v] = 2 * (f - t[v])
		}
	}
	_, dx, err = m.VJP(ctx, x, dy)
	return y, dx, err
}

// SquaredErrorLosser is implemented by models that can return the data
// term's value per row instead of f(x) with its gradient: the plugin host
// does, so that a round trip carries a third less on a large graph.
type SquaredErrorLosser interface {
	SquaredErrorLoss(ctx context.Context, x, target *mat.Dense) (loss []float64, dx *mat.Dense, err error)
}

// SquaredErrorLoss computes loss_i = ||target_i - f(x_i)||^2 per row i and
// dx = (df/dx)^T 2 (f(x) - target), with m's own method when it has one
// (SquaredErrorLosser), otherwise through SquaredErrorVJP.
func SquaredErrorLoss(ctx context.Context, m interface {
	Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error)
	VJP(ctx context.Context, x, dy *mat.Dense) (y, dx *mat.Dense, err error)
}, x, target *mat.Dense) (loss []float64, dx *mat.Dense, err error) {
	if f, ok := m.(SquaredErrorLosser); ok {
		return f.SquaredErrorLoss(ctx, x, target)
	}
	y, dx, err := SquaredErrorVJP(ctx, m, x, target)
	if err != nil {
		return nil, nil, err
	}
	return squaredErrors(y, target), dx, nil
}

// squaredErrors returns ||target_i - y_i||^2 per row of y; target has one
// row or as many as y.
func squaredErrors(y, target *mat.Dense) []float64 {
	rows, _ := y.Dims()
	trows := target.RawMatrix().Rows
	loss := make([]float64, rows)
	for i := range loss {
		t := target.RawRowView(min(i, trows-1))
		var sum float64
		for v, f := range y.RawRowView(i) {
			d := f - t[v]
			sum += d * d
		}
		loss[i] = sum
	}
	return loss
}
