package localize

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

func TestInfectedComponentSizes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		directed bool
		edges    []graph.Edge
		y        []float64
		want     []int
	}{
		{"undirected path: a pair, two lone nodes",
			false, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}, {From: 3, To: 4}, {From: 4, To: 5}},
			[]float64{1, 1, 0, 1, 0, 1},
			[]int{2, 2, 0, 1, 0, 1}},
		// 0 -> 1 <- 2: weakly connected, so one component of three
		// although 0 and 2 have no infected in-neighbour.
		{"directed: arcs either way",
			true, []graph.Edge{{From: 0, To: 1}, {From: 2, To: 1}, {From: 3, To: 4}},
			[]float64{1, 1, 1, 1, 0, 0},
			[]int{3, 3, 3, 1, 0, 0}},
		{"nothing infected", false, []graph.Edge{{From: 0, To: 1}}, []float64{0, 0}, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New(len(tc.y), tc.edges, nil, tc.directed, false)
			stale := []int{7, 7, 7, 7, 7, 7, 7, 7}
			require.Equal(t, tc.want, InfectedComponentSizes(g, tc.y, stale), "the destination is reused without stale values")
		})
	}
	require.PanicsWithValue(t, "localize: InfectedComponentSizes: 1 observations for 2 nodes", func() {
		InfectedComponentSizes(graph.New(2, nil, nil, false, false), []float64{1}, nil)
	})
}

func TestIsotonic(t *testing.T) {
	pts := func(scores []float64, sources ...bool) []calibrationPoint {
		out := make([]calibrationPoint, len(scores))
		for i := range scores {
			out[i] = calibrationPoint{score: scores[i], source: sources[i]}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		pts  []calibrationPoint
		want CalibrationSteps
	}{
		{"a violation pooled",
			pts([]float64{0.4, 0.1, 0.3, 0.2}, true, false, false, true),
			CalibrationSteps{Scores: []float64{0.1, 0.3, 0.4}, Probabilities: []float64{0, 0.5, 1}}},
		{"equal scores one step",
			pts([]float64{0.5, 0.5, 0.9}, true, false, true),
			CalibrationSteps{Scores: []float64{0.5, 0.9}, Probabilities: []float64{0.5, 1}}},
		{"decreasing pooled to one step",
			pts([]float64{0.1, 0.2, 0.3}, true, true, false),
			CalibrationSteps{Scores: []float64{0.3}, Probabilities: []float64{2.0 / 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := isotonic(tc.pts)
			require.Equal(t, tc.want.Scores, got.Scores)
			require.InDeltaSlice(t, tc.want.Probabilities, got.Probabilities, 1e-15)
			c := &Calibration{Classes: []CalibrationSteps{got}}
			require.NoError(t, c.check())
		})
	}
	st := CalibrationSteps{Scores: []float64{0.1, 0.3}, Probabilities: []float64{0.2, 0.6}}
	for s, want := range map[float64]float64{0: 0.2, 0.1: 0.2, 0.2: 0.6, 0.3: 0.6, 0.9: 0.6} {
		require.Equal(t, want, st.at(s), "score %g", s)
	}
}

func TestCalibrationApply(t *testing.T) {
	c := &Calibration{
		ComponentSizes: []int{1, 2},
		Classes: []CalibrationSteps{
			{Scores: []float64{1}, Probabilities: []float64{1}},                       // lone: always a source
			{Scores: []float64{0.3, 1}, Probabilities: []float64{0.2, 0.7}},           // pairs
			{Scores: []float64{0.5, 0.8, 1}, Probabilities: []float64{0.1, 0.4, 0.6}}, // the rest
		},
	}
	// Nodes 0-3 in a component of four, 4-5 a pair, 6 lone, 7-8 uninfected
	// (already ranked below the lowest infected score, 0.1).
	y := []float64{1, 1, 1, 1, 1, 1, 1, 0, 0}
	sizes := []int{4, 4, 4, 4, 2, 2, 1, 0, 0}
	scores := []float64{0.9, 0.6, 0.2, 0.1, 0.5, 0.25, 0.15, 0.04, 0.02}
	got := slices.Clone(scores)
	c.apply(got, y, sizes)
	cal := func(p, s float64) float64 { return (p + calibrationTieBreak*s) / (1 + calibrationTieBreak) }
	want := []float64{cal(0.6, 0.9), cal(0.4, 0.6), cal(0.1, 0.2), cal(0.1, 0.1), cal(0.7, 0.5), cal(0.2, 0.25), cal(1, 0.15)}
	require.InDeltaSlice(t, want, got[:7], 1e-15)
	lowest := slices.Min(got[:7])
	require.InDelta(t, 0.04*lowest/0.1, got[7], 1e-15, "uninfected scaled with the lowest infected score")
	require.InDelta(t, 0.02*lowest/0.1, got[8], 1e-15)
	// The lone node first, then by the pairs' and the component's rates;
	// within the component of four the descent's order stands.
	require.Equal(t, []int{6, 4, 0, 1, 5, 2, 3, 7, 8}, byScore(got))
	for _, s := range got {
		require.True(t, s >= 0 && s <= 1)
	}
	require.Panics(t, func() { c.apply(make([]float64, 2), make([]float64, 2), make([]int, 1)) })
}

// pairsOnPath builds cascades on 4 disjoint paths a - b - c and a path
// of three, block: in each path a and b are infected and source(c, k)
// says which is the source (true: a), c is not; the block's three nodes
// are infected non-sources scored blockScore and up. The descent scores a
// above b.
func pairsOnPath(cascades int, blockScore float64, source func(c, k int) bool) (*graph.Graph, [][]float64, []forward.Pair) {
	const triples = 4
	n := 3*triples + 3
	var edges []graph.Edge
	for k := 0; k < triples; k++ {
		edges = append(edges, graph.Edge{From: 3 * k, To: 3*k + 1}, graph.Edge{From: 3*k + 1, To: 3*k + 2})
	}
	block := 3 * triples
	edges = append(edges, graph.Edge{From: block, To: block + 1}, graph.Edge{From: block + 1, To: block + 2})
	g := graph.New(n, edges, nil, false, false)
	var scores [][]float64
	var pairs []forward.Pair
	for c := 0; c < cascades; c++ {
		s := make([]float64, n)
		var p forward.Pair
		for k := 0; k < triples; k++ {
			a, b := 3*k, 3*k+1
			s[a], s[b] = 0.3+0.01*float64(k), 0.1+0.01*float64((k+c)%triples)
			p.Infected = append(p.Infected, a, b)
			if source(c, k) {
				p.Sources = append(p.Sources, a)
			} else {
				p.Sources = append(p.Sources, b)
			}
		}
		for v := block; v < n; v++ {
			s[v] = blockScore + 0.01*float64(v-block)
			p.Infected = append(p.Infected, v)
		}
		scores, pairs = append(scores, s), append(pairs, p)
	}
	return g, scores, pairs
}

func TestChooseCalibration(t *testing.T) {
	// Each pair's source is its higher-scored node, yet the block's
	// non-sources outscore it: ranked as they are the sources lose to the
	// block; calibrated by component size, the pairs' measured rate puts
	// them first.
	g, scores, pairs := pairsOnPath(60, 0.5, func(int, int) bool { return true })
	cascade := make([]int, len(scores))
	for c := range cascade {
		cascade[c] = c
	}
	// No lone node, so lifting them changes nothing.
	lift, without, _ := ChooseLoneFirst(g, scores, pairs)
	require.False(t, lift)
	require.InDelta(t, 8.0/11, without, 1e-12) // each source loses to the block's three
	cal, crossFitted := ChooseCalibration(g, scores, pairs, cascade)
	require.NotNil(t, cal)
	require.InDelta(t, 1, crossFitted, 1e-12, "the calibration learns that a pair's higher-scored node is its source")
	require.NoError(t, cal.check())
	// Pairs (class of 2) and the block (class of 3) have their own fits:
	// 8 and 3 infected nodes a cascade, over minCalibrationNodes.
	pairsFit := cal.Classes[cal.class(2)]
	require.Equal(t, 0.0, pairsFit.at(0.1))
	require.Equal(t, 1.0, pairsFit.at(0.3))
	require.Equal(t, 0.0, cal.Classes[cal.class(3)].at(0.5))
	// Classes no validation node fell in take the pooled fit.
	require.Equal(t, isotonic(calibrationPoints(g, scores, pairs, nil)), cal.Classes[cal.class(1)])

	// The same solves listed twice under one cascade id, as Train lists
	// them at each n_opt: the folds keep them together and the answer
	// stands.
	twice := append(slices.Clone(scores), scores...)
	twicePairs := append(slices.Clone(pairs), pairs...)
	_, again := ChooseCalibration(g, twice, twicePairs, append(slices.Clone(cascade), cascade...))
	require.InDelta(t, crossFitted, again, 1e-12)

	// A fold with nothing to learn from: no calibration.
	cal, crossFitted = ChooseCalibration(g, scores[:1], pairs[:1], []int{0})
	require.Nil(t, cal)
	require.True(t, math.IsNaN(crossFitted))
	require.Panics(t, func() { ChooseCalibration(g, scores, pairs, cascade[:1]) })
}

// Where the source of each pair is a coin flip the scores know nothing
// of, the cross-fitted calibration does not beat the scores, so Train
// would not choose it.
func TestChooseCalibrationFindsNothingInNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g, scores, pairs := pairsOnPath(40, 0.001, func(int, int) bool { return rng.IntN(2) == 0 })
	cascade := make([]int, len(scores))
	for c := range cascade {
		cascade[c] = c
	}
	_, without, _ := ChooseLoneFirst(g, scores, pairs)
	cal, crossFitted := ChooseCalibration(g, scores, pairs, cascade)
	require.NotNil(t, cal)
	require.LessOrEqual(t, crossFitted, without+1e-12)
}

// A bundle with a calibration calibrates the infected nodes' scores after
// its ranking, refuses one that contradicts the rest of the manifest, and
// survives a round trip.
func TestSolveWithCalibration(t *testing.T) {
	p, f, _ := testProblem(12, 2, 4)
	b := testBundle(t) // a ring of 12
	b.Manifest.Ranking = InfectedFirst
	before, err := Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)

	b.Manifest.Calibration = &Calibration{
		ComponentSizes: []int{1},
		Classes: []CalibrationSteps{
			{Scores: []float64{1}, Probabilities: []float64{0.9}},
			{Scores: []float64{0.5, 1}, Probabilities: []float64{0.3, 0.6}},
		},
	}
	got, err := readBytes(encodeBundle(t, b))
	require.NoError(t, err)
	require.Equal(t, b.Manifest.Calibration, got.Manifest.Calibration)
	res, err := Solve(t.Context(), got, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	want := slices.Clone(before.Scores)
	got.Manifest.Calibration.apply(want, p.Y, InfectedComponentSizes(got.Graph, p.Y, nil))
	require.Equal(t, want, res.Scores)
	require.NotEqual(t, before.Scores, res.Scores)
	for v, s := range res.Scores {
		require.Equal(t, s >= res.Threshold, slices.Contains(res.Sources, v), "node %d", v)
	}

	for _, tc := range []struct {
		name string
		edit func(m *Manifest)
		text string
	}{
		{"with the descent's ranking", func(m *Manifest) { m.Ranking = RankByScore }, "calibration: set with the descent's ranking"},
		{"with the lone nodes lifted", func(m *Manifest) { m.LoneInfectedFirst = true }, "calibration: set with lone_infected_first"},
		{"a class missing", func(m *Manifest) { m.Calibration.Classes = m.Calibration.Classes[:1] }, "calibration.classes: 1, want 2"},
		{"sizes not ascending", func(m *Manifest) { m.Calibration.ComponentSizes = []int{0} }, "calibration.component_sizes[0]: 0"},
		{"probability above 1", func(m *Manifest) { m.Calibration.Classes[1].Probabilities[1] = 1.5 }, "calibration.classes[1].probabilities[1]: 1.5"},
		{"decreasing", func(m *Manifest) { m.Calibration.Classes[1].Probabilities[0] = 0.7 }, "calibration.classes[1].probabilities[1]: 0.6, want in [0, 1] and nondecreasing"},
		{"scores not ascending", func(m *Manifest) { m.Calibration.Classes[1].Scores[1] = 0.5 }, "calibration.classes[1].scores[1]: 0.5"},
		{"no steps", func(m *Manifest) { m.Calibration.Classes[0] = CalibrationSteps{} }, "calibration.classes[0]: 0 scores and 0 probabilities"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := testBundle(t)
			bad.Manifest.Ranking = InfectedFirst
			c := *b.Manifest.Calibration
			c.ComponentSizes = slices.Clone(c.ComponentSizes)
			c.Classes = []CalibrationSteps{
				{Scores: slices.Clone(c.Classes[0].Scores), Probabilities: slices.Clone(c.Classes[0].Probabilities)},
				{Scores: slices.Clone(c.Classes[1].Scores), Probabilities: slices.Clone(c.Classes[1].Probabilities)},
			}
			bad.Manifest.Calibration = &c
			tc.edit(&bad.Manifest)
			_, err := readBytes(encodeBundle(t, bad))
			require.ErrorIs(t, err, ErrBadBundle)
			require.ErrorContains(t, err, tc.text)
		})
	}
}

// BenchmarkCalibrate times what a calibrated bundle adds to a Solve: the
// infected components of one observation and the calibration of its
// scores, on the shared Power Grid graph (skipped where ../shared is
// absent) with a simulated SI snapshot.
func BenchmarkCalibrate(b *testing.B) {
	path := filepath.Join("..", "..", "shared", "data", "power_grid.edges")
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no %s: %v", path, err)
	}
	g, err := graph.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	cs, _, err := diffusion.Simulate(b.Context(), g, diffusion.DefaultConfig(), 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	y := cs[0].Y(nil)
	rng := rand.New(rand.NewPCG(1, 1))
	scores := make([]float64, g.N())
	for v := range scores {
		scores[v] = rng.Float64()
	}
	pairs := []forward.Pair{{Sources: cs[0].Sources, Infected: cs[0].Infected}}
	c := FitCalibration(g, [][]float64{scores}, pairs)
	work := make([]float64, len(scores))
	var sizes []int
	for b.Loop() {
		copy(work, scores)
		sizes = InfectedComponentSizes(g, y, sizes)
		c.apply(work, y, sizes)
	}
}
