package diffusion

import "fmt"

// X writes the source indicator x (x_v = 1 for sources, 0 otherwise) into
// dst and returns it; nil dst allocates a vector of length c.N.
func (c Cascade) X(dst []float64) []float64 { return indicator(dst, c.N, c.Sources, "X") }

// Y writes the observation y (y_v = 1 for nodes infected at the snapshot,
// 0 otherwise) into dst and returns it; nil dst allocates one of length c.N.
func (c Cascade) Y(dst []float64) []float64 { return indicator(dst, c.N, c.Infected, "Y") }

func indicator(dst []float64, n int, on []int, name string) []float64 {
	if dst == nil {
		dst = make([]float64, n)
	} else if n != 0 && len(dst) != n {
		panic(fmt.Sprintf("diffusion: %s: dst length %d, want %d", name, len(dst), n))
	}
	for i := range dst {
		dst[i] = 0
	}
	for _, v := range on {
		if v < 0 || v >= len(dst) {
			panic(fmt.Sprintf("diffusion: %s: node %d out of range for length %d", name, v, len(dst)))
		}
		dst[v] = 1
	}
	return dst
}
