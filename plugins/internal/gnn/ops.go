package gnn

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// Grow returns s with length n, reusing its storage when it can.
func Grow(s []float64, n int) []float64 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]float64, n)
}

// Sigmoid is 1 / (1 + exp(-z)) without overflow.
func Sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// Contiguous copies the rows of m (which may be a strided view) into a
// contiguous slice of length r*c, reusing dst.
func Contiguous(dst []float64, m *mat.Dense) []float64 {
	r, c := m.Dims()
	dst = Grow(dst, r*c)
	raw := m.RawMatrix()
	for i := 0; i < r; i++ {
		copy(dst[i*c:(i+1)*c], raw.Data[i*raw.Stride:i*raw.Stride+c])
	}
	return dst
}
