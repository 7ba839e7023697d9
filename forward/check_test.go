package forward_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// clampModel is y_v = clamp(x_v + a·mean_{u in N(v)} x_u, 0, 1), the kind
// of model forward/README's advice on clamps gives: at a corner of
// [0, 1]^n a lone source sits exactly on the upper bound, and a node with
// no source near it on the lower one.
type clampModel struct {
	nbr [][]int
	a   float64
	// active says which pre-activations pass the gradient: the two
	// conventions at the bound, 0 <= pre <= 1 or 0 < pre < 1.
	active func(pre float64) bool
	// scale multiplies dx (1: right); cornerBug negates dx where x is 0.
	scale     float64
	cornerBug bool
	// lastNodeBug doubles dx of the last node: wrong at one node.
	lastNodeBug bool
	// refuseOutside makes Predict refuse x outside [0, 1].
	refuseOutside bool
	// shift is added to every pre-activation.
	shift float64
}

func (m *clampModel) Info(context.Context) (forward.Info, error) {
	return forward.Info{Name: "clamp"}, nil
}
func (m *clampModel) Configure(context.Context, *graph.Graph, map[string]string, []byte) error {
	return nil
}
func (m *clampModel) Fit(context.Context, []forward.Pair, forward.FitOptions, func(forward.Progress)) (forward.FitResult, error) {
	return forward.FitResult{}, nil
}

func (m *clampModel) pre(x []float64, v int) float64 {
	s := 0.0
	for _, u := range m.nbr[v] {
		s += x[u]
	}
	return x[v] + m.a*s/float64(len(m.nbr[v])) + m.shift
}

func (m *clampModel) Predict(_ context.Context, x *mat.Dense) (*mat.Dense, error) {
	r, n := x.Dims()
	y := mat.NewDense(r, n, nil)
	for i := range r {
		row := x.RawRowView(i)
		for v := range n {
			if m.refuseOutside && (row[v] < 0 || row[v] > 1) {
				return nil, errors.New("clamp: x outside [0, 1]")
			}
			y.Set(i, v, min(max(m.pre(row, v), 0), 1))
		}
	}
	return y, nil
}

func (m *clampModel) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, err := m.Predict(ctx, x)
	if err != nil {
		return nil, nil, err
	}
	r, n := x.Dims()
	dx := mat.NewDense(r, n, nil)
	for i := range r {
		row := x.RawRowView(i)
		for v := range n {
			if !m.active(m.pre(row, v)) {
				continue
			}
			g := dy.At(i, v)
			dx.Set(i, v, dx.At(i, v)+g)
			for _, u := range m.nbr[v] {
				dx.Set(i, u, dx.At(i, u)+g*m.a/float64(len(m.nbr[v])))
			}
		}
		for v := range n {
			d := m.scale * dx.At(i, v)
			if m.cornerBug && row[v] == 0 {
				d = -d
			}
			if m.lastNodeBug && v == n-1 {
				d *= 2
			}
			dx.Set(i, v, d)
		}
	}
	return y, dx, nil
}

// CheckVJP passes a clamped model whichever side of the bound its
// gradient takes there, and still fails a wrong gradient, also one wrong
// only at the corners.
func TestCheckVJPAtClampKinks(t *testing.T) {
	const n = 40
	nbr := make([][]int, n)
	for v := range n { // a ring with chords
		nbr[v] = []int{(v + 1) % n, (v + n - 1) % n, (v + 7) % n}
	}
	closed := func(p float64) bool { return p >= 0 && p <= 1 }
	open := func(p float64) bool { return p > 0 && p < 1 }
	for _, tc := range []struct {
		name string
		m    clampModel
		pass bool
	}{
		{"gradient on the bound", clampModel{active: closed, scale: 1}, true},
		{"no gradient on the bound", clampModel{active: open, scale: 1}, true},
		{"scaled gradient", clampModel{active: closed, scale: 1.5}, false},
		{"wrong only at the corners", clampModel{active: open, scale: 1, cornerBug: true}, false},
		// Without the outside difference the inside verdict stands: one
		// convention fails, as before.
		{"no gradient on the bound, x outside refused", clampModel{active: open, scale: 1, refuseOutside: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.nbr, m.a = nbr, 0.5
			res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), forward.VJPCheckOptions{Rows: 1, CornerRows: 4})
			require.NoError(t, err)
			require.Equal(t, tc.pass, res.Pass(), "%s", res)
			require.Equal(t, 5*n, res.Checked)
		})
	}
}

// A gradient wrong at every node fails the coordinates and the random
// directions alike, each by about as much: the report names the worst
// coordinate's node, which a direction cannot, rather than whichever of
// the two came out a hair larger.
func TestCheckVJPNamesAFailingNode(t *testing.T) {
	const n = 40
	nbr := make([][]int, n)
	for v := range n {
		nbr[v] = []int{(v + 1) % n, (v + n - 1) % n, (v + 7) % n}
	}
	closed := func(p float64) bool { return p >= 0 && p <= 1 }
	for _, scale := range []float64{0.5, -1, 1.5} {
		m := clampModel{nbr: nbr, a: 0.5, active: closed, scale: scale}
		res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), forward.VJPCheckOptions{Rows: 2, CornerRows: 4})
		require.NoError(t, err)
		require.False(t, res.Pass(), "%s", res)
		require.Greater(t, res.DirectionsMaxErr, 1.0, "%s", res)
		require.GreaterOrEqual(t, res.Node, 0, "scale %v: every coordinate was checked and some failed, so a node is named: %s", scale, res)
		require.NotContains(t, res.String(), "a random direction through every node")
	}
}

// A VJP wrong at one node of many escapes a few sampled coordinates and
// not the random directions, which read every coordinate at once; a
// direction that crosses a clamp's kink at every node passes whichever
// side of the bound the gradient takes there.
func TestCheckVJPDirections(t *testing.T) {
	const n = 2000
	nbr := make([][]int, n)
	for v := range n {
		nbr[v] = []int{(v + 1) % n, (v + n - 1) % n, (v + 7) % n}
	}
	check := func(m clampModel, o forward.VJPCheckOptions) forward.VJPCheck {
		m.nbr = nbr
		res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), o)
		require.NoError(t, err)
		return res
	}
	closed := func(p float64) bool { return p >= 0 && p <= 1 }
	open := func(p float64) bool { return p > 0 && p < 1 }

	bug := clampModel{a: 0.5, active: closed, scale: 1, lastNodeBug: true}
	res := check(bug, forward.VJPCheckOptions{Rows: 2, CornerRows: -1, Coords: 8, Directions: -1})
	require.True(t, res.Pass(), "8 coordinates of 2,000 miss the last node: %s", res)
	require.Zero(t, res.Directions)
	res = check(bug, forward.VJPCheckOptions{Rows: 2, CornerRows: -1, Coords: 8})
	require.False(t, res.Pass(), "%s", res)
	require.Equal(t, 4, res.Directions, "2 a row by default")
	require.Equal(t, -1, res.Node, "a direction names no node")
	require.Contains(t, res.String(), "16 coordinates of dx and 4 random directions")
	require.Contains(t, res.String(), "a random direction through every node")

	good := bug
	good.lastNodeBug = false
	res = check(good, forward.VJPCheckOptions{Rows: 2, CornerRows: -1, Coords: 8, Directions: 16})
	require.True(t, res.Pass(), "%s", res)
	require.Equal(t, 32, res.Directions)

	// With a = 1 a uniform x puts every pre-activation at 2x: x = 0.5 sits
	// on the bound 1 at every node, so a move along any direction crosses
	// a kink at every node; half a step below it, a move of h crosses one
	// and a move of h/16 does not. (The one coordinate checked crosses it
	// too: TestCheckVJPCoordinatesNearKinks looks at coordinates; read the
	// directions alone here.)
	at := func(x float64) *mat.Dense {
		p := mat.NewDense(1, n, nil)
		for v := range n {
			p.Set(0, v, x)
		}
		return p
	}
	const h = 1e-5
	for _, active := range []func(float64) bool{closed, open} {
		for _, x := range []float64{0.5, (1 - h/2) / 2} {
			m := clampModel{a: 1, active: active, scale: 1}
			res = check(m, forward.VJPCheckOptions{Points: at(x), CornerRows: -1, Coords: 1, Directions: 8, Step: h})
			require.Equal(t, 8, res.Directions)
			require.LessOrEqual(t, res.DirectionsMaxErr, 1.0, "x = %v: %s", x, res)
		}
		// Kinks close by, not crossed at h/16, hide no wrong node. (Kinks
		// at x itself widen the interval by their jumps and can.)
		m := clampModel{a: 1, active: active, scale: 1, lastNodeBug: true}
		res = check(m, forward.VJPCheckOptions{Points: at((1 - h/2) / 2), CornerRows: -1, Coords: 1, Directions: 8, Step: h})
		require.Greater(t, res.DirectionsMaxErr, 1.0, "%s", res)
	}
}

// A coordinate whose move of h (2h at a corner) carries an output across
// a clamp's kink (a LeakyReLU's, in a learned model) is looked at again
// at h/16 and passes whichever side of the bound the gradient takes; a
// wrong node still fails there, by name.
func TestCheckVJPCoordinatesNearKinks(t *testing.T) {
	const n = 40
	nbr := make([][]int, n)
	for v := range n {
		nbr[v] = []int{(v + 1) % n, (v + n - 1) % n, (v + 7) % n}
	}
	check := func(m clampModel, x float64) forward.VJPCheck {
		m.nbr = nbr
		p := mat.NewDense(1, n, nil)
		for v := range n {
			p.Set(0, v, x)
		}
		res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), forward.VJPCheckOptions{Points: p, CornerRows: -1, Directions: -1, Step: 1e-5})
		require.NoError(t, err)
		require.Equal(t, n, res.Checked)
		return res
	}
	closed := func(p float64) bool { return p >= 0 && p <= 1 }
	open := func(p float64) bool { return p > 0 && p < 1 }
	// With a = 1 and a uniform x every pre-activation is 2x: at x = 0.5 on
	// the bound 1 (a kink at x), and at (1 - h/2)/2 half a step below it,
	// where x_v + h takes output v across and x_v + h/16 does not.
	const h = 1e-5
	for _, active := range []func(float64) bool{closed, open} {
		for _, x := range []float64{0.5, (1 - h/2) / 2} {
			res := check(clampModel{a: 1, active: active, scale: 1}, x)
			require.True(t, res.Pass(), "x = %v: %s", x, res)
		}
		res := check(clampModel{a: 1, active: active, scale: 1, lastNodeBug: true}, (1-h/2)/2)
		require.False(t, res.Pass(), "%s", res)
		require.Equal(t, n-1, res.Node, "%s", res)
	}

	// At a corner the one-sided difference reaches x + 2h inside: shifted
	// by -1.5h, a node at 0 among neighbours at 0 sits 1.5h below the
	// lower bound, which x_v + 2h crosses and x_v + 2h/16 does not. The
	// model refuses x outside [0, 1], as a plugin whose y = 1 - (1 - x)
	// (1 - s) leaves [0, 1] there does (gat's), so the difference from
	// outside cannot vouch for dx.
	corners := func(m clampModel) forward.VJPCheck {
		m.nbr, m.a, m.shift, m.refuseOutside = nbr, 0.5, -1.5*h, true
		res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), forward.VJPCheckOptions{Rows: 1, CornerRows: 4, Directions: -1, Step: h})
		require.NoError(t, err)
		require.Equal(t, 5*n, res.Checked)
		return res
	}
	for _, active := range []func(float64) bool{closed, open} {
		res := corners(clampModel{active: active, scale: 1})
		require.True(t, res.Pass(), "%s", res)
		res = corners(clampModel{active: active, scale: 1, cornerBug: true})
		require.False(t, res.Pass(), "%s", res)
		require.True(t, res.Corner, "%s", res)
		res = corners(clampModel{active: active, scale: 1, lastNodeBug: true})
		require.False(t, res.Pass(), "%s", res)
		require.Equal(t, n-1, res.Node, "%s", res)
	}
}

// A model saturated at the random interior points is flat there and not
// at the caller's points, which CheckVJP then checks instead; a point of
// the wrong width, or one without room for the central difference, is a
// caller's error.
func TestCheckVJPAtGivenPoints(t *testing.T) {
	const n = 40
	nbr := make([][]int, n)
	for v := range n {
		nbr[v] = []int{(v + 1) % n, (v + n - 1) % n, (v + 7) % n}
	}
	// pre = x_v + 10·mean(x_u): at least 1.1 in [0.1, 0.9]^n, clamped.
	m := clampModel{nbr: nbr, a: 10, active: func(p float64) bool { return p > 0 && p < 1 }, scale: 1}
	check := func(o forward.VJPCheckOptions) forward.VJPCheck {
		res, err := forward.CheckVJP(context.Background(), &m, n, rand.New(rand.NewPCG(1, 2)), o)
		require.NoError(t, err)
		return res
	}
	res := check(forward.VJPCheckOptions{Rows: 1, CornerRows: -1})
	require.Equal(t, n, res.Checked)
	require.Equal(t, res.Checked, res.Flat, "saturated at random interior points")

	sparse := mat.NewDense(2, n, nil)
	for i := range 2 {
		for v := range n {
			sparse.Set(i, v, 0.02+0.01*float64(i))
		}
	}
	res = check(forward.VJPCheckOptions{Points: sparse, Rows: 7, CornerRows: -1})
	require.Equal(t, 2*n, res.Checked, "the points' rows, not Rows")
	require.Zero(t, res.Flat)
	require.True(t, res.Pass(), "%s", res)

	require.PanicsWithValue(t, "forward: CheckVJP points have 39 columns for 40 nodes", func() {
		check(forward.VJPCheckOptions{Points: mat.NewDense(1, n-1, nil)})
	})
	sparse.Set(1, 3, 0)
	require.PanicsWithValue(t, "forward: CheckVJP point 1 holds 0, not within the step 1e-05 of [0, 1]'s inside", func() {
		check(forward.VJPCheckOptions{Points: sparse})
	})
}

// scaledFused is the model y = x whose own fused call returns dx scaled
// by dxScale at every entry.
type scaledFused struct {
	clampModel
	dxScale float64
}

func (m *scaledFused) Predict(_ context.Context, x *mat.Dense) (*mat.Dense, error) {
	return mat.DenseCopyOf(x), nil
}

func (m *scaledFused) VJP(_ context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	return mat.DenseCopyOf(x), mat.DenseCopyOf(dy), nil
}

func (m *scaledFused) SquaredErrorLoss(_ context.Context, x, target *mat.Dense) ([]float64, *mat.Dense, error) {
	r, n := x.Dims()
	loss := make([]float64, r)
	dx := mat.NewDense(r, n, nil)
	for i := range r {
		for j := range n {
			d := x.At(i, j) - target.At(0, j)
			loss[i] += d * d
			dx.Set(i, j, m.dxScale*2*d)
		}
	}
	return loss, dx, nil
}

// A fused call off by a share of dx at every entry fails on a large graph
// as on a small one: the tolerance scales with dx's largest entry, not
// with a row's sum of them.
func TestCheckFusedScalesWithAnEntry(t *testing.T) {
	for _, n := range []int{50, 50000} {
		x := mat.NewDense(2, n, nil)
		target := mat.NewDense(1, n, nil)
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		for j := range n {
			x.Set(0, j, rng.Float64())
			x.Set(1, j, rng.Float64())
			if rng.Float64() < 0.3 {
				target.Set(0, j, 1)
			}
		}
		for _, tc := range []struct {
			scale float64
			pass  bool
		}{{1, true}, {1 + 1e-9, true}, {1.02, false}, {1.001, false}} {
			c, err := forward.CheckFused(context.Background(), &scaledFused{dxScale: tc.scale}, x, target)
			require.NoError(t, err)
			require.Equal(t, tc.pass, c.Pass(), "n %d, dx scaled by %v: %s", n, tc.scale, c)
		}
	}
}

// softOrModel is y_v = 1 - (1 - x_v)(1 - min(mean_{u in N(v)} x_u, 1)),
// the soft max(x_v, ...) of a mean-field threshold model, whose VJP drops
// the inner min's gradient where the mean reaches 1 (at a corner, every
// neighbour a source): from inside [0, 1], where inference moves, that
// derivative is wrong. At the outside point x_u + h of such a neighbour
// y_u is 1 + h(...) > 1, which a plugin process's host refuses
// (ErrBadOutput), so plugin check keeps the inside verdict there; in
// process, the check must not accept the gradient on such an answer either.
type softOrModel struct {
	clampModel
}

func (m *softOrModel) mean(x []float64, v int) float64 {
	s := 0.0
	for _, u := range m.nbr[v] {
		s += x[u]
	}
	return s / float64(len(m.nbr[v]))
}

func (m *softOrModel) Predict(_ context.Context, x *mat.Dense) (*mat.Dense, error) {
	r, n := x.Dims()
	y := mat.NewDense(r, n, nil)
	for i := range r {
		row := x.RawRowView(i)
		for v := range n {
			y.Set(i, v, 1-(1-row[v])*(1-min(m.mean(row, v), 1)))
		}
	}
	return y, nil
}

func (m *softOrModel) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, _ := m.Predict(ctx, x)
	r, n := x.Dims()
	dx := mat.NewDense(r, n, nil)
	for i := range r {
		row := x.RawRowView(i)
		for v := range n {
			g, s := dy.At(i, v), m.mean(row, v)
			dx.Set(i, v, dx.At(i, v)+g*(1-min(s, 1)))
			if s >= 1 { // the bug: the gradient from outside, at s = 1 exactly
				continue
			}
			for _, u := range m.nbr[v] {
				dx.Set(i, u, dx.At(i, u)+g*(1-row[v])/float64(len(m.nbr[v])))
			}
		}
	}
	return y, dx, nil
}

// CheckVJP judges an in-process model as plugin check judges its process:
// an outside point whose answer leaves [0, 1], which the host refuses,
// does not excuse a corner coordinate's wrong inside derivative.
func TestCheckVJPOutsideAnswerOutOfRange(t *testing.T) {
	const n = 12
	nbr := make([][]int, n)
	for v := range n { // a path: the ends have one neighbour
		for _, u := range []int{v - 1, v + 1} {
			if u >= 0 && u < n {
				nbr[v] = append(nbr[v], u)
			}
		}
	}
	// Eight random corners (30% sources) of a 12-node path hold a
	// non-source whose neighbours are all sources, where the VJP is wrong.
	m := &softOrModel{clampModel{nbr: nbr}}
	res, err := forward.CheckVJP(context.Background(), m, n, rand.New(rand.NewPCG(1, 2)),
		forward.VJPCheckOptions{Rows: 1, CornerRows: 8, Directions: -1})
	require.NoError(t, err)
	require.False(t, res.Pass(), "%s", res)
	require.True(t, res.Corner, "%s", res)
}
