package prior

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/nn"
)

// sparseDense is a ReLU dense layer whose input rows are indicator vectors
// given as index sets: for row r with set S_r,
//
//	z_r = sum_{i in S_r} W_i + b,   y_r = max(z_r, 0)
//
// Backward adds dZ_r to the rows W_i, i in S_r, and dZ^T 1 to b; the input
// is data, so there is no dL/dx.
type sparseDense struct {
	in, out int
	w, b    []float64 // in x out row-major, out
	gw, gb  []float64
	params  []*nn.Param

	sets [][]int
	z, y *mat.Dense
	dz   []float64
}

func newSparseDense(in, out int, rng *rand.Rand) *sparseDense {
	// He initialisation, as nn.NewDense does for ReLU.
	scale := math.Sqrt(2 / float64(in))
	l := &sparseDense{in: in, out: out, w: make([]float64, in*out), b: make([]float64, out),
		gw: make([]float64, in*out), gb: make([]float64, out)}
	for i := range l.w {
		l.w[i] = rng.NormFloat64() * scale
	}
	l.params = []*nn.Param{
		{Name: "W", Value: l.w, Grad: l.gw, Rows: in, Cols: out},
		{Name: "b", Value: l.b, Grad: l.gb, Rows: 1, Cols: out},
	}
	return l
}

func (l *sparseDense) forward(sets [][]int) *mat.Dense {
	l.sets = sets
	l.z = nn.Reuse(l.z, len(sets), l.out)
	l.y = nn.Reuse(l.y, len(sets), l.out)
	for r, set := range sets {
		z, y := l.z.RawRowView(r), l.y.RawRowView(r)
		copy(z, l.b)
		for _, i := range set {
			for j, w := range l.w[i*l.out : (i+1)*l.out] {
				z[j] += w
			}
		}
		for j, v := range z {
			y[j] = math.Max(v, 0)
		}
	}
	return l.y
}

func (l *sparseDense) backward(dout *mat.Dense) {
	if cap(l.dz) < l.out {
		l.dz = make([]float64, l.out)
	}
	dz := l.dz[:l.out]
	for r, set := range l.sets {
		z, g := l.z.RawRowView(r), dout.RawRowView(r)
		for j, v := range z {
			if v > 0 {
				dz[j] = g[j]
			} else {
				dz[j] = 0
			}
			l.gb[j] += dz[j]
		}
		for _, i := range set {
			gw := l.gw[i*l.out : (i+1)*l.out]
			for j, v := range dz {
				gw[j] += v
			}
		}
	}
}
