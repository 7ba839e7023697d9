package monitor

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// randomEvents is a stream of state changes with out-of-order times,
// repeated ids and repeated contents, so replay idempotence is exercised.
func randomEvents(rng *rand.Rand, n, count int, t0 time.Time) []Event {
	states := []string{StateInfected, StateInfected, StateRecovered, StateSusceptible}
	evs := make([]Event, count)
	for i := range evs {
		evs[i] = Event{
			Node:  strconv.Itoa(rng.IntN(n)),
			State: states[rng.IntN(len(states))],
			TS:    t0.Add(time.Duration(rng.IntN(600)) * time.Second),
		}
		if rng.IntN(3) == 0 {
			evs[i].ID = "id-" + strconv.Itoa(rng.IntN(count))
		}
	}
	return evs
}

// reference applies events straight to a window, as an uninterrupted
// daemon would.
func reference(t *testing.T, n int, evs []Event) *window {
	w := newWindow(pathGraph(t, n), time.Hour, 0)
	for _, e := range evs {
		s, _ := parseState(e.State)
		w.apply(mustIndex(t, w, e.Node), s, e.TS.UnixNano(), e.ID)
	}
	return w
}

func mustIndex(t *testing.T, w *window, id string) int {
	v, ok := w.g.Index(id)
	require.True(t, ok)
	return v
}

// TestCrashLosesNoAcknowledgedEvent runs a daemon against a standalone
// server, snapshots half-way, acknowledges more events, then dies without
// a final snapshot or drain. A second daemon must rebuild exactly the
// window of an uninterrupted run.
func TestCrashLosesNoAcknowledgedEvent(t *testing.T) {
	const n = 30
	s := runServer(t)
	t0 := time.Now().Add(-20 * time.Minute)
	clock := func() time.Time { return t0.Add(15 * time.Minute) }
	rng := rand.New(rand.NewPCG(1, 2))
	evs := randomEvents(rng, n, 400, t0)

	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.Graphs[0].MinInfected = 1 << 20
	f := &factoryOf{}
	opts := []Option{preload(t, n, "p"), WithLocalizerFactory(f.factory), WithClock(clock)}
	r1 := start(t, cfg, opts...)

	// Single events and arrays, as producers send them.
	publishAll := func(r *running, evs []Event) {
		for i := 0; i < len(evs); {
			if i%3 == 0 && i+5 <= len(evs) {
				r.publish(t, "p", evs[i:i+5], "")
				i += 5
				continue
			}
			r.publish(t, "p", evs[i], "")
			i++
		}
	}
	publishAll(r1, evs[:200])
	mid := lastSeq(t, r1.js)
	waitSeq(t, r1.d, "p", mid)
	require.NoError(t, r1.d.snapshotAll(context.Background(), false))

	publishAll(r1, evs[200:])
	last := lastSeq(t, r1.js)
	waitSeq(t, r1.d, "p", last)
	// Every message is acknowledged: the consumer's ack floor is the end.
	cons, err := r1.js.Consumer(context.Background(), EventsStream, consumerName("p"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.AckFloor.Stream == last
	}, 10*time.Second, 10*time.Millisecond)

	r1.d.crash.Store(true)
	r1.stop(t)

	r2 := start(t, cfg, opts...)
	// The snapshot in KV covers only the first half.
	kv, err := r2.js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	data, err := getBlob(context.Background(), kv, "window.p")
	require.NoError(t, err)
	var snap snapshot
	require.NoError(t, json.Unmarshal(data, &snap))
	require.Equal(t, mid, snap.Seq, "the crash wrote no snapshot")

	waitSeq(t, r2.d, "p", last)
	ref := reference(t, n, evs)
	require.True(t, sameWindow(ref, r2.d.graphs["p"].win), "window after crash and replay differs from an uninterrupted run")
	require.Equal(t, ref.observe(clock(), nil).y, r2.d.graphs["p"].win.observe(clock(), nil).y)

	// A clean stop writes a final snapshot: the next start replays nothing.
	r2.stop(t)
	r3 := start(t, cfg, opts...)
	_, _, seq := r3.d.graphs["p"].win.counts()
	require.Equal(t, last, seq)
	require.True(t, sameWindow(ref, r3.d.graphs["p"].win))
}

// TestRestoreWhileStatusIsRead restores a usable and an unusable
// snapshot while the status endpoint is being read, as on a standby taking
// over (its HTTP is up before the lease): each window is replaced or reset
// in place under its lock, so under -race no reader sees it change
// unsynchronized.
func TestRestoreWhileStatusIsRead(t *testing.T) {
	kv := newKV(t, StateBucket)
	ctx := context.Background()
	g := pathGraph(t, 4)
	snaps := map[string]snapshot{
		"good": {Graph: "good", Seq: 7, Nodes: []snapshotEntry{{Node: "1", State: StateInfected, TS: time.Now().UnixNano()}}},
		"bad":  {Graph: "bad", Seq: 7, Nodes: []snapshotEntry{{Node: "1", State: "zombie", TS: 1}}},
	}
	cfg := testConfig(t, "good", "bad")
	d, err := New(cfg)
	require.NoError(t, err)
	d.kv, d.tracker, d.graphs = kv, alerts.NewTracker(time.Now), map[string]*graphRT{}
	wins := map[string]*window{}
	for i, gc := range cfg.Graphs {
		data, err := json.Marshal(snaps[gc.Name])
		require.NoError(t, err)
		_, err = kv.Put(ctx, "window."+gc.Name, data)
		require.NoError(t, err)
		gr := &graphRT{name: gc.Name, g: g, win: newWindow(g, time.Hour, 0)}
		gr.gc.Store(&cfg.Graphs[i])
		d.order = append(d.order, gr)
		d.graphs[gc.Name] = gr
		wins[gc.Name] = gr.win
	}

	var stop atomic.Bool
	reads := make(chan int)
	go func() {
		n := 0
		for !stop.Load() {
			_ = d.Status()
			n++
		}
		reads <- n
	}()
	require.NoError(t, d.restore(ctx))
	stop.Store(true)
	t.Logf("%d status reads", <-reads)
	for name, want := range map[string]uint64{"good": 7, "bad": 0} {
		gr := d.graphs[name]
		require.Same(t, wins[name], gr.win, "graph %s keeps its window", name)
		_, _, seq := gr.win.counts()
		require.Equal(t, want, seq, name)
	}
}

// gapSetup is a standalone server whose events stream keeps 20 messages,
// and a start of a daemon on it for graphs of n nodes (never inferring),
// its warnings observed, for the replay-gap tests.
func gapSetup(t *testing.T, n int, graphs ...string) (*server.Server, func() (*running, *observer.ObservedLogs)) {
	t.Helper()
	s := runServer(t)
	cfg := testConfig(t, graphs...)
	cfg.NATS.URL = s.ClientURL()
	for i := range cfg.Graphs {
		cfg.Graphs[i].MinInfected = 1 << 20
	}
	cfg.Events.MaxMsgs = 20
	f := &factoryOf{}
	return s, func() (*running, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.WarnLevel)
		return start(t, cfg, preload(t, n, graphs...), WithLocalizerFactory(f.factory), WithLogger(zap.New(core))), logs
	}
}

// Events the stream's limits discard before the window applied them (a
// max_msgs reached while the daemon was down) cannot be replayed: the
// restart says so and counts them, rather than log a clean catch-up. A
// graph without events of its own while others' are discarded, all
// applied, has lost nothing and is not warned of (its snapshots record
// how far along the stream it is complete); once events it may not have
// applied are discarded, it is told of them, with events of its own (q)
// or none ever (r).
func TestReplayGapIsReported(t *testing.T) {
	const n = 10
	s, startLogged := gapSetup(t, n, "p", "q", "r")
	gaps := func(logs *observer.ObservedLogs) map[string]uint64 {
		out := map[string]uint64{}
		for _, e := range logs.FilterMessageSnippet("events discarded by the stream's limits").All() {
			out[e.ContextMap()["graph"].(string)] = e.ContextMap()["discarded_at_most"].(uint64)
		}
		return out
	}
	r1, _ := startLogged()
	r1.publish(t, "q", Event{Node: "1", State: StateInfected, TS: time.Now()}, "")
	// Applied before p's events push it out of the stream (max_msgs).
	waitSeq(t, r1.d, "q", 1)
	for i := 0; i < 40; i++ {
		r1.publish(t, "p", Event{Node: strconv.Itoa(i % n), State: StateInfected, TS: time.Now()}, "")
	}
	applied := lastSeq(t, r1.js)
	waitSeq(t, r1.d, "p", applied)
	r1.stop(t) // a clean stop: the snapshots cover every event so far

	// The stream discarded q's event and p's first ones, all applied.
	r2, logs := startLogged()
	require.Empty(t, gaps(logs))
	r2.stop(t)

	// While it is down, 40 more of p's: the stream keeps the last 20.
	_, js := connectJS(t, s.ClientURL())
	publishInfected(t, js, "p", n, 40)
	last := lastSeq(t, js)
	r3, logs := startLogged()
	waitSeq(t, r3.d, "p", last)
	lost := last - 20 - applied // the first kept is last-19
	got := gaps(logs)
	require.Equal(t, lost, got["p"])
	require.Equal(t, float64(lost), value(t, r3.d.metrics.gap.WithLabelValues("p")))
	// Whose events they were is lost with them: q is told of them too, as
	// at most that many.
	require.Equal(t, lost, got["q"])
	require.Equal(t, lost, got["r"])
	r3.stop(t)

	// Nothing discarded since: the next start reports no gap.
	r4, logs := startLogged()
	require.Empty(t, gaps(logs))
	r4.stop(t)
}

// The replay-gap check's two edges: a daemon starting afresh against a
// stream that discarded events before it existed does not count them,
// even when its consumer is rebound before its first snapshot; and a
// resumed graph whose snapshot cannot be restored measures from its empty
// window, not from the completeness point saved with that snapshot.
func TestReplayGapEdges(t *testing.T) {
	const n = 10
	s, startLogged := gapSetup(t, n, "p", "q")
	gapOf := func(logs *observer.ObservedLogs, graphName string) uint64 {
		var lost uint64
		for _, e := range logs.FilterMessageSnippet("events discarded by the stream's limits").FilterField(zap.String("graph", graphName)).All() {
			lost += e.ContextMap()["discarded_at_most"].(uint64)
		}
		return lost
	}
	_, js := connectJS(t, s.ClientURL())
	publish := func(count int) { publishInfected(t, js, "p", n, count) }

	// A stream of 40 events that kept the last 20, and no daemon state.
	r0, _ := startLogged()
	r0.stop(t)
	publish(40)
	require.NoError(t, js.DeleteKeyValue(context.Background(), StateBucket))
	r1, logs := startLogged()
	waitSeq(t, r1.d, "p", lastSeq(t, js))
	stream, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	// q has no events: only the baseline keeps its rebind from counting
	// the 20 discarded before.
	require.NoError(t, stream.DeleteConsumer(context.Background(), consumerName("q")))
	require.Eventually(t, func() bool {
		return len(logs.FilterMessageSnippet("consumer stopped; rebound").All()) > 0
	}, 20*time.Second, 10*time.Millisecond)
	require.Zero(t, gapOf(logs, "q"), "discarded before this daemon first ran")
	r1.stop(t)

	// The snapshot is damaged while the daemon is down and 40 more
	// arrive: the window restarts empty, so all it lacks is counted.
	kv, err := js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), "window.p", []byte("not a snapshot"))
	require.NoError(t, err)
	publish(40)
	last := lastSeq(t, js)
	r2, logs := startLogged()
	// The stored point is reset as well: a stop before the replay passed
	// the old point must not leave it for the next start to trust.
	e, err := kv.Get(context.Background(), "through.p")
	require.NoError(t, err)
	require.Equal(t, "0", string(e.Value()))
	waitSeq(t, r2.d, "p", last)
	require.Equal(t, last-20, gapOf(logs, "p"), "the first kept is last-19; the window holds nothing before it")
	require.Equal(t, uint64(20), gapOf(logs, "q"), "q's snapshot covers it through the stream's end at the stop")
	r2.stop(t)
}

// A graph removed from the config while its incident is open gets that
// incident resolved at the next start, with a note saying why, and its
// alert state is dropped; the graphs still configured keep theirs.
func TestRemovedGraphsIncidentIsResolved(t *testing.T) {
	const n = 6
	s := runServer(t)
	nc, _ := connectJS(t, s.ClientURL())
	sinkQ := subscribeAlerts(t, nc, "q")
	cfg := testConfig(t, "p", "q")
	cfg.NATS.URL = s.ClientURL()
	f := &factoryOf{}
	r1 := start(t, cfg, preload(t, n, "p", "q"), WithLocalizerFactory(f.factory))
	r1.publish(t, "q", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	r1.publish(t, "p", Event{Node: "1", State: StateInfected, TS: time.Now()}, "")
	fired := sinkQ.wait(t, 1)[0]
	require.Equal(t, alerts.Firing, fired.Status)
	require.Eventually(t, func() bool { _, open := r1.d.tracker.Open("p"); return open }, 10*time.Second, 5*time.Millisecond)
	// Acknowledged before the stop, or the next start sends the firing
	// again (at least once: a plain subscriber would see it twice).
	waitAcknowledged(t, r1.d, "q")
	waitAcknowledged(t, r1.d, "p")
	r1.stop(t)
	_, js := connectJS(t, s.ClientURL())
	kv, err := js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	// A part of a snapshot too large for one message, as putBlob names it.
	_, err = kv.Put(context.Background(), "window.q.part.abc.0", []byte("x"))
	require.NoError(t, err)
	stateOf := func(graphName string) []string {
		var have []string
		keys, err := kv.ListKeys(context.Background())
		require.NoError(t, err)
		for k := range keys.Keys() {
			if strings.HasPrefix(k, "window."+graphName+".") || k == "window."+graphName || k == "through."+graphName {
				have = append(have, k)
			}
		}
		stream, err := js.Stream(context.Background(), EventsStream)
		require.NoError(t, err)
		if _, err := stream.Consumer(context.Background(), consumerName(graphName)); err == nil {
			have = append(have, "consumer")
		}
		sort.Strings(have)
		return have
	}
	require.Equal(t, []string{"consumer", "through.q", "window.q", "window.q.part.abc.0"}, stateOf("q"))
	// An operator's own consumer that happens to share the name prefix.
	stream, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	_, err = stream.CreateConsumer(context.Background(), jetstream.ConsumerConfig{Durable: consumerName("audit"), FilterSubject: EventsSubject(DefaultPrefix, ">")})
	require.NoError(t, err)

	cfg.Graphs = cfg.Graphs[:1] // q removed
	// A process that shares the account without owning it leaves q alone.
	guest := start(t, cfg, preload(t, n, "p"), WithLocalizerFactory(f.factory), WithoutRetiringUnconfigured())
	require.Contains(t, guest.d.tracker.Known(), "q")
	guest.stop(t)
	require.Equal(t, []string{"consumer", "through.q", "window.q", "window.q.part.abc.0"}, stateOf("q"))
	require.Len(t, sinkQ.all(), 1, "no resolve")

	r2 := start(t, cfg, preload(t, n, "p"), WithLocalizerFactory(f.factory))
	// Its snapshot, through point and consumer are deleted; p keeps its,
	// and the operator's consumer stays.
	require.Empty(t, stateOf("q"))
	require.Equal(t, []string{"consumer", "through.p", "window.p"}, stateOf("p"))
	_, err = stream.Consumer(context.Background(), consumerName("audit"))
	require.NoError(t, err)
	got := sinkQ.wait(t, 2)
	resolved := got[1]
	require.Equal(t, alerts.Resolved, resolved.Status)
	require.Equal(t, fired.Fingerprint, resolved.Fingerprint, "the same incident")
	require.Equal(t, fired.Seq+1, resolved.Seq)
	require.Contains(t, resolved.Note, "graph q is no longer in the daemon's config")
	require.NotContains(t, r2.d.tracker.Known(), "q")
	_, open := r2.d.tracker.Open("p")
	require.True(t, open, "a configured graph's incident stays open")
	r2.stop(t)

	// Gone for good: the next start publishes nothing more for it.
	r3 := start(t, cfg, preload(t, n, "p"), WithLocalizerFactory(f.factory))
	time.Sleep(200 * time.Millisecond)
	require.Len(t, sinkQ.all(), 2)
	r3.stop(t)
}

// A graph without events of its own has a through point saved by every
// periodic snapshot but no window snapshot (an unchanged empty window is
// skipped). After a crash it lost nothing, and the restart says no gap.
func TestCrashReportsNoGapForAGraphWithoutEvents(t *testing.T) {
	const n = 10
	s, startLogged := gapSetup(t, n, "p", "q")
	_, js := connectJS(t, s.ClientURL())
	r1, _ := startLogged()
	publishInfected(t, js, "p", n, 40)
	last := lastSeq(t, js)
	waitSeq(t, r1.d, "p", last)
	require.NoError(t, r1.d.snapshotAll(context.Background(), false)) // as the periodic loop does
	kv, err := js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), "through.q")
	require.NoError(t, err)
	r1.d.crash.Store(true)
	r1.stop(t)

	r2, logs := startLogged()
	waitSeq(t, r2.d, "p", last)
	require.Empty(t, logs.FilterMessageSnippet("events discarded by the stream's limits").All())
	r2.stop(t)
}

// The through point saved beside a snapshot measures the snapshot, not the
// live window: a window that applied events after its snapshot restarts
// from the snapshot after a crash, so what the stream discarded since the
// snapshot is a gap, however far the window had got before the crash.
func TestThroughPointFollowsTheSnapshot(t *testing.T) {
	const n = 10
	s, startLogged := gapSetup(t, n, "p")
	_, js := connectJS(t, s.ClientURL())
	publish := func(count int) { publishInfected(t, js, "p", n, count) }
	r1, _ := startLogged()
	publish(5)
	snapped := lastSeq(t, js)
	waitSeq(t, r1.d, "p", snapped)
	require.NoError(t, r1.d.snapshotAll(context.Background(), false)) // as the periodic loop does
	// Events the window applies between a snapshot and the through point
	// saved after it (snapshotAll reads the stream in between).
	publish(5)
	waitSeq(t, r1.d, "p", lastSeq(t, js))
	require.NoError(t, r1.d.saveThrough(context.Background(), r1.d.graphs["p"], lastSeq(t, js)))
	r1.d.crash.Store(true)
	r1.stop(t)

	publish(40) // the stream keeps the last 20
	last := lastSeq(t, js)
	r2, logs := startLogged()
	waitSeq(t, r2.d, "p", last)
	var lost uint64
	for _, e := range logs.FilterMessageSnippet("events discarded by the stream's limits").All() {
		lost += e.ContextMap()["discarded_at_most"].(uint64)
	}
	require.Equal(t, last-20-snapped, lost, "the first kept is last-19; the snapshot holds through %d", snapped)
	r2.stop(t)
}

// publishInfected publishes count events of graph's nodes "0" to
// strconv.Itoa(n-1) in turn becoming infected, through js.
func publishInfected(t *testing.T, js jetstream.JetStream, graphName string, n, count int) {
	t.Helper()
	for i := range count {
		data, err := json.Marshal(Event{Node: strconv.Itoa(i % n), State: StateInfected, TS: time.Now()})
		require.NoError(t, err)
		_, err = js.Publish(context.Background(), EventsSubject(DefaultPrefix, graphName), data)
		require.NoError(t, err)
	}
}

// A graph whose window applied no events yet (added to a deployment that
// ran before, or added back after its state was dropped) reads only the
// events stored within reach of its window: the older ones on its
// subject would each be dead-lettered as too_old, a burst after every
// such start. Those stored within its window count, also ones
// dead-lettered as unknown_graph before it was configured.
func TestGraphAddedLaterReadsOnlyWhatItsWindowReaches(t *testing.T) {
	const n = 6
	s := runServer(t)
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	f := &factoryOf{}
	r1 := start(t, cfg, preload(t, n, "p"), WithLocalizerFactory(f.factory))
	for _, node := range []string{"1", "2", "3"} {
		r1.publish(t, "q", Event{Node: node, State: StateInfected}, "")
	}
	expectUnknownGraphDeadLetters(t, r1, 3, "q is not configured yet")
	r1.stop(t)

	q := DefaultGraphConfig("q")
	q.Edges, q.Bundle, q.Interval = "q.edges", "q.swb", 20*time.Millisecond
	q.MinInfected = 1000 // no inference here
	cfg.Graphs = append(cfg.Graphs, q)
	consumed := func(r *running) jetstream.SequenceInfo {
		t.Helper()
		stream, err := r.js.Stream(context.Background(), EventsStream)
		require.NoError(t, err)
		var info *jetstream.ConsumerInfo
		require.Eventually(t, func() bool {
			c, err := stream.Consumer(context.Background(), consumerName("q"))
			if err != nil {
				return false
			}
			info, err = c.Info(context.Background())
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		}, 20*time.Second, 10*time.Millisecond)
		return info.Delivered
	}

	// Its window and max_future_skew later, the three are out of reach.
	shift := q.Window + cfg.MaxFutureSkew + freshStartMargin + time.Minute
	r2 := start(t, cfg, preload(t, n, "p", "q"), WithLocalizerFactory(f.factory),
		WithClock(func() time.Time { return time.Now().Add(shift) }))
	require.Zero(t, consumed(r2).Consumer, "nothing delivered")
	require.Zero(t, value(t, r2.d.metrics.deadLetters.WithLabelValues(ReasonTooOld)))
	infected, _, seq := r2.d.graphs["q"].win.counts()
	require.Zero(t, infected)
	require.Zero(t, seq)
	r2.stop(t)

	// Now, they are within its window and count.
	r3 := start(t, cfg, preload(t, n, "p", "q"), WithLocalizerFactory(f.factory))
	require.Equal(t, uint64(3), consumed(r3).Consumer)
	waitSeq(t, r3.d, "q", lastSeq(t, r3.js))
	infected, _, _ = r3.d.graphs["q"].win.counts()
	require.Equal(t, 3, infected)
	require.Zero(t, value(t, r3.d.metrics.deadLetters.WithLabelValues(ReasonTooOld)))
	r3.stop(t)
}

// A graph whose subject holds only events out of its window's reach reads
// none of them (see freshStart), yet its window is complete through them:
// the stream discarding messages older than they are (here other graphs'
// and the graph's own, all out of reach) is no gap, at this start or at
// any later one. Its through point must move on as if it had read them,
// or every restart and rebind warns of, and counts, a gap growing with
// each message the stream discards before those events.
func TestNoGapForEventsOutOfReach(t *testing.T) {
	const n = 10
	s := runServer(t)
	cfg := testConfig(t, "p", "q")
	cfg.NATS.URL = s.ClientURL()
	for i := range cfg.Graphs {
		cfg.Graphs[i].MinInfected = 1 << 20
	}
	cfg.Events.MaxMsgs = 20
	f := &factoryOf{}
	// Every event published now is out of reach of a daemon this far ahead.
	shift := cfg.Graphs[0].Window + cfg.MaxFutureSkew + freshStartMargin + time.Minute
	startShifted := func() (*running, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.WarnLevel)
		return start(t, cfg, preload(t, n, "p", "q"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)),
			WithClock(func() time.Time { return time.Now().Add(shift) })), logs
	}
	gaps := func(logs *observer.ObservedLogs) []string {
		var out []string
		for _, e := range logs.FilterMessageSnippet("events discarded by the stream's limits").All() {
			out = append(out, e.ContextMap()["graph"].(string))
		}
		return out
	}
	r0, _ := startShifted() // makes the stream
	r0.stop(t)
	_, js := connectJS(t, s.ClientURL())
	require.NoError(t, js.DeleteKeyValue(context.Background(), StateBucket)) // no daemon ran
	publishInfected(t, js, "p", n, 25)                                       // the stream keeps 6..25
	publishInfected(t, js, "q", n, 3)                                        // 26..28; it keeps 9..28

	r1, logs := startShifted()
	require.Empty(t, gaps(logs))
	stream, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	for _, g := range []string{"p", "q"} {
		require.Eventually(t, func() bool { // all read, or skipped
			c, err := stream.Consumer(context.Background(), consumerName(g))
			if err != nil {
				return false
			}
			info, err := c.Info(context.Background())
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		}, 20*time.Second, 10*time.Millisecond)
	}
	r1.stop(t)

	publishInfected(t, js, "p", n, 10) // 29..38; it keeps 19..38, q's three too
	r2, logs := startShifted()
	require.Empty(t, gaps(logs), "what the stream discarded was older than events already out of reach")
	require.Zero(t, value(t, r2.d.metrics.gap.WithLabelValues("q")))
	require.Zero(t, value(t, r2.d.metrics.gap.WithLabelValues("p")))
	r2.stop(t)
}
