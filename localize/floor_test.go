package localize

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// On a directed graph a lone infected node (no infected in-neighbour) can
// sit inside a larger weak infected component. Without the lone lift
// (InfectedThenPredicted, or a calibration by component size), a
// non-lone node of that component can rank above the lone one. The lone
// node already covers the component, so Solve's set (extend, in ranking
// order) must name it alone, as each restart's vote (extendBest, lone
// nodes first) does; extend named both before it marked the lone nodes'
// components first.
func TestFloorExtendMatchesExtendBestDirected(t *testing.T) {
	// 0 -> 1: both infected; 0 is lone, 1 is not; one weak component.
	g := graph.New(2, []graph.Edge{{From: 0, To: 1}}, []string{"a", "b"}, true, false)
	y := []float64{1, 1}
	f := &sourceFloor{lone: LoneInfected(g, y, nil), components: InfectedComponents(g, y, nil)}
	require.Equal(t, []bool{true, false}, f.lone)
	require.Equal(t, []int{0, 0}, f.components)

	scores := []float64{0.2, 0.3} // the non-lone node ranks first, both below delta
	set, ruled, _ := sourceCut{delta: 0.5, infected: 2, floor: f}.apply(scores)
	require.Equal(t, 0, ruled)
	best := f.extendBest(nil, scores)
	require.ElementsMatch(t, best, set, "Solve's floor and a restart's floor differ for the same scores")
}

// The same property on random directed graphs and scores: for a set cut
// from scores, extend (Solve) and extendBest (each restart) name the same
// nodes.
func TestFloorExtendMatchesExtendBestRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	for trial := 0; trial < 500; trial++ {
		n := 2 + rng.IntN(12)
		var edges []graph.Edge
		for u := 0; u < n; u++ {
			for v := 0; v < n; v++ {
				if u != v && rng.Float64() < 0.15 {
					edges = append(edges, graph.Edge{From: u, To: v})
				}
			}
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = itoa(i)
		}
		g := graph.New(n, edges, ids, true, false)
		y := make([]float64, n)
		scores := make([]float64, n)
		for v := range y {
			if rng.Float64() < 0.5 {
				y[v] = 1
			}
			scores[v] = rng.Float64()
		}
		f := &sourceFloor{lone: LoneInfected(g, y, nil), components: InfectedComponents(g, y, nil)}
		delta := rng.Float64()
		set, ruled, _ := sourceCut{delta: delta, infected: countInfected(y), floor: f}.apply(scores)
		best := f.extendBest(slices.Clone(set[:ruled]), scores)
		if !sameSet(set, best) {
			t.Fatalf("trial %d: n=%d edges=%v y=%v scores=%v delta=%v: extend %v, extendBest %v", trial, n, edges, y, scores, delta, set, best)
		}
	}
}

func sameSet(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Through Solve: a directed ring 0 -> 1 -> ... -> 11, two consecutive
// nodes infected, i lone and i+1 not, one weak component. The source set
// should name the lone node and nothing else from that component by the
// floor, and every node in the source set should have some restart's vote.
func TestSolveFloorDirectedLoneInBiggerComponent(t *testing.T) {
	n := 12
	var edges []graph.Edge
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		edges = append(edges, graph.Edge{From: i, To: (i + 1) % n})
		ids[i] = itoa(i)
	}
	g := graph.New(n, edges, ids, true, false)
	b := testBundleOn(t, g)
	b.Manifest.Ranking = InfectedFirst
	b.Manifest.LoneInfectedFirst = false // validation kept the lone nodes where the descent put them
	b.Manifest.Metrics = map[string]float64{LoneSourceRateMetric: 1}
	b.Manifest.SourceRule = SourceRule{}
	b.Manifest.Threshold = 1.5 // over every score: the floor alone names
	_, f, _ := testProblem(n, 2, 4)
	bad := 0
	for i := 0; i < n; i++ {
		y := make([]float64, n)
		y[i], y[(i+1)%n] = 1, 1
		res, err := Solve(t.Context(), b, f, y, DefaultOptions())
		require.NoError(t, err)
		if len(res.Sources) != 1 || res.Sources[0] != i {
			bad++
			t.Errorf("y = {%d, %d} (%d lone): sources %v (scores %.3f, %.3f), probability %.3f, %.3f",
				i, (i+1)%n, i, res.Sources, res.Scores[i], res.Scores[(i+1)%n], res.Probability[i], res.Probability[(i+1)%n])
		}
	}
	t.Logf("%d of %d observations named a redundant node", bad, n)
}

// A component node the floor names by the mean can have no restart's
// vote: each restart names its own best node of the component (see
// Result.Probability).
func TestFloorComponentNodeWithoutVote(t *testing.T) {
	// Undirected: 0-4 one infected component, 1-2-3 another.
	g := graph.New(5, []graph.Edge{{From: 0, To: 4}, {From: 1, To: 2}, {From: 2, To: 3}}, []string{"0", "1", "2", "3", "4"}, false, false)
	y := []float64{1, 1, 1, 1, 1}
	x := mat.NewDense(2, 5, []float64{
		1, 0.9, 0.0, 0.95, 0.1,
		1, 0.9, 0.95, 0.0, 0.1,
	})
	grad := mat.NewDense(2, 5, nil)
	mean := []float64{1, 0.9, 0.475, 0.475, 0.1}
	f := &sourceFloor{lone: LoneInfected(g, y, nil), components: InfectedComponents(g, y, nil)}
	cut := sourceCut{rule: SourceRule{Count: 1}, infected: 5, floor: f}
	set, ruled, th := cut.apply(mean)
	require.Equal(t, []int{0, 1}, set)
	vote := voteAt(cut, th, set[:ruled], mean, reranking{}, nil)
	vote.floor = f
	prob := namedFraction(x, grad, reranking{}, vote, nil)
	// Node 1 (mean x 0.9) has no vote, as Result.Probability says can
	// happen; what holds: every restart covers the component {1, 2, 3}
	// with one node.
	require.Zero(t, prob[1], "%v", prob)
	require.InDelta(t, 1.0, prob[1]+prob[2]+prob[3], 1e-12, "%v", prob)
}

// Four isolated infected nodes on a ring: each is lone, so each is a
// certain source where the bundle proved lone nodes sources. A count of 2
// names two, the floor the other two, and the answer is exactly right; the
// note calls it uninformative ("the source set says nothing here") and
// credits the count rule with naming 4.
func TestAnswerNoteFloorOfCertainSources(t *testing.T) {
	b := testBundle(t) // a ring of 12
	b.Manifest.Ranking = InfectedFirst
	b.Manifest.LoneInfectedFirst = true
	b.Manifest.Metrics = map[string]float64{LoneSourceRateMetric: 1}
	b.Manifest.SourceRule = SourceRule{Count: 2}
	_, f, _ := testProblem(12, 2, 4)
	y := make([]float64, 12)
	for _, v := range []int{0, 3, 6, 9} {
		y[v] = 1
	}
	res, err := Solve(t.Context(), b, f, y, DefaultOptions())
	require.NoError(t, err)
	require.ElementsMatch(t, []int{0, 3, 6, 9}, res.Sources)
	require.Equal(t, 2, res.Floor)
	note := b.Manifest.AnswerNote(4, len(res.Sources)-res.Floor, b.Manifest.SourceRule) // as cmd localize and the daemon call it
	require.NotContains(t, note, "says nothing", "every named node is a proven source")
}
