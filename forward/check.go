package forward

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// VJPCheckOptions configure CheckVJP. Zero values take the defaults.
type VJPCheckOptions struct {
	// Rows is the number of random points x checked (default 2).
	Rows int
	// Coords is the number of coordinates checked per point (default all
	// when n <= 64, else 24 chosen at random; n or more checks them all).
	Coords int
	// Step is the finite-difference step h (default 1e-5).
	Step float64
	// AbsTol and RelTol bound |analytic - numeric| <= AbsTol + RelTol*|numeric|
	// (defaults 1e-6 and 1e-4).
	AbsTol, RelTol float64
}

// VJPCheck reports a finite-difference check of a model's VJP.
type VJPCheck struct {
	// Checked is the number of coordinates compared.
	Checked int
	// MaxErr is the largest |analytic - numeric| / (AbsTol + RelTol*|numeric|);
	// the check passes when it is at most 1.
	MaxErr float64
	// Row and Node locate MaxErr; Analytic and Numeric are its two values.
	Row, Node         int
	Analytic, Numeric float64
	// MaxYDiff is the largest |VJP's y - Predict's y|, which must be 0 up to
	// rounding.
	MaxYDiff float64
	// AbsTol and RelTol are the tolerance MaxErr is measured in.
	AbsTol, RelTol float64
}

// maxYDiff is the largest |VJP's y - Predict's y| a check passes.
const maxYDiff = 1e-9

// maxCheckRows bounds the perturbed points of one Predict call, so that
// checking every coordinate of a large graph does not ask the plugin for
// 2n rows of n values at once.
const maxCheckRows = 512

// Pass reports whether every checked coordinate is within tolerance and
// VJP's y agrees with Predict.
func (c VJPCheck) Pass() bool { return c.MaxErr <= 1 && c.MaxYDiff <= maxYDiff }

func (c VJPCheck) String() string { return c.Describe(nil) }

// Describe is String with node indices named by id (nil: the index). It
// leads with what failed: VJP's y against Predict's, or the gradient.
func (c VJPCheck) Describe(id func(int) string) string {
	node := fmt.Sprintf("node %d", c.Node)
	if id != nil {
		node = fmt.Sprintf("node %q (index %d)", id(c.Node), c.Node)
	}
	grad := fmt.Sprintf("%d coordinates of dx against central differences: largest error %.3g times the tolerance %.3g + %.3g|numeric| at row %d %s (analytic %.9g, numeric %.9g)",
		c.Checked, c.MaxErr, c.AbsTol, c.RelTol, c.Row, node, c.Analytic, c.Numeric)
	ydiff := fmt.Sprintf("VJP's y differs from Predict's by up to %.3g", c.MaxYDiff)
	if c.MaxYDiff > maxYDiff {
		return ydiff + fmt.Sprintf(" (more than %.0e: VJP must return f(x) as Predict does); ", maxYDiff) + grad
	}
	return grad + "; " + ydiff
}

// CheckVJP compares a configured model's VJP with central differences of
// Predict: for random x in [0.1, 0.9]^n and random dy, with L(x) = <dy, f(x)>,
// dx_i must match (L(x + h e_i) - L(x - h e_i)) / 2h. All perturbed points
// of one x go to Predict in batches of up to 512 rows, so a plugin process
// is called 2 + Rows·ceil(2·Coords/512) times. n is the model's graph
// size. Errors are the model's.
func CheckVJP(ctx context.Context, m Model, n int, rng *rand.Rand, o VJPCheckOptions) (VJPCheck, error) {
	if o.Rows <= 0 {
		o.Rows = 2
	}
	if o.Step <= 0 {
		o.Step = 1e-5
	}
	if o.AbsTol <= 0 {
		o.AbsTol = 1e-6
	}
	if o.RelTol <= 0 {
		o.RelTol = 1e-4
	}
	if o.Coords <= 0 || o.Coords > n {
		o.Coords = n
		if n > 64 {
			o.Coords = 24
		}
	}
	x := mat.NewDense(o.Rows, n, nil)
	dy := mat.NewDense(o.Rows, n, nil)
	for i := 0; i < o.Rows; i++ {
		for j := 0; j < n; j++ {
			x.Set(i, j, 0.1+0.8*rng.Float64())
			dy.Set(i, j, rng.NormFloat64())
		}
	}
	y, dx, err := m.VJP(ctx, x, dy)
	if err != nil {
		return VJPCheck{}, err
	}
	yp, err := m.Predict(ctx, x)
	if err != nil {
		return VJPCheck{}, err
	}
	res := VJPCheck{AbsTol: o.AbsTol, RelTol: o.RelTol}
	for i := 0; i < o.Rows; i++ {
		for j := 0; j < n; j++ {
			res.MaxYDiff = math.Max(res.MaxYDiff, math.Abs(y.At(i, j)-yp.At(i, j)))
		}
	}
	for i := 0; i < o.Rows; i++ {
		coords := rng.Perm(n)[:o.Coords]
		d := mat.NewVecDense(n, dy.RawRowView(i))
		for len(coords) > 0 {
			chunk := coords[:min(len(coords), maxCheckRows/2)]
			coords = coords[len(chunk):]
			pts := mat.NewDense(2*len(chunk), n, nil)
			for k, j := range chunk {
				for s, sign := range []float64{1, -1} {
					row := pts.RawRowView(2*k + s)
					copy(row, x.RawRowView(i))
					row[j] += sign * o.Step
				}
			}
			fy, err := m.Predict(ctx, pts)
			if err != nil {
				return VJPCheck{}, err
			}
			for k, j := range chunk {
				num := (mat.Dot(d, fy.RowView(2*k)) - mat.Dot(d, fy.RowView(2*k+1))) / (2 * o.Step)
				ana := dx.At(i, j)
				e := math.Abs(ana-num) / (o.AbsTol + o.RelTol*math.Abs(num))
				if math.IsNaN(e) {
					e = math.Inf(1)
				}
				res.Checked++
				if e > res.MaxErr || res.Checked == 1 {
					res.MaxErr, res.Row, res.Node, res.Analytic, res.Numeric = e, i, j, ana, num
				}
			}
		}
	}
	return res, nil
}
