package eval

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/prior"
)

// DefaultForward is the forward plugin of the SL-VAE methods unless their
// forward param names another: the paper's default model.
const DefaultForward = "deepis"

// SL-VAE and its ablations (the paper's Table 4), trained on the run's
// training split with delta chosen on its validation split, like every
// other method. slvae uses the default schedule, the one `sourcewatch
// train` records in a bundle (localize.DataInit); slvae-paper is the
// paper's Algorithm 1 (localize.Full). Parameters (--method-param
// slvae.<key>=<value>):
//
//	forward      forward-model plugin name (default deepis)
//	plugin_dir   where sourcewatch-forward-<name> binaries live (default
//	             Config.PluginDir, or bin when that is empty)
//	call_timeout deadline of every plugin call, a Go duration (default
//	             Config.CallTimeout, or the plugin host's when that is 0)
//	forward.<k>  a parameter of the forward plugin; the paper's variants
//	             (slvae-paper, slvae-a, slvae-b) default deepis's gate to
//	             off, the paper's model, with which their rows were made
//	epochs       forward-model epochs (0 = plugin default)
//	prior_epochs VAE epochs (0 = default)
//	prior_seed   the VAE's seed (initialisation, shuffling, noise); default
//	             1 in every run, which is how the README's tables were
//	             made; 0 takes the run's seed, so the prior varies from run
//	             to run as the forward fit and the cascades do
//	prototypes   prototype latents N of the prior term (default 1024, as
//	             train's --prototypes)
//	prior_weight_scale
//	             s in the prior weight w = s·2σ² (default 1: the calibrated
//	             weight, σ² the forward model's validation MSE)
//	restarts     inference restarts R (default 8)
//	init_steps   inference steps of stage 1 (default 20)
//	opt_steps    inference steps on L_pred (default: chosen with delta on
//	             validation from localize.DefaultOptStepsGrid, as train does)
//	opt_steps_rule
//	             how n_opt is chosen on validation: best (the highest F1)
//	             or 1se (the fewest steps within one standard error of
//	             it, as train's --opt-steps-rule); default 1se for slvae
//	             and slvae-noprior, as train, and best for the paper's
//	             variants (slvae-paper, slvae-a, slvae-b)
//	val_solves   validation cascades solved to choose delta (default 32)
//	source_rule  auto (the threshold or a count of top scores, by
//	             validation F1, as train's --source-rule) or threshold
//	             (delta alone); default auto for slvae and slvae-noprior,
//	             as train, and threshold for the paper's variants
//	ranking      auto (nodes observed uninfected below every infected one,
//	             and the lone infected nodes above the rest, each when that
//	             raises the validation ROC-AUC, as train's --ranking) or
//	             score (the descent's scores); default auto
//	             for slvae and slvae-noprior, score for the paper's
//	             variants
//	prior        auto (with the prior or without it, by validation
//	             ROC-AUC, as train's --prior) or on; default auto for
//	             slvae, on for the others
//	chance       on fits the source chance as train does (on fresh
//	             cascades of the run's simulation, as many as the
//	             validation solves, or on the validation cascades for
//	             recorded ones) and reports how it fares on the test
//	             cascades beside the restarts' agreement (see Diagnose);
//	             off (the default) leaves it out and its solves: it
//	             changes no ranking and no source set
var slvaeVariants = map[string]localize.Variant{
	// Stage 1 on the forward term alone, then L_pred: it does what the
	// paper's schedule does where that works and reaches the sources its
	// objective favours where that does not (Power Grid with clustered
	// sources; see the README's results).
	"slvae":         localize.DataInit,
	"slvae-paper":   localize.Full,
	"slvae-a":       localize.NoPriorPred,
	"slvae-b":       localize.NoInit,
	"slvae-noprior": localize.NoPrior,
}

func init() {
	for name, variant := range slvaeVariants {
		Register(name, func(env Env) (Method, error) { return newSLVAE(env, name, variant) })
	}
}

// defaultOptStepsRule is how a variant chooses n_opt unless told: slvae
// solves as a bundle of `sourcewatch train` does, and its no-prior
// ablation must differ from it only by the prior; the paper's variants
// keep the rule their published rows were made with.
func defaultOptStepsRule(name string) string {
	base, _, _ := strings.Cut(name, "[")
	if base == "slvae" || base == "slvae-noprior" {
		return "1se"
	}
	return "best"
}

// defaultSourceRule is how a variant cuts its source set unless told: as
// train does for slvae and its no-prior ablation, by delta alone for the
// paper's variants, whose rows were made with it.
func defaultSourceRule(name string) string {
	if defaultOptStepsRule(name) == "1se" {
		return "auto"
	}
	return "threshold"
}

// defaultRanking is how a variant ranks unless told, by the same split as
// defaultSourceRule.
func defaultRanking(name string) string {
	if defaultOptStepsRule(name) == "1se" {
		return "auto"
	}
	return "score"
}

// defaultPrior is whether a variant may drop its prior on validation
// unless told: slvae as train does; the ablations have none or keep it by
// definition, and the paper's schedule keeps the rows it was published
// with.
func defaultPrior(name string) string {
	base, _, _ := strings.Cut(name, "[")
	if base == "slvae" {
		return "auto"
	}
	return "on"
}

// IsSLVAE reports whether name is SL-VAE or one of its ablations.
func IsSLVAE(name string) bool {
	_, ok := slvaeVariants[name]
	return ok
}

// RegisterSLVAEWith registers, once, the SL-VAE variant base with the
// forward plugin forward under the name "base[forward]" and returns that
// name; it is how eval compares forward models side by side.
func RegisterSLVAEWith(base, plugin string) (string, error) {
	variant, ok := slvaeVariants[base]
	if !ok {
		return "", fmt.Errorf("%w %q: not an SL-VAE variant", ErrUnknownMethod, base)
	}
	if err := forward.CheckPluginName(plugin); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadParam, err)
	}
	if strings.ContainsAny(plugin, "[]., ") {
		return "", fmt.Errorf("%w: forward plugin name %q", ErrBadParam, plugin)
	}
	name := base + "[" + plugin + "]"
	registry.Lock()
	_, done := registry.m[name]
	registry.Unlock()
	if !done {
		Register(name, func(env Env) (Method, error) {
			params := map[string]string{"forward": plugin}
			for k, v := range env.Params {
				params[k] = v
			}
			env.Params = params
			return newSLVAE(env, name, variant)
		})
	}
	return name, nil
}

type slvae struct {
	name      string
	variant   localize.Variant
	env       Env
	forward   string
	pluginDir string
	// callTimeout is call_timeout; 0 leaves the host's default.
	callTimeout time.Duration
	fparams     map[string]string
	fit         forward.FitOptions
	prior       prior.Config
	solve       localize.Options
	valSolves   int
	// prototypes is N, the prototype latents of the prior term.
	prototypes int
	// weightScale multiplies the calibrated prior weight.
	weightScale float64
	// optGrid are the n_opt values Train chooses from (nil: opt_steps
	// was given).
	optGrid []int
	// fewestSteps is opt_steps_rule=1se.
	fewestSteps bool
	// thresholdOnly is source_rule=threshold.
	thresholdOnly bool
	// scoreRankingOnly is ranking=score.
	scoreRankingOnly bool
	// choosePrior is prior=auto.
	choosePrior bool
	// chance is chance=on.
	chance bool

	proc   *forward.Process
	bundle *localize.Bundle
	extras map[string]float64
	// found is, per Localize call in order, the lowest final objective
	// over the restarts, for Diagnose.
	found []float64
	// chances and agreements are, per Localize call in order, the
	// source chance and the restarts' agreement (Result.Probability) of
	// every node, with chance=on, for Diagnose.
	chances, agreements [][]float64
}

func newSLVAE(env Env, name string, variant localize.Variant) (*slvae, error) {
	p := newParams(name, env.Params)
	m := &slvae{name: name, variant: variant, env: env, fparams: map[string]string{}}
	m.forward = p.str("forward", DefaultForward)
	m.pluginDir = p.str("plugin_dir", "bin")
	if s := p.str("call_timeout", ""); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%w %s.call_timeout=%q: want a duration >= 0, e.g. 30s or 2m (0: the plugin host's default)", ErrBadParam, name, s)
		}
		m.callTimeout = d
	}
	for k, v := range env.Params {
		if fk, ok := strings.CutPrefix(k, "forward."); ok {
			p.used[k] = true
			m.fparams[fk] = v
		}
	}
	if _, given := m.fparams["gate"]; m.forward == "deepis" && !given && defaultRanking(name) == "score" {
		// The paper's deepis has no source gate, and these variants'
		// rows were made without it.
		m.fparams["gate"] = "off"
	}
	m.fit.Epochs = p.count("epochs", 0)
	m.fit.Seed = env.Seed
	m.prior = prior.DefaultConfig()
	if e := p.count("prior_epochs", 0); e > 0 {
		m.prior.Epochs = e
	}
	if seed := p.int("prior_seed", int(m.prior.Seed)); seed != 0 {
		m.prior.Seed = int64(seed)
	} else {
		m.prior.Seed = env.Seed
	}
	m.solve = localize.DefaultOptions()
	m.solve.Variant = variant
	m.solve.Restarts = p.int("restarts", m.solve.Restarts)
	m.solve.InitSteps = p.int("init_steps", m.solve.InitSteps)
	m.solve.OptSteps = p.int("opt_steps", 0)
	if m.solve.OptSteps == 0 {
		m.optGrid = localize.DefaultOptStepsGrid()
		m.solve.OptSteps = slices.Max(m.optGrid)
	}
	rule := p.str("opt_steps_rule", defaultOptStepsRule(name))
	m.valSolves = p.count("val_solves", 32)
	m.prototypes = p.int("prototypes", prior.DefaultPrototypes)
	m.weightScale = p.float("prior_weight_scale", 1)
	sourceRule := p.str("source_rule", defaultSourceRule(name))
	ranking := p.str("ranking", defaultRanking(name))
	priorChoice := p.str("prior", defaultPrior(name))
	switch c := p.str("chance", "off"); c {
	case "on", "off":
		m.chance = c == "on"
	default:
		return nil, fmt.Errorf("%w %s.chance=%q: want on or off", ErrBadParam, name, c)
	}
	if err := p.done(); err != nil {
		return nil, err
	}
	var err error
	if m.fewestSteps, err = localize.ParseOptStepsRule(rule); err != nil {
		return nil, fmt.Errorf("%w %s.opt_steps_rule: %w", ErrBadParam, name, err)
	}
	if m.thresholdOnly, err = localize.ParseSourceRuleChoice(sourceRule); err != nil {
		return nil, fmt.Errorf("%w %s.source_rule: %w", ErrBadParam, name, err)
	}
	if m.scoreRankingOnly, err = localize.ParseRankingChoice(ranking); err != nil {
		return nil, fmt.Errorf("%w %s.ranking: %w", ErrBadParam, name, err)
	}
	if m.choosePrior, err = localize.ParsePriorChoice(priorChoice); err != nil {
		return nil, fmt.Errorf("%w %s.prior: %w", ErrBadParam, name, err)
	}
	if m.weightScale <= 0 {
		return nil, fmt.Errorf("%w %s.prior_weight_scale=%g: want a value > 0", ErrBadParam, name, m.weightScale)
	}
	if m.prototypes < 1 {
		return nil, fmt.Errorf("%w %s.prototypes=%d: want at least 1", ErrBadParam, name, m.prototypes)
	}
	if m.solve.InitSteps < 0 || m.solve.OptSteps < 0 {
		return nil, fmt.Errorf("%w %s.init_steps=%d, %s.opt_steps=%d: want non-negative step counts",
			ErrBadParam, name, m.solve.InitSteps, name, m.solve.OptSteps)
	}
	return m, nil
}

// str reads a string parameter.
func (p *params) str(key, def string) string {
	p.used[key] = true
	if s, ok := p.m[key]; ok {
		return s
	}
	return def
}

func (m *slvae) Name() string { return m.name }

func (m *slvae) plugin() (dir, name string) { return m.pluginDir, m.forward }

func (m *slvae) Fit(ctx context.Context, g *graph.Graph, train, val []diffusion.Cascade) error {
	log := m.env.Logger
	if log == nil {
		log = zap.NewNop()
	}
	path, err := forward.PluginPath(m.pluginDir, m.forward)
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	raw, err := forward.FileSHA256(path)
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	sum := hex.EncodeToString(raw)
	launch := []forward.LaunchOption{forward.WithLogger(log.Named("plugin")), forward.WithChecksum(raw)}
	if m.callTimeout > 0 {
		launch = append(launch, forward.WithCallTimeout(m.callTimeout))
	}
	proc, err := forward.Launch(ctx, path, launch...)
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	m.proc = proc
	info, err := proc.Info(ctx)
	if err != nil {
		return fmt.Errorf("%s: forward plugin info: %w", m.name, err)
	}
	if err := info.Validate(); err != nil {
		return fmt.Errorf("%s: forward plugin %s: %w", m.name, path, err)
	}
	if k, known := info.UnknownParam(m.fparams); k != "" {
		// A plugin that ignores a param it does not know would fit
		// without the setting meant, and say nothing.
		return fmt.Errorf("%w %s.forward.%s: forward plugin %s has no such param (its params: %s)", ErrBadParam, m.name, k, m.forward, strings.Join(known, ", "))
	}
	ref := localize.ForwardRef{Name: m.forward, Version: info.Version, SHA256: sum, Params: m.fparams, IgnoreWeights: m.env.SpreadIgnoresWeights}
	if err := proc.Configure(ctx, ref.ForwardGraph(g), m.fparams, nil); err != nil {
		return fmt.Errorf("%s: configuring forward plugin: %w", m.name, err)
	}
	cfg := localize.TrainConfig{
		Diffusion:              m.env.Diffusion,
		Forward:                ref,
		Fit:                    m.fit,
		Prior:                  m.prior,
		Prototypes:             m.prototypes,
		PriorWeightScale:       m.weightScale,
		Solve:                  m.solve,
		ValidationSolves:       m.valSolves,
		OptStepsGrid:           m.optGrid,
		FewestStepsWithinNoise: m.fewestSteps,
		ThresholdOnly:          m.thresholdOnly,
		ScoreRankingOnly:       m.scoreRankingOnly,
		ChoosePrior:            m.choosePrior,
		// Unless asked, eval scores the ranking and the source set alone.
		NoSourceChance: !m.chance,
		Seed:           m.env.Seed,
	}
	if m.chance && m.env.Simulation != nil {
		// As train does: fresh cascades, which made no choice, from a
		// seed stream of their own. The chance ranks nothing, so no row
		// but the chance's own numbers can gain from them.
		k := len(val)
		if m.valSolves > 0 {
			k = min(k, m.valSolves)
		}
		fresh, _, err := diffusion.Simulate(ctx, g, *m.env.Simulation, k, localize.ChanceSeed(m.env.Seed))
		if err != nil {
			return fmt.Errorf("%s: simulating cascades for the source chance: %w", m.name, err)
		}
		cfg.ChancePairs = cascadePairs(fresh)
	}
	b, err := localize.Train(ctx, g, proc, cascadePairs(train), cascadePairs(val), cfg, func(p localize.TrainProgress) {
		if m.env.Progress != nil && p.Done == p.Total {
			m.env.Progress(p.Stage + " done") // the harness prefixes the method
		}
	})
	if err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	m.bundle = b
	m.solve.OptSteps = b.Manifest.Solve.OptSteps
	// The schedule the bundle chose: without the prior where validation
	// dropped it (prior=auto), the variant's own otherwise.
	m.solve.Variant = b.Manifest.Solve.Variant
	m.extras = map[string]float64{
		"forward_val_mse": b.Manifest.Metrics["forward_val_mse"],
		"delta":           b.Manifest.Threshold,
		"prior_weight":    b.Manifest.Solve.PriorWeight,
		"opt_steps":       float64(b.Manifest.Solve.OptSteps),
		// 1 where validation chose a count rule over the threshold
		"count_rule": boolFloat(!b.Manifest.SourceRule.IsThreshold()),
		// 1 where validation ranked the observed-uninfected nodes last
		"infected_first": boolFloat(b.Manifest.Ranking != localize.RankByScore),
		// 1 where it ordered them by f(xbar) (InfectedThenPredicted)
		"uninfected_by_predicted": boolFloat(b.Manifest.Ranking == localize.InfectedThenPredicted),
		// 1 where it put the lone infected nodes first
		"lone_infected_first": boolFloat(b.Manifest.LoneInfectedFirst),
		// 1 where it calibrated the infected nodes' scores by infected
		// component size instead
		"calibrated": boolFloat(b.Manifest.Calibration != nil),
		// 1 where its source set names every lone infected node and a
		// node of every infected component (the floor)
		"components_named": boolFloat(b.Manifest.NamesInfectedComponents()),
		// 1 where validation ranked better without the prior term (prior=auto)
		"prior_off": boolFloat(m.choosePrior && b.Manifest.Solve.Variant == localize.NoPrior),
		// the validation F1 the choices above were made on
		"val_f1": b.Manifest.Metrics["val_f1"],
	}
	if auc, ok := validationAUC(b.Manifest); ok {
		// the validation ROC-AUC of the ranking the bundle uses
		m.extras["val_auc"] = auc
	}
	if e := b.Manifest.Metrics[localize.VJPCheckMetric]; e > 1 {
		// only when it failed: the report then says so
		m.extras[localize.VJPCheckMetric] = e
	} else if f := b.Manifest.Metrics[localize.FusedCheckMetric]; f > 1 {
		// the same for the fused data-term call inference makes
		m.extras[localize.FusedCheckMetric] = f
	} else if b.Manifest.Metrics[localize.VJPFlatMetric] == 1 {
		// only when every compared derivative was 0: the same
		m.extras[localize.VJPFlatMetric] = 1
	}
	for _, k := range []string{"forward_epochs", "forward_best_epoch"} {
		// how long a trained forward model's fit ran, and its best
		// validation epoch: equal where it was still improving at the end
		if v, ok := b.Manifest.Metrics[k]; ok {
			m.extras[k] = v
		}
	}
	if rho, ok := b.Manifest.Metrics["forward_source_gate"]; ok {
		// deepis's fitted chance that a source is observed uninfected,
		// where the training pairs gave it the gate
		m.extras["forward_source_gate"] = rho
	}
	return nil
}

func (m *slvae) Localize(ctx context.Context, y []float64) (Prediction, error) {
	if m.bundle == nil {
		return Prediction{}, fmt.Errorf("%s: Localize before Fit", m.name)
	}
	res, err := localize.Solve(ctx, m.bundle, m.proc, y, m.solve)
	if err != nil {
		return Prediction{}, fmt.Errorf("%s: %w", m.name, err)
	}
	m.found = append(m.found, slices.Min(res.Objective))
	if m.chance {
		if res.Chance == nil {
			return Prediction{}, fmt.Errorf("%s: chance=on, but the bundle has no source chance", m.name)
		}
		m.chances = append(m.chances, res.Chance)
		m.agreements = append(m.agreements, res.Probability)
	}
	return Prediction{Scores: res.Scores, Sources: res.Sources}, nil
}

// Diagnose reports, from the test cascades:
//
//   - forward_test_mse: the forward model's own error, the mean over
//     cascades of the per-node squared error between f(x) of the true
//     sources and the observed y;
//   - objective_truth and objective_found: the mean of the objective
//     Solve minimises at the true sources and at what Solve found (the
//     best restart), and found_below_truth, the fraction of cascades where
//     Solve found a lower objective than the truth's. Near 1, the
//     optimiser does its job and the objective itself does not single out
//     the true sources; near 0, the optimiser falls short;
//   - with chance=on, how the source chance fares read as a forecast of
//     which nodes are sources (ChanceScore): chance_brier and chance_ece,
//     beside probability_brier and probability_ece, the same of the
//     restarts' agreement; chance_expected_sources, the mean over the
//     test cascades of sum_v chance_v, against true_sources; and
//     chance_fresh_cascades or chance_validation_cascades, how many
//     cascades, and which, the chance was fitted on.
func (m *slvae) Diagnose(ctx context.Context, test []diffusion.Cascade) (map[string]float64, error) {
	if m.bundle == nil {
		return nil, fmt.Errorf("%s: Diagnose before Fit", m.name)
	}
	n := m.bundle.Manifest.Graph.Nodes
	mse, err := localize.ForwardMSE(ctx, m.proc, n, cascadePairs(test))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{"forward_test_mse": mse}
	count := min(len(test), len(m.found))
	if count == 0 {
		return out, nil
	}
	var truth, found, below float64
	y := make([]float64, n)
	for i, c := range test[:count] {
		y = observe(n, c, y)
		obj, err := localize.Objective(ctx, m.bundle, m.proc, y, mat.NewDense(1, n, c.X(nil)), m.solve)
		if err != nil {
			return nil, fmt.Errorf("%s: objective at the true sources of test cascade %d: %w", m.name, i, err)
		}
		truth += obj[0]
		found += m.found[i]
		if m.found[i] < obj[0] {
			below++
		}
	}
	out["objective_truth"] = truth / float64(count)
	out["objective_found"] = found / float64(count)
	out["found_below_truth"] = below / float64(count)
	if len(m.chances) > 0 {
		var chance, agreement ChanceScore
		for i, c := range test[:min(count, len(m.chances))] {
			chance.Add(m.chances[i], c.Sources)
			agreement.Add(m.agreements[i], c.Sources)
		}
		expected, truth := chance.Expected()
		out["chance_brier"], out["chance_ece"] = chance.Brier(), chance.ECE()
		out["probability_brier"], out["probability_ece"] = agreement.Brier(), agreement.ECE()
		out["chance_expected_sources"], out["true_sources"] = expected, truth
		if m.bundle.Manifest.Metrics[localize.ChanceFreshMetric] == 1 {
			out["chance_fresh_cascades"] = m.bundle.Manifest.Metrics[localize.ChanceCascadesMetric]
		} else {
			out["chance_validation_cascades"] = m.bundle.Manifest.Metrics[localize.ChanceCascadesMetric]
		}
	}
	return out, nil
}

// Extras reports the forward model's validation error and the chosen delta.
func (m *slvae) Extras() map[string]float64 { return m.extras }

// Close stops the forward plugin process.
func (m *slvae) Close() error {
	if m.proc == nil {
		return nil
	}
	return m.proc.Close()
}

func cascadePairs(cs []diffusion.Cascade) []forward.Pair {
	ps := make([]forward.Pair, len(cs))
	for i, c := range cs {
		ps[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}
	return ps
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// validationAUC returns the mean validation ROC-AUC of the ranking a
// bundle uses, as Train measured it (cross-fitted for a calibration); ok
// is false when Train did not measure it (--ranking score).
func validationAUC(m localize.Manifest) (auc float64, ok bool) {
	switch {
	case m.Calibration != nil:
		auc, ok = m.Metrics[localize.CalibratedAUCMetric]
	case m.LoneInfectedFirst:
		auc, ok = m.Metrics[localize.LoneFirstAUCMetric]
	default:
		auc, ok = m.Metrics[localize.RankingAUCMetric(m.Ranking)]
	}
	return auc, ok
}
