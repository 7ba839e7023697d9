package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// BenchmarkBurstToAlert is the operator's latency: the daemon as serve
// runs it (embedded NATS, a deepis bundle trained for Jazz, the plugin as
// a real process, interval 1s) receives a burst, the events of one
// simulated cascade published back to back, and the clock runs from the
// acknowledgement of its last event to the arrival of the firing alert at
// a subscriber. Each iteration then resets the nodes to susceptible and
// waits for the resolution. The wait is the time to the next scheduler
// tick (uniform over the interval: bursts land at random phases) plus one
// inference; both are reported, the inference as the alert's
// inference_ms. Skipped where ../shared is absent.
func BenchmarkBurstToAlert(b *testing.B) {
	edges, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "data", "jazz.edges"))
	require.NoError(b, err)
	if _, err := os.Stat(edges); err != nil {
		b.Skipf("no Jazz graph: %v", err)
	}
	g, err := graph.Load(edges)
	require.NoError(b, err)
	pluginDir := filepath.Dir(forwardtest.Build(b, "deepis"))
	bundle := filepath.Join(b.TempDir(), "jazz.swb")
	_, _, err = runCmd(b, "", "train", "--graph", edges, "--diffusion", "SI", "--cascades", "150", "--seed", "5",
		"--forward", "deepis", "--plugin-dir", pluginDir, "--out", bundle, "--log-level", "warn")
	require.NoError(b, err)

	const interval = time.Second
	gc := monitor.DefaultGraphConfig("jazz")
	gc.Edges, gc.Bundle = edges, bundle
	gc.Interval, gc.MinInfected = interval, 2
	cfg := testDaemonConfig(b, pluginDir, gc)
	d, err := monitor.New(cfg, monitor.WithLocalizerFactory(monitor.BundleLocalizers(pluginDir, zap.NewNop())))
	require.NoError(b, err)
	ctx, js := runDaemon(b, d)
	got := make(chan alerts.Alert, 16)
	go func() {
		_ = alerts.Tail(ctx, js, "sourcewatch", "jazz", func(a alerts.Alert) error { got <- a; return nil })
	}()
	wait := func(ok func(alerts.Alert) bool) alerts.Alert {
		for {
			select {
			case a := <-got:
				if ok(a) {
					return a
				}
			case <-time.After(time.Minute):
				b.Fatal("no alert within a minute")
			}
		}
	}
	publish := func(events []monitor.Event) {
		require.NoError(b, monitor.PublishEvents(ctx, js, monitor.EventsSubject("sourcewatch", "jazz"), events, 0, nil))
	}

	// Each burst lands at a random phase of the scheduler's interval: the
	// resolution the previous iteration waited for came on a tick, so
	// publishing right after it would always wait a whole interval.
	rng := rand.New(rand.NewPCG(7, 7))
	var latencies, inference []float64
	for i := 0; b.Loop(); i++ {
		time.Sleep(time.Duration(rng.Int64N(int64(interval))))
		cs, _, err := diffusion.Simulate(ctx, g, diffusion.DefaultConfig(), 1, int64(100+i))
		require.NoError(b, err)
		c := cs[0]
		publish(monitor.CascadeEvents(g, c, time.Now(), 0))
		sent := time.Now()
		a := wait(func(a alerts.Alert) bool {
			return a.Status != alerts.Resolved && a.Infected == len(c.Infected)
		})
		latencies = append(latencies, time.Since(sent).Seconds()*1e3)
		inference = append(inference, a.InferenceMS)

		reset := make([]monitor.Event, len(c.Infected))
		for k, v := range c.Infected {
			reset[k] = monitor.Event{Node: g.ID(v), State: monitor.StateSusceptible, TS: time.Now()}
		}
		publish(reset)
		wait(func(a alerts.Alert) bool { return a.Status == alerts.Resolved })
	}
	slices.Sort(latencies)
	b.ReportMetric(mean(latencies), "alert-ms/burst")
	b.ReportMetric(latencies[len(latencies)/2], "p50-alert-ms")
	b.ReportMetric(latencies[len(latencies)-1], "max-alert-ms")
	b.ReportMetric(mean(inference), "inference-ms")
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
