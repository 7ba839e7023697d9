package eval

import (
	"bytes"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// The table pads by terminal columns: a method named by a plugin in
// Chinese keeps every column after it in line (text/tabwriter counted
// runes and pushed its row two columns out a character).
func TestWriteTablePadsByDisplayWidth(t *testing.T) {
	st := Stat{Mean: 0.5, SD: 0.1, N: 12}
	rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 12}, Results: []Result{
		{Method: "slvae[模型]", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
		{Method: "lpsi", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
		{Method: "infected", Control: true, Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	// The table is the block after the header's blank line.
	_, table, ok := strings.Cut(buf.String(), "\n\n")
	require.True(t, ok)
	table, _, _ = strings.Cut(table, "\n\n")
	lines := strings.Split(table, "\n")
	require.Len(t, lines, 4, table)
	require.Contains(t, lines[1], "slvae[模型]")
	methodEnd := alerts.TextWidth(lines[0][:strings.Index(lines[0], "method")+len("method")])
	for i, l := range lines {
		require.Equal(t, alerts.TextWidth(lines[0]), alerts.TextWidth(l), "%q\n%s", l, table)
		if i > 0 {
			// the method column too: each row's name ends where the
			// header's does
			require.Equal(t, methodEnd, alerts.TextWidth(strings.TrimRight(l[:strings.Index(l, "0.500")], " ")), "%q", l)
		}
	}
}

// The count-told floor's line reads its gap as a cost only where the
// proxy is below the plain floor: on a fast spread a step's overshoot can
// put it above.
func TestFloorAtCountLineReadsTheGap(t *testing.T) {
	st := Stat{Mean: 0.5, SD: 0.1, N: 12}
	for _, tc := range []struct {
		plain, atCount float64
		want, not      string
	}{
		{0.08, 0.06, "its gap below forward_floor_mse estimates what not knowing the observation time costs", "not below"},
		{0.0758, 0.0858, "here it is not below forward_floor_mse", "estimates what not knowing"},
	} {
		rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 12}, ForwardFloorMSE: &tc.plain, ForwardFloorAtCountMSE: &tc.atCount,
			Results: []Result{{Method: "lpsi", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st}}}
		var buf bytes.Buffer
		require.NoError(t, rep.WriteTable(&buf))
		require.Contains(t, buf.String(), tc.want)
		require.NotContains(t, buf.String(), tc.not)
	}
}

// TestWriteTableByHand checks the table's header lines, warnings and one
// method's row against text written out by hand from the formats the
// package documents (3 decimals for the rates, 2 for distances and times,
// the seconds per cascade in milliseconds).
func TestWriteTableByHand(t *testing.T) {
	st := func(mean, sd float64) Stat { return Stat{Mean: mean, SD: sd, N: 10} }
	row := Result{Method: "lpsi",
		Precision: st(0.12345, 0.04567), Recall: st(0.23456, 0.05678), F1: st(0.34567, 0.06789),
		AUC: st(0.81234, 0.01234), TopK: st(0.45678, 0.07891), ErrorDistance: st(1.23456, 0.98765),
		SecondsPerCascade: st(0.0123456, 0.0011111), FitSeconds: st(2.34567, 0.3), EmptyPredictions: 3}
	beta := 0.3
	for _, tc := range []struct {
		name      string
		rep       Report
		want, not []string
	}{
		{
			name: "simulated, directed, unnamed, one run",
			rep: Report{Nodes: 5, Edges: 4, Directed: true, Diffusion: "SI",
				Settings: Settings{Cascades: 50, Runs: 1, Seed: 3, Train: 30, Validation: 10, Test: 10,
					Sources: "1", Pattern: "uniform", Beta: &beta, Observe: [2]float64{0.2, 0.5},
					ObservedInfected: Stat{Mean: 0.3, SD: 0.1, N: 1}},
				Results: []Result{row,
					{Method: "infected", Control: true, AUC: st(0.6, 0)},
					{Method: "prior", Control: true, AUC: st(0.5, 0)},
					{Method: "one", AUC: Stat{Mean: 0.4, N: 1}},
					{Method: "flat", AUC: Stat{Mean: 0.7, N: 8, Undefined: 1}}}},
			want: []string{
				"graph: 5 nodes, 4 arcs (directed); SI (beta 0.3), sources 1 (uniform), observed at 0.2-0.5 infected (test snapshots held 0.300 ± 0.100)\n",
				"1 run x 50 cascades (train 30 / validation 10 / test 10), seed 3; mean ± sd over 10 test cascades\n",
				"|lpsi|0.123 ± 0.046|0.235 ± 0.057|0.346 ± 0.068|0.812 ± 0.012|0.457 ± 0.079|1.23 ± 0.99|12.35 ± 1.11|2.35 ± 0.30|3\n",
				"a method localizes only where it beats infected and prior.\n",
				"one: ROC-AUC 0.400, about chance",
				"flat: AUC undefined on 1 cascades (all or no nodes are sources), left out.\n",
			},
			not: []string{"WARNING", "not run here", "distinct", "INTERRUPTED", "lpsi: AUC undefined"},
		},
		{
			name: "recorded, two runs, too few test cascades",
			rep: Report{Graph: "g", Nodes: 5, Edges: 4, Diffusion: "recorded",
				Settings: Settings{Cascades: 40, Runs: 2, Seed: 3, Train: 24, Validation: 7, Test: 9,
					Recorded: "f.jsonl", DistinctTest: 1, Repeats: 1},
				Results: []Result{row, {Method: "infected", Control: true}},
				Failed:  []FailedMethod{{Method: "jordan", Run: 1, Error: "jordan: boom"}},
				Partial: &Partial{RunsPlanned: 3}},
			want: []string{
				"g: 5 nodes, 4 edges; cascades recorded in f.jsonl\n",
				"2 runs x 40 cascades (train 24 / validation 7 / test 9), seed 3; mean ± sd over 18 test cascades, 1 of them distinct",
				"WARNING: 1 of the 40 recorded cascades repeat",
				"WARNING: 9 test cascades per run: too few",
				"INTERRUPTED: the first 2 of 3 runs, every method that had not failed\n",
				"FAILED in run 1, left out: jordan: boom\n",
				" (not run here: prior).\n",
			},
			not: []string{"held"},
		},
		{
			name: "every test cascade distinct, interrupted",
			rep: Report{Graph: "g", Nodes: 5, Edges: 4, Diffusion: "recorded",
				Settings: Settings{Cascades: 40, Runs: 2, Seed: 3, Train: 24, Validation: 7, Test: 9,
					Recorded: "f.jsonl", DistinctTest: 18},
				Results: []Result{row, {Method: "none", Precision: Stat{Mean: math.NaN(), SD: math.NaN()}}},
				Partial: &Partial{RunsPlanned: 3}},
			want: []string{"INTERRUPTED: the first 2 of 3 runs, every method\n", "|none|n/a|0.000 ± 0.000|"},
			not:  []string{"distinct", "repeat"},
		},
		{
			name: "simulated without parameters",
			rep: Report{Graph: "g", Nodes: 5, Edges: 4, Diffusion: "IC",
				Settings: Settings{Cascades: 50, Runs: 2, Seed: 3, Train: 30, Validation: 10, Test: 10,
					Sources: "2", Pattern: "degree", Observe: [2]float64{0.1, 0.4}},
				Results: []Result{row}},
			want: []string{"g: 5 nodes, 4 edges; IC, sources 2 (degree), observed at 0.1-0.4 infected\n"},
			not:  []string{"()", "held"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, tc.rep.WriteTable(&buf))
			// cells are padded apart by two spaces or more, within by one
			out := regexp.MustCompile(`(?m)^ +| {2,}`).ReplaceAllString(buf.String(), "|")
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			for _, n := range tc.not {
				require.NotContains(t, out, n)
			}
		})
	}
}

// An AUC lead below -0.0005 whose interval stays below 0 is said in words.
func TestWriteTableSaysRanksWorse(t *testing.T) {
	for _, tc := range []struct {
		mean, ci float64
		worse    bool
	}{
		{-0.0006, 0.0001, true},
		{-0.0004, 0.0001, false},
		{-0.01, 0.02, false},
	} {
		rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 20}, Results: []Result{{Method: "m",
			Paired: &Paired{Reference: "infected", F1: Difference{Mean: 0, CI95: 0, N: 20}, AUC: Difference{Mean: tc.mean, CI95: tc.ci, N: 20}}}}}
		var buf bytes.Buffer
		require.NoError(t, rep.WriteTable(&buf))
		require.Equal(t, tc.worse, strings.Contains(buf.String(), "ranks worse than infected here"), "%+v", tc)
	}
}

// WriteJSON indents, as it says.
func TestWriteJSONIndents(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, (&Report{Graph: "g"}).WriteJSON(&buf))
	require.Contains(t, buf.String(), "{\n  \"graph\": \"g\",\n")
}

// A difference is undefined without a cascade or without a mean.
func TestDifferenceUndefined(t *testing.T) {
	require.Equal(t, "undefined", Difference{Mean: 0.1, CI95: 0.2, N: 0}.String())
	require.Equal(t, "undefined", Difference{Mean: math.NaN(), CI95: 0.2, N: 3}.String())
	require.Equal(t, "+0.100 ± 0.200", Difference{Mean: 0.1, CI95: 0.2, N: 3}.String())
}
