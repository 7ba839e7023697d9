package monitor

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
	"github.com/sourcewatch/sourcewatch/prior"
)

// The daemon's localizer runs a bundle through its real plugin process,
// keeps the prior terms but not the VAE network, and says at load when
// the bundle's forward model fits its graph poorly or failed train's VJP
// spot check.
func TestBundleLocalizers(t *testing.T) {
	plugin, _, g, b, cs := karateICMFBundle(t)
	// A floor far below the fit, as train records for a poor one.
	b.Manifest.Metrics[localize.ForwardFloorMetric] = b.Manifest.Metrics["forward_val_mse"] / 2
	// And a failed VJP spot check, as train records for a wrong gradient.
	b.Manifest.Metrics[localize.VJPCheckMetric] = 40
	// And a test ROC-AUC below the infected control's.
	b.Manifest.Metrics["test_auc"], b.Manifest.Metrics[localize.TestInfectedAUCMetric] = 0.75, 0.80
	// And held-out sets of 12 nodes for 1 source.
	b.Manifest.Metrics[localize.TestNamedMetric], b.Manifest.Metrics[localize.TestSourcesMetric] = 12, 1
	bundle := filepath.Join(t.TempDir(), "karate.swb")
	require.NoError(t, b.WriteFile(bundle))
	gc := DefaultGraphConfig("karate")
	gc.Bundle = bundle
	require.NoError(t, BundlePreflight(filepath.Dir(plugin))(gc, g))
	// The preflight refuses a plugin build the bundle was not trained
	// with, as the launch would, without starting it.
	rebuilt := t.TempDir()
	bin, err := os.ReadFile(plugin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(rebuilt, forward.BinaryPrefix+"icmf"), append(bin, 0), 0o755))
	err = BundlePreflight(rebuilt)(gc, g)
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, "was trained with another build of icmf")
	pinned := gc
	pinned.ForwardChecksum = "00"
	require.ErrorIs(t, BundlePreflight(filepath.Dir(plugin))(pinned, g), forward.ErrChecksum)
	require.ErrorContains(t, BundlePreflight(t.TempDir())(gc, g), "the plugin dir holds no plugin")

	core, logs := observer.New(zapcore.WarnLevel)
	factory := BundleLocalizers(filepath.Dir(plugin), zap.New(core))
	l, err := factory(t.Context(), gc, g)
	require.NoError(t, err)
	defer l.Close()
	// Rebuilt (a reload, a plugin that keeps failing), the same bundle is
	// not warned of again.
	again, err := factory(t.Context(), gc, g)
	require.NoError(t, err)
	require.NoError(t, again.Close())
	bl := l.(*bundleLocalizer)
	require.Nil(t, bl.bundle.VAE, "the daemon keeps the prior terms, not the network")
	require.NotNil(t, bl.bundle.Terms)
	require.Positive(t, bl.PluginPID())
	require.Equal(t, 1, logs.FilterMessageSnippet("fits its graph poorly").Len())
	require.Equal(t, 1, logs.FilterMessageSnippet("has a wrong gradient: the forward model's VJP disagrees").Len())
	require.Equal(t, 1, logs.FilterMessageSnippet("the bundle ranks weakly: on its test cascades this bundle ranks no better than the observation").Len())
	require.Equal(t, 1, logs.FilterMessageSnippet("the bundle names many suspects: on its test cascades the source set held 12.0 nodes on average for 1.0 true sources").Len())

	y := make([]float64, g.N())
	for _, v := range cs[35].Infected {
		y[v] = 1
	}
	inf, err := l.Localize(t.Context(), y)
	require.NoError(t, err)
	require.Len(t, inf.Scores, g.N())
	require.Len(t, inf.Chance, g.N(), "a bundle Train wrote measures each node's chance")
	require.Equal(t, "icmf", inf.Model.Forward)

	// A relaunch starts a new plugin for the bundle loaded, not the file
	// as it is now (replaced or gone: that is a reload's business).
	require.NoError(t, os.Remove(bundle))
	re, err := bl.Relaunch(t.Context())
	require.NoError(t, err)
	defer re.Close()
	rl := re.(*bundleLocalizer)
	require.NotEqual(t, bl.PluginPID(), rl.PluginPID())
	require.Equal(t, bl.Model(), rl.Model())
	again2, err := re.Localize(t.Context(), y)
	require.NoError(t, err)
	require.Equal(t, inf.Scores, again2.Scores)
}

// A graph run on a pinned build under another name (icmf2 beside icmf,
// as UPGRADING describes) is named by that file in its alerts, though the
// process reports icmf: the operator can tell which build answered. And
// its status says when the plugin runs with no checksum check: only where
// the launch skipped it (allow_unverified with nothing pinned), not merely
// because allow_unverified is set.
func TestBundleLocalizerNamesThePluginRun(t *testing.T) {
	plugin, sum, g, b, cs := karateICMFBundle(t)
	bundle := filepath.Join(t.TempDir(), "karate.swb")
	require.NoError(t, b.WriteFile(bundle))
	// The same bundle recording no checksum for its plugin.
	unrecorded := *b
	unrecorded.Manifest.Forward.SHA256 = ""
	bundleUnrecorded := filepath.Join(t.TempDir(), "karate-unrecorded.swb")
	require.NoError(t, unrecorded.WriteFile(bundleUnrecorded))
	dir := t.TempDir()
	bin, err := os.ReadFile(plugin)
	require.NoError(t, err)
	for _, name := range []string{"icmf", "icmf2"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, forward.BinaryPrefix+name), bin, 0o755))
	}
	y := make([]float64, g.N())
	for _, v := range cs[35].Infected {
		y[v] = 1
	}
	for _, tc := range []struct {
		name, bundle, forward, want string
		pin, allowUnverified        bool
		unverified                  bool
	}{
		{name: "icmf", bundle: bundle, want: "icmf"},
		{name: "icmf2", bundle: bundle, forward: "icmf2", want: "icmf2", pin: true},
		{name: "allow_unverified, recorded", bundle: bundle, want: "icmf", allowUnverified: true},
		{name: "allow_unverified, pinned", bundle: bundle, forward: "icmf2", want: "icmf2", pin: true, allowUnverified: true},
		{name: "icmf2 unverified", bundle: bundle, forward: "icmf2", want: "icmf2", allowUnverified: true, unverified: true},
		{name: "unrecorded unverified", bundle: bundleUnrecorded, want: "icmf", allowUnverified: true, unverified: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc := DefaultGraphConfig("karate")
			gc.Bundle, gc.Forward, gc.AllowUnverified = tc.bundle, tc.forward, tc.allowUnverified
			if tc.pin {
				gc.ForwardChecksum = hex.EncodeToString(sum)
			}
			core, logs := observer.New(zapcore.InfoLevel)
			l, err := BundleLocalizers(dir, zap.New(core))(t.Context(), gc, g)
			require.NoError(t, err)
			defer l.Close()
			inf, err := l.Localize(t.Context(), y)
			require.NoError(t, err)
			require.Equal(t, ModelInfo{Bundle: b.Manifest.ID, Forward: tc.want, ForwardVersion: icmf.Version}, inf.Model)
			// What status reports, from the launch's own decision, which
			// also logged its warning.
			require.Equal(t, &GraphModel{ModelRef: alerts.ModelRef{Bundle: b.Manifest.ID, Forward: tc.want, ForwardVersion: icmf.Version}, Unverified: tc.unverified},
				graphModel(l))
			require.Equal(t, tc.unverified, logs.FilterMessageSnippet("without checksum verification").Len() == 1)
			// A relaunch runs as unchecked as the launch did.
			re, err := l.(*bundleLocalizer).Relaunch(t.Context())
			require.NoError(t, err)
			defer re.Close()
			require.Equal(t, graphModel(l), graphModel(re))
			// What the launch said is not said again at each relaunch.
			require.Equal(t, tc.unverified, logs.FilterMessageSnippet("without checksum verification").Len() == 1)
			renamed := logs.FilterMessageSnippet("reports another name than its file's").All()
			if tc.forward == "" {
				require.Empty(t, renamed)
				return
			}
			require.Len(t, renamed, 1, "the launch, not the relaunch")
			require.Equal(t, "icmf", renamed[0].ContextMap()["reported_name"])
		})
	}
}

// A bundle refused at a reload for another graph, because the edge file
// itself changed since the start, says so: the running graph is the one
// read then.
func TestEdgesChangedHint(t *testing.T) {
	src, err := os.ReadFile("../configs/demo/karate.edges")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "karate.edges")
	require.NoError(t, os.WriteFile(path, src, 0o600))
	g, err := graph.Load(path)
	require.NoError(t, err)
	gc := GraphConfig{Name: "karate", Edges: path}
	mismatch := fmt.Errorf("loading bundle: %w", localize.ErrGraphMismatch)
	require.Empty(t, edgesChangedHint(gc, g, mismatch), "the file is what runs")

	require.NoError(t, os.WriteFile(path, append(src, []byte("33 34\n")...), 0o600))
	require.Equal(t, " (the edge file "+path+" has changed since the daemon started, 34 nodes then, 35 now: edge files are read at start only, so restart to serve the new graph)",
		edgesChangedHint(gc, g, mismatch))
	require.Empty(t, edgesChangedHint(gc, g, errors.New("plugin crashed")), "another error")
}

// The sources an inference names below its threshold, as the observation
// demands (localize.Result.Floor, the last of Sources), are marked in the
// alert, and a floor larger than the set is refused.
func TestRankSourcesMarksTheFloor(t *testing.T) {
	g, err := graph.Read(strings.NewReader("a b\nb c\nc d\n"), "path")
	require.NoError(t, err)
	inf := Inference{Scores: []float64{0.9, 0.2, 0.1, 0.05}, Probability: []float64{1, 0.5, 1, 0.25}, Sources: []int{0, 2}, Floor: 1, Threshold: 0.5}
	srcs, err := rankSources(g, inf)
	require.NoError(t, err)
	require.Equal(t, []alerts.Source{{Node: "a", Score: 0.9, Probability: 1}, {Node: "c", Score: 0.1, Probability: 1, Floor: true}}, srcs)
	inf.Chance = []float64{0.6, 0, 0.3, 0}
	srcs, err = rankSources(g, inf)
	require.NoError(t, err)
	require.Equal(t, 0.6, *srcs[0].Chance)
	require.Equal(t, 0.3, *srcs[1].Chance)
	inf.Chance = inf.Chance[:3]
	_, err = rankSources(g, inf)
	require.ErrorIs(t, err, ErrBadInference)
	require.ErrorContains(t, err, "3 chances for 4 nodes")
	inf.Chance = nil
	inf.Floor = 3
	_, err = rankSources(g, inf)
	require.ErrorIs(t, err, ErrBadInference)
	require.ErrorContains(t, err, "3 floor sources of 2")
}

// A daemon whose edge file differs from its bundle's graph in a weight
// is refused at the preflight naming the arc, not only two fingerprints,
// and the direction still names --directed.
func TestBundlePreflightNamesTheGraphDifference(t *testing.T) {
	plugin := forwardtest.Build(t, "icmf")
	sum, err := forward.FileSHA256(plugin)
	require.NoError(t, err)
	var edges strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&edges, "%d %d 0.4\n%d %d 0.3\n", i, (i+1)%30, i, (i+7)%30)
	}
	read := func(text string, directed bool) *graph.Graph {
		g, err := graph.Read(strings.NewReader(text), "net.edges", graph.Directed(directed))
		require.NoError(t, err)
		return g
	}
	g := read(edges.String(), true)
	cfg := diffusion.DefaultConfig()
	cfg.Model = diffusion.IC
	b, _ := trainSmallICMFBundle(t, g, cfg, sum)
	gc := DefaultGraphConfig("net")
	gc.Bundle = filepath.Join(t.TempDir(), "net.swb")
	require.NoError(t, b.WriteFile(gc.Bundle))
	preflight := BundlePreflight(filepath.Dir(plugin))
	require.NoError(t, preflight(gc, g))

	err = preflight(gc, read(strings.Replace(edges.String(), "3 4 0.4", "3 4 0.45", 1), true))
	require.ErrorIs(t, err, localize.ErrGraphMismatch)
	require.ErrorContains(t, err, "arc 3 -> 4 has weight 0.4 in the bundle's graph, 0.45 in the given one")
	err = preflight(gc, read(edges.String(), false))
	require.ErrorIs(t, err, localize.ErrGraphMismatch)
	require.ErrorContains(t, err, "the bundle's graph is directed, the given one undirected: pass --directed")
}

// karateICMFBundle builds the icmf plugin and trains a small bundle for
// the demo's Karate graph with it (trainSmallICMFBundle), returning the
// plugin's path and SHA-256, the graph, the bundle and its cascades.
func karateICMFBundle(t *testing.T) (string, []byte, *graph.Graph, *localize.Bundle, []diffusion.Cascade) {
	t.Helper()
	plugin := forwardtest.Build(t, "icmf")
	sum, err := forward.FileSHA256(plugin)
	require.NoError(t, err)
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	b, cs := trainSmallICMFBundle(t, g, diffusion.DefaultConfig(), sum)
	return plugin, sum, g, b, cs
}

// trainSmallICMFBundle trains a small bundle on g with the icmf model in
// process, recording the plugin binary's SHA-256 sum: 40 cascades of cfg,
// 30 to train on and 10 to validate, which it returns too.
func trainSmallICMFBundle(t *testing.T, g *graph.Graph, cfg diffusion.Config, sum []byte) (*localize.Bundle, []diffusion.Cascade) {
	t.Helper()
	cs, _, err := diffusion.Simulate(t.Context(), g, cfg, 40, 3)
	require.NoError(t, err)
	pairs := make([]forward.Pair, len(cs))
	for i, c := range cs {
		pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}
	m := icmf.New()
	require.NoError(t, m.Configure(t.Context(), g, nil, nil))
	pc := prior.DefaultConfig()
	pc.Hidden, pc.Latent, pc.Epochs = 8, 4, 2
	opts := localize.DefaultOptions()
	opts.Restarts = 2
	b, err := localize.Train(t.Context(), g, m, pairs[:30], pairs[30:], localize.TrainConfig{
		Forward: localize.ForwardRef{Name: "icmf", Version: icmf.Version, SHA256: hex.EncodeToString(sum)},
		Prior:   pc, Prototypes: 8, Solve: opts, ValidationSolves: 3, Seed: 1,
	}, nil)
	require.NoError(t, err)
	return b, cs
}

// A graph's localizers, built anew by the factory (a reload) or relaunched
// by the daemon, take their supervisors' relaunches from one budget of
// the graph's, which the daemon's relaunches share: a plugin killed as
// soon as it appeared was launched 7 times in a minute, 5 by the daemon
// and 2 by the supervisors, each with a limit of its own.
func TestBundleLocalizersShareTheGraphsRelaunchBudget(t *testing.T) {
	plugin, _, g, b, cs := karateICMFBundle(t)
	bundle := filepath.Join(t.TempDir(), "karate.swb")
	require.NoError(t, b.WriteFile(bundle))
	gc := DefaultGraphConfig("karate")
	gc.Bundle = bundle
	other := gc
	other.Name = "other"
	factory := BundleLocalizers(filepath.Dir(plugin), zap.NewNop())
	build := func(gc GraphConfig) *bundleLocalizer {
		l, err := factory(t.Context(), gc, g)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l.(*bundleLocalizer)
	}
	first := build(gc)
	relaunched, err := first.Relaunch(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { relaunched.Close() })
	budget := first.relaunchBudget()
	require.NotNil(t, budget)
	require.Same(t, budget, relaunched.(*bundleLocalizer).relaunchBudget())
	require.Same(t, budget, build(gc).relaunchBudget())
	require.NotSame(t, budget, build(other).relaunchBudget())

	// The daemon has spent the graph's relaunches: a plugin that dies now
	// is not relaunched by its supervisor either.
	for range relaunchesPerMinute {
		_, err := budget.Take()
		require.NoError(t, err)
	}
	p, err := os.FindProcess(first.PluginPID())
	require.NoError(t, err)
	require.NoError(t, p.Kill())
	y := make([]float64, g.N())
	for _, v := range cs[35].Infected {
		y[v] = 1
	}
	require.Eventually(t, func() bool {
		_, err = first.Localize(t.Context(), y)
		return err != nil
	}, 10*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, err, forward.ErrRelaunchLimit)
	_, err = relaunched.Localize(t.Context(), y)
	require.NoError(t, err, "a live plugin needs no relaunch")
}

// A graph's call_timeout is the deadline of its plugin's calls (1ns times
// out the first), and a reload that changes it builds the localizer anew
// rather than keeping a plugin launched with the old one.
func TestBundleLocalizersCallTimeout(t *testing.T) {
	plugin, _, g, b, _ := karateICMFBundle(t)
	bundle := filepath.Join(t.TempDir(), "karate.swb")
	require.NoError(t, b.WriteFile(bundle))
	gc := DefaultGraphConfig("karate")
	gc.Bundle = bundle
	factory := BundleLocalizers(filepath.Dir(plugin), zap.NewNop())

	gc.CallTimeout = time.Nanosecond
	_, err := factory(t.Context(), gc, g)
	require.ErrorIs(t, err, forward.ErrCallTimeout)
	require.ErrorContains(t, err, "no answer within 1ns")

	gc.CallTimeout = time.Minute
	l, err := factory(t.Context(), gc, g)
	require.NoError(t, err)
	defer l.Close()
	same, err := l.(*bundleLocalizer).Unchanged(t.Context(), gc)
	require.NoError(t, err)
	require.True(t, same)
	gc.CallTimeout = 2 * time.Minute
	same, err = l.(*bundleLocalizer).Unchanged(t.Context(), gc)
	require.NoError(t, err)
	require.False(t, same, "a new deadline needs a new launch")
}

// A Localizer of the caller's own that answers on another scale than the
// alert schema's [0, 1], or with a NaN, is refused as a bad inference
// rather than published as an alert consumers would refuse (a score of
// 2), or sent with every source left out for a max_payload it is not
// over (a NaN, which JSON cannot encode).
func TestRankSourcesRefusesValuesOutsideTheUnitRange(t *testing.T) {
	g, err := graph.Read(strings.NewReader("a b\nb c\nc d\n"), "path")
	require.NoError(t, err)
	good := func() Inference {
		return Inference{Scores: []float64{0.9, 0.2, 0.1, 0}, Probability: []float64{1, 0.5, 1, 0}, Chance: []float64{0.5, 0, 0.25, 1}, Sources: []int{0, 2}, Threshold: 0.1}
	}
	_, err = rankSources(g, good())
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		edit func(*Inference)
		want string
	}{
		"score above 1":     {func(i *Inference) { i.Scores[0] = 2 }, `node "a": score 2, want a number in [0, 1]`},
		"score NaN":         {func(i *Inference) { i.Scores[3] = math.NaN() }, `node "d": score NaN`},
		"negative prob":     {func(i *Inference) { i.Probability[1] = -0.1 }, `node "b": probability -0.1`},
		"chance above 1":    {func(i *Inference) { i.Chance[2] = 1.5 }, `node "c": chance 1.5`},
		"threshold above 1": {func(i *Inference) { i.Threshold = 1.5 }, "threshold 1.5, want a number in [0, 1]"},
		"threshold NaN":     {func(i *Inference) { i.Threshold = math.NaN() }, "threshold NaN"},
	} {
		inf := good()
		tc.edit(&inf)
		_, err := rankSources(g, inf)
		require.ErrorIs(t, err, ErrBadInference, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
