package eval

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChanceScore(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		chances              [][]float64
		sources              [][]int
		brier, ece           float64
		expected, trueCounts float64
	}{
		{
			name:    "a perfect forecast",
			chances: [][]float64{{1, 0, 0, 0}, {0, 0, 1, 1}},
			sources: [][]int{{0}, {2, 3}},
			brier:   0, ece: 0, expected: 1.5, trueCounts: 1.5,
		},
		{
			// Every node at the share of sources: calibrated, yet a
			// Brier score of p(1-p).
			name:    "the base rate",
			chances: [][]float64{{0.25, 0.25, 0.25, 0.25}},
			sources: [][]int{{1}},
			brier:   0.25 * 0.75, ece: 0, expected: 1, trueCounts: 1,
		},
		{
			// Bins [0.9, 1] (one node, no source) and [0, 0.1) (three
			// nodes, one source): |0.9-0|/4 + |0-1|/4.
			name:    "confident and wrong",
			chances: [][]float64{{0.9, 0, 0, 0}},
			sources: [][]int{{1}},
			brier:   (0.81 + 1) / 4, ece: 0.9/4 + 1.0/4, expected: 0.9, trueCounts: 1,
		},
		{
			// Bins [0, 0.1) (0.05, no source) and [0.1, 0.2) (0.15, a
			// source), by hand: ECE |0.05-0|/2 + |0.15-1|/2 = 0.45 (one
			// bin would be |0.2-1|/2 = 0.4); Brier (0.05^2 + 0.85^2)/2.
			name:    "the lowest tenth is a bin of its own",
			chances: [][]float64{{0.05, 0.15}},
			sources: [][]int{{1}},
			brier:   (0.0025 + 0.7225) / 2, ece: 0.45, expected: 0.2, trueCounts: 1,
		},
		{
			name:    "a repeated source counts once",
			chances: [][]float64{{0.5, 0.5}},
			sources: [][]int{{0, 0}},
			brier:   0.25, ece: 0, expected: 1, trueCounts: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s ChanceScore
			for i := range tc.chances {
				s.Add(tc.chances[i], tc.sources[i])
			}
			require.InDelta(t, tc.brier, s.Brier(), 1e-12)
			require.InDelta(t, tc.ece, s.ECE(), 1e-12)
			e, n := s.Expected()
			require.InDelta(t, tc.expected, e, 1e-12)
			require.InDelta(t, tc.trueCounts, n, 1e-12)
		})
	}
}

// The sums Add keeps give what the definitions give, node by node.
func TestChanceScoreMatchesTheDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s ChanceScore
	var sq, nodes float64
	var binN, binP, binHit [chanceBins]float64
	for range 20 {
		n := 5 + rng.IntN(30)
		chance := make([]float64, n)
		for v := range chance {
			chance[v] = rng.Float64()
		}
		chance[0] = 1 // the closed last bin
		var sources []int
		hit := make([]bool, n)
		for v := range n {
			if rng.Float64() < chance[v] {
				sources = append(sources, v)
				hit[v] = true
			}
		}
		s.Add(chance, sources)
		for v, p := range chance {
			h := 0.0
			if hit[v] {
				h = 1
			}
			sq += (p - h) * (p - h)
			nodes++
			b := min(int(math.Floor(p*10)), 9)
			binN[b]++
			binP[b] += p
			binHit[b] += h
		}
	}
	var ece float64
	for b := range binN {
		if binN[b] > 0 {
			ece += binN[b] / nodes * math.Abs(binP[b]/binN[b]-binHit[b]/binN[b])
		}
	}
	require.InDelta(t, sq/nodes, s.Brier(), 1e-12)
	require.InDelta(t, ece, s.ECE(), 1e-12)
}

func TestChanceScoreEmptyAndBadSources(t *testing.T) {
	var s ChanceScore
	require.True(t, math.IsNaN(s.Brier()))
	require.True(t, math.IsNaN(s.ECE()))
	e, n := s.Expected()
	require.True(t, math.IsNaN(e) && math.IsNaN(n))
	require.PanicsWithValue(t, "eval: source 3 out of range for 3 nodes", func() { s.Add([]float64{0, 0, 0}, []int{3}) })
}
