package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/eval"
	"github.com/sourcewatch/sourcewatch/graph"
)

func newEvalCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Benchmark source localization methods against the controls on simulated cascades",
		Long: `eval simulates --cascades cascades per run (the simulation flags are those of
simulate), splits them 60/20/20 into train, validation and test, fits every
method on train and validation (each threshold, k or alpha is chosen on
validation only) and scores it on the test cascades. --runs repeats this with
new seeds; --cascades-file evaluates on recorded cascades instead (the
format train reads), each run splitting them anew. The table gives, per method, the mean ± sd over all test cascades
of precision, recall, F1, ROC-AUC, top-k hit rate, error distance (hops from
each true source to the nearest predicted one) and localization time.

Controls (marked *) are reference points: infected (the observation itself),
degree, prior (training source frequency, never looks at the observation) and
random. A method localizes only where it beats infected and prior. One more
control is asked for by name: bayes, the exact posterior P(v is a source | y)
of the simulation itself (SI with uniform sources; small graphs: a snapshot of
more than bayes.max_infected, default 22, infected nodes is ranked as infected
ranks it), the best ROC-AUC any method can expect; the distance from a method
to it is what is left to find.

Methods: all (` + strings.Join(eval.DefaultMethods(), ", ") + `),
or a comma-separated list that may also name slvae-paper (SL-VAE with the
paper's schedule, Algorithm 1: L_init, then L_pred; slvae runs stage 1 on
the forward term alone, then L_pred, as train's default --schedule) and
SL-VAE's ablations slvae-a (L_init only), slvae-b (no initialisation stage)
and slvae-noprior.
SL-VAE trains a bundle per run with the forward plugin of slvae.forward
(default deepis; --forward deepis,gat,monstor,icmf compares plugins), found
in --plugin-dir (a method's own --method-param <method>.plugin_dir wins).
Method parameters: --method-param method.key=value, e.g. lpsi.alpha=0.5,
netsleuth.k=3, ojc.max_k=20, jordan.k=1, degree.k=5.

netsleuth and ojc need an undirected graph: with --directed, --methods all
leaves them out (and says so), and a list naming them is refused.`,
		Example: `  sourcewatch eval --graph karate.edges --diffusion SI --methods all --cascades 200 --runs 3
  sourcewatch eval --graph jazz.edges --diffusion SIR --pattern cluster --methods lpsi,infected,prior --json out.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.eval(cmd.Context(), cmd.InOrStdin()) },
	}
	addSimulationFlags(cmd)
	f := cmd.Flags()
	f.Int("runs", 3, "repetitions with new seeds")
	f.String("methods", "all", "methods to evaluate: all, or a comma-separated list")
	f.String("forward", "", "forward plugins to run each SL-VAE method with, side by side: e.g. deepis,gat,monstor,icmf (default: deepis)")
	f.StringSlice("method-param", nil, "method parameter method.key=value (repeatable, or comma-separated; a piece with no = continues the value before it)")
	f.Float64("train-frac", 0.6, "fraction of each run's cascades used for training")
	f.Float64("val-frac", 0.2, "fraction used for validation (the rest is test)")
	f.String("json", "", `also write the report as JSON to this file ("-": stdout, instead of the table)`)
	f.String("paired-with", "infected", "method every other one is compared with cascade by cascade (95% intervals of the F1 and AUC differences)")
	f.String("plugin-dir", defaultPluginDir(), "directory holding the forward-model plugin binaries of every SL-VAE method (--method-param <method>.plugin_dir overrides it for one)"+pluginDirHelp)
	f.String("cascades-file", "", "evaluate on recorded cascades instead of simulating (train's format); each run splits them anew with its own seed")
	f.Duration("call-timeout", 0, "deadline of every forward plugin call of every SL-VAE method, Configure included (0 = the default: 10s plus 1µs per row × (nodes + arcs); --method-param <method>.call_timeout overrides it for one)")
	return cmd
}

// evalConfig builds the benchmark config from the flags. implicit holds
// the methods that only "all" asked for: named neither in --methods nor in
// --method-param nor by --paired-with, they may be left out where they
// cannot run.
func (a *app) evalConfig() (cfg eval.Config, implicit map[string]bool, err error) {
	cfg = eval.DefaultConfig()
	if recordedFile(a.v) != "" {
		// Recorded cascades: the simulation flags are not read (and are
		// named as unused), so their values are not judged either.
		cfg.Seed, cfg.Workers = a.v.GetInt64("seed"), a.v.GetInt("workers")
		if cfg.Workers < 0 {
			return cfg, nil, fmt.Errorf("--workers: %d is negative", cfg.Workers)
		}
	} else {
		if cfg.Sim, err = a.simulationConfig(); err != nil {
			return cfg, nil, err
		}
		if cfg.Cascades, cfg.Seed, cfg.Workers, err = simulationRun(a.v); err != nil {
			return cfg, nil, err
		}
	}
	if cfg.Runs = a.v.GetInt("runs"); cfg.Runs < 1 {
		return cfg, nil, fmt.Errorf("--runs: %d is not positive", cfg.Runs)
	}
	cfg.TrainFrac, cfg.ValFrac = a.v.GetFloat64("train_frac"), a.v.GetFloat64("val_frac")
	cfg.PluginDir = a.v.GetString("plugin_dir")
	if err := checkCallTimeout(a.v); err != nil {
		return cfg, nil, err
	}
	cfg.CallTimeout = a.v.GetDuration("call_timeout")
	cfg.Methods = nil
	implicit, named := map[string]bool{}, map[string]bool{}
	for _, m := range strings.Split(a.v.GetString("methods"), ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case "all":
			for _, d := range eval.DefaultMethods() {
				cfg.Methods = append(cfg.Methods, d)
				implicit[d] = true
			}
		default:
			cfg.Methods = append(cfg.Methods, m)
			named[m] = true
		}
	}
	if len(cfg.Methods) == 0 {
		return cfg, nil, fmt.Errorf("--methods: none given (want all or a list of %s)", strings.Join(eval.DefaultMethods(), ","))
	}
	methodParams, err := methodParamList(a.v.Get("method_param"))
	if err != nil {
		return cfg, nil, err
	}
	// The flag's list is split at every comma; a piece without "=" is
	// the rest of the value before it (slvae.forward.layers=64,32).
	for _, kv := range joinCommaValues(methodParams) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.Contains(k, ".") {
			return cfg, nil, fmt.Errorf("--method-param: want method.key=value, got %q", kv)
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		k = strings.TrimSpace(k)
		if _, dup := cfg.Params[k]; dup {
			// The last would win without a word, hiding the other.
			return cfg, nil, fmt.Errorf("--method-param: %s given twice", k)
		}
		cfg.Params[k] = strings.TrimSpace(val)
		m, _, _ := strings.Cut(k, ".")
		named[m] = true
	}
	if err := expandForwards(&cfg, a.v.GetString("forward")); err != nil {
		return cfg, nil, err
	}
	cfg.PairedWith = strings.TrimSpace(a.v.GetString("paired_with"))
	if eval.IsSLVAE(cfg.PairedWith) && !slices.Contains(cfg.Methods, cfg.PairedWith) {
		// A base renamed by its one plugin above is still the one meant.
		var renamed []string
		for _, m := range cfg.Methods {
			if strings.HasPrefix(m, cfg.PairedWith+"[") {
				renamed = append(renamed, m)
			}
		}
		if len(renamed) == 1 {
			cfg.PairedWith = renamed[0]
		}
	}
	if cfg.PairedWith != "" && cfg.PairedWith != "infected" && !slices.Contains(cfg.Methods, cfg.PairedWith) {
		return cfg, nil, fmt.Errorf("--paired-with %s: not among the methods evaluated (%s)", cfg.PairedWith, strings.Join(cfg.Methods, ","))
	}
	named[cfg.PairedWith] = true
	for m := range named {
		delete(implicit, m)
	}
	return cfg, implicit, nil
}

// leaveOutUnsupported drops from cfg.Methods the methods that cannot run
// on g and that only "all" asked for, with one warning naming them. A
// method named explicitly that cannot run on g is an error naming every
// such method, before anything is simulated.
func (a *app) leaveOutUnsupported(g *graph.Graph, cfg *eval.Config, implicit map[string]bool) error {
	bad := eval.Unsupported(g, cfg.Methods)
	if len(bad) == 0 {
		return nil
	}
	var named []string
	for _, m := range bad {
		if !implicit[m] {
			named = append(named, m)
		}
	}
	if len(named) > 0 {
		return fmt.Errorf("--methods: %s %s an undirected graph, and --graph is read with --directed: leave %s out",
			strings.Join(named, ", "), byCount(len(named), "needs", "need"), byCount(len(named), "it", "them"))
	}
	cfg.Methods = slices.DeleteFunc(cfg.Methods, func(m string) bool { return slices.Contains(bad, m) })
	a.log.Warn(fmt.Sprintf("%s %s an undirected graph: left out", strings.Join(bad, ", "), byCount(len(bad), "needs", "need")),
		zap.Strings("methods", bad))
	return nil
}

// methodParamList reads method_param in each form it can take: the flag
// (repeated), SOURCEWATCH_METHOD_PARAM (separated by commas or spaces) and
// a config file's list ("- slvae.restarts=32") or map ("slvae.restarts:
// 32", or nested "slvae: {restarts: 32}"), as method.key=value strings.
func methodParamList(raw any) ([]string, error) {
	var out []string
	var flatten func(prefix string, m map[string]any) error
	flatten = func(prefix string, m map[string]any) error {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			switch v := m[k].(type) {
			case map[string]any:
				if err := flatten(prefix+k+".", v); err != nil {
					return err
				}
			case []any:
				return fmt.Errorf("method_param: %s%s: want a value, got a list", prefix, k)
			default:
				out = append(out, fmt.Sprintf("%s%s=%v", prefix, k, v))
			}
		}
		return nil
	}
	switch v := raw.(type) {
	case nil:
	case []string:
		out = v
	case []any:
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
	case string:
		out = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	case map[string]any:
		if err := flatten("", v); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("method_param: want method.key=value entries, got %T", raw)
	}
	return out, nil
}

func byCount(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// expandForwards replaces each SL-VAE method by one method per forward
// plugin in the comma-separated list, named "slvae[gat]" and so on, so the
// forward models are compared side by side. Parameters given for the base
// method apply to each of its expansions.
//
// Without a list, a method given its plugin by --method-param
// <method>.forward=<name> is renamed "<method>[<name>]" the same way, so a
// row never says slvae of a model that is not deepis.
func expandForwards(cfg *eval.Config, list string) error {
	var forwards []string
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			forwards = append(forwards, f)
		}
	}
	if len(forwards) == 0 {
		for i, m := range cfg.Methods {
			f, ok := cfg.Params[m+".forward"]
			if !eval.IsSLVAE(m) || !ok {
				continue
			}
			name, err := eval.RegisterSLVAEWith(m, f)
			if err != nil {
				return fmt.Errorf("--method-param %s.forward: %w", m, err)
			}
			cfg.Methods[i] = name
			for k, v := range cfg.Params {
				if key, ok := strings.CutPrefix(k, m+"."); ok {
					// A param given to the expansion by its own name wins.
					if _, own := cfg.Params[name+"."+key]; !own {
						cfg.Params[name+"."+key] = v
					}
					delete(cfg.Params, k)
				}
			}
		}
		return nil
	}
	var methods []string
	expanded := false
	for _, m := range cfg.Methods {
		if !eval.IsSLVAE(m) {
			methods = append(methods, m)
			continue
		}
		expanded = true
		for _, f := range forwards {
			name, err := eval.RegisterSLVAEWith(m, f)
			if err != nil {
				return fmt.Errorf("--forward: %w", err)
			}
			methods = append(methods, name)
			for k, v := range cfg.Params {
				if key, ok := strings.CutPrefix(k, m+"."); ok {
					if _, own := cfg.Params[name+"."+key]; !own {
						cfg.Params[name+"."+key] = v
					}
				}
			}
		}
		for k := range cfg.Params {
			if strings.HasPrefix(k, m+".") {
				delete(cfg.Params, k)
			}
		}
	}
	if !expanded {
		return fmt.Errorf("--forward: no SL-VAE method (slvae, slvae-paper, slvae-a, slvae-b, slvae-noprior) in --methods")
	}
	cfg.Methods = methods
	return nil
}

func (a *app) eval(ctx context.Context, stdin io.Reader) error {
	g, err := loadGraph(a.v)
	if err != nil {
		return err
	}
	cfg, implicit, err := a.evalConfig()
	if err != nil {
		return err
	}
	if err := a.leaveOutUnsupported(g, &cfg, implicit); err != nil {
		return err
	}
	if path := recordedFile(a.v); path != "" {
		if cfg.Recorded, err = a.recordedCascades(g, path, stdin); err != nil {
			return err
		}
		cfg.Cascades, cfg.RecordedFrom = len(cfg.Recorded), filepath.Base(inputName(path))
	}
	if cfg.Recorded == nil {
		if err := sourcesFit(cfg.Sim.Sources, g); err != nil {
			return err
		}
	}
	if err := checkSplit(cfg, inputName(recordedFile(a.v))); err != nil {
		return err
	}
	if err := cfg.Validate(g); err != nil {
		return err
	}
	if err := a.refuseInputAsOutput("--json", a.v.GetString("json")); err != nil {
		return err
	}
	if err := checkJSONPath(a.v.GetString("json")); err != nil {
		return err
	}
	if len(cfg.Recorded) == 0 {
		a.warnUnusedSettings(g, cfg.Sim)
	}
	// one bar over both stages: cascades simulated, then (run, method)
	// pairs fitted and scored
	simTotal, methodTotal := cfg.Runs*cfg.Cascades, cfg.Runs*len(cfg.Methods)
	bar := a.progress("eval", simTotal+methodTotal)
	simDone, methodDone := 0, 0
	rep, err := eval.Run(ctx, g, cfg, eval.WithLogger(a.log), eval.WithGraphName(a.v.GetString("graph")),
		eval.OnProgress(func(stage string, done, _ int) {
			note := "simulating"
			switch stage {
			case "simulate":
				simDone = done
			case "methods":
				methodDone, note = done, "methods"
			default: // a method's own note
				methodDone, note = done, stage
			}
			bar.Set(simDone+methodDone, note)
		}))
	bar.Done()
	if rep != nil && len(cfg.Recorded) == 0 && rep.Settings.ObservedInfected.N > 0 {
		a.warnOvershootMean(g, cfg.Sim, rep.Settings.ObservedInfected.Mean)
		// as simulate and train say it: eval's cascades are biased the same way
		a.warnRedrawn(cfg.Sim, rep.Settings.Redrawn, rep.Settings.Cascades*rep.Settings.Runs)
	}
	switch {
	case err != nil && rep == nil && errors.Is(err, eval.ErrInterrupted):
		return fmt.Errorf("%w: no method finished a run, so there is no report to write", err)
	case err != nil && rep == nil && errors.Is(err, eval.ErrMethodFailed):
		return fmt.Errorf("%w (every method failed, so there is no report to write)", err)
	case err != nil && rep == nil:
		return fmt.Errorf("eval: %w", simulationError(err))
	}
	// An interrupted evaluation, or one in which a method failed, still
	// writes what finished, marked as such, and then fails: a stopped
	// hour of work is not lost.
	if werr := a.writeReport(rep); werr != nil {
		if err != nil {
			return fmt.Errorf("%w; and the report: %w", err, werr)
		}
		return werr
	}
	if err != nil && rep.Partial == nil {
		return fmt.Errorf("%w (the report holds the other methods)", err)
	}
	if err != nil {
		left := ""
		if l := rep.Partial.LeftOut; len(l) > 0 {
			left = "; left out, unfinished: " + strings.Join(l, ", ")
		}
		return fmt.Errorf("%w (the report holds %d of %d runs%s)", err, rep.Settings.Runs, rep.Partial.RunsPlanned, left)
	}
	return nil
}

// checkJSONPath fails now, not after the evaluation, when --json names a
// file that cannot be written. It leaves no file behind.
func checkJSONPath(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	f.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		os.Remove(path)
	}
	return nil
}

// writeReport writes rep as --json asks and as a table on stdout (unless
// the JSON went there). The table is written even when the file cannot
// be, so the numbers are not lost.
func (a *app) writeReport(rep *eval.Report) error {
	switch path := a.v.GetString("json"); path {
	case "":
	case "-":
		return rep.WriteJSON(a.stdout)
	default:
		if err := writeJSONFile(path, rep); err != nil {
			return errors.Join(rep.WriteTable(a.stdout), err)
		}
	}
	return rep.WriteTable(a.stdout)
}

func writeJSONFile(path string, rep *eval.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("--json: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// checkSplit names the flags behind a split that cannot be made, as
// train does: eval.Config.Validate speaks of "train fraction" and
// "cascades 3: split 2/1/0", not of --train-frac or how many would do.
func checkSplit(cfg eval.Config, recorded string) error {
	tf, vf := cfg.TrainFrac, cfg.ValFrac
	if !(tf > 0 && vf > 0 && tf+vf < 1) {
		return fmt.Errorf("--train-frac %g, --val-frac %g: want both above 0 and their sum below 1 (the rest is test)", tf, vf)
	}
	parts := func(n int) (int, int, int) {
		tr, va := int(math.Round(tf*float64(n))), int(math.Round(vf*float64(n)))
		return tr, va, n - tr - va
	}
	tr, va, te := parts(cfg.Cascades)
	if tr >= 1 && va >= 1 && te >= 1 {
		return nil
	}
	least := cfg.Cascades + 1
	for ; least < 1_000_000; least++ {
		if a, b, c := parts(least); a >= 1 && b >= 1 && c >= 1 {
			break
		}
	}
	more := fmt.Sprintf("use --cascades %d or more", least)
	if recorded != "" {
		more = fmt.Sprintf("record %d or more in %s", least, recorded)
	}
	return fmt.Errorf("%d cascades give an empty train, validation or test split (%d/%d/%d at --train-frac %g, --val-frac %g; %d is the least that fills all three); %s",
		cfg.Cascades, tr, va, te, tf, vf, least, more)
}
