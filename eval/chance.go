package eval

import (
	"fmt"
	"math"
)

// chanceBins is how many equal-width bins of the chance ChanceScore.ECE
// groups the nodes in: tenths, as the README's measurements were made.
const chanceBins = 10

// ChanceScore measures per-node chances of being a source against the true
// sources, over any number of cascades: how a bundle's source chance
// (localize.Result.Chance), or any per-node probability, would fare read
// as one. The zero value is empty and ready to use.
type ChanceScore struct {
	nodes     float64 // (node, cascade) pairs added
	squared   float64 // sum of (chance_v - [v is a source])^2
	sumChance float64
	sources   float64
	cascades  int
	// bins sum each bin's chances and sources; ECE needs no count of
	// its nodes, which cancels out.
	bins [chanceBins]struct{ chance, sources float64 }
}

// Add adds one cascade: chance holds every node's chance, sources the
// distinct true sources (a repeated one counts once). Add panics if a
// source is not a node of chance.
func (s *ChanceScore) Add(chance []float64, sources []int) {
	for _, p := range chance {
		// As if no node were a source; the sources are corrected below:
		// (p-1)^2 = p^2 + (1 - 2p).
		s.squared += p * p
		s.sumChance += p
		s.bins[chanceBin(p)].chance += p
	}
	seen := make(map[int]struct{}, len(sources))
	for _, v := range sources {
		if v < 0 || v >= len(chance) {
			panic(fmt.Sprintf("eval: source %d out of range for %d nodes", v, len(chance)))
		}
		if _, dup := seen[v]; dup {
			continue
		}
		seen[v] = struct{}{}
		s.squared += 1 - 2*chance[v]
		s.bins[chanceBin(chance[v])].sources++
	}
	s.nodes += float64(len(chance))
	s.sources += float64(len(seen))
	s.cascades++
}

// chanceBin is the bin of chance p: [i/10, (i+1)/10), the last one closed.
func chanceBin(p float64) int {
	return min(max(int(p*chanceBins), 0), chanceBins-1)
}

// Brier returns the Brier score, the mean over every node of every cascade
// of (chance_v - [v is a source])^2: 0 is a perfect forecast; NaN when
// nothing was added.
func (s *ChanceScore) Brier() float64 {
	if s.nodes == 0 {
		return math.NaN()
	}
	return s.squared / s.nodes
}

// ECE returns the expected calibration error: with the nodes grouped by
// their chance in tenths, sum_b (n_b / n) |mean chance_b - share of
// sources_b|, 0 where every group's share of sources is its mean chance;
// NaN when nothing was added.
func (s *ChanceScore) ECE() float64 {
	if s.nodes == 0 {
		return math.NaN()
	}
	var e float64
	for _, b := range s.bins {
		e += math.Abs(b.chance-b.sources) / s.nodes // (n_b/n) |chance_b/n_b - sources_b/n_b|
	}
	return e
}

// Expected returns, per cascade, the mean sum of the chances (the source
// count they expect) and the mean true source count; NaN when nothing was
// added.
func (s *ChanceScore) Expected() (chances, sources float64) {
	if s.cascades == 0 {
		return math.NaN(), math.NaN()
	}
	return s.sumChance / float64(s.cascades), s.sources / float64(s.cascades)
}
