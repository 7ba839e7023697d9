package diffusion

import (
	"math"
	"math/rand/v2"
	"slices"
)

// sample draws one cascade's source set (unsorted) into s.perm's storage;
// the result is valid until the next call.
func (s *sim) sample(rng *rand.Rand) []int {
	k := s.cfg.Sources.count(s.n, rng.IntN)
	switch s.cfg.Pattern {
	case Degree:
		return s.sampleDegree(rng, k)
	case Cluster:
		return s.sampleCluster(rng, k)
	default:
		return s.sampleUniform(rng, k)
	}
}

// sampleUniform is a partial Fisher-Yates shuffle of a fresh permutation.
func (s *sim) sampleUniform(rng *rand.Rand, k int) []int {
	s.perm = s.perm[:0]
	for i := range s.n {
		s.perm = append(s.perm, i)
	}
	for i := range k {
		j := i + rng.IntN(s.n-i)
		s.perm[i], s.perm[j] = s.perm[j], s.perm[i]
	}
	return s.perm[:k]
}

// sampleDegree draws k nodes without replacement with probability
// proportional to degree (in + out for a directed graph), by the
// Efraimidis-Spirakis method: the k smallest keys E_v / deg(v) with
// E_v ~ Exp(1). Isolated nodes get keys above every other node's, random
// among themselves, so they are chosen only when fewer than k nodes have
// edges.
func (s *sim) sampleDegree(rng *rand.Rand, k int) []int {
	s.perm = s.perm[:0]
	s.keys = s.keys[:0]
	for v := range s.n {
		d := s.g.Degree(v)
		if s.g.Directed() {
			d += s.g.InDegree(v)
		}
		var key float64
		e := rng.ExpFloat64()
		if d > 0 {
			key = e / float64(d)
		} else {
			// Random order among isolated nodes, after every other node.
			key = math.MaxFloat64 * (0.5 + 0.5*rng.Float64())
		}
		s.perm = append(s.perm, v)
		s.keys = append(s.keys, key)
	}
	keys := s.keys
	slices.SortFunc(s.perm, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return a - b
	})
	return s.perm[:k]
}

// sampleCluster takes a BFS ball around a uniformly drawn centre: whole
// distance layers while they fit, then a uniform subset of the next layer,
// so the ball's edge does not favour low node indices. When the centre's
// reach is smaller than k, it continues from a fresh centre among the
// nodes not yet taken.
func (s *sim) sampleCluster(rng *rand.Rand, k int) []int {
	if len(s.dist) != s.n {
		s.dist = make([]int, s.n)
	}
	for i := range s.dist {
		s.dist[i] = -1
	}
	s.perm = s.perm[:0] // the chosen nodes
	for len(s.perm) < k {
		// A fresh centre among untouched nodes: nodes with dist -1.
		var centre int
		for {
			centre = rng.IntN(s.n)
			if s.dist[centre] == -1 {
				break
			}
		}
		s.dist[centre] = 0
		layer := append(s.queue[:0], centre)
		for len(layer) > 0 && len(s.perm) < k {
			if room := k - len(s.perm); len(layer) > room {
				rng.Shuffle(len(layer), func(i, j int) { layer[i], layer[j] = layer[j], layer[i] })
				layer = layer[:room]
			}
			s.perm = append(s.perm, layer...)
			if len(s.perm) == k {
				break
			}
			// Expand the whole layer; s.next holds the next one.
			nextLayer := s.next[:0]
			for _, u := range layer {
				nbr, _ := s.g.Out(u)
				for _, v := range nbr {
					if s.dist[v] == -1 {
						s.dist[v] = s.dist[u] + 1
						nextLayer = append(nextLayer, v)
					}
				}
			}
			s.queue, s.next = nextLayer, layer[:0]
			layer = nextLayer
		}
	}
	return s.perm
}
