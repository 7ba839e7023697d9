package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// TestDaemonPluginLifecycle runs two graphs, one of whose forward plugin
// crashes on every 25th call of each process, with real plugin processes:
// the healthy graph keeps alerting, the flaky one's plugin is relaunched
// and its alert still arrives, and a reload to a plugin with a wrong
// checksum is refused while the old plugin keeps serving.
func TestDaemonPluginLifecycle(t *testing.T) {
	bundle, icmfDir := trainTestBundle(t)
	pluginDir := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(icmfDir, "sourcewatch-forward-icmf"), filepath.Join(pluginDir, "sourcewatch-forward-icmf")))
	require.NoError(t, os.Symlink(forwardtest.Build(t, "./forward/internal/testplugins/faulty"), filepath.Join(pluginDir, "sourcewatch-forward-faulty")))
	edges, g := karateGraph(t)
	cfg := testDaemonConfig(t, pluginDir)
	graphCfg := func(name string) monitor.GraphConfig {
		gc := monitor.DefaultGraphConfig(name)
		gc.Edges, gc.Bundle = edges, bundle
		gc.Window, gc.Interval, gc.MinInfected = time.Hour, 200*time.Millisecond, 2
		return gc
	}
	good, flaky := graphCfg("good"), graphCfg("flaky")
	flaky.Forward, flaky.AllowUnverified = "faulty", true
	flaky.ForwardParams = map[string]string{"fault": "crash", "fault_after": "25"}
	cfg.Graphs = []monitor.GraphConfig{good, flaky}

	reloadTo := cfg
	core, logs := observer.New(zapcore.InfoLevel)
	d, err := monitor.New(cfg, monitor.WithLogger(zap.New(core)),
		monitor.WithLocalizerFactory(monitor.BundleLocalizers(pluginDir, zap.NewNop())),
		monitor.WithReload(func(context.Context) (monitor.Config, error) { return reloadTo, nil }))
	require.NoError(t, err)
	ctx, js := runDaemon(t, d)
	got := map[string]chan alerts.Alert{"good": make(chan alerts.Alert, 16), "flaky": make(chan alerts.Alert, 16)}
	go func() {
		_ = alerts.Tail(ctx, js, "sourcewatch", "", func(a alerts.Alert) error { got[a.Graph] <- a; return nil })
	}()
	await := func(graph string) alerts.Alert {
		t.Helper()
		select {
		case a := <-got[graph]:
			return a
		case <-time.After(90 * time.Second):
			t.Fatalf("no alert for %s", graph)
			return alerts.Alert{}
		}
	}
	replay := func(graph string, seed int64) {
		t.Helper()
		replayCluster(ctx, t, js, g, graph, seed)
	}

	replay("good", 5)
	replay("flaky", 6)
	require.Equal(t, alerts.Firing, await("good").Status)
	a := await("flaky")
	require.Equal(t, alerts.Firing, a.Status)
	require.Equal(t, "faulty", a.Model.Forward)
	metrics := scrape(t, d.HTTPAddr())
	require.GreaterOrEqual(t, metricValue(t, metrics, `sourcewatch_plugin_restarts_total{graph="flaky"}`), 1.0)
	require.Equal(t, 0.0, metricValue(t, metrics, `sourcewatch_plugin_restarts_total{graph="good"}`))

	// A reload to a plugin whose checksum does not match is refused, and
	// the running plugins keep serving.
	bad := good
	bad.ForwardChecksum = strings.Repeat("0", 64)
	reloadTo.Graphs = []monitor.GraphConfig{bad, flaky}
	err = d.Reload(ctx)
	require.ErrorContains(t, err, strings.Repeat("0", 64))
	replay("good", 7)
	require.Contains(t, []alerts.Status{alerts.Updated, alerts.Firing}, await("good").Status)

	// The start and a reload say which bundle each graph runs, so a bundle
	// retrained in place (same path, so no changed key) shows in the log.
	m, err := localize.ReadManifest(bundle)
	require.NoError(t, err)
	reloadTo.Graphs = []monitor.GraphConfig{good, flaky}
	require.NoError(t, d.Reload(ctx))
	for _, msg := range []string{"sourcewatch serving", "reloaded"} {
		lines := logs.FilterMessage(msg).All()
		require.Len(t, lines, 1, msg)
		require.Contains(t, lines[0].ContextMap()["models"], "good="+m.ID+" (icmf 1.0.0)", msg)
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// metricValue returns the value of the series named exactly series in a
// Prometheus text exposition, 0 when it is absent.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}
