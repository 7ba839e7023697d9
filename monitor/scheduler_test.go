package monitor

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/graph"
)

// alertSink collects alerts published on the graph's subject.
type alertSink struct {
	mu  sync.Mutex
	got []alerts.Alert
}

func subscribeAlerts(t *testing.T, nc *nats.Conn, graphName string) *alertSink {
	s := &alertSink{}
	sub, err := nc.Subscribe(alerts.Subject(DefaultPrefix, graphName), func(m *nats.Msg) {
		var a alerts.Alert
		if err := json.Unmarshal(m.Data, &a); err == nil {
			s.mu.Lock()
			s.got = append(s.got, a)
			s.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return s
}

func (s *alertSink) all() []alerts.Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]alerts.Alert(nil), s.got...)
}

func (s *alertSink) wait(t *testing.T, n int) []alerts.Alert {
	t.Helper()
	require.Eventually(t, func() bool { return len(s.all()) >= n }, 20*time.Second, 5*time.Millisecond, "want %d alerts", n)
	return s.all()
}

func TestAlertsOnSourceSetChangeOnlyAndResolve(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 2
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	sink := subscribeAlerts(t, r.nc, "p")
	fake := f.all()[0]

	infect := func(node int, state string, at time.Duration) {
		r.publish(t, "p", Event{Node: strconv.Itoa(node), State: state, TS: now.Add(at)}, "")
	}
	// One infected node is below min_infected: no inference.
	infect(3, StateInfected, 0)
	waitSeq(t, r.d, "p", 1)
	time.Sleep(100 * time.Millisecond) // several intervals
	require.Zero(t, fake.calls.Load())
	require.Empty(t, sink.all())

	// Two: fires, naming node 3 (the fake names the lowest infected index).
	infect(4, StateInfected, time.Second)
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Equal(t, "3", got[0].Sources[0].Node)
	require.Equal(t, 2, got[0].Infected)
	require.Equal(t, "p.swb", got[0].Model.Bundle)

	// More infections with the same source set: inferences run, nothing
	// is published.
	calls := fake.calls.Load()
	infect(5, StateInfected, 2*time.Second)
	require.Eventually(t, func() bool { return fake.calls.Load() > calls }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, sink.all(), 1)

	// A new lowest infected node changes the source set: updated.
	infect(1, StateInfected, 3*time.Second)
	got = sink.wait(t, 2)
	require.Equal(t, alerts.Updated, got[1].Status)
	require.Equal(t, got[0].Fingerprint, got[1].Fingerprint)
	require.Equal(t, "1", got[1].Sources[0].Node)
	require.Equal(t, uint64(2), got[1].Seq)

	// Recoveries bring the window below min_infected: resolved.
	for _, v := range []int{4, 3, 1} { // the lowest infected node (the source) stays 1 until the end
		infect(v, StateRecovered, 4*time.Second)
	}
	got = sink.wait(t, 3)
	require.Equal(t, alerts.Resolved, got[2].Status)
	require.Equal(t, 1, got[2].Infected)
	// One node still infected: the note says why the incident closed.
	require.Regexp(t, `resolved with 1 infected in the window, under min_infected 2$`, got[2].Note)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, sink.all(), 3, "a resolved incident is published once")

	m := r.d.metrics
	require.Equal(t, 1.0, value(t, m.alerts.WithLabelValues("p", "firing")))
	require.Equal(t, 1.0, value(t, m.alerts.WithLabelValues("p", "updated")))
	require.Equal(t, 1.0, value(t, m.alerts.WithLabelValues("p", "resolved")))
	st := r.d.Status()
	require.Equal(t, alerts.Resolved, st.Graphs[0].LastAlert.Status)
}

// TestSchedulerOneInferencePerGraph keeps three graphs busy with slow
// inferences on two workers: no graph ever has two inferences at once,
// never more than two run, every graph is served, and ingest keeps up.
func TestSchedulerOneInferencePerGraph(t *testing.T) {
	now := time.Now()
	names := []string{"a", "b", "c"}
	cfg := testConfig(t, names...)
	cfg.Workers = 2
	for i := range cfg.Graphs {
		cfg.Graphs[i].Interval = 5 * time.Millisecond
		cfg.Graphs[i].MinChanges = 0 // infer every interval
	}
	f := &factoryOf{delay: 40 * time.Millisecond}
	r := start(t, cfg, preload(t, 50, names...), WithLocalizerFactory(f.factory))

	var total sync.WaitGroup
	for _, g := range names {
		total.Go(func() {
			for i := range 50 {
				r.publish(t, g, Event{Node: strconv.Itoa(i), State: StateInfected, TS: now}, "")
			}
		})
	}
	total.Wait()
	// Ingest is not held up by the slow inferences.
	last := lastSeq(t, r.js)
	require.Eventually(t, func() bool {
		for _, g := range names {
			if _, ch, _ := r.d.graphs[g].win.counts(); ch != 50 {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond, "ingest stalled behind inference (last seq %d)", last)

	require.Eventually(t, func() bool {
		for _, l := range f.all() {
			if l.calls.Load() < 3 {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond, "a graph was starved")
	for _, l := range f.all() {
		require.Zero(t, l.overlap.Load(), "graph %s had overlapping inferences", l.tag)
		require.EqualValues(t, 1, l.maxConc.Load())
	}
	r.stop(t)
	// Stopping cancels in-flight inference and closes every localizer.
	for _, l := range f.all() {
		require.True(t, l.closed.Load())
	}
}

func TestReloadSwapsLocalizers(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	f := &factoryOf{}
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[0].Bundle = "p-v2.swb"
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	old := f.all()[0]
	require.Nil(t, r.d.Status().LastReload, "no reload yet")
	require.Equal(t, 1.0, value(t, r.d.metrics.reloadOK))

	require.NoError(t, r.d.Reload(context.Background()))
	require.Len(t, f.all(), 2)
	require.True(t, r.d.Status().LastReload.OK)
	require.True(t, old.closed.Load(), "the old localizer is closed after the swap")
	resp, err := r.d.Localize(context.Background(), LocalizeRequest{Graph: "p", Infected: []string{"2"}})
	require.NoError(t, err)
	require.Equal(t, "p-v2.swb", resp.Model.Bundle)

	// A failing reload keeps what runs, ready, and says it failed.
	f.fail.Store(true)
	err = r.d.Reload(context.Background())
	require.ErrorIs(t, err, ErrReload)
	resp, err2 := r.d.Localize(context.Background(), LocalizeRequest{Graph: "p", Infected: []string{"2"}})
	require.NoError(t, err2)
	require.Equal(t, "p-v2.swb", resp.Model.Bundle)
	st := r.d.Status()
	require.True(t, st.Ready)
	require.False(t, st.LastReload.OK)
	require.Equal(t, err.Error(), st.LastReload.Error)
	require.Equal(t, 0.0, value(t, r.d.metrics.reloadOK))

	// The graph set cannot change on reload.
	f.fail.Store(false)
	next.Graphs = append(next.Graphs, DefaultGraphConfig("q"))
	next.Graphs[1].Edges, next.Graphs[1].Bundle = "q.edges", "q.swb"
	require.ErrorContains(t, r.d.Reload(context.Background()), "needs a restart")
}

// relaunchableFake is a fake localizer that can relaunch itself, as the
// bundle localizer does on the bundle it loaded.
type relaunchableFake struct {
	*fakeLocalizer
	relaunched *atomic.Int32
}

func (r relaunchableFake) Relaunch(context.Context) (Localizer, error) {
	r.relaunched.Add(1)
	return relaunchableFake{&fakeLocalizer{script: r.script, tag: r.tag + "+"}, r.relaunched}, nil
}

// A localizer that can relaunch itself is relaunched, not rebuilt by the
// factory: a bundle file replaced since the start must wait for a reload.
func TestDeadLocalizerRelaunchesItself(t *testing.T) {
	var made, relaunched atomic.Int32
	factory := func(_ context.Context, gc GraphConfig, _ *graph.Graph) (Localizer, error) {
		made.Add(1)
		return relaunchableFake{&fakeLocalizer{script: infectedAreSources(gc.Bundle), tag: gc.Bundle, dieOnCall: 1}, &relaunched}, nil
	}
	r := start(t, testConfig(t, "p"), preload(t, 5, "p"), WithLocalizerFactory(factory))
	sink := subscribeAlerts(t, r.nc, "p")
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	got := sink.wait(t, 1)
	require.Equal(t, "2", got[0].Sources[0].Node)
	require.Equal(t, int32(1), made.Load(), "built once, at start")
	require.Equal(t, int32(1), relaunched.Load())
}

// A plugin that dies in every inference (a crash loop a relaunch does not
// cure) is said to have died once per limiter interval, with the repeats
// counted, not at every tick: an audit with ten graphs saw 21 such lines
// in 40 s from one graph at a 2 s interval.
func TestPluginDeathInEveryCallIsLoggedOnce(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 1000
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) { l.dieOnEveryCall.Store(true) }}
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)))
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	// Each failed tick relaunches once and retries, up to the relaunches
	// a minute allows; the ticks after it fail without one.
	require.Eventually(t, func() bool { return len(f.all()) == 1+relaunchesPerMinute }, 20*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // ten ticks more
	require.Equal(t, 1, logs.FilterMessageSnippet("localizer unhealthy after a failed inference").Len(),
		"said once per interval, the repeats held back")
}

// TestPluginDeathIsRelaunched kills the localizer's "plugin" during an
// inference: the daemon relaunches it, the alert still arrives, and a
// localizer that dies between inferences is relaunched proactively: every
// time when it lived through a tick, up to the graph's restarts when it
// dies at once.
func TestPluginDeathIsRelaunched(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 1
	var bornSick atomic.Bool
	f := &factoryOf{onMake: func(i int, l *fakeLocalizer) {
		if i == 0 {
			l.dieOnCall = 1
		}
		l.sick.Store(bornSick.Load())
	}}
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)))
	sink := subscribeAlerts(t, r.nc, "p")

	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: now}, "")
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Equal(t, "2", got[0].Sources[0].Node)
	made := f.all()
	require.Len(t, made, 2)
	require.True(t, made[0].closed.Load(), "the dead localizer is closed")
	require.Equal(t, 1.0, value(t, r.d.metrics.restarts.WithLabelValues("p")))

	// Dies between inferences: relaunched without waiting for events.
	made[1].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == 3 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return r.d.Status().Graphs[0].LocalizerHealth }, 10*time.Second, 5*time.Millisecond)

	// It lived through a tick: its death does not count against
	// restarts: 1, and it is relaunched again. Waited for, not slept
	// out: a loaded machine may hold the ticks back.
	gr := r.d.order[0]
	forgiven := func() bool { return gr.relaunches.Load() == 0 }
	require.Eventually(t, forgiven, 10*time.Second, 5*time.Millisecond)
	f.all()[2].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == 4 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return r.d.Status().Graphs[0].LocalizerHealth }, 10*time.Second, 5*time.Millisecond)

	// One that dies at once, relaunch after relaunch, uses restarts: 1 up.
	require.Eventually(t, forgiven, 10*time.Second, 5*time.Millisecond)
	bornSick.Store(true)
	f.all()[3].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == 5 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // many intervals
	require.Len(t, f.all(), 5)
	require.False(t, r.d.Status().Graphs[0].LocalizerHealth)
	require.Equal(t, 4.0, value(t, r.d.metrics.restarts.WithLabelValues("p")))
	require.Equal(t, 1, logs.FilterMessageSnippet("relaunches used up").Len(), "said once, the repeats held back")

	// The next inference tries once more; up again, the plugin is said to
	// be, and the budget's held-back lines are not reported after that.
	bornSick.Store(false)
	r.publish(t, "p", Event{Node: "3", State: StateInfected, TS: now}, "")
	require.Eventually(t, func() bool {
		return logs.FilterMessage("forward plugin up again after its relaunches were used up").Len() == 1
	},
		10*time.Second, 5*time.Millisecond)
	r.d.limiter.flush(true)
	require.Zero(t, logs.FilterMessageSnippet("relaunches used up (restarts); the next inference or localize request tries once more (held back").Len())
}

// A plugin that dies in every call and is alive between calls (its
// supervisor brings it back) is relaunched restarts times, not at every
// tick: each relaunch is a new localizer, with a relaunch budget of its
// own, and the ticks found each one up. A call that works again resets
// the count.
func TestPluginDyingInEveryCallUsesUpItsRelaunches(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 2
	var dying atomic.Bool
	dying.Store(true)
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) { l.dieOnEveryCall.Store(dying.Load()) }}
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)))
	sink := subscribeAlerts(t, r.nc, "p")

	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	// A failed inference is tried again at every tick: many ticks.
	require.Eventually(t, func() bool {
		var calls int32
		for _, l := range f.all() {
			calls += l.calls.Load()
		}
		return calls >= 10
	}, 10*time.Second, 5*time.Millisecond)
	require.Len(t, f.all(), 1+cfg.Graphs[0].Restarts, "the first localizer and its restarts, no more")
	require.Equal(t, float64(cfg.Graphs[0].Restarts), value(t, r.d.metrics.restarts.WithLabelValues("p")))
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("relaunches used up").Len() == 1 }, 10*time.Second, 5*time.Millisecond)

	// Fixed (its supervisor's next relaunch runs a good build): the next
	// call works, the alert goes out, and a later death is relaunched again.
	dying.Store(false)
	last := f.all()[len(f.all())-1]
	last.dieOnEveryCall.Store(false)
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Eventually(t, func() bool { return r.d.Status().Graphs[0].LocalizerHealth }, 10*time.Second, 5*time.Millisecond)
	made := len(f.all())
	f.all()[made-1].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == made+1 }, 10*time.Second, 5*time.Millisecond)
}

// A plugin that answers inferences with errors, alive, and is killed now
// and then is relaunched every time: its failures are not deaths in a
// call, so the ticks that find it up reset the count.
func TestFailingPluginKilledNowAndThenIsRelaunchedEachTime(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 1
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) { l.failing.Store(true) }}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory))
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return f.all()[0].calls.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	for kill := 1; kill <= 3; kill++ {
		f.all()[kill-1].sick.Store(true)
		require.Eventually(t, func() bool { return len(f.all()) == kill+1 }, 10*time.Second, 5*time.Millisecond,
			"kill %d was not relaunched", kill)
		require.Eventually(t, func() bool { return f.all()[kill].calls.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
	}
	require.True(t, r.d.Status().Graphs[0].LocalizerHealth)
}

// A plugin that died in a call, was relaunched and then failed the retry
// with an error, alive, is not one that dies in every call: once the
// outbreak is over, each later death between calls is relaunched, as is
// one killed now and then. (Marked as dying in calls for good, it ran
// out its relaunches over the quiet weeks after.)
func TestPluginThatDiedOnceInACallIsForgivenLaterDeaths(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 1
	f := &factoryOf{onMake: func(i int, l *fakeLocalizer) {
		if i == 0 {
			l.dieOnCall = 1
		} else {
			l.failing.Store(true)
		}
	}}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory))
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return len(f.all()) == 2 && f.all()[1].calls.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)
	r.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return len(r.d.readiness()) == 0 }, 10*time.Second, 5*time.Millisecond)
	// The first death is one after a tick that found the plugin up and
	// forgave the relaunch (/readyz can be empty before the failed retry
	// has even marked the graph failing; a kill then spends the one
	// relaunch, and the outbreak, now over, asks for no other).
	require.Eventually(t, func() bool { return r.d.graphs["p"].relaunches.Load() == 0 }, 10*time.Second, 5*time.Millisecond)
	for kill := 1; kill <= 3; kill++ {
		f.all()[kill].sick.Store(true)
		require.Eventually(t, func() bool { return len(f.all()) == kill+2 }, 10*time.Second, 5*time.Millisecond,
			"kill %d was not relaunched", kill)
		require.Eventually(t, func() bool { return r.d.Status().Graphs[0].LocalizerHealth }, 10*time.Second, 5*time.Millisecond)
		// A tick that finds it up forgives the death.
		require.Eventually(t, func() bool { return r.d.graphs["p"].relaunches.Load() == 0 }, 10*time.Second, 5*time.Millisecond)
	}
}

// A plugin whose relaunch died in the retry too stays marked as dying in
// calls while its outbreak lasts; once the outbreak is over it is called
// no more, and a death between calls is relaunched as any other.
func TestOutbreakOverForgivesDeathsInCalls(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Restarts = 2
	f := &factoryOf{onMake: func(i int, l *fakeLocalizer) {
		if i < 2 {
			l.dieOnCall = 1
		} else {
			l.failing.Store(true)
		}
	}}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory))
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return len(f.all()) == 3 && f.all()[2].calls.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)
	require.True(t, r.d.graphs["p"].diedInCall.Load(), "the retry died too")
	r.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return !r.d.graphs["p"].diedInCall.Load() }, 10*time.Second, 5*time.Millisecond)
	f.all()[2].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == 4 }, 10*time.Second, 5*time.Millisecond,
		"a death after the outbreak was not relaunched")
}

// A localizer that answers every call with an error, its process alive,
// makes the daemon not ready, naming the error, and is logged once as an
// error, not at every tick; the next inference that works clears it.
func TestFailingInferenceIsNotReady(t *testing.T) {
	r, f, logs, sink := startFailingInference(t)
	problems := r.d.readiness()
	require.Len(t, problems, 1)
	require.Equal(t, `graph p: last inference failed: graph "p": localizing: fake p.swb: plugin panic: index out of range`, problems[0])
	require.Equal(t, 1, logs.FilterMessage("inference failed").Len())
	require.Zero(t, logs.FilterMessage("inference still failing").Len(), "repeats are held back for the limiter's interval after the first")
	require.Len(t, f.all(), 1, "a healthy process is not relaunched")

	// The outbreak ends with nothing inferred: nothing is left to fail.
	r.publish(t, "p", Event{Node: "2", State: StateRecovered, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return len(r.d.readiness()) == 0 }, 10*time.Second, 5*time.Millisecond)
	require.NotEmpty(t, r.d.Status().Graphs[0].LastError, "/status still says what failed last")

	f.all()[0].failing.Store(false)
	r.publish(t, "p", Event{Node: "3", State: StateInfected, TS: time.Now()}, "")
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Empty(t, r.d.readiness())
	require.Empty(t, r.d.Status().Graphs[0].LastError)
}

// startFailingInference starts a daemon whose localizer answers every
// call with an error, and an outbreak it has failed to infer five times.
func startFailingInference(t *testing.T) (*running, *factoryOf, *observer.ObservedLogs, *alertSink) {
	t.Helper()
	cfg := testConfig(t, "p")
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) { l.failing.Store(true) }}
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)))
	sink := subscribeAlerts(t, r.nc, "p")
	require.Empty(t, r.d.readiness())

	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return f.all()[0].calls.Load() >= 5 }, 10*time.Second, 5*time.Millisecond,
		"a failed inference is tried again at the next tick")
	return r, f, logs, sink
}

// A failing inference that starts to work again during the outbreak says
// so, with the repeats it held back, and leaves nothing held back for a
// later line to report as if the failures went on.
func TestInferenceRecoveryIsLogged(t *testing.T) {
	r, f, logs, sink := startFailingInference(t)
	f.all()[0].failing.Store(false)
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Eventually(t, func() bool { return logs.FilterMessage("inference succeeds again").Len() == 1 }, 10*time.Second, 5*time.Millisecond)
	line := logs.FilterMessage("inference succeeds again").All()[0].ContextMap()
	require.Equal(t, "p", line["graph"])
	require.GreaterOrEqual(t, line["suppressed"], int64(1), "the repeats held back since the last line are counted here")
	r.d.limiter.flush(true)
	require.Zero(t, logs.FilterMessageSnippet("held back since the last line").Len(), "nothing is reported as still failing")
}

// An outbreak on nodes whose earlier infection left the window, and
// infections ageing out of it, change the observation without changing a
// node's state: both must lead to a new inference. (Counting state changes
// alone, the repeat outbreak never alerted and the aged-out nodes stayed
// the alert's sources.)
func TestRepeatOutbreakAndAgeingOut(t *testing.T) {
	start0 := time.Now()
	var offset atomic.Int64
	clock := func() time.Time { return start0.Add(time.Duration(offset.Load())) }
	at := func(d time.Duration) time.Time { return start0.Add(d) }
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Window = time.Minute
	cfg.Graphs[0].MinInfected = 2
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 8, "p"), WithLocalizerFactory(f.factory), WithClock(clock))
	sink := subscribeAlerts(t, r.nc, "p")
	infect := func(node int, ts time.Time) {
		r.publish(t, "p", Event{Node: strconv.Itoa(node), State: StateInfected, TS: ts}, "")
	}

	// Nodes 1, 2 and 3 at 0 s: firing, source 1 (the fake names the lowest
	// infected node).
	for _, v := range []int{1, 2, 3} {
		infect(v, at(0))
	}
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Equal(t, "1", got[0].Sources[0].Node)

	// 5 and 6 at 50 s; at 70 s 1, 2 and 3 have aged out: the source set
	// is now 5, with no event since 50 s.
	require.Eventually(t, func() bool { return r.d.Status().Graphs[0].ChangedSinceInference == 0 }, 10*time.Second, 5*time.Millisecond)
	fake := f.all()[0]
	calls := fake.calls.Load()
	offset.Store(int64(50 * time.Second))
	infect(5, at(50*time.Second))
	infect(6, at(50*time.Second))
	waitSeq(t, r.d, "p", 5)
	// The new infections are inferred at 50 s (source still 1: nothing to
	// publish) before the clock moves on.
	require.Eventually(t, func() bool { return fake.calls.Load() > calls }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several intervals
	require.Len(t, sink.all(), 1)
	offset.Store(int64(70 * time.Second))
	got = sink.wait(t, 2)
	require.Equal(t, alerts.Updated, got[1].Status)
	require.Equal(t, "5", got[1].Sources[0].Node)
	require.Equal(t, 2, got[1].Infected)

	// At 200 s everything has aged out: resolved.
	offset.Store(int64(200 * time.Second))
	got = sink.wait(t, 3)
	require.Equal(t, alerts.Resolved, got[2].Status)

	// The same nodes break out again: their state was infected all along
	// ("refreshed"), yet the observation went from nothing to three.
	for _, v := range []int{1, 2, 3} {
		infect(v, at(200*time.Second))
	}
	got = sink.wait(t, 4)
	require.Equal(t, alerts.Firing, got[3].Status)
	require.Equal(t, "1", got[3].Sources[0].Node)
	require.NotEqual(t, got[0].Fingerprint, got[3].Fingerprint, "a new incident")

	// It resolves, and exactly the nodes its last inference saw break out
	// once more: a third incident, though the infected set is the one the
	// last inference saw.
	offset.Store(int64(300 * time.Second))
	got = sink.wait(t, 5)
	require.Equal(t, alerts.Resolved, got[4].Status)
	for _, v := range []int{1, 2, 3} {
		infect(v, at(300*time.Second))
	}
	got = sink.wait(t, 6)
	require.Equal(t, alerts.Firing, got[5].Status)
	require.NotEqual(t, got[3].Fingerprint, got[5].Fingerprint)
}

// Events applied and snapshotted before a stop but never inferred are
// inferred after the restart. (The restore used to count the snapshot as
// inferred, so the last changes before a stop never reached an alert.)
func TestRestartInfersWhatTheStopLeftUninferred(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 2
	cfg.Graphs[0].Interval = time.Hour // no inference before the stop
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 8, "p"), WithLocalizerFactory(f.factory))
	for _, v := range []int{4, 2, 6} {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: now}, "")
	}
	waitSeq(t, r.d, "p", 3)
	require.Equal(t, -1, r.d.Status().Graphs[0].ChangedSinceInference, "no inference yet")
	r.stop(t)
	require.Zero(t, f.all()[0].calls.Load())

	cfg.Graphs[0].Interval = 20 * time.Millisecond
	r2 := start(t, cfg, preload(t, 8, "p"), WithLocalizerFactory(f.factory), WithClock(func() time.Time { return now.Add(time.Second) }))
	sink := subscribeAlerts(t, r2.nc, "p")
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Equal(t, "2", got[0].Sources[0].Node)
	require.Equal(t, 3, got[0].Infected)
}

// A localizer's note reaches the alert subscribers read.
func TestAlertCarriesTheLocalizersNote(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 2
	f := &factoryOf{script: func(gc GraphConfig) func([]float64) Inference {
		base := infectedAreSources(gc.Bundle)
		return func(y []float64) Inference {
			inf := base(y)
			inf.Note = "an observation unlike the training data"
			return inf
		}
	}}
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	sink := subscribeAlerts(t, r.nc, "p")
	for _, v := range []int{2, 3} {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: now}, "")
	}
	got := sink.wait(t, 1)
	require.Equal(t, "an observation unlike the training data", got[0].Note)
}

func TestChangedKeys(t *testing.T) {
	a := DefaultGraphConfig("p")
	b := a
	require.Empty(t, changedKeys("graphs[p].", a, b))
	b.Window, b.ForwardParams = 2*time.Minute, map[string]string{"steps": "5"}
	require.Equal(t, []string{"graphs[p].forward_params", "graphs[p].window"}, changedKeys("graphs[p].", a, b))
}

// A reload that finds daemon-wide keys changed applies the graphs' keys,
// keeps the running daemon-wide values (Config reports those, not the
// file's), and warns, naming each changed key; before, it kept them
// without a word and Config reported the file's values as in effect.
func TestReloadWarnsOfStartOnlyKeys(t *testing.T) {
	cfg := testConfig(t, "p")
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[0].MinInfected = 7
	next.Events.MaxAge = 48 * time.Hour
	next.Alerts.MaxBytes = 2 << 20
	next.Workers = cfg.Workers + 1
	core, logs := observer.New(zapcore.WarnLevel)
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	require.NoError(t, r.d.Reload(context.Background()))
	got := r.d.Config()
	require.Equal(t, 7, got.Graphs[0].MinInfected, "the graph's keys apply")
	require.Equal(t, cfg.Events.MaxAge, got.Events.MaxAge)
	require.Equal(t, cfg.Alerts, got.Alerts)
	require.Equal(t, cfg.Workers, got.Workers)
	warned := logs.FilterMessageSnippet("read at start only").All()
	require.Len(t, warned, 1)
	require.Equal(t, []any{"workers", "events.max_age", "alerts.max_bytes"}, warned[0].ContextMap()["keys"])

	// Reloading the same file again warns again: it still differs.
	require.NoError(t, r.d.Reload(context.Background()))
	require.Len(t, logs.FilterMessageSnippet("read at start only").All(), 2)
	// A file with the running values says nothing.
	next = r.d.Config()
	require.NoError(t, r.d.Reload(context.Background()))
	require.Len(t, logs.FilterMessageSnippet("read at start only").All(), 2)
}

// The reload's log line names a graph whose model changed although no key
// did (a bundle retrained in place), and nothing for an unchanged one.
func TestReloadNamesAModelRetrainedInPlace(t *testing.T) {
	cfg := testConfig(t, "p")
	var version atomic.Value
	version.Store("")
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) { l.version = version.Load().(string) }}
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory), WithLogger(zap.New(core)),
		WithReload(func(context.Context) (Config, error) { return cfg, nil }))
	require.NoError(t, r.d.Reload(context.Background()))
	version.Store("-retrained")
	require.NoError(t, r.d.Reload(context.Background()))
	lines := logs.FilterMessage("reloaded").All()
	require.Len(t, lines, 2)
	require.Empty(t, lines[0].ContextMap()["changed"])
	require.Equal(t, []any{"graphs[p].model"}, lines[1].ContextMap()["changed"])
	require.Equal(t, []any{"p=p.swb-retrained (fake 1)"}, lines[1].ContextMap()["models"])
}

func TestStartOnlyChanges(t *testing.T) {
	a := DefaultConfig()
	b := a
	require.Empty(t, StartOnlyChanges(a, b))
	b.Graphs = []GraphConfig{DefaultGraphConfig("x")}
	require.Empty(t, StartOnlyChanges(a, b), "graphs are reloadable")
	b.NATS.TLS.CA, b.HTTP.Pprof, b.HA.LeaseTTL = "ca.pem", true, time.Minute
	require.Equal(t, []string{"nats.tls.ca", "http.pprof", "ha.lease_ttl"}, StartOnlyChanges(a, b))
}

// A reload pairs graphs by name, not by their place in the list: an
// operator of many graphs who sorts the list, or moves one, reloads each
// graph's own settings onto it; a graph added or removed is named.
func TestReloadMatchesGraphsByName(t *testing.T) {
	cfg := testConfig(t, "p", "q", "r")
	for i := range cfg.Graphs {
		cfg.Graphs[i].MinInfected = 1000
	}
	f := &factoryOf{}
	var next atomic.Pointer[Config]
	next.Store(&cfg)
	r := start(t, cfg, preload(t, 4, "p", "q", "r"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return *next.Load(), nil }))

	moved := cfg
	moved.Graphs = []GraphConfig{cfg.Graphs[2], cfg.Graphs[0], cfg.Graphs[1]} // r, p, q
	moved.Graphs[0].Bundle = "r-v2.swb"
	moved.Graphs[0].MinInfected = 7
	moved.Graphs[2].MinChanges = 3
	next.Store(&moved)
	require.NoError(t, r.d.Reload(context.Background()))
	for name, want := range map[string]struct {
		bundle             string
		minInf, minChanges int
	}{"p": {"p.swb", 1000, 1}, "q": {"q.swb", 1000, 3}, "r": {"r-v2.swb", 7, 1}} {
		gr := r.d.graphs[name]
		gc := gr.gc.Load()
		require.Equal(t, name, gc.Name)
		require.Equal(t, want.bundle, gc.Bundle, name)
		require.Equal(t, want.minInf, gc.MinInfected, name)
		require.Equal(t, want.minChanges, gc.MinChanges, name)
		require.Equal(t, want.bundle, modelOf(gr.loc.Load().localizer()).Bundle, name)
	}
	names := func(c *Config) (out []string) {
		for _, gc := range c.Graphs {
			out = append(out, gc.Name)
		}
		return out
	}
	require.Equal(t, []string{"p", "q", "r"}, names(r.d.current.Load()), "kept in the running order")

	// A graph added and one removed are named; the running setup stays.
	other := moved
	other.Graphs = append([]GraphConfig(nil), moved.Graphs...)
	other.Graphs[1].Name = "p2"
	next.Store(&other)
	err := r.d.Reload(context.Background())
	require.ErrorIs(t, err, ErrReload)
	require.ErrorContains(t, err, `("p2" added, "p" removed); adding or removing graphs needs a restart`)

	// The edges of a graph found by name.
	other.Graphs[1].Name = "p"
	other.Graphs[2].Edges = "q-new.edges"
	err = r.d.Reload(context.Background())
	require.ErrorContains(t, err, `graph "q": edges and directed need a restart`)
	require.Equal(t, "r-v2.swb", r.d.graphs["r"].gc.Load().Bundle, "the failed reloads changed nothing")
}

// A reload waits for each old localizer's inference to end before closing
// it, but one graph's slow inference must not hold the other graphs on
// their old bundles and settings meanwhile, nor hold up another graph's
// relaunch (which takes the reload's lock, on a worker): with many graphs,
// a Power Grid inference of seconds, or a plugin hanging until its call
// timeout, delayed every graph after it in the list and could take the
// workers.
func TestReloadIsNotHeldBySlowGraph(t *testing.T) {
	cfg := testConfig(t, "slow", "fast")
	cfg.Graphs[1].MinInfected = 1000
	const slowFor = 3 * time.Second
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) {
		if l.tag == "slow.swb" {
			l.delay = slowFor
		}
	}}
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[1].Bundle = "fast-v2.swb"
	next.Graphs[1].MinChanges = 5
	r := start(t, cfg, preload(t, 4, "slow", "fast"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	slowOld := f.all()[0]
	r.publish(t, "slow", Event{Node: "1", State: StateInfected}, "")
	require.Eventually(t, func() bool { return slowOld.active.Load() == 1 }, 5*time.Second, 5*time.Millisecond, "the slow graph's inference runs")

	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.d.Reload(t.Context()) }()
	fast := r.d.graphs["fast"]
	require.Eventually(t, func() bool {
		return modelOf(fast.loc.Load().localizer()).Bundle == "fast-v2.swb" && fast.gc.Load().MinChanges == 5
	}, slowFor/2, 5*time.Millisecond, "the other graph runs its new bundle and settings at once")

	// Another graph's plugin dies now: its relaunch does not wait for the
	// slow graph's inference either.
	relaunched := make(chan error, 1)
	go func() { relaunched <- r.d.relaunch(t.Context(), fast) }()
	select {
	case err := <-relaunched:
		require.NoError(t, err)
	case <-time.After(slowFor / 2):
		t.Fatal("a relaunch of another graph waited for the slow graph's inference")
	}
	require.Less(t, time.Since(began), slowFor, "checked while the slow inference still ran")

	// The reload itself returns once the old localizers are closed, the
	// slow one after its inference.
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, time.Since(began), slowFor/2)
	require.True(t, slowOld.closed.Load())
	require.True(t, f.all()[1].closed.Load(), "the fast graph's first localizer is closed too")
}

// An incident whose window fell below min_infected resolves while its
// plugin is down and held back by the relaunch rate: a resolve needs no
// plugin. The tick chose a relaunch (refused for the rest of the minute)
// over the resolve at every tick, so the incident stayed open and the
// next outbreak was published as an update of it instead of firing.
func TestResolveWhilePluginRelaunchIsHeldBack(t *testing.T) {
	start0 := time.Now()
	var offset atomic.Int64
	clock := func() time.Time { return start0.Add(time.Duration(offset.Load())) }
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Window = 2 * time.Second
	cfg.Graphs[0].MinInfected = 2
	cfg.Graphs[0].Restarts = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 8, "p"), WithLocalizerFactory(f.factory), WithClock(clock))
	sink := subscribeAlerts(t, r.nc, "p")
	for _, v := range []int{1, 2, 3} {
		r.publish(t, "p", Event{Node: strconv.Itoa(v), State: StateInfected, TS: start0}, "")
	}
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)

	f.mu.Lock()
	f.onMake = func(_ int, l *fakeLocalizer) { l.sick.Store(true) } // dead from the start
	f.mu.Unlock()
	f.all()[0].sick.Store(true)
	require.Eventually(t, func() bool { return len(f.all()) == 1+relaunchesPerMinute }, 10*time.Second, 5*time.Millisecond)

	offset.Store(int64(3 * time.Second)) // the window is empty; the minute is not up
	got = sink.wait(t, 2)
	require.Equal(t, alerts.Resolved, got[1].Status)
}

// A job acts on the window as it is when it runs, not as the tick that
// queued it saw it: queued behind other graphs' inferences (shared
// workers, a plugin's relaunch backoff), a resolve can run after new
// infections brought the window back over min_infected, and an
// inference after the window fell under it. Neither publishes then:
// the resolve would close a live incident ("resolved with 3 infected in
// the window, under min_infected 2") for the next tick to fire it again
// as a new one, and the inference would open one under min_infected.
func TestJobsActOnTheWindowAsItIsWhenTheyRun(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 2
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	sink := subscribeAlerts(t, r.nc, "p")
	infect := func(node int, state string, at time.Duration) {
		r.publish(t, "p", Event{Node: strconv.Itoa(node), State: state, TS: now.Add(at)}, "")
	}
	gr := r.d.graphs["p"]
	// hold runs job as a worker would, with the scheduler kept off the
	// graph meanwhile.
	hold := func(job func()) {
		require.Eventually(t, func() bool { return gr.inflight.CompareAndSwap(false, true) }, 10*time.Second, time.Millisecond)
		defer gr.inflight.Store(false)
		job()
	}

	infect(3, StateInfected, 0)
	infect(4, StateInfected, time.Second)
	require.Equal(t, alerts.Firing, sink.wait(t, 1)[0].Status)

	// A resolve queued when the window was under min_infected runs with
	// three infected in it.
	hold(func() {
		infect(5, StateInfected, 2*time.Second)
		waitSeq(t, r.d, "p", 3)
		r.d.resolve(t.Context(), gr)
	})
	time.Sleep(100 * time.Millisecond) // several intervals
	for _, a := range sink.all() {
		require.NotEqual(t, alerts.Resolved, a.Status, "a live incident resolved: %s", a.Note)
	}
	_, open := r.d.tracker.Open("p")
	require.True(t, open)

	// Recoveries bring it under min_infected: resolved, once.
	for _, v := range []int{3, 4, 5} {
		infect(v, StateRecovered, 3*time.Second)
	}
	require.Eventually(t, func() bool {
		all := sink.all()
		return len(all) > 0 && all[len(all)-1].Status == alerts.Resolved
	}, 10*time.Second, 5*time.Millisecond)
	n := len(sink.all())

	// An inference queued when the window held two runs with one.
	hold(func() {
		infect(1, StateInfected, 4*time.Second)
		waitSeq(t, r.d, "p", 7)
		r.d.infer(t.Context(), gr)
	})
	time.Sleep(100 * time.Millisecond)
	require.Len(t, sink.all(), n, "an incident opened under min_infected")
}

// A reload that shortens a graph's interval takes effect at once, not
// once the tick already waited for under the old interval comes: an
// operator who cut an interval of an hour to 20ms waited up to the hour
// for the graph's next alert (and for every other setting reloaded with
// it).
func TestReloadShortenedIntervalTicksByTheNewOne(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Interval = time.Hour
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[0].Interval = 20 * time.Millisecond
	core, logs := observer.New(zapcore.InfoLevel)
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	sink := subscribeAlerts(t, r.nc, "p")
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	waitSeq(t, r.d, "p", 1)
	require.NoError(t, r.d.Reload(context.Background()))
	require.Equal(t, []any{"graphs[p].interval"}, logs.FilterMessage("reloaded").All()[0].ContextMap()["changed"])
	got := sink.wait(t, 1)
	require.Equal(t, alerts.Firing, got[0].Status)
	require.Equal(t, "2", got[0].Sources[0].Node)
}

// A reload that sets an interval below a second warns of it, as a start
// does: `interval: 10ms` meant for ten minutes ran a tick every 10ms
// with nothing in the log.
func TestReloadWarnsOfSubSecondInterval(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Interval = 10 * time.Second
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[0].Interval = 10 * time.Millisecond
	core, logs := observer.New(zapcore.WarnLevel)
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	require.Empty(t, logs.FilterMessageSnippet("interval below a second").All(), "10s at start")
	require.NoError(t, r.d.Reload(context.Background()))
	warned := logs.FilterMessageSnippet("interval below a second").All()
	require.Len(t, warned, 1)
	require.Equal(t, "p", warned[0].ContextMap()["graph"])
	// Reloading the same interval again says nothing more.
	require.NoError(t, r.d.Reload(context.Background()))
	require.Len(t, logs.FilterMessageSnippet("interval below a second").All(), 1)
}
