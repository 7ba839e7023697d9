package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func runCmd(t testing.TB, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr)
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	err := root.ExecuteContext(t.Context())
	return stdout.String(), stderr.String(), err
}

// trainSmall trains a small karate bundle with the real icmf plugin and
// the given extra flags, returning train's output, the bundle file and the
// plugin directory.
func trainSmall(t *testing.T, flags ...string) (out, bundle, pluginDir string) {
	t.Helper()
	pluginDir = filepath.Dir(forwardtest.Build(t, "icmf"))
	bundle = filepath.Join(t.TempDir(), "karate.swb")
	args := append([]string{"train", "--graph", "../../configs/demo/karate.edges",
		"--diffusion", "SI", "--beta", "0.3", "--pattern", "cluster", "--cascades", "40", "--seed", "3",
		"--forward", "icmf", "--plugin-dir", pluginDir, "--prior-epochs", "3", "--prototypes", "32",
		"--test-solves", "4", "--restarts", "4", "--init-steps", "5",
		"--out", bundle, "--log-level", "warn"}, flags...)
	out, _, err := runCmd(t, "", args...)
	require.NoError(t, err)
	return out, bundle, pluginDir
}

// train --schedule paper records the paper's schedule in the bundle; bundle
// inspect shows it and localize solves with it.
func TestTrainSchedulePaper(t *testing.T) {
	out, bundle, pluginDir := trainSmall(t, "--val-solves", "4", "--opt-steps", "10", "--schedule", "paper", "--prior", "on")
	require.Contains(t, out, "schedule paper")
	require.Contains(t, out, "control     infected (every infected node named): F1 ", "the test line has the infected control beside it")
	require.Regexp(t, `\nchance      a node's chance of being a source, measured on \d+ fresh cascades: test Brier score 0\.\d{3} \(the restarts' agreement read as one: 0\.\d{3}\); \d+\.\d sources expected per cascade, \d+\.\d true\n`, out)
	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.Equal(t, localize.Full, b.Manifest.Solve.Variant)
	require.Equal(t, localize.Full, b.Options().Variant)
	// The cascades' provenance holds what SI read, and no gamma or p.
	require.JSONEq(t, `{"cascades": 40, "seed": 3, "simulated": {"model": "SI", "beta": 0.3, "sources": "ratio 0.1",
		"pattern": "cluster", "observe": [0.2, 0.5], "max_steps": 100000}}`, string(b.Manifest.Diffusion))
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	require.Contains(t, out, "5 + 10 steps, 4 restarts, schedule paper")
	// What the plugin's Fit reported is shown, not only in the JSON;
	// what train measured itself is not repeated there.
	require.Regexp(t, `\nfit         train_mse 0\.\d+ \(reported by the plugin\)\n`, out)
	out, _, err = runCmd(t, `{"infected":["0","1","2","3","7","13"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.NoError(t, err)
	var got localizeOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.NotEmpty(t, got.Top)
	// The answer carries each node's chance of being a source and their
	// sum, the source count they expect.
	require.NotNil(t, got.ExpectedSources)
	for _, s := range got.Top {
		require.NotNil(t, s.Chance, "node %s", s.Node)
	}
	out, _, err = runCmd(t, `{"infected":["0","1","2","3","7","13"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^ rank  node\s+score  probability  chance$`, out)
	require.Regexp(t, `(?m)^sources expected: \d+\.\d \(the sum of every node's chance of being one\)$`, out)
}

// train chooses n_opt by default as the fewest steps within one standard
// error of the best on validation (--opt-steps-rule 1se) and says so;
// --opt-steps-rule best takes the highest F1.
func TestTrainOptStepsRule(t *testing.T) {
	out, bundle, _ := trainSmall(t, "--val-solves", "8")
	require.Contains(t, out, "the fewest steps within one standard error of the best, F1 at 10: ")
	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.Equal(t, 1.0, b.Manifest.Metrics[localize.OptStepsWithinNoiseMetric])
	// The chosen n_opt is no worse on validation than one standard error
	// allows: at most the best step count's.
	best := 0.0
	for _, k := range localize.DefaultOptStepsGrid() {
		best = max(best, b.Manifest.Metrics[localize.OptStepsMetric(k)])
	}
	require.LessOrEqual(t, b.Manifest.Metrics[localize.ThresholdF1Metric], best)
	require.Contains(t, localize.DefaultOptStepsGrid(), b.Manifest.Solve.OptSteps)

	out, bundle, _ = trainSmall(t, "--val-solves", "8", "--opt-steps-rule", "best")
	require.NotContains(t, out, "within one standard error")
	require.Contains(t, out, "n_opt chosen on validation, F1 at 10: ")
	b, err = localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.NotContains(t, b.Manifest.Metrics, localize.OptStepsWithinNoiseMetric)
	for _, k := range localize.DefaultOptStepsGrid() {
		require.LessOrEqual(t, b.Manifest.Metrics[localize.OptStepsMetric(k)], b.Manifest.Metrics["val_f1"], "n_opt %d", k)
	}

	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--opt-steps-rule", "fast",
		"--plugin-dir", t.TempDir(), "--out", bundle, "--log-level", "warn")
	require.ErrorContains(t, err, `--opt-steps-rule: want best or 1se, got "fast"`)
}

// train cuts the source set by the threshold or by a count of top scores,
// whichever validation prefers (--source-rule auto), and records which;
// --source-rule threshold keeps delta.
func TestTrainSourceRule(t *testing.T) {
	_, bundle, pluginDir := trainSmall(t, "--val-solves", "8", "--opt-steps", "10")
	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	thresholdF1, ok := b.Manifest.Metrics[localize.ThresholdF1Metric]
	require.True(t, ok)
	inspect, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	if b.Manifest.SourceRule.IsThreshold() {
		require.Equal(t, thresholdF1, b.Manifest.Metrics["val_f1"])
		require.Contains(t, inspect, "threshold   delta")
	} else {
		require.Greater(t, b.Manifest.Metrics["val_f1"], thresholdF1)
		require.Contains(t, inspect, "sources     "+b.Manifest.SourceRule.String())
	}

	// localize cuts by a bundle's count rule and says so; --threshold
	// overrides it.
	b.Manifest.SourceRule = localize.SourceRule{Count: 2}
	require.NoError(t, b.WriteFile(bundle))
	obs := `{"infected":["0","1","2","3","7","13"]}`
	out, _, err := runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "6 infected; the 2 highest scores (down to ")
	out, _, err = runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.NoError(t, err)
	var got localizeOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "the 2 highest scores", got.SourceRule)
	require.GreaterOrEqual(t, len(got.Sources), 2)
	for _, s := range got.Sources[:len(got.Sources)-got.FloorNamed] {
		require.GreaterOrEqual(t, s.Score, got.Threshold)
	}
	out, _, err = runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--threshold", "0.5", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "6 infected; threshold delta 0.50;")

	_, bundle, _ = trainSmall(t, "--val-solves", "8", "--opt-steps", "10", "--source-rule", "threshold")
	b, err = localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.True(t, b.Manifest.SourceRule.IsThreshold())
	require.NotContains(t, b.Manifest.Metrics, localize.ThresholdF1Metric)

	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--source-rule", "top",
		"--plugin-dir", t.TempDir(), "--out", bundle, "--log-level", "warn")
	require.ErrorContains(t, err, `--source-rule: want auto or threshold, got "top"`)
}

// train records the ranking validation prefers, with both ROC-AUCs;
// inspect and localize say which; --ranking score keeps the descent's.
func TestTrainRanking(t *testing.T) {
	_, bundle, pluginDir := trainSmall(t, "--val-solves", "8", "--opt-steps", "10")
	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	by, ok := b.Manifest.Metrics[localize.RankingAUCMetric(localize.RankByScore)]
	require.True(t, ok)
	first, ok := b.Manifest.Metrics[localize.RankingAUCMetric(localize.InfectedFirst)]
	require.True(t, ok)
	predicted, ok := b.Manifest.Metrics[localize.RankingAUCMetric(localize.InfectedThenPredicted)]
	require.True(t, ok)
	require.InDelta(t, first, predicted, 1e-12, "under SI the uninfected nodes' order cannot matter")
	if by > first+1e-12 {
		require.Equal(t, localize.RankByScore, b.Manifest.Ranking)
	} else { // a tie included
		require.Equal(t, localize.InfectedFirst, b.Manifest.Ranking)
	}
	inspect, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	line := fmt.Sprintf("ranking     %s (validation ROC-AUC %.3f", b.Manifest.Ranking, b.Manifest.Metrics[localize.RankingAUCMetric(b.Manifest.Ranking)])
	for _, r := range localize.Rankings() {
		if r != b.Manifest.Ranking {
			line += fmt.Sprintf("; %s: %.3f", r, b.Manifest.Metrics[localize.RankingAUCMetric(r)])
		}
	}
	require.Contains(t, inspect, line+")\n")
	lone, ok := b.Manifest.Metrics[localize.LoneFirstAUCMetric]
	require.True(t, ok, "the lone infected nodes' validation AUC is recorded")
	if rate, ok := b.Manifest.Metrics[localize.LoneSourceRateMetric]; ok {
		require.Equal(t, 1.0, rate, "under SI every lone infected node is a source")
	}
	chosen := b.Manifest.Metrics[localize.RankingAUCMetric(b.Manifest.Ranking)]
	calibrated, ok := b.Manifest.Metrics[localize.CalibratedAUCMetric]
	require.Equal(t, b.Manifest.Ranking != localize.RankByScore, ok, "the calibration is measured under a ranking that puts the infected first")
	require.Equal(t, ok && calibrated > max(lone, chosen)+1e-12, b.Manifest.Calibration != nil)
	require.Equal(t, lone > chosen+1e-12 && b.Manifest.Calibration == nil, b.Manifest.LoneInfectedFirst)
	verdict := "kept after the rest"
	switch {
	case b.Manifest.Calibration != nil:
		verdict = "calibrated with the rest"
	case b.Manifest.LoneInfectedFirst:
		verdict = "first"
	}
	proven := ""
	if b.Manifest.NamesInfectedComponents() {
		proven = "; every one a source in the training snapshots, so every one is named, and the first-ranked node of every infected component"
		if _, measured := b.Manifest.Metrics[localize.LoneSourceRateMetric]; !measured {
			proven = "; nothing recovers in the simulated spread the bundle was trained on, so every one is named, and the first-ranked node of every infected component"
		}
	}
	require.Contains(t, inspect, fmt.Sprintf("lone nodes  %s (infected, no infected in-neighbour; validation ROC-AUC first: %.3f%s)\n", verdict, lone, proven))
	if ok {
		verdict = "not used"
		if b.Manifest.Calibration != nil {
			verdict = "used"
		}
		require.Contains(t, inspect, fmt.Sprintf("calibration %s (the infected nodes' scores as the validation source rate by score and infected component size; validation ROC-AUC, cross-fitted: %.3f)\n", verdict, calibrated))
	}

	// --prior auto (the default) measured the ranking without the prior
	// too and kept the better schedule.
	with, ok := b.Manifest.Metrics[localize.WithPriorAUCMetric]
	require.True(t, ok)
	without, ok := b.Manifest.Metrics[localize.WithoutPriorAUCMetric]
	require.True(t, ok)
	require.Equal(t, without > with+1e-12, b.Manifest.Solve.Variant == localize.NoPrior)
	verdict = "used"
	if without > with+1e-12 {
		verdict = "dropped"
		require.Contains(t, inspect, "schedule noprior (the data term alone in both stages)")
	} else {
		require.Contains(t, inspect, "schedule datainit (the data term, then L_pred)")
	}
	require.Contains(t, inspect, fmt.Sprintf("prior term  %s (validation ROC-AUC with it: %s; without: %s)\n", verdict, distinct(with, without), distinct(without, with)))

	obs := `{"infected":["0","1","2","3","7","13"]}`
	calibration := &localize.Calibration{ComponentSizes: []int{1}, Classes: []localize.CalibrationSteps{
		{Scores: []float64{1}, Probabilities: []float64{1}},
		{Scores: []float64{0.5, 1}, Probabilities: []float64{0.2, 0.4}},
	}}
	for _, tc := range []struct {
		ranking    localize.Ranking
		lone       bool
		calibrated bool
		text       string
	}{
		{localize.InfectedFirst, false, false, ""},
		{localize.InfectedThenPredicted, true, false, "; lone infected first"},
		{localize.InfectedFirst, false, true, "; calibrated by component size"},
	} {
		r := tc.ranking
		b.Manifest.Ranking = r
		b.Manifest.LoneInfectedFirst = tc.lone
		b.Manifest.Calibration = nil
		if tc.calibrated {
			b.Manifest.Calibration = calibration
		}
		require.NoError(t, b.WriteFile(bundle))
		out, _, err := runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
		require.NoError(t, err)
		// The floor's phrase goes before the calibration's.
		text := tc.text
		if b.Manifest.NamesInfectedComponents() {
			floor := "; every lone infected node and infected component named"
			if tc.calibrated {
				text = floor + text
			} else {
				text += floor
			}
		}
		require.Regexp(t, `6 infected; .*; `+string(r)+text+`; \d+ suspected source`, out)
		out, _, err = runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--json", "--top", "10", "--log-level", "warn")
		require.NoError(t, err)
		var got localizeOutput
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		require.Equal(t, r, got.Ranking)
		require.Equal(t, b.Manifest.LoneInfectedFirst, got.LoneInfectedFirst)
		require.Equal(t, tc.calibrated, got.Calibrated)
		require.Len(t, got.Top, 10)
		infected := map[string]bool{"0": true, "1": true, "2": true, "3": true, "7": true, "13": true}
		for i, s := range got.Top {
			require.Equal(t, i < 6, infected[s.Node], "%s: rank %d is node %s", r, i+1, s.Node)
		}
	}

	out, bundle, _ := trainSmall(t, "--val-solves", "8", "--opt-steps", "10", "--ranking", "score",
		"--forward-param", fmt.Sprintf("steps=%d", icmf.DefaultSteps), "--forward-param", fmt.Sprintf("p=%g", icmf.DefaultP))
	// The forward line names the params the bundle records, sorted.
	require.Contains(t, out, fmt.Sprintf("forward     icmf 1.0.0 (p=%g, steps=%d)  val MSE", icmf.DefaultP, icmf.DefaultSteps))
	// What needs the infected first says why it is missing, unlike a
	// bundle of a format that predates it.
	require.Contains(t, out, "lone nodes  not tried (the ranking is by score")
	require.Contains(t, out, "calibration not tried (the ranking is by score")
	b, err = localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	// Simulated cascades give the forward floor to read the fit against,
	// and a fit far above it is called out.
	floor := b.Manifest.Metrics[localize.ForwardFloorMetric]
	require.Positive(t, floor)
	// The floor is read against the error on the test cascades, which the
	// fit's early stopping did not see.
	val := b.Manifest.Metrics["forward_val_mse"]
	mse := b.Manifest.Metrics[localize.ForwardTestMSEMetric]
	require.Positive(t, mse)
	require.NotEqual(t, val, mse)
	require.Contains(t, out, fmt.Sprintf("val MSE %.4f  test MSE %.4f (floor %.4f: %+.0f%%)", val, mse, floor, 100*(mse/floor-1)))
	if localize.PoorFit(mse, floor) {
		require.Contains(t, out, "note        the forward model's error is")
	} else {
		require.NotContains(t, out, "note        the forward model's error is")
	}
	require.Equal(t, localize.RankByScore, b.Manifest.Ranking)
	require.False(t, b.Manifest.LoneInfectedFirst)
	require.NotContains(t, b.Manifest.Metrics, localize.RankingAUCMetric(localize.InfectedFirst))
	require.NotContains(t, b.Manifest.Metrics, localize.LoneFirstAUCMetric)
	require.NotContains(t, b.Manifest.Metrics, localize.CalibratedAUCMetric)
	require.Nil(t, b.Manifest.Calibration)

	_, bundle, _ = trainSmall(t, "--val-solves", "8", "--opt-steps", "10", "--prior", "on")
	b, err = localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.Equal(t, localize.DataInit, b.Manifest.Solve.Variant)
	require.NotContains(t, b.Manifest.Metrics, localize.WithPriorAUCMetric)
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--prior", "off",
		"--plugin-dir", t.TempDir(), "--out", bundle, "--log-level", "warn")
	require.ErrorContains(t, err, `--prior: want auto or on, got "off"`)

	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--ranking", "infected",
		"--plugin-dir", t.TempDir(), "--out", bundle, "--log-level", "warn")
	require.ErrorContains(t, err, `--ranking: want auto or score, got "infected"`)
}

// TestTrainThenLocalize trains a small bundle on karate with the real icmf
// plugin process, then localizes observations with it from the CLI.
func TestTrainThenLocalize(t *testing.T) {
	bundle, pluginDir := trainTestBundle(t)
	dir := t.TempDir()

	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.Equal(t, 34, b.Manifest.Graph.Nodes)
	require.Len(t, b.Manifest.Forward.SHA256, 64)
	require.Contains(t, b.Manifest.Metrics, "test_f1")
	require.Contains(t, b.Manifest.Metrics, "val_f1")
	// The held-out sets' sizes, for the summary's note on large sets.
	require.Contains(t, b.Manifest.Metrics, localize.TestNamedMetric)
	require.GreaterOrEqual(t, b.Manifest.Metrics[localize.TestNamedMetric], 1.0, "every set names at least one node: a count, or the floor")
	require.Greater(t, b.Manifest.Metrics[localize.TestSourcesMetric], 0.0)
	// The step counts delta was chosen with travel in the bundle, so the
	// daemon solves with them too.
	require.Equal(t, 10, b.Manifest.Solve.InitSteps)
	require.Equal(t, 30, b.Manifest.Solve.OptSteps)
	require.Equal(t, 10, b.Options().InitSteps)
	require.Equal(t, localize.DataInit, b.Options().Variant, "datainit unless --schedule says otherwise")
	require.Equal(t, int64(3), b.VAE.Config().Seed, "--seed 3 seeds the prior too")
	out, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	require.Contains(t, out, "10 + 30 steps, 4 restarts, schedule datainit (the data term, then L_pred)")
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--init-steps", "-1",
		"--out", filepath.Join(dir, "x.swb"), "--log-level", "warn")
	require.ErrorContains(t, err, "--init-steps -1")
	// A bad schedule is refused before any cascade is simulated or plugin
	// started (there is no plugin directory here).
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--schedule", "fast",
		"--plugin-dir", t.TempDir(), "--out", filepath.Join(dir, "x.swb"), "--log-level", "warn")
	require.ErrorContains(t, err, `--schedule "fast": want datainit or paper`)
	// So is an output directory that does not exist.
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--plugin-dir", t.TempDir(), "--out", filepath.Join(dir, "missing", "x.swb"), "--log-level", "warn")
	require.ErrorContains(t, err, "directory "+filepath.Join(dir, "missing")+" does not exist")
	// And a path whose directory is a file.
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--plugin-dir", t.TempDir(), "--out", filepath.Join(file, "x.swb"), "--log-level", "warn")
	require.ErrorContains(t, err, file+" is not a directory")

	// JSON output, observation from stdin, two observations as JSONL.
	obs := `{"infected":["0","1","2","3","7","13"]}` + "\n" + `{"infected":["33","32","8","30"]}` + "\n"
	out, _, err = runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	for i, line := range lines {
		var got localizeOutput
		require.NoError(t, json.Unmarshal([]byte(line), &got))
		require.Equal(t, i+1, got.Observation)
		require.Equal(t, b.Manifest.ID, got.Bundle)
		require.NotEmpty(t, got.Top)
		cut := got.Sources[:len(got.Sources)-got.FloorNamed]
		for _, s := range cut {
			require.GreaterOrEqual(t, s.Score, got.Threshold)
		}
		for _, s := range got.Sources[len(cut):] {
			require.LessOrEqual(t, s.Score, got.Threshold, "the floor's below the cut")
		}
	}

	// Readable output names nodes of the graph.
	obsFile := filepath.Join(dir, "obs.json")
	require.NoError(t, os.WriteFile(obsFile, []byte(`{"infected":["33","32","8"]}`), 0o644))
	out, _, err = runCmd(t, "", "localize", "--bundle", bundle, "--observation", obsFile, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "3 infected; threshold delta")
	require.Contains(t, out, "rank  node")

	// Bad input is named.
	_, _, err = runCmd(t, `{"infected":["0","nope"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.ErrorContains(t, err, `<stdin>:1: unknown node "nope"`)
	// Every line's ids are checked before the plugin starts: a bad id on
	// line 3 is named on stderr even with no plugin to start.
	_, stderr, err := runCmd(t, "{\"infected\":[\"0\"]}\n\n{\"infected\":[\"1\",\"nope\"]}\n", "localize", "--bundle", bundle,
		"--plugin-dir", t.TempDir(), "--log-level", "warn")
	require.Error(t, err)
	require.Contains(t, stderr, `<stdin>:3: unknown node "nope" (the graph's ids look like "0", "1", "2") (the bundle's graph: `)
	// A bad line loses only itself: each is named on stderr, every good
	// one is answered in order, and the exit fails at the end saying how
	// many were bad. The --json stream holds answers only, numbered as
	// the observations they answer (the bad ones leave gaps).
	batch := "{\"infected\":[\"0\",\"1\"]}\n{\"infected\":[\"5OO\"]}\nnot json\n\n{\"infected\":[]}\n{\"infected\":[\"33\",\"32\"],\"id\":\"last\"}\n"
	out, stderr, err = runCmd(t, batch, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.EqualError(t, err, "<stdin>: 3 of 5 observations bad (each named above), not localized; the other 2 answered")
	require.Contains(t, stderr, "<stdin>:2: unknown node \"5OO\"")
	require.Contains(t, stderr, "<stdin>:3: want {\"infected\":[ids...]}: invalid character 'o'")
	require.Contains(t, stderr, "<stdin>:5: \"infected\" is empty")
	answers := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, answers, 2)
	for i, want := range []struct {
		n  int
		id string
	}{{1, ""}, {5, "last"}} {
		var got localizeOutput
		require.NoError(t, json.Unmarshal([]byte(answers[i]), &got))
		require.Equal(t, want.n, got.Observation)
		require.Equal(t, want.id, got.ID)
		require.Equal(t, 2, got.Infected)
	}
	out, _, err = runCmd(t, batch, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.ErrorContains(t, err, "3 of 5 observations bad")
	require.Contains(t, out, "observation 1\n2 infected;")
	require.Contains(t, out, "observation 5 (last)\n2 infected;")
	// Every line bad: nothing to answer, and no plugin is started.
	_, stderr, err = runCmd(t, "{\"infected\":[\"5OO\"]}\nnot json\n", "localize", "--bundle", bundle, "--plugin-dir", t.TempDir(), "--log-level", "warn")
	require.EqualError(t, err, "<stdin>: all 2 observations are bad (each named above); nothing to localize")
	require.Contains(t, stderr, "<stdin>:1: unknown node \"5OO\"")
	require.Contains(t, stderr, "<stdin>:2: want")
	// A JSONL of one line fails with that line's error, as one object does.
	_, _, err = runCmd(t, "not json\n", "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.ErrorContains(t, err, "<stdin>:1: want")
	// An observation that says nothing is refused, not localized as
	// "0 infected".
	for _, tc := range []struct{ in, want string }{
		{`{}`, `<stdin>:1: no "infected" field`},
		{`null`, `<stdin>:1: no "infected" field`},
		{`{"infected":[]}`, `<stdin>:1: "infected" is empty`},
		{`{"infectd":["0"],"id":"a"}`, `<stdin>:1: no "infected" field (its keys: "id", "infectd")`},
		{`{"infected":null}`, `<stdin>:1: "infected" is null`},
		{"{\n  \"infected\": []\n}\n", `<stdin>: "infected" is empty`},
		// Type errors in the file's terms, not Go's.
		{`["0","1"]`, `<stdin>:1: want {"infected":[ids...]}: found a JSON array, not an object`},
		{`{"infected":"0"}`, `<stdin>:1: want {"infected":[ids...]}: "infected" holds a JSON string where it wants an array of node ids`},
		{`{"infected":[0,1]}`, `<stdin>:1: want {"infected":[ids...]}: "infected" holds a number: node ids are strings ("7", not 7)`},
		{`{"infected":["0"],"id":{"n":7}}`, `<stdin>:1: want {"infected":[ids...]}: "id" holds an object where it wants a string or a number`},
		{`{"infected":["1"],"INFECTED":["5"]}`, `<stdin>:1: "INFECTED" is given twice (keys match in any case)`},
	} {
		_, _, err = runCmd(t, tc.in, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
		require.ErrorContains(t, err, tc.want, "input %q", tc.in)
	}
	// An observation's own id is echoed, so a batch can be matched to its
	// answers; a byte-order mark (Windows editors write one) is skipped.
	out, _, err = runCmd(t, "\ufeff{\"infected\":[\"33\",\"32\",\"8\"],\"id\":\"incident-7\"}\n{\"infected\":[\"0\",\"1\"]}\n", "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "observation 1 (incident-7)\n3 infected;")
	require.Contains(t, out, "observation 2\n2 infected;")
	out, _, err = runCmd(t, `{"infected":["33","32","8"],"id":"incident-7"}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn", "--json")
	require.NoError(t, err)
	var echoed localizeOutput
	require.NoError(t, json.Unmarshal([]byte(out), &echoed))
	require.Equal(t, "incident-7", echoed.ID)
	// A cascade file's line is an observation: its sources are not read,
	// nor the keys of a recorded file's own that train skips too; a
	// numeric id is echoed as written.
	out, _, err = runCmd(t, `{"sources":["33"],"infected":["33","32","8"],"times":{"33":0,"32":1,"8":1}}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "3 infected; threshold delta")
	out, _, err = runCmd(t, "{\"id\":7,\"date\":\"2026-11-02\",\"sources\":[\"33\"],\"infected\":[\"33\",\"32\",\"8\"]}\n{\"infected\":[\"0\",\"1\"],\"region\":{\"n\":1}}\n",
		"localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "observation 1 (7)\n3 infected;")
	require.Contains(t, out, "observation 2\n2 infected;")
	// One infected node of 34 is far below the training snapshots: said.
	out, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "note: 2.9% of the nodes infected, outside the ")
	// A node listed twice counts once.
	out, _, err = runCmd(t, `{"infected":["33","32","8","33","8"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "3 infected; threshold delta")
	_, _, err = runCmd(t, "", "localize", "--bundle", bundle, "--graph", "../../diffusion/testdata/karate.edges", "--directed",
		"--plugin-dir", pluginDir, "--log-level", "warn")
	require.ErrorIs(t, err, localize.ErrGraphMismatch)

	// A plugin binary that is not the one the bundle recorded is refused.
	other := filepath.Join(t.TempDir(), "sourcewatch-forward-icmf")
	data, err := os.ReadFile(filepath.Join(pluginDir, "sourcewatch-forward-icmf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, append(data, 0), 0o755))
	_, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", bundle, "--plugin-dir", filepath.Dir(other), "--log-level", "warn")
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, b.Manifest.Forward.SHA256)
	require.ErrorContains(t, err, "point plugin_dir or --plugin-dir at the build it was trained with (kept aside at an upgrade), retrain the bundle with this build or, if this build is a trusted one of the same model, pin its sha256", "the error says what to do")
	// ... and what it says works: pinning the rebuild's SHA-256 runs it.
	otherSum := sha256.Sum256(append(data, 0))
	out, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", bundle, "--plugin-dir", filepath.Dir(other),
		"--forward-checksum", hex.EncodeToString(otherSum[:]), "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "1 infected;")
	_, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", bundle, "--plugin-dir", filepath.Dir(other),
		"--forward-checksum", "abc", "--log-level", "warn")
	require.ErrorContains(t, err, `--forward-checksum: "abc" is not a SHA-256`)
	_, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--threshold", "1.5", "--log-level", "warn")
	require.ErrorContains(t, err, "--threshold: 1.5 outside [0, 1]", "the flag, not the observation file, is named")

	// bundle inspect reads the bundle as localize does, prints what train
	// printed, and fails when the plugin is not the recorded build.
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	for _, want := range []string{"bundle      " + bundle + "  (" + b.Manifest.ID + ")", "graph       karate: 34 nodes, 78 edges",
		"inference   10 + 30 steps", "test        F1 ", `"cascades":`, "plugin      " + filepath.Join(pluginDir, "sourcewatch-forward-icmf") + ": match"} {
		require.Contains(t, out, want)
	}
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", filepath.Dir(other))
	require.ErrorIs(t, err, errPluginMismatch)
	require.Contains(t, out, ": differs (recorded "+b.Manifest.Forward.SHA256[:12])
	require.Contains(t, out, "pin its SHA-256 (--forward-checksum "+hex.EncodeToString(otherSum[:])+", forward_checksum)", "the whole SHA-256, to pin")
	// Pinned as localize pins it, the rebuild matches.
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", filepath.Dir(other), "--forward-checksum", hex.EncodeToString(otherSum[:]))
	require.NoError(t, err)
	require.Contains(t, out, ": match (the pinned SHA-256; the bundle recorded "+b.Manifest.Forward.SHA256[:12]+")")
	// A plugin reporting another version than the bundle recorded (a
	// script's code changed behind an unchanged script) is refused unless
	// pinned.
	full, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	full.Manifest.Forward.Version = "0.9.0"
	older := filepath.Join(t.TempDir(), "older.swb")
	require.NoError(t, full.WriteFile(older))
	_, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", older, "--plugin-dir", pluginDir, "--log-level", "warn")
	require.ErrorIs(t, err, forward.ErrVersion)
	require.ErrorContains(t, err, `reports version "1.0.0", want "0.9.0" (the version bundle `+full.Manifest.ID+` was trained with`)
	_, _, err = runCmd(t, `{"infected":["0"]}`, "localize", "--bundle", older, "--plugin-dir", pluginDir,
		"--forward-checksum", b.Manifest.Forward.SHA256, "--log-level", "warn")
	require.NoError(t, err, "pinned, the build is vouched for")
	out, _, err = runCmd(t, "", "bundle", "inspect", older, "--plugin-dir", pluginDir)
	require.ErrorIs(t, err, errPluginMismatch, "inspect refuses what localize refuses")
	require.Contains(t, out, `: differs (the recorded build, but it reports version "1.0.0" where the bundle recorded "0.9.0"`)
	_, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir, "--forward-checksum", hex.EncodeToString(otherSum[:]))
	require.ErrorIs(t, err, errPluginMismatch, "pinned, the recorded build is not the one")
	_, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", t.TempDir())
	require.ErrorIs(t, err, errPluginMismatch)
	require.ErrorContains(t, err, ": missing: ")
	// A copy that lost its execute bit is there but cannot run.
	noExec := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noExec, "sourcewatch-forward-icmf"), data, 0o644))
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", noExec)
	require.ErrorIs(t, err, errPluginMismatch)
	require.ErrorContains(t, err, ": unusable: ")
	require.Contains(t, out, "is not an executable file")
	out, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", "", "--json")
	require.NoError(t, err, "no plugin check without a plugin dir")
	var report struct {
		Manifest localize.Manifest `json:"manifest"`
		Plugin   *pluginCheck      `json:"plugin"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	require.Equal(t, b.Manifest.ID, report.Manifest.ID)
	require.Equal(t, b.Manifest.Metrics, report.Manifest.Metrics)
	require.Nil(t, report.Plugin)
	corrupt := filepath.Join(t.TempDir(), "corrupt.swb")
	raw, err := os.ReadFile(bundle)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0xff
	require.NoError(t, os.WriteFile(corrupt, raw, 0o644))
	_, _, err = runCmd(t, "", "bundle", "inspect", corrupt, "--plugin-dir", pluginDir)
	require.ErrorContains(t, err, `loading bundle "`+corrupt+`"`)
	matched, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir, "--graph", "../../configs/demo/karate.edges")
	require.NoError(t, err)
	require.Contains(t, matched, "graph file  ../../configs/demo/karate.edges: match\n", "the check is said to have been made")
	plain, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	require.NotContains(t, plain, "graph file ", "no --graph, no line")
	_, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir, "--graph", "../../configs/demo/karate.edges", "--directed")
	require.ErrorIs(t, err, localize.ErrGraphMismatch)
	// A bundle that records no plugin checksum is reported, not refused:
	// localize and serve run it with allow_unverified.
	unrecorded, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	unrecorded.Manifest.Forward.SHA256 = ""
	path := filepath.Join(t.TempDir(), "unrecorded.swb")
	require.NoError(t, unrecorded.WriteFile(path))
	out, _, err = runCmd(t, "", "bundle", "inspect", path, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	require.Contains(t, out, ": unrecorded (the bundle records no SHA-256; localize and serve run it only with allow_unverified)")
}

// Trained on SIR cascades, where recovered sources are observed
// uninfected, deepis fits its source gate and the summary and bundle
// inspect say how open it is; trained on SI cascades it has no gate.
func TestTrainSIRFitsTheSourceGate(t *testing.T) {
	pluginDir := filepath.Dir(forwardtest.Build(t, "deepis"))
	for _, diffusion := range []string{"SI", "SIR"} {
		bundle := filepath.Join(t.TempDir(), "karate.swb")
		out, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
			"--diffusion", diffusion, "--beta", "0.3", "--gamma", "0.5", "--cascades", "60", "--seed", "3",
			"--forward", "deepis", "--plugin-dir", pluginDir, "--forward-epochs", "5", "--prior-epochs", "3",
			"--prototypes", "32", "--val-solves", "4", "--test-solves", "4", "--restarts", "4",
			"--init-steps", "5", "--opt-steps", "10", "--out", bundle, "--log-level", "warn")
		require.NoError(t, err)
		b, err := localize.LoadBundle(bundle, nil)
		require.NoError(t, err)
		rho, gated := b.Manifest.Metrics["forward_source_gate"]
		require.Equal(t, diffusion == "SIR", gated, "%s: the manifest records a fitted gate", diffusion)
		inspect, _, err := runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
		require.NoError(t, err)
		if !gated {
			require.NotContains(t, out, "source gate")
			require.NotContains(t, inspect, "source gate")
			continue
		}
		require.True(t, rho > 0 && rho < 1, "rho %v", rho)
		line := fmt.Sprintf("  source gate %.3f\n", rho)
		require.Contains(t, out, line)
		require.Contains(t, inspect, line)
	}

	_, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--diffusion", "SIR", "--cascades", "20", "--forward", "deepis", "--forward-param", "gate=sometimes",
		"--plugin-dir", pluginDir, "--out", filepath.Join(t.TempDir(), "x.swb"), "--log-level", "warn")
	require.ErrorContains(t, err, `param gate="sometimes": want auto, on or off`)
}

// Where every node is a source no ROC-AUC is defined: train still writes
// the bundle (JSON holds no NaN) and says n/a instead of a number.
func TestTrainEveryNodeASource(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(edges, []byte("a b\nb c\n"), 0o644))
	pluginDir := filepath.Dir(forwardtest.Build(t, "icmf"))
	bundle := filepath.Join(dir, "tiny.swb")
	out, _, err := runCmd(t, "", "train", "--graph", edges, "--diffusion", "SI", "--sources", "3", "--cascades", "30",
		"--forward", "icmf", "--plugin-dir", pluginDir, "--prior-epochs", "2", "--prototypes", "8",
		"--test-solves", "4", "--restarts", "2", "--init-steps", "2", "--out", bundle, "--log-level", "error")
	require.NoError(t, err)
	require.Contains(t, out, "ROC-AUC n/a")
	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	require.NotContains(t, b.Manifest.Metrics, "test_auc")
	require.NotContains(t, b.Manifest.Metrics, localize.WithPriorAUCMetric)
}

// A plugin whose VJP disagrees with its own Predict, or whose own fused
// data-term call disagrees with both, still trains, but the summary (and
// bundle inspect, which prints it) and localize say so, naming the check
// that finds where, and train exits non-zero unless --allow-bad-gradient;
// a sound one says nothing.
func TestTrainSpotChecksTheVJP(t *testing.T) {
	dir := t.TempDir()
	tiny := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(tiny, []byte("a b\nb c\nc d\n"), 0o644))
	// On a ring of 400 the spot check's 8 coordinates miss the one node
	// fault grad gets wrong (the last) 49 times in 50; its random
	// directions read every node.
	var ring strings.Builder
	for v := range 400 {
		fmt.Fprintf(&ring, "%d %d\n", v, (v+1)%400)
	}
	large := filepath.Join(dir, "ring.edges")
	require.NoError(t, os.WriteFile(large, []byte(ring.String()), 0o644))
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	icmf := forwardtest.Build(t, "icmf")
	for _, tc := range []struct {
		plugin string
		edges  string
		params []string
		note   string // "" for a sound plugin
	}{
		{faulty, tiny, []string{"--forward-param", "fault=grad"}, "the forward model's VJP disagrees with finite differences of its own Predict"},
		{faulty, large, []string{"--forward-param", "fault=grad"}, "the forward model's VJP disagrees with finite differences of its own Predict"},
		// Predict and VJP right, the fused call inference makes wrong.
		{faulty, tiny, []string{"--forward-param", "fault=fused"}, "the forward model's fused data-term call disagrees with its own Predict and VJP"},
		{icmf, tiny, nil, ""},
		{icmf, large, nil, ""},
	} {
		name := strings.TrimPrefix(filepath.Base(tc.plugin), forward.BinaryPrefix)
		bundle := filepath.Join(dir, name+filepath.Base(tc.edges)+strings.Join(tc.params, "")+".swb")
		args := append([]string{"train", "--graph", tc.edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
			"--forward", name, "--plugin-dir", filepath.Dir(tc.plugin), "--prior-epochs", "2", "--prototypes", "8",
			"--test-solves", "4", "--restarts", "2", "--init-steps", "2", "--out", bundle, "--log-level", "error"}, tc.params...)
		out, _, err := runCmd(t, "", args...)
		if tc.note == "" {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, "bundle "+bundle+" written, but the forward model's gradient failed train's spot check")
			require.ErrorContains(t, err, "or pass --allow-bad-gradient")
			if strings.Contains(tc.params[1], "fused") {
				// Accepted as it is: the same bundle, exit status 0.
				_, _, err = runCmd(t, "", append(args, "--allow-bad-gradient")...)
				require.NoError(t, err)
			}
		}
		// localize answers, and warns on stderr of such a bundle.
		obs := `{"infected":["b","c"]}`
		if tc.edges == large {
			obs = `{"infected":["1","2"]}`
		}
		answer, warned, err := runCmd(t, obs, "localize", "--bundle", bundle,
			"--plugin-dir", filepath.Dir(tc.plugin), "--log-level", "error")
		require.NoError(t, err)
		require.Contains(t, answer, "suspected source(s)")
		if tc.note == "" {
			require.NotContains(t, out, "disagrees")
			require.NotContains(t, warned, "disagrees")
			continue
		}
		require.Contains(t, out, tc.note)
		require.Contains(t, warned, "warning: "+bundle+": "+tc.note)
		require.Contains(t, out, "run sourcewatch plugin check faulty")
		b, err := localize.LoadBundle(bundle, nil)
		require.NoError(t, err)
		require.Greater(t, max(b.Manifest.Metrics[localize.VJPCheckMetric], b.Manifest.Metrics[localize.FusedCheckMetric]), 1.0)
	}
}

// A plugin that panics in a call fails train with the panic's site and
// a pointer to plugin check, which runs the calls one by one.
func TestTrainPointsAPanickingPluginAtPluginCheck(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(edges, []byte("a b\nb c\nc d\n"), 0o644))
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	_, _, err := runCmd(t, "", "train", "--graph", edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
		"--forward", "faulty", "--plugin-dir", filepath.Dir(faulty), "--forward-param", "fault=panic",
		"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--restarts", "2", "--init-steps", "2",
		"--out", filepath.Join(dir, "panic.swb"), "--log-level", "error")
	require.ErrorIs(t, err, forward.ErrPluginPanic)
	require.ErrorContains(t, err, "plugin panic: runtime error: index out of range")
	require.ErrorContains(t, err, "(sourcewatch plugin check faulty --plugin-dir "+filepath.Dir(faulty)+" checks the plugin call by call)")
}

// What a plugin's own reports cannot show is said, not printed as a
// number: a NaN val_mse gives way to the host's own, another NaN metric
// is warned of, and a spot check
// whose derivatives were all 0 (a saturated model) warns that it proved
// nothing.
func TestTrainSeesThroughNaNMetricsAndFlatChecks(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(edges, []byte("a b\nb c\nc d\nd e\n"), 0o644))
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	var stderr string
	train := func(fault string) (string, *localize.Bundle) {
		bundle := filepath.Join(dir, fault+".swb")
		out, errOut, err := runCmd(t, "", "train", "--graph", edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
			"--forward", "faulty", "--plugin-dir", filepath.Dir(faulty), "--forward-param", "fault="+fault,
			"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--restarts", "2", "--init-steps", "2",
			"--out", bundle, "--log-level", "warn")
		require.NoError(t, err)
		stderr = errOut
		b, err := localize.LoadBundle(bundle, nil)
		require.NoError(t, err)
		return out, b
	}
	const flat = "the forward model's gradient was 0 at every coordinate of train's spot check"

	out, b := train("nanmetric")
	// A NaN metric the host has no value of its own for is said, not
	// dropped from the bundle without a word.
	require.NotContains(t, b.Manifest.Metrics, "forward_train_mse")
	require.Regexp(t, `a training metric is not a finite number; the bundle leaves it out","metric":"forward_train_mse"`, stderr)
	require.NotContains(t, stderr, `"metric":"forward_val_mse"`, "the host's own replaces it")
	mse, ok := b.Manifest.Metrics["forward_val_mse"]
	require.True(t, ok, "the host's own validation error replaces the NaN")
	require.Equal(t, b.Manifest.Metrics["noise_variance"], mse)
	require.Greater(t, mse, 0.0)
	require.Contains(t, out, fmt.Sprintf("val MSE %.4f", mse))
	require.NotContains(t, out, flat)

	// A plugin whose val_mse is its own kind of error (summed over the
	// nodes) does not take the place of the host's: the weight, the floor
	// and the summary read the host's, and the plugin's is kept beside it.
	out, b = train("valsum")
	mse = b.Manifest.Metrics["forward_val_mse"]
	require.Equal(t, b.Manifest.Metrics["noise_variance"], mse)
	own := b.Manifest.Metrics[localize.PluginValMSEMetric]
	require.InDelta(t, 5*mse, own, 1e-9, "the sum over 5 nodes")
	require.Contains(t, out, fmt.Sprintf("val MSE %.4f (the plugin's own val_mse: %.4g)", mse, own))

	out, b = train("flat")
	require.Equal(t, 1.0, b.Manifest.Metrics[localize.VJPFlatMetric])
	require.Contains(t, out, flat)
	require.Contains(t, b.Manifest.VJPCheckFailure("/x/bin"), "plugin check faulty --plugin-dir /x/bin")
}

// A model that saturates where half the nodes are sources (icmf with p
// 0.9 on a complete graph: dy_v/dx_v = prod_u (1 - 0.9 x_u), about 1e-8
// at x in [0.1, 0.9]) is not flat where inference goes, a few sources
// among many nodes, where train's spot check looks: no warning.
func TestTrainSpotChecksWhereInferenceGoes(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "k30.edges")
	var b strings.Builder
	for u := range 30 {
		for v := u + 1; v < 30; v++ {
			fmt.Fprintf(&b, "%d %d\n", u, v)
		}
	}
	require.NoError(t, os.WriteFile(edges, []byte(b.String()), 0o644))
	icmf := forwardtest.Build(t, "icmf")
	bundle := filepath.Join(dir, "k30.swb")
	out, _, err := runCmd(t, "", "train", "--graph", edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
		"--forward", "icmf", "--plugin-dir", filepath.Dir(icmf), "--forward-param", "p=0.9", "--forward-param", "steps=1",
		"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--restarts", "2", "--init-steps", "2",
		"--out", bundle, "--log-level", "error")
	require.NoError(t, err)
	require.NotContains(t, out, "gradient was 0")
	bb, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	_, flat := bb.Manifest.Metrics[localize.VJPFlatMetric]
	require.False(t, flat)
	require.LessOrEqual(t, bb.Manifest.Metrics[localize.VJPCheckMetric], 1.0)
}

// A plugin whose Fit hangs is given up on after --fit-idle-timeout without
// a progress report, not after production's ten minutes.
func TestTrainFitIdleTimeout(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(edges, []byte("a b\nb c\nc d\n"), 0o644))
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	args := []string{"train", "--graph", edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
		"--forward", "faulty", "--plugin-dir", filepath.Dir(faulty), "--forward-param", "fault=hang",
		"--out", filepath.Join(dir, "h.swb"), "--log-level", "error"}
	_, _, err := runCmd(t, "", append(args, "--fit-idle-timeout", "0s")...)
	require.ErrorContains(t, err, "--fit-idle-timeout: 0s is not positive")
	_, _, err = runCmd(t, "", append(args, "--fit-idle-timeout", "500ms")...)
	require.ErrorContains(t, err, "fit: no progress within 500ms")
	require.ErrorIs(t, err, forward.ErrCallTimeout)
}

// A part of the graph the training cascades never reach (a component too
// small for the observed fraction) is warned of; the connected graph is not.
func TestTrainWarnsOfNodesNeverInfected(t *testing.T) {
	dir := t.TempDir()
	karate, err := os.ReadFile("../../configs/demo/karate.edges")
	require.NoError(t, err)
	edges := filepath.Join(dir, "two.edges")
	require.NoError(t, os.WriteFile(edges, append(karate, []byte("r1 r2\nr2 r3\nr3 r4\nr4 r5\nr5 r1\n")...), 0o644))
	icmf := forwardtest.Build(t, "icmf")
	const warning = "nodes never infected in any training cascade"
	for _, tc := range []struct {
		graph string
		warn  bool
	}{
		{edges, true},
		{"../../configs/demo/karate.edges", false},
	} {
		_, stderr, err := runCmd(t, "", "train", "--graph", tc.graph, "--diffusion", "SI", "--sources", "1", "--cascades", "40",
			"--forward", "icmf", "--plugin-dir", filepath.Dir(icmf), "--prior-epochs", "2", "--prototypes", "8",
			"--test-solves", "4", "--val-solves", "4", "--restarts", "2", "--init-steps", "2", "--out", filepath.Join(dir, "b.swb"))
		require.NoError(t, err)
		require.Equal(t, tc.warn, strings.Contains(stderr, warning), "%s: %s", tc.graph, stderr)
		if tc.warn {
			require.Contains(t, stderr, `"for_example":"r`)
		}
	}
}

func TestTiedWithLast(t *testing.T) {
	res := &localize.Result{Scores: []float64{0.9, 0.5, 0.5, 0.1, 0.5}, Sources: []int{0, 1}}
	require.Equal(t, []int{2, 4}, tiedWithLast(res))
	require.Nil(t, tiedWithLast(&localize.Result{Scores: []float64{0.5}}))
}

// Training on recorded cascades says which simulation flags it ignores,
// and says nothing when none is given.
func TestTrainCascadesFileWarnsOfSimulationFlags(t *testing.T) {
	pluginDir := filepath.Dir(forwardtest.Build(t, "icmf"))
	dir := t.TempDir()
	cascades := filepath.Join(dir, "recorded.jsonl")
	_, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--beta", "0.3",
		"--cascades", "40", "--seed", "5", "--out", cascades)
	require.NoError(t, err)
	base := []string{"train", "--graph", "../../configs/demo/karate.edges", "--cascades-file", cascades,
		"--forward", "icmf", "--plugin-dir", pluginDir, "--prior-epochs", "2", "--prototypes", "16",
		"--test-solves", "2", "--val-solves", "4", "--restarts", "2", "--init-steps", "3", "--opt-steps", "5",
		"--out", filepath.Join(dir, "k.swb"), "--log-format", "json"}
	const warning = "simulation flags are not used with recorded cascades"
	_, stderr, err := runCmd(t, "", append(base, "--beta", "0.9", "--diffusion", "IC")...)
	require.NoError(t, err)
	require.Contains(t, stderr, warning+", which are already spread and observed: --diffusion, --beta")
	// The spelling, --cascades with a file: the same training.
	viaCount := slices.Clone(base)
	viaCount[slices.Index(viaCount, "--cascades-file")] = "--cascades"
	_, stderr, err = runCmd(t, "", viaCount...)
	require.NoError(t, err)
	require.NotContains(t, stderr, warning)
	_, _, err = runCmd(t, "", append(slices.Clone(viaCount), "--cascades", filepath.Join(dir, "missing.jsonl"))...)
	require.ErrorContains(t, err, "--cascades: open ")
	_, _, err = runCmd(t, "", append(slices.Clone(base), "--cascades", filepath.Join(dir, "other.jsonl"))...)
	require.ErrorContains(t, err, "name the file of recorded cascades once")
	// simulate writes cascades: its --cascades is a count.
	_, _, err = runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", cascades)
	require.ErrorContains(t, err, "--cascades: \""+cascades+"\" is not a number of cascades")
	out, stderr, err := runCmd(t, "", base...)
	require.NoError(t, err)
	require.NotContains(t, stderr, warning)
	require.NotContains(t, stderr, "every node infected")
	require.NotContains(t, out, "(floor", "recorded cascades have no model to take a floor from")
	require.Contains(t, out, "chance      a node's chance of being a source, measured on the 4 validation cascades (no fresh ones to spare): ",
		"nor fresh cascades to fit the source chance on")
	require.NotContains(t, stderr, `in neither \"infected\"`)

	// Valid but suspect recorded cascades are named: every node infected,
	// and a source in neither "infected" nor "recovered".
	ids := make([]string, 34)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", strconv.Itoa(i))
	}
	f, err := os.OpenFile(cascades, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "{\"sources\":[\"0\"],\"infected\":[%s]}\n{\"sources\":[\"0\",\"5\"],\"infected\":[\"1\",\"5\"],\"id\":\"incident-7\"}\n"+
		// "recovered" lists other nodes, not the missing source.
		"{\"sources\":[\"2\",\"6\"],\"infected\":[\"6\",\"7\"],\"recovered\":{\"8\":1}}\n"+
		// A recovered source is accounted for.
		"{\"sources\":[\"9\"],\"infected\":[\"10\"],\"recovered\":{\"9\":1}}\n", strings.Join(ids, ","))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, stderr, err = runCmd(t, "", base...)
	require.NoError(t, err)
	require.Contains(t, stderr, "1 of 44 cascades have every node infected (line 41 of recorded.jsonl)")
	require.Contains(t, stderr, `2 of 44 cascades have a source that is in neither \"infected\" nor \"recovered\" (lines 42, 43 of recorded.jsonl)`)
	require.NotContains(t, stderr, "repeat an earlier line")
	require.NotContains(t, stderr, "infect only their sources")

	// Copies of a cascade (the file concatenated with itself) would sit on
	// both sides of the split; snapshots of the sources alone name them.
	data, err := os.ReadFile(cascades)
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(data), "\n")
	only := strings.Repeat("{\"sources\":[\"3\",\"4\"],\"infected\":[\"4\",\"3\"]}\n", 6)
	require.NoError(t, os.WriteFile(cascades, []byte(string(data)+first+"\n"+first+"\n"+only), 0o600))
	_, stderr, err = runCmd(t, "", base...)
	require.NoError(t, err)
	require.Contains(t, stderr, "7 of 52 cascades repeat an earlier line's sources and infected nodes (lines 45, 46, 48, 49, 50 and 2 more of recorded.jsonl)")
	require.Contains(t, stderr, "6 of 52 cascades infect only their sources (lines 47, 48, 49, 50, 51 and 1 more of recorded.jsonl)")
}

func TestDistinctTellsCloseNumbersApart(t *testing.T) {
	require.Equal(t, "0.950", distinct(0.9496, 0.9610))
	require.Equal(t, "0.9496", distinct(0.9496, 0.9503))
	require.Equal(t, "0.9503", distinct(0.9503, 0.9496))
	require.Equal(t, "0.500000", distinct(0.5, 0.5))
}

func TestCascadesCountOrFile(t *testing.T) {
	for _, tc := range []struct {
		in    string
		count bool
	}{
		{"300", true}, {" 300 ", true}, {"0x10", true}, {"1_000", true}, {"-1", true},
		{"hist.jsonl", false}, {"./300", false}, {"3e2", false},
	} {
		require.Equal(t, tc.count, isCount(tc.in), "%q", tc.in)
	}
}

// Under SI the cascades spread along every arc alike, so a weighted
// graph's weights are not in the data: train gives the forward model the
// graph without them and records so, and localize and bundle inspect
// follow the record. Weights of 1 read as infection probabilities
// saturated icmf after one step; now the bundle is the one the unweighted
// list trains, metric for metric. Under IC, which reads the weights, they
// stay.
func TestTrainDropsWeightsTheSpreadIgnores(t *testing.T) {
	data, err := os.ReadFile("../../configs/demo/karate.edges")
	require.NoError(t, err)
	var b strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b.WriteString(line + " 1\n")
	}
	weighted := filepath.Join(t.TempDir(), "karate-weighted.edges")
	require.NoError(t, os.WriteFile(weighted, []byte(b.String()), 0o600))

	_, plain, pluginDir := trainSmall(t)
	_, heavy, _ := trainSmall(t, "--graph", weighted)
	pb, err := localize.LoadBundle(plain, nil)
	require.NoError(t, err)
	wb, err := localize.LoadBundle(heavy, nil)
	require.NoError(t, err)
	require.True(t, wb.Graph.Weighted())
	require.True(t, wb.Manifest.Forward.IgnoreWeights)
	require.False(t, pb.Manifest.Forward.IgnoreWeights)
	for _, k := range []string{"forward_val_mse", "val_f1", "test_f1", "test_auc"} {
		require.Contains(t, pb.Manifest.Metrics, k)
		require.Equal(t, pb.Manifest.Metrics[k], wb.Manifest.Metrics[k], k)
	}

	obs := `{"infected":["0","1","2","3","7","13"]}`
	var want, got localizeOutput
	out, _, err := runCmd(t, obs, "localize", "--bundle", plain, "--graph", "../../configs/demo/karate.edges", "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &want))
	out, _, err = runCmd(t, obs, "localize", "--bundle", heavy, "--graph", weighted, "--plugin-dir", pluginDir, "--json", "--log-level", "warn")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, want.Top, got.Top)

	out, _, err = runCmd(t, "", "bundle", "inspect", heavy, "--graph", weighted, "--plugin-dir", pluginDir)
	require.NoError(t, err)
	require.Contains(t, out, "weights     not read")

	_, ic, _ := trainSmall(t, "--graph", weighted, "--diffusion", "IC", "--p", "0.3")
	ib, err := localize.LoadBundle(ic, nil)
	require.NoError(t, err)
	require.False(t, ib.Manifest.Forward.IgnoreWeights, "IC reads the weights")
}

// A held-out line resting on a handful of cascades says so.
func TestSummaryNotesFewHeldOutCascades(t *testing.T) {
	for _, tc := range []struct {
		n    float64
		note bool
	}{{4, true}, {9, true}, {10, false}, {60, false}} {
		m := localize.Manifest{Metrics: map[string]float64{"test_f1": 0.4, "test_auc": 0.8, "test_cascades": tc.n}}
		var buf bytes.Buffer
		printBundleSummary(&buf, "x.swb", m, "", "")
		if tc.note {
			require.Contains(t, buf.String(), fmt.Sprintf("note        only %d held-out cascades: the test line is mostly noise at that size", int(tc.n)))
		} else {
			require.NotContains(t, buf.String(), "held-out cascades:", tc.n)
		}
	}
}

// A bundle whose held-out sets are five times the truth's size, and ten
// nodes or more, says so under its test line.
func TestSummaryNotesLargeSourceSets(t *testing.T) {
	for _, tc := range []struct {
		named, truth float64
		note         bool
	}{{56, 1, true}, {10, 2, true}, {9, 1, false}, {40, 10, false}, {0, 0, false}} {
		m := localize.Manifest{Metrics: map[string]float64{"test_f1": 0.1, "test_auc": 0.8, "test_cascades": 60, "test_precision": 0.02,
			localize.TestNamedMetric: tc.named, localize.TestSourcesMetric: tc.truth}}
		var buf bytes.Buffer
		printBundleSummary(&buf, "x.swb", m, "", "")
		if tc.note {
			require.Contains(t, buf.String(), fmt.Sprintf("note        on its test cascades the source set held %.1f nodes on average for %.1f true sources (test precision 0.020)", tc.named, tc.truth))
		} else {
			require.NotContains(t, buf.String(), "nodes on average", "%+v", tc)
		}
	}
	// An older bundle records neither: no note.
	var buf bytes.Buffer
	printBundleSummary(&buf, "x.swb", localize.Manifest{Metrics: map[string]float64{"test_f1": 0.1, "test_auc": 0.8, "test_cascades": 60}}, "", "")
	require.NotContains(t, buf.String(), "nodes on average")
}

// train refuses a plugin whose bundle could not run the model it
// measured: a fitted state Configure refuses or that restores another
// model, and an Info without a version, which the bundle records; a
// plugin's bad output names plugin check.
func TestTrainRefusesAModelItCannotStore(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "tiny.edges")
	require.NoError(t, os.WriteFile(edges, []byte("a b\nb c\nc d\n"), 0o644))
	built := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	plugins := filepath.Join(dir, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	raw, err := os.ReadFile(built)
	require.NoError(t, err)
	faulty := filepath.Join(plugins, filepath.Base(built))
	require.NoError(t, os.WriteFile(faulty, raw, 0o755))
	train := func(fault string) error {
		_, _, err := runCmd(t, "", "train", "--graph", edges, "--diffusion", "SI", "--sources", "1", "--cascades", "30",
			"--forward", "faulty", "--plugin-dir", plugins, "--forward-param", "fault="+fault,
			"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--restarts", "2", "--init-steps", "2",
			"--out", filepath.Join(dir, fault+".swb"), "--log-level", "error")
		return err
	}
	require.NoError(t, train("none"))

	err = train("forget")
	require.ErrorIs(t, err, localize.ErrStateNotRestored)
	require.ErrorContains(t, err, "predictions differ by up to")
	require.ErrorContains(t, err, "sourcewatch plugin check")
	require.NoFileExists(t, filepath.Join(dir, "forget.swb"))

	err = train("state")
	require.ErrorContains(t, err, "configuring with the state its Fit returned (10 bytes)")
	require.NoFileExists(t, filepath.Join(dir, "state.swb"))

	// A plugin's bad output is pointed at the check that finds which call.
	err = train("nan")
	require.ErrorIs(t, err, forward.ErrBadOutput)
	require.ErrorContains(t, err, "(sourcewatch plugin check faulty --plugin-dir "+plugins+" checks the plugin call by call)")

	// The test plugin reports the version in <binary>.version when there is one.
	require.NoError(t, os.WriteFile(faulty+".version", []byte("\n"), 0o644))
	err = train("none")
	require.ErrorIs(t, err, forward.ErrBadInfo)
	require.ErrorContains(t, err, "empty version (set Info.Version")
}

// A bundle whose forward state configures but leaves the model unusable
// (here empty: deepis then has no fitted weights) is refused when it is
// loaded, by bundle inspect and localize, not accepted and then failed at
// every inference.
func TestBundleWithAnEmptyForwardStateIsRefused(t *testing.T) {
	pluginDir := filepath.Dir(forwardtest.Build(t, "deepis"))
	bundle := filepath.Join(t.TempDir(), "karate.swb")
	_, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--diffusion", "SI", "--cascades", "40", "--seed", "3",
		"--forward", "deepis", "--plugin-dir", pluginDir, "--forward-epochs", "3", "--prior-epochs", "2",
		"--prototypes", "16", "--val-solves", "4", "--test-solves", "4", "--restarts", "2",
		"--init-steps", "2", "--opt-steps", "5", "--out", bundle, "--log-level", "warn")
	require.NoError(t, err)
	_, _, err = runCmd(t, "", "bundle", "inspect", bundle, "--plugin-dir", pluginDir)
	require.NoError(t, err)

	b, err := localize.LoadBundle(bundle, nil)
	require.NoError(t, err)
	b.ForwardState = nil
	empty := filepath.Join(t.TempDir(), "empty.swb")
	require.NoError(t, b.WriteFile(empty))
	out, _, err := runCmd(t, "", "bundle", "inspect", empty, "--plugin-dir", pluginDir)
	require.ErrorContains(t, err, "unusable")
	require.Contains(t, out, "the recorded build, but it cannot run this bundle's model: ")
	require.Contains(t, out, "configured with the bundle's 0-byte state cannot predict")
	_, _, err = runCmd(t, `{"infected":["1","2"]}`, "localize", "--bundle", empty, "--plugin-dir", pluginDir)
	require.ErrorContains(t, err, "configured with the bundle's 0-byte state cannot predict")
	require.ErrorIs(t, err, forward.ErrNotFitted)
}

// A state near what one call may carry is said with what it costs; a
// usual one (deepis's is under a kilobyte) is not.
func TestLargeStateNote(t *testing.T) {
	require.Empty(t, largeStateNote(701))
	require.Empty(t, largeStateNote(largeStateBytes-1))
	note := largeStateNote(160 << 20)
	require.Contains(t, note, "the forward model's state is 160 MiB")
	require.Contains(t, note, "refuses a call over 256 MiB")
}

// A directory given as --out is refused before any cascade is simulated or
// plugin started (there is no plugin here), not after training, when the
// bundle is renamed onto it.
func TestTrainRefusesDirectoryAsOut(t *testing.T) {
	dir := t.TempDir()
	_, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--plugin-dir", t.TempDir(), "--out", dir, "--log-level", "warn")
	require.ErrorContains(t, err, "--out "+dir+": is a directory")
}

// The fit line writes a plugin's counts whole: %.4g made a best epoch of
// 12345 read 1.234e+04, another number than the plugin reported.
func TestBundleSummaryFitLineWritesCountsWhole(t *testing.T) {
	var buf bytes.Buffer
	printBundleSummary(&buf, "x.swb", localize.Manifest{Metrics: map[string]float64{
		"forward_val_mse": 0.2, "forward_epochs": 20000, "forward_best_epoch": 12345, "forward_edge_scale": 0.620812345,
	}}, "", "")
	require.Contains(t, buf.String(), "\nfit         best_epoch 12345, edge_scale 0.6208, epochs 20000 (reported by the plugin)\n")
}

// --test-solves 0 solves every test cascade, as its error for -1 says;
// --help says so too.
func TestTrainHelpSaysWhatTestSolvesZeroDoes(t *testing.T) {
	out, _, err := runCmd(t, "", "train", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "test cascades solved for the held-out summary (0 = every test cascade)")
}

// The forward plugin is looked for, and --forward-param read, before any
// cascade is simulated: a misspelt --forward or a malformed param fails at
// once, not after minutes of simulation on a large graph. (The simulation
// here would fail too, on an observation target it cannot reach: the
// plugin's error comes first.)
func TestTrainFindsThePluginBeforeSimulating(t *testing.T) {
	icmfDir := filepath.Dir(forwardtest.Build(t, "icmf"))
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"missing plugin", []string{"--forward", "nope", "--plugin-dir", icmfDir},
			`forward plugin "nope": ` + filepath.Join(icmfDir, "sourcewatch-forward-nope") + " does not exist (the plugin dir holds "},
		{"malformed param", []string{"--forward", "icmf", "--plugin-dir", icmfDir, "--forward-param", "steps"},
			`--forward-param: want name=value[,name=value...], got "steps"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"train", "--graph", "../../configs/demo/karate.edges",
				"--diffusion", "SI", "--beta", "0.01", "--max-steps", "1", "--observe", "0.9", "--max-redraws", "1", "--cascades", "10",
				"--out", filepath.Join(t.TempDir(), "x.swb"), "--log-level", "warn"}, tc.flags...)
			_, _, err := runCmd(t, "", args...)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "observation target", "the simulation ran first")
		})
	}
}

// A --forward-param the plugin's Info does not list is refused before the
// fit, naming it, its likely meaning and the known params: a plugin that
// ignores a param it does not know (faulty's fault=lenient) would fit
// without the setting meant, and say nothing.
func TestTrainRefusesAParamThePluginDoesNotList(t *testing.T) {
	dir := t.TempDir()
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	train := func(param string) error {
		_, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--diffusion", "SI", "--cascades", "30",
			"--forward", "faulty", "--plugin-dir", filepath.Dir(faulty), "--forward-param", "fault=lenient", "--forward-param", param,
			"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--val-solves", "4", "--restarts", "2", "--init-steps", "2", "--opt-steps", "5",
			"--out", filepath.Join(dir, "x.swb"), "--log-level", "error")
		return err
	}
	require.EqualError(t, train("stesp=3"),
		"--forward-param stesp: forward plugin faulty has no such param; did you mean steps? (known: steps, p, fault, fault_after)")
	require.EqualError(t, train("zzz=3"),
		"--forward-param zzz: forward plugin faulty has no such param (known: steps, p, fault, fault_after)")
	require.NoFileExists(t, filepath.Join(dir, "x.swb"))
}

// A Fit metric whose name is empty or holds a space or control character
// (faulty's fault=metricname reports "val\nmse") is refused, naming the
// plugin and the metric, by the check plugin check applies: kept, it
// broke the summary's fit line and the bundle's forward_<name> metrics.
func TestTrainRefusesAMetricNameItCannotKeep(t *testing.T) {
	dir := t.TempDir()
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	bundle := filepath.Join(dir, "x.swb")
	_, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--diffusion", "SI", "--cascades", "30",
		"--forward", "faulty", "--plugin-dir", filepath.Dir(faulty), "--forward-param", "fault=metricname",
		"--prior-epochs", "2", "--prototypes", "8", "--test-solves", "4", "--val-solves", "4", "--restarts", "2", "--init-steps", "2", "--opt-steps", "5",
		"--out", bundle, "--log-level", "error")
	require.ErrorIs(t, err, forward.ErrBadOutput)
	require.ErrorContains(t, err, `training forward model "faulty": fit: bad forward model output: metric name "val\nmse": want a name that is not empty and holds no space or control character`)
	require.ErrorContains(t, err, "(sourcewatch plugin check faulty --plugin-dir "+filepath.Dir(faulty)+" checks the plugin call by call)")
	require.NoFileExists(t, bundle)
}
