package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

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
}
