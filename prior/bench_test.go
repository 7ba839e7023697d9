package prior

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// benchSizes are the node counts of Jazz and Power Grid.
var benchSizes = []int{198, 4941}

var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"default", DefaultConfig()},
	{"paper", PaperConfig()},
}

// BenchmarkFitEpoch times one epoch over 256 source sets of 10% of the
// nodes (one b.N iteration = one epoch).
func BenchmarkFitEpoch(b *testing.B) {
	for _, n := range benchSizes {
		for _, c := range benchConfigs {
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				cfg := c.cfg
				cfg.Epochs, cfg.Patience = 1, 0
				v := NewVAE(n, cfg)
				train := uniformSets(n, 256, 0.1, rand.New(rand.NewPCG(1, 1)))
				for b.Loop() {
					if _, err := v.Fit(context.Background(), train, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTermsPred times L_pred and its gradient for 8 restarts over
// 1024 prototypes, with every entry of x in (0, 1) ("dense") or 80% of them
// clamped to 0 ("sparse"). The terms come from an untrained VAE, whose
// prototypes decode alike: the softmax is spread out, the slow case.
func BenchmarkTermsPred(b *testing.B) {
	for _, n := range benchSizes {
		for _, c := range benchConfigs {
			rng := rand.New(rand.NewPCG(1, 1))
			t := NewVAE(n, c.cfg).Terms(uniformSets(n, 100, 0.1, rng), DefaultPrototypes, rng)
			for _, sparse := range []bool{false, true} {
				x := randX(2, 8, n)
				name := "dense"
				if sparse {
					name = "sparse"
					raw := x.RawMatrix().Data
					for i := range raw {
						if rng.Float64() < 0.8 {
							raw[i] = 0
						}
					}
				}
				b.Run(fmt.Sprintf("n=%d/%s/%s", n, c.name, name), func(b *testing.B) {
					grad := mat.NewDense(8, n, nil)
					for b.Loop() {
						t.Pred(x, grad)
					}
				})
			}
		}
	}
}

// BenchmarkTerms times precomputing the terms (1024 prototypes) from a VAE
// and 1000 training sets.
func BenchmarkTerms(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d/default", n), func(b *testing.B) {
			v := NewVAE(n, DefaultConfig())
			train := uniformSets(n, 1000, 0.1, rand.New(rand.NewPCG(1, 1)))
			for b.Loop() {
				v.Terms(train, DefaultPrototypes, rand.New(rand.NewPCG(1, 2)))
			}
		})
	}
}
