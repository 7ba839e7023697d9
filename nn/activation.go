package nn

import (
	"fmt"
	"math"
)

// Activation is an element-wise nonlinearity applied after a dense layer.
type Activation int

const (
	// Identity is act(z) = z.
	Identity Activation = iota
	// ReLU is act(z) = max(0, z).
	ReLU
	// LeakyReLU is act(z) = z for z > 0 and 0.01 z otherwise.
	LeakyReLU
	// Sigmoid is act(z) = 1 / (1 + exp(-z)).
	Sigmoid
)

// leak is LeakyReLU's negative slope.
const leak = 0.01

// String returns the activation's name.
func (a Activation) String() string {
	switch a {
	case Identity:
		return "identity"
	case ReLU:
		return "relu"
	case LeakyReLU:
		return "leakyrelu"
	case Sigmoid:
		return "sigmoid"
	}
	return fmt.Sprintf("Activation(%d)", int(a))
}

func (a Activation) valid() bool { return a >= Identity && a <= Sigmoid }

// apply writes act(z) into y (which may alias z).
func (a Activation) apply(y, z []float64) {
	switch a {
	case Identity:
		copy(y, z)
	case ReLU:
		for i, v := range z {
			y[i] = math.Max(v, 0)
		}
	case LeakyReLU:
		// A table lookup, not a branch: signs of pre-activations are
		// unpredictable, and a mispredicted branch per element was most
		// of the cost of a narrow layer.
		slope := [2]float64{1, leak}
		for i, v := range z {
			y[i] = v * slope[negative(v)]
		}
	case Sigmoid:
		for i, v := range z {
			y[i] = Logistic(v)
		}
	default:
		panic(fmt.Sprintf("nn: unknown activation %d", int(a)))
	}
}

// backward writes g ⊙ act'(z) into dz, using y = act(z) where that is
// cheaper. dz may alias g.
func (a Activation) backward(dz, g, z, y []float64) {
	switch a {
	case Identity:
		copy(dz, g)
	case ReLU:
		for i, v := range z {
			if v > 0 {
				dz[i] = g[i]
			} else {
				dz[i] = 0
			}
		}
	case LeakyReLU:
		slope := [2]float64{1, leak}
		for i, v := range z {
			dz[i] = g[i] * slope[negative(v)]
		}
	case Sigmoid:
		for i, s := range y {
			dz[i] = g[i] * s * (1 - s)
		}
	default:
		panic(fmt.Sprintf("nn: unknown activation %d", int(a)))
	}
}

// Logistic returns the sigmoid 1 / (1 + exp(-x)), computed without
// overflow for large |x|. (It cannot be called Sigmoid: that name is the
// Activation constant.)
func Logistic(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// Softplus returns log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which
// neither overflows for large x nor loses precision for very negative x.
func Softplus(x float64) float64 {
	return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x)))
}

// LogSumExp returns log sum_i exp(v_i) = m + log sum_i exp(v_i - m) with
// m = max_i v_i, so it does not overflow. It returns -Inf for an empty or
// all -Inf v.
func LogSumExp(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		if x > m {
			m = x
		}
	}
	if math.IsInf(m, -1) {
		return m
	}
	if math.IsInf(m, 1) {
		return m
	}
	var s float64
	for _, x := range v {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// negative is 0 when v > 0 and 1 otherwise (NaN included), without a branch.
func negative(v float64) int {
	k := 0
	if !(v > 0) {
		k = 1
	}
	return k
}
