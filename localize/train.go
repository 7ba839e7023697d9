package localize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/prior"
)

// TrainConfig configures Train. Zero values take defaults.
type TrainConfig struct {
	// GraphName is recorded in the manifest (the edge file's base name).
	GraphName string
	// Diffusion describes where the training cascades came from; recorded
	// verbatim in the manifest.
	Diffusion json.RawMessage
	// Forward identifies the forward model passed to Train (name, version,
	// binary checksum, params); recorded in the manifest.
	Forward ForwardRef
	// Fit are the forward model's training settings; Validation is filled
	// in by Train.
	Fit forward.FitOptions
	// Prior configures the VAE.
	Prior prior.Config
	// Prototypes caps N, the number of prototype latents (default 1024,
	// at most MaxPrototypes, and fewer where the prior terms of N x the
	// prior's hidden width would not fit in a bundle).
	Prototypes int
	// Solve are the inference settings delta is chosen with. A zero
	// PriorWeight is calibrated (see Train).
	Solve Options
	// PriorWeightScale multiplies the calibrated prior weight: w = s·2σ²
	// (0 means 1). It has no effect when Solve.PriorWeight is set.
	PriorWeightScale float64
	// ValidationSolves caps how many validation cascades are solved to
	// choose delta (default 64); the rest of the validation split is unused.
	ValidationSolves int
	// OptStepsGrid, if not empty, are the values of n_opt to choose from
	// on validation, together with delta: Solve.OptSteps is replaced by
	// the one with the best validation F1 (ties to fewer steps). The
	// validation cascades are solved once, with the largest, and the
	// others read from checkpoints of the same descents.
	OptStepsGrid []int
	// FewestStepsWithinNoise chooses, instead of the n_opt with the best
	// validation F1, the fewest steps whose F1 is within one standard
	// error of the best (the one-standard-error rule, on the paired
	// per-cascade differences): a shorter Solve where validation cannot
	// tell the step counts apart. See ChooseOptSteps.
	FewestStepsWithinNoise bool
	// ThresholdOnly keeps the threshold rule for the source set; otherwise
	// a count rule (SourceRule) replaces it when its validation F1, on the
	// same solves, is higher.
	ThresholdOnly bool
	// ScoreRankingOnly keeps the descent's ranking; otherwise InfectedFirst
	// or InfectedThenPredicted replaces it when its mean validation ROC-AUC,
	// on the same solves, is higher (see ChooseRanking), and the lone
	// infected nodes go first when that raises it further (see
	// ChooseLoneFirst), or the infected nodes' scores are calibrated by
	// their infected component's size when that, cross-fitted, raises it
	// more (see ChooseCalibration).
	ScoreRankingOnly bool
	// ChoosePrior also makes every validation choice with the prior term
	// dropped (the NoPrior schedule) and records NoPrior when that ranks
	// the validation cascades strictly better (mean ROC-AUC of the chosen
	// ranking over every n_opt tried; WithPriorAUCMetric and
	// WithoutPriorAUCMetric hold both): where the sources follow no
	// pattern the prior has nothing to learn, and on some graphs it then
	// costs ranking. Only for the Full and DataInit schedules; it doubles
	// the validation solves.
	ChoosePrior bool
	// ChancePairs are cascades for the source chance (SourceChance) alone,
	// drawn as the others are and used for nothing else. Without them the
	// chance is fitted on the validation cascades, which every choice was
	// made on and the forward model and the prior stopped early by: it
	// then reads them as a little more telling than fresh ones are (on
	// 200 fresh development cascades the chances of Karate and Jazz SI
	// and SIR bundles summed to 5-8% fewer sources than there were;
	// fitted on fresh cascades, from 1% fewer to 4% more).
	ChancePairs []forward.Pair
	// NoSourceChance leaves the source chance out, and its solves: for a
	// caller that reads only the ranking and the source set (eval).
	NoSourceChance bool
	Seed           int64
	// Now stamps the bundle; time.Now when nil.
	Now func() time.Time
}

// TrainProgress is one progress report from Train.
type TrainProgress struct {
	// Stage is "forward", "prior", "threshold" (and "threshold without
	// the prior") or "source chance".
	Stage       string
	Done, Total int
	// Loss is the stage's current training loss (NaN for "threshold" and
	// "source chance").
	Loss float64
}

// DefaultOptStepsGrid returns the values of n_opt Train chooses from when
// asked to: a fifth, half and all of the paper's 50.
func DefaultOptStepsGrid() []int { return []int{10, 25, 50} }

// Thresholds is the grid delta is chosen from.
var Thresholds = []float64{0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95}

// Train fits a bundle for g from training and validation cascades, given as
// (sources, infected) pairs:
//
//  1. the forward model fm (already Configured for g, without state) is
//     fitted on the training pairs, validated on the validation pairs;
//  2. the VAE prior is fitted on the training source sets alone (the
//     objective separates, see the design);
//  3. the prior terms are precomputed from prototype latents;
//  4. unless cfg.Solve sets it, the prior weight is calibrated: reading
//     ||y - f(x)||^2 as the Gaussian log-likelihood the paper takes it for,
//     -log p(y|x) = ||y - f(x)||^2 / (2 sigma^2) + const, the objective
//     in the scale of the squared error weighs the prior's log-likelihood
//     by w = 2 sigma^2, with sigma^2 the forward model's mean squared
//     error per node on the validation pairs (at their true sources). The
//     paper's w = 1 amounts to sigma^2 = 1/2, a forward model no better
//     than a coin; with a useful one the unscaled prior drowns the data;
//  5. unless cfg.ScoreRankingOnly, the ranking is chosen on validation
//     solves (ChooseRanking, over the scores and f(xbar) of every n_opt of
//     the grid), then whether the lone infected nodes go first
//     (ChooseLoneFirst, on the ranked scores) or, when its cross-fitted
//     mean ROC-AUC is strictly higher than both with and without them,
//     the calibration by infected component size replaces them
//     (ChooseCalibration, fitted on every validation solve), and the
//     choices are applied to the scores before the ones below;
//  6. delta is chosen as the threshold of the grid Thresholds that
//     maximises mean F1 of {v : score_v >= delta} over (up to
//     ValidationSolves) validation cascades, solved with cfg.Solve; with
//     an OptStepsGrid, jointly with n_opt from that grid (the descent
//     stopped early is a regulariser: the objective's minimum is not the
//     truth, see Result.Objective). The test split is never seen;
//  7. unless cfg.ThresholdOnly, the count rules of ChooseSourceRule are
//     scored on the same solves (at the chosen n_opt) and the best one
//     replaces the threshold when its F1 is higher;
//  8. with cfg.ChoosePrior, steps 5-7 are made again on validation solves
//     without the prior term (NoPrior), and the bundle takes that
//     schedule and its choices when the chosen ranking's mean validation
//     ROC-AUC is strictly higher without the prior;
//  9. cfg.ChancePairs, or else the validation cascades (up to
//     ValidationSolves) again, are solved by the finished bundle, as
//     localize would, and the chance that a node is a source is fitted
//     on their final scores (SourceChance).
func Train(ctx context.Context, g *graph.Graph, fm forward.Model, train, val []forward.Pair, cfg TrainConfig, progress func(TrainProgress)) (*Bundle, error) {
	if len(train) == 0 {
		return nil, fmt.Errorf("training: no training cascades")
	}
	if len(val) == 0 {
		return nil, fmt.Errorf("training: no validation cascades: delta must be chosen on validation data")
	}
	if err := cfg.Solve.Validate(); err != nil {
		return nil, fmt.Errorf("training: solve options: %w", err)
	}
	if cfg.Prototypes > MaxPrototypes {
		// Checked before anything is fitted: the prototypes' latents
		// and terms are drawn after the forward model and the prior,
		// and 2,000,000,000 of them died of an allocation there.
		return nil, fmt.Errorf("training: prototypes %d: want at most %d (the terms hold prototypes x hidden values, twice)", cfg.Prototypes, MaxPrototypes)
	}
	if pc := priorConfig(cfg.Prior); pc.Hidden > 0 {
		// MaxPrototypes alone lets 2^20 prototypes at the default hidden
		// width 128 through, whose terms (8 bytes a value) hold more than
		// a bundle may: the fit would run to its end and write a bundle
		// that every load refuses.
		protos := prototypes(cfg.Prototypes)
		if size := prior.TermsBytes(g.N(), pc.Hidden, protos); size > maxBundleBytes {
			return nil, fmt.Errorf("training: prototypes %d at prior hidden width %d: the prior terms would take %d MiB, more than a bundle holds (%d MiB); lower the prototypes or the hidden width",
				protos, pc.Hidden, size>>20, maxBundleBytes>>20)
		}
	}
	if cfg.PriorWeightScale < 0 || math.IsNaN(cfg.PriorWeightScale) || math.IsInf(cfg.PriorWeightScale, 0) {
		return nil, fmt.Errorf("training: prior weight scale %g: want a finite value > 0", cfg.PriorWeightScale)
	}
	for _, k := range cfg.OptStepsGrid {
		if k < 1 || k > maxSteps {
			return nil, fmt.Errorf("training: opt steps grid %v: every value must be in 1..%d", cfg.OptStepsGrid, maxSteps)
		}
	}
	if progress == nil {
		progress = func(TrainProgress) {}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	n := g.N()
	for _, split := range []struct {
		name  string
		pairs []forward.Pair
	}{{"training", train}, {"validation", val}} {
		for i, p := range split.pairs {
			if err := checkPair(p, n); err != nil {
				return nil, fmt.Errorf("%s pair %d: %w", split.name, i, err)
			}
		}
	}
	metrics := make(map[string]float64)

	// 1. Forward model.
	stageStart := time.Now()
	fit := cfg.Fit
	fit.Validation = val
	if fit.Seed == 0 {
		fit.Seed = cfg.Seed
	}
	fres, err := fm.Fit(ctx, train, fit, func(p forward.Progress) {
		progress(TrainProgress{Stage: "forward", Done: p.Epoch, Total: p.Epochs, Loss: p.TrainLoss})
	})
	if err != nil {
		return nil, fmt.Errorf("training forward model %q: %w", cfg.Forward.Name, err)
	}
	// A metric name empty or holding a space or control character would
	// break the summary's fit line and the bundle's forward_<name>
	// metrics: refused, by the check plugin check applies.
	for _, k := range slices.Sorted(maps.Keys(fres.Metrics)) {
		if err := forward.CheckMetricName(k); err != nil {
			return nil, fmt.Errorf("training forward model %q: fit: %w: %w", cfg.Forward.Name, forward.ErrBadOutput, err)
		}
	}
	for k, v := range fres.Metrics {
		key := "forward_" + k
		// forward_val_mse is read as the plugin's just below, then
		// replaced by the host's (PluginValMSEMetric keeps the plugin's).
		if hostForwardMetrics[key] && key != "forward_val_mse" {
			// The host's own measure, which it sets only where it can
			// (a flat check, a floor on simulated cascades, a test
			// error): a plugin's metric of the name would stand in for
			// it where it does not, and bundle inspect and localize read
			// the plugin's number as the host's (a reported
			// vjp_check_flat of 1 warned of a flat gradient that the
			// check never found).
			key = "forward_plugin_" + k
			// A plugin that also reports plugin_<k> keeps that name;
			// this one moves on, so neither is lost, whatever the
			// map's order.
			for {
				name := strings.TrimPrefix(key, "forward_")
				if _, taken := fres.Metrics[name]; !taken {
					break
				}
				key = "forward_plugin_" + name
			}
		}
		metrics[key] = v
	}
	// The bundle keeps fres.State, not this process: a state that does
	// not bring the fitted model back would ship another model than the
	// one every number below is measured on. From here on the model is
	// the restored one.
	if err := checkRestores(ctx, fm, cfg.Forward.ForwardGraph(g), cfg.Forward.Params, fres.State, val); err != nil {
		return nil, fmt.Errorf("forward model %q: %w", cfg.Forward.Name, err)
	}
	// The plugin's own validation error may be defined its own way; the
	// calibration needs this one.
	noise, err := ForwardMSE(ctx, fm, n, val)
	if err != nil {
		return nil, fmt.Errorf("validating forward model %q: %w", cfg.Forward.Name, err)
	}
	// forward_val_mse is the host's measure, the per-node mean squared
	// error that the prior's weight, the floor and every reader take it
	// for. A plugin's own val_mse that says something else (a sum over
	// nodes, another loss: the contract cannot enforce a definition) is
	// kept beside it, not in its place; one that reports none, or NaN
	// (Progress.ValLoss is NaN without a validation set), is simply
	// replaced. The shipped plugins' agree to rounding.
	if v, ok := metrics["forward_val_mse"]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v-noise) > 1e-6*math.Max(noise, 1e-12) {
		metrics[PluginValMSEMetric] = v
	}
	metrics["forward_val_mse"] = noise
	metrics["noise_variance"] = noise
	// Inference descends along the plugin's VJP; one that disagrees with
	// its own Predict (a sign, a missing term) gives a bundle that runs
	// and ranks badly without an error anywhere. A spot check at one
	// point costs four calls: 8 coordinates, and 2 random directions
	// that read every coordinate at once (a VJP wrong at one node of
	// thousands passes the 8); plugin check is the full one. The point is
	// where inference goes, a validation source set among nodes near 0
	// (inside [0, 1], for central differences): at a random point in
	// [0.1, 0.9]^n a learned model's output saturates on a graph of a few
	// hundred nodes, and its gradient with it, which is no fault.
	checkRNG := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7a1))
	point := sparsePoint(n, val, checkRNG)
	check, err := forward.CheckVJP(ctx, fm, n, checkRNG, forward.VJPCheckOptions{Points: point, CornerRows: -1, Coords: 8, Directions: 2})
	if err != nil {
		return nil, fmt.Errorf("checking forward model %q's VJP: %w", cfg.Forward.Name, err)
	}
	metrics[VJPCheckMetric] = check.MaxErr
	if check.Checked > 0 && check.Flat == check.Checked {
		metrics[VJPFlatMetric] = 1
	}
	// Inference follows the fused data-term call, which a plugin may
	// implement itself: one that disagrees with the VJP just checked
	// ranks as badly as a wrong VJP (an audit's sign-flipped one: test
	// ROC-AUC 0.734 against the infected control's 0.789, and no word).
	if point != nil {
		fused, err := forward.CheckFused(ctx, fm, point, newBatch(val[:1], n, func(p forward.Pair) []int { return p.Infected }))
		if err != nil {
			return nil, fmt.Errorf("checking forward model %q's fused data-term call: %w", cfg.Forward.Name, err)
		}
		// Inf (a loss off by Inf) is not left out with the metrics JSON
		// cannot hold: it is the worst, not unknown.
		metrics[FusedCheckMetric] = min(fused.MaxErr, math.MaxFloat64)
	}

	metrics["forward_fit_seconds"] = time.Since(stageStart).Seconds()

	// 2. Prior.
	stageStart = time.Now()
	pcfg := priorConfig(cfg.Prior)
	if pcfg.Seed == 0 {
		pcfg.Seed = cfg.Seed
	}
	vae := prior.NewVAE(n, pcfg)
	pm, err := vae.Fit(ctx, sourceSets(train), sourceSets(val), func(p prior.Progress) {
		progress(TrainProgress{Stage: "prior", Done: p.Epoch, Total: p.Epochs, Loss: p.TrainLoss})
	})
	if err != nil {
		return nil, fmt.Errorf("training prior: %w", err)
	}
	for k, v := range pm {
		metrics["prior_"+k] = v
	}

	// 3. Prior terms.
	protos := prototypes(cfg.Prototypes)
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15))
	terms := vae.Terms(sourceSets(train), protos, rng)
	metrics["prior_fit_seconds"] = time.Since(stageStart).Seconds()

	solve := cfg.Solve
	if solve.PriorWeight == 0 {
		solve.PriorWeight = CalibratedPriorWeight(noise)
		if cfg.PriorWeightScale > 0 {
			solve.PriorWeight *= cfg.PriorWeightScale
		}
	}
	solve = solve.withDefaults()
	if err := solve.Validate(); err != nil {
		// A scaled weight out of range would write a bundle no load takes.
		return nil, fmt.Errorf("training: solve options (prior weight scale %g): %w", cfg.PriorWeightScale, err)
	}
	metrics["prior_weight"] = solve.PriorWeight
	b := &Bundle{
		Manifest: Manifest{
			Format:    FormatVersion,
			ID:        newBundleID(),
			CreatedAt: now().UTC().Truncate(time.Second),
			Graph: GraphRef{
				Name: cfg.GraphName, Fingerprint: g.Fingerprint(), Nodes: n,
				Edges: len(g.Edges()), Directed: g.Directed(),
			},
			Diffusion: cfg.Diffusion,
			Forward:   cfg.Forward,
			Prior:     PriorRef{Hidden: pcfg.Hidden, Latent: pcfg.Latent, Prototypes: protos},
			Threshold: 0.5,
			Solve: SolveRef{
				Restarts: solve.Restarts, InitSteps: solve.InitSteps, OptSteps: solve.OptSteps,
				LearningRate: solve.LearningRate, PriorWeight: solve.PriorWeight,
				Variant: solve.Variant,
			},
			Metrics: metrics,
		},
		VAE:          vae,
		Terms:        terms,
		ForwardState: fres.State,
		Graph:        g,
	}

	// 4. Threshold on validation.
	stageStart = time.Now()
	limit := cfg.ValidationSolves
	if limit <= 0 {
		limit = 64
	}
	if limit > len(val) {
		limit = len(val)
	}
	grid := slices.Sorted(slices.Values(cfg.OptStepsGrid))
	grid = slices.Compact(grid)
	if len(grid) == 0 {
		grid = []int{solve.OptSteps}
	}
	on, err := validate(ctx, g, b, fm, val[:limit], grid, solve, cfg, "threshold", progress)
	if err != nil {
		return nil, err
	}
	chosen := on
	if cfg.ChoosePrior && (solve.Variant == Full || solve.Variant == DataInit) {
		without := solve
		without.Variant = NoPrior
		off, err := validate(ctx, g, b, fm, val[:limit], grid, without, cfg, "threshold without the prior", progress)
		if err != nil {
			return nil, err
		}
		metrics[WithPriorAUCMetric] = on.auc
		metrics[WithoutPriorAUCMetric] = off.auc
		if off.auc > on.auc+1e-12 {
			chosen = off
			b.Manifest.Solve.Variant = NoPrior
		}
	}
	b.Manifest.Ranking = chosen.ranking
	b.Manifest.LoneInfectedFirst = chosen.lone
	b.Manifest.Calibration = chosen.calibration
	b.Manifest.Solve.OptSteps = chosen.optSteps
	b.Manifest.Threshold = chosen.threshold
	b.Manifest.SourceRule = chosen.rule
	maps.Copy(metrics, chosen.metrics)
	metrics["val_cascades"] = float64(limit)
	metrics["threshold_seconds"] = time.Since(stageStart).Seconds()

	// 5. The chance that a node is a source, measured with the finished
	// bundle (its scores take their final form only once every choice
	// above is made) on cascades of its own, or else the validation ones.
	if !cfg.NoSourceChance {
		stageStart = time.Now()
		chancePairs := val[:limit]
		metrics[ChanceFreshMetric] = 0
		if len(cfg.ChancePairs) > 0 {
			for i, p := range cfg.ChancePairs {
				if err := checkPair(p, n); err != nil {
					return nil, fmt.Errorf("chance pair %d: %w", i, err)
				}
			}
			chancePairs = cfg.ChancePairs
			metrics[ChanceFreshMetric] = 1
		}
		if err := fitSourceChance(ctx, b, fm, chancePairs, solve.Seed, progress); err != nil {
			return nil, err
		}
		metrics[ChanceCascadesMetric] = float64(len(chancePairs))
		metrics["chance_seconds"] = time.Since(stageStart).Seconds()
	}
	lo, hi := InfectedFractionRange(train, g.N())
	metrics[TrainInfectedMinMetric], metrics[TrainInfectedMaxMetric] = lo, hi
	if rate, ok := LoneSourceRate(g, train); ok {
		metrics[LoneSourceRateMetric] = rate
	}
	return b, nil
}

// ChanceCascadesMetric and ChanceFreshMetric name the manifest metrics
// holding how many cascades the source chance was fitted on, and 1 when
// they were TrainConfig.ChancePairs, 0 when the validation cascades.
const (
	ChanceCascadesMetric = "chance_cascades"
	ChanceFreshMetric    = "chance_fresh"
)

// ChanceSeed is the simulation seed of the fresh cascades a bundle trained
// with seed measures its source chance on (TrainConfig.ChancePairs, as
// `sourcewatch train` and eval's chance=on draw them): a stream of its
// own, apart from seed's, whose cascades made every other choice.
func ChanceSeed(seed int64) int64 { return seed ^ 0x63_68_61_6e_63_65 } // "chance"

// fitSourceChance solves pairs with the finished bundle b, as localize
// would, and sets b's SourceChance from the scores.
func fitSourceChance(ctx context.Context, b *Bundle, fm forward.Model, pairs []forward.Pair, seed uint64, progress func(TrainProgress)) error {
	n := b.Manifest.Graph.Nodes
	scores := make([][]float64, len(pairs))
	y := make([]float64, n)
	for i, p := range pairs {
		observe(y, p.Infected)
		opts := b.Options()
		opts.Seed = seed + uint64(i)
		res, err := Solve(ctx, b, fm, y, opts)
		if err != nil {
			return fmt.Errorf("measuring the source chance on cascade %d of %d: %w", i, len(pairs), err)
		}
		scores[i] = res.Scores
		progress(TrainProgress{Stage: "source chance", Done: i + 1, Total: len(pairs), Loss: math.NaN()})
	}
	b.Manifest.SourceChance = FitSourceChance(scores, pairs)
	return nil
}

// LoneSourceRateMetric names the manifest metric holding the fraction of
// the training snapshots' lone infected nodes (LoneInfected) that were
// sources; absent where they held none.
const LoneSourceRateMetric = "train_lone_infected_source_rate"

// LoneSourceRate is the fraction of the pairs' lone infected nodes (an
// infected node with no infected in-neighbour) that are sources, and
// whether there was any. Where nothing recovers and every infection is
// observed (SI, IC) it is 1: a lone node has no one it could have caught
// the spread from.
func LoneSourceRate(g *graph.Graph, pairs []forward.Pair) (float64, bool) {
	n := g.N()
	y := make([]float64, n)
	var lone []bool
	var total, sources int
	for _, p := range pairs {
		clear(y)
		for _, v := range p.Infected {
			y[v] = 1
		}
		lone = LoneInfected(g, y, lone)
		for _, v := range p.Sources {
			if lone[v] {
				sources++
			}
		}
		total += countTrue(lone)
	}
	if total == 0 {
		return 0, false
	}
	return float64(sources) / float64(total), true
}

// NamesInfectedComponents reports whether every lone infected node of the
// training snapshots was a source (LoneSourceRateMetric is 1: nothing
// recovers and every infection is observed) and the bundle ranks the
// infected first (any Ranking but RankByScore, which `train --ranking
// score` keeps for observations that may miss an infection). Its source
// set then holds, whatever its threshold or count would cut, every lone
// infected node of an observation and the highest-ranked node of every
// infected component (InfectedComponents), each of which holds a source.
// A count chosen on snapshots of 20-50% infected named one suspect for
// three infected nodes far apart, two of them certainly sources; and on a
// graph with isolated nodes, two of them infected filled a count of 2
// while a 151-node outbreak beside them had no node named.
//
// Where the training snapshots held no lone node to measure (clustered
// sources, one source a cascade), a bundle trained on cascades it
// simulated under SI, IC or LT proves the same by construction: nothing
// recovers, and a snapshot observes every infection.
func (m *Manifest) NamesInfectedComponents() bool {
	if m.Ranking == RankByScore {
		return false
	}
	if r, ok := m.Metrics[LoneSourceRateMetric]; ok {
		return r == 1
	}
	switch m.simulatedModel() {
	case "SI", "IC", "LT":
		return true
	}
	return false
}

// simulatedModel is the diffusion model of the cascades the bundle was
// trained on, when it simulated them ({"simulated": {"model": ...}} in
// Diffusion); "" for recorded cascades or an older bundle.
func (m *Manifest) simulatedModel() string {
	var d struct {
		Simulated *struct {
			Model string `json:"model"`
		} `json:"simulated"`
	}
	if json.Unmarshal(m.Diffusion, &d) != nil || d.Simulated == nil {
		return ""
	}
	return d.Simulated.Model
}

// TrainInfectedMinMetric and TrainInfectedMaxMetric name the manifest
// metrics holding the smallest and largest fraction of the nodes the
// training snapshots held infected: the threshold, the count and every
// other choice were made on observations in that range, and an
// observation far outside it (the first reports of an outbreak, say) is
// one the bundle has not seen.
const (
	TrainInfectedMinMetric = "train_infected_fraction_min"
	TrainInfectedMaxMetric = "train_infected_fraction_max"
)

// ForwardFloorMetric names the manifest metric holding the forward floor
// of the test source sets (the validation ones in bundles from before
// forward_test_mse; diffusion.ForwardFloor: the variance of y given the
// sources, the least MSE any forward model can reach), set by `train`
// when it simulated the cascades, so the forward error can be read
// against it.
const ForwardFloorMetric = "forward_floor_mse"

// priorConfig is the prior configuration Train fits: c, or the default
// when c is the zero value.
func priorConfig(c prior.Config) prior.Config {
	if c == (prior.Config{}) {
		return prior.DefaultConfig()
	}
	return c
}

// prototypes is the number of prototypes Train draws for
// TrainConfig.Prototypes p (the default 1024 when p <= 0).
func prototypes(p int) int {
	if p <= 0 {
		return 1024
	}
	return p
}

// MaxPrototypes bounds TrainConfig.Prototypes: a thousand times the
// default, and the prior terms then hold 2 x 2^20 x hidden values (2 GB
// at the default hidden width 128). A bundle holds terms of at most 1 GiB
// (8 bytes a value: about 2^27 prototypes x hidden), so Train refuses
// fewer at a wide prior: 1,048,576 at hidden 128 already exceed it.
const MaxPrototypes = 1 << 20

// PluginValMSEMetric names the manifest metric holding the validation
// error a forward plugin's Fit reported as val_mse where it differs from
// the host's own measure, which forward_val_mse always holds.
const PluginValMSEMetric = "forward_plugin_val_mse"

// ForwardTestMSEMetric names the manifest metric holding the forward
// model's mean squared error on train's test cascades, which neither the
// fit nor any choice saw. forward_val_mse is measured on the pairs the
// plugin stopped its fit on (and the prior's weight is calibrated on), so
// it flatters the fit a little; this one does not.
const ForwardTestMSEMetric = "forward_test_mse"

// hostForwardMetrics are the forward_ metrics train measures itself;
// the rest of a manifest's forward_ metrics are what the plugin's Fit
// reported (FitResult.Metrics, prefixed). A Fit metric whose prefixed
// name is one of these is kept as forward_plugin_<name> (val_mse aside,
// see Train), so it never stands in for the host's.
var hostForwardMetrics = map[string]bool{
	"forward_val_mse":     true, // the host's measure; the plugin's own is PluginValMSEMetric
	PluginValMSEMetric:    true,
	ForwardTestMSEMetric:  true,
	ForwardFloorMetric:    true,
	"forward_fit_seconds": true,
	VJPCheckMetric:        true,
	FusedCheckMetric:      true,
	VJPFlatMetric:         true,
}

// PluginFitMetrics returns what the forward plugin's Fit reported beside
// its validation error (a deepis fit's epochs and edge scale, a
// plugin's own fitted constants), keyed by the plugin's names, without
// the forward_ prefix train stores them under (a name of the host's
// measures, kept as forward_plugin_<name>, is plugin_<name> here); nil
// when it reported nothing else.
func (m *Manifest) PluginFitMetrics() map[string]float64 {
	var out map[string]float64
	for k, v := range m.Metrics {
		name, ok := strings.CutPrefix(k, "forward_")
		if !ok || hostForwardMetrics[k] {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[name] = v
	}
	return out
}

// ForwardError returns the forward model's error to read against the
// floor: forward_test_mse where train recorded it, forward_val_mse
// otherwise (a bundle from before it did), with the split's name ("test"
// or "val"); ok is false when the bundle records neither.
func (m *Manifest) ForwardError() (mse float64, split string, ok bool) {
	if v, ok := m.Metrics[ForwardTestMSEMetric]; ok && !math.IsNaN(v) {
		return v, "test", true
	}
	if v, ok := m.Metrics["forward_val_mse"]; ok && !math.IsNaN(v) {
		return v, "val", true
	}
	return 0, "", false
}

// TestInfectedF1Metric and TestInfectedAUCMetric name the manifest metrics
// holding the infected control's F1 and ROC-AUC on train's test cascades
// (every infected node named a source, scored 1; the rest 0): what a
// bundle must beat to say more than the observation itself.
const (
	TestInfectedF1Metric  = "test_infected_f1"
	TestInfectedAUCMetric = "test_infected_auc"
)

// TestChanceBrierMetric, TestProbabilityBrierMetric and
// TestExpectedSourcesMetric name the manifest metrics holding, on train's
// test cascades, the Brier score of the source chance (the mean over
// every node of (chance_v - [v is a source])^2), the same score of the
// restarts' agreement read as a chance, for comparison, and the mean over
// the cascades of sum_v chance_v, the source count the chance expects
// (against TestSourcesMetric, the true one); absent from bundles without
// a SourceChance.
const (
	TestChanceBrierMetric      = "test_chance_brier"
	TestProbabilityBrierMetric = "test_probability_brier"
	TestExpectedSourcesMetric  = "test_expected_sources"
)

// TestNamedMetric and TestSourcesMetric name the manifest metrics holding
// the mean size of the source sets the bundle named on its test cascades
// and the mean number of their true sources.
const (
	TestNamedMetric   = "test_named"
	TestSourcesMetric = "test_sources"
)

// wideSetFactor and wideSetNodes are where LargeSourceSets speaks: sets
// wideSetFactor times the truth's size hold at most 1/wideSetFactor true
// sources, and below wideSetNodes a reader scans the list anyway.
const (
	wideSetFactor = 5
	wideSetNodes  = 10
)

// LargeSourceSets describes a bundle whose source sets on its test
// cascades held at least five times as many nodes as the truth, and at
// least ten; "" otherwise, or when the bundle records neither. A count or
// threshold is chosen by validation F1, which, where the ranking is weak,
// favours naming many nodes over naming the right few: an audit's graph
// gave sets of 56-236 nodes for one source each (precision 0.016), and
// an alert then lists that many suspects.
func (m *Manifest) LargeSourceSets() string {
	named, ok := m.Metrics[TestNamedMetric]
	truth, ok2 := m.Metrics[TestSourcesMetric]
	if !ok || !ok2 || truth <= 0 || named < wideSetNodes || named < wideSetFactor*truth {
		return ""
	}
	return fmt.Sprintf("on its test cascades the source set held %.1f nodes on average for %.1f true sources (test precision %.3f): validation's F1 chose to name many where the ranking cannot single out the few, so its alerts list that many suspects; read them by score and probability (an alert's credible_set), or compare forward models and more cascades with eval on this graph",
		named, truth, m.Metrics["test_precision"])
}

// ChanceAUC is the test ROC-AUC below which WeakRanking calls a bundle's
// ranking about chance: a random ranking scores 0.5, and the test
// cascades of a small run put a few hundredths of noise around it.
const ChanceAUC = 0.55

// WeakRanking describes a bundle whose test ROC-AUC is about chance
// (below ChanceAUC) or not above the infected control's on the same
// cascades; "" otherwise, or when the bundle records no test ROC-AUC.
// Under SIR the control itself can rank below chance, so beating it
// alone does not make a ranking worth serving.
func (m *Manifest) WeakRanking() string {
	auc, ok := m.Metrics["test_auc"]
	if !ok {
		return ""
	}
	ctl, withControl := m.Metrics[TestInfectedAUCMetric]
	switch {
	case auc < ChanceAUC:
		control := ""
		if withControl {
			control = fmt.Sprintf("; the infected control %.3f", ctl)
		}
		return fmt.Sprintf("on its test cascades this bundle ranks the nodes about as well as chance (ROC-AUC %.3f, where a random ranking scores 0.5%s): its alerts say little here; compare forward models and more cascades with eval on this graph before serving it", auc, control)
	case withControl && ctl >= 1:
		// Every infected node a source: nothing had spread at the
		// snapshots, and no ranking can beat the observation.
		return fmt.Sprintf("on its test cascades the infected nodes are exactly the sources (the infected control ranks them perfectly, ROC-AUC %.3f; this bundle %.3f): the snapshots came before anything spread, so there was nothing to localize; train on snapshots taken later in the spread (a higher train --observe) if alerts should say more than the list of infected nodes", ctl, auc)
	case withControl && auc <= ctl:
		return fmt.Sprintf("on its test cascades this bundle ranks no better than the observation itself (ROC-AUC %.3f, the infected control %.3f): its alerts add nothing to the list of infected nodes here; compare forward models and more cascades with eval on this graph before serving it", auc, ctl)
	}
	return ""
}

// VJPCheckMetric names the manifest metric holding Train's spot check of
// the forward model's VJP against finite differences of its Predict
// (forward.VJPCheck.MaxErr at one point, 8 coordinates): above 1 the VJP
// is wrong, and `sourcewatch plugin check` says where.
const VJPCheckMetric = "forward_vjp_check_max_err"

// FusedCheckMetric names the manifest metric holding Train's check of the
// forward model's fused data-term call against its own Predict and VJP
// (forward.FusedCheck.MaxErr at the spot check's point): above 1 the call
// inference makes at every step is wrong.
const FusedCheckMetric = "forward_fused_check_max_err"

// sparsePoint is one row like the points inference descends through: the
// first of pairs' source sets at 0.9, the other nodes in [0.02, 0.08]
// (nil without a pair, for CheckVJP's random points).
func sparsePoint(n int, pairs []forward.Pair, rng *rand.Rand) *mat.Dense {
	if len(pairs) == 0 {
		return nil
	}
	x := make([]float64, n)
	for v := range x {
		x[v] = 0.02 + 0.06*rng.Float64()
	}
	for _, v := range pairs[0].Sources {
		x[v] = 0.9
	}
	return mat.NewDense(1, n, x)
}

// VJPFlatMetric is 1 in a manifest whose spot check found every compared
// derivative 0, analytic and numeric: a forward model saturated there
// (every y at 0 or 1) gives inference no gradient to descend along, and
// the check could not tell a right VJP from a wrong one.
const VJPFlatMetric = "forward_vjp_check_flat"

// GradientWrong reports whether Train's spot check found the forward
// model's VJP, or its fused data-term call, disagreeing with its own
// Predict (a flat check, which proves nothing either way, is not).
func (m *Manifest) GradientWrong() bool {
	return m.Metrics[VJPCheckMetric] > 1 || m.Metrics[FusedCheckMetric] > 1
}

// VJPCheckFailure describes the failed (or flat) spot check Train recorded
// under VJPCheckMetric, for a reader deciding whether to trust the
// bundle's rankings; "" when it passed or the bundle does not record it.
// pluginDir, the directory the plugin was found in, goes into the advice
// ("" when unknown).
func (m *Manifest) VJPCheckFailure(pluginDir string) string {
	dir := "<the plugin directory>"
	if pluginDir != "" {
		dir = pluginDir
	}
	e := m.Metrics[VJPCheckMetric]
	if m.Metrics[VJPFlatMetric] == 1 && !(e > 1) {
		return fmt.Sprintf("the forward model's gradient was 0 at every coordinate of train's spot check (its outputs saturated at 0 or 1 there?): inference descends along it, so this bundle's rankings cannot be trusted, and the check could not tell a right VJP from a wrong one; run sourcewatch plugin check %s --plugin-dir %s",
			m.Forward.Name, dir)
	}
	if e > 1 {
		return fmt.Sprintf("the forward model's VJP disagrees with finite differences of its own Predict (%.3g times the tolerance at train's spot check): inference descends along it, so this bundle's rankings cannot be trusted; run sourcewatch plugin check %s --plugin-dir %s",
			e, m.Forward.Name, dir)
	}
	if f := m.Metrics[FusedCheckMetric]; f > 1 {
		return fmt.Sprintf("the forward model's fused data-term call disagrees with its own Predict and VJP (%.3g times the tolerance at train's spot check): inference descends along it, so this bundle's rankings cannot be trusted; run sourcewatch plugin check %s --plugin-dir %s",
			f, m.Forward.Name, dir)
	}
	return ""
}

// PoorFitRatio is the forward error, relative to the floor, above which a
// forward model is said to fit its graph poorly: the tables' settings fit
// within 0-13% of the floor (Power Grid clusters aside).
const PoorFitRatio = 1.25

// PoorFit reports whether a forward error mse is more than PoorFitRatio
// times floor (never for an unknown floor, <= 0).
func PoorFit(mse, floor float64) bool { return floor > 0 && mse > PoorFitRatio*floor }

// PoorFitAdvice says what to try for a forward model that fits poorly,
// given its fit's epochs and best epoch (the forward_epochs and
// forward_best_epoch metrics; 0 for a model that is not trained): for a
// trained one still improving at its last epoch, more data, and more
// epochs (epochsFlag, the flag that sets them) only with the warning that
// a longer fit can lower the forward error by saturating the model; for
// one that early stopping ended, more data; for every model, other
// forward models (compare, the command that compares them). On 900-node
// Watts-Strogatz graphs (k = 4, p = 0.1, five graphs) with 1-3 SI sources
// per cascade, deepis's 20 epochs of 180 pairs ended 36-39% above the
// floor, still improving; with --forward-epochs 60 or 100 (59-71 epochs
// run, early stopping ending all but the 60) it ended 17-21% above, but
// its learned edge scale grew from 1.33 to 2.9-3.1 and it saturated: at
// inference's start (half the nodes at 1) all 900 outputs sat within
// 1e-6 of 1 and at least 898 entries of its VJP, which finite differences
// confirm, were at most 1e-6 (the 20-epoch fit's reach 0.6-1), the
// descent barely moved, and validation's ROC-AUC by score fell from
// 0.95-0.96 to 0.80-0.81 on all five (the chosen ranking's to 0.91). So
// more epochs are not offered as a remedy, only as something to try and
// judge by the ranking. It does not offer deepis another edge
// probability: on a graph of hubs, where 1/<k> is far too high, the
// epidemic threshold <k>/<k²> fitted deepis to the floor, yet SL-VAE
// ranked worse with it than with the default (paired ROC-AUC over
// infected -0.012 to +0.006 against +0.040 to +0.046, three seeds): a
// lower forward error is no promise of a better ranking, only eval's
// paired comparison says that.
func PoorFitAdvice(compare, epochsFlag string, epochs, bestEpoch float64) string {
	var try string
	switch {
	case epochs <= 0:
		try = "set the forward model's parameters, or compare forward models (" + compare + ")"
	case bestEpoch >= epochs:
		// More epochs lower the forward error, but a model can get there
		// by saturating, which leaves inference no gradient (see above).
		try = fmt.Sprintf("its fit was still improving at its last epoch (%.0f), but more epochs (%s) can lower the forward error by saturating the model, its outputs pinned at 0 or 1 where inference descends, which leaves the descent no gradient: keep a longer fit only if it ranks better; train on more cascades, and compare forward models (%s)",
			epochs, epochsFlag, compare)
	default:
		// Early stopping ended it: more epochs would end the same way.
		try = fmt.Sprintf("its validation error stopped improving at epoch %.0f of %.0f, so more epochs will not help: train on more cascades, and compare forward models (%s)",
			bestEpoch, epochs, compare)
	}
	return try + "; judge by the ranking, not the forward error"
}

// OutsideTraining describes an observation of infected nodes whose
// fraction of the graph lies outside the range the bundle's training
// snapshots held (TrainInfectedMinMetric, TrainInfectedMaxMetric), for a
// reader of its answer; "" inside it, or for a bundle that does not
// record the range.
func (m *Manifest) OutsideTraining(infected int) string {
	if infected == m.Graph.Nodes {
		// Whatever the training held, such a snapshot has no shape left to
		// read a source from.
		return "every node infected: a snapshot of every node says next to nothing of where the spread began"
	}
	lo, okLo := m.Metrics[TrainInfectedMinMetric]
	hi, okHi := m.Metrics[TrainInfectedMaxMetric]
	f := float64(infected) / float64(m.Graph.Nodes)
	if !okLo || !okHi || (f >= lo && f <= hi) {
		return ""
	}
	return fmt.Sprintf("%.1f%% of the nodes infected, outside the %.0f-%.0f%% the bundle's training snapshots held: its threshold, source count and ranking were chosen on those",
		100*f, 100*lo, 100*hi)
}

// AnswerNote is the note for a reader of the bundle's answer to an
// observation of infected nodes under rule (the bundle's SourceRule, or
// the one a caller chose instead), whose rule named nodes before any
// floor (len(Result.Sources) - Result.Floor): OutsideTraining's, and,
// where the count rule itself named every infected node,
// that the source set says nothing (probability still says how often a
// restart put a node as high as the set's weakest); "" when there is
// nothing to say. Nodes the floor added are not counted: they are proven
// sources or the only named node of their infected component, and a set
// they complete still says where the outbreaks began.
func (m *Manifest) AnswerNote(infected, named int, rule SourceRule) string {
	var notes []string
	if s := m.OutsideTraining(infected); s != "" {
		notes = append(notes, s)
	}
	if !rule.IsThreshold() && named > 0 && named >= infected && infected < m.Graph.Nodes {
		are := "are"
		if infected == 1 {
			are = "is"
		}
		notes = append(notes, fmt.Sprintf("every infected node is named a source, as the bundle's count rule (%s) names %d and %d %s infected: the source set says nothing here; read score and probability for the order", rule, named, infected, are))
	}
	return strings.Join(notes, "; ")
}

// InfectedFractionRange returns the smallest and largest fraction of n
// nodes the pairs' snapshots hold infected.
func InfectedFractionRange(pairs []forward.Pair, n int) (lo, hi float64) {
	lo = math.Inf(1)
	for _, p := range pairs {
		f := float64(len(p.Infected)) / float64(n)
		lo, hi = min(lo, f), max(hi, f)
	}
	return lo, hi
}

// LoneFirstAUCMetric names the manifest metric holding the mean
// validation ROC-AUC of the chosen ranking with the lone infected nodes
// lifted above the rest, over every n_opt tried (see ChooseLoneFirst);
// RankingAUCMetric of the chosen ranking holds it without.
const LoneFirstAUCMetric = "val_auc_lone_infected_first"

// WithPriorAUCMetric and WithoutPriorAUCMetric name the manifest metrics
// holding the mean validation ROC-AUC of the chosen ranking with and
// without the prior term, when Train chose between them
// (TrainConfig.ChoosePrior).
const (
	WithPriorAUCMetric    = "val_auc_with_prior"
	WithoutPriorAUCMetric = "val_auc_without_prior"
)

// CalibratedAUCMetric names the manifest metric holding the mean
// validation ROC-AUC of the chosen ranking calibrated by infected
// component size, cross-fitted over two halves of the validation cascades
// (see ChooseCalibration).
const CalibratedAUCMetric = "val_auc_calibrated"

// RankingAUCMetric names the manifest metric holding the mean validation
// ROC-AUC with ranking r, over every n_opt tried: "val_auc_by_score",
// "val_auc_infected_first" or "val_auc_infected_then_predicted".
func RankingAUCMetric(r Ranking) string {
	if r == RankByScore {
		return "val_auc_by_score"
	}
	return "val_auc_" + strings.ReplaceAll(string(r), "-", "_")
}

// ThresholdF1Metric names the manifest metric holding the validation F1
// of the threshold rule when Train also tried the count rules.
const ThresholdF1Metric = "val_f1_threshold"

// minPriorWeight keeps the prior in play when the forward model fits the
// validation pairs (nearly) exactly.
const minPriorWeight = 1e-3

// CalibratedPriorWeight is the prior weight for a forward model whose mean
// squared error per node is mse: w = 2·mse (see Train), at least 1e-3. A
// NaN or negative mse gives the paper's weight, 1.
func CalibratedPriorWeight(mse float64) float64 {
	if !(mse >= 0) || math.IsInf(mse, 0) {
		return 1
	}
	return math.Max(minPriorWeight, 2*mse)
}

// ParseOptStepsRule reads the name of a rule for choosing n_opt: "best"
// (the highest validation F1) or "1se" (TrainConfig.FewestStepsWithinNoise).
func ParseOptStepsRule(name string) (withinNoise bool, err error) {
	switch name {
	case "best":
		return false, nil
	case "1se":
		return true, nil
	}
	return false, fmt.Errorf("want best or 1se, got %q", name)
}

// ParsePriorChoice reads whether Train may drop the prior: "auto" (with or
// without it, by validation ROC-AUC; TrainConfig.ChoosePrior) or "on"
// (always with it).
func ParsePriorChoice(name string) (choose bool, err error) {
	switch name {
	case "auto":
		return true, nil
	case "on":
		return false, nil
	}
	return false, fmt.Errorf("want auto or on, got %q", name)
}

// ParseSourceRuleChoice reads how Train may cut the source set: "auto" (the
// threshold or a count rule, by validation F1) or "threshold" (delta
// alone; TrainConfig.ThresholdOnly).
func ParseSourceRuleChoice(name string) (thresholdOnly bool, err error) {
	switch name {
	case "auto":
		return false, nil
	case "threshold":
		return true, nil
	}
	return false, fmt.Errorf("want auto or threshold, got %q", name)
}

// OptStepsWithinNoiseMetric is set to 1 in a bundle's metrics when n_opt
// was chosen as the fewest steps within noise of the best.
const OptStepsWithinNoiseMetric = "opt_steps_within_noise"

// ChooseOptSteps returns the index of the chosen step count, given f1[k][i],
// the validation F1 of cascade i with the k-th step count (in increasing
// order) at its chosen threshold. It is the k with the highest mean F1
// (ties to fewer steps) or, withinNoise, the smallest k whose mean F1 is
// at most one standard error below that best one's, the standard error of
// the mean paired difference f1[best][i] - f1[k][i], unless fewer steps
// still have at least its mean F1: the fewest of those then. A paired
// difference that varies little puts a count just below the best outside
// one standard error while a worse one that varies more is inside (seen:
// F1 0.083 at 10 steps, 0.081 at 25, 0.086 at 50 chose 25), and fewer
// steps that score as well are faster and no worse.
func ChooseOptSteps(f1 [][]float64, withinNoise bool) int {
	best := 0
	for k := range f1 {
		if mean(f1[k]) > mean(f1[best])+1e-12 {
			best = k
		}
	}
	if !withinNoise {
		return best
	}
	chosen := best
	for k := 0; k < best; k++ {
		diff := make([]float64, len(f1[k]))
		for i := range diff {
			diff[i] = f1[best][i] - f1[k][i]
		}
		if mean(diff) <= stderr(diff) {
			chosen = k
			break
		}
	}
	for k := range chosen {
		if mean(f1[k]) >= mean(f1[chosen])-1e-12 {
			return k
		}
	}
	return chosen
}

// stderr is the standard error of the mean of xs (0 for fewer than two).
func stderr(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}

// ChooseThreshold returns the threshold of grid with the highest mean F1
// of {v : scores_v >= delta} against the pairs' true sources, and that F1.
// Ties go to the larger threshold (the smaller source set).
func ChooseThreshold(scores [][]float64, pairs []forward.Pair, grid []float64) (float64, float64) {
	best, bestF1 := grid[len(grid)-1], -1.0
	for k := len(grid) - 1; k >= 0; k-- {
		delta := grid[k]
		var sum float64
		for i, s := range scores {
			sum += f1At(s, pairs[i].Sources, delta)
		}
		if f := sum / float64(len(scores)); f > bestF1 {
			best, bestF1 = delta, f
		}
	}
	return best, bestF1
}

// f1At is the F1 of the set {v : s_v >= delta} against truth; an empty
// prediction scores 0.
func f1At(s []float64, truth []int, delta float64) float64 {
	var predicted, hit int
	for _, v := range s {
		if v >= delta {
			predicted++
		}
	}
	for _, v := range truth {
		if s[v] >= delta {
			hit++
		}
	}
	if predicted == 0 || len(truth) == 0 || hit == 0 {
		return 0
	}
	p := float64(hit) / float64(predicted)
	r := float64(hit) / float64(len(truth))
	return 2 * p * r / (p + r)
}

// ForwardMSE is the mean over pairs of the mean squared error between
// f(x) and the observed y: the forward model's own error.
func ForwardMSE(ctx context.Context, fm Forward, n int, pairs []forward.Pair) (float64, error) {
	if len(pairs) == 0 {
		return math.NaN(), nil
	}
	const batch = 64
	var sum float64
	for lo := 0; lo < len(pairs); lo += batch {
		hi := min(lo+batch, len(pairs))
		x := newBatch(pairs[lo:hi], n, func(p forward.Pair) []int { return p.Sources })
		y := newBatch(pairs[lo:hi], n, func(p forward.Pair) []int { return p.Infected })
		fy, err := fm.Predict(ctx, x)
		if err != nil {
			return 0, err
		}
		r, c := fy.Dims()
		if r != hi-lo || c != n {
			return 0, fmt.Errorf("predict returned %dx%d for %dx%d: %w", r, c, hi-lo, n, forward.ErrBadOutput)
		}
		for i := 0; i < r; i++ {
			yr := y.RawRowView(i)
			for v, f := range fy.RawRowView(i) {
				d := f - yr[v]
				sum += d * d / float64(n)
			}
		}
	}
	return sum / float64(len(pairs)), nil
}

// ErrStateNotRestored is returned by Train when configuring the forward
// model with the state its Fit returned does not reproduce the fitted
// model's predictions.
var ErrStateNotRestored = errors.New("the state its Fit returned does not restore the fitted model")

// checkRestores predicts up to 8 validation source sets with fm as Fit
// left it, configures fm with state, and predicts them again: the two
// must agree to 1e-9.
func checkRestores(ctx context.Context, fm forward.Model, g *graph.Graph, params map[string]string, state []byte, val []forward.Pair) error {
	x := newBatch(val[:min(len(val), 8)], g.N(), func(p forward.Pair) []int { return p.Sources })
	before, err := fm.Predict(ctx, x)
	if err != nil {
		return fmt.Errorf("predicting after fit: %w", err)
	}
	if err := fm.Configure(ctx, g, params, state); err != nil {
		return fmt.Errorf("configuring with the state its Fit returned (%d bytes): %w", len(state), err)
	}
	after, err := fm.Predict(ctx, x)
	if err != nil {
		return fmt.Errorf("predicting after configuring with the state its Fit returned (%d bytes): %w", len(state), err)
	}
	for _, y := range []*mat.Dense{before, after} {
		if r, c := y.Dims(); r != x.RawMatrix().Rows || c != g.N() {
			return fmt.Errorf("predict returned %dx%d for %dx%d: %w", r, c, x.RawMatrix().Rows, g.N(), forward.ErrBadOutput)
		}
	}
	worst, node := 0.0, 0
	for i := range x.RawMatrix().Rows {
		a, b := before.RawRowView(i), after.RawRowView(i)
		for v := range a {
			if d := math.Abs(a[v] - b[v]); d > worst || math.IsNaN(d) {
				worst, node = d, v
			}
		}
	}
	if worst > 1e-9 || math.IsNaN(worst) {
		return fmt.Errorf("%w: predictions differ by up to %.3g (node %s) after Configure with it (%d bytes); Configure must restore everything Fit learned (sourcewatch plugin check runs this check)",
			ErrStateNotRestored, worst, g.ID(node), len(state))
	}
	return nil
}

func sourceSets(ps []forward.Pair) [][]int {
	out := make([][]int, len(ps))
	for i, p := range ps {
		out[i] = p.Sources
	}
	return out
}

func observe(y []float64, infected []int) {
	clear(y)
	for _, v := range infected {
		y[v] = 1
	}
}

func checkPair(p forward.Pair, n int) error {
	if len(p.Sources) == 0 {
		return fmt.Errorf("no sources")
	}
	// A repeated source would count twice in F1 (above 1) and in the
	// prior's training sets.
	seen := make(map[int]bool, len(p.Sources))
	for _, v := range p.Sources {
		if v < 0 || v >= n {
			return fmt.Errorf("source index %d outside [0, %d)", v, n)
		}
		if seen[v] {
			return fmt.Errorf("source index %d listed twice", v)
		}
		seen[v] = true
	}
	for _, v := range p.Infected {
		if v < 0 || v >= n {
			return fmt.Errorf("infected index %d outside [0, %d)", v, n)
		}
	}
	return nil
}

// newBatch makes a len(ps) x n indicator matrix from each pair's index set.
func newBatch(ps []forward.Pair, n int, set func(forward.Pair) []int) *mat.Dense {
	m := mat.NewDense(len(ps), n, nil)
	for i, p := range ps {
		row := m.RawRowView(i)
		for _, v := range set(p) {
			row[v] = 1
		}
	}
	return m
}

// OptStepsMetricPrefix starts the name of the manifest metric holding the
// validation F1 of one candidate n_opt (OptStepsMetric).
const OptStepsMetricPrefix = "val_f1_opt_steps_"

// OptStepsMetric names the manifest metric holding the validation F1 with
// n_opt = k, recorded when Train chooses n_opt from several values.
func OptStepsMetric(k int) string { return OptStepsMetricPrefix + strconv.Itoa(k) }

// validation holds the choices Train makes on the validation solves of
// one schedule (steps 5-7), their metrics, and auc, the mean validation
// ROC-AUC of the chosen ranking over every n_opt tried (before the lone
// nodes or a calibration, which are chosen, or fitted, on the same solves;
// the descent's scores under cfg.ScoreRankingOnly).
type validation struct {
	ranking     Ranking
	lone        bool
	calibration *Calibration
	optSteps    int
	threshold   float64
	rule        SourceRule
	metrics     map[string]float64
	auc         float64
}

// validate solves the validation cascades val with solve (b's manifest
// holds no choice yet) and makes the choices of steps 5-7 on them.
func validate(ctx context.Context, g *graph.Graph, b *Bundle, fm forward.Model, val []forward.Pair, grid []int, solve Options, cfg TrainConfig, stage string, progress func(TrainProgress)) (validation, error) {
	v := validation{metrics: make(map[string]float64)}
	n, limit := g.N(), len(val)
	scores := make([][][]float64, len(grid))    // [grid][cascade]
	predicted := make([][][]float64, len(grid)) // f(xbar) at each, for the ranking
	for gi := range scores {
		scores[gi] = make([][]float64, limit)
		predicted[gi] = make([][]float64, limit)
	}
	y := make([]float64, n)
	for i := 0; i < limit; i++ {
		observe(y, val[i].Infected)
		opts := solve
		opts.Seed = solve.Seed + uint64(i)
		opts.OptSteps, opts.Checkpoints = grid[len(grid)-1], grid
		opts.Predict = !cfg.ScoreRankingOnly
		res, err := Solve(ctx, b, fm, y, opts)
		if err != nil {
			return validation{}, fmt.Errorf("choosing threshold on validation cascade %d (schedule %s): %w", i, solve.Variant, err)
		}
		for gi, cp := range res.Checkpoints {
			scores[gi][i] = cp.Scores
			predicted[gi][i] = cp.Predicted
		}
		progress(TrainProgress{Stage: stage, Done: i + 1, Total: limit, Loss: math.NaN()})
	}
	if !cfg.ScoreRankingOnly {
		var all []RankingInput
		var pairs []forward.Pair
		for gi := range grid {
			for i := range scores[gi] {
				all = append(all, RankingInput{Scores: scores[gi][i], Predicted: predicted[gi][i]})
			}
			pairs = append(pairs, val...)
		}
		rank, means := ChooseRanking(all, pairs)
		for r, auc := range means {
			v.metrics[RankingAUCMetric(r)] = auc
		}
		v.ranking, v.auc = rank, math.NaN() // no cascade to judge a ranking by
		if auc, ok := means[rank]; ok {
			v.auc = auc
		}
		for gi := range grid {
			for i := range scores[gi] {
				observe(y, val[i].Infected)
				rank.apply(scores[gi][i], y, predicted[gi][i])
			}
		}
		var ranked [][]float64
		for gi := range grid {
			ranked = append(ranked, scores[gi]...)
		}
		lift, without, with := ChooseLoneFirst(g, ranked, pairs)
		v.metrics[LoneFirstAUCMetric] = with
		var cascade []int
		for range grid {
			for i := 0; i < limit; i++ {
				cascade = append(cascade, i)
			}
		}
		// The calibration rescales the uninfected below the infected, which
		// only a ranking that already puts them there keeps meaning.
		var cal *Calibration
		calibrated := math.NaN()
		if rank != RankByScore {
			cal, calibrated = ChooseCalibration(g, ranked, pairs, cascade)
		}
		if cal != nil {
			v.metrics[CalibratedAUCMetric] = calibrated
			if calibrated > math.Max(without, with)+1e-12 {
				v.calibration = cal
				lift = false
				var sizes []int
				for i := 0; i < limit; i++ {
					observe(y, val[i].Infected)
					sizes = InfectedComponentSizes(g, y, sizes)
					for gi := range grid {
						cal.apply(scores[gi][i], y, sizes)
					}
				}
			}
		}
		if lift {
			v.lone = true
			var lone []bool
			for i := 0; i < limit; i++ {
				observe(y, val[i].Infected)
				lone = LoneInfected(g, y, lone)
				for gi := range grid {
					liftLone(scores[gi][i], lone)
				}
			}
		}
	}
	deltas := make([]float64, len(grid))
	perCascade := make([][]float64, len(grid))
	for gi, k := range grid {
		d, f := ChooseThreshold(scores[gi], val, Thresholds)
		if len(grid) > 1 {
			v.metrics[OptStepsMetric(k)] = f
		}
		deltas[gi] = d
		perCascade[gi] = make([]float64, limit)
		for i := range perCascade[gi] {
			perCascade[gi][i] = f1At(scores[gi][i], val[i].Sources, d)
		}
	}
	best := ChooseOptSteps(perCascade, cfg.FewestStepsWithinNoise)
	if cfg.FewestStepsWithinNoise && len(grid) > 1 {
		v.metrics[OptStepsWithinNoiseMetric] = 1
	}
	v.optSteps = grid[best]
	v.threshold = deltas[best]
	v.metrics["val_f1"] = mean(perCascade[best])
	if !cfg.ThresholdOnly {
		v.metrics[ThresholdF1Metric] = v.metrics["val_f1"]
		rule, f1 := ChooseSourceRule(scores[best], val)
		if keepCountRule(mean(f1), v.metrics["val_f1"]) {
			v.rule = rule
			v.metrics["val_f1"] = mean(f1)
		}
	}
	if cfg.ScoreRankingOnly {
		var sum float64
		count := 0
		isSource := make([]bool, n)
		for gi := range grid {
			for i, s := range scores[gi] {
				clear(isSource)
				for _, u := range val[i].Sources {
					isSource[u] = true
				}
				if auc := ROCAUC(s, isSource); !math.IsNaN(auc) {
					sum += auc
					count++
				}
			}
		}
		v.auc = math.NaN()
		if count > 0 {
			v.auc = sum / float64(count)
		}
	}
	return v, nil
}

// minCountRuleF1 is the validation F1 below which a count rule is not
// kept: there nothing finds sources, the rules' differences are noise,
// and a fraction of the infected count named thousands of sources where
// the training cascades had one (a 20,000-node path).
const minCountRuleF1 = 0.01

// keepCountRule reports whether a count rule of validation F1 countF1
// replaces the threshold of validation F1 thresholdF1.
func keepCountRule(countF1, thresholdF1 float64) bool {
	return countF1 >= minCountRuleF1 && countF1 > thresholdF1+1e-12
}
