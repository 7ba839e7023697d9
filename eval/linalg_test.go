package eval

import "gonum.org/v1/gonum/mat"

// symSmallest returns the smallest eigenvalue of a small dense symmetric
// matrix (test reference only; the methods never go dense).
func symSmallest(a [][]float64) float64 {
	m := len(a)
	s := mat.NewSymDense(m, nil)
	for i := range a {
		for j := i; j < m; j++ {
			s.SetSym(i, j, a[i][j])
		}
	}
	var es mat.EigenSym
	if !es.Factorize(s, false) {
		panic("eigen failed")
	}
	return es.Values(nil)[0]
}
