package localize_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/deepis"
	"github.com/sourcewatch/sourcewatch/prior"
)

// karateTraining returns the demo karate graph, 40 simulated SI cascades as
// (sources, infected) pairs and a small prior configuration.
func karateTraining(t *testing.T) (*graph.Graph, []forward.Pair, prior.Config) {
	t.Helper()
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	sim := diffusion.DefaultConfig()
	sim.Beta = 0.25
	cs, _, err := diffusion.Simulate(t.Context(), g, sim, 40, 3, diffusion.Workers(1))
	require.NoError(t, err)
	pairs := make([]forward.Pair, len(cs))
	for i, c := range cs {
		pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}
	pc := prior.DefaultConfig()
	pc.Hidden, pc.Latent, pc.Epochs = 16, 4, 3
	return g, pairs, pc
}

// TestTrainCalibratesPriorWeight trains small bundles with the deepis
// model in process and checks that the prior weight comes from the forward
// model's validation error, times the scale, unless the caller sets it,
// and that delta is one of the grid.
func TestTrainCalibratesPriorWeight(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	train, val := pairs[:30], pairs[30:]
	for _, tc := range []struct {
		name   string
		weight float64
		scale  float64
	}{{"calibrated", 0, 0}, {"scaled", 0, 0.25}, {"explicit", 0.7, 0}, {"explicit wins over scale", 0.7, 0.25}} {
		t.Run(tc.name, func(t *testing.T) {
			m := deepis.New()
			require.NoError(t, m.Configure(t.Context(), g, nil, nil))
			opts := localize.DefaultOptions()
			opts.PriorWeight = tc.weight
			opts.Restarts = 2
			b, err := localize.Train(t.Context(), g, m, train, val, localize.TrainConfig{
				Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16,
				Solve: opts, ValidationSolves: 3, Seed: 5, PriorWeightScale: tc.scale,
			}, nil)
			require.NoError(t, err)
			mse, err := localize.ForwardMSE(t.Context(), m, g.N(), val)
			require.NoError(t, err)
			require.InDelta(t, mse, b.Manifest.Metrics["noise_variance"], 1e-12)
			want := tc.weight
			if want == 0 {
				want = localize.CalibratedPriorWeight(mse)
				require.Greater(t, mse, 0.0)
				require.InDelta(t, 2*mse, want, 1e-12)
				if tc.scale > 0 {
					want *= tc.scale
				}
			}
			require.InDelta(t, want, b.Manifest.Solve.PriorWeight, 1e-12)
			require.InDelta(t, want, b.Manifest.Metrics["prior_weight"], 1e-12)
			require.InDelta(t, want, b.Options().PriorWeight, 1e-12)
			require.Contains(t, localize.Thresholds, b.Manifest.Threshold)
		})
	}
}

// Given cascades of its own, Train fits the source chance on them, not on
// the validation cascades, and says so in the metrics; a malformed one is
// refused by its index.
func TestTrainFitsTheChanceOnItsOwnCascades(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	opts := localize.DefaultOptions()
	opts.Restarts, opts.InitSteps, opts.OptSteps = 2, 4, 6
	cfg := localize.TrainConfig{
		Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16,
		Solve: opts, ValidationSolves: 4, Seed: 5, ChancePairs: pairs[:5],
	}
	b, err := localize.Train(t.Context(), g, m, pairs[5:30], pairs[30:], cfg, nil)
	require.NoError(t, err)
	require.Equal(t, 1.0, b.Manifest.Metrics[localize.ChanceFreshMetric])
	require.Equal(t, 5.0, b.Manifest.Metrics[localize.ChanceCascadesMetric])
	scores := make([][]float64, 5)
	y := make([]float64, g.N())
	for i := range scores {
		clear(y)
		for _, v := range pairs[i].Infected {
			y[v] = 1
		}
		o := b.Options()
		o.Seed += uint64(i)
		res, err := localize.Solve(t.Context(), b, m, y, o)
		require.NoError(t, err)
		scores[i] = res.Scores
	}
	require.Equal(t, localize.FitSourceChance(scores, pairs[:5]), b.Manifest.SourceChance)

	// Without them: the validation cascades solved, and the metric says so.
	cfg.ChancePairs = nil
	b, err = localize.Train(t.Context(), g, m, pairs[5:30], pairs[30:], cfg, nil)
	require.NoError(t, err)
	require.Equal(t, 0.0, b.Manifest.Metrics[localize.ChanceFreshMetric])
	require.Equal(t, 4.0, b.Manifest.Metrics[localize.ChanceCascadesMetric])

	// Nor with NoSourceChance: no chance, no metric.
	cfg.NoSourceChance = true
	b, err = localize.Train(t.Context(), g, m, pairs[5:30], pairs[30:], cfg, nil)
	require.NoError(t, err)
	require.Nil(t, b.Manifest.SourceChance)
	require.NotContains(t, b.Manifest.Metrics, localize.ChanceCascadesMetric)
	cfg.NoSourceChance = false

	cfg.ChancePairs = []forward.Pair{pairs[0], {Infected: []int{2}}}
	_, err = localize.Train(t.Context(), g, m, pairs[5:30], pairs[30:], cfg, nil)
	require.ErrorContains(t, err, "chance pair 1: no sources")
}

func TestTrainRejectsBadPriorWeightScale(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	_, err := localize.Train(t.Context(), g, m, pairs[:30], pairs[30:], localize.TrainConfig{
		Prior: pc, Solve: localize.DefaultOptions(), PriorWeightScale: -1,
	}, nil)
	require.ErrorContains(t, err, "prior weight scale -1")
}

func TestTrainRejectsBadPairs(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	for _, tc := range []struct {
		name string
		pair forward.Pair
		want string
	}{
		{"no sources", forward.Pair{Infected: []int{1}}, "no sources"},
		{"source twice", forward.Pair{Sources: []int{3, 3}, Infected: []int{3}}, "source index 3 listed twice"},
		{"source outside", forward.Pair{Sources: []int{34}, Infected: []int{1}}, "source index 34 outside [0, 34)"},
		{"infected outside", forward.Pair{Sources: []int{1}, Infected: []int{-1}}, "infected index -1 outside [0, 34)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			val := append(append([]forward.Pair(nil), pairs[30:32]...), tc.pair)
			_, err := localize.Train(t.Context(), g, m, pairs[:30], val, localize.TrainConfig{
				Prior: pc, Solve: localize.DefaultOptions(),
			}, nil)
			require.ErrorContains(t, err, "validation pair 2: "+tc.want)
		})
	}
}

// With an OptStepsGrid, Train chooses n_opt with delta on validation: the
// bundle records the step count whose validation F1 is the best, and
// delta is the one chosen for it.
func TestTrainChoosesOptSteps(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	opts := localize.DefaultOptions()
	opts.Restarts, opts.InitSteps = 2, 4
	grid := []int{12, 2, 6, 6}
	b, err := localize.Train(t.Context(), g, m, pairs[:30], pairs[30:], localize.TrainConfig{
		Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16,
		Solve: opts, ValidationSolves: 6, Seed: 5, OptStepsGrid: grid,
	}, nil)
	require.NoError(t, err)
	best, bestF1 := 0, -1.0
	for _, k := range []int{2, 6, 12} {
		f1, ok := b.Manifest.Metrics["val_f1_opt_steps_"+strconv.Itoa(k)]
		require.True(t, ok, "val F1 at n_opt = %d", k)
		if f1 > bestF1+1e-12 {
			best, bestF1 = k, f1
		}
	}
	require.Equal(t, best, b.Manifest.Solve.OptSteps)
	require.Equal(t, best, b.Options().OptSteps)
	require.InDelta(t, bestF1, b.Manifest.Metrics[localize.ThresholdF1Metric], 1e-12)

	// delta is the one chosen for that n_opt: solving the validation
	// cascades again with the bundle's settings reproduces its F1.
	scores := make([][]float64, 6)
	y := make([]float64, g.N())
	var chanceSum float64
	var sources int
	for i := range scores {
		clear(y)
		for _, v := range pairs[30+i].Infected {
			y[v] = 1
		}
		o := b.Options()
		o.Seed = b.Options().Seed + uint64(i)
		res, err := localize.Solve(t.Context(), b, m, y, o)
		require.NoError(t, err)
		scores[i] = res.Scores
		require.Len(t, res.Chance, g.N())
		for _, c := range res.Chance {
			chanceSum += c
		}
		sources += len(pairs[30+i].Sources)
	}
	// The source chance is fitted on those same solves, and the isotonic
	// fit keeps each class's total: over them the chances add up to the
	// sources there were.
	require.Equal(t, localize.FitSourceChance(scores, pairs[30:36]), b.Manifest.SourceChance)
	require.InDelta(t, float64(sources), chanceSum, 1e-9)
	delta, f1 := localize.ChooseThreshold(scores, pairs[30:36], localize.Thresholds)
	require.Equal(t, b.Manifest.Threshold, delta)
	require.InDelta(t, bestF1, f1, 1e-12)
	// and the source rule is the count rule's best on those solves when
	// that beats the threshold, else the threshold.
	rule, ruleF1 := localize.ChooseSourceRule(scores, pairs[30:36])
	if mean(ruleF1) > bestF1+1e-12 {
		require.Equal(t, rule, b.Manifest.SourceRule)
		require.InDelta(t, mean(ruleF1), b.Manifest.Metrics["val_f1"], 1e-12)
	} else {
		require.True(t, b.Manifest.SourceRule.IsThreshold())
		require.InDelta(t, bestF1, b.Manifest.Metrics["val_f1"], 1e-12)
	}

	// The ranking is the one with the higher validation ROC-AUC, and the
	// re-solved scores are ranked by it.
	by, ok := b.Manifest.Metrics[localize.RankingAUCMetric(localize.RankByScore)]
	require.True(t, ok)
	first := b.Manifest.Metrics[localize.RankingAUCMetric(localize.InfectedFirst)]
	t.Logf("validation ROC-AUC: by score %.4f, infected first %.4f", by, first)
	require.GreaterOrEqual(t, first, by-1e-12, "where sources are always infected (SI) the infected first cannot rank worse")
	// Nor can the uninfected nodes' order move it: under SI
	// InfectedThenPredicted ties InfectedFirst and the simpler is kept.
	predicted, ok := b.Manifest.Metrics[localize.RankingAUCMetric(localize.InfectedThenPredicted)]
	require.True(t, ok, "train scored the ranking by prediction")
	require.InDelta(t, first, predicted, 1e-12)
	require.NotEqual(t, localize.InfectedThenPredicted, b.Manifest.Ranking)
	if first > by+1e-12 {
		require.Equal(t, localize.InfectedFirst, b.Manifest.Ranking)
		for i, s := range scores {
			infected := map[int]bool{}
			lowest := 2.0
			for _, v := range pairs[30+i].Infected {
				infected[v] = true
				lowest = min(lowest, s[v])
			}
			for v, sv := range s {
				if !infected[v] {
					require.Less(t, sv, lowest, "cascade %d node %d", i, v)
				}
			}
		}
	} else {
		require.Equal(t, localize.RankByScore, b.Manifest.Ranking)
	}

	_, err = localize.Train(t.Context(), g, m, pairs[:30], pairs[30:], localize.TrainConfig{
		Prior: pc, Prototypes: 16, Solve: opts, ValidationSolves: 2, OptStepsGrid: []int{0, 5},
	}, nil)
	require.ErrorContains(t, err, "opt steps grid")
}

func TestChooseOptSteps(t *testing.T) {
	// Three step counts over four validation cascades.
	level := [][]float64{
		{0.50, 0.40, 0.60, 0.30}, // mean 0.45
		{0.55, 0.35, 0.60, 0.34}, // mean 0.46: differences 0.05, -0.05, 0, 0.04
		{0.20, 0.20, 0.20, 0.20}, // mean 0.20
	}
	clear := [][]float64{
		{0.30, 0.30, 0.30, 0.30},
		{0.50, 0.52, 0.49, 0.51},
		{0.50, 0.52, 0.49, 0.51}, // tied with the second: fewer steps win
	}
	// 10 steps trail the best by exactly 0.01 on every cascade (outside
	// one standard error, which is 0), 25 by 0.02 on average with a wide
	// spread (inside it): 10 steps score better than 25 and are chosen.
	dominated := [][]float64{
		{0.49, 0.59, 0.39, 0.69}, // mean 0.54
		{0.70, 0.30, 0.60, 0.52}, // mean 0.53
		{0.50, 0.60, 0.40, 0.70}, // mean 0.55
	}
	for _, tc := range []struct {
		name        string
		f1          [][]float64
		withinNoise bool
		want        int
	}{
		{"best", level, false, 1},
		{"fewer steps that score as well win", dominated, true, 0},
		{"the best, without the rule", dominated, false, 2},
		{"within noise of the best", level, true, 0},
		{"ties go to fewer steps", clear, false, 1},
		{"a clear loss is not noise", clear, true, 1},
		{"one step count", [][]float64{{0.1, 0.2}}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, localize.ChooseOptSteps(tc.f1, tc.withinNoise))
		})
	}
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestTrainChoosesPrior trains with and without the prior's choice: the
// two validation ROC-AUCs it records are those of bundles trained with the
// prior and without it (the same validation solves), and it keeps the
// schedule and every choice of the better one.
func TestTrainChoosesPrior(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	train := func(variant localize.Variant, choose bool) *localize.Bundle {
		opts := localize.DefaultOptions()
		opts.Restarts, opts.InitSteps, opts.Variant = 2, 4, variant
		b, err := localize.Train(t.Context(), g, m, pairs[:30], pairs[30:], localize.TrainConfig{
			Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16,
			Solve: opts, ValidationSolves: 8, Seed: 5, OptStepsGrid: []int{2, 6}, ChoosePrior: choose,
		}, nil)
		require.NoError(t, err)
		return b
	}
	auc := func(b *localize.Bundle) float64 {
		return b.Manifest.Metrics[localize.RankingAUCMetric(b.Manifest.Ranking)]
	}
	with, without := train(localize.DataInit, false), train(localize.NoPrior, false)
	chosen := train(localize.DataInit, true)
	require.InDelta(t, auc(with), chosen.Manifest.Metrics[localize.WithPriorAUCMetric], 1e-12)
	require.InDelta(t, auc(without), chosen.Manifest.Metrics[localize.WithoutPriorAUCMetric], 1e-12)
	t.Logf("validation ROC-AUC with the prior %.4f, without %.4f", auc(with), auc(without))
	want := with
	if auc(without) > auc(with)+1e-12 {
		want = without
	}
	require.Equal(t, want.Manifest.Solve.Variant, chosen.Manifest.Solve.Variant)
	require.Equal(t, want.Manifest.Solve.OptSteps, chosen.Manifest.Solve.OptSteps)
	require.Equal(t, want.Manifest.Threshold, chosen.Manifest.Threshold)
	require.Equal(t, want.Manifest.SourceRule, chosen.Manifest.SourceRule)
	require.Equal(t, want.Manifest.Ranking, chosen.Manifest.Ranking)
	require.Equal(t, want.Manifest.LoneInfectedFirst, chosen.Manifest.LoneInfectedFirst)
	require.Equal(t, want.Manifest.Calibration, chosen.Manifest.Calibration)
	require.InDelta(t, want.Manifest.Metrics["val_f1"], chosen.Manifest.Metrics["val_f1"], 1e-12)

	// The choice is forced the other way by the metrics alone: a bundle
	// whose prior was dropped solves as the no-prior one does.
	if chosen.Manifest.Solve.Variant == localize.NoPrior {
		require.Equal(t, localize.NoPrior, chosen.Options().Variant)
	}
	// An ablation's schedule is not second-guessed.
	ablation := train(localize.NoPriorPred, true)
	require.Equal(t, localize.NoPriorPred, ablation.Manifest.Solve.Variant)
	require.NotContains(t, ablation.Manifest.Metrics, localize.WithPriorAUCMetric)
	for _, name := range []string{"auto", "on"} {
		_, err := localize.ParsePriorChoice(name)
		require.NoError(t, err)
	}
	_, err := localize.ParsePriorChoice("off")
	require.ErrorContains(t, err, `want auto or on, got "off"`)
}

func TestWeakRanking(t *testing.T) {
	for _, tc := range []struct {
		metrics map[string]float64
		want    string
	}{
		{map[string]float64{"test_auc": 0.9, localize.TestInfectedAUCMetric: 0.8}, ""},
		{map[string]float64{"test_auc": 0.755, localize.TestInfectedAUCMetric: 0.805}, "ranks no better than the observation itself (ROC-AUC 0.755, the infected control 0.805)"},
		{map[string]float64{"test_auc": 0.8, localize.TestInfectedAUCMetric: 0.8}, "ROC-AUC 0.800, the infected control 0.800"},
		{map[string]float64{"test_auc": 0.7}, ""}, // a bundle from before the control was recorded
		// Above a control that is itself below chance (SIR), still chance.
		{map[string]float64{"test_auc": 0.522, localize.TestInfectedAUCMetric: 0.44}, "ranks the nodes about as well as chance (ROC-AUC 0.522, where a random ranking scores 0.5; the infected control 0.440)"},
		{map[string]float64{"test_auc": 0.5}, "(ROC-AUC 0.500, where a random ranking scores 0.5)"},
		// A perfect control: nothing spread, so "no better" misleads.
		{map[string]float64{"test_auc": 1, localize.TestInfectedAUCMetric: 1}, "the infected nodes are exactly the sources (the infected control ranks them perfectly, ROC-AUC 1.000; this bundle 1.000)"},
	} {
		m := localize.Manifest{Metrics: tc.metrics}
		if tc.want == "" {
			require.Empty(t, m.WeakRanking(), tc.metrics)
			continue
		}
		require.Contains(t, m.WeakRanking(), tc.want)
	}
}

func TestOutsideTraining(t *testing.T) {
	m := localize.Manifest{Graph: localize.GraphRef{Nodes: 100}, Metrics: map[string]float64{
		localize.TrainInfectedMinMetric: 0.2, localize.TrainInfectedMaxMetric: 0.5}}
	require.Empty(t, m.OutsideTraining(20))
	require.Empty(t, m.OutsideTraining(50))
	require.Equal(t, "3.0% of the nodes infected, outside the 20-50% the bundle's training snapshots held: its threshold, source count and ranking were chosen on those",
		m.OutsideTraining(3))
	require.Contains(t, m.OutsideTraining(90), "90.0% of the nodes infected")
	m.Metrics[localize.TrainInfectedMaxMetric] = 1 // a training snapshot held every node
	require.Equal(t, "every node infected: a snapshot of every node says next to nothing of where the spread began", m.OutsideTraining(100))
	delete(m.Metrics, localize.TrainInfectedMaxMetric)
	require.Empty(t, m.OutsideTraining(3), "a bundle that does not record the range says nothing")
	require.NotEmpty(t, m.OutsideTraining(100), "every node infected is said whatever the bundle records")
}

// The floor is read against the test error where the bundle has one, the
// validation error (which the fit stopped early on) where it does not.
func TestManifestForwardError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		metrics   map[string]float64
		mse       float64
		split     string
		available bool
	}{
		{"both", map[string]float64{"forward_val_mse": 0.2, localize.ForwardTestMSEMetric: 0.25}, 0.25, "test", true},
		{"an older bundle", map[string]float64{"forward_val_mse": 0.2}, 0.2, "val", true},
		{"a NaN test error", map[string]float64{"forward_val_mse": 0.2, localize.ForwardTestMSEMetric: math.NaN()}, 0.2, "val", true},
		{"neither", map[string]float64{}, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := localize.Manifest{Metrics: tc.metrics}
			mse, split, ok := m.ForwardError()
			require.Equal(t, tc.available, ok)
			require.Equal(t, tc.split, split)
			require.Equal(t, tc.mse, mse)
		})
	}
}

func TestPoorFit(t *testing.T) {
	require.False(t, localize.PoorFit(0.2, 0), "no floor, no verdict")
	require.False(t, localize.PoorFit(0.125, 0.1))
	require.True(t, localize.PoorFit(0.126, 0.1))
	for _, tc := range []struct {
		epochs, best float64
		want         string
	}{
		{20, 14, "its validation error stopped improving at epoch 14 of 20, so more epochs will not help: train on more cascades, and compare forward models (c); judge by the ranking, not the forward error"},
		{20, 20, "its fit was still improving at its last epoch (20), but more epochs (e) can lower the forward error by saturating the model, its outputs pinned at 0 or 1 where inference descends, which leaves the descent no gradient: keep a longer fit only if it ranks better; train on more cascades, and compare forward models (c); judge by the ranking, not the forward error"},
		{0, 0, "set the forward model's parameters, or compare forward models (c); judge by the ranking, not the forward error"},
	} {
		require.Equal(t, tc.want, localize.PoorFitAdvice("c", "e", tc.epochs, tc.best))
	}
}

// A count rule that names every infected node says so: the source set
// then carries nothing.
func TestAnswerNote(t *testing.T) {
	m := localize.Manifest{Graph: localize.GraphRef{Nodes: 100}, Metrics: map[string]float64{
		localize.TrainInfectedMinMetric: 0.05, localize.TrainInfectedMaxMetric: 0.5}}
	count := localize.SourceRule{Count: 7}
	require.Empty(t, m.AnswerNote(20, 7, count))
	require.Empty(t, m.AnswerNote(6, 6, localize.SourceRule{}), "a threshold names what clears it")
	require.Equal(t, "every infected node is named a source, as the bundle's count rule (the 7 highest scores) names 6 and 6 are infected: the source set says nothing here; read score and probability for the order",
		m.AnswerNote(6, 6, count))
	require.Contains(t, m.AnswerNote(7, 7, count), "every infected node is named")
	both := m.AnswerNote(3, 3, count)
	require.Contains(t, both, "3.0% of the nodes infected, outside")
	require.Contains(t, both, "; every infected node is named a source")
	require.Contains(t, m.AnswerNote(1, 1, localize.SourceRule{Fraction: 0.5}), "names 1 and 1 is infected", "a fraction rule's K")
	require.NotContains(t, m.AnswerNote(2, 1, localize.SourceRule{Fraction: 0.5}), "named a source")
	require.NotContains(t, m.AnswerNote(100, 7, count), "named a source", "every node infected is said otherwise")
	// What a floor names after the count is not the rule's: callers pass
	// the rule's part, and a count of 2 with 8 infected says nothing.
	require.NotContains(t, m.AnswerNote(8, 2, localize.SourceRule{Count: 2}), "named a source")
}

// Under SI and IC every lone infected node of a snapshot is a source;
// under SIR one may have caught the spread from a neighbour since
// recovered. Karate at 10-15% infected from 10% of the nodes holds lone
// nodes in most snapshots.
func TestLoneSourceRateBySimulation(t *testing.T) {
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	rate := func(model diffusion.Model) float64 {
		sim := diffusion.DefaultConfig()
		sim.Model, sim.Beta, sim.Gamma = model, 0.1, 0.6
		sim.ObserveMin, sim.ObserveMax = 0.1, 0.15
		cs, _, err := diffusion.Simulate(t.Context(), g, sim, 200, 5, diffusion.Workers(1))
		require.NoError(t, err)
		pairs := make([]forward.Pair, len(cs))
		for i, c := range cs {
			pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
		}
		r, ok := localize.LoneSourceRate(g, pairs)
		require.True(t, ok)
		return r
	}
	require.Equal(t, 1.0, rate(diffusion.SI))
	require.Equal(t, 1.0, rate(diffusion.IC))
	require.Less(t, rate(diffusion.SIR), 1.0)
}

// PluginFitMetrics gives what the plugin's Fit reported, under its own
// names, and leaves out what train measured itself.
func TestPluginFitMetrics(t *testing.T) {
	m := localize.Manifest{Metrics: map[string]float64{
		"forward_val_mse": 0.2, localize.PluginValMSEMetric: 0.3, localize.ForwardTestMSEMetric: 0.21,
		localize.ForwardFloorMetric: 0.19, "forward_fit_seconds": 2, localize.VJPCheckMetric: 1e-7,
		localize.FusedCheckMetric: 1e-9, localize.VJPFlatMetric: 0.1,
		"forward_epochs": 20, "forward_theta": 0.4, "prior_val_loss": 8, "test_auc": 0.9,
	}}
	require.Equal(t, map[string]float64{"epochs": 20, "theta": 0.4}, m.PluginFitMetrics())
	require.Nil(t, (&localize.Manifest{Metrics: map[string]float64{"forward_val_mse": 0.2}}).PluginFitMetrics())
}

// boastfulFit is deepis with a Fit that also reports metrics named as the
// host's own measures.
type boastfulFit struct{ *deepis.Model }

func (b boastfulFit) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	res, err := b.Model.Fit(ctx, pairs, opts, progress)
	if res.Metrics == nil {
		res.Metrics = map[string]float64{}
	}
	res.Metrics["vjp_check_flat"] = 1
	res.Metrics["floor_mse"] = 0.001
	res.Metrics["test_mse"] = 9
	// And one of its own named as the floor's new name.
	res.Metrics["plugin_floor_mse"] = 0.002
	return res, err
}

// A plugin's Fit metrics named as the host's measures (the VJP check,
// the floor, the test error) do not stand in for them: a reported
// vjp_check_flat of 1 made localize warn of a flat gradient no check
// found, and a floor_mse from a plugin was read as the host's floor.
func TestTrainKeepsPluginMetricsApartFromTheHosts(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	m := deepis.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	opts := localize.DefaultOptions()
	opts.Restarts = 2
	b, err := localize.Train(t.Context(), g, boastfulFit{m}, pairs[:30], pairs[30:], localize.TrainConfig{
		Fit: forward.FitOptions{Epochs: 2}, Prior: pc, Prototypes: 16, Solve: opts, ValidationSolves: 3, Seed: 5,
	}, nil)
	require.NoError(t, err)
	met := b.Manifest.Metrics
	require.NotContains(t, met, localize.VJPFlatMetric)
	require.NotContains(t, met, localize.ForwardFloorMetric)
	require.NotContains(t, met, localize.ForwardTestMSEMetric)
	require.Equal(t, 1.0, met["forward_plugin_vjp_check_flat"])
	// The plugin's own plugin_floor_mse keeps its name; its floor_mse
	// moves on past it, neither lost (one overwrote the other, by the
	// map's order).
	require.Equal(t, 0.002, met["forward_plugin_floor_mse"])
	require.Equal(t, 0.001, met["forward_plugin_plugin_floor_mse"])
	require.Equal(t, 9.0, met["forward_plugin_test_mse"])
	require.Empty(t, b.Manifest.VJPCheckFailure(""))
	// They are the plugin's, under its own prefixed names.
	fit := b.Manifest.PluginFitMetrics()
	require.Equal(t, 1.0, fit["plugin_vjp_check_flat"])
	require.NotContains(t, fit, "vjp_check_flat")
}

// More prototypes than the terms can hold are refused before anything is
// fitted (2,000,000,000 of them died of an allocation after the fits).
func TestTrainRefusesTooManyPrototypes(t *testing.T) {
	g, pairs, pc := karateTraining(t)
	_, err := localize.Train(t.Context(), g, deepis.New(), pairs[:30], pairs[30:], localize.TrainConfig{
		Prior: pc, Prototypes: 2_000_000_000, Solve: localize.DefaultOptions(),
	}, nil)
	require.ErrorContains(t, err, "training: prototypes 2000000000: want at most 1048576")
}

// unfittable fails any Fit: a check that must refuse the config before
// anything is fitted reports this error instead when it does not.
type unfittable struct{ *deepis.Model }

func (unfittable) Fit(context.Context, []forward.Pair, forward.FitOptions, func(forward.Progress)) (forward.FitResult, error) {
	return forward.FitResult{}, errors.New("Fit was called")
}

// Prototypes within MaxPrototypes whose terms would not fit in a bundle
// (2^20 at the default hidden width 128 take just over its 1 GiB) are
// refused before fitting, not after it, when the bundle written would be
// one that every load refuses.
func TestTrainRefusesPrototypesABundleCannotHold(t *testing.T) {
	g, pairs, _ := karateTraining(t)
	pc := prior.DefaultConfig()
	_, err := localize.Train(t.Context(), g, unfittable{deepis.New()}, pairs[:30], pairs[30:], localize.TrainConfig{
		Prior: pc, Prototypes: localize.MaxPrototypes, Solve: localize.DefaultOptions(),
	}, nil)
	require.ErrorContains(t, err, "training: prototypes 1048576 at prior hidden width 128: the prior terms would take 1032 MiB, more than a bundle holds (1024 MiB)")
	// Below it, what was taken still is.
	_, err = localize.Train(t.Context(), g, unfittable{deepis.New()}, pairs[:30], pairs[30:], localize.TrainConfig{
		Prior: pc, Prototypes: localize.MaxPrototypes / 2, Solve: localize.DefaultOptions(),
	}, nil)
	require.ErrorContains(t, err, "Fit was called")
}
