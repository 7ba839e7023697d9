package nn

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"
)

func randMat(rng *rand.Rand, r, c int) *mat.Dense {
	m := mat.NewDense(r, c, nil)
	d := m.RawMatrix().Data
	for i := range d {
		d[i] = rng.NormFloat64()
	}
	return m
}

// weightedSum is the test loss L = sum(C ⊙ Y); its dL/dY is C.
func weightedSum(c, y *mat.Dense) float64 {
	return mat.Sum(func() *mat.Dense { var p mat.Dense; p.MulElem(c, y); return &p }())
}

// layer is what the gradient tests need of Dense and MLP.
type layer interface {
	Forward(*mat.Dense) *mat.Dense
	Backward(*mat.Dense) *mat.Dense
	Params() []*Param
}

func checkLayer(t *testing.T, l layer, x, c *mat.Dense) {
	t.Helper()
	loss := func() float64 { return weightedSum(c, l.Forward(x)) }
	ZeroGrad(l.Params())
	l.Forward(x)
	dx := mat.DenseCopyOf(l.Backward(c))
	for _, p := range l.Params() {
		grad := append([]float64(nil), p.Grad...)
		e, i := CheckGradient(loss, p.Value, grad, 1e-6)
		require.Lessf(t, e, 1e-5, "param %s: worst relative error %g at %d", p.Name, e, i)
	}
	e, i := CheckGradient(loss, x.RawMatrix().Data, dx.RawMatrix().Data, 1e-6)
	require.Lessf(t, e, 1e-5, "input: worst relative error %g at %d", e, i)
}

func TestDenseGradient(t *testing.T) {
	// Sizes cover the small-layer loops (5x4, 5x1), Gemm (40x9) and the
	// matrix-vector path (300x1).
	for _, size := range [][2]int{{5, 4}, {5, 1}, {40, 9}, {300, 1}} {
		in, out := size[0], size[1]
		for _, act := range []Activation{Identity, ReLU, LeakyReLU, Sigmoid} {
			t.Run(fmt.Sprintf("%s-%dx%d", act, in, out), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(act)))
				d := NewDense(in, out, act, rng)
				for i := range d.B {
					d.B[i] = rng.NormFloat64()
				}
				checkLayer(t, d, randMat(rng, 7, in), randMat(rng, 7, out))
			})
		}
	}
}

func TestMLPGradient(t *testing.T) {
	for _, tt := range []struct {
		name        string
		hidden, out Activation
	}{
		{"relu-sigmoid", ReLU, Sigmoid},
		{"leaky-identity", LeakyReLU, Identity},
		{"sigmoid-leaky", Sigmoid, LeakyReLU},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, 3))
			m := NewMLP([]int{6, 8, 5, 3}, tt.hidden, tt.out, rng)
			require.Len(t, m.Params(), 6)
			require.Equal(t, "layer2.b", m.Params()[5].Name)
			checkLayer(t, m, randMat(rng, 9, 6), randMat(rng, 9, 3))
		})
	}
}

func TestBackwardInputLeavesParamGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	m := NewMLP([]int{4, 5, 3, 1}, LeakyReLU, Sigmoid, rng)
	m.Layers[0].SkipInputGrad(true) // BackwardInput computes dx regardless
	x, c := randMat(rng, 6, 4), randMat(rng, 6, 1)
	ZeroGrad(m.Params())
	m.Forward(x)
	dx := mat.DenseCopyOf(m.BackwardInput(c))
	for _, p := range m.Params() {
		for _, g := range p.Grad {
			require.Zero(t, g)
		}
	}
	m.Layers[0].SkipInputGrad(false)
	m.Forward(x)
	require.Equal(t, dx.RawMatrix().Data, m.Backward(c).RawMatrix().Data)
}

func TestReplicaSharesWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	m := NewMLP([]int{3, 4, 2}, ReLU, Sigmoid, rng)
	r := m.Replica()
	x, c := randMat(rng, 5, 3), randMat(rng, 5, 2)
	want := mat.DenseCopyOf(m.Forward(x))
	require.Equal(t, want.RawMatrix().Data, r.Forward(x).RawMatrix().Data)
	// Updating the original's weights updates the replica.
	m.Params()[3].Value[1] += 0.5
	require.NotEqual(t, want.RawMatrix().Data, r.Forward(x).RawMatrix().Data)
	require.Equal(t, mat.DenseCopyOf(m.Forward(x)).RawMatrix().Data, r.Forward(x).RawMatrix().Data)
	// Gradients are the replica's own.
	ZeroGrad(m.Params())
	ZeroGrad(r.Params())
	r.Backward(c)
	for i, p := range m.Params() {
		require.Equal(t, p.Name, r.Params()[i].Name)
		require.Equal(t, make([]float64, len(p.Grad)), p.Grad)
	}
	require.NotEqual(t, make([]float64, len(r.Params()[0].Grad)), r.Params()[0].Grad)
}

func TestBackwardAccumulates(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	d := NewDense(3, 2, Sigmoid, rng)
	x, c := randMat(rng, 4, 3), randMat(rng, 4, 2)
	ZeroGrad(d.Params())
	d.Forward(x)
	d.Backward(c)
	once := append([]float64(nil), d.Params()[0].Grad...)
	d.Forward(x)
	d.Backward(c)
	for i, g := range d.Params()[0].Grad {
		require.InDelta(t, 2*once[i], g, 1e-12)
	}
	ZeroGrad(d.Params())
	for _, p := range d.Params() {
		for _, g := range p.Grad {
			require.Zero(t, g)
		}
	}
}

func TestBatchIsRowwise(t *testing.T) {
	// A batch through the layer equals each row on its own, also when the
	// batch size changes between calls (the buffers are resized).
	rng := rand.New(rand.NewPCG(5, 5))
	m := NewMLP([]int{4, 6, 2}, ReLU, Identity, rng)
	x := randMat(rng, 5, 4)
	all := mat.DenseCopyOf(m.Forward(x))
	for i := 0; i < 5; i++ {
		row := mat.NewDense(1, 4, append([]float64(nil), x.RawRowView(i)...))
		got := m.Forward(row)
		require.InDeltaSlice(t, all.RawRowView(i), got.RawRowView(0), 1e-12)
	}
}

func TestSkipInputGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	d := NewDense(3, 2, ReLU, rng)
	d.SkipInputGrad(true)
	d.Forward(randMat(rng, 2, 3))
	require.Nil(t, d.Backward(randMat(rng, 2, 2)))
}

func TestShapeErrorsPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	d := NewDense(3, 2, ReLU, rng)
	require.PanicsWithValue(t, "nn: dense input has 4 columns, layer wants 3", func() { d.Forward(mat.NewDense(1, 4, nil)) })
	require.PanicsWithValue(t, "nn: dense Backward before Forward", func() { d.Backward(mat.NewDense(1, 2, nil)) })
	d.Forward(mat.NewDense(2, 3, nil))
	require.PanicsWithValue(t, "nn: dense Backward got 3x2, last output was 2x2", func() { d.Backward(mat.NewDense(3, 2, nil)) })
	require.PanicsWithValue(t, "nn: dense Backward got 2x3, last output was 2x2", func() { d.Backward(mat.NewDense(2, 3, nil)) })
	require.Panics(t, func() { NewMLP([]int{3}, ReLU, ReLU, rng) })
	require.PanicsWithValue(t, "nn: dense layer size 0x2", func() { NewDense(0, 2, ReLU, rng) })
	require.PanicsWithValue(t, "nn: dense layer size 3x0", func() { NewDense(3, 0, ReLU, rng) })
}

func TestCheckGradientCatchesWrongGradient(t *testing.T) {
	v := []float64{1, 2, 3}
	f := func() float64 { return v[0]*v[0] + 3*v[1] + math.Sin(v[2]) }
	good := []float64{2, 3, math.Cos(3)}
	e, _ := CheckGradient(f, v, good, 1e-6)
	require.Less(t, e, 1e-7)
	bad := []float64{2, 3.1, math.Cos(3)}
	e, i := CheckGradient(f, v, bad, 1e-6)
	require.Greater(t, e, 0.01)
	require.Equal(t, 1, i)
	require.Equal(t, []float64{1, 2, 3}, v)
}

func TestAdamConvergesOnQuadratic(t *testing.T) {
	// L = sum_i s_i (θ_i - c_i)^2 with scales over three orders of
	// magnitude; Adam's per-coordinate scaling handles them all.
	target := []float64{3, -2, 0.5, 10}
	scale := []float64{0.01, 1, 10, 0.1}
	p := &Param{Name: "theta", Value: make([]float64, 4), Grad: make([]float64, 4), Rows: 1, Cols: 4}
	opt := NewAdam([]*Param{p}, 0.1)
	loss := func() float64 {
		var l float64
		for i, v := range p.Value {
			l += scale[i] * (v - target[i]) * (v - target[i])
		}
		return l
	}
	start := loss()
	for step := 0; step < 3000; step++ {
		for i, v := range p.Value {
			p.Grad[i] = 2 * scale[i] * (v - target[i])
		}
		opt.Step()
	}
	require.Equal(t, 3000, opt.Steps())
	require.InDeltaSlice(t, target, p.Value, 1e-3)
	require.Less(t, loss(), 1e-6*start)
}

func TestAdamFirstStepIsLR(t *testing.T) {
	// With bias correction the first step moves each coordinate by LR in
	// the direction against its gradient, whatever the gradient's scale.
	p := &Param{Value: []float64{0, 0}, Grad: []float64{1e-3, -50}, Rows: 1, Cols: 2}
	opt := NewAdam([]*Param{p}, 0.01)
	opt.Step()
	require.InDelta(t, -0.01, p.Value[0], 1e-7)
	require.InDelta(t, 0.01, p.Value[1], 1e-7)
}

func TestParamsRoundTrip(t *testing.T) {
	a := NewMLP([]int{4, 5, 3}, ReLU, Sigmoid, rand.New(rand.NewPCG(1, 1)))
	b := NewMLP([]int{4, 5, 3}, ReLU, Sigmoid, rand.New(rand.NewPCG(2, 2)))
	var buf bytes.Buffer
	require.NoError(t, WriteParams(&buf, a.Params()))
	buf.WriteString("tail")
	require.NoError(t, ReadParams(&buf, b.Params()))
	require.Equal(t, "tail", buf.String(), "ReadParams must read exactly its stream")
	for i, p := range a.Params() {
		require.Equal(t, p.Value, b.Params()[i].Value)
	}
	x := randMat(rand.New(rand.NewPCG(3, 3)), 2, 4)
	require.Equal(t, mat.DenseCopyOf(a.Forward(x)).RawMatrix().Data, b.Forward(x).RawMatrix().Data)
}

func TestReadParamsErrors(t *testing.T) {
	src := NewMLP([]int{3, 4, 2}, ReLU, Identity, rand.New(rand.NewPCG(1, 1)))
	var buf bytes.Buffer
	require.NoError(t, WriteParams(&buf, src.Params()))
	good := buf.Bytes()

	fresh := func() *MLP { return NewMLP([]int{3, 4, 2}, ReLU, Identity, rand.New(rand.NewPCG(9, 9))) }
	snapshot := func(m *MLP) [][]float64 {
		var out [][]float64
		for _, p := range m.Params() {
			out = append(out, append([]float64(nil), p.Value...))
		}
		return out
	}

	t.Run("every truncation", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			m := fresh()
			before := snapshot(m)
			err := ReadParams(bytes.NewReader(good[:n]), m.Params())
			require.ErrorIsf(t, err, ErrCorruptParams, "prefix %d", n)
			require.Contains(t, err.Error(), "truncated")
			require.Equal(t, before, snapshot(m), "failed read must not touch the params")
		}
	})

	corrupt := func(at int, b byte) []byte {
		c := append([]byte(nil), good...)
		c[at] = b
		return c
	}
	nanStream := func() []byte {
		m := fresh()
		m.Params()[1].Value[0] = math.NaN()
		var b bytes.Buffer
		require.NoError(t, WriteParams(&b, m.Params()))
		return b.Bytes()
	}
	streamOf := func(m *MLP) []byte {
		var b bytes.Buffer
		require.NoError(t, WriteParams(&b, m.Params()))
		return b.Bytes()
	}
	rng := rand.New(rand.NewPCG(5, 5))
	tests := []struct {
		name   string
		stream []byte
		is     error
		msg    string
	}{
		{"bad magic", corrupt(0, 'X'), ErrCorruptParams, "bad magic"},
		{"version", corrupt(8, 7), ErrCorruptParams, "unsupported version 7"},
		{"flipped value", corrupt(len(good)-10, good[len(good)-10]^0x40), ErrCorruptParams, "checksum"},
		{"huge name", corrupt(19, 0x7f), ErrCorruptParams, "name length"},
		{"nan", nanStream(), ErrCorruptParams, `parameter "layer0.b" value 0 is NaN`},
		{"count", streamOf(NewMLP([]int{3, 2}, ReLU, Identity, rng)), ErrParamMismatch, "stream has 2 parameters, model has 4"},
		{"shape", streamOf(NewMLP([]int{3, 5, 2}, ReLU, Identity, rng)), ErrParamMismatch, `parameter "layer0.W" is 3x5, model has 3x4`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fresh()
			before := snapshot(m)
			err := ReadParams(bytes.NewReader(tt.stream), m.Params())
			require.ErrorIs(t, err, tt.is)
			require.Contains(t, err.Error(), tt.msg)
			require.Equal(t, before, snapshot(m))
		})
	}

	t.Run("name", func(t *testing.T) {
		d := NewDense(3, 4, ReLU, rng)
		err := ReadParams(bytes.NewReader(good), []*Param{d.Params()[0], d.Params()[1], d.Params()[0], d.Params()[1]})
		require.ErrorIs(t, err, ErrParamMismatch)
		require.Contains(t, err.Error(), `parameter 0 is "layer0.W", model has "W"`)
	})
}

func TestScalarFunctions(t *testing.T) {
	require.InDelta(t, 0.5, Logistic(0), 0)
	require.InDelta(t, 1/(1+math.Exp(-2.5)), Logistic(2.5), 1e-15)
	require.InDelta(t, 1/(1+math.Exp(3.5)), Logistic(-3.5), 1e-15)
	require.Equal(t, 0.0, Logistic(-1000))
	require.Equal(t, 1.0, Logistic(1000))

	require.InDelta(t, math.Log(1+math.Exp(1.5)), Softplus(1.5), 1e-14)
	require.InDelta(t, math.Log(1+math.Exp(-2)), Softplus(-2), 1e-14)
	require.Equal(t, 800.0, Softplus(800))
	require.InDelta(t, math.Exp(-800), Softplus(-800), 1e-300)

	require.InDelta(t, math.Log(math.Exp(1)+math.Exp(2)+math.Exp(-1)), LogSumExp([]float64{1, 2, -1}), 1e-14)
	require.InDelta(t, 1000+math.Log(2), LogSumExp([]float64{1000, 1000}), 1e-12)
	require.True(t, math.IsInf(LogSumExp(nil), -1))
	// All -Inf (every term exp(-Inf) = 0) is -Inf, not the NaN of
	// -Inf - -Inf; one +Inf term makes the sum +Inf.
	require.True(t, math.IsInf(LogSumExp([]float64{math.Inf(-1), math.Inf(-1)}), -1))
	require.True(t, math.IsInf(LogSumExp([]float64{3, math.Inf(1)}), 1))
}

func benchDense(b *testing.B, backward bool) {
	rng := rand.New(rand.NewPCG(1, 1))
	d := NewDense(512, 512, ReLU, rng)
	x, g := randMat(rng, 64, 512), randMat(rng, 64, 512)
	d.Forward(x)
	b.ResetTimer()
	for b.Loop() {
		if backward {
			d.Backward(g)
		} else {
			d.Forward(x)
		}
	}
}

func BenchmarkDenseForward64x512x512(b *testing.B)  { benchDense(b, false) }
func BenchmarkDenseBackward64x512x512(b *testing.B) { benchDense(b, true) }

// BenchmarkDenseTall is the per-node layer shape of a graph model: many
// rows (nodes x batch), few features.
func BenchmarkDenseTall40000x5x8(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	d := NewDense(5, 8, LeakyReLU, rng)
	x, g := randMat(rng, 40000, 5), randMat(rng, 40000, 8)
	for b.Loop() {
		d.Forward(x)
		d.BackwardInput(g)
	}
}

// A batch that is a view into a larger matrix (rows with a stride) gives
// the layer the same results as a packed copy: the per-row and the
// one-call activation paths agree.
func TestDenseStridedBatch(t *testing.T) {
	// Sigmoid's derivative reads the cached output y, LeakyReLU's z.
	for _, sa := range []struct {
		size [2]int
		act  Activation
	}{{[2]int{5, 8}, LeakyReLU}, {[2]int{40, 9}, LeakyReLU}, {[2]int{5, 8}, Sigmoid}, {[2]int{40, 9}, Sigmoid}} {
		in, out := sa.size[0], sa.size[1]
		rng := rand.New(rand.NewPCG(4, uint64(in)))
		d := NewDense(in, out, sa.act, rng)
		bigX, bigG := randMat(rng, 9, in+3), randMat(rng, 9, out+2)
		x, g := bigX.Slice(2, 8, 1, 1+in).(*mat.Dense), bigG.Slice(1, 7, 2, 2+out).(*mat.Dense)
		ZeroGrad(d.Params())
		yView := mat.DenseCopyOf(d.Forward(x))
		dxView := mat.DenseCopyOf(d.Backward(g))
		gradView := append([]float64(nil), d.Params()[0].Grad...)
		ZeroGrad(d.Params())
		yPacked := mat.DenseCopyOf(d.Forward(mat.DenseCopyOf(x)))
		dxPacked := mat.DenseCopyOf(d.Backward(mat.DenseCopyOf(g)))
		require.True(t, mat.Equal(yView, yPacked), "%dx%d forward", in, out)
		require.True(t, mat.Equal(dxView, dxPacked), "%dx%d input gradient", in, out)
		require.Equal(t, gradView, d.Params()[0].Grad, "%dx%d weight gradient", in, out)
	}
}

// The activations' values and derivatives at hand-picked points, written
// out from the definitions in activation.go (the gradient tests only check
// that backward agrees with forward, which a wrong activation passes when
// both are wrong the same way). z = 0 takes the side the doc names: ReLU's
// derivative there is 0, and LeakyReLU treats 0 as negative (negative(0) is
// 1), so its slope there is the leak.
func TestActivationValues(t *testing.T) {
	s := 1 / (1 + math.Exp(-0.5)) // sigmoid(0.5)
	z := []float64{-2, 0, 0.5, 3}
	g := []float64{10, 20, 30, 40}
	for _, tt := range []struct {
		act   Activation
		y, dz []float64
	}{
		{Identity, []float64{-2, 0, 0.5, 3}, []float64{10, 20, 30, 40}},
		{ReLU, []float64{0, 0, 0.5, 3}, []float64{0, 0, 30, 40}},
		{LeakyReLU, []float64{-0.02, 0, 0.5, 3}, []float64{0.1, 0.2, 30, 40}},
		{Sigmoid,
			[]float64{1 / (1 + math.Exp(2)), 0.5, s, 1 / (1 + math.Exp(-3))},
			[]float64{10 * math.Exp(2) / ((1 + math.Exp(2)) * (1 + math.Exp(2))), 20 * 0.25, 30 * s * (1 - s), 40 * math.Exp(-3) / ((1 + math.Exp(-3)) * (1 + math.Exp(-3)))}},
	} {
		t.Run(tt.act.String(), func(t *testing.T) {
			y := make([]float64, len(z))
			tt.act.apply(y, z)
			require.InDeltaSlice(t, tt.y, y, 1e-15)
			dz := make([]float64, len(z))
			tt.act.backward(dz, g, z, y)
			require.InDeltaSlice(t, tt.dz, dz, 1e-13)
		})
	}
}

// A layer is built with a known activation or not at all: an unknown one
// panics in NewDense, not at the first Forward.
func TestNewDenseRefusesUnknownActivation(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, a := range []Activation{Sigmoid + 1, Identity - 1} {
		require.PanicsWithValue(t, fmt.Sprintf("nn: unknown activation %d", int(a)), func() { NewDense(2, 2, a, rng) })
	}
}

// CheckGradient's error is the documented relative error, the floor
// judges entries far below the largest against the largest, the first of
// equal errors is the one reported, and an empty value reports -1.
func TestCheckGradientMeasure(t *testing.T) {
	// f = 2 v0 + 2 v1 at 0: each central difference is (2e-6 - -2e-6) /
	// 2e-6 = 2 exactly (doubling is exact), so both errors are
	// |2 - 2.2| / 2.2, equal to the last bit.
	v := []float64{0, 0}
	lin := func() float64 { return 2*v[0] + 2*v[1] }
	e, i := CheckGradient(lin, v, []float64{2.2, 2.2}, 1e-6)
	require.InDelta(t, 0.2/2.2, e, 1e-9)
	require.Equal(t, 0, i, "the first of equal errors")
	// The worst entry first, a smaller error after it: 0.2/2.2 against
	// 0.1/2.1.
	e, i = CheckGradient(lin, v, []float64{2.2, 2.1}, 1e-6)
	require.InDelta(t, 0.2/2.2, e, 1e-9)
	require.Equal(t, 0, i)

	// f = 1000 v0 + 1e-4 v1: the floor 1e-3 * 1000 = 1 judges v1's error
	// of 1e-5 as 1e-5 (against 1.1e-4 it would read as 9%). The round-off
	// of the differences is about 1000 * 1e-16 / 1e-6 = 1e-7.
	w := []float64{0.3, 0.7}
	steep := func() float64 { return 1000*w[0] + 1e-4*w[1] }
	e, i = CheckGradient(steep, w, []float64{1000, 1.1e-4}, 1e-6)
	require.InDelta(t, 1e-5, e, 1e-6)
	require.Equal(t, 1, i)

	e, i = CheckGradient(func() float64 { return 0 }, nil, nil, 1e-6)
	require.Zero(t, e)
	require.Equal(t, -1, i)
}

// NewDense draws weights with He variance 2/in for ReLU and LeakyReLU and
// Glorot variance 2/(in+out) otherwise, and zero biases. 40,000 draws put
// the sample variance within 3% of its expectation (4 standard errors,
// sqrt(2/40000) = 0.7% each), and the candidates differ by 20% or more.
func TestNewDenseInitScale(t *testing.T) {
	for _, tt := range []struct {
		act  Activation
		want float64
	}{
		{Identity, 2.0 / 500},
		{Sigmoid, 2.0 / 500},
		{ReLU, 2.0 / 400},
		{LeakyReLU, 2.0 / 400},
	} {
		t.Run(tt.act.String(), func(t *testing.T) {
			d := NewDense(400, 100, tt.act, rand.New(rand.NewPCG(21, uint64(tt.act))))
			w := d.W.RawMatrix().Data
			var ss float64
			for _, v := range w {
				ss += v * v
			}
			require.InEpsilon(t, tt.want, ss/float64(len(w)), 0.03)
			require.Equal(t, make([]float64, 100), d.B)
		})
	}
}

// Reuse returns an r x c matrix whatever it is given, the same one when
// the shape already fits.
func TestReuse(t *testing.T) {
	m := Reuse(nil, 3, 4)
	r, c := m.Dims()
	require.Equal(t, [2]int{3, 4}, [2]int{r, c})
	require.Same(t, m, Reuse(m, 3, 4))
	for _, shape := range [][2]int{{5, 4}, {5, 2}, {1, 2}} {
		m = Reuse(m, shape[0], shape[1])
		r, c = m.Dims()
		require.Equal(t, shape, [2]int{r, c})
	}
}

// NewMLP puts the hidden activation on every layer but the last, which
// takes out, with the sizes in order.
func TestNewMLPLayers(t *testing.T) {
	m := NewMLP([]int{2, 3, 4, 5}, ReLU, Sigmoid, rand.New(rand.NewPCG(13, 13)))
	var acts []Activation
	var dims [][2]int
	for _, l := range m.Layers {
		acts = append(acts, l.Act)
		dims = append(dims, [2]int{l.In(), l.Out()})
	}
	require.Equal(t, []Activation{ReLU, ReLU, Sigmoid}, acts)
	require.Equal(t, [][2]int{{2, 3}, {3, 4}, {4, 5}}, dims)
}

// A name of maxNameLen bytes, the longest ReadParams accepts, is written
// and read back; one byte more is refused when written.
func TestParamsNameLengthLimit(t *testing.T) {
	name := strings.Repeat("n", maxNameLen)
	p := &Param{Name: name, Value: []float64{1.5}, Grad: make([]float64, 1), Rows: 1, Cols: 1}
	var buf bytes.Buffer
	require.NoError(t, WriteParams(&buf, []*Param{p}))
	q := &Param{Name: name, Value: make([]float64, 1), Grad: make([]float64, 1), Rows: 1, Cols: 1}
	require.NoError(t, ReadParams(&buf, []*Param{q}))
	require.Equal(t, []float64{1.5}, q.Value)
	p.Name += "n"
	require.PanicsWithValue(t, fmt.Sprintf("nn: param name longer than %d bytes", maxNameLen), func() { _ = WriteParams(io.Discard, []*Param{p}) })
}
