package nn

import "math"

// Adam is the Adam optimiser (Kingma and Ba, 2015) with bias correction.
// For each parameter value θ with gradient g, step t does
//
//	m ← β1 m + (1-β1) g,   v ← β2 v + (1-β2) g²
//	θ ← θ - LR · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + Eps)
type Adam struct {
	LR, Beta1, Beta2, Eps float64

	ps   []*Param
	m, v [][]float64
	t    int
}

// NewAdam returns Adam over ps with learning rate lr and the usual
// β1 = 0.9, β2 = 0.999, ε = 1e-8.
func NewAdam(ps []*Param, lr float64) *Adam {
	a := &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ps: ps}
	for _, p := range ps {
		a.m = append(a.m, make([]float64, len(p.Value)))
		a.v = append(a.v, make([]float64, len(p.Value)))
	}
	return a
}

// Steps returns the number of steps taken.
func (a *Adam) Steps() int { return a.t }

// Reset forgets the moment estimates and the step count.
func (a *Adam) Reset() {
	a.t = 0
	for i := range a.m {
		clear(a.m[i])
		clear(a.v[i])
	}
}

// Step updates every parameter from its current gradient. It does not
// clear the gradients.
func (a *Adam) Step() {
	a.t++
	c1 := 1 - math.Pow(a.Beta1, float64(a.t))
	c2 := 1 - math.Pow(a.Beta2, float64(a.t))
	b1, b2 := a.Beta1, a.Beta2
	for k, p := range a.ps {
		m, v := a.m[k], a.v[k]
		for i, g := range p.Grad {
			m[i] = b1*m[i] + (1-b1)*g
			v[i] = b2*v[i] + (1-b2)*g*g
			p.Value[i] -= a.LR * (m[i] / c1) / (math.Sqrt(v[i]/c2) + a.Eps)
		}
	}
}
