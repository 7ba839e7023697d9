package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// fakeLocalizer stands in for SL-VAE in this package's unit tests: it
// calls script with y and records how many calls overlap.
type fakeLocalizer struct {
	script func(y []float64) Inference
	// version tells bundles at one path apart (one retrained in place).
	version string
	delay   time.Duration
	calls   atomic.Int32
	active  atomic.Int32
	maxConc atomic.Int32
	closed  atomic.Bool
	sick    atomic.Bool
	// failing makes every call fail while the process stays healthy, as
	// a plugin that panics in each call does.
	failing atomic.Bool
	// restarts is what Restarts reports, as a relaunching adapter would.
	restarts atomic.Int32
	// dieOnCall makes that call fail as a crashed plugin would: the
	// localizer turns unhealthy and returns an error.
	dieOnCall int32
	// dieOnEveryCall makes every call fail so, as a plugin that exits in
	// each VJP does (its supervisor brings it back between calls).
	dieOnEveryCall atomic.Bool
	// dieWith, when set, is the error of a call that dies (what a
	// supervisor that may not relaunch the plugin returns).
	dieWith func() error
	tag     string
	// onClose, when set, is called by Close.
	onClose func()
	// budget is what relaunchBudget reports, as the bundle localizer's
	// graph's relaunch budget (nil: the daemon's own).
	budget *forward.RelaunchBudget
	// unverified is what Unverified reports, as the bundle localizer of
	// a plugin launched with no checksum check does.
	unverified bool
	// overlap counts calls made while another was running on the same
	// localizer; the daemon promises none.
	overlap atomic.Int32
}

func (f *fakeLocalizer) Localize(ctx context.Context, y []float64) (Inference, error) {
	if f.closed.Load() {
		return Inference{}, fmt.Errorf("fake %s: closed", f.tag)
	}
	n := f.active.Add(1)
	defer f.active.Add(-1)
	if n > 1 {
		f.overlap.Add(1)
	}
	for {
		m := f.maxConc.Load()
		if n <= m || f.maxConc.CompareAndSwap(m, n) {
			break
		}
	}
	if f.failing.Load() {
		f.calls.Add(1)
		return Inference{}, fmt.Errorf("fake %s: plugin panic: index out of range", f.tag)
	}
	if c := f.calls.Add(1); c == f.dieOnCall || f.dieOnEveryCall.Load() {
		f.sick.Store(true)
		if f.dieWith != nil {
			return Inference{}, f.dieWith()
		}
		return Inference{}, fmt.Errorf("fake %s: plugin process exited", f.tag)
	}
	if f.delay > 0 {
		if err := SleepContext(ctx, f.delay); err != nil {
			return Inference{}, err
		}
	}
	return f.script(y), nil
}

func (f *fakeLocalizer) Close() error {
	if f.onClose != nil {
		f.onClose()
	}
	f.closed.Store(true)
	return nil
}
func (f *fakeLocalizer) Model() ModelInfo {
	return ModelInfo{Bundle: f.tag + f.version, Forward: "fake", ForwardVersion: "1"}
}
func (f *fakeLocalizer) Healthy() bool    { return !f.sick.Load() }
func (f *fakeLocalizer) Unverified() bool { return f.unverified }

func (f *fakeLocalizer) relaunchBudget() *forward.RelaunchBudget { return f.budget }
func (f *fakeLocalizer) Restarts() int                           { return int(f.restarts.Load()) }

// infectedAreSources is a script that calls the lowest-indexed infected
// node the source, with scores falling by index.
func infectedAreSources(tag string) func([]float64) Inference {
	return func(y []float64) Inference {
		inf := Inference{Scores: make([]float64, len(y)), Probability: make([]float64, len(y)), Threshold: 0.5,
			Model: ModelInfo{Bundle: tag, Forward: "fake", ForwardVersion: "1"}}
		for v := range y {
			if y[v] > 0 {
				inf.Sources = []int{v}
				inf.Scores[v], inf.Probability[v] = 0.9, 0.8
				break
			}
		}
		return inf
	}
}

// factoryOf hands out fake localizers and remembers them.
type factoryOf struct {
	mu     sync.Mutex
	made   []*fakeLocalizer
	script func(gc GraphConfig) func([]float64) Inference
	delay  time.Duration
	fail   atomic.Bool
	// onMake adjusts the i-th localizer made.
	onMake func(i int, l *fakeLocalizer)
}

func (f *factoryOf) factory(_ context.Context, gc GraphConfig, _ *graph.Graph) (Localizer, error) {
	if f.fail.Load() {
		return nil, fmt.Errorf("bundle %s: broken", gc.Bundle)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	script := infectedAreSources(gc.Bundle)
	if f.script != nil {
		script = f.script(gc)
	}
	l := &fakeLocalizer{script: script, delay: f.delay, tag: gc.Bundle}
	if f.onMake != nil {
		f.onMake(len(f.made), l)
	}
	f.made = append(f.made, l)
	return l, nil
}

func (f *factoryOf) all() []*fakeLocalizer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeLocalizer(nil), f.made...)
}

// testConfig is a daemon on a fresh data dir with an embedded server on a
// free port, HTTP on a free port, fast scheduling and no periodic
// snapshots.
func testConfig(t *testing.T, names ...string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.SnapshotInterval = time.Hour
	cfg.Events.MaxAge = 0
	for _, n := range names {
		gc := DefaultGraphConfig(n)
		gc.Edges, gc.Bundle = n+".edges", n+".swb"
		gc.Interval = 20 * time.Millisecond
		cfg.Graphs = append(cfg.Graphs, gc)
	}
	return cfg
}

type running struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
	nc     *nats.Conn
	js     jetstream.JetStream
}

// start runs a daemon until the test ends (or stop is called) and
// connects a client to it.
func start(t *testing.T, cfg Config, opts ...Option) *running {
	t.Helper()
	d, err := New(cfg, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-r.done:
		t.Fatalf("daemon stopped during start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon not ready")
	}
	r.nc, err = nats.Connect(d.ClientURL())
	require.NoError(t, err)
	r.js, err = jetstream.New(r.nc)
	require.NoError(t, err)
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	if r.nc != nil {
		r.nc.Close()
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not stop")
	}
}

func (r *running) publish(t *testing.T, graphName string, body any, msgID string) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		data, err = json.Marshal(b)
		require.NoError(t, err)
	}
	msg := nats.NewMsg(EventsSubject(DefaultPrefix, graphName))
	msg.Data = data
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	_, err := r.js.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
}

// waitSeq waits until graph's window has applied stream sequence seq.
func waitSeq(t *testing.T, d *Daemon, graphName string, seq uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, _, s := d.graphs[graphName].win.counts()
		return s >= seq
	}, 20*time.Second, 5*time.Millisecond, "graph %s never reached seq %d", graphName, seq)
}

func lastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), EventsStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// runServer starts a standalone JetStream server, as a cluster the daemon
// connects to by URL would be.
func runServer(t testing.TB) *server.Server {
	t.Helper()
	return runServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
}

// runServerWith starts a server of opts (auth, TLS, ...) until the test
// ends.
func runServerWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func connectJS(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// newKV is a bucket (History 1) on a server of its own.
func newKV(t *testing.T, bucket string) jetstream.KeyValue {
	t.Helper()
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket, History: 1})
	require.NoError(t, err)
	return kv
}

// refuseStateWrites puts a sealed stream in the state bucket's place,
// which refuses every write, as a full store does (a bucket deleted
// outright is made anew by the next write).
func refuseStateWrites(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, js.DeleteKeyValue(ctx, StateBucket))
	cfg := jetstream.StreamConfig{Name: "KV_" + StateBucket, Subjects: []string{"$KV." + StateBucket + ".>"}, MaxMsgsPerSubject: 1, AllowDirect: true}
	_, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	cfg.Sealed = true
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}
