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
	// Rows is the number of random points x in [0.1, 0.9]^n checked
	// (default 2).
	Rows int
	// Points, if set, are the interior points checked instead, one per
	// row of n columns (Rows is then its row count), each entry at least
	// Step from 0 and 1: a caller that knows where inference goes (a few
	// sources among many nodes) checks there, as [0.1, 0.9]^n saturates
	// a learned model's output on a large graph and so its gradient.
	Points *mat.Dense
	// CornerRows is the number of random points x in {0, 1}^n checked
	// besides (default 1, -1 for none), where inference drives x: there
	// the differences are one-sided, staying inside [0, 1].
	CornerRows int
	// Coords is the number of coordinates checked per point (default all
	// when n <= 64, else 24 chosen at random; n or more checks them all).
	Coords int
	// Directions is the number of random directions v in {-1, 1}^n checked
	// per interior point besides the coordinates (default 2, -1 for none):
	// each compares <dx, v> with a difference of Predict along v, so it
	// reads every coordinate of dx at once, and a VJP wrong at one node
	// among thousands fails it where a few sampled coordinates miss that
	// node. Corner points have none: x ± h v leaves [0, 1] there.
	Directions int
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
	// Directions is the number of random directions compared (see
	// VJPCheckOptions.Directions), and DirectionsMaxErr their largest
	// error alone, in MaxErr's units.
	Directions       int
	DirectionsMaxErr float64
	// Row and Node locate MaxErr; Analytic and Numeric are its two values.
	// Rows from VJPCheckOptions.Rows on are the corner points. Node is -1
	// when MaxErr is a direction's, which names no node; where a
	// coordinate fails too, MaxErr is the worst coordinate's instead
	// (DirectionsMaxErr keeps the directions'), so a node is named.
	Row, Node int
	// Corner is whether Row is a corner point, x in {0, 1}^n.
	Corner            bool
	Analytic, Numeric float64
	// Flat is how many of the Checked coordinates were 0 both ways (within
	// AbsTol): a check with every one flat compared nothing, and a
	// model flat at every point gives inference no gradient to descend.
	Flat int
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
// 2n rows of n values at once; maxCheckBytes bounds them further on a
// graph so large that 512 rows would not fit in a message (158,000 nodes
// made 650 MB; two million ran the machine out of memory).
const (
	maxCheckRows  = 512
	maxCheckBytes = 32 << 20
)

// checkRows is how many perturbed points of n values one Predict call of
// the check takes: an even number, at least 2.
func checkRows(n int) int {
	return max(2, min(maxCheckRows, maxCheckBytes/(8*max(n, 1)))&^1)
}

// Pass reports whether every checked coordinate is within tolerance and
// VJP's y agrees with Predict.
func (c VJPCheck) Pass() bool { return c.MaxErr <= 1 && c.MaxYDiff <= maxYDiff }

func (c VJPCheck) String() string { return c.Describe(nil) }

// Describe is String with node indices named by id (nil: the index). It
// leads with what failed: VJP's y against Predict's, or the gradient.
func (c VJPCheck) Describe(id func(int) string) string {
	node := fmt.Sprintf("node %d", c.Node)
	switch {
	case c.Node < 0:
		// The direction reads every node's dx at once: which one is wrong,
		// the coordinates checked one by one say (plugin check compares
		// them all up to 2,048 nodes).
		node = "a random direction through every node (<dx, v> against the difference along v; some node's entry of dx is off)"
	case id != nil:
		node = fmt.Sprintf("node %q (index %d)", id(c.Node), c.Node)
	}
	row := fmt.Sprintf("row %d", c.Row)
	if c.Corner {
		row += " (x in {0, 1}, one-sided differences)"
	}
	what := fmt.Sprintf("%d coordinates of dx", c.Checked)
	if c.Directions > 0 {
		what += fmt.Sprintf(" and %d random directions", c.Directions)
	}
	grad := fmt.Sprintf("%s against finite differences: largest error %.3g times the tolerance %.3g + %.3g|numeric| at %s %s (analytic %.9g, numeric %.9g)",
		what, c.MaxErr, c.AbsTol, c.RelTol, row, node, c.Analytic, c.Numeric)
	ydiff := fmt.Sprintf("VJP's y differs from Predict's by up to %.3g", c.MaxYDiff)
	if c.MaxYDiff > maxYDiff {
		return ydiff + fmt.Sprintf(" (more than %.0e: VJP must return f(x) as Predict does); ", maxYDiff) + grad
	}
	return grad + "; " + ydiff
}

// CheckVJP compares a configured model's VJP with finite differences of
// Predict: for random x in [0.1, 0.9]^n and random dy, with L(x) = <dy, f(x)>,
// dx_i must match the central difference (L(x + h e_i) - L(x - h e_i)) / 2h;
// at the corner points x in {0, 1}^n, where inference ends, the one-sided
// difference of the same order that stays inside [0, 1],
//
//	s·(-3 L(x) + 4 L(x + s h e_i) - L(x + 2 s h e_i)) / 2h,  s = 1 - 2 x_i.
//
// A corner coordinate that fails that passes when, output by output, it
// lies between that difference and the one from outside [0, 1]: there a
// clamped output can sit on its bound, and either side's derivative is
// right (see acceptKinks).
//
// A coordinate that still fails is looked at again with the step h/16,
// as a direction is (below): a LeakyReLU or clamp of some output whose
// argument is within h (2h at a corner) of its kink puts the kink inside
// the difference's reach, where it mixes the two slopes (a learned model
// on a large graph has thousands of such arguments, and a few of them
// that close), while a wrong dx_i stays as wrong at h/16 (see
// retryCoords).
//
// Along each random direction v in {-1, 1}^n at the interior points,
// <dx, v> must match (L(x + h v) - L(x - h v)) / 2h, within the tolerance
// plus the rounding of L's terms; one that fails is looked at again
// with a step of h/16, where a kink crossed at h (a move of every
// coordinate at once can carry a ReLU of a large graph across one)
// rarely lies (see checkDirections).
//
// All perturbed points of one x go to Predict in batches of up to 512
// rows, so a plugin process is called
// 2 + (Rows + CornerRows)·ceil(2·Coords/512) + Rows·ceil(2·Directions/512)
// times, once more for each batch of coordinates in which some fail
// their first look, and once more for each direction that fails its
// first look. n is the model's graph size. Errors are the model's.
func CheckVJP(ctx context.Context, m Model, n int, rng *rand.Rand, o VJPCheckOptions) (VJPCheck, error) {
	if o.Step <= 0 {
		o.Step = 1e-5
	}
	if o.Points != nil {
		r, c := o.Points.Dims()
		if c != n {
			panic(fmt.Sprintf("forward: CheckVJP points have %d columns for %d nodes", c, n))
		}
		for i := range r {
			for _, v := range o.Points.RawRowView(i) {
				if !(v >= o.Step && v <= 1-o.Step) {
					panic(fmt.Sprintf("forward: CheckVJP point %d holds %v, not within the step %v of [0, 1]'s inside", i, v, o.Step))
				}
			}
		}
		o.Rows = r
	}
	if o.Rows <= 0 {
		o.Rows = 2
	}
	if o.AbsTol <= 0 {
		o.AbsTol = 1e-6
	}
	if o.RelTol <= 0 {
		o.RelTol = 1e-4
	}
	if o.CornerRows == 0 {
		o.CornerRows = 1
	}
	if o.Directions == 0 {
		o.Directions = 2
	}
	corners := max(o.CornerRows, 0)
	if o.Coords <= 0 || o.Coords > n {
		o.Coords = n
		if n > 64 {
			o.Coords = 24
		}
	}
	rows := o.Rows + corners
	x := mat.NewDense(rows, n, nil)
	dy := mat.NewDense(rows, n, nil)
	for i := 0; i < rows; i++ {
		for j := 0; j < n; j++ {
			switch {
			case i < o.Rows && o.Points != nil:
				x.Set(i, j, o.Points.At(i, j))
			case i < o.Rows:
				x.Set(i, j, 0.1+0.8*rng.Float64())
			case rng.Float64() < 0.3:
				x.Set(i, j, 1)
			}
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
	// worst is the worst coordinate alone: where one fails, the report
	// names its node rather than a direction's error, which names none
	// (a gradient wrong everywhere fails both by about as much).
	var worst VJPCheck
	for i := 0; i < rows; i++ {
		for j := 0; j < n; j++ {
			res.MaxYDiff = math.Max(res.MaxYDiff, math.Abs(y.At(i, j)-yp.At(i, j)))
		}
	}
	for i := 0; i < rows; i++ {
		corner := i >= o.Rows
		coords := rng.Perm(n)[:o.Coords]
		d := mat.NewVecDense(n, dy.RawRowView(i))
		at := mat.Dot(d, yp.RowView(i)) // L(x), for the one-sided differences
		for len(coords) > 0 {
			chunk := coords[:min(len(coords), checkRows(n)/2)]
			coords = coords[len(chunk):]
			pts := mat.NewDense(2*len(chunk), n, nil)
			for k, j := range chunk {
				steps := [2]float64{o.Step, -o.Step} // x + h, x - h
				if corner {
					s := 1 - 2*x.At(i, j)
					steps = [2]float64{s * o.Step, 2 * s * o.Step} // x + sh, x + 2sh
				}
				for s, step := range steps {
					row := pts.RawRowView(2*k + s)
					copy(row, x.RawRowView(i))
					row[j] += step
				}
			}
			fy, err := m.Predict(ctx, pts)
			if err != nil {
				return VJPCheck{}, err
			}
			errs := make([]float64, len(chunk))
			nums := make([]float64, len(chunk))
			var kinks []int // corner coordinates that fail from inside alone
			for k, j := range chunk {
				l1, l2 := mat.Dot(d, fy.RowView(2*k)), mat.Dot(d, fy.RowView(2*k+1))
				nums[k] = (l1 - l2) / (2 * o.Step)
				if corner {
					nums[k] = (1 - 2*x.At(i, j)) * (-3*at + 4*l1 - l2) / (2 * o.Step)
				}
				errs[k] = vjpError(dx.At(i, j), nums[k], nums[k], o)
				if corner && errs[k] > 1 {
					kinks = append(kinks, k)
				}
			}
			if len(kinks) > 0 {
				if err := o.acceptKinks(ctx, m, x.RawRowView(i), yp.RawRowView(i), dy.RawRowView(i), fy, chunk, kinks, dx.RawRowView(i), errs); err != nil {
					return VJPCheck{}, err
				}
			}
			if err := o.retryCoords(ctx, m, x.RawRowView(i), yp.RawRowView(i), dy.RawRowView(i), chunk, corner, dx.RawRowView(i), errs); err != nil {
				return VJPCheck{}, err
			}
			for k, j := range chunk {
				res.Checked++
				if math.Abs(dx.At(i, j)) <= o.AbsTol && math.Abs(nums[k]) <= o.AbsTol {
					res.Flat++
				}
				if errs[k] > worst.MaxErr || res.Checked == 1 {
					worst.MaxErr, worst.Row, worst.Node, worst.Analytic, worst.Numeric, worst.Corner = errs[k], i, j, dx.At(i, j), nums[k], corner
				}
				if errs[k] > res.MaxErr || res.Checked == 1 {
					res.MaxErr, res.Row, res.Node, res.Analytic, res.Numeric, res.Corner = errs[k], i, j, dx.At(i, j), nums[k], corner
				}
			}
		}
		if !corner && o.Directions > 0 {
			if err := o.checkDirections(ctx, m, rng, i, x.RawRowView(i), yp.RawRowView(i), dy.RawRowView(i), dx.RawRowView(i), &res); err != nil {
				return VJPCheck{}, err
			}
		}
	}
	if res.Node < 0 && worst.MaxErr > 1 {
		res.MaxErr, res.Row, res.Node, res.Analytic, res.Numeric, res.Corner = worst.MaxErr, worst.Row, worst.Node, worst.Analytic, worst.Numeric, worst.Corner
	}
	return res, nil
}

// roundingUlps is how many units of rounding of each output a
// direction's difference allows, summed over the outputs: every output
// moves along a direction, so their rounding no longer cancels between
// the two sides as it does for a coordinate that moves a few.
const roundingUlps = 64

// retryStepDiv divides the step of a direction that failed, for its
// second look: a kink crossed at h is crossed at h/16 only if it lies
// that close, while a wrong dx stays as wrong.
const retryStepDiv = 16

// checkDirections compares o.Directions random directions at interior
// row row of the check (x, its y = f(x), dy and the VJP's dx) and folds
// them into res. For v in {-1, 1}^n the central difference
//
//	sum_w dy_w (f_w(x + h v) - f_w(x - h v)) / 2h
//
// must match <dx, v> within the tolerance plus
// roundingUlps·eps·sum_w |dy_w|·|f_w| / h over the outputs that moved.
// A move of every coordinate at once can carry some output of a large
// graph across a kink (a ReLU, a clamp) within h of x, more often than a
// coordinate's move does (see retryCoords for those), so a
// direction that fails is looked at again with the step h/16, first by
// the central difference and then by the interval
// [sum_w min(a_w, b_w), sum_w max(a_w, b_w)] (the same allowance beside),
// a_w and b_w the forward and backward differences of dy_w f_w: of an
// output with a kink at x, one side is a right derivative, while a
// smooth output's two sides differ by O(h), too little to hide a wrong
// entry of dx. Kinks crossed still widen the interval by their jumps
// (see judgeAlong).
func (o VJPCheckOptions) checkDirections(ctx context.Context, m Model, rng *rand.Rand, row int, x, y, dy, dx []float64, res *VJPCheck) error {
	n := len(x)
	along := func(dirs [][]float64, step float64) (*mat.Dense, error) {
		pts := mat.NewDense(2*len(dirs), n, nil)
		for d, v := range dirs {
			plus, minus := pts.RawRowView(2*d), pts.RawRowView(2*d+1)
			for j, vj := range v {
				plus[j], minus[j] = x[j]+step*vj, x[j]-step*vj
			}
		}
		return m.Predict(ctx, pts)
	}
	judge := func(ana float64, plus, minus []float64, step float64, interval bool) (e, central float64) {
		return o.judgeAlong(ana, y, dy, plus, minus, step, interval)
	}
	for left := o.Directions; left > 0; {
		k := min(left, checkRows(n)/2)
		left -= k
		dirs := make([][]float64, k)
		for d := range dirs {
			v := make([]float64, n)
			for j := range v {
				v[j] = 1
				if rng.Uint64()&1 == 0 {
					v[j] = -1
				}
			}
			dirs[d] = v
		}
		fy, err := along(dirs, o.Step)
		if err != nil {
			return err
		}
		for d, v := range dirs {
			var ana float64
			for j, vj := range v {
				ana += dx[j] * vj
			}
			e, central := judge(ana, fy.RawRowView(2*d), fy.RawRowView(2*d+1), o.Step, false)
			if e > 1 {
				step := o.Step / retryStepDiv
				near, err := along(dirs[d:d+1], step)
				if err != nil {
					return err
				}
				plus, minus := near.RawRowView(0), near.RawRowView(1)
				e2, _ := judge(ana, plus, minus, step, false)
				e3, _ := judge(ana, plus, minus, step, true)
				e = min(e, e2, e3)
			}
			res.Directions++
			res.DirectionsMaxErr = max(res.DirectionsMaxErr, e)
			if e > res.MaxErr {
				res.MaxErr, res.Row, res.Node, res.Analytic, res.Numeric, res.Corner = e, row, -1, ana, central, false
			}
		}
	}
	return nil
}

// judgeAlong is the error of ana against the differences of
// L = <dy, f> along a move (a coordinate's or a direction's) with the
// given step, y = f(x) and plus and minus f(x ± step·move): the central
// difference, or (interval) the interval [sum_w min(a_w, b_w),
// sum_w max(a_w, b_w)] of the forward and backward differences a_w and
// b_w of dy_w f_w, within the tolerance plus roundingUlps·eps·
// sum_w |dy_w|·|f_w| / step over the outputs the move changed (one it
// left as it was adds an exact 0). Of an output with a kink between x
// and x ± step, one side is the derivative at x (the kink's other side
// only mixes its slope into the other), while a smooth output's sides
// differ by O(step), too little to hide a wrong entry of dx.
func (o VJPCheckOptions) judgeAlong(ana float64, y, dy, plus, minus []float64, step float64, interval bool) (e, central float64) {
	var lo, hi, scale float64
	for w, f := range y {
		if plus[w] == f && minus[w] == f {
			continue
		}
		a := dy[w] * (plus[w] - f) / step
		b := dy[w] * (f - minus[w]) / step
		central += (a + b) / 2
		lo += min(a, b)
		hi += max(a, b)
		scale += math.Abs(dy[w]) * max(math.Abs(f), math.Abs(plus[w]), math.Abs(minus[w]))
	}
	round := roundingUlps * 0x1p-52 * scale / step
	if !interval {
		lo, hi = central, central
	}
	return vjpError(ana, lo-round, hi+round, o), central
}

// retryCoords looks again at the coordinates of chunk that still fail
// (errs above 1) with the step o.Step/retryStepDiv, as checkDirections
// does a direction. At an interior point each keeps the smallest of its
// errors against the central difference at h, the central difference
// at h/16 and the interval of the one-sided differences at h/16 (see
// judgeAlong); at a corner (corner), where the difference of x + s h e_i
// and x + 2 s h e_i reaches 2h inside, against that difference at h/16
// too, with judgeAlong's rounding allowance. A kink crossed at h is
// crossed at h/16 only if it lies that close, and then the interval
// holds the slope on x's side, while a wrong dx_i stays as wrong. x, y,
// dy and dx are the point's row.
func (o VJPCheckOptions) retryCoords(ctx context.Context, m Model, x, y, dy []float64, chunk []int, corner bool, dx, errs []float64) error {
	var ks []int
	for k, e := range errs {
		if e > 1 {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return nil
	}
	step := o.Step / retryStepDiv
	pts := mat.NewDense(2*len(ks), len(x), nil)
	for r, k := range ks {
		j := chunk[k]
		steps := [2]float64{step, -step}
		if corner {
			s := 1 - 2*x[j]
			steps = [2]float64{s * step, 2 * s * step}
		}
		for t, st := range steps {
			row := pts.RawRowView(2*r + t)
			copy(row, x)
			row[j] += st
		}
	}
	near, err := m.Predict(ctx, pts)
	if err != nil {
		return err
	}
	for r, k := range ks {
		j := chunk[k]
		ana := dx[j]
		p1, p2 := near.RawRowView(2*r), near.RawRowView(2*r+1)
		if !corner {
			e2, _ := o.judgeAlong(ana, y, dy, p1, p2, step, false)
			e3, _ := o.judgeAlong(ana, y, dy, p1, p2, step, true)
			errs[k] = min(errs[k], e2, e3)
			continue
		}
		s := 1 - 2*x[j]
		var num, scale float64
		for w, f := range y {
			if p1[w] == f && p2[w] == f {
				continue
			}
			num += dy[w] * s * (-3*f + 4*p1[w] - p2[w]) / (2 * step)
			scale += math.Abs(dy[w]) * max(math.Abs(f), math.Abs(p1[w]), math.Abs(p2[w]))
		}
		round := roundingUlps * 0x1p-52 * scale / step
		errs[k] = min(errs[k], vjpError(ana, num-round, num+round, o))
	}
	return nil
}

// vjpError is the distance of the analytic derivative from [lo, hi] in
// units of the tolerance; NaN counts as infinitely far.
func vjpError(ana, lo, hi float64, o VJPCheckOptions) float64 {
	lo, hi = min(lo, hi), max(lo, hi)
	dist := max(lo-ana, ana-hi, 0)
	e := dist / (o.AbsTol + o.RelTol*max(math.Abs(lo), math.Abs(hi)))
	if math.IsNaN(e) || math.IsNaN(ana) {
		return math.Inf(1)
	}
	return e
}

// acceptKinks re-judges the corner coordinates ks of chunk that failed
// against the derivative from inside [0, 1]. A model whose outputs are
// clamped can sit exactly on a clamp's bound at a corner (x in {0, 1}
// makes x_v + a·0 = 1 common), where an output's derivative has a kink and
// either side's value is a right answer: a VJP that zeroes the clamped
// entries' gradient gives the outside one for some outputs and the inside
// one for others. So each output's one-sided difference is taken from
// outside [0, 1] too, and dx_i passes if it lies within
//
//	[sum_v min(in_v, out_v), sum_v max(in_v, out_v)],  in_v, out_v = dy_v·(df_v/dx_i from inside, outside).
//
// A smooth model gives in_v = out_v, so this accepts no error there; a
// model that refuses x outside [0, 1], or answers there outside [0, 1]
// (NaN too: a plugin process's host refuses that answer, so plugin check
// keeps the inside verdict of the whole chunk, and so does an in-process
// check), keeps the inside verdict. inside holds f(x + s h e_i) and
// f(x + 2 s h e_i) of chunk's coordinates, rows 2k and 2k + 1.
func (o VJPCheckOptions) acceptKinks(ctx context.Context, m Model, x, y, dy []float64, inside *mat.Dense, chunk, ks []int, dx, errs []float64) error {
	pts := mat.NewDense(2*len(ks), len(x), nil)
	for r, k := range ks {
		j := chunk[k]
		s := 1 - 2*x[j]
		for t, step := range [2]float64{-s * o.Step, -2 * s * o.Step} {
			row := pts.RawRowView(2*r + t)
			copy(row, x)
			row[j] += step
		}
	}
	outside, err := m.Predict(ctx, pts)
	if err != nil {
		// Whatever the model made of x outside its domain, the coordinates
		// failed from inside and keep that verdict.
		return ctx.Err()
	}
	if _, _, bad := outOfUnit(outside); bad {
		// An answer outside [0, 1] is one a plugin process's host refuses
		// (ErrBadOutput), and so plugin check keeps the inside verdict: an
		// in-process model is judged the same, and an output that left
		// [0, 1] sat on no clamp's bound.
		return nil
	}
	for r, k := range ks {
		j := chunk[k]
		s := 1 - 2*x[j]
		in1, in2 := inside.RawRowView(2*k), inside.RawRowView(2*k+1)
		out1, out2 := outside.RawRowView(2*r), outside.RawRowView(2*r+1)
		var lo, hi float64
		for v, f := range y {
			a := dy[v] * s * (-3*f + 4*in1[v] - in2[v]) / (2 * o.Step)
			b := dy[v] * s * (3*f - 4*out1[v] + out2[v]) / (2 * o.Step)
			lo += min(a, b)
			hi += max(a, b)
		}
		errs[k] = min(errs[k], vjpError(dx[j], lo, hi, o))
	}
	return nil
}

// FusedCheck reports a comparison of a model's fused data-term call
// (SquaredErrorLoss, which inference calls at every step) with the same
// quantities from Predict and VJP.
type FusedCheck struct {
	// LossDiff is the largest |loss_i - ||target_i - f(x_i)||^2| and
	// DxDiff the largest |dx - VJP(x, 2(f(x) - target))| over entries.
	LossDiff, DxDiff float64
	// MaxErr is the larger of the two, each in units of its tolerance
	// (fusedTol times the larger of 1 and the value's scale): the check
	// passes when it is at most 1.
	MaxErr float64
}

// fusedTol is the relative tolerance of CheckFused: the fused call does
// the same arithmetic as Predict and VJP, so only rounding may part them,
// float32 rounding too (a plugin computing in float32 parts them by about
// 1e-7), while a wrong fused call is off by a share of dx itself.
const fusedTol = 1e-6

// Pass reports whether the fused call agrees with Predict and VJP.
func (c FusedCheck) Pass() bool { return c.MaxErr <= 1 }

func (c FusedCheck) String() string {
	return fmt.Sprintf("the fused data-term call's loss differs from Predict's by up to %.3g and its dx from VJP(x, 2(f(x) - target)) by up to %.3g (%.3g times the tolerance)",
		c.LossDiff, c.DxDiff, c.MaxErr)
}

// CheckFused compares SquaredErrorLoss(m, x, target), m's own fused
// method where it has one, with loss_i = ||target_i - f(x_i)||^2 from
// Predict and dx = (df/dx)^T 2 (f(x) - target) from VJP. A plugin may
// implement the fused call itself (forward.SquaredErrorVJPer) and then
// inference follows it, not its VJP: a wrong fused call gives a bundle
// that ranks badly with a VJP that passes CheckVJP. target has one row
// (for every row of x) or as many rows as x; a shape mismatch panics.
// Errors are the model's.
func CheckFused(ctx context.Context, m Model, x, target *mat.Dense) (FusedCheck, error) {
	rows, n := x.Dims()
	tr, tc := target.Dims()
	if (tr != 1 && tr != rows) || tc != n {
		panic(fmt.Sprintf("forward: CheckFused target is %dx%d for x %dx%d", tr, tc, rows, n))
	}
	loss, dx, err := SquaredErrorLoss(ctx, m, x, target)
	if err != nil {
		return FusedCheck{}, err
	}
	if len(loss) != rows {
		return FusedCheck{}, fmt.Errorf("fused call returned %d losses for %d rows: %w", len(loss), rows, ErrBadOutput)
	}
	if r, c := dx.Dims(); r != rows || c != n {
		return FusedCheck{}, fmt.Errorf("fused call returned dx %dx%d for %dx%d: %w", r, c, rows, n, ErrBadOutput)
	}
	y, err := m.Predict(ctx, x)
	if err != nil {
		return FusedCheck{}, err
	}
	if r, c := y.Dims(); r != rows || c != n {
		return FusedCheck{}, fmt.Errorf("predict returned %dx%d for %dx%d: %w", r, c, rows, n, ErrBadOutput)
	}
	dy := mat.NewDense(rows, n, nil)
	wantLoss := make([]float64, rows)
	for i := 0; i < rows; i++ {
		t := target.RawRowView(min(i, tr-1))
		d := dy.RawRowView(i)
		for j, f := range y.RawRowView(i) {
			d[j] = 2 * (f - t[j])
			wantLoss[i] += (f - t[j]) * (f - t[j])
		}
	}
	_, wantDx, err := m.VJP(ctx, x, dy)
	if err != nil {
		return FusedCheck{}, err
	}
	var c FusedCheck
	for i, l := range loss {
		d := math.Abs(l - wantLoss[i])
		if math.IsNaN(l) {
			d = math.Inf(1)
		}
		c.LossDiff = math.Max(c.LossDiff, d)
		c.MaxErr = math.Max(c.MaxErr, d/(fusedTol*math.Max(1, wantLoss[i])))
	}
	c.DxDiff = maxAbsDiff(dx, wantDx)
	if math.IsNaN(c.DxDiff) {
		c.DxDiff = math.Inf(1)
	}
	// The scale is dx's largest entry (mat.Norm's inf-norm of a matrix
	// is its largest row sum, n times an entry: 2% off at every entry of
	// 50,000 passed).
	var scale float64
	r, _ := wantDx.Dims()
	for i := range r {
		for _, d := range wantDx.RawRowView(i) {
			scale = math.Max(scale, math.Abs(d))
		}
	}
	c.MaxErr = math.Max(c.MaxErr, c.DxDiff/(fusedTol*math.Max(1, scale)))
	if math.IsNaN(c.MaxErr) {
		// Inf against Inf, say: not a pass, and not unknown either
		c.MaxErr = math.Inf(1)
	}
	return c, nil
}
