package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// TestServeEndToEnd runs the daemon as serve does — embedded NATS, the
// bundle-backed localizer with a real plugin process — and checks that a
// replayed cascade raises an alert naming one of its true sources among
// the top-ranked, and that after the plugin process is killed mid-stream
// the daemon relaunches it and the next incident's alert still arrives.
func TestServeEndToEnd(t *testing.T) {
	bundle, pluginDir := trainTestBundle(t)
	edges, g := karateGraph(t)
	gc := monitor.DefaultGraphConfig("club")
	gc.Edges, gc.Bundle = edges, bundle
	gc.Window, gc.Interval, gc.MinInfected = 3*time.Second, 200*time.Millisecond, 2
	cfg := testDaemonConfig(t, pluginDir, gc)

	var mu sync.Mutex
	// What the test needs of the daemon's localizers.
	type pluginLocalizer interface {
		monitor.Localizer
		PluginPID() int
		Restarts() int
		Healthy() bool
	}
	var launched []pluginLocalizer
	factory := monitor.BundleLocalizers(pluginDir, zap.NewNop())
	d, err := monitor.New(cfg, monitor.WithLocalizerFactory(func(ctx context.Context, gc monitor.GraphConfig, g *graph.Graph) (monitor.Localizer, error) {
		l, err := factory(ctx, gc, g)
		if err == nil {
			mu.Lock()
			launched = append(launched, l.(pluginLocalizer))
			mu.Unlock()
		}
		return l, err
	}))
	require.NoError(t, err)
	ctx, js := runDaemon(t, d)

	got := make(chan alerts.Alert, 16)
	go func() {
		_ = alerts.Tail(ctx, js, "sourcewatch", "club", func(a alerts.Alert) error { got <- a; return nil })
	}()
	next := func(want alerts.Status) alerts.Alert {
		t.Helper()
		for {
			select {
			case a := <-got:
				if a.Status == want {
					return a
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("no %s alert", want)
			}
		}
	}

	replay := func(seed int64) diffusion.Cascade {
		t.Helper()
		return replayCluster(ctx, t, js, g, "club", seed)
	}

	// 1. An incident: its alert names a true source among the top five.
	c := replay(11)
	first := next(alerts.Firing)
	require.Equal(t, len(c.Infected), first.Infected)
	requireTrueSourceRanked(t, g, c, first, 5)
	require.Equal(t, "icmf", first.Model.Forward)
	// Each source carries its chance of being one, and the alert the
	// source count those chances expect, all in range.
	require.NotNil(t, first.ExpectedSources)
	require.Greater(t, *first.ExpectedSources, 0.0)
	require.LessOrEqual(t, *first.ExpectedSources, float64(g.N()))
	for _, s := range first.Sources {
		require.NotNil(t, s.Chance, "node %s", s.Node)
		require.True(t, *s.Chance >= 0 && *s.Chance <= 1, "node %s: chance %g", s.Node, *s.Chance)
	}

	// 2. Kill the plugin process mid-stream; the incident resolves when
	// the window clears (no inference needed), and the next incident needs
	// a relaunched plugin.
	mu.Lock()
	pid := launched[len(launched)-1].PluginPID()
	before := len(launched)
	mu.Unlock()
	require.Positive(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	next(alerts.Resolved)
	c = replay(23)
	second := next(alerts.Firing)
	require.NotEqual(t, first.Fingerprint, second.Fingerprint)
	requireTrueSourceRanked(t, g, c, second, 5)
	mu.Lock()
	after := len(launched)
	mu.Unlock()
	// The daemon sees the exit between inferences and relaunches the
	// localizer at its next tick, or a call that meets a dead process has
	// the supervisor relaunch it; either way a new plugin process serves
	// the bundle loaded at the start, not the file read again.
	require.Equal(t, before, after, "relaunched on the loaded bundle, not rebuilt by the factory")
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the killed plugin is gone")
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Regexp(t, `(?m)^sourcewatch_plugin_restarts_total\{graph="club"\} [1-9]`, string(body), "the plugin was relaunched")
	require.True(t, d.Status().Graphs[0].LocalizerHealth)
}

func requireTrueSourceRanked(t *testing.T, g *graph.Graph, c diffusion.Cascade, a alerts.Alert, top int) {
	t.Helper()
	truth := map[string]bool{}
	for _, s := range g.Names(c.Sources) {
		truth[s] = true
	}
	var ranked []string
	for i, s := range a.Sources {
		if i == top {
			break
		}
		ranked = append(ranked, s.Node)
		if truth[s.Node] {
			return
		}
	}
	t.Fatalf("no true source %v among the top %d %v", g.Names(c.Sources), top, ranked)
}

// runDaemon runs d until the test ends (then requires a clean shutdown),
// waits until it is ready and returns the run's context and a JetStream
// client of its embedded server.
func runDaemon(t testing.TB, d *monitor.Daemon) (context.Context, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("daemon not ready")
	}
	nc, err := nats.Connect(d.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return ctx, js
}

// TestServeCountRule runs the daemon on a bundle whose source rule is a
// count: its alert names that many sources (more only on a tie with the
// last), and its threshold is the last source's score. The bundle ranks
// infected-then-predicted, so each inference also makes the ranking's
// forward call through the supervised plugin process.
func TestServeCountRule(t *testing.T) {
	trained, pluginDir := trainTestBundle(t)
	b, err := localize.LoadBundle(trained, nil)
	require.NoError(t, err)
	b.Manifest.SourceRule = localize.SourceRule{Count: 3}
	b.Manifest.Ranking = localize.InfectedThenPredicted
	bundle := filepath.Join(t.TempDir(), "count.swb")
	require.NoError(t, b.WriteFile(bundle))
	edges, g := karateGraph(t)
	gc := monitor.DefaultGraphConfig("club")
	gc.Edges, gc.Bundle = edges, bundle
	gc.Window, gc.Interval, gc.MinInfected = time.Hour, 200*time.Millisecond, 2
	d, err := monitor.New(testDaemonConfig(t, pluginDir, gc), monitor.WithLocalizerFactory(monitor.BundleLocalizers(pluginDir, zap.NewNop())))
	require.NoError(t, err)
	ctx, js := runDaemon(t, d)
	got := make(chan alerts.Alert, 16)
	go func() {
		_ = alerts.Tail(ctx, js, "sourcewatch", "club", func(a alerts.Alert) error { got <- a; return nil })
	}()

	c := replayCluster(ctx, t, js, g, "club", 11)

	var a alerts.Alert
	select {
	case a = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("no alert")
	}
	require.Equal(t, alerts.Firing, a.Status)
	require.GreaterOrEqual(t, len(a.Sources), 3)
	last := a.Sources[len(a.Sources)-1].Score
	require.Equal(t, last, a.Threshold)
	for _, s := range a.Sources[3:] {
		require.Equal(t, last, s.Score, "a source past the third ties with the last")
	}
	// Ranked infected first: the alert's first sources, as many as it saw
	// infected, are nodes the cascade infected.
	infected := map[string]bool{}
	for _, v := range c.Infected {
		infected[g.ID(v)] = true
	}
	for _, s := range a.Sources[:min(len(a.Sources), a.Infected)] {
		require.True(t, infected[s.Node], "source %s was never infected", s.Node)
	}
}

// karateGraph returns the demo graph's absolute edge-file path and the
// graph.
func karateGraph(t testing.TB) (string, *graph.Graph) {
	t.Helper()
	edges, err := filepath.Abs("../../configs/demo/karate.edges")
	require.NoError(t, err)
	g, err := graph.Load(edges)
	require.NoError(t, err)
	return edges, g
}

// testDaemonConfig is a daemon on loopback ports, with a fresh data
// directory, the plugins of pluginDir and the given graphs.
func testDaemonConfig(t testing.TB, pluginDir string, graphs ...monitor.GraphConfig) monitor.Config {
	cfg := monitor.DefaultConfig()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.PluginDir = pluginDir
	cfg.Graphs = graphs
	return cfg
}

// replayCluster simulates one SI cascade from two clustered sources (beta
// 0.3) and publishes it as events of graph name, 10 ms apart.
func replayCluster(ctx context.Context, t testing.TB, js jetstream.JetStream, g *graph.Graph, name string, seed int64) diffusion.Cascade {
	t.Helper()
	sim := diffusion.DefaultConfig()
	sim.Beta, sim.Pattern = 0.3, diffusion.Cluster
	sim.Sources = diffusion.SourceSpec{Count: 2}
	cs, _, err := diffusion.Simulate(ctx, g, sim, 1, seed)
	require.NoError(t, err)
	events := monitor.CascadeEvents(g, cs[0], time.Now(), 10*time.Millisecond)
	require.NoError(t, monitor.PublishEvents(ctx, js, "sourcewatch.events."+name, events, 1, nil))
	return cs[0]
}
