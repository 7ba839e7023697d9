package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

// evalKarate is the karate club file kept as diffusion test data.
var evalKarate = filepath.Join("..", "..", "diffusion", "testdata", "karate.edges")

func runEvalCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr)
	root.SetArgs(append([]string{"eval"}, args...))
	err := root.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

func TestEvalCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.json")
	stdout, stderr, err := runEvalCmd(t, "--graph", evalKarate, "--cascades", "30", "--runs", "2", "--seed", "3",
		"--methods", "lpsi,jordan,infected,prior,random", "--method-param", "jordan.k=1", "--json", out)
	require.NoError(t, err)
	// off a terminal there is no progress bar
	require.NotContains(t, stderr, "eval [")
	lines := strings.Split(stdout, "\n")
	require.Contains(t, lines[0], "34 nodes, 78 edges; SI (beta 0.1), sources ratio 0.1")
	require.Contains(t, stdout, "2 runs x 30 cascades (train 18 / validation 6 / test 6)")
	header := -1
	for i, l := range lines {
		if strings.Contains(l, "precision") && strings.Contains(l, "AUC") {
			header = i
		}
	}
	require.GreaterOrEqual(t, header, 0, stdout)
	for i, m := range []string{"lpsi", "jordan", "infected *", "prior *", "random *"} {
		row := lines[header+1+i]
		require.True(t, strings.HasPrefix(strings.TrimSpace(row), m), row)
		require.Equal(t, 8, strings.Count(row, "±"), row)
		// aligned: every row as wide as the header
		require.Equal(t, len([]rune(lines[header])), len([]rune(row)))
	}
	// the methods' paired leads over infected, the controls' none
	require.Contains(t, stdout, "lpsi - infected: F1 ")
	require.Contains(t, stdout, "jordan - infected: F1 ")
	require.NotContains(t, stdout, "prior - infected")
	stdout, _, err = runEvalCmd(t, "--graph", evalKarate, "--cascades", "30", "--runs", "1", "--seed", "3",
		"--methods", "lpsi,jordan,infected", "--paired-with", "jordan")
	require.NoError(t, err)
	require.Contains(t, stdout, "lpsi - jordan: F1 ")
	require.NotContains(t, stdout, " - infected:")

	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	var doc struct {
		Graph     string `json:"graph"`
		Nodes     int    `json:"nodes"`
		Diffusion string `json:"diffusion"`
		Settings  struct {
			Cascades, Runs int
			Seed           int64
			Params         map[string]string
		} `json:"settings"`
		Results []map[string]json.RawMessage `json:"results"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, evalKarate, doc.Graph)
	require.Equal(t, 34, doc.Nodes)
	require.Equal(t, "SI", doc.Diffusion)
	require.Equal(t, 30, doc.Settings.Cascades)
	require.Equal(t, 2, doc.Settings.Runs)
	require.Equal(t, map[string]string{"jordan.k": "1"}, doc.Settings.Params)
	require.Len(t, doc.Results, 5)
	var jordan struct {
		Method    string
		Precision struct{ Mean, SD float64 }
		Recall    struct{ Mean, SD float64 }
		AUC       struct {
			Mean, SD float64
			N        int
		}
	}
	require.NoError(t, json.Unmarshal(mustJSON(t, doc.Results[1]), &jordan))
	require.Equal(t, "jordan", jordan.Method)
	require.Equal(t, 12, jordan.AUC.N)
	// jordan.k=1 names one node: recall is at most 1/3 of karate's 3 sources
	require.LessOrEqual(t, jordan.Recall.Mean, 1.0/3+1e-9)
	for _, k := range []string{"precision", "recall", "f1", "auc", "topk", "error_distance", "seconds_per_cascade"} {
		require.Contains(t, doc.Results[0], k)
	}

	// the same seed gives the same numbers
	stdout2, _, err := runEvalCmd(t, "--graph", evalKarate, "--cascades", "30", "--runs", "2", "--seed", "3",
		"--methods", "lpsi,jordan,infected,prior,random", "--method-param", "jordan.k=1", "--json", "-")
	require.NoError(t, err)
	var doc2 struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout2), &doc2))
	for i := range doc.Results {
		require.JSONEq(t, string(doc.Results[i]["auc"]), string(doc2.Results[i]["auc"]))
		require.JSONEq(t, string(doc.Results[i]["f1"]), string(doc2.Results[i]["f1"]))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestEvalCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no graph", []string{"--cascades", "10"}, "--graph"},
		{"unknown method", []string{"--graph", evalKarate, "--methods", "lpsi,magic"}, `unknown method "magic"`},
		{"bad param form", []string{"--graph", evalKarate, "--method-param", "alpha=1"}, "--method-param"},
		{"unknown param", []string{"--graph", evalKarate, "--cascades", "10", "--runs", "1", "--methods", "lpsi", "--method-param", "lpsi.beta=1"}, "lpsi.beta"},
		{"bad runs", []string{"--graph", evalKarate, "--runs", "0"}, "--runs"},
		{"split", []string{"--graph", evalKarate, "--train-frac", "0.9", "--val-frac", "0.2"}, "--train-frac 0.9, --val-frac 0.2: want both above 0"},
		{"too few cascades for the split", []string{"--graph", evalKarate, "--cascades", "3", "--methods", "infected"},
			"3 cascades give an empty train, validation or test split (2/1/0 at --train-frac 0.6, --val-frac 0.2; 4 is the least that fills all three); use --cascades 4 or more"},
		{"bad diffusion", []string{"--graph", evalKarate, "--diffusion", "XY"}, "--diffusion"},
		{"paired with a method not run", []string{"--graph", evalKarate, "--methods", "lpsi,infected", "--paired-with", "jordan"},
			"--paired-with jordan: not among the methods evaluated (lpsi,infected)"},
		{"graph is a directory", []string{"--graph", os.TempDir()}, "--graph " + os.TempDir() + ": is a directory, want an edge list file"},
		{"unreachable target names the flags", []string{"--graph", evalKarate, "--methods", "infected", "--cascades", "10", "--runs", "1",
			"--beta", "0.001", "--max-steps", "2", "--max-redraws", "3", "--observe", "0.9"},
			"eval: run 1: simulating: cascade "},
		{"unreachable target suggests --observe", []string{"--graph", evalKarate, "--methods", "infected", "--cascades", "10", "--runs", "1",
			"--beta", "0.001", "--max-steps", "2", "--max-redraws", "3", "--observe", "0.9"},
			": --beta too low, --max-steps too low or --observe too high, or the graph's components too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runEvalCmd(t, tc.args...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// --plugin-dir is where every SL-VAE method of the run looks for its
// plugin, its per-plugin expansions included; a method's own
// <method>.plugin_dir wins for that method. (The directories do not exist:
// the error names the path the method looked at.)
func TestEvalCommandPluginDir(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	// Found, not started: the missing one beside it fails the check first.
	onlyDeepis := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(onlyDeepis, "sourcewatch-forward-deepis"), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, filepath.Join("bin", "sourcewatch-forward-deepis") + " does not exist"},
		{"flag", []string{"--plugin-dir", nowhere},
			filepath.Join(nowhere, "sourcewatch-forward-deepis") + " does not exist"},
		{"an ablation", []string{"--plugin-dir", nowhere, "--methods", "slvae-a,infected"},
			filepath.Join(nowhere, "sourcewatch-forward-deepis") + " does not exist"},
		{"per-plugin expansion", []string{"--plugin-dir", nowhere, "--forward", "gat"},
			filepath.Join(nowhere, "sourcewatch-forward-gat") + " does not exist"},
		{"one of two plugins missing", []string{"--plugin-dir", onlyDeepis, "--forward", "deepis,mine"},
			`slvae[mine]: forward plugin "mine": ` + filepath.Join(onlyDeepis, "sourcewatch-forward-mine") + " does not exist (the plugin dir holds deepis"},
		{"one of two plugins missing, the way out", []string{"--plugin-dir", onlyDeepis, "--forward", "deepis,mine"},
			"(one plugin dir serves every SL-VAE method; to look for this one's elsewhere: slvae[mine].plugin_dir=DIR)"},
		{"method's own wins", []string{"--plugin-dir", nowhere, "--method-param", "slvae.plugin_dir=" + filepath.Join(nowhere, "own")},
			filepath.Join(nowhere, "own", "sourcewatch-forward-deepis") + " does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--graph", evalKarate, "--cascades", "10", "--runs", "1", "--methods", "slvae,infected", "--log-level", "error"}, tc.args...)
			_, _, err := runEvalCmd(t, args...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// On a directed graph the methods that need an undirected one are left out
// of --methods all, said once; named explicitly (in --methods or by a
// --method-param) they are refused up front, all of them at once.
func TestEvalCommandDirectedGraph(t *testing.T) {
	ring := filepath.Join(t.TempDir(), "ring.edges")
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "%d %d\n%d %d\n", i, (i+1)%30, i, (i+7)%30)
	}
	require.NoError(t, os.WriteFile(ring, []byte(b.String()), 0o600))
	base := []string{"--graph", ring, "--directed", "--cascades", "20", "--runs", "1", "--diffusion", "SI", "--beta", "0.3"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"two named", []string{"--methods", "lpsi,netsleuth,jordan,ojc,infected"},
			"--methods: netsleuth, ojc need an undirected graph, and --graph is read with --directed: leave them out"},
		{"one named", []string{"--methods", "ojc,infected"},
			"--methods: ojc needs an undirected graph, and --graph is read with --directed: leave it out"},
		{"named by a parameter", []string{"--method-param", "netsleuth.k=2"},
			"--methods: netsleuth needs an undirected graph, and --graph is read with --directed: leave it out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := runEvalCmd(t, append(base, tc.args...)...)
			require.EqualError(t, err, tc.want)
			require.NotContains(t, stderr, "left out")
		})
	}

	// --methods all (the default): netsleuth and ojc are left out, once;
	// what fails is SL-VAE's missing plugin, not them.
	_, stderr, err := runEvalCmd(t, append(base, "--plugin-dir", filepath.Join(t.TempDir(), "none"), "--method-param", "local-mlp.steps=20")...)
	require.ErrorContains(t, err, "sourcewatch-forward-deepis does not exist")
	require.NotContains(t, err.Error(), "undirected")
	require.Equal(t, 1, strings.Count(stderr, "netsleuth, ojc need an undirected graph: left out"), stderr)

	// the lot runs when every method can
	stdout, stderr, err := runEvalCmd(t, append(base, "--methods", "lpsi,jordan,infected,degree,prior,random", "--json", "-")...)
	require.NoError(t, err)
	require.NotContains(t, stderr, "left out")
	require.Contains(t, stdout, `"method": "jordan"`)
	require.Contains(t, stdout, `"directed": true`)
	// The table's first line counts arcs, as train does.
	table, _, err := runEvalCmd(t, append(base, "--methods", "jordan,infected")...)
	require.NoError(t, err)
	require.Contains(t, table, "ring.edges: 30 nodes, 60 arcs (directed); SI")
}

// eval says, like simulate, when the graph's weights go unused.
func TestEvalCommandWarnsOfUnusedWeights(t *testing.T) {
	weighted := filepath.Join(t.TempDir(), "weighted.edges")
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "%d %d 0.5\n%d %d 0.5\n", i, (i+1)%30, i, (i+7)%30)
	}
	require.NoError(t, os.WriteFile(weighted, []byte(b.String()), 0o600))
	_, stderr, err := runEvalCmd(t, "--graph", weighted, "--cascades", "10", "--runs", "2", "--methods", "infected", "--diffusion", "SIR", "--beta", "0.4")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(stderr, "the graph's edge weights are not used: SIR infects along every arc with --beta"), stderr)
	require.Contains(t, stderr, "the forward models are given the graph without them too", "eval trains forward models, which would read them")
}

// SL-VAE (through a real plugin process) and the learned baseline run in
// eval like every other method, and a run with a forward model reports the
// forward floor beside the model's test error.
func TestEvalCommandLearnedMethods(t *testing.T) {
	pluginDir := filepath.Dir(forwardtest.Build(t, "icmf"))
	stdout, _, err := runEvalCmd(t, "--graph", evalKarate, "--cascades", "40", "--runs", "1", "--seed", "2",
		"--methods", "slvae,local-mlp,infected", "--json", "-", "--log-level", "warn",
		"--method-param", "slvae.forward=icmf", "--plugin-dir", pluginDir,
		"--method-param", "slvae.val_solves=4", "--method-param", "slvae.prior_epochs=3",
		"--method-param", "local-mlp.steps=300")
	require.NoError(t, err)
	var doc struct {
		ForwardFloorMSE        float64 `json:"forward_floor_mse"`
		ForwardFloorAtCountMSE float64 `json:"forward_floor_at_count_mse"`
		Results                []struct {
			Method string
			AUC    struct{ Mean float64 }
			Extra  map[string]float64
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc))
	require.Len(t, doc.Results, 3)
	require.Equal(t, "slvae[icmf]", doc.Results[0].Method, "named by its plugin")
	require.Equal(t, "local-mlp", doc.Results[1].Method)
	for _, r := range doc.Results {
		require.Greater(t, r.AUC.Mean, 0.5, r.Method)
	}
	extra := doc.Results[0].Extra
	for _, k := range []string{"objective_truth", "objective_found", "found_below_truth"} {
		require.Contains(t, extra, k)
	}
	require.Contains(t, []float64{10, 25, 50}, extra["opt_steps"], "n_opt chosen on validation")
	require.GreaterOrEqual(t, extra["found_below_truth"], 0.0)
	require.LessOrEqual(t, extra["found_below_truth"], 1.0)
	mse := doc.Results[0].Extra["forward_test_mse"]
	require.Greater(t, mse, 0.0)
	// A variance of 0/1 outcomes: in (0, 1/4]; icmf is untrained, so it
	// cannot beat the floor by more than the noise of 8 test cascades.
	require.Greater(t, doc.ForwardFloorMSE, 0.0)
	require.LessOrEqual(t, doc.ForwardFloorMSE, 0.25)
	require.Less(t, doc.ForwardFloorMSE, mse+0.05)
	// Told the observation time, a forward model can only do better: by
	// the law of total variance the floor at the observed counts is lower
	// in expectation (up to the noise of 8 source sets).
	require.Greater(t, doc.ForwardFloorAtCountMSE, 0.0)
	require.LessOrEqual(t, doc.ForwardFloorAtCountMSE, doc.ForwardFloorMSE+0.02)

	// Without a forward model there is no floor to report.
	stdout, _, err = runEvalCmd(t, "--graph", evalKarate, "--cascades", "20", "--runs", "1",
		"--methods", "lpsi,infected", "--log-level", "warn")
	require.NoError(t, err)
	require.NotContains(t, stdout, "forward_floor_mse")
	require.NotContains(t, stdout, "forward_floor_at_count_mse")
}

func TestMethodParamForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  any
		want []string
		err  string
	}{
		{"flag", []string{"lpsi.alpha=0.5"}, []string{"lpsi.alpha=0.5"}, ""},
		{"env, commas and spaces", "lpsi.alpha=0.5,degree.k=5 slvae.restarts=32", []string{"lpsi.alpha=0.5", "degree.k=5", "slvae.restarts=32"}, ""},
		{"file list", []any{"lpsi.alpha=0.5"}, []string{"lpsi.alpha=0.5"}, ""},
		{"file map, dotted and nested", map[string]any{"lpsi": map[string]any{"alpha": 0.5}, "degree": map[string]any{"k": 5}},
			[]string{"degree.k=5", "lpsi.alpha=0.5"}, ""},
		{"a list inside the map", map[string]any{"lpsi": map[string]any{"alpha": []any{1, 2}}}, nil, "method_param: lpsi.alpha: want a value, got a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := methodParamList(tc.raw)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestJoinCommaValues(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"a=1", "b=2"}, []string{"a=1", "b=2"}},
		{[]string{"layers=64", "32", "steps=3"}, []string{"layers=64,32", "steps=3"}},
		{[]string{"x.y=1", "2", "3"}, []string{"x.y=1,2,3"}},
		{[]string{"fault", "a=1"}, []string{"fault", "a=1"}}, // left for the caller's error
		{[]string{"a=1", ""}, []string{"a=1", ""}},
	} {
		require.Equal(t, tc.want, joinCommaValues(tc.in), "%q", tc.in)
	}
}

// A value with a comma reaches the method whole (its own parse names it),
// and a parameter given twice is refused rather than the last one winning.
func TestEvalMethodParamCommaAndTwice(t *testing.T) {
	base := []string{"eval", "--graph", "../../configs/demo/karate.edges", "--cascades", "10", "--runs", "1", "--methods", "lpsi"}
	_, _, err := runCmd(t, "", append(base, "--method-param", "lpsi.alpha=0.5,0.6")...)
	require.ErrorContains(t, err, `lpsi.alpha="0.5,0.6"`)
	_, _, err = runCmd(t, "", append(base, "--method-param", "lpsi.alpha=0.5", "--method-param", "lpsi.alpha=0.6")...)
	require.ErrorContains(t, err, "--method-param: lpsi.alpha given twice")
}

// A --json file that cannot be written fails before the evaluation, and
// the check leaves no file behind.
func TestEvalChecksJSONPathFirst(t *testing.T) {
	_, _, err := runCmd(t, "", "eval", "--graph", "../../configs/demo/karate.edges", "--cascades", "20", "--runs", "1",
		"--methods", "infected", "--json", filepath.Join(t.TempDir(), "missing", "out.json"))
	require.ErrorContains(t, err, "--json: open ")
	path := filepath.Join(t.TempDir(), "out.json")
	require.NoError(t, checkJSONPath(path))
	require.NoFileExists(t, path)
}

// eval --cascades-file scores the methods on recorded cascades, and says
// which simulation flags that makes unused.
func TestEvalCommandOnRecordedCascades(t *testing.T) {
	dir := t.TempDir()
	recorded := filepath.Join(dir, "incidents.jsonl")
	_, _, err := runCmd(t, "", "simulate", "--graph", evalKarate, "--cascades", "40", "--seed", "5", "--out", recorded)
	require.NoError(t, err)
	out := filepath.Join(dir, "report.json")
	// Simulation flags are not read, so not judged: values that would be
	// refused for a simulation are only named as unused.
	stdout, stderr, err := runEvalCmd(t, "--graph", evalKarate, "--cascades-file", recorded, "--beta", "0", "--cascades", "0", "--runs", "2",
		"--methods", "lpsi,infected,prior", "--json", out, "--log-format", "json")
	require.NoError(t, err)
	require.Contains(t, stdout, "cascades recorded in incidents.jsonl")
	require.Contains(t, stdout, "2 runs x 40 cascades (train 24 / validation 8 / test 8)")
	require.Contains(t, stderr, "simulation flags are not used with recorded cascades, which are already spread and observed: --beta, --cascades")
	var rep struct {
		Diffusion string `json:"diffusion"`
		Settings  struct {
			Recorded string `json:"recorded"`
			Cascades int    `json:"cascades"`
		} `json:"settings"`
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, "recorded", rep.Diffusion)
	require.Equal(t, "incidents.jsonl", rep.Settings.Recorded)
	var settings map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &struct {
		Settings *map[string]json.RawMessage `json:"settings"`
	}{&settings}))
	require.NotContains(t, settings, "observe", "no target chose recorded snapshots; [0,0] read as one")
	require.Contains(t, settings, "recorded")
	require.Equal(t, 40, rep.Settings.Cascades)

	// --cascades given a file, not a count, reads it the same way.
	stdout, stderr, err = runEvalCmd(t, "--graph", evalKarate, "--cascades", recorded, "--beta", "0", "--runs", "2",
		"--methods", "lpsi,infected,prior", "--log-format", "json")
	require.NoError(t, err)
	require.Contains(t, stdout, "cascades recorded in incidents.jsonl")
	require.Contains(t, stdout, "2 runs x 40 cascades (train 24 / validation 8 / test 8)")
	require.Contains(t, stderr, "already spread and observed: --beta\"", "the file is not named as an unused flag")

	// A bad line is named before anything is fitted.
	require.NoError(t, os.WriteFile(recorded, []byte(`{"sources":["0"],"infected":["0","nobody"]}`+"\n"), 0o644))
	_, _, err = runEvalCmd(t, "--graph", evalKarate, "--cascades-file", recorded, "--methods", "lpsi,infected")
	require.ErrorContains(t, err, `incidents.jsonl:1: unknown node "nobody" in infected`)

	// An empty file is called that, not a split too small.
	require.NoError(t, os.WriteFile(recorded, []byte("\n\r\n"), 0o644))
	_, _, err = runEvalCmd(t, "--graph", evalKarate, "--cascades-file", recorded, "--methods", "lpsi,infected")
	require.ErrorContains(t, err, `incidents.jsonl holds no cascade (empty, or blank lines only)`)
}

// eval's SL-VAE gives its forward model the graph without the weights SI
// does not read, as train does: on a list whose every edge weighs 1 it
// scores as on the unweighted list, where before the weights, read as
// infection probabilities, saturated icmf.
func TestEvalSLVAEDropsWeightsTheSpreadIgnores(t *testing.T) {
	data, err := os.ReadFile(evalKarate)
	require.NoError(t, err)
	var b strings.Builder
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			b.WriteString(line + " 1\n")
		}
	}
	weighted := filepath.Join(t.TempDir(), "karate-weighted.edges")
	require.NoError(t, os.WriteFile(weighted, []byte(b.String()), 0o600))
	pluginDir := filepath.Dir(forwardtest.Build(t, "icmf"))
	run := func(graphFile string) (f1, auc, mse float64) {
		stdout, _, err := runEvalCmd(t, "--graph", graphFile, "--cascades", "40", "--runs", "1", "--seed", "2",
			"--methods", "slvae,infected", "--json", "-", "--log-level", "error",
			"--method-param", "slvae.forward=icmf", "--plugin-dir", pluginDir,
			"--method-param", "slvae.val_solves=4", "--method-param", "slvae.prior_epochs=3")
		require.NoError(t, err)
		var doc struct {
			Results []struct {
				Method  string
				F1, AUC struct{ Mean float64 }
				Extra   map[string]float64
			} `json:"results"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &doc))
		require.Equal(t, "slvae[icmf]", doc.Results[0].Method)
		r := doc.Results[0]
		require.Contains(t, r.Extra, "forward_test_mse")
		return r.F1.Mean, r.AUC.Mean, r.Extra["forward_test_mse"]
	}
	f1, auc, mse := run(evalKarate)
	wf1, wauc, wmse := run(weighted)
	require.Equal(t, []float64{f1, auc, mse}, []float64{wf1, wauc, wmse})
}

// eval says, as simulate and train do, when its cascades were redrawn
// so many times that their sources no longer follow --pattern (an
// audit's directed graph: 8,545 redraws for 300 cascades, and a header
// that still said uniform).
func TestEvalWarnsOfRedrawnSources(t *testing.T) {
	var star strings.Builder
	for i := range 60 {
		fmt.Fprintf(&star, "hub leaf%d\n", i)
	}
	path := filepath.Join(t.TempDir(), "star.edges")
	require.NoError(t, os.WriteFile(path, []byte(star.String()), 0o600))
	_, stderr, err := runCmd(t, "", "eval", "--graph", path, "--directed", "--sources", "1-3", "--cascades", "20", "--runs", "1",
		"--seed", "3", "--max-redraws", "2000", "--methods", "infected,random", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, stderr, "draws were redrawn for 20 cascades, for dying out below their observation targets")
	require.Contains(t, stderr, "no longer follow --pattern uniform")
}

// Test snapshots past the --observe maximum because the sources alone
// are that many get the advice for it, fewer sources, not a lower --beta,
// which cannot help a snapshot taken at the start.
func TestEvalWarnsOfSourcesPastTheTarget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "path5.edges")
	require.NoError(t, os.WriteFile(path, []byte("0 1\n1 2\n2 3\n3 4\n"), 0o600))
	_, stderr, err := runEvalCmd(t, "--graph", path, "--sources", "4", "--cascades", "20", "--runs", "1", "--methods", "infected")
	require.NoError(t, err)
	require.Contains(t, stderr, "past the --observe maximum 0.5: the sources alone are that many (4 of 5 nodes); fewer --sources")
	require.NotContains(t, stderr, "--beta")
}

// A plugin's binary given where its name goes (--forward, or a method's
// forward param) is refused saying what to pass instead, as train says it:
// the name, and the directory as --plugin-dir.
func TestEvalCommandPluginPathAsName(t *testing.T) {
	const hint = `forward plugin name "myplugin/bin/sourcewatch-forward-nbor": want a plain name such as "icmf": for the binary myplugin/bin/sourcewatch-forward-nbor, pass "nbor" as the name and myplugin/bin as the plugin dir (--plugin-dir)`
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"--forward", []string{"--forward", "myplugin/bin/sourcewatch-forward-nbor"}, "--forward: bad method parameter: " + hint},
		{"forward param", []string{"--method-param", "slvae.forward=myplugin/bin/sourcewatch-forward-nbor"},
			"--method-param slvae.forward: bad method parameter: " + hint},
		{"binary's name", []string{"--forward", "sourcewatch-forward-nbor"},
			`--forward: bad method parameter: forward plugin name "sourcewatch-forward-nbor": name the plugin without the binary's prefix sourcewatch-forward-: "nbor"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--graph", evalKarate, "--cascades", "10", "--runs", "1", "--methods", "slvae,infected", "--log-level", "error"}, tc.args...)
			_, _, err := runEvalCmd(t, args...)
			require.EqualError(t, err, tc.want)
		})
	}
	// train says the same of the same mistake.
	_, _, err := runCmd(t, "", "train", "--graph", evalKarate, "--forward", "myplugin/bin/sourcewatch-forward-nbor",
		"--out", filepath.Join(t.TempDir(), "x.swb"), "--log-level", "error")
	require.EqualError(t, err, hint)
}

// --cascades-file - (or --cascades -) reads the recorded cascades from
// standard input, for train and eval alike, naming it <stdin> in errors;
// --graph - is refused, stdin carrying the other input (localize's
// observations too).
func TestCascadesFileFromStdin(t *testing.T) {
	recorded := filepath.Join(t.TempDir(), "incidents.jsonl")
	_, _, err := runCmd(t, "", "simulate", "--graph", evalKarate, "--cascades", "40", "--seed", "5", "--out", recorded)
	require.NoError(t, err)
	data, err := os.ReadFile(recorded)
	require.NoError(t, err)
	for _, flag := range []string{"--cascades-file", "--cascades"} {
		stdout, _, err := runCmd(t, string(data), "eval", "--graph", evalKarate, flag, "-", "--runs", "1", "--methods", "infected,prior")
		require.NoError(t, err, flag)
		require.Contains(t, stdout, "cascades recorded in <stdin>", flag)
		require.Contains(t, stdout, "1 run x 40 cascades", flag)
	}
	bad := string(data) + `{"sources":["0"],"infected":["0","nobody"]}` + "\n"
	_, _, err = runCmd(t, bad, "eval", "--graph", evalKarate, "--cascades-file", "-", "--methods", "infected")
	require.ErrorContains(t, err, `<stdin>:41: unknown node "nobody" in infected`)
	_, _, err = runCmd(t, "\n", "eval", "--graph", evalKarate, "--cascades-file", "-", "--methods", "infected")
	require.ErrorContains(t, err, `<stdin> holds no cascade (empty, or blank lines only)`)
	train := []string{"train", "--graph", evalKarate, "--cascades-file", "-", "--forward", "icmf", "--plugin-dir", filepath.Dir(forwardtest.Build(t, "icmf")),
		"--out", filepath.Join(t.TempDir(), "b.swb"), "--log-level", "warn"}
	_, _, err = runCmd(t, bad, train...)
	require.ErrorContains(t, err, `<stdin>:41: unknown node "nobody" in infected`)
	_, _, err = runCmd(t, bad, "train", "--graph", "-", "--cascades-file", "-", "--out", filepath.Join(t.TempDir(), "b.swb"))
	require.ErrorContains(t, err, "--graph -: the graph is read from a file, not standard input")
	_, _, err = runCmd(t, `{"infected":["1"]}`, "localize", "--bundle", filepath.Join(t.TempDir(), "none.swb"), "--graph", "-")
	require.ErrorContains(t, err, "--graph -: the graph is read from a file, not standard input")
}
