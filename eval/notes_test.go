package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// abstainMethod ranks the infected nodes first but names no source on
// every cascade with an even infected count.
type abstainMethod struct{}

func (abstainMethod) Name() string { return "test-abstain" }
func (abstainMethod) Fit(context.Context, *graph.Graph, []diffusion.Cascade, []diffusion.Cascade) error {
	return nil
}
func (abstainMethod) Localize(_ context.Context, y []float64) (Prediction, error) {
	p := Prediction{Scores: append([]float64(nil), y...)}
	infected := 0
	for i, v := range y {
		if v > 0.5 {
			infected++
			p.Sources = append(p.Sources, i)
		}
	}
	if infected%2 == 0 {
		p.Sources = nil
	}
	return p, nil
}

func init() {
	Register("test-abstain", func(Env) (Method, error) { return abstainMethod{}, nil })
}

// A method that names nothing on a notable share of the test cascades is
// said to, with what that does to its F1; a few empty sets are left to
// the table's column.
func TestEmptyPredictionsNote(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  Result
		want string // "": no note
	}{
		{"none empty", Result{Method: "lpsi", F1: Stat{Mean: 0.4, N: 60}}, ""},
		{"below the share", Result{Method: "lpsi", F1: Stat{Mean: 0.4, N: 60}, EmptyPredictions: 11}, ""},
		{"at the share", Result{Method: "slvae", F1: Stat{Mean: 0.3, N: 60}, EmptyPredictions: 12},
			"slvae: named no source on 12 of 60 test cascades (20%); each scores F1 0 (precision and recall 0, and the error-distance penalty), " +
				"so its F1 0.300 counts how often it names nothing as well as how well it names: on the other 48 its F1 is 0.375; " +
				"its AUC ranks every node whatever the set, and is unaffected"},
		{"every cascade", Result{Method: "slvae[gat]", F1: Stat{Mean: 0, N: 5}, EmptyPredictions: 5},
			"slvae[gat]: named no source on 5 of 5 test cascades (100%); each scores F1 0 (precision and recall 0, and the error-distance penalty); " +
				"its AUC ranks every node whatever the set, and is unaffected"},
		{"a control too", Result{Method: "random", Control: true, F1: Stat{Mean: 0.05, N: 10}, EmptyPredictions: 8},
			"random: named no source on 8 of 10 test cascades (80%); each scores F1 0 (precision and recall 0, and the error-distance penalty), " +
				"so its F1 0.050 counts how often it names nothing as well as how well it names: on the other 2 its F1 is 0.250; " +
				"its AUC ranks every node whatever the set, and is unaffected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 60}, Results: []Result{tt.res}}
			var buf bytes.Buffer
			require.NoError(t, rep.WriteTable(&buf))
			if tt.want == "" {
				require.Empty(t, rep.notes())
				require.NotContains(t, buf.String(), "named no source")
				return
			}
			require.Equal(t, []Note{{Kind: NoteEmptyPredictions, Method: tt.res.Method, Text: tt.want}}, rep.notes())
			require.Contains(t, buf.String(), "\n"+tt.want+"\n")
		})
	}
}

// Run stores the notes in the report, and the JSON holds them as
// "notes"; a report without any has no "notes" key, as before.
func TestRunStoresNotes(t *testing.T) {
	g := randomGraph(60, 80, 3)
	cfg := DefaultConfig()
	cfg.Cascades, cfg.Runs, cfg.Seed, cfg.Workers = 40, 1, 5, 1
	cfg.Methods = []string{"test-abstain", "infected"}
	rep, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Greater(t, rep.Results[0].EmptyPredictions, 0)
	require.Len(t, rep.Notes, 1, "%+v", rep.Results[0])
	require.Equal(t, NoteEmptyPredictions, rep.Notes[0].Kind)
	require.Equal(t, "test-abstain", rep.Notes[0].Method)
	require.Equal(t, rep.notes(), rep.Notes)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var doc struct {
		Notes []Note `json:"notes"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	require.Equal(t, rep.Notes, doc.Notes)

	rep.Notes = nil
	buf.Reset()
	require.NoError(t, rep.WriteJSON(&buf))
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(buf.Bytes(), &keys))
	require.NotContains(t, keys, "notes")
}
