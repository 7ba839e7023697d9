package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// Param is one trainable tensor, viewed as a flat row-major Rows x Cols
// slice. Value and Grad alias the owning layer's storage, so an optimiser
// that writes Value updates the layer in place.
type Param struct {
	Name        string
	Value, Grad []float64
	Rows, Cols  int
}

// ZeroGrad sets every gradient to zero. Backward accumulates, so call it
// before each mini-batch.
func ZeroGrad(ps []*Param) {
	for _, p := range ps {
		clear(p.Grad)
	}
}

// Dense is a fully connected layer act(x W + b) over a batch of rows.
type Dense struct {
	// W is in x out.
	W *mat.Dense
	// B is the bias, length out.
	B   []float64
	Act Activation

	gw *mat.Dense
	gb []float64

	params []*Param

	// Caches of the last Forward, reused across calls.
	x      *mat.Dense
	z, y   *mat.Dense
	dz, dx *mat.Dense
	// noInputGrad skips dL/dx in Backward.
	noInputGrad bool
}

// NewDense returns an in x out layer. Weights are drawn from N(0, s^2) with
// He scaling s^2 = 2/in for ReLU and LeakyReLU and Glorot scaling
// s^2 = 2/(in+out) otherwise; biases start at zero.
func NewDense(in, out int, act Activation, rng *rand.Rand) *Dense {
	if in <= 0 || out <= 0 {
		panic(fmt.Sprintf("nn: dense layer size %dx%d", in, out))
	}
	if !act.valid() {
		panic(fmt.Sprintf("nn: unknown activation %d", int(act)))
	}
	scale := math.Sqrt(2 / float64(in+out))
	if act == ReLU || act == LeakyReLU {
		scale = math.Sqrt(2 / float64(in))
	}
	w := make([]float64, in*out)
	for i := range w {
		w[i] = rng.NormFloat64() * scale
	}
	d := &Dense{
		W:   mat.NewDense(in, out, w),
		B:   make([]float64, out),
		Act: act,
		gw:  mat.NewDense(in, out, nil),
		gb:  make([]float64, out),
	}
	d.params = []*Param{
		{Name: "W", Value: w, Grad: d.gw.RawMatrix().Data, Rows: in, Cols: out},
		{Name: "b", Value: d.B, Grad: d.gb, Rows: 1, Cols: out},
	}
	return d
}

// Replica returns a layer that shares d's weights and bias (the same W and
// B storage) but has its own caches and gradient buffers, so replicas can
// run Forward and Backward concurrently as long as nothing writes the
// weights meanwhile.
func (d *Dense) Replica() *Dense {
	in, out := d.W.Dims()
	r := &Dense{W: d.W, B: d.B, Act: d.Act, gw: mat.NewDense(in, out, nil), gb: make([]float64, out), noInputGrad: d.noInputGrad}
	r.params = []*Param{
		{Name: "W", Value: d.params[0].Value, Grad: r.gw.RawMatrix().Data, Rows: in, Cols: out},
		{Name: "b", Value: d.B, Grad: r.gb, Rows: 1, Cols: out},
	}
	return r
}

// In returns the input width.
func (d *Dense) In() int { r, _ := d.W.Dims(); return r }

// Out returns the output width.
func (d *Dense) Out() int { _, c := d.W.Dims(); return c }

// Params returns W (in x out) and b (1 x out) with their gradients.
func (d *Dense) Params() []*Param { return d.params }

// SkipInputGrad makes Backward skip computing dL/dx (and return nil), which
// saves a matrix product for a first layer whose input is data.
func (d *Dense) SkipInputGrad(skip bool) { d.noInputGrad = skip }

// Reuse returns m resized to r x c, reusing its storage when it can (a nil
// m gets a new matrix). The contents are unspecified: destination buffers
// of hot loops call it each pass instead of allocating.
func Reuse(m *mat.Dense, r, c int) *mat.Dense {
	if m == nil {
		return mat.NewDense(r, c, nil)
	}
	if mr, mc := m.Dims(); mr == r && mc == c {
		return m
	}
	m.Reset()
	m.ReuseAs(r, c)
	return m
}

// Forward returns act(x W + 1 b^T) for the batch x (one example per row).
// The result is owned by the layer and overwritten by the next Forward; x
// is kept for Backward.
func (d *Dense) Forward(x *mat.Dense) *mat.Dense {
	r, c := x.Dims()
	in, out := d.W.Dims()
	if c != in {
		panic(fmt.Sprintf("nn: dense input has %d columns, layer wants %d", c, in))
	}
	d.x = x
	d.z = Reuse(d.z, r, out)
	d.y = Reuse(d.y, r, out)
	z := d.z.RawMatrix()
	for i := 0; i < r; i++ {
		copy(z.Data[i*z.Stride:i*z.Stride+out], d.B)
	}
	switch {
	case in*out <= smallLayer:
		smallMul(z, x.RawMatrix(), d.W.RawMatrix(), true)
	case out == 1:
		// A one-column product as Gemm would run one length-1 axpy per
		// input element; Gemv is one pass.
		blas64.Gemv(blas.NoTrans, 1, x.RawMatrix(), d.wcol(), 1, blas64.Vector{N: r, Data: z.Data, Inc: z.Stride})
	default:
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, x.RawMatrix(), d.W.RawMatrix(), 1, z)
	}
	y := d.y.RawMatrix()
	if y.Stride == out && z.Stride == out {
		// One call for the batch: a per-row call is most of the cost of a
		// narrow layer over many rows.
		d.Act.apply(y.Data[:r*out], z.Data[:r*out])
		return d.y
	}
	for i := 0; i < r; i++ {
		d.Act.apply(y.Data[i*y.Stride:i*y.Stride+out], z.Data[i*z.Stride:i*z.Stride+out])
	}
	return d.y
}

// Backward takes dout = dL/dy for the batch of the last Forward, adds
// dL/dW = x^T dZ and dL/db = dZ^T 1 to the gradients (dZ = dout ⊙ act'(z)),
// and returns dL/dx = dZ W^T, owned by the layer until the next Backward.
func (d *Dense) Backward(dout *mat.Dense) *mat.Dense {
	return d.backward(dout, true, !d.noInputGrad)
}

// BackwardInput is Backward without touching the parameter gradients: it
// only returns dL/dx = (dout ⊙ act'(z)) W^T. It is the cheap path for a
// vector-Jacobian product with respect to the input.
func (d *Dense) BackwardInput(dout *mat.Dense) *mat.Dense {
	return d.backward(dout, false, true)
}

func (d *Dense) backward(dout *mat.Dense, params, input bool) *mat.Dense {
	if d.x == nil {
		panic("nn: dense Backward before Forward")
	}
	r, c := dout.Dims()
	yr, yc := d.y.Dims()
	if r != yr || c != yc {
		panic(fmt.Sprintf("nn: dense Backward got %dx%d, last output was %dx%d", r, c, yr, yc))
	}
	d.dz = Reuse(d.dz, r, c)
	dz, g, z, y := d.dz.RawMatrix(), dout.RawMatrix(), d.z.RawMatrix(), d.y.RawMatrix()
	if dz.Stride == c && g.Stride == c && z.Stride == c && y.Stride == c {
		// One activation call for a contiguous batch, as in Forward.
		d.Act.backward(dz.Data[:r*c], g.Data[:r*c], z.Data[:r*c], y.Data[:r*c])
	} else {
		for i := 0; i < r; i++ {
			d.Act.backward(dz.Data[i*dz.Stride:i*dz.Stride+c], g.Data[i*g.Stride:i*g.Stride+c],
				z.Data[i*z.Stride:i*z.Stride+c], y.Data[i*y.Stride:i*y.Stride+c])
		}
	}
	for i := 0; i < r && params; i++ {
		for j, v := range dz.Data[i*dz.Stride : i*dz.Stride+c] {
			d.gb[j] += v
		}
	}
	in, _ := d.W.Dims()
	small := in*c <= smallLayer
	if params {
		if small {
			smallMulTA(d.gw.RawMatrix(), d.x.RawMatrix(), dz)
		} else if c == 1 {
			gw := d.gw.RawMatrix()
			blas64.Gemv(blas.Trans, 1, d.x.RawMatrix(), blas64.Vector{N: r, Data: dz.Data, Inc: dz.Stride},
				1, blas64.Vector{N: in, Data: gw.Data, Inc: gw.Stride})
		} else {
			blas64.Gemm(blas.Trans, blas.NoTrans, 1, d.x.RawMatrix(), dz, 1, d.gw.RawMatrix())
		}
	}
	if !input {
		return nil
	}
	d.dx = Reuse(d.dx, r, in)
	if small {
		smallMulTB(d.dx.RawMatrix(), dz, d.W.RawMatrix())
		return d.dx
	}
	if c == 1 {
		// dx = dz w^T is an outer product.
		dx, w := d.dx.RawMatrix(), d.wcol()
		for i := 0; i < r; i++ {
			g := dz.Data[i*dz.Stride]
			row := dx.Data[i*dx.Stride : i*dx.Stride+in]
			for j := range row {
				row[j] = g * w.Data[j*w.Inc]
			}
		}
		return d.dx
	}
	blas64.Gemm(blas.NoTrans, blas.Trans, 1, dz, d.W.RawMatrix(), 0, d.dx.RawMatrix())
	return d.dx
}

// wcol returns the weights of a one-output layer as a vector.
func (d *Dense) wcol() blas64.Vector {
	w := d.W.RawMatrix()
	return blas64.Vector{N: w.Rows, Data: w.Data, Inc: w.Stride}
}

// MLP is a stack of dense layers.
type MLP struct {
	Layers []*Dense
	params []*Param
}

// NewMLP returns layers sizes[0] -> sizes[1] -> ... -> sizes[len-1], with
// the hidden activation on every layer but the last, which uses out.
func NewMLP(sizes []int, hidden, out Activation, rng *rand.Rand) *MLP {
	if len(sizes) < 2 {
		panic(fmt.Sprintf("nn: MLP needs at least 2 sizes, got %v", sizes))
	}
	m := &MLP{}
	for i := 0; i+1 < len(sizes); i++ {
		act := hidden
		if i+2 == len(sizes) {
			act = out
		}
		m.Layers = append(m.Layers, NewDense(sizes[i], sizes[i+1], act, rng))
	}
	return m
}

// Replica returns an MLP sharing m's weights with caches and gradient
// buffers of its own (see Dense.Replica).
func (m *MLP) Replica() *MLP {
	r := &MLP{}
	for _, l := range m.Layers {
		r.Layers = append(r.Layers, l.Replica())
	}
	return r
}

// Forward runs the batch through every layer. The result is owned by the
// last layer (see Dense.Forward).
func (m *MLP) Forward(x *mat.Dense) *mat.Dense {
	for _, l := range m.Layers {
		x = l.Forward(x)
	}
	return x
}

// Backward back-propagates dout = dL/dy through every layer, accumulating
// parameter gradients, and returns dL/dx (nil if the first layer skips it).
func (m *MLP) Backward(dout *mat.Dense) *mat.Dense {
	for i := len(m.Layers) - 1; i >= 0; i-- {
		dout = m.Layers[i].Backward(dout)
	}
	return dout
}

// BackwardInput returns dL/dx for dout = dL/dy without touching the
// parameter gradients (see Dense.BackwardInput).
func (m *MLP) BackwardInput(dout *mat.Dense) *mat.Dense {
	for i := len(m.Layers) - 1; i >= 0; i-- {
		dout = m.Layers[i].BackwardInput(dout)
	}
	return dout
}

// Params returns every layer's parameters, named "layer<i>.W" and
// "layer<i>.b", aliasing the layers' storage.
func (m *MLP) Params() []*Param {
	if len(m.params) == 2*len(m.Layers) {
		return m.params
	}
	m.params = m.params[:0]
	for i, l := range m.Layers {
		for _, p := range l.Params() {
			q := *p
			q.Name = fmt.Sprintf("layer%d.%s", i, p.Name)
			m.params = append(m.params, &q)
		}
	}
	return m.params
}

// smallLayer is the largest in*out for which plain loops beat Gemm: with
// few columns the blocked product is all call overhead and short vectors,
// and a layer this small is applied to many rows (one per graph node).
const smallLayer = 256

// smallMul adds a b to c (row-major, b small), or sets c = a b when add is
// false. Four output columns at a time stay in registers across the inner
// sum.
func smallMul(c, a, b blas64.General, add bool) {
	k, out := a.Cols, c.Cols
	for i := 0; i < a.Rows; i++ {
		arow := a.Data[i*a.Stride : i*a.Stride+k]
		crow := c.Data[i*c.Stride : i*c.Stride+out]
		j := 0
		for ; j+4 <= out; j += 4 {
			cc := (*[4]float64)(crow[j:])
			var s0, s1, s2, s3 float64
			if add {
				s0, s1, s2, s3 = cc[0], cc[1], cc[2], cc[3]
			}
			for l, av := range arow {
				bb := (*[4]float64)(b.Data[l*b.Stride+j:])
				s0 += av * bb[0]
				s1 += av * bb[1]
				s2 += av * bb[2]
				s3 += av * bb[3]
			}
			*cc = [4]float64{s0, s1, s2, s3}
		}
		for ; j < out; j++ {
			var s float64
			if add {
				s = crow[j]
			}
			for l, av := range arow {
				s += av * b.Data[l*b.Stride+j]
			}
			crow[j] = s
		}
	}
}

// smallMulTA adds a^T b to c (c small).
func smallMulTA(c, a, b blas64.General) {
	for i := 0; i < a.Rows; i++ {
		brow := b.Data[i*b.Stride : i*b.Stride+b.Cols]
		for l, av := range a.Data[i*a.Stride : i*a.Stride+a.Cols] {
			if av == 0 {
				continue
			}
			crow := c.Data[l*c.Stride : l*c.Stride+c.Cols]
			for j := range crow {
				crow[j] += av * brow[j]
			}
		}
	}
}

// smallMulTB sets c = a b^T (b small), as smallMul with b transposed:
// the four-column blocks keep four independent sums in flight, where one
// dot product per output would wait on its own chain of additions.
func smallMulTB(c, a, b blas64.General) {
	bt := blas64.General{Rows: b.Cols, Cols: b.Rows, Stride: b.Rows, Data: make([]float64, b.Rows*b.Cols)}
	for l := 0; l < b.Rows; l++ {
		for j, v := range b.Data[l*b.Stride : l*b.Stride+b.Cols] {
			bt.Data[j*bt.Stride+l] = v
		}
	}
	smallMul(c, a, bt, false)
}
