package eval

import (
	"context"
	"testing"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// TestEmptyRecordedIsSimulated: a Config whose Recorded is an empty, non-nil
// slice simulates its cascades (Validate and Run read len(Recorded)), so its
// report must treat them as simulated ones: each test cascade its own unit
// of the paired intervals, no distinct-test count. The paired units and
// the test keys were switched on by Recorded != nil instead, so identical
// simulated draws (common on a tiny graph) were merged into one unit and
// the report said "N of them distinct (recorded cascades ...)".
func TestEmptyRecordedIsSimulated(t *testing.T) {
	// A star of 6 nodes: one source, observed at 1/3-1/2 infected, gives
	// few distinct cascades, so test cascades repeat.
	var e []graph.Edge
	for v := 1; v < 6; v++ {
		e = append(e, graph.Edge{From: 0, To: v})
	}
	g := graph.New(6, e, nil, false, false)
	run := func(recorded []diffusion.Cascade) *Report {
		cfg := DefaultConfig()
		cfg.Sim.Sources = diffusion.SourceSpec{Min: 1, Max: 1}
		cfg.Cascades, cfg.Runs, cfg.Seed, cfg.Workers = 60, 2, 7, 1
		cfg.Methods = []string{"infected", "lpsi"}
		cfg.Recorded = recorded
		rep, err := Run(context.Background(), g, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	want, got := run(nil), run([]diffusion.Cascade{})
	lp := func(r *Report) Result { return r.Results[1] }
	if want.Settings.DistinctTest != 0 {
		t.Fatalf("nil Recorded: distinct test %d", want.Settings.DistinctTest)
	}
	if got.Settings.DistinctTest != 0 || lp(got).Paired.AUC.N != lp(want).Paired.AUC.N || lp(got).Paired.F1.N != lp(want).Paired.F1.N {
		t.Fatalf("empty Recorded: distinct test %d, paired n F1 %d AUC %d; nil Recorded: paired n F1 %d AUC %d",
			got.Settings.DistinctTest, lp(got).Paired.F1.N, lp(got).Paired.AUC.N, lp(want).Paired.F1.N, lp(want).Paired.AUC.N)
	}
}
