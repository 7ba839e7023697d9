package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/graph"
)

// storedAlerts reads every alert of graph the alert stream holds, in stream
// order (none while the stream is missing).
func storedAlerts(t *testing.T, js jetstream.JetStream, graphName string) []alerts.Alert {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, alerts.StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []alerts.Alert
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		if m.Subject != alerts.Subject(DefaultPrefix, graphName) {
			continue
		}
		var a alerts.Alert
		require.NoError(t, json.Unmarshal(m.Data, &a))
		out = append(out, a)
	}
	return out
}

// waitAcknowledged waits until the daemon has the stream's acknowledgement
// of every alert of graph it published. A test that deletes the stream
// right after seeing an alert stored must wait for this too: the server
// sends the acknowledgement after storing, from a queue the deletion drops,
// and an alert without one is rightly still pending (sent again once the
// stream is back).
func waitAcknowledged(t *testing.T, d *Daemon, graphName string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(d.tracker.Pending(graphName)) == 0 },
		20*time.Second, 5*time.Millisecond, "graph %s: alerts still unacknowledged", graphName)
}

func waitStored(t *testing.T, js jetstream.JetStream, graphName string, n int) []alerts.Alert {
	t.Helper()
	var got []alerts.Alert
	require.Eventually(t, func() bool {
		got = storedAlerts(t, js, graphName)
		return len(got) >= n
	}, 20*time.Second, 10*time.Millisecond, "want %d alerts stored, have %d", n, len(got))
	return got
}

// summary is status/seq/first source of each alert, for comparing
// sequences at a glance.
func summary(as []alerts.Alert) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a.Status) + "/" + strconv.FormatUint(a.Seq, 10)
		if a.Status != alerts.Resolved && len(a.Sources) > 0 {
			out[i] += "/" + a.Sources[0].Node
		}
	}
	return out
}

// TestAlertsSurviveAStreamOutage takes the alert stream away (alertOutage) while an incident
// changes and then recovers: the update made during the outage is sent once
// the stream is back, before any later alert, so the stream holds every seq
// of the incident in order, each with its own content, and the resolve.
func TestAlertsSurviveAStreamOutage(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	f := &factoryOf{}
	// One try per job: the outage below outlasts it without a long wait.
	oneTry := func(d *Daemon) { d.publishAttempts = 1 }
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory), oneTry)
	ctx := context.Background()
	infect := func(node int, state string, at time.Duration) {
		r.publish(t, "p", Event{Node: strconv.Itoa(node), State: state, TS: now.Add(at)}, "")
	}

	infect(3, StateInfected, 0)
	fired := waitStored(t, r.js, "p", 1)
	require.Equal(t, []string{"firing/1/3"}, summary(fired))
	waitAcknowledged(t, r.d, "p")

	alertOutage(t, r.js)
	// A new lowest infected node: updated, seq 2, which cannot be stored.
	infect(1, StateInfected, time.Second)
	require.Eventually(t, func() bool {
		a, open := r.d.tracker.Open("p")
		return open && a.Seq == 2
	}, 10*time.Second, 5*time.Millisecond)
	// /status shows it pending, and the last alert actually stored.
	require.Eventually(t, func() bool {
		g := r.d.Status().Graphs[0]
		return len(g.PendingAlerts) == 1 && g.PendingAlerts[0].Seq == 2 && g.LastAlert != nil && g.LastAlert.Seq == 1
	}, 10*time.Second, 5*time.Millisecond)
	// So do the metrics, for an alerting rule.
	require.Eventually(t, func() bool {
		return value(t, r.d.metrics.pending.WithLabelValues("p")) == 1 && value(t, r.d.metrics.pubFailed.WithLabelValues("p")) >= 1
	}, 10*time.Second, 5*time.Millisecond)
	// Longer than the job's own try lasts (the client retries a publish
	// nobody answers for 0.5 s).
	time.Sleep(1500 * time.Millisecond)
	// The source set changes again while seq 2 is not out.
	infect(0, StateInfected, 2*time.Second)
	time.Sleep(300 * time.Millisecond)

	_, err := alerts.EnsureStream(ctx, r.js, DefaultPrefix)
	require.NoError(t, err)
	// The new stream holds what was published from then on.
	got := waitStored(t, r.js, "p", 2)
	require.Equal(t, []string{"updated/2/1", "updated/3/0"}, summary(got),
		"seq 2 is sent with its own content, then the change made during the outage")

	// One batch: recovered one by one, an inference between two of them
	// could publish an update first.
	var recovered []Event
	for _, v := range []int{0, 1, 3} {
		recovered = append(recovered, Event{Node: strconv.Itoa(v), State: StateRecovered, TS: now.Add(3 * time.Second)})
	}
	r.publish(t, "p", recovered, "")
	got = waitStored(t, r.js, "p", 3)
	require.Equal(t, "resolved/4", summary(got)[2])
	for _, a := range got {
		require.Equal(t, fired[0].Fingerprint, a.Fingerprint)
	}
	time.Sleep(100 * time.Millisecond)
	require.Len(t, storedAlerts(t, r.js, "p"), 3, "nothing is stored twice")
	g := r.d.Status().Graphs[0]
	require.Empty(t, g.PendingAlerts)
	require.Equal(t, 0.0, value(t, r.d.metrics.pending.WithLabelValues("p")))
	require.Equal(t, uint64(4), g.LastAlert.Seq)
	require.Equal(t, 1.0, value(t, r.d.metrics.alerts.WithLabelValues("p", "resolved")))
}

// TestPendingAlertIsSentAfterRestart stops the daemon while a resolve cannot
// be published: the final snapshot keeps it pending, and the next run sends
// it once the stream is back.
func TestPendingAlertIsSentAfterRestart(t *testing.T) {
	now := time.Now()
	s := runServer(t)
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	f := &factoryOf{}
	opts := []Option{preload(t, 4, "p"), WithLocalizerFactory(f.factory)}
	ctx := context.Background()

	r1 := start(t, cfg, opts...)
	r1.publish(t, "p", Event{Node: "2", State: StateInfected, TS: now}, "")
	fired := waitStored(t, r1.js, "p", 1)[0]
	waitAcknowledged(t, r1.d, "p")
	alertOutage(t, r1.js)
	r1.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: now.Add(time.Second)}, "")
	require.Eventually(t, func() bool {
		_, open := r1.d.tracker.Open("p")
		return !open
	}, 10*time.Second, 5*time.Millisecond)
	r1.stop(t) // while the resolve is being retried

	_, js := connectJS(t, s.ClientURL())
	_, err := alerts.EnsureStream(ctx, js, DefaultPrefix)
	require.NoError(t, err)
	start(t, cfg, opts...)
	got := waitStored(t, js, "p", 1)
	require.Equal(t, []string{"resolved/2"}, summary(got))
	require.Equal(t, fired.Fingerprint, got[0].Fingerprint)
}

// TestAlertWaitsForItsStateToBeSaved makes the state bucket refuse writes: an alert is
// not published before the state holding it is saved (write-ahead), and
// goes out once saving works again.
func TestAlertWaitsForItsStateToBeSaved(t *testing.T) {
	cfg := testConfig(t, "p")
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
	ctx := context.Background()
	refuseStateWrites(t, r.js)

	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return len(r.d.tracker.Pending("p")) == 1 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // several ticks
	require.Empty(t, storedAlerts(t, r.js, "p"), "published before its state was saved")
	require.True(t, slices.ContainsFunc(r.d.readiness(), func(p string) bool {
		return strings.HasPrefix(p, "alerts: saving the alert state failed, so none is published: ")
	}), "%v", r.d.readiness())

	require.NoError(t, r.js.DeleteStream(ctx, "KV_"+StateBucket)) // made anew by the next write
	require.Equal(t, []string{"firing/1/2"}, summary(waitStored(t, r.js, "p", 1)))
	kv, err := r.js.KeyValue(ctx, StateBucket)
	require.NoError(t, err)
	// The saved state holds the incident, no longer pending.
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, "tracker")
		if err != nil {
			return false
		}
		tr := alerts.NewTracker(nil)
		require.NoError(t, tr.UnmarshalJSON(e.Value()))
		_, open := tr.Open("p")
		return open && len(tr.Pending("p")) == 0
	}, 10*time.Second, 5*time.Millisecond)
	require.Empty(t, r.d.readiness())
}

// gatedKV holds the first Put until release is closed.
type gatedKV struct {
	jetstream.KeyValue
	entered chan struct{}
	release chan struct{}
	first   chan struct{} // closed once a Put took the gate
}

func (k *gatedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	select {
	case <-k.first:
	default:
		close(k.first)
		close(k.entered)
		<-k.release
	}
	return k.KeyValue.Put(ctx, key, value)
}

// TestSaveTrackerKeepsOrder holds one worker's save in its Put while
// another worker changes the tracker and saves: whatever the timing, KV
// ends with the newest state, never the older one written last.
func TestSaveTrackerKeepsOrder(t *testing.T) {
	kv := newKV(t, StateBucket)
	ctx := context.Background()
	d, err := New(testConfig(t, "a", "b"))
	require.NoError(t, err)
	gk := &gatedKV{KeyValue: kv, entered: make(chan struct{}), release: make(chan struct{}), first: make(chan struct{})}
	d.kv, d.tracker = gk, alerts.NewTracker(nil)
	obs := func(g string) {
		_, ok := d.tracker.Observe(alerts.Observation{Graph: g, Sources: []alerts.Source{{Node: "1", Probability: 1}}})
		require.True(t, ok)
	}

	obs("a")
	first := make(chan error, 1)
	go func() { first <- d.saveTracker(ctx) }()
	<-gk.entered
	obs("b")
	second := make(chan error, 1)
	go func() { second <- d.saveTracker(ctx) }()
	// Give the second save every chance to overtake the first.
	select {
	case err := <-second:
		second <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(gk.release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)

	want, err := d.tracker.MarshalJSON()
	require.NoError(t, err)
	e, err := kv.Get(ctx, "tracker")
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(e.Value()), "KV went back to an older tracker state")
}

// TestServiceAnswersOversized sends requests whose error text would echo a
// huge name, and one whose answer is over max_payload: each gets a short
// error reply instead of none.
func TestServiceAnswersOversized(t *testing.T) {
	cfg := testConfig(t, "p", "big")
	for i := range cfg.Graphs {
		cfg.Graphs[i].MinInfected = 1000
	}
	var maxPayload atomic.Int64
	f := &factoryOf{script: func(gc GraphConfig) func([]float64) Inference {
		script := infectedAreSources(gc.Bundle)
		return func(y []float64) Inference {
			inf := script(y)
			if gc.Name == "big" {
				inf.Model.Bundle = strings.Repeat("b", 2*int(maxPayload.Load()))
			}
			return inf
		}
	}}
	r := start(t, cfg, preload(t, 5, "p", "big"), WithLocalizerFactory(f.factory))
	maxPayload.Store(r.nc.MaxPayload())
	// U+00AD is 2 bytes in JSON and 6 (\u00ad) quoted by %q: the request
	// fits in max_payload, an error text echoing it whole would not.
	huge := strings.Repeat("\u00ad", int(maxPayload.Load())/3)

	tests := []struct {
		name       string
		req        LocalizeRequest
		code, want string
	}{
		{"unknown graph", LocalizeRequest{Graph: huge}, "400", "unknown graph"},
		{"unknown node", LocalizeRequest{Graph: "p", Infected: []string{huge}}, "400", `graph "p" has no node`},
		{"unknown node, the same text", LocalizeRequest{Graph: "p", Infected: []string{"1\u00a0"}}, "400", `graph "p" has no node "1\u00a0"; it has "1", the same text without the white space around it: ids are compared byte for byte`},
		{"answer too large", LocalizeRequest{Graph: "big", Infected: []string{"1"}}, "500", `bytes): ask for fewer ranked nodes (a smaller "top"), or raise the server's max_payload`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := json.Marshal(tt.req)
			require.NoError(t, err)
			require.Less(t, int64(len(data)), maxPayload.Load())
			m, err := r.nc.Request("sourcewatch.svc.localize", data, 5*time.Second)
			require.NoError(t, err, "no reply")
			require.Equal(t, tt.code, m.Header.Get(micro.ErrorCodeHeader))
			desc := m.Header.Get(micro.ErrorHeader)
			require.Contains(t, desc, tt.want)
			require.Less(t, len(desc), 1024)
		})
	}
	// A small request still gets its full answer.
	m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "p", Infected: []string{"3"}})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), 64, strings.Repeat("a", 61) + "…"},
		{"ab" + strings.Repeat("é", 10), 8, "abé…"}, // never cuts a rune
	}
	for _, tt := range tests {
		got := clipN(tt.in, tt.n)
		require.Equal(t, tt.want, got)
		require.LessOrEqual(t, len(got), tt.n)
	}
}

// TestReplayMakesNoFalseResolve restarts the daemon with a backlog queued
// behind the event that keeps an incident alive: the restored window alone
// says the incident is over (its infection aged out while no daemon ran),
// so a tick before the replay caught up would resolve it and the refresh
// would then fire a new incident for the same outbreak. The daemon makes
// no alert until its window has applied what was queued.
func TestReplayMakesNoFalseResolve(t *testing.T) {
	s := runServer(t)
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	// A window long enough for the replay (slow under the race detector)
	// to end inside it, and an infection 30 s from its far edge: the
	// first daemon fires on it with time to spare on a loaded machine,
	// and the second, whose clock runs 35 s ahead, finds it aged out, as
	// if it had started after a long stop.
	cfg.Graphs[0].Window = 2 * time.Minute
	f := &factoryOf{}
	opts := []Option{preload(t, 4, "p"), WithLocalizerFactory(f.factory)}

	r1 := start(t, cfg, opts...)
	r1.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now().Add(-2*time.Minute + 30*time.Second)}, "")
	fired := waitStored(t, r1.js, "p", 1)
	waitAcknowledged(t, r1.d, "p")
	r1.stop(t)

	nc, js := connectJS(t, s.ClientURL())
	defer nc.Close()
	ctx := context.Background()
	backlog := make([]Event, 100)
	for i := range backlog {
		backlog[i] = Event{Node: "3", State: StateSusceptible, TS: time.Now()}
	}
	body, err := json.Marshal(backlog)
	require.NoError(t, err)
	for range 2000 {
		_, err := js.Publish(ctx, EventsSubject(DefaultPrefix, "p"), body)
		require.NoError(t, err)
	}
	refresh, err := json.Marshal(Event{Node: "2", State: StateInfected, TS: time.Now()})
	require.NoError(t, err)
	_, err = js.Publish(ctx, EventsSubject(DefaultPrefix, "p"), refresh)
	require.NoError(t, err)

	r2 := start(t, cfg, append(opts, WithClock(func() time.Time { return time.Now().Add(35 * time.Second) }))...)
	require.Eventually(t, func() bool { return !r2.d.Status().Graphs[0].Replaying }, 90*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // ticks after the replay
	got := storedAlerts(t, js, "p")
	require.Equal(t, []string{"firing/1/2"}, summary(got), "the incident goes on: no resolve, no second firing")
	require.Equal(t, fired[0].Fingerprint, got[0].Fingerprint)
	a, open := r2.d.tracker.Open("p")
	require.True(t, open)
	require.Equal(t, fired[0].Fingerprint, a.Fingerprint)
}

// The alert state of every graph is one value: with many graphs (or long
// node ids) it outgrows a message, and is stored in parts rather than
// holding back every graph's alerts. Restored from the parts at the next
// start, no incident fires again.
func TestAlertStateLargerThanAMessage(t *testing.T) {
	const maxPayload = 8 << 10
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: maxPayload}
	s := runServerWith(t, opts)
	names := make([]string, 24)
	for i := range names {
		names[i] = fmt.Sprintf("graph%02d", i)
	}
	cfg := testConfig(t, names...)
	cfg.NATS.URL = s.ClientURL()
	r := start(t, cfg, preload(t, 6, names...), WithLocalizerFactory((&factoryOf{}).factory))
	for _, name := range names {
		for _, node := range []string{"1", "2", "3", "4"} {
			r.publish(t, name, Event{Node: node, State: StateInfected, TS: time.Now()}, "")
		}
	}
	for _, name := range names {
		require.NotEmpty(t, waitStored(t, r.js, name, 1))
		waitAcknowledged(t, r.d, name)
	}
	state, err := r.d.tracker.MarshalJSON()
	require.NoError(t, err)
	require.Greater(t, len(state), maxPayload, "the test needs a state over max_payload")
	require.Empty(t, r.d.readiness())

	kv, err := r.js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), "tracker")
	require.NoError(t, err)
	require.Less(t, len(e.Value()), maxPayload, "compressed, or a header naming parts")

	// A second daemon on the same store restores every open incident.
	r.stop(t)
	r2 := start(t, cfg, preload(t, 6, names...), WithLocalizerFactory((&factoryOf{}).factory))
	for _, name := range names {
		_, open := r2.d.tracker.Open(name)
		require.True(t, open, name)
	}
}

// After a restart with no incident open, /status's last alert is the
// resolved one the stream holds, as before the restart (it was empty).
func TestLastAlertSurvivesARestart(t *testing.T) {
	now := time.Now()
	s := runServer(t)
	cfg := testConfig(t, "p", "q")
	cfg.NATS.URL = s.ClientURL()
	opts := []Option{preload(t, 4, "p", "q"), WithLocalizerFactory((&factoryOf{}).factory)}
	r1 := start(t, cfg, opts...)
	r1.publish(t, "p", Event{Node: "2", State: StateInfected, TS: now}, "")
	waitStored(t, r1.js, "p", 1)
	r1.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: now.Add(time.Second)}, "")
	resolved := waitStored(t, r1.js, "p", 2)[1]
	require.Equal(t, alerts.Resolved, resolved.Status)
	waitAcknowledged(t, r1.d, "p")
	r1.stop(t)

	r2 := start(t, cfg, opts...)
	last := r2.d.graphs["p"].lastAlert.Load()
	require.NotNil(t, last)
	require.Equal(t, resolved.ID, last.ID)
	require.Equal(t, alerts.Resolved, last.Status)
	require.Nil(t, r2.d.graphs["q"].lastAlert.Load(), "a graph that never alerted has none")
}

// An alert whose sources would take it over the server's max_payload is
// published with its highest-ranked sources and a count of the rest left
// out, and its incident updates and resolves as any other (it could never
// be published, and held its graph's every later alert back).
func TestAlertOverMaxPayloadLeavesSourcesOut(t *testing.T) {
	const maxPayload = 8 << 10
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: maxPayload}
	s := runServerWith(t, opts)
	ids, g, f := longIDGraph(t)
	names := []string{"big", "big2"}
	cfg := testConfig(t, names...)
	cfg.NATS.URL = s.ClientURL()
	r := start(t, cfg, WithGraphs(map[string]*graph.Graph{"big": g, "big2": g}), WithLocalizerFactory(f.factory))
	now := time.Now()
	for _, name := range names {
		for _, id := range ids {
			r.publish(t, name, Event{Node: id, State: StateInfected, TS: now}, "")
		}
	}
	for _, name := range names {
		var trimmed alerts.Alert
		require.Eventually(t, func() bool {
			for _, a := range storedAlerts(t, r.js, name) {
				// The alert of all the events: a tick may come while
				// they are still being published (seen under -race in
				// CI: a first alert of 4 sources, already trimmed).
				if a.SourcesOmitted > 0 && a.Infected == len(ids) {
					trimmed = a
					return true
				}
			}
			return false
		}, 20*time.Second, 10*time.Millisecond)
		require.Equal(t, ids[0], trimmed.Sources[0].Node, "the highest-ranked are kept")
		require.Equal(t, len(ids), len(trimmed.Sources)+trimmed.SourcesOmitted)
		require.Contains(t, trimmed.Note, "lowest-ranked of 12 sources are left out")
	}

	for _, id := range ids {
		r.publish(t, "big", Event{Node: id, State: StateRecovered, TS: now.Add(time.Second)}, "")
	}
	require.Eventually(t, func() bool {
		got := storedAlerts(t, r.js, "big")
		return got[len(got)-1].Status == alerts.Resolved
	}, 20*time.Second, 10*time.Millisecond)
	for _, name := range names {
		waitAcknowledged(t, r.d, name)
	}

	// Two last alerts that each nearly fill a message: svc.status
	// answers with their ids in their stead (it answered 500 for as long
	// as they were the last ones); /status holds them whole.
	got := storedAlerts(t, r.js, "big")
	m := request(t, r.nc, "sourcewatch.svc.status", nil)
	require.Empty(t, m.Header.Get(micro.ErrorHeader), "%s", m.Data)
	require.NoError(t, validateJSON(t, compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/status_response", true), m.Data), "%s", m.Data)
	var st Status
	require.NoError(t, json.Unmarshal(m.Data, &st))
	require.Contains(t, st.AlertsOmitted, "over the server's max_payload of 8192")
	require.Nil(t, st.Graphs[0].LastAlert)
	require.Equal(t, got[len(got)-1].ID, st.Graphs[0].LastAlertID)
	require.NotNil(t, r.d.Status().Graphs[0].LastAlert, "the full status still holds it")
}

// The alert stream deleted under a running daemon is made anew at the
// next failed publish, and the alert goes out (it waited for a restart).
func TestAlertStreamDeletedIsMadeAnew(t *testing.T) {
	cfg := testConfig(t, "p")
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	now := time.Now()
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: now}, "")
	waitStored(t, r.js, "p", 1)
	waitAcknowledged(t, r.d, "p")
	require.NoError(t, r.js.DeleteStream(context.Background(), alerts.StreamName))

	r.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: now.Add(time.Second)}, "")
	var got []alerts.Alert
	require.Eventually(t, func() bool {
		if _, err := r.js.Stream(context.Background(), alerts.StreamName); err != nil {
			return false
		}
		got = storedAlerts(t, r.js, "p")
		return len(got) == 1
	}, 60*time.Second, 50*time.Millisecond)
	require.Equal(t, alerts.Resolved, got[0].Status)
	require.Equal(t, uint64(2), got[0].Seq)
	waitAcknowledged(t, r.d, "p")
}

// alertOutage makes publishing alerts fail until the alert stream is
// ensured again: a stream of the same name keeps another subject. (A
// stream deleted outright the daemon makes anew at its next failed
// publish: TestAlertStreamDeletedIsMadeAnew.)
func alertOutage(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, js.DeleteStream(ctx, alerts.StreamName))
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: alerts.StreamName, Subjects: []string{"elsewhere.>"}})
	require.NoError(t, err)
}

// longIDGraph is a path of 12 nodes with ids of 1,000 bytes, and a
// factory of localizers that name every infected node a source, the lower
// index the higher score.
func longIDGraph(t *testing.T) ([]string, *graph.Graph, *factoryOf) {
	t.Helper()
	ids := make([]string, 12)
	var edges strings.Builder
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", strings.Repeat("n", 1000), i)
		if i > 0 {
			edges.WriteString(ids[i-1] + " " + ids[i] + "\n")
		}
	}
	g, err := graph.Read(strings.NewReader(edges.String()), "big")
	require.NoError(t, err)
	f := &factoryOf{script: func(GraphConfig) func([]float64) Inference {
		return func(y []float64) Inference {
			inf := Inference{Scores: make([]float64, len(y)), Probability: make([]float64, len(y)), Threshold: 0.05,
				Model: ModelInfo{Bundle: "b", Forward: "fake", ForwardVersion: "1"}}
			for v := range y {
				if y[v] > 0 {
					inf.Sources = append(inf.Sources, v)
					inf.Scores[v], inf.Probability[v] = 1-0.05*float64(v), 1
				}
			}
			return inf
		}
	}}
	return ids, g, f
}

// A pending alert over max_payload in the alert state of an older build
// (which did not fit alerts), or made before max_payload shrank, is
// fitted as it goes out, and the incident resolves: for a configured
// graph, and for one the config no longer has (whose state was kept for
// good behind it).
func TestOversizedPendingAlertFromAnOlderStateIsSent(t *testing.T) {
	t.Run("configured", func(t *testing.T) { oversizedPendingAlert(t, "big") })
	t.Run("removed", func(t *testing.T) { oversizedPendingAlert(t, "p") })
}

func oversizedPendingAlert(t *testing.T, configured string) {
	const maxPayload = 8 << 10
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: maxPayload}
	s := runServerWith(t, opts)
	ids, g, f := longIDGraph(t)
	old := alerts.NewTracker(time.Now)
	srcs := make([]alerts.Source, len(ids))
	for i, id := range ids {
		srcs[i] = alerts.Source{Node: id, Score: 1 - 0.05*float64(i), Probability: 1}
	}
	now := time.Now()
	fired, publish := old.Observe(alerts.Observation{Graph: "big", Window: alerts.Window{From: now, To: now}, Infected: len(ids),
		Sources: srcs, Threshold: 0.05, Model: alerts.ModelRef{Bundle: "b", Forward: "fake", ForwardVersion: "1"}})
	require.True(t, publish)
	require.Zero(t, fired.SourcesOmitted)
	state, err := old.MarshalJSON()
	require.NoError(t, err)
	_, js := connectJS(t, s.ClientURL())
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: StateBucket, History: 1, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	require.NoError(t, putBlob(ctx, kv, "tracker", state, 4<<10))

	cfg := testConfig(t, configured)
	cfg.NATS.URL = s.ClientURL()
	r := start(t, cfg, WithGraphs(map[string]*graph.Graph{configured: g}), WithLocalizerFactory(f.factory))
	sent := waitStored(t, r.js, "big", 1)[0]
	require.Equal(t, fired.ID, sent.ID)
	require.Positive(t, sent.SourcesOmitted)
	if configured != "big" {
		resolved := waitStored(t, r.js, "big", 2)[1]
		require.Equal(t, alerts.Resolved, resolved.Status)
		require.Contains(t, resolved.Note, "no longer in the daemon's config")
		require.NotContains(t, r.d.tracker.Graphs(), "big", "its state dropped once its alerts are out")
		return
	}
	r.publish(t, "big", Event{Node: ids[0], State: StateInfected, TS: time.Now()}, "")
	r.publish(t, "big", Event{Node: ids[0], State: StateRecovered, TS: time.Now().Add(time.Second)}, "")
	require.Eventually(t, func() bool {
		got := storedAlerts(t, r.js, "big")
		return got[len(got)-1].Status == alerts.Resolved
	}, 20*time.Second, 10*time.Millisecond)
}
