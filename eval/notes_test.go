package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
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

// A baseline or a control with a better mean ROC-AUC or F1 than SL-VAE
// is named, with the lead and, where the report pairs the two, whether 0
// lies within the 95% interval; SL-VAE's own variants, ties and methods
// that did not run are not.
func TestBeatsSLVAENote(t *testing.T) {
	auc := func(m float64) Stat { return Stat{Mean: m, N: 60} }
	f1 := auc
	for _, tt := range []struct {
		name    string
		results []Result
		want    []Note
	}{
		{"slvae ahead", []Result{
			{Method: "slvae", AUC: auc(0.9), F1: f1(0.5)},
			{Method: "lpsi", AUC: auc(0.85), F1: f1(0.4)},
			{Method: "infected", Control: true, AUC: auc(0.8), F1: f1(0.3)},
		}, nil},
		{"a baseline ranks better, unpaired", []Result{
			{Method: "slvae", AUC: auc(0.877), F1: f1(0.445), Paired: &Paired{Reference: "infected"}},
			{Method: "lpsi", AUC: auc(0.9), F1: f1(0.4)},
		}, []Note{{Kind: NoteBeatsSLVAE, Method: "lpsi", Versus: "slvae",
			Text: "lpsi beats slvae here: ROC-AUC 0.900 vs 0.877 (+0.023), no paired interval (--paired-with lpsi gives one); " +
				"on this graph and setting lpsi may be the better choice for a ranking of suspects"}}},
		{"a control beats it on both, paired by default", []Result{
			{Method: "slvae", AUC: auc(0.86), F1: f1(0.40), Paired: &Paired{Reference: "infected",
				AUC: Difference{Mean: -0.02, CI95: 0.01, N: 60}, F1: Difference{Mean: -0.01, CI95: 0.005, N: 60}}},
			{Method: "local-mlp", AUC: auc(0.84), F1: f1(0.30)},
			{Method: "infected", Control: true, AUC: auc(0.88), F1: f1(0.41)},
		}, []Note{{Kind: NoteBeatsSLVAE, Method: "infected", Versus: "slvae",
			Text: "infected, a control, beats slvae here: ROC-AUC 0.880 vs 0.860 (+0.020; paired +0.020 ± 0.010, its 95% interval clear of 0), " +
				"F1 0.410 vs 0.400 (+0.010; paired +0.010 ± 0.005, its 95% interval clear of 0); " +
				"slvae does no better than a reference point on this graph and setting, where infected is the better choice"}}},
		{"paired with slvae, controls first", []Result{
			{Method: "slvae", AUC: auc(0.877), F1: f1(0.445)},
			{Method: "local-mlp", AUC: auc(0.885), F1: f1(0.446), Paired: &Paired{Reference: "slvae",
				AUC: Difference{Mean: 0.008, CI95: 0.012, N: 20}, F1: Difference{Mean: 0.001, CI95: 0.02, N: 20}}},
			{Method: "random", Control: true, AUC: auc(0.5), F1: f1(0.45)},
		}, []Note{
			{Kind: NoteBeatsSLVAE, Method: "random", Versus: "slvae",
				Text: "random, a control, beats slvae here: F1 0.450 vs 0.445 (+0.005), no paired interval (--paired-with random gives one); " +
					"slvae may do no better than a reference point on this graph and setting, where random may be the better choice for a set of suspects"},
			{Kind: NoteBeatsSLVAE, Method: "local-mlp", Versus: "slvae",
				Text: "local-mlp beats slvae here: ROC-AUC 0.885 vs 0.877 (+0.008; paired +0.008 ± 0.012, 0 within its 95% interval: it may be noise), " +
					"F1 0.446 vs 0.445 (+0.001; paired +0.001 ± 0.020, 0 within its 95% interval: it may be noise); on this graph and setting local-mlp may be the better choice"},
		}},
		{"a tie is not a lead", []Result{
			{Method: "slvae", AUC: auc(0.8800), F1: f1(0.4)},
			{Method: "lpsi", AUC: auc(0.8804), F1: f1(0.4)},
		}, nil},
		{"a tie at small values too", []Result{
			{Method: "slvae", AUC: auc(0.9), F1: f1(0.0121)},
			{Method: "lpsi", AUC: auc(0.8), F1: f1(0.0124)},
		}, nil},
		{"means alike at three decimals get four", []Result{
			{Method: "slvae", AUC: auc(0.9), F1: f1(0.0118)},
			{Method: "lpsi", AUC: auc(0.8), F1: f1(0.0124)},
		}, []Note{{Kind: NoteBeatsSLVAE, Method: "lpsi", Versus: "slvae",
			Text: "lpsi beats slvae here: F1 0.0124 vs 0.0118 (+0.0006), no paired interval (--paired-with lpsi gives one); " +
				"on this graph and setting lpsi may be the better choice for a set of suspects"}}},
		{"a lead other than the printed means' difference gets four", []Result{
			{Method: "slvae", AUC: auc(0.8752), F1: f1(0.5)},
			{Method: "local-mlp", AUC: auc(0.8775), F1: f1(0.4)},
		}, []Note{{Kind: NoteBeatsSLVAE, Method: "local-mlp", Versus: "slvae",
			Text: "local-mlp beats slvae here: ROC-AUC 0.8775 vs 0.8752 (+0.0023), no paired interval (--paired-with local-mlp gives one); " +
				"on this graph and setting local-mlp may be the better choice for a ranking of suspects"}}},
		{"SL-VAE's own variants are not rivals", []Result{
			{Method: "slvae", AUC: auc(0.8), F1: f1(0.4)},
			{Method: "slvae-paper", AUC: auc(0.9), F1: f1(0.5)},
			{Method: "slvae-noprior", AUC: auc(0.9), F1: f1(0.5)},
			{Method: "slvae[gat]", AUC: auc(0.9), F1: f1(0.5)},
		}, nil},
		{"no slvae row", []Result{
			{Method: "slvae-a", AUC: auc(0.8), F1: f1(0.4)},
			{Method: "lpsi", AUC: auc(0.9), F1: f1(0.5)},
		}, nil},
		{"each plugin's row, and an undefined AUC", []Result{
			{Method: "slvae[deepis]", AUC: auc(0.9), F1: f1(0.3)},
			{Method: "slvae[gat]", AUC: Stat{Mean: math.NaN(), Undefined: 60}, F1: f1(0.2)},
			{Method: "jordan", AUC: auc(0.8), F1: f1(0.25)},
		}, []Note{{Kind: NoteBeatsSLVAE, Method: "jordan", Versus: "slvae[gat]",
			Text: "jordan beats slvae[gat] here: F1 0.250 vs 0.200 (+0.050), no paired interval (--paired-with jordan gives one); " +
				"on this graph and setting jordan may be the better choice for a set of suspects"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 60}, Results: tt.results}
			require.Equal(t, tt.want, rep.notes())
			var buf bytes.Buffer
			require.NoError(t, rep.WriteTable(&buf))
			require.Equal(t, len(tt.want), strings.Count(buf.String(), " beats slvae"))
			for _, n := range tt.want {
				require.Contains(t, buf.String(), "\n"+n.Text+"\n")
			}
		})
	}
}

// The bayes control is a ceiling: the report says how far it is above
// infected and what share of that each method takes, and never that it
// "beats" SL-VAE, as a control another method must beat would.
func TestCeilingNote(t *testing.T) {
	auc := func(v float64) Stat { return Stat{Mean: v, N: 180} }
	r := &Report{Results: []Result{
		{Method: "slvae", AUC: auc(0.874), F1: auc(0.412)},
		{Method: "local-mlp", AUC: auc(0.885), F1: auc(0.407)},
		{Method: "bayes", Control: true, AUC: auc(0.888), F1: auc(0.421)},
		{Method: "infected", Control: true, AUC: auc(0.821), F1: auc(0.367)},
	}}
	var ceiling []Note
	for _, n := range r.notes() {
		if n.Kind == NoteBeatsSLVAE {
			require.NotEqual(t, "bayes", n.Method, "bayes is not a rival: %s", n.Text)
		}
		if n.Kind == NoteCeiling {
			ceiling = append(ceiling, n)
		}
	}
	require.Len(t, ceiling, 1)
	require.Equal(t, "bayes, the exact posterior, is the ceiling: the most any method can lead infected by here is +0.067 ROC-AUC (bayes 0.888, infected 0.821); "+
		"of it slvae +0.053 (79%), local-mlp +0.064 (96%)", ceiling[0].Text)

	r.Results = r.Results[:3] // no infected row: no ceiling note
	for _, n := range r.notes() {
		require.NotEqual(t, NoteCeiling, n.Kind)
	}
}
