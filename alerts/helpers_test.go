package alerts

import (
	"math"
	"math/rand/v2"
)

func nan() float64 { return math.NaN() }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }
