package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

func request(t *testing.T, nc *nats.Conn, subject string, body any) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	m, err := nc.Request(subject, data, 10*time.Second)
	require.NoError(t, err)
	return m
}

func TestMicroEndpoints(t *testing.T) {
	cfg := testConfig(t, "p", "q")
	cfg.Graphs[0].MinInfected = 1000
	cfg.Graphs[1].MinInfected = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 5, "p", "q"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return cfg, nil }), WithCommit("abc1234"))

	// localize: an observation in, ranked sources out.
	m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{ID: "incident-7", Graph: "q", Infected: []string{"3", "2"}})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	var resp LocalizeResponse
	require.NoError(t, json.Unmarshal(m.Data, &resp))
	require.Equal(t, "incident-7", resp.ID, "the caller's id is echoed")
	require.Equal(t, "q", resp.Graph)
	require.Len(t, resp.Sources, 1)
	require.Equal(t, "2", resp.Sources[0].Node)
	require.Equal(t, []string{"2"}, resp.CredibleSet)
	require.Equal(t, "q.swb", resp.Model.Bundle)
	require.Nil(t, resp.Ranked, "no top asked for")

	// top: the highest-scored nodes, sources or not, best first and node
	// id breaking ties; no more than the graph has.
	for _, tc := range []struct {
		top  int
		want []string
	}{
		{3, []string{"2", "0", "1"}},
		{100, []string{"2", "0", "1", "3", "4"}},
	} {
		m = request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "q", Infected: []string{"3", "2"}, Top: tc.top})
		require.Empty(t, m.Header.Get(micro.ErrorHeader))
		resp = LocalizeResponse{}
		require.NoError(t, json.Unmarshal(m.Data, &resp))
		var got []string
		for _, s := range resp.Ranked {
			got = append(got, s.Node)
		}
		require.Equal(t, tc.want, got, "top %d", tc.top)
		require.Equal(t, 0.9, resp.Ranked[0].Score)
		require.Len(t, resp.Sources, 1, "the source set is the threshold's still")
	}
	m = request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "q", Infected: []string{"3"}, Top: -1})
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), `"top" is -1`)

	// Bad requests say what is wrong.
	m = request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "p", Infected: []string{"99"}})
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), `no node "99"`)
	m = request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "zz", Infected: []string{"1"}})
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), `unknown graph: "zz" (graphs: p, q)`)
	// Nothing infected, or a misspelt key, is refused rather than
	// localized as an empty observation.
	for body, want := range map[string]string{
		`{"graph":"p"}`:                     `"infected" is missing or empty`,
		`{"graph":"p","infected":[]}`:       `"infected" is missing or empty`,
		`{"graph":"p","infectd":["1","2"]}`: `unknown field "infectd"`,
		`{"infected":["1"]}`:                `"graph" is missing or empty: name one of p, q`,
		// In the request's terms, not Go's ("Go struct field
		// LocalizeRequest.infected of type string", "EOF").
		`{"graph":"p","infected":[1,2]}`:           `"infected" holds a JSON number, want an array of node ids as strings, as in the edge list`,
		`{"graph":"p","infected":["1"],"top":"5"}`: `"top" holds a JSON string, want a whole number`,
		`["p"]`: `a JSON array, want an object`,
		``:      `the request is empty`,
		// One object, each key once, as events are read.
		`{"graph":"p","infected":["1"]} garbage`:     `more after the request object`,
		`{"graph":"p","infected":["1"]}{}`:           `more after the request object`,
		`{"graph":"p","infected":["1"],"Graph":"q"}`: `"Graph" is given twice (keys match in any case)`,
		`{"graph":"p","infected":["1",null]}`:        `"infected"[1] is null, want a node id as a string`,
		`{"graph":"p","infected":["1"],"top":1.5}`:   `"top" holds 1.5, want a whole number`,
		`{"graph":"p","infected":["1"],"top":[1]}`:   `"top" holds a JSON array, want a whole number`,
		`{"graph":"p","infected":["1"],"top":-1e30}`: `"top" is -1e30: want a count of nodes, 0 for none`,
	} {
		m, err := r.nc.Request("sourcewatch.svc.localize", []byte(body), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader), body)
		require.Contains(t, m.Header.Get(micro.ErrorHeader), want, body)
	}
	m, err := r.nc.Request("sourcewatch.svc.localize", []byte("{"), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))

	// status: graphs and their windows.
	r.publish(t, "p", Event{Node: "1", State: StateInfected, TS: time.Now()}, "")
	waitSeq(t, r.d, "p", 1)

	// window: the nodes an alert made now would count, to localize with.
	m = request(t, r.nc, "sourcewatch.svc.window", WindowRequest{Graph: "p"})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	var win WindowResponse
	require.NoError(t, json.Unmarshal(m.Data, &win))
	require.Equal(t, []string{"1"}, win.Infected)
	require.Equal(t, uint64(1), win.Seq)
	require.False(t, win.Window.From.IsZero())
	win = WindowResponse{}
	m = request(t, r.nc, "sourcewatch.svc.window", WindowRequest{Graph: "q"})
	require.NoError(t, json.Unmarshal(m.Data, &win))
	require.Equal(t, []string{}, win.Infected, "an empty window is [], not null")
	for body, want := range map[string]string{
		`{"graph":"zz"}`:             `unknown graph: "zz" (graphs: p, q)`,
		`{}`:                         `"graph" is missing or empty: name one of p, q`,
		`{"graph":"p","top":3}`:      `unknown field "top" (a request has graph alone)`,
		`{"graph":"p"} {"x":1}`:      `more after the request object`,
		`{"graph":"zz","GRAPH":"p"}`: `"GRAPH" is given twice (keys match in any case)`,
	} {
		m, err := r.nc.Request("sourcewatch.svc.window", []byte(body), 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader), body)
		require.Contains(t, m.Header.Get(micro.ErrorHeader), want, body)
	}
	// A body asking for more is refused, not ignored.
	m, err = r.nc.Request("sourcewatch.svc.status", []byte(`{"graph":"p"}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), "status takes no request body")
	// An empty object however spaced, as a pretty-printing client sends
	// it, asks for nothing.
	for _, body := range []string{"{ }", "{\n}\n", " null "} {
		m, err = r.nc.Request("sourcewatch.svc.status", []byte(body), 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(micro.ErrorHeader), "%q", body)
	}
	m = request(t, r.nc, "sourcewatch.svc.status", nil)
	var st Status
	require.NoError(t, json.Unmarshal(m.Data, &st))
	require.True(t, st.Ready)
	require.Equal(t, Version, st.Version)
	require.Equal(t, "abc1234", st.Commit, "two builds of one version told apart")
	require.Len(t, st.Graphs, 2)
	require.Equal(t, "p", st.Graphs[0].Name)
	require.Equal(t, 1, st.Graphs[0].WindowInfected)
	require.Equal(t, 5, st.Graphs[1].Nodes)
	require.True(t, st.Graphs[0].LocalizerHealth)

	// reload: new localizers, old ones closed.
	m = request(t, r.nc, "sourcewatch.svc.reload", nil)
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.Len(t, f.all(), 4)
	for _, l := range f.all()[:2] {
		require.True(t, l.closed.Load())
	}
	// A body asking for more than the whole file is refused, not ignored.
	m = request(t, r.nc, "sourcewatch.svc.reload", map[string]string{"graph": "p"})
	require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), "reload takes no request body")
	require.Len(t, f.all(), 4, "nothing reloaded")
	m = request(t, r.nc, "sourcewatch.svc.reload", map[string]string{})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.Len(t, f.all(), 6)
	f.fail.Store(true)
	m = request(t, r.nc, "sourcewatch.svc.reload", nil)
	require.Equal(t, "500", m.Header.Get(micro.ErrorCodeHeader))
	require.Contains(t, m.Header.Get(micro.ErrorHeader), "broken")

	// The service is discoverable as `nats micro ls` finds it.
	m, err = r.nc.Request("$SRV.INFO.sourcewatch", nil, 5*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	require.Equal(t, "abc1234", info.Metadata["commit"])
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
		// Each says what it takes and answers, for clients that find it
		// by discovery (it was null).
		require.NotEmpty(t, ep.Metadata["request"], ep.Name)
		require.NotEmpty(t, ep.Metadata["response"], ep.Name)
	}
	require.ElementsMatch(t, []string{"sourcewatch.svc.localize", "sourcewatch.svc.window", "sourcewatch.svc.status", "sourcewatch.svc.reload"}, subjects)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestHTTPEndpoints(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	// No relaunch: a tick between making the localizer sick and asking
	// /readyz would replace it, and the answer would be 200.
	cfg.Graphs[0].Restarts = 0
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
	base := "http://" + r.d.HTTPAddr()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)

	f.all()[0].sick.Store(true)
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "graph p: localizer unhealthy")
	f.all()[0].sick.Store(false)

	r.publish(t, "p", Event{Node: "1", State: StateInfected, TS: time.Now()}, "")
	r.publish(t, "p", `nonsense`, "")
	waitSeq(t, r.d, "p", 2)
	code, body = get(t, base+"/status")
	require.Equal(t, http.StatusOK, code)
	var st Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, 1, st.Graphs[0].WindowInfected)
	require.Equal(t, uint64(2), st.Graphs[0].Seq)

	require.Len(t, f.all(), 1, "restarts 0: the sick localizer was not replaced")
	r.d.PluginRestarted("p")
	f.all()[0].restarts.Store(2)
	require.Eventually(t, func() bool {
		return value(t, r.d.metrics.restarts.WithLabelValues("p")) == 3
	}, 10*time.Second, 5*time.Millisecond, "restarts reported by the localizer are counted")
	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`sourcewatch_events_total{graph="p",outcome="applied"} 1`,
		`sourcewatch_events_total{graph="p",outcome="deadletter"} 1`,
		`sourcewatch_deadletters_total{reason="bad_json"} 1`,
		`sourcewatch_deadletters_total{reason="too_large"} 0`,
		`sourcewatch_plugin_restarts_total{graph="p"} 3`,
		`sourcewatch_window_infected{graph="p"}`,
		// Failure counters exist at 0 before their first failure.
		`sourcewatch_inference_errors_total{graph="p"} 0`,
		`sourcewatch_alerts_total{graph="p",status="resolved"} 0`,
		`sourcewatch_alert_publish_failures_total{graph="p"} 0`,
		`sourcewatch_events_discarded_unapplied_total{graph="p"} 0`,
		`sourcewatch_snapshots_total{result="error"} 0`,
		`go_goroutines`,
	} {
		require.Contains(t, body, want)
	}
}

// TestReadyzReportsDisconnect runs the daemon against a server that goes
// away: /readyz turns 503 naming NATS.
func TestReadyzReportsDisconnect(t *testing.T) {
	s := runServer(t)
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
	base := "http://" + r.d.HTTPAddr()
	code, _ := get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)
	s.Shutdown()
	require.Eventually(t, func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "nats: not connected")
	}, 10*time.Second, 20*time.Millisecond)
}

func TestPublishEventsReplaysACascade(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	f := &factoryOf{}
	g := pathGraph(t, 6)
	r := start(t, cfg, WithGraphs(map[string]*graph.Graph{"p": g}), WithLocalizerFactory(f.factory))

	c := diffusion.Cascade{Sources: []int{2}, Infected: []int{1, 2, 3}, Times: []int{-1, 1, 0, 2, -1, -1}, Step: 2}
	t0 := time.Now().Add(-time.Minute)
	evs := CascadeEvents(g, c, t0, 10*time.Second)
	var slept []time.Duration
	sleep := func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	require.NoError(t, PublishEvents(context.Background(), r.js, EventsSubject(DefaultPrefix, "p"), evs, 2, sleep))
	require.Equal(t, []time.Duration{5 * time.Second, 5 * time.Second}, slept)
	// Publishing the same events again is deduplicated by JetStream.
	require.NoError(t, PublishEvents(context.Background(), r.js, EventsSubject(DefaultPrefix, "p"), evs, 0, nil))
	require.Equal(t, uint64(3), lastSeq(t, r.js))
	waitSeq(t, r.d, "p", 3)
	o := r.d.graphs["p"].win.observe(time.Now(), nil)
	require.Equal(t, []float64{0, 1, 1, 1, 0, 0}, o.y)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := PublishEvents(ctx, r.js, EventsSubject(DefaultPrefix, "p"), evs, 1, nil)
	require.ErrorIs(t, err, context.Canceled)
}

// runInBackground runs d for a test of a daemon that may never become
// ready: finished is closed if Run returns by itself, and stop (deferred,
// so before the test's cleanups stop its server) cancels Run and requires
// a clean return.
func runInBackground(t *testing.T, d *Daemon) (finished <-chan struct{}, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		err = d.Run(ctx)
		close(done)
	}()
	return done, func() {
		cancel()
		<-done
		require.NoError(t, err)
	}
}

// TestWaitsForNATS starts the daemon before its server: it waits, saying
// so in /readyz (without the URL's password), then becomes ready once the
// server is up.
func TestWaitsForNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	cfg := testConfig(t, "p")
	cfg.NATS.URL = fmt.Sprintf("nats://watcher:s3cret@127.0.0.1:%d", port)
	cfg.HTTP.Addr = "127.0.0.1:0"
	f := &factoryOf{}
	// The config file, as WithReload reads it.
	fileCfg := cfg
	var fileMu sync.Mutex
	readFile := func(context.Context) (Config, error) {
		fileMu.Lock()
		defer fileMu.Unlock()
		c := fileCfg
		c.Graphs = slices.Clone(c.Graphs)
		return c, nil
	}
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory), WithReload(readFile))
	require.NoError(t, err)
	done, stop := runInBackground(t, d)
	defer stop()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-d.Ready():
		t.Fatal("ready without a server")
	case <-done:
		t.Fatal("gave up without a server")
	default:
	}
	code, body := get(t, "http://"+d.HTTPAddr()+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, fmt.Sprintf("waiting for the first connection to nats://***@127.0.0.1:%d", port))
	require.NotContains(t, body, "s3cret")
	code, _ = get(t, "http://"+d.HTTPAddr()+"/status")
	require.Equal(t, http.StatusOK, code, "/status answers while NATS is awaited")
	// A reload requested while NATS is awaited is checked now and applied
	// once started; one that changes nats.url is refused, since no
	// reload changes it.
	fileMu.Lock()
	fileCfg.NATS.URL = "nats://127.0.0.1:1"
	fileMu.Unlock()
	err = d.Reload(t.Context())
	require.ErrorIs(t, err, ErrReload)
	require.ErrorContains(t, err, "nats.url changed in the file; to use it, restart the daemon")
	fileMu.Lock()
	fileCfg.NATS.URL = cfg.NATS.URL
	fileCfg.Graphs = slices.Clone(cfg.Graphs)
	fileCfg.Graphs[0].Window = 7 * time.Minute
	fileMu.Unlock()
	require.NoError(t, d.Reload(t.Context()))
	require.Len(t, f.all(), 0, "nothing built before the start")

	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	select {
	case <-d.Ready():
	case <-done:
		t.Fatal("stopped before the server came up")
	case <-time.After(20 * time.Second):
		t.Fatal("not ready after the server came up")
	}
	require.Empty(t, d.readiness())
	require.Eventually(t, func() bool { return d.graphs["p"].gc.Load().Window == 7*time.Minute }, 10*time.Second, 10*time.Millisecond,
		"the reload requested during the start applied")
	require.Eventually(t, func() bool { return len(f.all()) == 2 }, 10*time.Second, 10*time.Millisecond, "the start's localizer, then the reload's")
	rs := d.lastReload.Load()
	require.NotNil(t, rs)
	require.True(t, rs.OK, "%+v", rs)
	require.Equal(t, 1.0, value(t, d.metrics.reloadOK))
}

func TestRunWithoutFactory(t *testing.T) {
	cfg := testConfig(t, "p")
	d, err := New(cfg)
	require.NoError(t, err)
	require.ErrorIs(t, d.Run(context.Background()), ErrNoLocalizer)
}

// A server that refuses the daemon's credentials is named as the reason
// in /readyz, not only as a wait, and the password stays out of it.
func TestReadyzSaysWhyNATSRefuses(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Username: "watcher", Password: "right"})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	cfg := testConfig(t, "p")
	cfg.NATS.URL = strings.Replace(s.ClientURL(), "nats://", "nats://watcher:wr0ng@", 1)
	cfg.HTTP.Addr = "127.0.0.1:0"
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	_, stop := runInBackground(t, d)
	defer stop()
	body := readyzRefusal(t, d)
	require.Contains(t, strings.ToLower(body), "authorization violation")
	require.NotContains(t, body, "wr0ng")
}

// A preflight failure stops the start at once, naming the graph, even
// with a NATS server that is not there to wait for.
func TestPreflightFailsBeforeWaitingForNATS(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.NATS.URL = "nats://127.0.0.1:1"
	cfg.HTTP.Addr = "127.0.0.1:0"
	bad := errors.New("bundle: no such file")
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory),
		WithPreflight(func(gc GraphConfig, g *graph.Graph) error {
			require.Equal(t, "p", gc.Name)
			require.Equal(t, 4, g.N())
			return bad
		}))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(t.Context()) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, bad)
		require.ErrorContains(t, err, `graph "p": bundle: no such file`)
	case <-time.After(5 * time.Second):
		t.Fatal("the start waited instead of failing")
	}
	require.Empty(t, d.HTTPAddr(), "HTTP never came up")
}

// Every graph's preflight failure is reported at once, so an operator
// with many graphs fixes them in one go rather than one restart at a time.
func TestPreflightReportsEveryGraph(t *testing.T) {
	cfg := testConfig(t, "a", "b", "c")
	cfg.NATS.URL = "nats://127.0.0.1:1"
	d, err := New(cfg, preload(t, 4, "a", "b", "c"), WithLocalizerFactory((&factoryOf{}).factory),
		WithPreflight(func(gc GraphConfig, _ *graph.Graph) error {
			if gc.Name == "b" {
				return nil
			}
			return fmt.Errorf("bundle of %s: %w", gc.Name, forward.ErrChecksum)
		}))
	require.NoError(t, err)
	err = d.Run(t.Context())
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, `graph "a": bundle of a`)
	require.ErrorContains(t, err, `graph "c": bundle of c`)
	require.NotContains(t, err.Error(), `graph "b"`)
}

// A reload names every graph whose model the cheap checks refuse, as the
// start does, and keeps what runs.
func TestReloadReportsEveryRefusedGraph(t *testing.T) {
	cfg := testConfig(t, "a", "b", "c")
	var broken atomic.Bool
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "a", "b", "c"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return cfg, nil }),
		WithPreflight(func(gc GraphConfig, _ *graph.Graph) error {
			if broken.Load() && gc.Name != "b" {
				return fmt.Errorf("bundle of %s: %w", gc.Name, forward.ErrChecksum)
			}
			return nil
		}))
	built := len(f.all())
	broken.Store(true)
	err := r.d.Reload(t.Context())
	require.ErrorIs(t, err, ErrReload)
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, `graph "a": bundle of a`)
	require.ErrorContains(t, err, `graph "c": bundle of c`)
	require.Len(t, f.all(), built, "no localizer built for a refused reload")
}

// A reload refused while the file names another plugin_dir says that
// plugin_dir is read at start only: the refusal's own advice is to point
// plugin_dir at the right build, which the operator has just done.
func TestReloadRefusedSaysPluginDirWaitsForRestart(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.PluginDir = "/old/plugins"
	file := cfg
	file.PluginDir = "/new/plugins"
	var broken atomic.Bool
	r := start(t, cfg, preload(t, 4, "a"), WithLocalizerFactory((&factoryOf{}).factory),
		WithReload(func(context.Context) (Config, error) { return file, nil }),
		WithPreflight(func(gc GraphConfig, _ *graph.Graph) error {
			if broken.Load() {
				return fmt.Errorf("bundle of %s: %w", gc.Name, forward.ErrChecksum)
			}
			return nil
		}))
	broken.Store(true)
	err := r.d.Reload(t.Context())
	require.ErrorIs(t, err, ErrReload)
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, `plugin_dir changed in the file, "/old/plugins" -> "/new/plugins", but it is read at start only`)

	// The same directory in the file: nothing said of it.
	file.PluginDir = cfg.PluginDir
	err = r.d.Reload(t.Context())
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.NotContains(t, err.Error(), "plugin_dir")
}

// Go's profiles are served only when http.pprof asks for them.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := testConfig(t, "p")
		cfg.HTTP.Pprof = on
		r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory((&factoryOf{}).factory))
		code, body := get(t, "http://"+r.d.HTTPAddr()+"/debug/pprof/heap?debug=1")
		if !on {
			require.Equal(t, http.StatusNotFound, code)
			continue
		}
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "heap profile:")
	}
}

// A storm of localize requests on one graph is bounded: past
// maxLocalizeWaiting they are refused at once with 503, and another
// graph's request is answered meanwhile, not after the storm. Stopping
// the daemon cuts the waiting ones short.
func TestLocalizeStormIsBoundedPerGraph(t *testing.T) {
	cfg := testConfig(t, "p", "q")
	cfg.Graphs[0].MinInfected = 1000
	cfg.Graphs[1].MinInfected = 1000
	f := &factoryOf{onMake: func(_ int, l *fakeLocalizer) {
		if l.tag == "p.swb" {
			l.delay = 2 * time.Second // each p request holds the graph
		}
	}}
	r := start(t, cfg, preload(t, 5, "p", "q"), WithLocalizerFactory(f.factory))

	replies := make(chan *nats.Msg, 64)
	inbox := nats.NewInbox()
	sub, err := r.nc.ChanSubscribe(inbox, replies)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	body, err := json.Marshal(LocalizeRequest{Graph: "p", Infected: []string{"1"}})
	require.NoError(t, err)
	const extra = 4
	for range maxLocalizeWaiting + extra {
		require.NoError(t, r.nc.PublishRequest("sourcewatch.svc.localize", inbox, body))
	}
	busy := 0
	deadline := time.After(5 * time.Second)
	for busy < extra {
		select {
		case m := <-replies:
			require.Equal(t, "503", m.Header.Get(micro.ErrorCodeHeader), "only refusals come this soon")
			require.Contains(t, m.Header.Get(micro.ErrorHeader), `graph "p" has 16 localize requests waiting already; retry later`)
			busy++
		case <-deadline:
			require.FailNow(t, "no 503 for the requests past the bound", "got %d", busy)
		}
	}

	start := time.Now()
	m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "q", Infected: []string{"2"}})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.Less(t, time.Since(start), 2*time.Second, "q does not wait behind p's queue (32 s of work)")
	require.Equal(t, float64(extra), value(t, r.d.metrics.requests.WithLabelValues("p", "busy")))
	require.Equal(t, 1.0, value(t, r.d.metrics.requests.WithLabelValues("q", "ok")))

	stopped := time.Now()
	r.stop(t)
	require.Less(t, time.Since(stopped), 10*time.Second, "waiting requests are cut short at shutdown")
}

// Localize requests flooding in while the daemon stops are all answered
// or refused, none left running once Run has returned (one that came
// after the graph's Localizer closed used to spin for good).
func TestLocalizeFloodDuringStop(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	flood, err := nats.Connect(r.d.ClientURL())
	require.NoError(t, err)
	defer flood.Close()
	body, err := json.Marshal(LocalizeRequest{Graph: "p", Infected: []string{"1"}})
	require.NoError(t, err)
	inbox := nats.NewInbox()
	sub, err := flood.Subscribe(inbox, func(*nats.Msg) {})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	stop := make(chan struct{})
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if flood.PublishRequest("sourcewatch.svc.localize", inbox, body) != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	r.stop(t)
	close(stop)
	<-flooding
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<22)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "monitor.(*Daemon).localize")
	}, 5*time.Second, 50*time.Millisecond, "no localize left running after Run returned")
}

// Refusals of bad localize requests are counted in the service's stats,
// as before requests were answered on goroutines.
func TestLocalizeErrorsInServiceStats(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	for range 3 {
		m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "p", Infected: []string{"ghost"}})
		require.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	}
	m, err := r.nc.Request("$SRV.STATS.sourcewatch", nil, 10*time.Second)
	require.NoError(t, err)
	var stats micro.Stats
	require.NoError(t, json.Unmarshal(m.Data, &stats))
	for _, ep := range stats.Endpoints {
		if ep.Name == "localize" {
			require.Equal(t, 3, ep.NumErrors)
			return
		}
	}
	require.Fail(t, "no localize endpoint in the stats", "%+v", stats)
}

// A localize message published without a reply subject is not localized:
// nobody would read the answer, and a flood of them would each cost an
// inference.
func TestLocalizeWithoutReplyIsSkipped(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory))
	body, err := json.Marshal(LocalizeRequest{Graph: "p", Infected: []string{"1"}})
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, r.nc.Publish("sourcewatch.svc.localize", body))
	}
	m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "p", Infected: []string{"1"}})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.EqualValues(t, 1, f.all()[0].calls.Load(), "only the request was localized")
}

// /readyz?graph=NAME answers for one graph: the daemon's problems that
// keep every graph from working (standby, the state store, NATS) and that
// graph's own, not another graph's; 404 naming an unknown graph, 400 for
// an empty or repeated one. Two replicas of graphs p and q on a shared
// server, a is active and b stands by.
func TestReadyzForOneGraph(t *testing.T) {
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	cfgFor := func(id string) Config {
		cfg := testConfig(t, "p", "q")
		cfg.NATS.URL = s.ClientURL()
		// Long enough that a keeps its lease through the NATS outage
		// below (it gives up two thirds of a TTL after its last renewal).
		cfg.HA = HAConfig{Enabled: true, Replica: id, LeaseTTL: 30 * time.Second}
		cfg.SnapshotInterval = 50 * time.Millisecond
		for i := range cfg.Graphs {
			cfg.Graphs[i].MinInfected = 1000 // no inference here
			// No relaunch: a tick would replace the localizer made sick
			// below with a healthy one, and /readyz would recover before
			// a probe (slow under -race) sees it down.
			cfg.Graphs[i].Restarts = 0
		}
		return cfg
	}
	a := runReplica(t, cfgFor("a"), preload(t, 6, "p", "q"))
	require.Eventually(t, a.ready, 30*time.Second, 5*time.Millisecond, "the first replica becomes active")
	b := runReplica(t, cfgFor("b"), preload(t, 6, "p", "q"))
	localizerOf := func(graph string) *fakeLocalizer {
		for _, l := range a.f.all() {
			if l.tag == graph+".swb" {
				return l
			}
		}
		t.Fatalf("no localizer of graph %s", graph)
		return nil
	}

	type probe struct {
		r     *replica
		query string
		code  int
		// problems are the answer's problems, each given by its start;
		// err is what an error answer's error contains.
		problems []string
		err      string
	}
	unknown := `unknown graph: "nope" (graphs: p, q)`
	for _, step := range []struct {
		name   string
		setup  func(t *testing.T)
		probes []probe
	}{
		{name: "ready", probes: []probe{
			{r: a, query: "", code: http.StatusOK},
			{r: a, query: "?graph=p", code: http.StatusOK},
			{r: a, query: "?graph=q", code: http.StatusOK},
			{r: b, query: "", code: http.StatusServiceUnavailable, problems: []string{"standby: replica a is active"}},
			{r: b, query: "?graph=p", code: http.StatusServiceUnavailable, problems: []string{"standby: replica a is active"}},
			{r: b, query: "?graph=nope", code: http.StatusNotFound, err: unknown},
		}},
		{name: "q's plugin down", setup: func(*testing.T) { localizerOf("q").sick.Store(true) }, probes: []probe{
			{r: a, query: "", code: http.StatusServiceUnavailable, problems: []string{"graph q: localizer unhealthy"}},
			{r: a, query: "?graph=p", code: http.StatusOK},
			{r: a, query: "?graph=q", code: http.StatusServiceUnavailable, problems: []string{"graph q: localizer unhealthy"}},
		}},
		{name: "no such graph", probes: []probe{
			{r: a, query: "?graph=nope", code: http.StatusNotFound, err: unknown},
			{r: a, query: "?graph=", code: http.StatusBadRequest, err: `"graph" is missing or empty: name one of p, q`},
			{r: a, query: "?graph=p&graph=q", code: http.StatusBadRequest, err: "graph is given 2 times: name one graph"},
		}},
		{name: "the state store refuses writes", setup: func(t *testing.T) {
			localizerOf("q").sick.Store(false)
			refuseStateWrites(t, js)
			(&running{js: js}).publish(t, "p", Event{Node: "1", State: StateInfected}, "") // a window to save
		}, probes: []probe{
			{r: a, query: "?graph=p", code: http.StatusServiceUnavailable, problems: []string{"snapshots: the last write failed: "}},
			{r: a, query: "?graph=q", code: http.StatusServiceUnavailable, problems: []string{"snapshots: the last write failed: "}},
		}},
		{name: "nats gone", setup: func(*testing.T) { s.Shutdown() }, probes: []probe{
			{r: a, query: "?graph=p", code: http.StatusServiceUnavailable, problems: []string{"nats: not connected", "snapshots: the last write failed: "}},
			{r: b, query: "?graph=q", code: http.StatusServiceUnavailable, problems: []string{"standby: replica a is active (as last seen)", "nats: not connected"}},
			{r: a, query: "?graph=nope", code: http.StatusNotFound, err: unknown},
		}},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.setup != nil {
				step.setup(t)
			}
			for _, p := range step.probes {
				var (
					code int
					body string
					got  struct {
						Ready    bool     `json:"ready"`
						Graph    string   `json:"graph"`
						Problems []string `json:"problems"`
						Error    string   `json:"error"`
					}
				)
				matches := func() bool {
					code, body = get(t, "http://"+p.r.d.HTTPAddr()+"/readyz"+p.query)
					got.Problems = nil
					if code != p.code || json.Unmarshal([]byte(body), &got) != nil || len(got.Problems) != len(p.problems) {
						return false
					}
					for i, want := range p.problems {
						if !strings.HasPrefix(got.Problems[i], want) {
							return false
						}
					}
					return true
				}
				// A setup takes effect within a snapshot interval or a
				// reconnect attempt.
				// Polled here, not in require.Eventually's goroutine, so
				// a failure shows the last answer (its message arguments
				// are read before the first probe).
				for deadline := time.Now().Add(10 * time.Second); !matches(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s%s: no matching answer in 10s; the last: %d %s", p.r.d.cfg.HA.Replica, p.query, code, body)
					}
				}
				require.Equal(t, p.code == http.StatusOK, got.Ready, body)
				require.Contains(t, got.Error, p.err, body)
				if p.err != "" {
					continue
				}
				require.Empty(t, got.Error, body)
				if graph, ok := strings.CutPrefix(p.query, "?graph="); ok {
					require.Equal(t, graph, got.Graph, "the answer names its graph")
				} else {
					require.Empty(t, got.Graph, "a daemon-wide answer names no graph")
				}
			}
		})
	}
}

// A dead plugin whose relaunch fails (a rebuilt binary, a missing file)
// keeps the graph unready, and /readyz says why, until a relaunch works.
func TestReadyzSaysWhyARelaunchFailed(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	cfg.Graphs[0].Restarts = 1000
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory(f.factory))
	base := "http://" + r.d.HTTPAddr()

	f.fail.Store(true)
	f.all()[0].sick.Store(true)
	require.Eventually(t, func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable &&
			strings.Contains(body, "graph p: localizer unhealthy; relaunching it failed: ") && strings.Contains(body, "broken")
	}, 10*time.Second, 10*time.Millisecond)

	f.fail.Store(false)
	require.Eventually(t, func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	require.Nil(t, r.d.graphs["p"].relaunchErr.Load())
}

// An id the graph lacks is ErrUnknownNode, which is graph.ErrUnknownNode:
// a Go caller tests for one sentinel whichever package it came from.
func TestLocalizeUnknownIDIsTheGraphPackagesSentinel(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	_, err := r.d.Localize(t.Context(), LocalizeRequest{Graph: "p", Infected: []string{"2", "nope"}})
	require.ErrorIs(t, err, graph.ErrUnknownNode)
	require.ErrorIs(t, err, ErrUnknownNode)
	require.ErrorContains(t, err, `graph "p" has no node "nope"`)
}

// A localizer factory's error that names its graph by config key
// (BundleLocalizers' graphs[NAME]...) is not prefixed with the graph's
// name again; one that does not name it is.
func TestStartNamesTheGraphOfAFailedLocalizerOnce(t *testing.T) {
	for _, tc := range []struct{ factoryErr, want string }{
		{"graphs[p].bundle: open p.swb: no such file", "localizer: graphs[p].bundle: open p.swb: no such file"},
		{"bundle p.swb: broken", `graph "p": localizer: bundle p.swb: broken`},
	} {
		t.Run(tc.factoryErr, func(t *testing.T) {
			cfg := testConfig(t, "p")
			d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory(func(context.Context, GraphConfig, *graph.Graph) (Localizer, error) {
				return nil, errors.New(tc.factoryErr)
			}))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			require.EqualError(t, d.Run(ctx), tc.want)
		})
	}
}

// The endpoints' metadata, which a client in another language reads by
// discovery, names every field of each answer (and of a source in it):
// the localize answer left out chance and expected_sources.
func TestEndpointMetadataNamesEveryAnswerField(t *testing.T) {
	fields := func(v any) []string {
		var names []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names = append(names, name)
			}
		}
		return names
	}
	for endpoint, answers := range map[string][]any{
		"localize": {LocalizeResponse{}, alerts.Source{}},
		"window":   {WindowResponse{}},
		"status":   {Status{}},
	} {
		meta := endpointMetadata[endpoint]["response"]
		words := strings.FieldsFunc(meta, func(r rune) bool {
			return !(r == '_' || r >= 'a' && r <= 'z')
		})
		for _, a := range answers {
			for _, f := range fields(a) {
				require.Contains(t, words, f, "svc.%s metadata %q lacks %s", endpoint, meta, f)
			}
		}
	}
}
