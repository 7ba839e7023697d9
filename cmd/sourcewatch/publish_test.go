package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/monitor"
)

// TestSimulatePublish replays a simulated cascade onto a real JetStream
// stream and reads the events back.
func TestSimulatePublish(t *testing.T) {
	url, js := startAlertsNATS(t, "sw")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"sw.events.>"}, Duplicates: time.Minute})
	require.NoError(t, err)

	_, stderr, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--diffusion", "SIR",
		"--beta", "0.3", "--gamma", "0.1", "--cascades", "1", "--seed", "5",
		"--publish", "--nats", url, "--prefix", "sw", "--graph-name", "club", "--speed", "200")
	require.NoError(t, err)
	require.Contains(t, stderr, "publishing cascade 1/1")
	require.Contains(t, stderr, "no sourcewatch daemon answered its status request; publishing anyway", "no daemon here")

	cons, err := js.OrderedConsumer(ctx, "EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"sw.events.club"}})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	total := int(info.NumPending)
	require.Positive(t, total)
	var infected, recovered int
	var last time.Time
	ids := map[string]bool{}
	for i := 0; i < total; i++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		var e monitor.Event
		require.NoError(t, json.Unmarshal(msg.Data(), &e))
		require.Equal(t, e.ID, msg.Headers().Get(jetstream.MsgIDHeader))
		require.False(t, ids[e.ID], "duplicate id %s", e.ID)
		ids[e.ID] = true
		require.False(t, e.TS.Before(last), "events out of time order")
		last = e.TS
		switch e.State {
		case monitor.StateInfected:
			infected++
		case monitor.StateRecovered:
			recovered++
		default:
			t.Fatalf("unexpected state %q", e.State)
		}
	}
	require.Positive(t, infected)
	require.LessOrEqual(t, recovered, infected)

	// A bad graph name is refused before anything is published.
	_, _, err = runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1",
		"--publish", "--nats", url, "--graph-name", "a.b")
	require.ErrorContains(t, err, "--graph-name")
	// So is a prefix the daemon would refuse: a wildcard publishes on
	// subjects no consumer reads.
	_, _, err = runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1",
		"--publish", "--nats", url, "--prefix", "x.*")
	require.ErrorContains(t, err, `--prefix: "x.*" is not a subject prefix the daemon accepts`)
	// And a speed whose step overflows a duration, or is none at all.
	for _, speed := range []string{"1e-12", "+Inf"} {
		_, _, err = runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1",
			"--publish", "--nats", url, "--speed", speed)
		require.ErrorContains(t, err, "--speed: want simulation steps per second from 1.16e-05 (one a day) up, finite, got "+speed)
	}
}

// With a daemon running, simulate --publish refuses a graph name it does
// not serve, or an edge list of another size, before publishing events it
// would dead-letter (they went out, and only its log said so).
func TestSimulatePublishChecksTheDaemon(t *testing.T) {
	trained, pluginDir := trainTestBundle(t)
	edges, _ := karateGraph(t)
	gc := monitor.DefaultGraphConfig("club")
	gc.Edges, gc.Bundle = edges, trained
	d, err := monitor.New(testDaemonConfig(t, pluginDir, gc), monitor.WithLocalizerFactory(monitor.BundleLocalizers(pluginDir, zap.NewNop())))
	require.NoError(t, err)
	runDaemon(t, d)
	url := d.ClientURL()
	small := filepath.Join(t.TempDir(), "club.edges")
	require.NoError(t, os.WriteFile(small, []byte("0 1\n1 2\n2 3\n"), 0o644))
	// As many nodes, other ids: the fingerprint tells them apart.
	karate, err := os.ReadFile(edges)
	require.NoError(t, err)
	renamed := filepath.Join(t.TempDir(), "club.edges")
	require.NoError(t, os.WriteFile(renamed, []byte(regexp.MustCompile(`(?m)(\d+)`).ReplaceAllString(string(karate), "u$1")), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--graph", edges}, `--graph-name: the daemon serves no graph "karate" (it serves club)`},
		{[]string{"--graph", small}, `--graph: the daemon's graph "club" has 34 nodes, ` + small + ` 4`},
	} {
		args := append([]string{"simulate", "--cascades", "1", "--publish", "--nats", url, "--speed", "500"}, tc.args...)
		_, _, err := runCmd(t, "", args...)
		require.ErrorContains(t, err, tc.want)
	}
	// As many nodes with other ids: warned of, published.
	_, stderr, err := runCmd(t, "", "simulate", "--graph", renamed, "--cascades", "1", "--publish", "--nats", url, "--speed", "500")
	require.NoError(t, err)
	require.Contains(t, stderr, "--graph differs from the daemon's graph of that name")
	require.Contains(t, stderr, "publishing cascade 1/1")
	_, stderr, err = runCmd(t, "", "simulate", "--graph", edges, "--graph-name", "club", "--cascades", "1",
		"--publish", "--nats", url, "--speed", "500")
	require.NoError(t, err)
	require.Contains(t, stderr, "publishing cascade 1/1")
	require.NotContains(t, stderr, "no sourcewatch daemon answered")
	require.NotContains(t, stderr, "differs from the daemon's graph")
}

// simulate --publish refuses a speed it cannot replay at before it draws
// the cascades (nothing is written to --out), and a speed slow enough
// that --max-steps steps outrun a time.Duration: at one step a day,
// step 106,752 times the step wrapped negative, stamping the events in
// the past.
func TestSimulatePublishRefusesSpeedUpFront(t *testing.T) {
	out := filepath.Join(t.TempDir(), "c.jsonl")
	// No server listens there: the refusal comes before any connection.
	nats := "nats://127.0.0.1:25799"
	_, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1",
		"--publish", "--nats", nats, "--out", out, "--speed", "0")
	require.ErrorContains(t, err, "--speed: want simulation steps per second from 1.16e-05 (one a day) up, finite, got 0")
	require.NoFileExists(t, out, "refused before the cascades were drawn and written")

	_, _, err = runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1",
		"--publish", "--nats", nats, "--speed", "1.16e-05", "--max-steps", "200000")
	require.ErrorContains(t, err, "--speed 1.16e-05 with --max-steps 200000: a cascade's replay could outrun a time.Duration")
	steps, step := 106752, time.Duration(float64(time.Second)/minSpeed)
	require.Less(t, time.Duration(steps)*step, time.Duration(0), "the product this refuses does wrap")
	require.NoError(t, checkReplaySpan(minSpeed, 100000), "the default --max-steps at the slowest speed")
}
