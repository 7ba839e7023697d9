package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

func newBundleCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Work with trained bundles",
	}
	cmd.AddCommand(newBundleInspectCmd(a))
	return cmd
}

func newBundleInspectCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a bundle and print what it was trained on, with what, and how well",
		Long: `inspect reads a bundle as localize and serve do (format version, the
checksum of every entry) and prints its manifest: the graph, the training
cascades, the forward plugin, the prior, the threshold and inference
settings, and the validation and test metrics recorded by train.

It also looks for the forward plugin the bundle was trained with in
--plugin-dir and compares the binary's SHA-256 with the one the bundle
recorded, then starts it and compares the version it reports with the
recorded one (for a plugin a script runs, the binary is the script's
wrapper, and the version is the check on the code behind it): localize
and serve refuse either difference, so inspect exits non-zero when the
plugin is missing, unusable (not executable, or does not start) or
differs (after printing the rest).
Pass --plugin-dir "" to skip that check. With --graph it also checks that
the bundle was trained on that edge list (the graph's fingerprint).`,
		Example: `  sourcewatch bundle inspect karate.swb
  sourcewatch bundle inspect karate.swb --json | jq .manifest.metrics`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.bundleInspect(cmd.Context(), args[0]) },
	}
	f := cmd.Flags()
	f.String("plugin-dir", defaultPluginDir(), `directory holding the forward-model plugin binaries ("" skips the plugin check)`+pluginDirHelp)
	f.String("graph", "", "edge list file the bundle must have been trained on (as localize --graph)")
	f.Bool("directed", false, "treat each line u v of --graph as an arc u->v")
	f.Bool("json", false, "print the manifest and the plugin check as JSON")
	f.String("forward-checksum", "", "hex SHA-256 a trusted rebuild of the plugin has, pinned instead of the recorded one (as localize --forward-checksum)")
	return cmd
}

// errPluginMismatch is inspect's verdict on a bundle whose plugin binary
// is missing, unusable or differs from the recorded one.
var errPluginMismatch = errors.New("the bundle's forward plugin is missing, unusable or not the build it was trained with")

// pluginCheck is the state of the forward plugin a bundle names.
type pluginCheck struct {
	Path   string `json:"path"`
	Status string `json:"status"` // match, differs, unrecorded, missing, unusable
	SHA256 string `json:"sha256,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func (a *app) bundleInspect(ctx context.Context, path string) error {
	var g *graph.Graph
	if a.v.GetString("graph") != "" {
		var err error
		if g, err = loadGraph(a.v); err != nil {
			return err
		}
	}
	b, err := localize.LoadBundle(path, g)
	if err != nil {
		return err
	}
	pinned, err := forwardChecksumFlag(a.v)
	if err != nil {
		return err
	}
	var check *pluginCheck
	if dir := a.v.GetString("plugin_dir"); dir != "" {
		check = checkBundlePlugin(dir, b.Manifest, pinned)
		if check.Status == "match" && pinned == "" {
			checkPluginVersion(ctx, check, b, a.log)
		}
	}
	if a.v.GetBool("json") {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			File     string            `json:"file"`
			Manifest localize.Manifest `json:"manifest"`
			Plugin   *pluginCheck      `json:"plugin,omitempty"`
			// GraphFile is --graph, which the bundle matched (a
			// mismatch is an error).
			GraphFile string `json:"graph_file,omitempty"`
		}{path, b.Manifest, check, a.v.GetString("graph")}); err != nil {
			return err
		}
	} else {
		m := b.Manifest
		printBundleSummary(a.stdout, path, m, compactJSON(m.Diffusion), a.v.GetString("plugin_dir"))
		fmt.Fprintf(a.stdout, "created     %s\n", m.CreatedAt.Format(time.RFC3339))
		if g != nil {
			// A mismatch fails the load above; say the check was made.
			fmt.Fprintf(a.stdout, "graph file  %s: match\n", a.v.GetString("graph"))
		}
		if len(m.Forward.Params) > 0 {
			keys := make([]string, 0, len(m.Forward.Params))
			for k := range m.Forward.Params {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var kv []string
			for _, k := range keys {
				kv = append(kv, k+"="+m.Forward.Params[k])
			}
			fmt.Fprintf(a.stdout, "params      %s\n", strings.Join(kv, " "))
		}
		if m.Forward.IgnoreWeights {
			fmt.Fprintf(a.stdout, "weights     not read: the forward model runs on the graph without its edge weights (the training cascades spread without them)\n")
		}
		if check != nil {
			fmt.Fprintf(a.stdout, "plugin      %s: %s", check.Path, check.Status)
			if check.Detail != "" {
				fmt.Fprintf(a.stdout, " (%s)", check.Detail)
			}
			fmt.Fprintln(a.stdout)
		}
	}
	if check != nil && check.Status != "match" && check.Status != "unrecorded" {
		return fmt.Errorf("bundle %s: %s: %s: %w", path, check.Path, check.Status, errPluginMismatch)
	}
	return nil
}

// checkBundlePlugin compares the plugin binary in dir with the SHA-256
// the manifest recorded, or with pinned, a trusted rebuild's, when set.
func checkBundlePlugin(dir string, m localize.Manifest, pinned string) *pluginCheck {
	path, err := forward.PluginPath(dir, m.Forward.Name)
	if err != nil {
		path = filepath.Join(dir, forward.BinaryPrefix+m.Forward.Name)
		return &pluginCheck{Path: path, Status: pluginUnavailable(path), Detail: err.Error()}
	}
	sum, err := forward.FileSHA256(path)
	if err != nil {
		return &pluginCheck{Path: path, Status: pluginUnavailable(path), Detail: err.Error()}
	}
	got := hex.EncodeToString(sum)
	switch {
	case pinned != "" && strings.EqualFold(pinned, got):
		return &pluginCheck{Path: path, Status: "match", SHA256: got,
			Detail: fmt.Sprintf("the pinned SHA-256; the bundle recorded %.12s", m.Forward.SHA256)}
	case pinned != "":
		return &pluginCheck{Path: path, Status: "differs", SHA256: got,
			Detail: fmt.Sprintf("pinned %.12s, file %.12s: localize and serve refuse it", pinned, got)}
	case m.Forward.SHA256 == "":
		return &pluginCheck{Path: path, Status: "unrecorded", SHA256: got,
			Detail: "the bundle records no SHA-256; localize and serve run it only with allow_unverified"}
	case m.Forward.SHA256 == got:
		return &pluginCheck{Path: path, Status: "match", SHA256: got}
	default:
		return &pluginCheck{Path: path, Status: "differs", SHA256: got,
			Detail: fmt.Sprintf("recorded %.12s, file %.12s: localize and serve refuse it; point --plugin-dir at the build it was trained with, retrain with this build, or, if it is a trusted rebuild of the same model, pin its SHA-256 (--forward-checksum %s, forward_checksum)", m.Forward.SHA256, got, got)}
	}
}

// checkPluginVersion launches the plugin check found to be the recorded
// build and compares the version it reports with the bundle's, as
// localize and serve do: for a plugin a script runs, the binary is only
// the script's wrapper, and the version is the check on the code behind
// it. A pinned checksum vouches for the build and skips this, as there.
// It then configures the plugin with the bundle's state, as they do, and
// has it predict, so a damaged state is found here too.
func checkPluginVersion(ctx context.Context, check *pluginCheck, b *localize.Bundle, log *zap.Logger) {
	m := b.Manifest
	if m.Forward.Version == "" {
		return
	}
	sum, err := hex.DecodeString(check.SHA256)
	if err != nil {
		panic("sourcewatch: plugin check holds a bad SHA-256: " + check.SHA256)
	}
	p, err := forward.Launch(ctx, check.Path, forward.WithChecksum(sum), forward.WithLogger(log))
	if err != nil {
		check.Status, check.Detail = "unusable", err.Error()
		return
	}
	defer p.Close()
	info, err := p.Info(ctx)
	switch {
	case err != nil:
		check.Status, check.Detail = "unusable", err.Error()
	case info.Version != m.Forward.Version:
		check.Status = "differs"
		check.Detail = fmt.Sprintf("the recorded build, but it reports version %q where the bundle recorded %q (the code a script runs changed?): "+
			"localize and serve refuse it; retrain with this version, or, if it is the same model, pin its SHA-256 (--forward-checksum %s, forward_checksum)",
			info.Version, m.Forward.Version, check.SHA256)
	default:
		if err := localize.ConfigureForward(ctx, p, b, nil); err != nil {
			check.Status, check.Detail = "unusable", "the recorded build, but it cannot run this bundle's model: "+err.Error()
		}
	}
}

// pluginUnavailable is the status of a plugin file that cannot be run:
// missing when nothing is there, unusable when something is (a directory,
// a file without execute permission or that cannot be read).
func pluginUnavailable(path string) string {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return "missing"
	}
	return "unusable"
}

// printBundleSummary prints what train reports about a bundle, from its
// manifest and a description of the training cascades ("" for none).
func printBundleSummary(w io.Writer, path string, m localize.Manifest, cascades, pluginDir string) {
	fmt.Fprintf(w, "bundle      %s  (%s)\n", path, m.ID)
	kind := "edges"
	if m.Graph.Directed {
		kind = "arcs (directed)"
	}
	fmt.Fprintf(w, "graph       %s: %d nodes, %d %s, fingerprint %.12s\n", m.Graph.Name, m.Graph.Nodes, m.Graph.Edges, kind, m.Graph.Fingerprint)
	if cascades != "" {
		fmt.Fprintf(w, "cascades    %s\n", cascades)
	}
	if lo, ok := m.Metrics[localize.TrainInfectedMinMetric]; ok {
		fmt.Fprintf(w, "observed    training snapshots %.0f-%.0f%% infected (localize notes an observation outside)\n", 100*lo, 100*m.Metrics[localize.TrainInfectedMaxMetric])
	}
	fmt.Fprintf(w, "forward     %s %s", m.Forward.Name, m.Forward.Version)
	if len(m.Forward.Params) > 0 {
		// Sorted, so the line is the same from run to run.
		kv := make([]string, 0, len(m.Forward.Params))
		for k, v := range m.Forward.Params {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		fmt.Fprintf(w, " (%s)", strings.Join(kv, ", "))
	}
	// Missing from a bundle whose plugin reported it as NaN before train
	// replaced such a value with its own.
	if val, ok := m.Metrics["forward_val_mse"]; ok {
		fmt.Fprintf(w, "  val MSE %.4f", val)
	} else {
		fmt.Fprint(w, "  val MSE n/a")
	}
	if own, ok := m.Metrics[localize.PluginValMSEMetric]; ok {
		// measured its own way: the host's is the one read against the floor
		fmt.Fprintf(w, " (the plugin's own val_mse: %.4g)", own)
	}
	// The floor is read against the test error where there is one: the
	// fit stopped on the validation pairs, so their error flatters it.
	mse, split, hasMSE := m.ForwardError()
	if split == "test" {
		fmt.Fprintf(w, "  test MSE %.4f", mse)
	}
	floor, hasFloor := m.Metrics[localize.ForwardFloorMetric]
	hasFloor = hasFloor && hasMSE
	if hasFloor && floor > 0 {
		fmt.Fprintf(w, " (floor %.4f: %+.0f%%)", floor, 100*(mse/floor-1))
	}
	if rho, ok := m.Metrics["forward_source_gate"]; ok {
		// deepis fitted on pairs with sources observed uninfected
		fmt.Fprintf(w, "  source gate %.3f", rho)
	}
	fmt.Fprintln(w)
	if fit := m.PluginFitMetrics(); len(fit) > 0 {
		// What the plugin's Fit reported, which a plugin author otherwise
		// finds only in the JSON; the gate is on the line above.
		delete(fit, "source_gate")
		kv := make([]string, 0, len(fit))
		for k, v := range fit {
			kv = append(kv, k+" "+fitValue(v))
		}
		slices.Sort(kv)
		if len(kv) > 0 {
			fmt.Fprintf(w, "fit         %s (reported by the plugin)\n", strings.Join(kv, ", "))
		}
	}
	if hasFloor && localize.PoorFit(mse, floor) {
		try := localize.PoorFitAdvice("eval --forward deepis,gat,monstor", "train --forward-epochs N",
			m.Metrics["forward_epochs"], m.Metrics["forward_best_epoch"])
		fmt.Fprintf(w, "note        the forward model's error is %.0f%% above the floor, the least any model can reach on these cascades: it fits this graph poorly, which can cost SL-VAE's ranking; %s\n",
			100*(mse/floor-1), try)
	}
	if s := m.VJPCheckFailure(pluginDir); s != "" {
		fmt.Fprintf(w, "note        %s\n", s)
	}
	weight := fmt.Sprintf("weight %.3g (2 x forward val MSE)", m.Solve.PriorWeight)
	if m.Solve.PriorWeight == 0 {
		weight = "weight 1 (none recorded: a bundle from before the calibrated weight; retrain it)"
	}
	fmt.Fprintf(w, "prior       VAE hidden %d, latent %d, %d prototypes  val loss %.4g  %s\n",
		m.Prior.Hidden, m.Prior.Latent, m.Prior.Prototypes, m.Metrics["prior_val_loss"], weight)
	if m.SourceRule.IsThreshold() {
		fmt.Fprintf(w, "threshold   delta %.2f (validation F1 %.3f over %d cascades)\n", m.Threshold, m.Metrics["val_f1"], int(m.Metrics["val_cascades"]))
	} else {
		fmt.Fprintf(w, "sources     %s (validation F1 %.3f over %d cascades; delta %.2f: %.3f)\n",
			m.SourceRule, m.Metrics["val_f1"], int(m.Metrics["val_cascades"]), m.Threshold, m.Metrics[localize.ThresholdF1Metric])
	}
	if auc, ok := m.Metrics[localize.RankingAUCMetric(m.Ranking)]; ok {
		fmt.Fprintf(w, "ranking     %s (validation ROC-AUC %.3f", m.Ranking, auc)
		for _, other := range localize.Rankings() {
			if a, ok := m.Metrics[localize.RankingAUCMetric(other)]; ok && other != m.Ranking {
				fmt.Fprintf(w, "; %s: %.3f", other, a)
			}
		}
		fmt.Fprintln(w, ")")
	} else if m.Ranking != localize.RankByScore {
		fmt.Fprintf(w, "ranking     %s\n", m.Ranking)
	}
	// Both need the infected ranked first; a bundle of a format that
	// knows them but ranks by score says why they are missing.
	infectedFirst := m.Ranking != localize.RankByScore
	if _, ok := m.Metrics[localize.LoneFirstAUCMetric]; !ok && !infectedFirst && m.Format >= 4 {
		fmt.Fprintln(w, "lone nodes  not tried (the ranking is by score; lifting them needs the infected ranked first)")
	}
	if auc, ok := m.Metrics[localize.LoneFirstAUCMetric]; ok || m.LoneInfectedFirst {
		verdict := "kept after the rest"
		if m.LoneInfectedFirst {
			verdict = "first"
		}
		detail := "infected, no infected in-neighbour"
		if ok {
			detail += fmt.Sprintf("; validation ROC-AUC first: %.3f", auc)
		}
		if m.Calibration != nil {
			verdict = "calibrated with the rest"
		}
		if m.NamesInfectedComponents() {
			if _, measured := m.Metrics[localize.LoneSourceRateMetric]; measured {
				detail += "; every one a source in the training snapshots, so every one is named, and the first-ranked node of every infected component"
			} else {
				detail += "; nothing recovers in the simulated spread the bundle was trained on, so every one is named, and the first-ranked node of every infected component"
			}
		}
		fmt.Fprintf(w, "lone nodes  %s (%s)\n", verdict, detail)
	}
	if _, ok := m.Metrics[localize.CalibratedAUCMetric]; !ok && !infectedFirst && m.Format >= 5 {
		fmt.Fprintln(w, "calibration not tried (the ranking is by score; it needs the infected ranked first)")
	}
	if auc, ok := m.Metrics[localize.CalibratedAUCMetric]; ok || m.Calibration != nil {
		verdict := "not used"
		if m.Calibration != nil {
			verdict = "used"
		}
		detail := "the infected nodes' scores as the validation source rate by score and infected component size"
		if ok {
			detail += fmt.Sprintf("; validation ROC-AUC, cross-fitted: %.3f", auc)
		}
		fmt.Fprintf(w, "calibration %s (%s)\n", verdict, detail)
	}
	with, okWith := m.Metrics[localize.WithPriorAUCMetric]
	without, okWithout := m.Metrics[localize.WithoutPriorAUCMetric]
	if okWith && okWithout {
		verdict := "used"
		if m.Solve.Variant == localize.NoPrior {
			verdict = "dropped"
		}
		fmt.Fprintf(w, "prior term  %s (validation ROC-AUC with it: %s; without: %s)\n", verdict, distinct(with, without), distinct(without, with))
	}
	schedule := "paper (L_init, then L_pred)"
	switch m.Solve.Variant {
	case localize.DataInit:
		schedule = "datainit (the data term, then L_pred)"
	case localize.NoPrior:
		schedule = "noprior (the data term alone in both stages)"
	}
	steps := fmt.Sprintf("%d + %d steps, %d restarts, schedule %s", m.Solve.InitSteps, m.Solve.OptSteps, m.Solve.Restarts, schedule)
	if grid := optStepsGrid(m.Metrics); len(grid) > 1 {
		var f1s []string
		for _, k := range grid {
			f1s = append(f1s, fmt.Sprintf("%d: %.3f", k, m.Metrics[localize.OptStepsMetric(k)]))
		}
		rule := "n_opt chosen on validation"
		if m.Metrics[localize.OptStepsWithinNoiseMetric] == 1 {
			rule = "n_opt chosen on validation, the fewest steps within one standard error of the best"
		}
		steps += "; " + rule + ", F1 at " + strings.Join(f1s, ", ")
	}
	fmt.Fprintf(w, "inference   %s\n", steps)
	if _, ok := m.Metrics["test_f1"]; ok {
		fmt.Fprintf(w, "test        F1 %s  precision %s  recall %s  ROC-AUC %s  top-k %s  (%d held-out cascades)\n",
			metric(m, "test_f1"), metric(m, "test_precision"), metric(m, "test_recall"), metric(m, "test_auc"), metric(m, "test_topk"), int(m.Metrics["test_cascades"]))
		if _, ok := m.Metrics[localize.TestInfectedAUCMetric]; ok {
			fmt.Fprintf(w, "control     infected (every infected node named): F1 %s  ROC-AUC %s on the same cascades\n",
				metric(m, localize.TestInfectedF1Metric), metric(m, localize.TestInfectedAUCMetric))
		}
		if _, ok := m.Metrics[localize.TestChanceBrierMetric]; ok {
			on := fmt.Sprintf("%d fresh cascades", int(m.Metrics[localize.ChanceCascadesMetric]))
			if m.Metrics[localize.ChanceFreshMetric] != 1 {
				on = fmt.Sprintf("the %d validation cascades (no fresh ones to spare)", int(m.Metrics[localize.ChanceCascadesMetric]))
			}
			fmt.Fprintf(w, "chance      a node's chance of being a source, measured on %s: test Brier score %s (the restarts' agreement read as one: %s); %s sources expected per cascade, %s true\n",
				on, metric(m, localize.TestChanceBrierMetric), metric(m, localize.TestProbabilityBrierMetric),
				oneDecimal(m, localize.TestExpectedSourcesMetric), oneDecimal(m, localize.TestSourcesMetric))
		}
		if n := int(m.Metrics["test_cascades"]); n > 0 && n < 10 {
			fmt.Fprintf(w, "note        only %d held-out cascades: the test line is mostly noise at that size; more cascades (or a higher --test-solves, where it is the limit) give it more\n", n)
		}
		if s := m.WeakRanking(); s != "" {
			fmt.Fprintf(w, "note        %s\n", s)
		}
		if s := m.LargeSourceSets(); s != "" {
			fmt.Fprintf(w, "note        %s\n", s)
		}
	}
}

// optStepsGrid returns the values of n_opt whose validation F1 the
// metrics record, ascending.
func optStepsGrid(metrics map[string]float64) []int {
	var grid []int
	for key := range metrics {
		if k, err := strconv.Atoi(strings.TrimPrefix(key, localize.OptStepsMetricPrefix)); err == nil && strings.HasPrefix(key, localize.OptStepsMetricPrefix) {
			grid = append(grid, k)
		}
	}
	sort.Ints(grid)
	return grid
}

// compactJSON returns raw on one line, or as it is if it is not JSON.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

// metric formats a manifest metric to three decimals, or n/a where it is
// missing or undefined (a bundle leaves undefined metrics out).
func metric(m localize.Manifest, key string) string {
	v, ok := m.Metrics[key]
	if !ok || math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// oneDecimal formats a manifest metric with one decimal, "n/a" where it
// is absent.
func oneDecimal(m localize.Manifest, key string) string {
	v, ok := m.Metrics[key]
	if !ok || math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// distinct formats a with three decimals, or with as many more (up to
// six) as it takes to tell it from b: a choice made because one number
// beat the other should not print them as a tie.
func distinct(a, b float64) string {
	for digits := 3; digits < 6; digits++ {
		if fa := strconv.FormatFloat(a, 'f', digits, 64); fa != strconv.FormatFloat(b, 'f', digits, 64) {
			return fa
		}
	}
	return strconv.FormatFloat(a, 'f', 6, 64)
}

// fitValue writes a plugin's Fit metric for the fit line: a count (an
// epoch, a best epoch) whole, as %.4g would not past 9999 (best epoch
// 12345 read 1.234e+04), anything else to 4 significant digits.
func fitValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprintf("%.4g", v)
}
