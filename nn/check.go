package nn

import "math"

// gradFloor keeps entries whose true gradient is ~0 from reporting
// finite-difference round-off as a large relative error.
const gradFloor = 1e-6

// CheckGradient compares an analytic gradient with central differences.
// f evaluates the loss at the current value; grad holds the analytic
// dL/dvalue computed beforehand. For each i it evaluates
//
//	n_i = (f(value + eps e_i) - f(value - eps e_i)) / (2 eps)
//
// and returns the largest relative error |g_i - n_i| / max(|g_i|, |n_i|, 1e-6)
// and the index where it occurs (-1 for an empty value). value is restored.
func CheckGradient(f func() float64, value, grad []float64, eps float64) (maxRelErr float64, worst int) {
	if len(value) != len(grad) {
		panic("nn: CheckGradient value and grad lengths differ")
	}
	worst = -1
	for i := range value {
		v := value[i]
		value[i] = v + eps
		fp := f()
		value[i] = v - eps
		fm := f()
		value[i] = v
		n := (fp - fm) / (2 * eps)
		den := math.Max(math.Max(math.Abs(n), math.Abs(grad[i])), gradFloor)
		e := math.Abs(n-grad[i]) / den
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if worst < 0 || e > maxRelErr {
			maxRelErr, worst = e, i
		}
	}
	return maxRelErr, worst
}
