package monitor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func preload(t *testing.T, n int, names ...string) Option {
	gs := map[string]*graph.Graph{}
	for _, name := range names {
		gs[name] = pathGraph(t, n)
	}
	return WithGraphs(gs)
}

type dead struct {
	reason, subject, index, detail string
	data                           string
}

func TestIngestDeadLettersEachReason(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.MaxEventBytes = 2000
	cfg.Graphs[0].MinInfected = 1000 // no inference here
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory))

	var mu sync.Mutex
	var got []dead
	sub, err := r.nc.Subscribe(DeadLetterSubject(DefaultPrefix), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, dead{m.Header.Get(HeaderReason), m.Header.Get(HeaderSubject), m.Header.Get(HeaderIndex), m.Header.Get(HeaderDetail), string(m.Data)})
	})
	require.NoError(t, err)
	require.NoError(t, r.nc.Flush())
	defer sub.Unsubscribe()

	ts := now.UTC().Format(time.RFC3339Nano)
	r.publish(t, "p", Event{Node: "0", State: "infected", TS: now}, "")
	r.publish(t, "p", `[{"node":"1","state":"infected","ts":"`+ts+`"}, {"node":"ghost","state":"infected"}, {"node":"2","state":"zombie"}, 42, {"node":"3","state":"infected"}]`, "")
	r.publish(t, "p", `{"node": "1", `, "")
	r.publish(t, "p", Event{Node: "4", State: "infected", TS: now.Add(time.Hour)}, "")
	r.publish(t, "p", Event{Node: "4", State: "infected", TS: now.Add(-2 * time.Hour)}, "")
	r.publish(t, "p", `{"node":"4","state":"infected","pad":"`+strings.Repeat("x", 3000)+`"}`, "")
	r.publish(t, "nope", Event{Node: "0", State: "infected"}, "")
	// A well-formed array takes the one-pass decode; its bad element is
	// still dead-lettered alone, re-encoded.
	r.publish(t, "p", `[{"node":"2","state":"infected"},{"node":"zz","state":"infected","id":"k"}]`, "")
	// A one-element array still names the index.
	r.publish(t, "p", `[{"node":"4","state":"sleeping"}]`, "")

	want := []dead{
		{reason: ReasonUnknownNode, index: "1"},
		{reason: ReasonBadState, index: "2"},
		{reason: ReasonBadJSON, index: "3"},
		{reason: ReasonBadJSON},
		{reason: ReasonFutureTS},
		{reason: ReasonTooOld},
		{reason: ReasonTooLarge},
		{reason: ReasonUnknownGraph},
		{reason: ReasonUnknownNode, index: "1"},
		{reason: ReasonBadState, index: "0"},
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	}, 20*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.reason == w.reason && g.index == w.index && !(w.reason == ReasonUnknownNode && strings.Contains(g.data, "ghost") != (w == want[0])) {
				found = true
				wantSubject := EventsSubject(DefaultPrefix, "p")
				if w.reason == ReasonUnknownGraph {
					wantSubject = EventsSubject(DefaultPrefix, "nope")
					require.JSONEq(t, `{"node":"0","state":"infected"}`, g.data, "the original body is kept")
				}
				require.Equal(t, wantSubject, g.subject)
				require.NotEmpty(t, g.detail)
			}
		}
		require.True(t, found, "no dead letter %+v in %+v", w, got)
	}
	require.Len(t, got, len(want), "each bad input dead-lettered once")

	// The good events of the arrays survive their bad ones: nodes 0, 1, 2, 3.
	waitSeq(t, r.d, "p", lastSeq(t, r.js))
	o := r.d.graphs["p"].win.observe(now, nil)
	require.Equal(t, []float64{1, 1, 1, 1, 0}, o.y)

	m := r.d.metrics
	require.Equal(t, 2.0, value(t, m.deadLetters.WithLabelValues(ReasonUnknownNode)))
	require.Equal(t, 2.0, value(t, m.deadLetters.WithLabelValues(ReasonBadState)))
	for _, reason := range []string{ReasonFutureTS, ReasonTooOld, ReasonTooLarge, ReasonUnknownGraph} {
		require.Equal(t, 1.0, value(t, m.deadLetters.WithLabelValues(reason)), reason)
	}
	require.Equal(t, 2.0, value(t, m.deadLetters.WithLabelValues(ReasonBadJSON)))
	require.Equal(t, 4.0, value(t, m.events.WithLabelValues("p", "applied")))
	require.Equal(t, 9.0, value(t, m.events.WithLabelValues("p", "deadletter")))

	// Dead letters are also kept in their stream for later inspection.
	s, err := r.js.Stream(context.Background(), DeadLetterStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(len(want)), info.State.Msgs)
}

func TestIngestDeduplicates(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))

	e := Event{Node: "1", State: "infected", TS: now, ID: "e-1"}
	r.publish(t, "p", e, "m-1")
	r.publish(t, "p", e, "m-1") // JetStream drops it: same Nats-Msg-Id
	seqAfterFirst := lastSeq(t, r.js)
	require.Equal(t, uint64(1), seqAfterFirst)
	// Same event id, other message id and a later state: the window drops it.
	r.publish(t, "p", Event{Node: "1", State: "recovered", TS: now.Add(time.Second), ID: "e-1"}, "m-2")
	// The same content again without ids: applying it is a no-op.
	r.publish(t, "p", Event{Node: "2", State: "infected", TS: now}, "")
	r.publish(t, "p", Event{Node: "2", State: "infected", TS: now}, "")
	waitSeq(t, r.d, "p", lastSeq(t, r.js))

	m := r.d.metrics
	require.Equal(t, 1.0, value(t, m.events.WithLabelValues("p", "duplicate")))
	require.Equal(t, 1.0, value(t, m.events.WithLabelValues("p", "unchanged")))
	require.Equal(t, 2.0, value(t, m.events.WithLabelValues("p", "applied")))
	o := r.d.graphs["p"].win.observe(now.Add(time.Second), nil)
	require.Equal(t, []float64{0, 1, 1, 0}, o.y)
}

// value reads a counter or gauge.
func value(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", c.Desc())
	return 0
}

// TestConsumerDeletedIsRebound deletes the graph's consumer under the
// daemon, as an operator might: it is recreated from the window's last
// sequence and later events still arrive.
func TestConsumerDeletedIsRebound(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
	r.publish(t, "p", Event{Node: "1", State: StateInfected, TS: now}, "")
	waitSeq(t, r.d, "p", 1)

	s, err := r.js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	require.NoError(t, s.DeleteConsumer(context.Background(), consumerName("p")))
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: now}, "")
	r.publish(t, "p", Event{Node: "3", State: StateInfected, TS: now}, "")
	waitSeq(t, r.d, "p", 3)
	require.Equal(t, []float64{0, 1, 1, 1}, r.d.graphs["p"].win.observe(now, nil).y)
	require.Eventually(t, func() bool { return len(r.d.readiness()) == 0 }, 10*time.Second, 10*time.Millisecond)
	_, err = s.Consumer(context.Background(), consumerName("p"))
	require.NoError(t, err)
}
