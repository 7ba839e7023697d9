package monitor

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/forward"
)

// infectedInWindow is how many nodes graph's window holds infected now.
func infectedInWindow(d *Daemon, graphName string) int {
	return d.graphs[graphName].win.observe(time.Now(), nil).infected
}

// An events stream deleted while no daemon ran, and made anew by the next
// start, numbers its events from 1 again: the restored window keeps its
// nodes and reads the new stream's events, where it skipped them until
// the new stream passed the old position.
func TestEventsStreamMadeAnewBetweenRuns(t *testing.T) {
	r, restart := startOnOwnServer(t)
	_, js := connectJS(t, r.d.cfg.NATS.URL)
	for v := range 2 {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: time.Now()}, "")
	}
	waitSeq(t, r.d, "p", 2)
	r.stop(t) // a final snapshot at seq 2

	require.NoError(t, js.DeleteStream(t.Context(), EventsStream))
	r = restart()
	require.Equal(t, 2, infectedInWindow(r.d, "p"), "the window's nodes are kept")
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "") // seq 1 of the new stream
	require.Eventually(t, func() bool { return infectedInWindow(r.d, "p") == 3 }, 10*time.Second, 10*time.Millisecond,
		"the new stream's first event is applied")
	waitSeq(t, r.d, "p", 1)
	// The snapshot records the new stream, and the next start takes it up
	// where it left off.
	r.stop(t)
	r = restart()
	_, _, seq := r.d.graphs["p"].win.counts()
	require.Equal(t, uint64(1), seq)
	r.publish(t, "p", Event{Node: "3", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return infectedInWindow(r.d, "p") == 4 }, 10*time.Second, 10*time.Millisecond)
}

// An events stream deleted under a running daemon is made anew when the
// graph's consumer is bound again, and the window reads it from its first
// event, where the rebind failed on the missing stream at every tick.
func TestEventsStreamDeletedUnderTheDaemon(t *testing.T) {
	r, _ := startOnOwnServer(t)
	for v := range 3 {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: time.Now()}, "")
	}
	waitSeq(t, r.d, "p", 3)

	require.NoError(t, r.js.DeleteStream(t.Context(), EventsStream))
	require.Eventually(t, func() bool {
		_, err := r.js.Stream(t.Context(), EventsStream)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the daemon makes the stream anew")
	require.Eventually(t, func() bool {
		_, _, seq := r.d.graphs["p"].win.counts()
		return seq == 0
	}, 10*time.Second, 10*time.Millisecond, "the old stream's position is dropped")
	r.publish(t, "p", `{"node":"3","state":"infected"}`, "")
	require.Eventually(t, func() bool { return infectedInWindow(r.d, "p") == 4 }, 20*time.Second, 10*time.Millisecond,
		"the new stream's first event is applied")
}

// A stop's last line comes after every plugin is closed (it came before,
// and a stop waiting on plugins that would not exit went on unlogged).
func TestStoppedIsTheLastLine(t *testing.T) {
	cfg := testConfig(t, "p", "q")
	cfg.Graphs[0].MinInfected, cfg.Graphs[1].MinInfected = 1000, 1000
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) {
		l.onClose = func() { log.Info("fake closed") }
	}}
	r := start(t, cfg, preload(t, 4, "p", "q"), WithLocalizerFactory(f.factory), WithLogger(log))
	r.stop(t)
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	require.Equal(t, "sourcewatch stopped", msgs[len(msgs)-1], msgs)
	require.Equal(t, 2, logs.FilterMessage("fake closed").Len())
}

// A stop before the daemon started, while it waits for its first NATS
// connection or stands by, ends with the same last line as any clean
// stop (it exited 0 without it).
func TestStoppedBeforeTheStartIsLogged(t *testing.T) {
	lastLines := func(logs *observer.ObservedLogs) []string {
		var msgs []string
		for _, e := range logs.All() {
			msgs = append(msgs, e.Message)
		}
		return msgs
	}
	t.Run("waiting for NATS", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		cfg := testConfig(t, "p")
		cfg.NATS.URL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		core, logs := observer.New(zapcore.InfoLevel)
		d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)))
		require.NoError(t, err)
		_, stop := runInBackground(t, d)
		require.Eventually(t, func() bool { return d.waiting.Load() != nil }, 10*time.Second, 5*time.Millisecond)
		stop()
		msgs := lastLines(logs)
		require.GreaterOrEqual(t, len(msgs), 2, msgs)
		require.Equal(t, []string{"stopped while waiting for the first NATS connection", "sourcewatch stopped"}, msgs[len(msgs)-2:])
		require.Equal(t, false, logs.FilterMessage("sourcewatch stopped").All()[0].ContextMap()["final_snapshot"])
	})
	t.Run("standing by", func(t *testing.T) {
		_, cfgFor := activeAndConfig(t)
		core, logs := observer.New(zapcore.InfoLevel)
		b := runReplica(t, cfgFor("b"), WithLogger(zap.New(core)))
		require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, b.stop(t, false))
		msgs := lastLines(logs)
		require.GreaterOrEqual(t, len(msgs), 2, msgs)
		require.Equal(t, []string{"stopped while standing by", "sourcewatch stopped"}, msgs[len(msgs)-2:])
	})
}

// net/http's own error lines become rate-limited warnings of the logger.
func TestHTTPErrorLogIsRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	now := time.Unix(0, 0)
	l := newLogLimiter(time.Minute, func() time.Time { return now }, zap.New(core))
	w := log.New(httpErrorLog{l}, "", 0)
	for range 5 {
		w.Printf("http: Accept error: accept tcp 127.0.0.1:7070: accept4: too many open files; retrying in 1s")
	}
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	require.Equal(t, zapcore.WarnLevel, e.Level)
	require.Equal(t, "http: Accept error: accept tcp 127.0.0.1:7070: accept4: too many open files; retrying in 1s", e.ContextMap()["error"])
}

// A plugin that dies a moment after every start is relaunched at most
// relaunchesPerMinute times a minute, though each relaunch is a new
// localizer with a fresh supervisor and a plugin alive at a tick resets
// the restarts count; /readyz says why it is not relaunched. A localizer
// that shares its graph's budget with its plugin's supervisor leaves the
// daemon what the supervisors did not take within the minute.
func TestRelaunchesPerMinuteHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		// takenBySupervisors is taken from a budget the localizers share
		// before the plugin dies (-1: the localizers share none).
		takenBySupervisors int
	}{
		{"the daemon's own budget", -1},
		{"a budget shared with the supervisors", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "p")
			cfg.Graphs[0].MinInfected = 1000
			cfg.Graphs[0].Restarts = 1000
			var budget *forward.RelaunchBudget
			if tc.takenBySupervisors >= 0 {
				budget = forward.NewRelaunchBudget(relaunchesPerMinute, time.Minute, nil)
				for range tc.takenBySupervisors {
					_, err := budget.Take()
					require.NoError(t, err)
				}
			}
			f := &factoryOf{}
			f.onMake = func(_ int, l *fakeLocalizer) { l.budget = budget }
			r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
			f.mu.Lock()
			f.onMake = func(_ int, l *fakeLocalizer) { l.budget = budget; l.sick.Store(true) } // dead from the start
			f.mu.Unlock()
			f.all()[0].sick.Store(true)
			want := 1 + relaunchesPerMinute - max(tc.takenBySupervisors, 0)
			require.Eventually(t, func() bool { return len(f.all()) == want }, 10*time.Second, 5*time.Millisecond)
			time.Sleep(300 * time.Millisecond) // 15 ticks more
			require.Len(t, f.all(), want, "no relaunch past the rate")
			code, body := get(t, "http://"+r.d.HTTPAddr()+"/readyz?graph=p")
			require.Equal(t, http.StatusServiceUnavailable, code)
			require.Contains(t, body, "relaunched 5 times within a minute; the next relaunch from ")
		})
	}
}

// A plugin down for good says why in /readyz, not only in the log: its
// restarts used up, or its supervisor refused to relaunch it for the
// graph's relaunch budget (a minute's relaunches spent), with when the
// next relaunch is allowed.
func TestReadyzSaysWhyAPluginIsNotRelaunched(t *testing.T) {
	t.Run("restarts used up", func(t *testing.T) {
		cfg := testConfig(t, "p")
		cfg.Graphs[0].MinInfected = 1000
		cfg.Graphs[0].Restarts = 1
		f := &factoryOf{}
		r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
		f.mu.Lock()
		f.onMake = func(_ int, l *fakeLocalizer) { l.sick.Store(true) } // dead from the start
		f.mu.Unlock()
		f.all()[0].sick.Store(true)
		require.Eventually(t, func() bool { return len(f.all()) == 2 }, 10*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool {
			_, body := get(t, "http://"+r.d.HTTPAddr()+"/readyz?graph=p")
			return strings.Contains(body, "graph p: localizer unhealthy; its relaunches are used up (relaunched 1 time in a row, restarts: 1); the next inference or localize request tries once more")
		}, 10*time.Second, 5*time.Millisecond)
	})
	t.Run("relaunch budget spent by the supervisor", func(t *testing.T) {
		cfg := testConfig(t, "p")
		cfg.Graphs[0].Restarts = 0
		budget := forward.NewRelaunchBudget(relaunchesPerMinute, time.Minute, nil)
		for range relaunchesPerMinute {
			_, err := budget.Take()
			require.NoError(t, err)
		}
		f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) {
			l.budget, l.dieOnCall = budget, 1
			l.dieWith = func() error {
				_, err := budget.Take()
				return fmt.Errorf("%w, needed now for: plugin exited", err)
			}
		}}
		r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
		r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
		// The plugin turns unhealthy as it dies, and the reason is kept
		// when the failed call returns to the inference, a moment later:
		// /readyz may say the first without the second in between.
		want := regexp.MustCompile(`graph p: localizer unhealthy; relaunching it failed: forward plugin relaunched 5 times within a minute; the next relaunch from \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; not relaunched \(restarts: 0\)`)
		var body string
		require.Eventually(t, func() bool {
			_, body = get(t, "http://"+r.d.HTTPAddr()+"/readyz?graph=p")
			return want.MatchString(body)
		}, 10*time.Second, 5*time.Millisecond)
	})
}

// A failed save of the stream positions kept with the snapshots counts as
// a failed snapshot, though no window moved: /readyz and the metric the
// snapshot alert reads agree.
func TestSnapshotMetricCountsFailedPositions(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	cfg.SnapshotInterval = 50 * time.Millisecond
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	refuseStateWrites(t, r.js)
	// An event of no graph moves the unrouted position alone.
	r.publish(t, "nope", `{"node":"1","state":"infected"}`, "")
	require.Eventually(t, func() bool {
		return value(t, r.d.metrics.snapshots.WithLabelValues("error")) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		code, body := get(t, "http://"+r.d.HTTPAddr()+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "snapshots: the last write failed: ")
	}, 10*time.Second, 20*time.Millisecond)
}

// The unrouted consumer of an events stream deleted under the daemon and
// made anew reads the new stream from its first event: it was rebound
// after the old stream's position, and the new stream's events on
// subjects no graph is configured for were never dead-lettered until its
// sequence passed the old one's.
func TestUnroutedFollowsAnEventsStreamMadeAnew(t *testing.T) {
	r, _ := startOnOwnServer(t)
	for v := range 5 {
		r.publish(t, "p", Event{Node: strconv.Itoa(v % 4), State: StateInfected, TS: time.Now()}, "")
	}
	r.publish(t, "nope", Event{Node: "0", State: StateInfected, TS: time.Now()}, "")
	expectUnknownGraphDeadLetters(t, r, 1, "")

	require.NoError(t, r.js.DeleteStream(t.Context(), EventsStream))
	require.Eventually(t, func() bool {
		_, err := r.js.Stream(t.Context(), EventsStream)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the daemon makes the stream anew")
	r.publish(t, "nope2", Event{Node: "0", State: StateInfected, TS: time.Now()}, "") // seq 1 of the new stream
	expectUnknownGraphDeadLetters(t, r, 2, "the new stream's unknown-graph event is dead-lettered")
}

// A graph whose window applied no events has a stream position all the
// same, its through point (the stream's last sequence at the snapshots):
// an events stream deleted and made anew drops it too, where it stayed in
// the old stream's numbers, and the replay-gap check at the next start
// measured the new stream's discards from there, missing those below it.
func TestEventsStreamMadeAnewDropsTheThroughPointOfAnEmptyWindow(t *testing.T) {
	cfg := testConfig(t, "p", "q")
	cfg.Graphs[0].MinInfected, cfg.Graphs[1].MinInfected = 1000, 1000
	cfg.SnapshotInterval = 50 * time.Millisecond
	r := start(t, cfg, preload(t, 4, "p", "q"), WithLocalizerFactory((&factoryOf{}).factory))
	for v := range 3 {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: time.Now()}, "")
	}
	waitSeq(t, r.d, "p", 3)
	q := r.d.graphs["q"]
	require.Eventually(t, func() bool { return q.through.Load() == 3 }, 10*time.Second, 10*time.Millisecond,
		"q's window, without events, is complete through the stream's last")

	require.NoError(t, r.js.DeleteStream(t.Context(), EventsStream))
	require.Eventually(t, func() bool {
		_, _, seq := r.d.graphs["p"].win.counts()
		return seq == 0
	}, 20*time.Second, 10*time.Millisecond, "the daemon makes the stream anew")
	r.publish(t, "p", Event{Node: "3", State: StateInfected, TS: time.Now()}, "") // seq 1 of the new stream
	waitSeq(t, r.d, "p", 1)
	time.Sleep(300 * time.Millisecond) // snapshots
	s, err := r.js.Stream(t.Context(), EventsStream)
	require.NoError(t, err)
	require.LessOrEqual(t, q.through.Load(), s.CachedInfo().State.LastSeq, "q's through point counts in the new stream")
}
