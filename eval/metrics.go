package eval

import (
	"math"
	"sort"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// Metrics are one cascade's scores. AUC is NaN when undefined (no node or
// every node is a source).
type Metrics struct {
	Precision, Recall, F1, AUC, TopK, ErrorDistance float64
	// Empty reports that the prediction named no source; ErrorDistance then
	// holds the penalty described in the package documentation.
	Empty bool
}

// PRF returns precision, recall and F1 of predicted against truth. Indices
// may repeat; each node counts once. An empty prediction has precision 0
// (not 1) and F1 0; an empty truth has recall 0.
func PRF(truth, predicted []int) (precision, recall, f1 float64) {
	nt, np, hit := countOverlap(truth, predicted)
	if np > 0 {
		precision = float64(hit) / float64(np)
	}
	if nt > 0 {
		recall = float64(hit) / float64(nt)
	}
	if precision+recall > 0 {
		f1 = 2 * precision * recall / (precision + recall)
	}
	return precision, recall, f1
}

// countOverlap returns the distinct sizes of a and b and of their
// intersection. Sets here are small, so a map is cheaper than a mask of n.
func countOverlap(a, b []int) (na, nb, both int) {
	in := make(map[int]bool, len(a))
	for _, v := range a {
		in[v] = false
	}
	seen := make(map[int]struct{}, len(b))
	for _, v := range b {
		if _, dup := seen[v]; dup {
			continue
		}
		seen[v] = struct{}{}
		if _, ok := in[v]; ok {
			both++
		}
	}
	return len(in), len(seen), both
}

// AUC returns the ROC-AUC of scores for separating the positive nodes from
// the rest: the Mann-Whitney statistic with tied scores given their average
// rank (localize.ROCAUC, which Train also uses to choose a ranking). It
// returns NaN when there are no positives or no negatives. AUC panics if
// the lengths differ.
func AUC(scores []float64, positive []bool) float64 {
	return localize.ROCAUC(scores, positive)
}

// TopK returns the fraction of truth found among the k = len(truth) highest
// scores, with ties at the k-th score broken in expectation (see the package
// documentation). It returns NaN for an empty truth.
func TopK(scores []float64, truth []int) float64 {
	k := len(truth)
	if k == 0 {
		return math.NaN()
	}
	if k > len(scores) {
		k = len(scores)
	}
	sorted := append([]float64(nil), scores...)
	sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
	t := sorted[k-1]
	above, tied := 0, 0
	for _, s := range scores {
		switch {
		case s > t:
			above++
		case s == t:
			tied++
		}
	}
	var posAbove, posTied float64
	for _, i := range truth {
		switch {
		case scores[i] > t:
			posAbove++
		case scores[i] == t:
			posTied++
		}
	}
	hits := posAbove + float64(k-above)*posTied/float64(tied)
	return hits / float64(len(truth))
}

// ErrorDistance returns the mean over truth of the hop distance from the
// nearest predicted node, with the penalty 1 + ecc(s) for a true source s
// that no predicted node reaches (see the package documentation). Hops
// follow arcs either way: on a directed graph the distance is that of the
// spread's footprint, ignoring direction; on an undirected graph it is the
// plain hop distance. dist is scratch of length g.N() or nil. It returns
// NaN for an empty truth.
func ErrorDistance(g *graph.Graph, truth, predicted []int, dist []int) float64 {
	if len(truth) == 0 {
		return math.NaN()
	}
	var queue []int
	if len(predicted) > 0 {
		dist, queue = footprintBFS(g, predicted, dist, queue)
	}
	var sum float64
	var own []int
	for _, s := range truth {
		if len(predicted) > 0 && dist[s] >= 0 {
			sum += float64(dist[s])
			continue
		}
		own, queue = footprintBFS(g, []int{s}, own, queue)
		ecc := 0
		for _, d := range own {
			ecc = max(ecc, d)
		}
		sum += float64(1 + ecc)
	}
	return sum / float64(len(truth))
}

// footprintBFS returns hop distances from the nearest of sources with
// every arc taken both ways, -1 where none reaches: g.BFS on an
// undirected graph, whose arcs already go both ways. dist and queue are
// reused when large enough.
func footprintBFS(g *graph.Graph, sources, dist, queue []int) ([]int, []int) {
	if !g.Directed() {
		return g.BFS(sources, dist), queue
	}
	n := g.N()
	if len(dist) != n {
		dist = make([]int, n)
	}
	for i := range dist {
		dist[i] = -1
	}
	queue = queue[:0]
	for _, s := range sources {
		if dist[s] == -1 {
			dist[s] = 0
			queue = append(queue, s)
		}
	}
	outOff, outTo, _ := g.CSR()
	inOff, inFrom, _ := g.InCSR()
	for head := 0; head < len(queue); head++ {
		u := queue[head]
		for _, adj := range [2][]int{outTo[outOff[u]:outOff[u+1]], inFrom[inOff[u]:inOff[u+1]]} {
			for _, v := range adj {
				if dist[v] == -1 {
					dist[v] = dist[u] + 1
					queue = append(queue, v)
				}
			}
		}
	}
	return dist, queue
}

// Score computes all metrics of one prediction against the true sources.
// scores must have length g.N().
func Score(g *graph.Graph, truth []int, p Prediction) Metrics {
	var m Metrics
	m.Precision, m.Recall, m.F1 = PRF(truth, p.Sources)
	positive := make([]bool, g.N())
	for _, s := range truth {
		positive[s] = true
	}
	m.AUC = AUC(p.Scores, positive)
	m.TopK = TopK(p.Scores, truth)
	m.ErrorDistance = ErrorDistance(g, truth, p.Sources, nil)
	m.Empty = len(p.Sources) == 0
	return m
}

// Stat summarises one metric over many cascades.
type Stat struct {
	Mean float64 `json:"mean"`
	// SD is the sample standard deviation (0 with fewer than two values).
	SD float64 `json:"sd"`
	// N counts the defined values that entered Mean and SD.
	N int `json:"n"`
	// Undefined counts the NaN values left out.
	Undefined int `json:"undefined,omitempty"`
}

// Summarize returns the mean and sample standard deviation of the defined
// (non-NaN) values and counts the rest. With no defined value Mean and SD
// are NaN.
func Summarize(values []float64) Stat {
	var st Stat
	var sum float64
	for _, v := range values {
		if math.IsNaN(v) {
			st.Undefined++
			continue
		}
		st.N++
		sum += v
	}
	if st.N == 0 {
		st.Mean, st.SD = math.NaN(), math.NaN()
		return st
	}
	st.Mean = sum / float64(st.N)
	if st.N > 1 {
		var ss float64
		for _, v := range values {
			if !math.IsNaN(v) {
				d := v - st.Mean
				ss += d * d
			}
		}
		st.SD = math.Sqrt(ss / float64(st.N-1))
	}
	return st
}
