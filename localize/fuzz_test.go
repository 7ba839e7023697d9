package localize

import (
	"encoding/json"
	"testing"
)

// FuzzManifest reads bundles whose manifest.json is arbitrary (the other
// entries, and the checksums the seeds carry, are a real bundle's) and
// solves an observation with every one that loads: loading refuses what
// Solve cannot use, so Solve never panics on a bundle ReadBundle accepted,
// and its source set is a set of the graph's nodes.
func FuzzManifest(f *testing.F) {
	b := testBundle(f)
	good := encodeBundle(f, b)
	seed := func(edit func(m *Manifest)) {
		m := b.Manifest
		m.Format = FormatVersion
		edit(&m)
		got, err := readBytes(good)
		if err != nil {
			f.Fatal(err)
		}
		m.Checksums = got.Manifest.Checksums
		data, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		// A seed that does not load would never reach Solve.
		if _, err := readBytes(rewrite(f, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return data
			}
			return body
		})); err != nil {
			f.Fatalf("seed manifest refused: %v", err)
		}
		f.Add(data)
	}
	seed(func(m *Manifest) {})
	seed(func(m *Manifest) {
		m.SourceRule = SourceRule{Count: 3}
		m.LoneInfectedFirst = true
		m.Ranking = InfectedFirst
	})
	seed(func(m *Manifest) { m.SourceRule = SourceRule{Fraction: 0.3}; m.Ranking = InfectedThenPredicted })
	seed(func(m *Manifest) {
		m.Ranking = InfectedFirst
		m.Calibration = &Calibration{ComponentSizes: []int{1}, Classes: []CalibrationSteps{
			{Scores: []float64{1}, Probabilities: []float64{0.9}},
			{Scores: []float64{0.5, 1}, Probabilities: []float64{0.3, 0.6}},
		}}
		m.Solve = SolveRef{Restarts: 3, InitSteps: 2, OptSteps: 3, LearningRate: 0.05, PriorWeight: 0.5, Variant: NoPrior}
	})
	seed(func(m *Manifest) {
		m.SourceChance = &SourceChance{
			Infected:   CalibrationSteps{Scores: []float64{0.2, 0.9}, Probabilities: []float64{0.1, 0.7}},
			Uninfected: CalibrationSteps{Scores: []float64{1}, Probabilities: []float64{0}},
		}
	})
	p, fwd, _ := testProblem(12, 2, 4)
	f.Fuzz(func(t *testing.T, manifest []byte) {
		data := rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return manifest
			}
			return body
		})
		got, err := readBytes(data)
		if err != nil {
			return
		}
		opts := got.Options()
		// The manifest's settings, at a size a fuzzer can run often.
		opts.Restarts = min(max(opts.Restarts, 1), 4)
		opts.InitSteps, opts.OptSteps = min(opts.InitSteps, 3), min(opts.OptSteps, 3)
		res, err := Solve(t.Context(), got, fwd, p.Y, opts)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, v := range res.Sources {
			if v < 0 || v >= got.Graph.N() || seen[v] {
				t.Fatalf("source set %v is not a set of the graph's %d nodes", res.Sources, got.Graph.N())
			}
			seen[v] = true
		}
		if len(res.Scores) != got.Graph.N() {
			t.Fatalf("%d scores for %d nodes", len(res.Scores), got.Graph.N())
		}
		if got.Manifest.SourceChance != nil {
			if len(res.Chance) != got.Graph.N() {
				t.Fatalf("%d chances for %d nodes", len(res.Chance), got.Graph.N())
			}
			for v, c := range res.Chance {
				if !(c >= 0 && c <= 1) {
					t.Fatalf("node %d: chance %g, want in [0, 1]", v, c)
				}
			}
		}
	})
}
