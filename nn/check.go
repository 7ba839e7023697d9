package nn

import "math"

// CheckGradient compares an analytic gradient with central differences.
// f evaluates the loss at the current value; grad holds the analytic
// dL/dvalue computed beforehand. For each i it evaluates
//
//	n_i = (f(value + eps e_i) - f(value - eps e_i)) / (2 eps)
//
// and returns the largest relative error
//
//	|g_i - n_i| / max(|g_i|, |n_i|, 1e-3 s, 1e-8),   s = max_j max(|g_j|, |n_j|)
//
// and the index where it occurs (-1 for an empty value). The floor 1e-3 s
// judges entries a thousand times smaller than the largest against the
// largest: central differences carry round-off of order |f| 1e-16 / eps,
// which would otherwise read as a large relative error on near-zero
// entries. value is restored.
func CheckGradient(f func() float64, value, grad []float64, eps float64) (maxRelErr float64, worst int) {
	if len(value) != len(grad) {
		panic("nn: CheckGradient value and grad lengths differ")
	}
	num := make([]float64, len(value))
	var scale float64
	for i := range value {
		v := value[i]
		value[i] = v + eps
		fp := f()
		value[i] = v - eps
		fm := f()
		value[i] = v
		num[i] = (fp - fm) / (2 * eps)
		scale = math.Max(scale, math.Max(math.Abs(num[i]), math.Abs(grad[i])))
	}
	floor := math.Max(1e-3*scale, 1e-8)
	worst = -1
	for i, n := range num {
		den := math.Max(math.Max(math.Abs(n), math.Abs(grad[i])), floor)
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
