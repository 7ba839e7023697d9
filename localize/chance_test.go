package localize

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
)

func TestFitSourceChance(t *testing.T) {
	// Two cascades on 4 nodes. Infected nodes: a source at the higher
	// score in each; uninfected nodes: never a source, whatever the score.
	scores := [][]float64{{0.9, 0.2, 0.5, 0.1}, {0.8, 0.3, 0.05, 0.6}}
	pairs := []forward.Pair{
		{Sources: []int{0}, Infected: []int{0, 1}},
		{Sources: []int{0}, Infected: []int{0, 1}},
	}
	sc := FitSourceChance(scores, pairs)
	require.NotNil(t, sc)
	require.NoError(t, sc.check())
	require.Equal(t, CalibrationSteps{Scores: []float64{0.3, 0.9}, Probabilities: []float64{0, 1}}, sc.Infected)
	require.Equal(t, CalibrationSteps{Scores: []float64{0.6}, Probabilities: []float64{0}}, sc.Uninfected,
		"an uninfected node scored above an infected source is still no source: the classes are fitted apart")

	// The fit keeps each class's total: over the fitted nodes the chances
	// add up to the sources.
	var sum float64
	y := make([]float64, 4)
	for i, s := range scores {
		observe(y, pairs[i].Infected)
		for _, c := range sc.apply(nil, s, y) {
			sum += c
		}
	}
	require.InDelta(t, 2.0, sum, 1e-12)

	// A class without validation nodes takes the pooled fit.
	all := FitSourceChance(scores[:1], []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1, 2, 3}}})
	require.Equal(t, all.Infected, all.Uninfected)
	require.Nil(t, FitSourceChance(nil, nil))
}

func TestSolveWithSourceChance(t *testing.T) {
	p, f, _ := testProblem(12, 2, 4)
	b := testBundle(t)
	res, err := Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.Nil(t, res.Chance, "a bundle without a source chance reports none")

	b.Manifest.SourceChance = &SourceChance{
		Infected:   CalibrationSteps{Scores: []float64{0.5, 1}, Probabilities: []float64{0.25, 0.75}},
		Uninfected: CalibrationSteps{Scores: []float64{1}, Probabilities: []float64{0.125}},
	}
	got, err := readBytes(encodeBundle(t, b))
	require.NoError(t, err)
	require.Equal(t, b.Manifest.SourceChance, got.Manifest.SourceChance)
	res2, err := Solve(t.Context(), got, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.Equal(t, res.Scores, res2.Scores, "the chance does not touch the ranking")
	require.Len(t, res2.Chance, len(p.Y))
	for v, c := range res2.Chance {
		want := 0.125
		if p.Y[v] >= 0.5 {
			want = 0.25
			if res2.Scores[v] > 0.5 {
				want = 0.75
			}
		}
		require.Equal(t, want, c, "node %d (observed %g, score %g)", v, p.Y[v], res2.Scores[v])
	}

	// A format 6 reader would drop it, so a format 6 manifest that holds
	// one is refused rather than read as one of the two.
	_, err = readBytes(withFormat(t, encodeBundle(t, b), 6))
	require.ErrorIs(t, err, ErrBadBundle)
	require.ErrorContains(t, err, "source_chance: in a format 6 manifest")

	for _, tc := range []struct {
		name string
		edit func(sc *SourceChance)
		text string
	}{
		{"no steps", func(sc *SourceChance) { sc.Uninfected = CalibrationSteps{} }, "source_chance.uninfected: 0 scores and 0 probabilities"},
		{"decreasing", func(sc *SourceChance) { sc.Infected.Probabilities[1] = 0.1 }, "source_chance.infected.probabilities[1]: 0.1, want in [0, 1] and nondecreasing"},
		{"a probability over 1", func(sc *SourceChance) { sc.Uninfected.Probabilities[0] = 2 }, "source_chance.uninfected.probabilities[0]: 2"},
		{"scores not ascending", func(sc *SourceChance) { sc.Infected.Scores[1] = 0.5 }, "source_chance.infected.scores[1]: 0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := testBundle(t)
			bad.Manifest.SourceChance = &SourceChance{
				Infected:   CalibrationSteps{Scores: []float64{0.5, 1}, Probabilities: []float64{0.25, 0.75}},
				Uninfected: CalibrationSteps{Scores: []float64{1}, Probabilities: []float64{0.125}},
			}
			tc.edit(bad.Manifest.SourceChance)
			_, err := readBytes(encodeBundle(t, bad))
			require.ErrorIs(t, err, ErrBadBundle)
			require.ErrorContains(t, err, tc.text)
		})
	}
}

func TestFloorComponents(t *testing.T) {
	for _, tc := range []struct {
		name           string
		chance, scores []float64
		comp           []int
		want           []float64
	}{
		{
			name:   "a component short of one source is scaled to one",
			chance: []float64{0.2, 0.3, 0.1, 0.4},
			scores: []float64{0.5, 0.6, 0.2, 0.9},
			comp:   []int{0, 0, -1, 1},
			want:   []float64{0.4, 0.6, 0.1, 1},
		},
		{
			name:   "one at or over one is left alone, as is every uninfected node",
			chance: []float64{0.7, 0.6, 0.05},
			scores: []float64{0.9, 0.8, 0.1},
			comp:   []int{0, 0, -1},
			want:   []float64{0.7, 0.6, 0.05},
		},
		{
			// The fit read outside its range: every chance 0.
			name:   "chances all 0 are shared by score",
			chance: []float64{0, 0, 0, 0},
			scores: []float64{0.3, 0.1, 0, 0.5},
			comp:   []int{0, 0, 0, -1},
			want:   []float64{0.75, 0.25, 0, 0},
		},
		{
			name:   "and equally where the scores are all 0 too",
			chance: []float64{0, 0, 0, 0},
			scores: []float64{0, 0, 0, 0},
			comp:   []int{-1, 0, 0, 0},
			want:   []float64{0, 1.0 / 3, 1.0 / 3, 1.0 / 3},
		},
		{
			name:   "no infected node",
			chance: []float64{0.1, 0},
			scores: []float64{0.2, 0},
			comp:   []int{-1, -1},
			want:   []float64{0.1, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := append([]float64(nil), tc.chance...)
			floorComponents(got, tc.scores, tc.comp)
			require.InDeltaSlice(t, tc.want, got, 1e-12)
		})
	}
	require.PanicsWithValue(t, "localize: source chance floor: 2 chances, 2 scores, 3 labels", func() {
		floorComponents(make([]float64, 2), make([]float64, 2), make([]int, 3))
	})
}

// Where every infected component holds a source (an SI bundle ranking the
// infected first), Solve's chances give each infected component at least
// one source, even where the fit, read outside what it saw, gives 0.
func TestSolveFloorsTheChanceByComponent(t *testing.T) {
	p, f, _ := testProblem(12, 2, 4)
	b := testBundle(t)
	b.Manifest.SourceChance = &SourceChance{
		Infected:   CalibrationSteps{Scores: []float64{1}, Probabilities: []float64{0}},
		Uninfected: CalibrationSteps{Scores: []float64{1}, Probabilities: []float64{0}},
	}
	res, err := Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.False(t, b.Manifest.NamesInfectedComponents())
	require.Zero(t, *ExpectedSources(res.Chance), "no floor where components need not hold a source")

	b.Manifest.Ranking = InfectedFirst
	b.Manifest.Diffusion = []byte(`{"simulated":{"model":"SI"}}`)
	require.True(t, b.Manifest.NamesInfectedComponents())
	res, err = Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	comp := InfectedComponents(b.Graph, p.Y, nil)
	sums := map[int]float64{}
	for v, c := range comp {
		if c < 0 {
			require.Zero(t, res.Chance[v], "uninfected node %d", v)
			continue
		}
		sums[c] += res.Chance[v]
	}
	require.NotEmpty(t, sums)
	for c, s := range sums {
		require.InDelta(t, 1, s, 1e-12, "infected component %d", c)
	}
	// Opts.Threshold skips the source floor, not the chance's.
	opts := DefaultOptions()
	opts.Threshold = 0.99
	res2, err := Solve(t.Context(), b, f, p.Y, opts)
	require.NoError(t, err)
	require.InDelta(t, float64(len(sums)), *ExpectedSources(res2.Chance), 1e-12)
}
