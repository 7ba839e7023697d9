package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/eval"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/monitor"
	"github.com/sourcewatch/sourcewatch/prior"
)

// minValidation is the fewest validation cascades train makes its choices
// on without a warning.
const minValidation = 20

func newTrainCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train an SL-VAE bundle for a graph: forward plugin, VAE prior, inference choices on validation",
		Long: `train simulates cascades on a graph (or reads recorded ones with --cascades-file),
splits them 60/20/20 into train, validation and test, fits the forward-model
plugin and the VAE prior on the training split, makes inference's choices on
the validation split (the threshold delta with n_opt, the source rule, the
ranking, the lone infected nodes or a calibration by component size, and
whether to keep the prior term: see the flags below), reports held-out
metrics on the test split, and writes everything into one bundle file.`,
		Example: `  sourcewatch train --graph configs/demo/karate.edges --diffusion SI --beta 0.2 \
    --cascades 300 --forward deepis --out karate.swb`,
		// An argument (train my.edges) was ignored without a word.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("train takes no arguments, got %q: the edge list is --graph, recorded cascades --cascades-file, the bundle --out", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPluginCheckHint(runTrain(cmd, a), a.v.GetString("forward"), a.v.GetString("plugin_dir"))
		},
	}
	addSimulationFlags(cmd)
	f := cmd.Flags()
	f.String("cascades-file", "", `train on recorded cascades instead of simulating: JSONL as simulate writes it, {"sources":[ids],"infected":[ids]} per line, "times" and "recovered" optional, other keys skipped (see the README)`)
	f.String("forward", "deepis", "forward-model plugin name (bin/sourcewatch-forward-<name>)")
	f.StringArray("forward-param", nil, "forward-model parameter name=value (repeatable, or name=value,name=value; a piece with no = continues the value before it: widths=64,32)")
	f.String("plugin-dir", defaultPluginDir(), "directory holding the forward-model plugin binaries"+pluginDirHelp)
	f.Duration("fit-idle-timeout", 10*time.Minute, "longest wait for the forward plugin's next Fit progress report before train gives up on it (a hung Fit)")
	f.Duration("call-timeout", 0, "deadline of every forward plugin call, Configure included (0 = the default: 10s plus 1µs per row × (nodes + arcs)); raise it for a model that loads slowly")
	f.Int("forward-epochs", 0, "forward-model training epochs (0 = the plugin's default)")
	f.Float64("forward-lr", 0, "forward-model learning rate (0 = the plugin's default)")
	f.Float64("lambda", 0, "weight of the monotonicity penalty (0 = the plugin's default)")
	f.Int("prior-hidden", 0, "VAE hidden width (0 = default)")
	f.Int("prior-latent", 0, "VAE latent size (0 = default)")
	f.Int("prior-epochs", 0, "VAE training epochs (0 = default)")
	f.Int("prototypes", 1024, "prototype latents N for the prior term")
	f.Int("restarts", 8, "inference restarts R")
	f.Int("init-steps", 20, "inference steps of stage 1 (n_init; on the data term under --schedule datainit, on L_init under paper); Solve time grows with init-steps + opt-steps")
	f.Int("opt-steps", 0, "inference steps on L_pred (n_opt); 0 chooses it with delta on validation from 10, 25 and 50")
	f.String("opt-steps-rule", "1se", "how validation chooses n_opt when --opt-steps is 0: 1se (the fewest steps within one standard error of the best F1: a shorter Solve where validation cannot tell them apart) or best (the highest F1)")
	f.String("source-rule", "auto", "how the source set is cut from the scores: auto (the threshold delta, or the count of top scores, fixed or a fraction of the infected count, whichever has the higher validation F1) or threshold (delta alone)")
	f.String("ranking", "auto", "how nodes observed uninfected rank: auto (by validation ROC-AUC: the descent's scores, every uninfected node below every infected one, or that with the uninfected ordered by the forward model's prediction, which helps where sources recover, e.g. SIR; then whether the lone infected nodes, with no infected in-neighbour, go first, or, judged by cross-fitting, the infected nodes' scores are calibrated by the size of their infected component) or score (the descent's scores as they are)")
	f.String("prior", "auto", "whether the bundle solves with the prior term: auto (makes every validation choice with and without it and drops it where the validation ROC-AUC is strictly higher without; doubles the validation solves) or on")
	f.String("schedule", "datainit", "inference schedule recorded in the bundle: datainit (the data term alone, then L_pred) or paper (L_init, then L_pred: the paper's Algorithm 1)")
	f.Int("val-solves", 64, "validation cascades solved to choose delta, and as many fresh ones simulated and solved to measure the source chance")
	f.Int("test-solves", 64, "test cascades solved for the held-out summary (0 = every test cascade)")
	f.String("graph-name", "", "graph name recorded in the bundle (default: the edge file's base name)")
	f.String("out", "", "bundle file to write (required)")
	f.Bool("allow-bad-gradient", false, "exit 0 although the forward model's VJP or fused call failed train's spot check (the bundle is written either way; without this flag train then exits 1)")
	return cmd
}

func runTrain(cmd *cobra.Command, a *app) error {
	ctx := cmd.Context()
	v := a.v
	out := v.GetString("out")
	if out == "" {
		return fmt.Errorf("--out: the bundle file to write is required")
	}
	// Refused now rather than after minutes of training.
	if err := a.refuseInputAsOutput("--out", out); err != nil {
		return err
	}
	if idle := v.GetDuration("fit_idle_timeout"); idle <= 0 {
		return fmt.Errorf("--fit-idle-timeout: %v is not positive", idle)
	}
	if err := checkCallTimeout(v); err != nil {
		return err
	}
	switch fi, err := os.Stat(filepath.Dir(out)); {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--out %s: directory %s does not exist", out, filepath.Dir(out))
	case err != nil:
		return fmt.Errorf("--out %s: %w", out, err)
	case !fi.IsDir():
		return fmt.Errorf("--out %s: %s is not a directory", out, filepath.Dir(out))
	}
	// A directory given as --out would be found only when the bundle is
	// renamed onto it, after the whole training.
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return fmt.Errorf("--out %s: is a directory; give the bundle file to write (e.g. %s)", out, filepath.Join(out, "model.swb"))
	}
	variant := localize.Full
	switch sch := v.GetString("schedule"); sch {
	case "paper":
	case "datainit":
		variant = localize.DataInit
	default:
		return fmt.Errorf("--schedule %q: want datainit or paper", sch)
	}
	fewestSteps, err := localize.ParseOptStepsRule(v.GetString("opt_steps_rule"))
	if err != nil {
		return fmt.Errorf("--opt-steps-rule: %w", err)
	}
	thresholdOnly, err := localize.ParseSourceRuleChoice(v.GetString("source_rule"))
	if err != nil {
		return fmt.Errorf("--source-rule: %w", err)
	}
	scoreRankingOnly, err := localize.ParseRankingChoice(v.GetString("ranking"))
	if err != nil {
		return fmt.Errorf("--ranking: %w", err)
	}
	choosePrior, err := localize.ParsePriorChoice(v.GetString("prior"))
	if err != nil {
		return fmt.Errorf("--prior: %w", err)
	}
	initSteps, optSteps := v.GetInt("init_steps"), v.GetInt("opt_steps")
	if initSteps < 0 || optSteps < 0 {
		return fmt.Errorf("--init-steps %d, --opt-steps %d: want non-negative step counts", initSteps, optSteps)
	}
	// 0 means the default for most of these; a negative value meant it too,
	// silently, which hid a typo.
	if err := checkSizes(v, map[string]int{
		"forward_epochs": 0, "prior_hidden": 0, "prior_latent": 0, "prior_epochs": 0,
		"prototypes": 1, "restarts": 1, "val_solves": 1, "test_solves": 0,
	}); err != nil {
		return err
	}
	for _, key := range []string{"forward_lr", "lambda"} {
		if x := v.GetFloat64(key); !(x >= 0) || math.IsInf(x, 1) {
			return fmt.Errorf("--%s: %g, want a finite value >= 0 (0: the plugin's default)", strings.ReplaceAll(key, "_", "-"), x)
		}
	}
	var optGrid []int
	if optSteps == 0 {
		optGrid = localize.DefaultOptStepsGrid()
		optSteps = slices.Max(optGrid)
	}
	g, err := loadGraph(v)
	if err != nil {
		return err
	}
	name := v.GetString("graph_name")
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(v.GetString("graph")), filepath.Ext(v.GetString("graph")))
	}
	seed := v.GetInt64("seed")
	// The plugin is found, started and asked for its Info before any
	// cascade is simulated: a misspelt --forward or --forward-param, or a
	// binary that does not start, fails now rather than after minutes of
	// simulation on a large graph.
	fwdName := v.GetString("forward")
	params, err := stringMap(v, "forward-param")
	if err != nil {
		return err
	}
	pluginDir := v.GetString("plugin_dir")
	sum, err := localize.PluginChecksum(pluginDir, fwdName)
	if err != nil {
		return err
	}
	path, _ := forward.PluginPath(pluginDir, fwdName)
	proc, err := launchPlugin(ctx, a, path, sum)
	if err != nil {
		return err
	}
	defer proc.Close()
	// The host's errors name the plugin and the call already.
	info, err := proc.Info(ctx)
	if err != nil {
		return err
	}
	if err := info.Validate(); err != nil {
		return fmt.Errorf("forward plugin %s: %w (sourcewatch plugin check %s runs this check)", path, err, fwdName)
	}
	// A plugin that ignores a param it does not know would fit without
	// the setting meant, and say nothing.
	if k, known := info.UnknownParam(params); k != "" {
		why := fmt.Sprintf("forward plugin %s has no such param", fwdName)
		if near := monitor.NearestKey(k, known); near != "" {
			why += "; did you mean " + near + "?"
		}
		return fmt.Errorf("--forward-param %s: %s (known: %s)", k, why, strings.Join(known, ", "))
	}
	if info.Name != fwdName {
		// Legal (a renamed build of a model), but the bundle records the
		// binary's name, so say which model answered.
		a.log.Warn("the plugin binary's name differs from the model it serves; the bundle records the binary's name",
			zap.String("binary", filepath.Base(path)), zap.String("model", info.Name+" "+info.Version))
	}
	cascades, provenance, simCfg, err := trainingCascades(ctx, a, g, cmd.InOrStdin())
	if err != nil {
		return err
	}
	ntrain, nval := int(math.Round(0.6*float64(len(cascades)))), int(math.Round(0.2*float64(len(cascades))))
	train, val, test := eval.Split(cascades, ntrain, nval, seed)
	// Where more cascades come from: the flag, or more recorded lines.
	more := "use --cascades 100 or more"
	if path := recordedFile(v); path != "" {
		more = fmt.Sprintf("record 100 or more in %s", inputName(path))
	}
	if len(train) == 0 || len(val) == 0 || len(test) == 0 {
		return fmt.Errorf("%d cascades give an empty train, validation or test split (60/20/20; 4 is the least that fills all three); %s", len(cascades), more)
	}
	if len(val) < minValidation {
		a.log.Warn("few validation cascades: delta, n_opt, the ranking and the prior are chosen on them, and the choices will be noisy; "+more,
			zap.Int("validation", len(val)), zap.Int("cascades", len(cascades)))
	}
	if never, example := neverInfected(g, train); 20*never > g.N() {
		a.log.Warn("nodes never infected in any training cascade: the bundle learns nothing of outbreaks there (a part of the graph the cascades do not reach, another component say); more cascades cover a part they reach rarely, and a component too small to hold --observe's lowest fraction of the graph never gets one (its cascades are redrawn): lower --observe, or train that component as a graph of its own",
			zap.Int("nodes", never), zap.Int("of", g.N()), zap.String("for_example", example))
	}

	// Cascades that spread along every arc alike leave a weighted graph's
	// weights out of the data; a forward model would read them as
	// infection probabilities all the same, and fit poorly.
	ignoreWeights := g.Weighted() && simCfg != nil && !simCfg.Model.UsesWeights()
	fwdRef := localize.ForwardRef{Name: fwdName, Version: info.Version, SHA256: sum, Params: params, IgnoreWeights: ignoreWeights}
	if err := proc.Configure(ctx, fwdRef.ForwardGraph(g), params, nil); err != nil {
		return err
	}

	pcfg := prior.DefaultConfig()
	pcfg.Seed = seed // --seed reaches the VAE's initialisation and noise too
	if h := v.GetInt("prior_hidden"); h > 0 {
		pcfg.Hidden = h
	}
	if k := v.GetInt("prior_latent"); k > 0 {
		pcfg.Latent = k
	}
	if e := v.GetInt("prior_epochs"); e > 0 {
		pcfg.Epochs = e
	}
	solve := localize.DefaultOptions()
	solve.Variant = variant
	solve.Restarts = v.GetInt("restarts")
	solve.InitSteps, solve.OptSteps = initSteps, optSteps
	cfg := localize.TrainConfig{
		GraphName: name,
		Diffusion: provenance,
		Forward:   fwdRef,
		Fit: forward.FitOptions{
			Epochs: v.GetInt("forward_epochs"), LearningRate: v.GetFloat64("forward_lr"),
			Lambda: v.GetFloat64("lambda"), Seed: seed,
		},
		Prior:                  pcfg,
		Prototypes:             v.GetInt("prototypes"),
		Solve:                  solve,
		ValidationSolves:       v.GetInt("val_solves"),
		OptStepsGrid:           optGrid,
		FewestStepsWithinNoise: fewestSteps,
		ThresholdOnly:          thresholdOnly,
		ScoreRankingOnly:       scoreRankingOnly,
		ChoosePrior:            choosePrior,
		Seed:                   seed,
	}
	if simCfg != nil {
		// Fresh cascades for the source chance alone, as many as the
		// validation solves: the validation cascades made every choice
		// (see localize.TrainConfig.ChancePairs). Recorded cascades have
		// none to spare, so the chance falls back to validation there.
		k := len(val)
		if n := v.GetInt("val_solves"); n > 0 {
			k = min(k, n)
		} else {
			k = min(k, 64)
		}
		chance, _, err := diffusion.Simulate(ctx, g, *simCfg, k, localize.ChanceSeed(seed), diffusion.Workers(v.GetInt("workers")))
		if err != nil {
			return simulationError(err)
		}
		cfg.ChancePairs = toPairs(chance)
	}
	start := time.Now()
	bars := map[string]*progress{}
	b, err := localize.Train(ctx, g, proc, toPairs(train), toPairs(val), cfg, func(p localize.TrainProgress) {
		bar, ok := bars[p.Stage]
		if !ok {
			for _, old := range bars {
				old.Done()
			}
			bar = a.progress("train "+p.Stage, p.Total)
			bars[p.Stage] = bar
		}
		note := ""
		if p.Loss == p.Loss { // not NaN
			note = fmt.Sprintf("loss %.4g", p.Loss)
		}
		if p.Total > 0 {
			bar.SetTotal(p.Total)
		}
		bar.Set(p.Done, note)
	})
	for _, bar := range bars {
		bar.Done()
	}
	if err != nil {
		return err
	}
	// The bundle cannot hold a NaN or infinite metric (JSON): said here,
	// where a plugin's author looks, not only by plugin check.
	for _, k := range slices.Sorted(maps.Keys(b.Manifest.Metrics)) {
		if val := b.Manifest.Metrics[k]; math.IsNaN(val) || math.IsInf(val, 0) {
			a.log.Warn("a training metric is not a finite number; the bundle leaves it out", zap.String("metric", k), zap.Float64("value", val))
		}
	}
	testSummary, err := heldOut(ctx, a, b, proc, test, v.GetInt("test_solves"))
	if err != nil {
		return err
	}
	for k, val := range testSummary {
		b.Manifest.Metrics[k] = val
	}
	if simCfg != nil {
		// The least error any forward model can reach on these cascades,
		// beside the fitted one's: a fit far above it (a graph whose
		// shape the model does not capture) is said in the summary.
		// On the test cascades' source sets, as the error it is read
		// against (forward_test_mse); a split without any falls back to
		// the validation ones.
		floorOn := test
		if len(floorOn) == 0 {
			floorOn = val
		}
		sets := make([][]int, min(len(floorOn), eval.FloorSourceSets))
		for i := range sets {
			sets[i] = floorOn[i].Sources
		}
		// A diagnostic: its failure (Ctrl-C, a target the redraws miss)
		// costs the bundle nothing but the floor.
		floorStart := time.Now()
		floor, err := diffusion.ForwardFloor(ctx, g, *simCfg, sets, eval.FloorDraws, seed+1, diffusion.Workers(v.GetInt("workers")))
		if err == nil {
			a.log.Info("forward floor", zap.Float64("mse", floor), zap.Int("source_sets", len(sets)), zap.Duration("took", time.Since(floorStart).Round(time.Millisecond)))
			b.Manifest.Metrics[localize.ForwardFloorMetric] = floor
		} else {
			a.log.Warn("forward floor not estimated; the bundle is written without it", zap.Error(err))
		}
	}
	if err := b.WriteFile(out); err != nil {
		return err
	}
	printBundleSummary(a.stdout, out, b.Manifest, fmt.Sprintf("%d train, %d validation, %d test", len(train), len(val), len(test)), a.v.GetString("plugin_dir"))
	if note := largeStateNote(len(b.ForwardState)); note != "" {
		fmt.Fprintf(a.stdout, "note        %s\n", note)
	}
	fmt.Fprintf(a.stdout, "time        %s\n", time.Since(start).Round(100*time.Millisecond))
	if b.Manifest.GradientWrong() && !v.GetBool("allow_bad_gradient") {
		// A pipeline that retrains and deploys must not ship it on exit
		// status 0; the bundle stays for the author to inspect.
		return fmt.Errorf("bundle %s written, but the forward model's gradient failed train's spot check (the note above): inference descends along it, so its rankings cannot be trusted; fix the plugin (sourcewatch plugin check %s) and train again, or pass --allow-bad-gradient to accept the bundle as it is",
			out, b.Manifest.Forward.Name)
	}
	return nil
}

// largeStateBytes is the forward state past which train says what it
// costs: a quarter of what a plugin call may carry.
const largeStateBytes = forward.MaxMessageBytes / 4

// largeStateNote says what a forward state of size bytes costs, or ""
// below largeStateBytes: every launch of the plugin (each localize, a
// daemon's start, reload and relaunch) sends it whole in one Configure,
// with the graph and params, and a call past forward.MaxMessageBytes is
// refused.
func largeStateNote(size int) string {
	if size < largeStateBytes {
		return ""
	}
	return fmt.Sprintf("the forward model's state is %.0f MiB: every launch of the plugin (each localize, and each start, reload and relaunch of serve's) sends it whole in one call, with the graph, and refuses a call over %d MiB; a smaller model launches faster",
		float64(size)/(1<<20), forward.MaxMessageBytes>>20)
}

// simulationKeys are the config keys of the flags that shape simulated
// cascades, which a --cascades-file run does not read.
var simulationKeys = []string{"diffusion", "beta", "gamma", "p", "lt_threshold", "pattern", "sources", "source_ratio", "observe", "max_steps", "max_redraws", "cascades"}

// trainingCascades simulates cascades from the simulation flags, or reads
// them from --cascades-file, and returns a description for the manifest
// and, for simulated ones, the simulation's config (nil for recorded).
func trainingCascades(ctx context.Context, a *app, g *graph.Graph, stdin io.Reader) ([]diffusion.Cascade, json.RawMessage, *diffusion.Config, error) {
	v := a.v
	if path := recordedFile(v); path != "" {
		cs, err := a.recordedCascades(g, path, stdin)
		if err != nil {
			return nil, nil, nil, err
		}
		prov, _ := json.Marshal(map[string]any{"file": filepath.Base(inputName(path)), "cascades": len(cs)})
		return cs, prov, nil, nil
	}
	cfg, err := a.simulationConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := sourcesFit(cfg.Sources, g); err != nil {
		return nil, nil, nil, err
	}
	a.warnUnusedSettings(g, cfg)
	count, _, _, err := simulationRun(v)
	if err != nil {
		return nil, nil, nil, err
	}
	bar := a.progress("simulate", count)
	cs, rep, err := diffusion.Simulate(ctx, g, cfg, count, v.GetInt64("seed"),
		diffusion.OnProgress(func(done, _ int) { bar.Set(done, "") }))
	bar.Done()
	if err != nil {
		return nil, nil, nil, simulationError(err)
	}
	a.warnOvershoot(g, cfg, cs)
	a.warnRedrawn(cfg, rep.Redrawn, len(cs))
	prov, _ := json.Marshal(map[string]any{"simulated": cfg.Record(g), "cascades": count, "seed": v.GetInt64("seed")})
	return cs, prov, &cfg, nil
}

// recordedCascades reads --cascades-file ("-": stdin), warning of the
// simulation flags set that it makes unused and of suspect cascades
// (warnRecorded).
func (a *app) recordedCascades(g *graph.Graph, path string, stdin io.Reader) ([]diffusion.Cascade, error) {
	fileFlag := a.v.GetString("cascades_file") != ""
	if s := a.v.GetString("cascades"); fileFlag && !isCount(s) {
		return nil, fmt.Errorf("--cascades %q and --cascades-file %q: name the file of recorded cascades once", s, path)
	}
	var unused []string
	for _, key := range simulationKeys {
		if key == "cascades" && !fileFlag {
			continue // the file itself
		}
		if a.v.IsSet(key) {
			unused = append(unused, "--"+strings.ReplaceAll(key, "_", "-"))
		}
	}
	if len(unused) > 0 {
		a.log.Warn("simulation flags are not used with recorded cascades, which are already spread and observed: "+strings.Join(unused, ", "),
			zap.String("cascades_file", path))
	}
	// "-" is standard input (nothing else of train's or eval's reads it:
	// --graph - is refused), named <stdin> in errors.
	name, r := inputName(path), stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			flag := "--cascades-file"
			if !fileFlag {
				flag = "--cascades" // given a file name, not a count
			}
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		defer f.Close()
		r = f
	}
	// Train and eval read no per-node steps: kept, they cost a step per
	// node of the graph for every cascade with "times" or "recovered".
	cs, err := diffusion.ReadJSONL(r, g, name, diffusion.DropTimes())
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		// Not "0 cascades give an empty split": the wrong file, or one
		// whose writer failed.
		return nil, fmt.Errorf(`%s holds no cascade (empty, or blank lines only): want one {"sources":[ids],"infected":[ids]} per line`, name)
	}
	a.warnRecorded(g, cs, name)
	return cs, nil
}

// inputName is how messages name an input file: standard input for "-"
// as <stdin>, a file by its path.
func inputName(path string) string {
	if path == "-" {
		return stdinName
	}
	return path
}

// zeroMeans is what 0 asks of the size flags where it is not the default.
var zeroMeans = map[string]string{
	"top":         "list no top-scored nodes",
	"test_solves": "every test cascade",
	// localize's: train's --restarts takes no 0.
	"restarts": "the bundle's",
}

// checkSizes checks integer flags against their least allowed values,
// naming the first one below, as its flag.
func checkSizes(v *viper.Viper, least map[string]int) error {
	for _, key := range slices.Sorted(maps.Keys(least)) {
		if x := v.GetInt(key); x < least[key] {
			hint := ""
			if least[key] == 0 {
				hint = " (0: the default)"
				if z, ok := zeroMeans[key]; ok {
					hint = " (0: " + z + ")"
				}
			}
			return fmt.Errorf("--%s: %d, want >= %d%s", strings.ReplaceAll(key, "_", "-"), x, least[key], hint)
		}
	}
	return nil
}

func toPairs(cs []diffusion.Cascade) []forward.Pair {
	ps := make([]forward.Pair, len(cs))
	for i, c := range cs {
		ps[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}
	return ps
}

// launchPlugin starts a plugin binary, verified against sum (hex SHA-256).
func launchPlugin(ctx context.Context, a *app, path, sum string) (*forward.Process, error) {
	raw, err := hex.DecodeString(sum)
	if err != nil {
		return nil, fmt.Errorf("plugin checksum %q: %w", sum, err)
	}
	opts := []forward.LaunchOption{forward.WithLogger(a.log.Named("plugin")), forward.WithChecksum(raw),
		forward.WithFitIdleTimeout(a.v.GetDuration("fit_idle_timeout"))}
	if d := a.v.GetDuration("call_timeout"); d > 0 {
		opts = append(opts, forward.WithCallTimeout(d))
	}
	return forward.Launch(ctx, path, opts...)
}

// heldOut solves up to limit test cascades with the bundle and returns
// test_f1, test_precision, test_recall, test_topk and test_cascades, the
// mean sizes of the source sets named and of the true ones, and the
// infected control's F1 and ROC-AUC on the same cascades.
func heldOut(ctx context.Context, a *app, b *localize.Bundle, f localize.Forward, test []diffusion.Cascade, limit int) (map[string]float64, error) {
	if limit <= 0 || limit > len(test) {
		limit = len(test)
	}
	bar := a.progress("train test", limit)
	defer bar.Done()
	n := b.Manifest.Graph.Nodes
	var prec, rec, f1, topk, auc, ctlF1, ctlAUC, named, truth []float64
	var chance, agreement eval.ChanceScore
	y := make([]float64, n)
	opts := b.Options()
	for i := 0; i < limit; i++ {
		y = test[i].Y(y)
		opts.Seed = uint64(1_000_003 + i)
		res, err := localize.Solve(ctx, b, f, y, opts)
		if err != nil {
			return nil, fmt.Errorf("test cascade %d: %w", i, err)
		}
		m := eval.Score(b.Graph, test[i].Sources, eval.Prediction{Scores: res.Scores, Sources: res.Sources})
		prec, rec, f1 = append(prec, m.Precision), append(rec, m.Recall), append(f1, m.F1)
		topk, auc = append(topk, m.TopK), append(auc, m.AUC)
		named, truth = append(named, float64(len(res.Sources))), append(truth, float64(len(test[i].Sources)))
		if res.Chance != nil {
			chance.Add(res.Chance, test[i].Sources)
			agreement.Add(res.Probability, test[i].Sources)
		}
		// The infected control on the same cascade, so the summary can
		// say whether the bundle ranks better than the observation itself.
		ctl := eval.Score(b.Graph, test[i].Sources, eval.Prediction{Scores: slices.Clone(y), Sources: test[i].Infected})
		ctlF1, ctlAUC = append(ctlF1, ctl.F1), append(ctlAUC, ctl.AUC)
		bar.Set(i+1, "")
	}
	mean := func(xs []float64) float64 { return eval.Summarize(xs).Mean }
	out := map[string]float64{
		"test_precision": mean(prec), "test_recall": mean(rec), "test_f1": mean(f1),
		"test_topk": mean(topk), "test_auc": mean(auc), "test_cascades": float64(limit),
		localize.TestInfectedF1Metric: mean(ctlF1), localize.TestInfectedAUCMetric: mean(ctlAUC),
		localize.TestNamedMetric: mean(named), localize.TestSourcesMetric: mean(truth),
	}
	if expected, _ := chance.Expected(); !math.IsNaN(expected) {
		out[localize.TestChanceBrierMetric] = chance.Brier()
		out[localize.TestProbabilityBrierMetric] = agreement.Brier()
		out[localize.TestExpectedSourcesMetric] = expected
	}
	// On every test cascade, not only the solved ones: one Predict per 64.
	if mse, err := localize.ForwardMSE(ctx, f, n, toPairs(test)); err != nil {
		return nil, fmt.Errorf("forward model's test error: %w", err)
	} else if !math.IsNaN(mse) {
		out[localize.ForwardTestMSEMetric] = mse
	}
	return out, nil
}

// sortByScore orders node indices by descending score, ties by index.
func sortByScore(idx []int, scores []float64) {
	sort.SliceStable(idx, func(i, j int) bool { return scores[idx[i]] > scores[idx[j]] })
}

// neverInfected counts the nodes no cascade of cs infected, and names one.
func neverInfected(g *graph.Graph, cs []diffusion.Cascade) (int, string) {
	seen := make([]bool, g.N())
	for _, c := range cs {
		for _, v := range c.Infected {
			seen[v] = true
		}
	}
	n, example := 0, ""
	for v, ok := range seen {
		if !ok {
			if n == 0 {
				example = g.ID(v)
			}
			n++
		}
	}
	return n, example
}
