package prior

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/nn"
)

func randDense(rng *rand.Rand, r, c int, scale float64) *mat.Dense {
	m := mat.NewDense(r, c, nil)
	for i := range r {
		for j := range c {
			m.Set(i, j, scale*rng.NormFloat64())
		}
	}
	return m
}

func randVec(rng *rand.Rand, k int, scale float64) []float64 {
	v := make([]float64, k)
	for i := range v {
		v[i] = scale * rng.NormFloat64()
	}
	return v
}

func randTerms(seed uint64, protos, hidden, n int) *Terms {
	return scaledTerms(seed, protos, hidden, n, 1)
}

// scaledTerms draws random terms whose logits grow with scale: a large
// scale makes the prototype softmax peaked, a small one flat.
func scaledTerms(seed uint64, protos, hidden, n int, scale float64) *Terms {
	rng := rand.New(rand.NewPCG(seed, 1))
	return newTerms(randDense(rng, protos, hidden, scale), randDense(rng, hidden, n, 1), randVec(rng, n, 1), randVec(rng, n, 2))
}

// randX is a batch in (0,1), away from the clamp bounds.
func randX(seed uint64, rows, n int) *mat.Dense {
	rng := rand.New(rand.NewPCG(seed, 2))
	x := mat.NewDense(rows, n, nil)
	for i := range rows {
		for j := range n {
			x.Set(i, j, 0.05+0.9*rng.Float64())
		}
	}
	return x
}

func logSigmoid(v float64) float64 { return math.Log(1 / (1 + math.Exp(-v))) }

// denseTerms is the textbook computation: the full N x n matrices A = log d
// and B = log(1-d) of the design, no low-rank identity.
func denseTerms(t *Terms) (a, b0 []float64, A, B *mat.Dense) {
	var D mat.Dense
	D.Mul(t.h, t.w)
	A = mat.NewDense(t.protos, t.n, nil)
	B = mat.NewDense(t.protos, t.n, nil)
	for j := range t.protos {
		for i := range t.n {
			l := D.At(j, i) + t.b[i]
			A.Set(j, i, logSigmoid(l))
			B.Set(j, i, logSigmoid(-l))
		}
	}
	a, b0 = make([]float64, t.n), make([]float64, t.n)
	for i, l := range t.barLogit {
		a[i], b0[i] = logSigmoid(l), logSigmoid(-l)
	}
	return a, b0, A, B
}

func TestTermsMatchDenseComputation(t *testing.T) {
	for _, scale := range []float64{0.01, 1, 20} {
		t.Run(fmt.Sprint("scale ", scale), func(t *testing.T) { testMatchDense(t, scaledTerms(1, 6, 4, 9, scale)) })
	}
}

func testMatchDense(t *testing.T, tm *Terms) {
	testMatchDenseAt(t, tm, randX(3, 5, 9))
	// Mostly zeros, as clamping leaves them: Pred takes its sparse path.
	x := randX(3, 5, 9)
	for r := range 5 {
		for i := range 9 {
			if (r+i)%4 != 0 {
				x.Set(r, i, 0)
			}
		}
	}
	testMatchDenseAt(t, tm, x)
}

func testMatchDenseAt(t *testing.T, tm *Terms, x *mat.Dense) {
	a, b0, A, B := denseTerms(tm)
	gInit, gPred := mat.NewDense(5, 9, nil), mat.NewDense(5, 9, nil)
	init, pred := tm.Init(x, gInit), tm.Pred(x, gPred)
	for r := range 5 {
		var li float64
		for i := range 9 {
			li -= x.At(r, i)*a[i] + (1-x.At(r, i))*b0[i]
			require.InDelta(t, -(a[i] - b0[i]), gInit.At(r, i), 1e-12)
		}
		require.InDelta(t, li, init[r], 1e-9)

		e := make([]float64, tm.protos)
		m := math.Inf(-1)
		for j := range e {
			for i := range 9 {
				e[j] += x.At(r, i)*A.At(j, i) + (1-x.At(r, i))*B.At(j, i)
			}
			m = math.Max(m, e[j])
		}
		var z float64
		for _, v := range e {
			z += math.Exp(v - m)
		}
		require.InDelta(t, -(m + math.Log(z)), pred[r], 1e-9)
		// grad = -sum_j softmax_j (A_j - B_j)
		for i := range 9 {
			var g float64
			for j, v := range e {
				g -= math.Exp(v-m) / z * (A.At(j, i) - B.At(j, i))
			}
			require.InDelta(t, g, gPred.At(r, i), 1e-9)
		}
	}
}

func TestTermsGradientCheck(t *testing.T) {
	tm, peaked := randTerms(5, 12, 5, 11), scaledTerms(5, 12, 5, 11, 5)
	for _, tc := range []struct {
		name string
		f    func(x, grad *mat.Dense) []float64
	}{
		{"init", tm.Init},
		{"pred", tm.Pred},
		{"pred peaked", peaked.Pred},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := randX(7, 3, 11)
			grad := mat.NewDense(3, 11, nil)
			loss := tc.f(x, grad)
			// The rows are independent, so the sum's gradient is the batch's.
			sum := func() float64 {
				var s float64
				for _, v := range tc.f(x, nil) {
					s += v
				}
				return s
			}
			var s float64
			for _, v := range loss {
				s += v
			}
			require.InDelta(t, s, sum(), 1e-12, "grad nil must not change the loss")
			worst, at := nn.CheckGradient(sum, x.RawMatrix().Data, grad.RawMatrix().Data, 1e-5)
			require.Less(t, worst, 1e-6, "x[%d]", at)
		})
	}
}

func TestTermsStridedBatch(t *testing.T) {
	tm := randTerms(2, 7, 3, 8)
	for _, zeros := range []bool{false, true} {
		big := randX(9, 6, 12)
		if zeros { // the sparse path of Pred
			raw := big.RawMatrix().Data
			for i := range raw {
				if i%3 != 0 {
					raw[i] = 0
				}
			}
		}
		view := big.Slice(1, 4, 2, 10).(*mat.Dense)
		var dense mat.Dense
		dense.CloneFrom(view)
		gBig := mat.NewDense(6, 12, nil)
		gView := gBig.Slice(1, 4, 2, 10).(*mat.Dense)
		gDense := mat.NewDense(3, 8, nil)
		require.InDeltaSlice(t, tm.Pred(&dense, gDense), tm.Pred(view, gView), 1e-12)
		require.True(t, mat.EqualApprox(gDense, gView, 1e-12))
		require.Equal(t, tm.Init(&dense, gDense), tm.Init(view, gView))
		require.True(t, mat.Equal(gDense, gView))
		require.Zero(t, gBig.At(0, 0), "writes outside the view")
	}
}

func TestTermsConcurrentUse(t *testing.T) {
	tm := randTerms(3, 20, 6, 15)
	want := make([][]float64, 4)
	for k := range want {
		want[k] = tm.Pred(randX(uint64(k), k+1, 15), nil)
	}
	var wg sync.WaitGroup
	got := make([][]float64, 4)
	for k := range got {
		wg.Go(func() {
			for range 50 {
				got[k] = tm.Pred(randX(uint64(k), k+1, 15), nil)
			}
		})
	}
	wg.Wait()
	require.Equal(t, want, got)
}

func TestTermsShapePanics(t *testing.T) {
	tm := randTerms(3, 4, 2, 5)
	require.PanicsWithValue(t, "prior: x has 4 columns, terms have 5 nodes", func() { tm.Pred(mat.NewDense(2, 4, nil), nil) })
	require.PanicsWithValue(t, "prior: grad is 1x5, x is 2x5", func() { tm.Init(mat.NewDense(2, 5, nil), mat.NewDense(1, 5, nil)) })
}

func TestTermsMarshalRoundTrip(t *testing.T) {
	tm := randTerms(4, 9, 4, 13)
	data, err := tm.MarshalBinary()
	require.NoError(t, err)
	var back Terms
	require.NoError(t, back.UnmarshalBinary(data))
	require.Equal(t, 13, back.Nodes())
	require.Equal(t, 9, back.Prototypes())
	require.Equal(t, 4, back.Hidden())
	x := randX(1, 3, 13)
	g1, g2 := mat.NewDense(3, 13, nil), mat.NewDense(3, 13, nil)
	require.Equal(t, tm.Pred(x, g1), back.Pred(x, g2))
	require.True(t, mat.Equal(g1, g2))
	require.Equal(t, tm.Init(x, g1), back.Init(x, g2))
	require.True(t, mat.Equal(g1, g2))
}

// reseal recomputes the checksum after a deliberate edit, so the decoder's
// other checks are reached.
func reseal(data []byte) []byte {
	body := data[:len(data)-4]
	binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.ChecksumIEEE(body))
	return data
}

func TestTermsUnmarshalRejectsBadData(t *testing.T) {
	tm := randTerms(4, 3, 2, 5)
	good, err := tm.MarshalBinary()
	require.NoError(t, err)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"empty", nil, ErrFormat, "not a terms encoding"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), ErrFormat, "not a terms encoding"},
		{"version", edit(func(b []byte) []byte { b[4] = 9; return reseal(b) }), ErrVersion, "version 9, want 1"},
		{"flipped bit", edit(func(b []byte) []byte { b[60] ^= 1; return b }), ErrChecksum, "checksum"},
		{"truncated", edit(func(b []byte) []byte { return reseal(b[:len(b)-12]) }), ErrFormat, "does not match sizes"},
		{"huge size", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return reseal(b) }), ErrFormat, "nodes = 1099511627776 out of range"},
		{"zero prototypes", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24:], 0); return reseal(b) }), ErrFormat, "prototypes = 0 out of range"},
		{"nan", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[32:], math.Float64bits(math.NaN()))
			return reseal(b)
		}), ErrFormat, "H[0] is not finite"},
		{"finite but huge", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[32:], math.Float64bits(-1e300))
			return reseal(b)
		}), ErrFormat, "H[0] = -1e+300 is beyond ±1e+30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var back Terms
			err := back.UnmarshalBinary(tc.data)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}
