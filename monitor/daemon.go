package monitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// Version is the daemon's version, reported by the micro service.
const Version = "0.1.0"

// Sentinel errors of the daemon.
var (
	// ErrNoLocalizer is returned by Run without a LocalizerFactory.
	ErrNoLocalizer = errors.New("no localizer factory")
	// ErrUnknownGraph is returned for a graph name no config entry has.
	ErrUnknownGraph = errors.New("unknown graph")
	// ErrReload is wrapped by reload failures; the old setup stays.
	ErrReload = errors.New("reload failed")
	// ErrBadInference is returned when a Localizer's result has the wrong
	// shape.
	ErrBadInference = errors.New("bad inference result")
	// ErrRunTwice is returned by a second Run of one Daemon: its state
	// (windows, consumers, the embedded server) is built once; build a
	// new Daemon to run again.
	ErrRunTwice = errors.New("daemon already run")
)

// Option configures a Daemon.
type Option func(*Daemon)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(d *Daemon) { d.log = l } }

// WithClock sets the clock used for event-time checks, windows and alerts
// (default time.Now).
func WithClock(now func() time.Time) Option { return func(d *Daemon) { d.now = now } }

// WithCommit names the source commit the daemon was built from, for
// svc.status and /status (commit) and the micro service's metadata: two
// builds of one version are then told apart from outside.
func WithCommit(commit string) Option { return func(d *Daemon) { d.commit = commit } }

// WithLocalizerFactory sets how each graph's Localizer is built.
func WithLocalizerFactory(f LocalizerFactory) Option { return func(d *Daemon) { d.factory = f } }

// WithGraphs supplies already loaded graphs by name, so Run does not read
// their edge files.
func WithGraphs(gs map[string]*graph.Graph) Option {
	return func(d *Daemon) {
		for k, g := range gs {
			d.preloaded[k] = g
		}
	}
}

// WithPreflight sets a cheap check of each graph's model that Run makes
// with the edge files, before HTTP, NATS or the lease: a missing or
// damaged bundle then stops the start at once instead of after a wait for
// NATS or a standby's wait for the lease. The factory still loads and
// checks everything.
func WithPreflight(f func(GraphConfig, *graph.Graph) error) Option {
	return func(d *Daemon) { d.preflight = f }
}

// WithReload sets where Reload reads the new configuration from (the
// config file, in serve). Without it Reload rebuilds the localizers from
// the current configuration, which re-reads bundles and relaunches
// plugins.
func WithReload(f func(ctx context.Context) (Config, error)) Option {
	return func(d *Daemon) { d.reloadCfg = f }
}

// WithoutRetiringUnconfigured leaves alone what the state holds for graphs
// this daemon's config lacks: their open incidents are not resolved, nor
// their snapshots, through points and consumers deleted. For a process
// that shares a NATS account without owning it (the demo on an external
// server), whose config names only its own graphs.
func WithoutRetiringUnconfigured() Option {
	return func(d *Daemon) { d.keepUnconfigured = true }
}

// WithAlertNote adds note to the note of every alert the daemon publishes,
// firing and resolved alike, after any note of the alert's own: the demo
// marks its alerts as inferences on simulated events with it, so a reader
// of the alert subjects can tell them from a deployment's.
func WithAlertNote(note string) Option {
	return func(d *Daemon) { d.alertNote = note }
}

// Daemon is the streaming monitor. Create it with New, run it with Run.
type Daemon struct {
	// cfg is the configuration Run started with; it does not change, so
	// every goroutine may read it. current is what the last reload put in
	// effect: the per-graph settings live in each graphRT.
	cfg     Config
	current atomic.Pointer[Config]
	// checked is the config file as a standby last checked it good
	// (checkOnStandby): what takeover applies when the file no longer
	// loads.
	checked atomic.Pointer[Config]
	// lastReload is the outcome of the last Reload (nil before one).
	lastReload atomic.Pointer[ReloadStatus]
	log        *zap.Logger
	now        func() time.Time
	factory    LocalizerFactory
	reloadCfg  func(ctx context.Context) (Config, error)
	// keepUnconfigured: see WithoutRetiringUnconfigured.
	keepUnconfigured bool
	// alertNote: see WithAlertNote.
	alertNote string
	preflight func(GraphConfig, *graph.Graph) error
	commit    string // WithCommit
	preloaded map[string]*graph.Graph
	metrics   *metrics

	ready     chan struct{}
	clientURL atomic.Value // string
	httpAddr  atomic.Value // string
	httpConns atomic.Pointer[connLimit]
	bound     atomic.Bool // every consumer is consuming
	unrouted  unroutedRT
	started   atomic.Bool
	reloadMu  sync.Mutex
	// reloadAfterStart is set, under reloadMu, by a reload requested
	// before the start was done (the file checked then); Run reloads once
	// started, so a change signalled during a slow start or a wait for
	// NATS is applied, not dropped.
	reloadAfterStart bool
	// saveMu is held across marshalling the tracker and writing it to KV,
	// so saves land in the order their states were taken.
	saveMu sync.Mutex

	// Set up by Run.
	srv     *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	kv      jetstream.KeyValue
	tracker *alerts.Tracker
	pub     *alerts.Publisher
	graphs  map[string]*graphRT
	order   []*graphRT
	jobs    chan job
	limiter *logLimiter

	// crash makes shutdown skip the final snapshot and the drain, as a
	// kill -9 would; tests set it.
	crash atomic.Bool
	// standby says, while this replica waits for the HA lease, which
	// replica is active.
	standby atomic.Pointer[string]
	// waiting says what the start waits for (a first NATS connection);
	// lastConnErr why the last attempt to connect failed, if it did.
	waiting     atomic.Pointer[string]
	lastConnErr atomic.Pointer[string]
	// requests are the service requests answered on goroutines of their
	// own (localize); Run waits for them at shutdown. reqMu guards adding
	// to it against reqStopping, so none is added once Run waits.
	requests    sync.WaitGroup
	reqMu       sync.Mutex
	reqStopping bool
	// snapshotErr is the last periodic snapshot's error, nil once one
	// succeeds: /readyz reports it.
	snapshotErr atomic.Pointer[string]
	// trackerErr is the error of the alert-state save flush makes before
	// publishing, nil once any save works: no alert is published while it
	// fails.
	trackerErr atomic.Pointer[string]

	// ingestCtx is what the consume callbacks check: shutdown cancels it
	// (stopIngest) once it stops waiting for them, so a callback stuck in
	// dead-letter retries gives up instead of outliving Run.
	ingestCtx  context.Context
	stopIngest context.CancelFunc
	// held is the HA lease while this replica holds it (nil without HA):
	// every write checks it first (fenced).
	held atomic.Pointer[lease]
	// drainTimeout and abandonTimeout bound shutdown's wait for the
	// consumers (see stopConsumers); tests shorten them.
	drainTimeout, abandonTimeout time.Duration
	// publishAttempts bounds the tries of a new alert's first publish;
	// after them it stays pending and every scheduler tick tries once
	// more. Tests lower it.
	publishAttempts int
}

// graphRT is one graph at run time.
type graphRT struct {
	name string
	g    *graph.Graph
	win  *window
	gc   atomic.Pointer[GraphConfig]
	loc  atomic.Pointer[locHolder]

	inflight atomic.Bool
	// checkConsumer is set by a consume error that can mean the consumer
	// is gone (consumerMaybeGone); the next tick asks the server.
	checkConsumer atomic.Bool
	relaunches    atomic.Int64 // relaunches since the last successful inference, reload, or tick that found the plugin up (and diedInCall unset)
	// diedInCall is set when an inference found the plugin dead after it
	// failed, and cleared by one that works or a reload.
	diedInCall atomic.Bool
	// localizeWaiting counts the graph's svc.localize requests waiting or
	// running (at most maxLocalizeWaiting); localizeTurn lets one of them
	// at a time wait for inferMu, so a scheduled inference waits behind
	// one request at most, not behind all of them.
	localizeWaiting atomic.Int32
	localizeTurn    chan struct{}
	// rebinds are the times the graph's consumer was rebound within the
	// last minute; scheduler loop only.
	rebinds []time.Time
	inferMu ctxMutex // one Localize at a time per graph
	// inferred is the observation's infected set at the last successful
	// inference (y_v > 0), nil until the first one of this process.
	inferred  atomic.Pointer[[]bool]
	lastAlert atomic.Pointer[alerts.Alert]
	lastErr   atomic.Pointer[string]
	// relaunchErr is why the last relaunch of a dead plugin failed (a
	// rebuilt binary, a missing file), until a localizer is in place
	// again: /readyz names it beside "localizer unhealthy".
	relaunchErr atomic.Pointer[string]
	// failing is set by a failed inference and cleared by one that works
	// or by a tick with nothing to infer (the outbreak over): /readyz
	// reports it, while lastErr stays for /status.
	failing atomic.Bool
	// budgetSpent is set while the plugin is down with its relaunches
	// used up, so the tick that finds it up again says so.
	budgetSpent atomic.Bool
	snapshotSeq uint64 // seq of the last snapshot written; snapshot loop only
	// through is a stream sequence through which the window holds every
	// event of its subject, other graphs' events included in the count:
	// a graph without events of its own keeps up with the stream too
	// (saved as through.<graph>; see saveThrough). throughSaved is the
	// last value written, snapshot loop only.
	through      atomic.Uint64
	throughSaved uint64
	// budget bounds the graph's relaunches when its localizer has no
	// budget of its own to share (relaunchBudgeter).
	budget *forward.RelaunchBudget
	// streamCreated is when the events stream the window's seq counts in
	// was made (unix ns; 0 unknown), and streamRenewed tells the
	// snapshot loop that it was made anew, so it drops the positions
	// saved in the old one's numbers.
	streamCreated atomic.Int64
	streamRenewed atomic.Bool
	// resumed is set when restore found a snapshot or through point of an
	// earlier run: the window then continues one, and events the stream
	// discarded since are a gap even if it had applied none of its own.
	resumed atomic.Bool

	cons atomic.Pointer[consHandle]
	// replayTo is the stream sequence of the graph's last event when its
	// consumer was bound after a restart or takeover, and replayFrom when
	// that was: until the window has applied replayTo (or replayLimit has
	// passed), the scheduler makes no alert, since the window still lacks
	// the events queued while no replica ran (a live incident would
	// resolve, then fire again as a new one). 0: not replaying.
	replayTo   atomic.Uint64
	replayFrom atomic.Int64 // unix nanoseconds
	// pendingAck is the newest applied message not yet acknowledged and
	// sinceAck how many messages it stands for; only the consume
	// callback touches them until the consumer has stopped.
	pendingAck jetstream.Msg
	sinceAck   int
	// scratch is the consume callback's decode buffer, reused per message.
	scratch  []decoded
	outcomes map[outcome]counter
	// backlog and lastApplied are the graph's series of
	// sourcewatch_events_backlog and _last_applied_timestamp_seconds,
	// set as each message is applied.
	backlog, lastApplied prometheus.Gauge
}

type counter interface{ Inc() }

// newGraphRT is the runtime of graph gc (loaded as g) with its metric
// series.
func (d *Daemon) newGraphRT(gc GraphConfig, g *graph.Graph) *graphRT {
	gr := &graphRT{name: gc.Name, g: g, win: newWindow(g, gc.Window, gc.Decay), outcomes: map[outcome]counter{},
		localizeTurn: make(chan struct{}, 1),
		budget:       forward.NewRelaunchBudget(relaunchesPerMinute, time.Minute, func() time.Time { return d.now() })}
	gr.gc.Store(&gc)
	for _, o := range []outcome{outApplied, outRefreshed, outUnchanged, outStale, outDuplicate, "deadletter"} {
		gr.outcomes[o] = d.metrics.events.WithLabelValues(gc.Name, string(o))
	}
	gr.backlog = d.metrics.backlog.WithLabelValues(gc.Name)
	gr.lastApplied = d.metrics.lastApplied.WithLabelValues(gc.Name)
	return gr
}

// localizer is h's Localizer (nil for a nil h).
func (h *locHolder) localizer() Localizer {
	if h == nil {
		return nil
	}
	return h.l
}

// locHolder guards a Localizer: inferences hold the read lock, Close after
// a reload swap takes the write lock, so it waits for them.
type locHolder struct {
	mu     sync.RWMutex
	l      Localizer
	closed bool
	// restarts is the Localizer's restart count already added to the
	// metric.
	restarts atomic.Int64
}

// countRestarts adds the plugin relaunches a Localizer reports through
// the optional Restarts() int to sourcewatch_plugin_restarts_total.
func (d *Daemon) countRestarts(gr *graphRT) {
	h := gr.loc.Load()
	rc, ok := h.l.(restartCounter)
	if !ok {
		return
	}
	n := int64(rc.Restarts())
	if old := h.restarts.Swap(n); n > old {
		d.metrics.restarts.WithLabelValues(gr.name).Add(float64(n - old))
	}
}

// errLocalizerClosed is a localize that came after the daemon closed the
// graph's Localizer for good (a stop).
var errLocalizerClosed = errors.New("localizer closed: the daemon is stopping")

func (h *locHolder) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.l.Close()
}

type jobKind int

const (
	jobInfer jobKind = iota
	jobResolve
	jobRelaunch
	// jobFlush retries the graph's pending alerts.
	jobFlush
)

type job struct {
	gr   *graphRT
	kind jobKind
}

// New returns a Daemon for cfg. It validates cfg but touches nothing
// until Run.
func New(cfg Config, opts ...Option) (*Daemon, error) {
	d := &Daemon{
		cfg:       cfg,
		log:       zap.NewNop(),
		now:       time.Now,
		preloaded: map[string]*graph.Graph{},
		ready:     make(chan struct{}),
		metrics:   newMetrics(),

		drainTimeout:    drainTimeout,
		abandonTimeout:  abandonTimeout,
		publishAttempts: 5,
	}
	d.ingestCtx, d.stopIngest = context.WithCancel(context.Background())
	for _, o := range opts {
		o(d)
	}
	if err := d.validate(cfg); err != nil {
		d.stopIngest()
		return nil, err
	}
	d.clientURL.Store("")
	d.httpAddr.Store("")
	d.limiter = newLogLimiter(DefaultInterval, d.now, d.log)
	d.metrics.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sourcewatch_ready",
			Help: "1 when /readyz answers ready, 0 otherwise (starting, standing by, or a problem /readyz names).",
		}, func() float64 { return boolGauge(len(d.readiness()) == 0) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sourcewatch_active",
			Help: "1 when this replica has started and does the work (holds the HA lease, or runs without HA), 0 while starting or standing by.",
		}, func() float64 { return boolGauge(d.active()) }))
	return d, nil
}

// validate checks cfg as Config.Validate does, less what the options
// make the daemon's own business no longer: the edge file of a graph
// given WithGraphs, and the bundle once a factory is set, since only the
// factory reads it (BundleLocalizers and BundlePreflight refuse an empty
// one themselves).
func (d *Daemon) validate(cfg Config) error {
	return cfg.validate(func(name string) bool { return d.preloaded[name] != nil }, d.factory == nil)
}

// active reports whether this replica has started and is not standing by.
func (d *Daemon) active() bool {
	select {
	case <-d.ready:
		return d.standby.Load() == nil
	default:
		return false
	}
}

// Ready is closed once Run is consuming and serving.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// ClientURL is the NATS URL clients can use: the embedded server's
// listener (empty without one) or the connected server. Valid after Ready.
func (d *Daemon) ClientURL() string { return d.clientURL.Load().(string) }

// HTTPAddr is the bound HTTP address (useful with port 0). Valid after
// Ready.
func (d *Daemon) HTTPAddr() string { return d.httpAddr.Load().(string) }

// Config returns the configuration in effect (after reloads).
func (d *Daemon) Config() Config {
	if c := d.current.Load(); c != nil {
		return *c
	}
	return d.cfg
}

// PluginRestarted counts a relaunch of graph's forward plugin in
// sourcewatch_plugin_restarts_total: the daemon calls it when it builds a
// new Localizer for a failed one, and a Localizer without Restarts() may
// call it for relaunches of its own.
func (d *Daemon) PluginRestarted(graph string) {
	d.metrics.restarts.WithLabelValues(graph).Inc()
}

// Run connects (or starts the embedded server), restores state, consumes
// events and runs inference until ctx ends, then shuts down gracefully:
// stop consuming, cancel in-flight inference, write a final snapshot,
// drain NATS, close localizers and stop the embedded server. It returns
// nil after a clean shutdown.
func (d *Daemon) Run(ctx context.Context) (err error) {
	if d.factory == nil {
		return ErrNoLocalizer
	}
	if !d.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	// Last of all, after the drain and the final snapshot, whose failures
	// the limiter may hold back too.
	defer d.limiter.flush(true)
	if d.cfg.HA.Enabled && d.cfg.HA.Replica == "" {
		d.cfg.HA.Replica = defaultReplica()
	}
	cfg := d.cfg
	// Whatever way Run returns, no consume callback goes on working.
	cleanup := []func(){d.stopIngest}
	// stopped is the last line of a clean stop, logged once the cleanup,
	// plugins and embedded server included, is done.
	var stopped func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		if stopped != nil {
			stopped()
		}
	}()

	// Graphs first: a bad edge file should fail before anything starts,
	// and every graph's problem is reported at once, so a fleet of graphs
	// is not fixed one restart at a time.
	d.graphs = map[string]*graphRT{}
	var startErrs []error
	for i, gc := range cfg.Graphs {
		g := d.preloaded[gc.Name]
		if g == nil {
			var err error
			g, err = graph.Load(gc.Edges, graph.Directed(gc.Directed))
			if err != nil {
				startErrs = append(startErrs, fmt.Errorf("graphs[%d] (%s): %w%s", i, gc.Name, err, relativePathHint(gc.Edges, err)))
				continue
			}
		}
		if d.preflight != nil {
			if err := d.preflight(gc, g); err != nil {
				startErrs = append(startErrs, fmt.Errorf("graph %q: %w", gc.Name, err))
				continue
			}
		}
		if len(startErrs) > 0 {
			continue
		}
		gr := d.newGraphRT(gc, g)
		// Series a graph has from the start, so a dashboard's rate() of
		// a failure sees its first one instead of a series appearing at 1.
		d.metrics.infected.WithLabelValues(gc.Name)
		d.metrics.inferErrors.WithLabelValues(gc.Name)
		d.metrics.inference.WithLabelValues(gc.Name)
		d.metrics.restarts.WithLabelValues(gc.Name)
		d.metrics.pending.WithLabelValues(gc.Name)
		d.metrics.pubFailed.WithLabelValues(gc.Name)
		d.metrics.gap.WithLabelValues(gc.Name)
		for _, res := range []string{"ok", "error", "busy"} {
			d.metrics.requests.WithLabelValues(gc.Name, res)
		}
		for _, st := range []alerts.Status{alerts.Firing, alerts.Updated, alerts.Resolved} {
			d.metrics.alerts.WithLabelValues(gc.Name, string(st))
		}
		d.graphs[gc.Name] = gr
		d.order = append(d.order, gr)
	}
	if err := errors.Join(startErrs...); err != nil {
		return err
	}

	// HTTP comes up before NATS and the lease, so /readyz says what the
	// daemon waits for: a NATS server not reachable yet, or (a standby)
	// which replica is active. The tracker is there for /status from the
	// start; the snapshot restore fills it later.
	d.tracker = alerts.NewTracker(d.now)
	// The data_dir lock first: a second daemon on the same config is told
	// that, not that the HTTP port is taken.
	if cfg.NATS.URL == "" {
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		cleanup = append(cleanup, unlock)
	}
	var httpSrv *http.Server
	httpDone := make(chan struct{})
	if cfg.HTTP.Addr != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Addr)
		if err != nil {
			return fmt.Errorf("http.addr: %w (another process on it? set http.addr, or SOURCEWATCH_HTTP_ADDR; \"\" turns HTTP off)", err)
		}
		d.httpAddr.Store(ln.Addr().String())
		limited := newConnLimit(ln, maxHTTPConns)
		d.httpConns.Store(limited)
		httpSrv = &http.Server{Handler: d.handler(), ConnState: limited.connState,
			// Without these, idle keep-alive connections are never
			// closed: local clients could hold every file descriptor,
			// and the embedded JetStream store fails its writes for good
			// once it cannot open a file. The write timeout leaves room
			// for pprof's 30 s profile.
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 2 * time.Minute, IdleTimeout: 90 * time.Second,
			// net/http's own errors (accept failing on a process out of
			// file descriptors, once a second while it lasts) go through
			// the logger, rate-limited, not as plain lines on stderr
			// among JSON ones.
			ErrorLog: log.New(httpErrorLog{d.limiter}, "", 0)}
		go func() {
			defer close(httpDone)
			if err := httpSrv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("http server", zap.Error(err))
			}
		}()
		cleanup = append(cleanup, func() {
			shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = httpSrv.Shutdown(shCtx)
			cancel()
			<-httpDone
		})
	} else {
		close(httpDone)
	}

	if cfg.NATS.URL == "" {
		s, err := startEmbedded(cfg, &embeddedLog{z: d.log.Named("nats-server"), limit: d.limiter})
		if err != nil {
			return err
		}
		d.srv = s
		cleanup = append(cleanup, func() { s.Shutdown(); s.WaitForShutdown() })
		if l, _ := parseListen(cfg.NATS.Listen); !l.off {
			d.clientURL.Store(s.ClientURL())
		}
	}
	nc, err := connect(cfg, d.srv, d.log, func() {}, func(err error) {
		msg := redactedError{err, cfg.NATS.URL}.Error()
		d.lastConnErr.Store(&msg)
	}, func(err error) {
		// A publish the account may not make fails only by its timeout
		// (an alert "not published ... context deadline exceeded"): this
		// line names the subject and the reason.
		d.limiter.warn("nats_async."+asyncErrKind(err), "error from the NATS server", zap.Error(err))
	})
	if err != nil {
		return err
	}
	d.nc = nc
	cleanup = append(cleanup, nc.Close)
	if cfg.NATS.URL != "" {
		d.clientURL.Store(cfg.NATS.URL)
		// A daemon started before its cluster waits for it, as it would
		// ride out a later outage, instead of failing its setup.
		if err := d.waitConnected(ctx, nc, cfg.NATS.URL); err != nil {
			return nil
		}
	}
	if mp := nc.MaxPayload(); mp > 0 && int64(cfg.MaxEventBytes) >= mp {
		d.log.Warn("max_event_bytes is not below the NATS server's max_payload: a message over max_payload is refused at publish and never reaches the dead-letter stream; raise the server's max_payload or lower max_event_bytes",
			zap.Int("max_event_bytes", cfg.MaxEventBytes), zap.Int64("max_payload", mp))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNATS, err)
	}
	d.js = js
	setupCtx, cancelSetup := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSetup()
	// Before anything is written: the streams' limits are the running
	// daemon's to keep.
	if err := d.checkNoOtherDaemon(setupCtx); err != nil {
		return err
	}
	d.stream, d.kv, err = ensureJetStream(setupCtx, js, cfg, d.log)
	if err != nil {
		return err
	}
	d.kv = fencedKV{KeyValue: d.kv, d: d}
	if err := ensureAlertStream(setupCtx, js, cfg, d.log); err != nil {
		return err
	}
	d.pub = alerts.NewPublisher(js, cfg.Subjects.Prefix)

	var held *lease
	lostLease := make(chan error, 1)
	started := false // whether the start got as far as ready
	if cfg.HA.Enabled {
		l, err := d.acquireLease(ctx)
		if err != nil {
			if ctx.Err() != nil {
				d.log.Info("stopped while standing by")
				return nil
			}
			return err
		}
		held = l
		d.held.Store(l)
		d.log.Info("active: holding the lease", zap.String("replica", l.id))
		l.startKeeping(context.WithoutCancel(ctx), lostLease)
		cleanup = append(cleanup, func() {
			l.stopKeeping()
			if started {
				return // released after the final snapshot, or lost
			}
			// A takeover that fails (a bundle that no longer loads, say)
			// gives the lease up at once rather than holding every other
			// replica off for a TTL; it wrote nothing another must restore.
			relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.release(relCtx); err != nil {
				d.log.Warn("releasing the lease after a failed start", zap.Error(err))
			} else {
				d.log.Warn("start failed after taking the lease; lease released for another replica")
			}
		})
		// The lease is held from here: restore what the previous active
		// replica snapshotted, with a fresh setup deadline.
		cancelSetup()
		setupCtx, cancelSetup = context.WithTimeout(ctx, 30*time.Second)
		defer cancelSetup()
		// A daemon without HA may have started while this one stood by
		// (with no replica active, nothing refused it): this one gives
		// the lease back rather than run beside it.
		if err := d.checkNoOtherDaemon(setupCtx); err != nil {
			return err
		}
		d.rereadAtTakeover(setupCtx)
	}
	if err := d.restore(setupCtx); err != nil {
		return err
	}
	if !d.keepUnconfigured {
		// Deadlines of their own: a slow alerts stream must not eat the
		// setup's, nor the retirement the cleanup's.
		retireCtx, cancelRetire := context.WithTimeout(ctx, 10*time.Second)
		d.retireRemovedGraphs(retireCtx)
		cancelRetire()
		dropCtx, cancelDrop := context.WithTimeout(ctx, 10*time.Second)
		d.dropRemovedGraphState(dropCtx)
		cancelDrop()
	}

	// Localizers: a graph whose bundle or plugin is broken stops the start,
	// with the graph named.
	launchCtx, cancelLaunch := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelLaunch()
	for _, gr := range d.order {
		l, err := d.factory(launchCtx, *gr.gc.Load(), gr.g)
		if err != nil {
			return fmt.Errorf("%slocalizer: %w", graphPrefix(gr.name, err), err)
		}
		gr.loc.Store(&locHolder{l: l})
	}
	cleanup = append(cleanup, func() {
		// Together: a plugin that does not exit gets a grace of its own
		// (seconds), which one after another would add up past a
		// service manager's stop timeout.
		var closing sync.WaitGroup
		for _, gr := range d.order {
			if h := gr.loc.Load(); h != nil {
				closing.Go(func() {
					if err := h.close(); err != nil {
						d.log.Warn("closing localizer", zap.String("graph", gr.name), zap.Error(err))
					}
				})
			}
		}
		closing.Wait()
	})

	// Workers and scheduler run on their own context so that shutdown can
	// cancel inference after consuming has stopped.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	d.jobs = make(chan job, len(d.order))
	// A graph has at most one job queued or running, so workers past the
	// graph count would only wait.
	for range min(cfg.Workers, len(d.order)) {
		workers.Go(func() { d.worker(workCtx) })
	}
	stopWork := func() { cancelWork(); workers.Wait() }
	cleanup = append(cleanup, stopWork)

	if err := d.startConsumers(setupCtx); err != nil {
		return err
	}
	if err := d.startUnrouted(setupCtx); err != nil {
		d.stopConsumers(true)
		return err
	}
	d.bound.Store(true)

	// Service requests answered on goroutines of their own are cut short
	// at shutdown and waited for, after the service stops taking more.
	reqCtx, cancelRequests := context.WithCancel(workCtx)
	defer cancelRequests()
	svc, err := d.startService(reqCtx, setupCtx)
	if err != nil {
		d.stopConsumers(true)
		return err
	}

	var loops sync.WaitGroup
	loopCtx, cancelLoops := context.WithCancel(workCtx)
	for _, gr := range d.order {
		loops.Go(func() { d.schedule(loopCtx, gr) })
	}
	loops.Go(func() { d.snapshotLoop(loopCtx) })
	loops.Go(func() { d.watchUnrouted(loopCtx) })
	loops.Go(func() { d.limiter.flushLoop(loopCtx) })
	if !d.keepUnconfigured {
		// The bucket is shared with whatever owns it otherwise.
		loops.Go(func() { d.compactState(loopCtx) })
	}

	started = true
	close(d.ready)
	loops.Go(func() { d.reloadIfRequestedDuringStart(loopCtx) })
	for _, gr := range d.order {
		if iv := gr.gc.Load().Interval; iv < time.Second {
			d.log.Warn("interval below a second: the graph is considered for inference that often (1m is a minute, 1ms a millisecond)",
				zap.String("graph", gr.name), zap.Duration("interval", iv))
		}
	}
	d.log.Info("sourcewatch serving", zap.Int("graphs", len(d.order)), zap.Strings("models", d.models()),
		zap.String("nats", RedactURLs(d.ClientURL())), zap.String("http", d.HTTPAddr()))

	var lost error
	select {
	case <-ctx.Done():
	case lost = <-lostLease:
		// Another replica may be active already: stop consuming and
		// inferring at once, and write nothing more. The connection goes
		// first, before the HTTP server and the service are stopped.
		d.log.Error("lost the lease; stopping", zap.Error(lost))
		d.crash.Store(true)
		d.stopIngest()
		nc.Close()
	}
	d.log.Info("shutting down")

	// Stop taking work in, then finish what is in flight.
	d.bound.Store(false)
	if httpSrv != nil {
		shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = httpSrv.Shutdown(shCtx)
		cancel()
	}
	<-httpDone
	_ = svc.Stop()
	d.stopRequests(cancelRequests)
	if d.crash.Load() {
		// As after kill -9: nothing more is written or acknowledged.
		d.stopIngest()
		nc.Close()
		cancelLoops()
		loops.Wait()
		return lost
	}
	// With NATS gone, draining and the final snapshot cannot succeed;
	// the last periodic snapshot and the stream's replay cover the restart.
	connected := nc.IsConnected()
	finalSaved := connected
	// The scheduler goes first, so it cannot rebind a consumer being
	// drained.
	cancelLoops()
	loops.Wait()
	d.stopConsumers(connected)
	stopWork()
	if connected {
		// One more try at alerts still pending (stopWork may have cut a
		// publish short); what stays pending is saved by the final
		// snapshot, for the next run to send.
		drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		for _, gr := range d.order {
			d.flush(drainCtx, gr, 1)
		}
		cancelDrain()
		finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := d.snapshotAll(finalCtx, true); err != nil {
			d.log.Error("final snapshot", zap.Error(err))
			finalSaved = false
		}
		if held != nil {
			// After the final snapshot, so the standby that takes over
			// restores it.
			if err := held.release(finalCtx); err != nil {
				d.log.Warn("releasing the lease", zap.Error(err))
			}
		}
		if err := nc.Drain(); err != nil {
			d.log.Warn("draining nats", zap.Error(err))
		}
		for i := 0; i < 100 && !nc.IsClosed(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		d.log.Warn("nats not connected at shutdown: no final snapshot")
	}
	nc.Close()
	// The plugins, the embedded server and the data_dir lock go in the
	// deferred cleanup, just after; the line says the stop is over.
	d.log.Info("closing the forward plugins (and the embedded NATS server, if any)")
	stopped = func() { d.log.Info("sourcewatch stopped", zap.Bool("final_snapshot", finalSaved)) }
	return nil
}

// waitConnected waits for nc's first connection to url, saying so in
// /readyz and in a warning every 10 s.
func (d *Daemon) waitConnected(ctx context.Context, nc *nats.Conn, url string) error {
	if nc.IsConnected() {
		return nil
	}
	url = RedactURLs(url)
	msg := "nats: waiting for the first connection to " + url
	d.waiting.Store(&msg)
	defer d.waiting.Store(nil)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var waited time.Duration
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			// Asked to stop before NATS came: a clean shutdown.
			return ctx.Err()
		case <-t.C:
		}
		if why := d.lastConnErr.Load(); why != nil {
			// A refusal (bad credentials, TLS) is worth more than "waiting".
			now := msg + " (last attempt: " + *why + ")"
			d.waiting.Store(&now)
		}
		if waited += 50 * time.Millisecond; waited%(10*time.Second) == 0 {
			fields := []zap.Field{zap.String("url", url), zap.Duration("waited", waited)}
			if why := d.lastConnErr.Load(); why != nil {
				fields = append(fields, zap.String("last_error", *why))
			}
			d.log.Warn("waiting for NATS", fields...)
		}
	}
	return nil
}

// notReady is one reason the daemon, or one of its graphs, is not ready.
type notReady struct {
	// graph is the graph it concerns; "" for the daemon's own.
	graph string
	// everyGraph marks a daemon problem that keeps every graph from
	// working (starting, standing by, NATS, the consumers, the state
	// store), as opposed to one that concerns no graph's alerts (the
	// consumer of events on unconfigured subjects).
	everyGraph bool
	text       string
}

// readiness lists what keeps the daemon from being ready, as /readyz
// says it.
func (d *Daemon) readiness() []string {
	var out []string
	for _, p := range d.readinessOf() {
		out = append(out, p.text)
	}
	return out
}

// graphReadiness lists what keeps graph name from being ready: the
// daemon's problems that concern every graph, and the graph's own. Other
// graphs' problems, and the unrouted events' consumer, are left out. An
// unknown name is ErrUnknownGraph.
func (d *Daemon) graphReadiness(name string) ([]string, error) {
	gr, err := d.graphNamed(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range d.readinessOf() {
		if p.everyGraph || p.graph == gr.name {
			out = append(out, p.text)
		}
	}
	return out, nil
}

// readinessOf is the reasons readiness and graphReadiness give.
func (d *Daemon) readinessOf() []notReady {
	all := func(text string) notReady { return notReady{everyGraph: true, text: text} }
	var problems []notReady
	if msg := d.standby.Load(); msg != nil {
		// The holder named is as of the last look at the lease, which a
		// standby cut off from NATS cannot renew: say so.
		if d.nc != nil && !d.nc.IsConnected() {
			return []notReady{all(*msg + " (as last seen)"), all("nats: not connected")}
		}
		return []notReady{all(*msg)}
	}
	select {
	case <-d.ready:
	default:
		if msg := d.waiting.Load(); msg != nil {
			return []notReady{all(*msg)}
		}
		return []notReady{all("starting")}
	}
	if d.nc == nil || !d.nc.IsConnected() {
		problems = append(problems, all("nats: not connected"))
	}
	if !d.bound.Load() {
		problems = append(problems, all("consumers: not bound"))
	}
	for _, gr := range d.order {
		if h := gr.cons.Load(); h != nil {
			select {
			case <-h.cc.Closed():
				problems = append(problems, notReady{graph: gr.name, text: "graph " + gr.name + ": consumer stopped"})
			default:
			}
		}
	}
	if h := d.unrouted.cons.Load(); h != nil {
		select {
		case <-h.cc.Closed():
			// Events on subjects of no configured graph are dead-lettered
			// late meanwhile; no graph's alerts wait for them.
			problems = append(problems, notReady{text: "unrouted events: consumer stopped"})
		default:
		}
	}
	if e := d.trackerErr.Load(); e != nil {
		// Alerts wait, pending, until the state holding them is saved.
		problems = append(problems, all("alerts: saving the alert state failed, so none is published: "+clipN(*e, 200)))
	}
	if e := d.snapshotErr.Load(); e != nil {
		// The state store refuses writes (a full disk, no file
		// descriptors left): the window and alert state are no longer
		// saved, and the embedded server does not recover by itself.
		problems = append(problems, all("snapshots: the last write failed: "+clipN(*e, 200)))
	}
	for _, gr := range d.order {
		switch e := gr.lastErr.Load(); {
		case !gr.healthy():
			msg := "graph " + gr.name + ": localizer unhealthy"
			if re := gr.relaunchErr.Load(); re != nil {
				msg += "; relaunching it failed: " + clipN(*re, 300)
			}
			problems = append(problems, notReady{graph: gr.name, text: msg})
		case e != nil && gr.failing.Load():
			// A plugin that answers every call with an error is healthy
			// as a process, yet no alert comes of it.
			problems = append(problems, notReady{graph: gr.name, text: "graph " + gr.name + ": last inference failed: " + clipN(*e, 200)})
		}
	}
	return problems
}

func (gr *graphRT) healthy() bool {
	h := gr.loc.Load()
	if h == nil {
		return false
	}
	if hc, ok := h.l.(healthChecker); ok {
		return hc.Healthy()
	}
	return true
}

// changedSince counts the nodes whose place in the observation's infected
// set (y_v > 0) differs from last, the set at the last inference: new
// infections, recoveries, and infections that aged out of the window or
// came back into it. A node reported infected again after its infection
// left the window changes no state, but it changes y; counting state
// changes alone missed every repeat outbreak on the same nodes. It is -1
// with no inference to compare with (last nil): everything is new.
func changedSince(last *[]bool, y []float64) int {
	if last == nil {
		return -1
	}
	n := 0
	for v, was := range *last {
		if (y[v] > 0) != was {
			n++
		}
	}
	return n
}

// changedEnough reports whether changed nodes (changedSince) call for an
// inference under min_changes.
func changedEnough(changed, minChanges int) bool { return changed < 0 || changed >= minChanges }

// infectedSet returns y's infected set, y_v > 0.
func infectedSet(y []float64) *[]bool {
	s := make([]bool, len(y))
	for v, val := range y {
		s[v] = val > 0
	}
	return &s
}

// schedule queues gr for inference every interval when its observation
// changed enough since the last inference (changedSince), and for
// resolution when it fell below min_infected.
func (d *Daemon) schedule(ctx context.Context, gr *graphRT) {
	var buf []float64
	for {
		gc := gr.gc.Load()
		t := time.NewTimer(gc.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.countRestarts(gr)
		d.rebindIfStopped(ctx, gr)
		if gr.inflight.Load() {
			continue
		}
		o := gr.win.observe(d.now(), buf)
		buf = o.y
		d.metrics.infected.WithLabelValues(gr.name).Set(float64(o.infected))
		gc = gr.gc.Load()
		kind := jobKind(-1)
		healthy := gr.healthy()
		if healthy && gr.relaunches.Load() > 0 && !gr.inflight.Load() && !gr.diedInCall.Load() {
			// A relaunched plugin that lived to this tick does not count
			// against the next death: a plugin killed now and then over
			// months of quiet (the OOM killer, an operator) is brought back
			// each time, while one that dies at once still hits the cap.
			// So does one that dies in every call, alive between them:
			// only an inference that works resets the count then (a
			// fresh localizer per death, each with a fresh relaunch
			// budget of its supervisor, launched it 72 times a minute).
			gr.relaunches.Store(0)
		}
		budget := "relaunch_budget." + gr.name
		switch {
		case !healthy && gr.relaunches.Load() == int64(gc.Restarts) && gc.Restarts > 0:
			gr.budgetSpent.Store(true)
			d.limiter.warn(budget, "forward plugin down and its relaunches used up (restarts); the next inference or localize request tries once more",
				zap.String("graph", gr.name), zap.Int("restarts", gc.Restarts))
		case healthy && gr.budgetSpent.Swap(false):
			d.log.Info("forward plugin up again after its relaunches were used up", zap.String("graph", gr.name),
				zap.Int("suppressed", d.limiter.ended(budget)))
		}
		replaying := d.replaying(gr)
		_, open := d.tracker.Open(gr.name)
		switch {
		case !healthy && open && o.infected < gc.MinInfected && !replaying && len(d.tracker.Pending(gr.name)) == 0:
			// An outbreak now over resolves whether or not the plugin is
			// up (a resolve needs none): a relaunch chosen first, and
			// refused for the rest of the minute by the relaunch rate,
			// held the incident open, and the next outbreak came as an
			// update of it. The relaunch follows at the next tick.
			kind = jobResolve
		case !healthy && gr.relaunches.Load() < int64(gc.Restarts):
			// The plugin died between inferences: bring it back before
			// it is needed, so /readyz recovers too.
			kind = jobRelaunch
		case len(d.tracker.Pending(gr.name)) > 0:
			// An alert a job could not publish goes out before any new
			// one is made, so subscribers see every seq in order.
			kind = jobFlush
		case replaying:
			// No alert from a window that has not caught up yet.
		case o.infected >= gc.MinInfected && changedEnough(changedSince(gr.inferred.Load(), o.y), gc.MinChanges):
			kind = jobInfer
		case o.infected < gc.MinInfected:
			// Nothing to infer: a failed inference of an outbreak now over
			// no longer keeps the graph from being ready, and a plugin that
			// died in its calls is called no more: a later death is one
			// between calls, which the ticks that find it up forgive.
			gr.failing.Store(false)
			if gr.diedInCall.Swap(false) && healthy {
				gr.relaunches.Store(0) // as the check above would have
			}
			if open {
				kind = jobResolve
			}
		}
		if kind < 0 || !gr.inflight.CompareAndSwap(false, true) {
			continue
		}
		// The channel holds one slot per graph and a graph has at most
		// one job queued or running, so this never blocks.
		d.jobs <- job{gr: gr, kind: kind}
	}
}

// sameGraphs reports a config whose graph set differs from the running
// one, which needs a restart, naming the graphs added or removed, or the
// graph whose edges or directed changed. Graphs are matched by name, not
// by their place in the list: a list reordered (sorted, a graph moved) is
// the same set, and sameGraphs puts cfg.Graphs in the running order, which
// the reload and takeover then pair with d.order by index.
func (d *Daemon) sameGraphs(cfg *Config) error {
	byName := make(map[string]GraphConfig, len(cfg.Graphs))
	for _, gc := range cfg.Graphs {
		byName[gc.Name] = gc // Validate refused duplicates
	}
	running := make(map[string]bool, len(d.order))
	var removed []string
	for _, gr := range d.order {
		running[gr.name] = true
		if _, ok := byName[gr.name]; !ok {
			removed = append(removed, strconv.Quote(gr.name))
		}
	}
	var added []string
	for _, gc := range cfg.Graphs {
		if !running[gc.Name] {
			added = append(added, strconv.Quote(gc.Name))
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		var what []string
		if len(added) > 0 {
			what = append(what, strings.Join(added, ", ")+" added")
		}
		if len(removed) > 0 {
			what = append(what, strings.Join(removed, ", ")+" removed")
		}
		return fmt.Errorf("graphs: %d configured, %d running (%s); adding or removing graphs needs a restart (a renamed graph is one removed and one added)",
			len(cfg.Graphs), len(d.order), strings.Join(what, ", "))
	}
	ordered := make([]GraphConfig, 0, len(d.order))
	for _, gr := range d.order {
		gc, old := byName[gr.name], gr.gc.Load()
		if gc.Edges != old.Edges || gc.Directed != old.Directed {
			return fmt.Errorf("graph %q: edges and directed need a restart (edges %q -> %q, directed %v -> %v)",
				gr.name, old.Edges, gc.Edges, old.Directed, gc.Directed)
		}
		ordered = append(ordered, gc)
	}
	cfg.Graphs = ordered
	return nil
}

// checkOnStandby is a standby's reload: the config file is loaded and
// checked as a reload would, so a broken one is reported now, but applied
// only when this replica takes over (rereadAtTakeover).
func (d *Daemon) checkOnStandby(ctx context.Context) error {
	cfg, err := d.checkFile(ctx)
	if err != nil || cfg == nil {
		return err
	}
	d.checked.Store(cfg)
	d.log.Info("standby: config file checked; this replica applies it when it takes over")
	return nil
}

// checkFile loads the config file (WithReload) and checks it as a reload
// would, without applying it; nil without a file to read.
func (d *Daemon) checkFile(ctx context.Context) (*Config, error) {
	if d.reloadCfg == nil {
		return nil, nil
	}
	cfg, err := d.readAndCheck(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	return &cfg, nil
}

// readAndCheck loads the config file and checks it as every reload does:
// valid, the same graphs as running, and each graph's bundle passing the
// preflight. d.reloadCfg must be set.
func (d *Daemon) readAndCheck(ctx context.Context) (Config, error) {
	cfg, err := d.reloadCfg(ctx)
	if err == nil {
		err = d.validate(cfg)
	}
	if err == nil {
		err = d.sameGraphs(&cfg)
	}
	if err == nil {
		err = d.preflightAll(cfg)
	}
	return cfg, err
}

// preflightAll makes the cheap model check of WithPreflight on each graph
// of cfg (same graphs as running), so a standby's check and its takeover
// refuse a bundle that would not load, as a reload does by loading it.
func (d *Daemon) preflightAll(cfg Config) error {
	if d.preflight == nil {
		return nil
	}
	var errs []error
	for i, gc := range cfg.Graphs {
		if err := d.preflight(gc, d.order[i].g); err != nil {
			errs = append(errs, fmt.Errorf("graph %q: %w%s", gc.Name, err, edgesChangedHint(gc, d.order[i].g, err)))
		}
	}
	return errors.Join(errs...)
}

// edgesChangedHint explains a bundle refused at a reload for another
// graph when the edge file itself has changed since the start: the
// daemon serves the graph it read then, so a bundle retrained on the new
// file matches the file and not the running graph. "" otherwise.
func edgesChangedHint(gc GraphConfig, running *graph.Graph, err error) string {
	if !errors.Is(err, localize.ErrGraphMismatch) || gc.Edges == "" {
		return ""
	}
	now, lerr := graph.Load(gc.Edges, graph.Directed(gc.Directed))
	if lerr != nil || now.Fingerprint() == running.Fingerprint() {
		return ""
	}
	return fmt.Sprintf(" (the edge file %s has changed since the daemon started, %d nodes then, %d now: edge files are read at start only, so restart to serve the new graph)",
		gc.Edges, running.N(), now.N())
}

// reloadIfRequestedDuringStart runs the reload a request before the start
// was done deferred (reloadAfterStart).
func (d *Daemon) reloadIfRequestedDuringStart(ctx context.Context) {
	d.reloadMu.Lock()
	pending := d.reloadAfterStart
	d.reloadAfterStart = false
	d.reloadMu.Unlock()
	if !pending {
		return
	}
	if err := d.Reload(ctx); err != nil {
		d.log.Error("reload requested during the start failed; keeping the running setup", zap.Error(err))
		return
	}
	d.log.Info("reload requested during the start applied")
}

// rereadAtTakeover applies the per-graph settings of the config file as
// it is when a standby takes over: it may have stood by for weeks while
// the file changed and every replica was signalled (a standby answers
// SIGHUP by waiting for this). A file that does not load, or that changes
// the graph set, leaves the settings read at start, and says so.
func (d *Daemon) rereadAtTakeover(ctx context.Context) {
	if d.reloadCfg == nil {
		return
	}
	cfg, err := d.readAndCheck(ctx)
	rs := ReloadStatus{At: d.now().UTC(), OK: err == nil}
	apply := func(cfg *Config) {
		for i, gr := range d.order {
			gc := cfg.Graphs[i]
			gr.gc.Store(&gc)
			gr.win.setParams(gc.Window, gc.Decay)
		}
		d.current.Store(d.keepStartOnly(*cfg))
	}
	switch checked := d.checked.Load(); {
	case err == nil:
		apply(&cfg)
		d.log.Info("config file read again at takeover", zap.Int("graphs", len(d.order)))
	case checked != nil:
		// A reload this standby accepted is not undone by a file broken
		// since: a standalone daemon would be running it.
		rs.Error = fmt.Sprintf("%v: at takeover: %v", ErrReload, err)
		apply(checked)
		d.log.Warn("config file not applied at takeover; running the settings last checked good on standby", zap.Error(err))
	default:
		rs.Error = fmt.Sprintf("%v: at takeover: %v", ErrReload, err)
		d.log.Warn("config file not applied at takeover; running the settings read at start", zap.Error(err))
	}
	d.lastReload.Store(&rs)
	d.metrics.reloadOK.Set(boolGauge(err == nil))
}

// replayLimit bounds how long a graph's alerts wait for its replay: a
// stream fed faster than the window applies it would otherwise hold them
// back for good.
const replayLimit = 5 * time.Minute

// replaying reports whether gr's window is still replaying the events
// queued before its consumer was bound (see graphRT.replayTo), and ends
// the replay once it has caught up or waited replayLimit.
func (d *Daemon) replaying(gr *graphRT) bool {
	to := gr.replayTo.Load()
	if to == 0 {
		return false
	}
	_, _, seq := gr.win.counts()
	waited := d.now().Sub(time.Unix(0, gr.replayFrom.Load()))
	switch {
	case seq >= to:
		d.log.Info("replay caught up; alerting", zap.String("graph", gr.name), zap.Uint64("seq", seq), zap.Duration("took", waited.Round(time.Millisecond)))
	case waited >= replayLimit:
		d.log.Warn("replay not caught up; alerting anyway", zap.String("graph", gr.name), zap.Uint64("seq", seq), zap.Uint64("replay_to", to), zap.Duration("waited", waited))
	default:
		return true
	}
	gr.replayTo.CompareAndSwap(to, 0)
	return false
}

func (d *Daemon) worker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-d.jobs:
			switch j.kind {
			case jobInfer:
				d.infer(ctx, j.gr)
			case jobResolve:
				d.resolve(ctx, j.gr)
			case jobRelaunch:
				switch err := d.relaunch(ctx, j.gr); {
				case err == nil, ctx.Err() != nil:
				case errors.Is(err, errRelaunchRate):
					// Asked again at every tick until the minute is up.
					d.limiter.warn("relaunch_rate."+j.gr.name, "forward plugin not relaunched: it was relaunched too often", zap.String("graph", j.gr.name), zap.Error(err))
				default:
					d.log.Error("relaunching localizer", zap.String("graph", j.gr.name), zap.Error(err))
				}
			case jobFlush:
				d.flush(ctx, j.gr, 1)
			}
			j.gr.inflight.Store(false)
		}
	}
}

// localize runs gr's Localizer on y and ranks the sources it found.
func (d *Daemon) localize(ctx context.Context, gr *graphRT, y []float64) (Inference, []alerts.Source, time.Duration, error) {
	h := gr.loc.Load()
	h.mu.RLock()
	for h.closed {
		// Swapped out by a reload or relaunch between Load and RLock:
		// the new one is already in place, unless the daemon is
		// stopping and closed the last one.
		h.mu.RUnlock()
		next := gr.loc.Load()
		if next == h {
			return Inference{}, nil, 0, fmt.Errorf("graph %q: %w", gr.name, errLocalizerClosed)
		}
		h = next
		h.mu.RLock()
	}
	defer h.mu.RUnlock()
	// A localize request waits for a running inference of its graph, but
	// no longer than its own deadline.
	if err := gr.inferMu.lock(ctx); err != nil {
		return Inference{}, nil, 0, fmt.Errorf("graph %q: waiting for the inference running: %w", gr.name, err)
	}
	defer gr.inferMu.unlock()
	start := time.Now()
	inf, err := h.l.Localize(ctx, y)
	dur := time.Since(start)
	if err != nil {
		return Inference{}, nil, dur, fmt.Errorf("graph %q: localizing: %w", gr.name, err)
	}
	srcs, err := rankSources(gr.g, inf)
	if err != nil {
		return Inference{}, nil, dur, fmt.Errorf("graph %q: %w", gr.name, err)
	}
	return inf, srcs, dur, nil
}

// rankSources orders the source set by score, best first (node id breaking
// ties, so the order is deterministic).
func rankSources(g *graph.Graph, inf Inference) ([]alerts.Source, error) {
	n := g.N()
	if len(inf.Scores) != n || len(inf.Probability) != n {
		return nil, fmt.Errorf("%w: %d scores and %d probabilities for %d nodes", ErrBadInference, len(inf.Scores), len(inf.Probability), n)
	}
	if inf.Floor < 0 || inf.Floor > len(inf.Sources) {
		return nil, fmt.Errorf("%w: %d floor sources of %d", ErrBadInference, inf.Floor, len(inf.Sources))
	}
	srcs := make([]alerts.Source, 0, len(inf.Sources))
	seen := map[int]bool{}
	floorFrom := len(inf.Sources) - inf.Floor
	for i, v := range inf.Sources {
		if v < 0 || v >= n {
			return nil, fmt.Errorf("%w: source index %d out of range [0,%d)", ErrBadInference, v, n)
		}
		if seen[v] {
			continue
		}
		seen[v] = true
		srcs = append(srcs, alerts.Source{Node: g.ID(v), Score: inf.Scores[v], Probability: inf.Probability[v], Floor: i >= floorFrom})
	}
	slices.SortStableFunc(srcs, byRank)
	return srcs, nil
}

// byRank orders sources by score, best first, node id breaking ties: the
// order of an alert's sources and of the localize endpoint's ranking.
func byRank(a, b alerts.Source) int {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c
	}
	return strings.Compare(a.Node, b.Node)
}

// errLeaseLapsed is what a write returns once this replica's HA lease has
// gone unrenewed past the point where the keeper gives it up.
var errLeaseLapsed = fmt.Errorf("%w: not renewed within two thirds of lease_ttl; writing nothing more", ErrLeaseLost)

// fenced returns errLeaseLapsed, and stops consuming, when this replica
// holds an HA lease it may no longer act on; nil otherwise (always
// without HA). Every write to NATS checks it first: the keeper's report
// of a lost lease can come after the write (see lease.validUntil).
func (d *Daemon) fenced() error {
	if l := d.held.Load(); l != nil && l.lapsed() {
		d.stopIngest()
		return errLeaseLapsed
	}
	return nil
}

// relaunch replaces gr's Localizer by a fresh one from the factory (a new
// plugin process), at most restarts times in a row: the count is reset
// by an inference that works, a reload, and a tick that finds the plugin
// up unless it last died inside an inference (diedInCall).
func (d *Daemon) relaunch(ctx context.Context, gr *graphRT) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	gc := gr.gc.Load()
	if n := gr.relaunches.Load(); n >= int64(gc.Restarts) {
		return fmt.Errorf("graph %q: localizer failed after %d relaunches (restarts: %d)", gr.name, n, gc.Restarts)
	}
	// Each relaunch builds a new localizer, and one that lives to the
	// next tick resets the restarts count: so this is what holds a
	// plugin that dies a moment after each start to the documented rate
	// (seen: 18 a minute). A localizer's supervisor relaunching within
	// an inference takes from the same budget (seen: 7 a minute when
	// each had its own).
	budget := gr.budget
	if b, ok := gr.loc.Load().localizer().(relaunchBudgeter); ok && b.relaunchBudget() != nil {
		budget = b.relaunchBudget()
	}
	if _, err := budget.Take(); err != nil {
		var limit *forward.RelaunchLimitError
		if !errors.As(err, &limit) {
			return fmt.Errorf("graph %q: %w", gr.name, err)
		}
		msg := fmt.Sprintf("relaunched %d times within %v; the next relaunch from %s", limit.Held, spanWords(limit.Span), limit.Next.UTC().Format(time.RFC3339))
		gr.relaunchErr.Store(&msg)
		return fmt.Errorf("graph %q: %w: %s", gr.name, errRelaunchRate, msg)
	}
	gr.relaunches.Add(1)
	var (
		l   Localizer
		err error
	)
	if r, ok := gr.loc.Load().localizer().(relauncher); ok {
		// The model loaded at start or reload: a bundle file replaced
		// since is applied by a reload, not by a plugin's death.
		l, err = r.Relaunch(ctx)
	} else {
		l, err = d.factory(ctx, *gc, gr.g)
	}
	if err != nil {
		msg := err.Error()
		gr.relaunchErr.Store(&msg)
		return fmt.Errorf("graph %q: relaunch: %w", gr.name, err)
	}
	gr.relaunchErr.Store(nil)
	old := gr.loc.Swap(&locHolder{l: l})
	if err := old.close(); err != nil {
		d.log.Debug("closing failed localizer", zap.String("graph", gr.name), zap.Error(err))
	}
	d.PluginRestarted(gr.name)
	d.log.Warn("localizer relaunched", zap.String("graph", gr.name), zap.Int64("relaunch", gr.relaunches.Load()))
	return nil
}

func (d *Daemon) infer(ctx context.Context, gr *graphRT) {
	// While an earlier alert cannot be published, no new one is made: it
	// would take the next seq behind one subscribers have not seen.
	if !d.flush(ctx, gr, 1) {
		return
	}
	o := gr.win.observe(d.now(), nil)
	inf, srcs, dur, err := d.localize(ctx, gr, o.y)
	if err != nil && ctx.Err() == nil && !gr.healthy() {
		// The plugin died under this inference: relaunch and retry once,
		// so the alert is late rather than lost.
		gr.diedInCall.Store(true)
		// Once per interval per graph: a plugin that dies in every call
		// would say so at every tick.
		d.limiter.warn("died."+gr.name, "localizer unhealthy after a failed inference", zap.String("graph", gr.name), zap.Error(err))
		if rerr := d.relaunch(ctx, gr); rerr == nil {
			inf, srcs, dur, err = d.localize(ctx, gr, o.y)
			// A retry that fails with the new plugin up is an error, not
			// a death in a call: the ticks that find it up may reset the
			// count again (else a plugin killed now and then after it
			// ran out its relaunches for good, weeks later).
			gr.diedInCall.Store(err != nil && !gr.healthy())
		} else {
			err = fmt.Errorf("%w (%w)", err, rerr)
		}
	}
	d.metrics.inference.WithLabelValues(gr.name).Observe(dur.Seconds())
	if err != nil {
		msg := err.Error()
		failing := gr.failing.Swap(true)
		gr.lastErr.Store(&msg)
		d.metrics.inferErrors.WithLabelValues(gr.name).Inc()
		switch {
		case ctx.Err() != nil:
		case failing:
			// A plugin that fails every call would log every interval
			// for as long as nobody fixes it.
			d.limiter.warn("infer."+gr.name, "inference still failing", zap.String("graph", gr.name), zap.Error(err))
		default:
			d.log.Error("inference failed", zap.String("graph", gr.name), zap.Error(err))
			// The repeats are held back from this line on, not from the
			// first repeat: else the second failure, one interval later,
			// logged at once.
			d.limiter.mark("infer." + gr.name)
		}
		return
	}
	gr.lastErr.Store(nil)
	if gr.failing.Swap(false) {
		d.log.Info("inference succeeds again", zap.String("graph", gr.name), zap.Int("suppressed", d.limiter.ended("infer."+gr.name)))
	}
	gr.relaunches.Store(0)
	gr.diedInCall.Store(false)
	gr.inferred.Store(infectedSet(o.y))
	if len(srcs) == 0 {
		// An empty source set (nothing above the threshold, and no
		// floor) is no finding: it neither opens an
		// incident nor changes an open one; resolution is by min_infected.
		d.log.Debug("inference found no sources", zap.String("graph", gr.name))
		return
	}
	_, publish := d.tracker.Observe(alerts.Observation{
		Graph:       gr.name,
		Window:      alerts.Window{From: o.from, To: o.to},
		Infected:    o.infected,
		Sources:     srcs,
		Threshold:   inf.Threshold,
		Model:       alerts.ModelRef{Bundle: inf.Model.Bundle, Forward: inf.Model.Forward, ForwardVersion: inf.Model.ForwardVersion},
		InferenceMS: float64(dur.Microseconds()) / 1000,
		Note:        inf.Note,
		MaxBytes:    d.alertMaxBytes(),
	})
	if publish {
		d.flush(ctx, gr, d.publishAttempts)
	}
}

func (d *Daemon) resolve(ctx context.Context, gr *graphRT) {
	if !d.flush(ctx, gr, 1) {
		return
	}
	o := gr.win.observe(d.now(), nil)
	w := alerts.Window{From: o.from, To: o.to}
	resolve := func() (alerts.Alert, bool) { return d.tracker.Resolve(gr.name, w, o.infected) }
	if o.infected > 0 {
		// Infected nodes left in the window: a subscriber could take the
		// resolve for a mistake (and a reload that raised min_infected
		// resolves an outbreak that is still growing), so it says why.
		why := fmt.Sprintf("resolved with %d infected in the window, under min_infected %d", o.infected, gr.gc.Load().MinInfected)
		resolve = func() (alerts.Alert, bool) { return d.tracker.ResolveBecause(gr.name, w, o.infected, why) }
	}
	if _, ok := resolve(); ok {
		// The next outbreak is a new incident whatever nodes it holds:
		// the same nodes infected again must be inferred again, though
		// they differ from the last inferred set in none.
		gr.inferred.Store(nil)
		d.flush(ctx, gr, d.publishAttempts)
	}
}

// flush publishes gr's pending alerts, oldest first, and reports whether
// none is left. Write-ahead: the tracker state holding them is saved before
// the first try, so after a crash the restarted daemon resends each under
// the same id (JetStream drops the copy of one that had landed) instead of
// losing it or reusing its seq for other content; when that save fails,
// nothing is published. An alert stops being pending only once the stream
// has acknowledged it, and the state is saved again then. attempts bounds
// the tries per alert.
func (d *Daemon) flush(ctx context.Context, gr *graphRT, attempts int) bool {
	pending := d.tracker.Pending(gr.name)
	gauge := d.metrics.pending.WithLabelValues(gr.name)
	gauge.Set(float64(len(pending)))
	if len(pending) == 0 {
		return true
	}
	if ctx.Err() != nil || d.fenced() != nil {
		return false
	}
	if err := d.saveTrackerBeforePublish(ctx); err != nil {
		d.metrics.pubFailed.WithLabelValues(gr.name).Inc()
		d.limiter.warn("alert_state", "alert not published: saving the alert state first failed; retrying next tick",
			zap.String("graph", gr.name), zap.String("id", pending[0].ID), zap.Error(err))
		return false
	}
	for _, a := range pending {
		a = d.outgoing(a)
		if d.fenced() != nil {
			return false
		}
		if err := d.publishAlert(ctx, a, attempts); err != nil {
			if ctx.Err() == nil {
				d.metrics.pubFailed.WithLabelValues(gr.name).Inc()
				d.limiter.warn("alert_publish", "alert not published; retrying next tick",
					zap.String("graph", gr.name), zap.String("id", a.ID), zap.Error(err))
				d.remakeAlertStream(ctx)
			}
			return false
		}
		d.tracker.Published(gr.name, a.ID)
		gauge.Dec()
		gr.lastAlert.Store(&a)
		d.metrics.alerts.WithLabelValues(gr.name, string(a.Status)).Inc()
		d.log.Info("alert", zap.String("graph", gr.name), zap.String("status", string(a.Status)),
			zap.String("id", a.ID), zap.Int("sources", len(a.Sources)), zap.Int("infected", a.Infected))
	}
	// Failing here only leaves acknowledged alerts pending in KV: a
	// restart resends them under their ids, and the stream drops them.
	if err := d.saveTracker(ctx); err != nil {
		d.log.Warn("saving alert state", zap.String("graph", gr.name), zap.Error(err))
	}
	return true
}

// publishLimit is the largest encoded alert that can be published: the
// server's max_payload less room for the headers and a resolve's note
// (0, no limit, before a connection).
func (d *Daemon) publishLimit() int {
	const room = 1024
	limit := d.nc.MaxPayload()
	if limit <= 0 {
		return 0
	}
	return max(1, int(limit)-room)
}

// alertMaxBytes is the largest encoded alert the tracker may make:
// publishLimit less the daemon's alert note (withAlertNote).
func (d *Daemon) alertMaxBytes() int {
	limit := d.publishLimit()
	if limit == 0 {
		return 0
	}
	return max(1, limit-len(d.alertNote)-2)
}

// outgoing is a as it is published: with the daemon's alert note, and
// fitted again to what the server takes. One made before this build
// fitted alerts (restored from its state), or before the server's
// max_payload shrank, could never be sent, and would hold every later
// alert of its graph back (a removed graph's too, its state kept for good).
func (d *Daemon) outgoing(a alerts.Alert) alerts.Alert {
	return alerts.FitSources(d.withAlertNote(a), d.publishLimit())
}

// withAlertNote returns a with the daemon's alert note (WithAlertNote)
// after its own. The tracker keeps the unmarked alert: the mark is the
// publisher's, and a restart marks it again before resending.
func (d *Daemon) withAlertNote(a alerts.Alert) alerts.Alert {
	switch {
	case d.alertNote == "":
	case a.Note == "":
		a.Note = d.alertNote
	default:
		a.Note += "; " + d.alertNote
	}
	return a
}

// remakeAlertStream makes the alert stream anew, as the start does, when
// a publish failed because it is gone (deleted under the daemon): a
// publish to a subject no stream keeps is never acknowledged, and every
// alert would wait for a restart. The alerts it held, and its consumers,
// went with it; the next tick publishes what is pending.
func (d *Daemon) remakeAlertStream(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.js.Stream(sctx, alerts.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err := ensureAlertStream(sctx, d.js, d.cfg, d.log); err != nil {
		d.limiter.warn("alert_stream", "alert stream gone; making it anew failed", zap.Error(err))
		return
	}
	d.log.Warn("alert stream was deleted; made it anew (the alerts it held, and its consumers, are gone)", zap.String("stream", alerts.StreamName))
}

// publishAlert sends a and waits for the stream's acknowledgement, up to
// attempts times with a growing pause between them.
func (d *Daemon) publishAlert(ctx context.Context, a alerts.Alert, attempts int) error {
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			if SleepContext(ctx, time.Duration(attempt)*200*time.Millisecond) != nil {
				return err
			}
		}
		// Each attempt is fenced: a retry seconds after the first may
		// come after the lease is gone.
		pctx, cancel, ferr := d.fencedContext(ctx, 5*time.Second)
		if ferr != nil {
			return ferr
		}
		err = d.pub.Publish(pctx, a)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// saveTracker writes the tracker's state to KV. Marshal and Put happen
// under saveMu, so two workers' saves cannot land out of order and leave KV
// older than a state already written. A cancelled ctx still gets its save
// (bounded by 5 s): a job stopped at shutdown leaves a consistent state.
func (d *Daemon) saveTracker(ctx context.Context) error {
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	return d.saveTrackerLocked(ctx)
}

// saveTrackerBeforePublish is flush's write-ahead save, the one that
// holds alerts back while it fails: /readyz names its error (trackerErr),
// set under saveMu so a concurrent save that works clears it after, not
// before. A save after publishing that fails only leaves acknowledged
// alerts pending in KV, resent (and dropped as copies) after a restart.
func (d *Daemon) saveTrackerBeforePublish(ctx context.Context) error {
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	err := d.saveTrackerLocked(ctx)
	if err != nil {
		msg := err.Error()
		d.trackerErr.Store(&msg)
	}
	return err
}

func (d *Daemon) saveTrackerLocked(ctx context.Context) error {
	if err := d.fenced(); err != nil {
		return err
	}
	data, err := d.tracker.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encoding alert state: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// In parts when it outgrows a message (many graphs, long node ids,
	// large source sets): one value over max_payload held back every
	// graph's alerts.
	if err := putValue(sctx, d.kv, "tracker", data, d.maxBlobPart()); err != nil {
		return fmt.Errorf("saving alert state: %w", err)
	}
	d.trackerErr.Store(nil)
	return nil
}

// retireRemovedGraphs resolves the open incidents of graphs the alert
// state knows but the config no longer has, and publishes what they still
// had pending, so a subscriber does not hold an incident open forever;
// their state is then dropped. A publish that fails is logged and tried
// again at the next start, as the state stays.
func (d *Daemon) retireRemovedGraphs(ctx context.Context) {
	for _, name := range d.tracker.Known() {
		if _, ok := d.graphs[name]; ok {
			continue
		}
		if d.tracker.Retire(name, "resolved because graph "+name+" is no longer in the daemon's config; nothing watches it any more") {
			d.log.Warn("graph no longer configured: resolving its open incident", zap.String("graph", name))
		}
		if err := d.saveTracker(ctx); err != nil {
			d.log.Warn("alert state not saved; the removed graph's alerts wait for the next start", zap.String("graph", name), zap.Error(err))
			continue
		}
		published := true
		for _, a := range d.tracker.Pending(name) {
			a = d.outgoing(a)
			err := d.fenced()
			if err == nil {
				err = d.publishAlert(ctx, a, 1)
			}
			if err != nil {
				d.log.Warn("alert of a removed graph not published; tried again at the next start",
					zap.String("graph", name), zap.String("id", a.ID), zap.Error(err))
				published = false
				break
			}
			d.tracker.Published(name, a.ID)
			d.log.Info("alert", zap.String("graph", name), zap.String("status", string(a.Status)), zap.String("id", a.ID))
		}
		if published && d.tracker.Forget(name) {
			if err := d.saveTracker(ctx); err != nil {
				d.log.Warn("saving alert state", zap.String("graph", name), zap.Error(err))
			}
		}
	}
}

// dropRemovedGraphState deletes what graphs the config no longer has left
// in the state bucket (window snapshots with their parts, through points)
// and on the events stream (their durable consumers, known by name and
// filter subject, so an operator's own consumer is never taken for one),
// so they do not stay for months, and a graph added again under an old
// name starts afresh rather than from a snapshot of long ago. Best effort:
// what fails is logged and tried again at the next start.
func (d *Daemon) dropRemovedGraphState(ctx context.Context) {
	removed := func(name string) bool { _, ok := d.graphs[name]; return !ok }
	var dropped []string
	if keys, err := d.kv.ListKeys(ctx); err != nil {
		d.log.Warn("listing the state of removed graphs", zap.Error(err))
	} else {
		for key := range keys.Keys() {
			kind, rest, _ := strings.Cut(key, ".")
			name, _, _ := strings.Cut(rest, ".")
			if (kind != "window" && kind != "through") || name == "" || !removed(name) {
				continue
			}
			if d.fenced() != nil {
				return
			}
			if err := d.kv.Purge(ctx, key); err != nil {
				d.log.Warn("deleting the state of a removed graph", zap.String("key", key), zap.Error(err))
				continue
			}
			dropped = append(dropped, key)
		}
	}
	consumers := d.stream.ListConsumers(ctx)
	for info := range consumers.Info() {
		name, ok := strings.CutPrefix(info.Name, consumerName(""))
		if !ok || info.Name == unroutedConsumer || !removed(name) ||
			info.Config.FilterSubject != EventsSubject(d.cfg.Subjects.Prefix, name) {
			continue
		}
		if d.fenced() != nil {
			return
		}
		if err := d.stream.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			d.log.Warn("deleting the consumer of a removed graph", zap.String("consumer", info.Name), zap.Error(err))
			continue
		}
		dropped = append(dropped, "consumer "+info.Name)
	}
	if err := consumers.Err(); err != nil {
		d.log.Warn("listing the consumers of removed graphs", zap.Error(err))
	}
	if ctx.Err() != nil {
		d.log.Warn("deleting the state of removed graphs cut off; the rest is tried at the next start", zap.Error(ctx.Err()))
	}
	if len(dropped) > 0 {
		// Warn: the state of a graph another replica still runs (a config
		// that differs between replicas) would be gone too.
		d.log.Warn("state of graphs no longer configured deleted", zap.Strings("deleted", dropped))
	}
}

// stateMarkerAge is how long a purge marker stays in the state bucket
// before compactState removes it: as long as nats.go's PurgeDeletes
// keeps one by default, for a watcher of the bucket to see the purge.
const stateMarkerAge = 30 * time.Minute

// compactState removes, once per start of the active replica and beside
// the serving, the purge markers and orphaned snapshot parts the state
// bucket holds (see compactBlobs): an older sourcewatch left thousands a
// day. Best effort, as dropRemovedGraphState.
func (d *Daemon) compactState(ctx context.Context) {
	if d.fenced() != nil {
		return
	}
	markers, parts, err := compactBlobs(ctx, d.js, d.kv, d.now().Add(-stateMarkerAge))
	switch {
	case err != nil && ctx.Err() == nil:
		hint := ""
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			// A refused purge is a request with no reply: a timeout, not
			// a permission error, reaches here.
			hint = " (on a server with permissions, the daemon's user needs $JS.API.STREAM.PURGE.KV_" + StateBucket + " for it)"
		}
		d.log.Warn("compacting the state bucket; tried again at the next start"+hint,
			zap.Int("markers_removed", markers), zap.Int("parts_removed", parts), zap.Error(err))
	case markers+parts > 0:
		d.log.Info("state bucket compacted", zap.Int("markers_removed", markers), zap.Int("parts_removed", parts))
	}
}

// restore loads window snapshots and the alert tracker from KV.
func (d *Daemon) restore(ctx context.Context) error {
	switch data, err := getBlob(ctx, d.kv, "tracker"); {
	case err == nil:
		// A failed UnmarshalJSON leaves the (still empty) tracker as it
		// was; it is not replaced, since /status may be reading it.
		if err := d.tracker.UnmarshalJSON(data); err != nil {
			d.log.Warn("alert state in KV unreadable; starting afresh", zap.Error(err))
		}
	case errors.Is(err, errBadBlob):
		d.log.Warn("alert state in KV unreadable; starting afresh", zap.Error(err))
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: reading alert state: %w", ErrNATS, err)
	}
	// With no incident open, a graph's last alert is the resolve the
	// alert stream holds, as before the restart. Only /status and the
	// dashboard show it, so the reads are best effort: one deadline for
	// all, and none after the first failure (a user without read access
	// to the alert stream gets no answer at all).
	lastCtx, cancelLast := context.WithTimeout(ctx, 3*time.Second)
	defer cancelLast()
	var alertStream jetstream.Stream
	readLast := d.js != nil // nil in unit tests of restore alone
	if readLast {
		var err error
		if alertStream, err = d.js.Stream(lastCtx, alerts.StreamName); err != nil {
			readLast = false
			d.log.Debug("reading the last alerts for /status; left empty", zap.Error(err))
		}
	}
	for _, gr := range d.order {
		// An incident open before the restart is the graph's last alert
		// (in /status and on the dashboard) until it is updated or resolved,
		// unless its last alert is still pending: /status lists that apart.
		if a, open := d.tracker.Open(gr.name); open && !slices.ContainsFunc(d.tracker.Pending(gr.name), func(p alerts.Alert) bool { return p.ID == a.ID }) {
			gr.lastAlert.Store(&a)
		} else if !open && readLast && len(d.tracker.Pending(gr.name)) == 0 {
			switch a, ok, err := alerts.Last(lastCtx, alertStream, d.cfg.Subjects.Prefix, gr.name); {
			case err != nil:
				readLast = false
				d.log.Debug("reading the last alerts for /status; left empty", zap.String("graph", gr.name), zap.Error(err))
			case ok && a.Status == alerts.Resolved:
				gr.lastAlert.Store(&a)
			}
		}
		if e, err := d.kv.Get(ctx, "through."+gr.name); err == nil {
			if v, perr := strconv.ParseUint(string(e.Value()), 10, 64); perr == nil {
				gr.through.Store(v)
				gr.throughSaved = v
				gr.resumed.Store(true)
			}
		}
		// A snapshot there but not restored leaves the window empty: the
		// through point saved with it no longer holds, and the replay-gap
		// check measures from the window's own start. (No snapshot at all
		// is the normal state of a window that never applied an event:
		// the periodic snapshot skips an unchanged one.)
		data, err := getBlob(ctx, d.kv, "window."+gr.name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if errors.Is(err, errBadBlob) {
			// Damaged parts: the stream still holds what the window needs.
			d.log.Warn("snapshot unreadable; rebuilding the window from the events stream (those stored within its reach)", zap.String("graph", gr.name), zap.Error(err))
			if err := d.voidThrough(ctx, gr); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: reading snapshot of %q: %w", ErrNATS, gr.name, err)
		}
		var s snapshot
		if err := json.Unmarshal(data, &s); err != nil {
			d.log.Warn("snapshot unreadable; rebuilding the window from the events stream (those stored within its reach)", zap.String("graph", gr.name), zap.Error(err))
			if err := d.voidThrough(ctx, gr); err != nil {
				return err
			}
			continue
		}
		skipped, err := gr.win.restore(s)
		if err != nil {
			d.log.Warn("snapshot unusable; rebuilding the window from the events stream (those stored within its reach)", zap.String("graph", gr.name), zap.Error(err))
			gr.win.reset()
			if err := d.voidThrough(ctx, gr); err != nil {
				return err
			}
			continue
		}
		if len(skipped) > 0 {
			d.log.Warn("snapshot names nodes the graph no longer has", zap.String("graph", gr.name), zap.Int("skipped", len(skipped)))
		}
		// No inference of this process has seen the restored window (the
		// events just before a stop may never have been inferred), so the
		// first tick infers; an unchanged source set publishes nothing.
		gr.inferred.Store(nil)
		gr.snapshotSeq = s.Seq
		gr.resumed.Store(true)
		if !s.StreamCreated.IsZero() {
			gr.streamCreated.Store(s.StreamCreated.UnixNano())
		}
		d.log.Info("window restored", zap.String("graph", gr.name), zap.Uint64("seq", s.Seq), zap.Int("nodes", len(s.Nodes)),
			zap.Int("infected", gr.win.observe(d.now(), nil).infected))
	}
	return nil
}

// voidThrough drops gr's through point when its snapshot could not be
// restored: the window restarts empty and the replay-gap check measures
// from its own start. The stored point is reset too, or a stop before the
// window's replay passed the old point would leave it standing for the
// next start, which would then miss what the stream discarded before it.
// The graph still counts as resumed: it continues an earlier run's window.
func (d *Daemon) voidThrough(ctx context.Context, gr *graphRT) error {
	if err := d.fenced(); err != nil {
		return err
	}
	gr.through.Store(0)
	gr.resumed.Store(true)
	if gr.throughSaved == 0 {
		return nil
	}
	if _, err := d.kv.Put(ctx, "through."+gr.name, []byte("0")); err != nil {
		return fmt.Errorf("%w: resetting through.%s: %w", ErrNATS, gr.name, err)
	}
	gr.throughSaved = 0
	return nil
}

func (d *Daemon) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := d.snapshotAll(ctx, false)
			switch {
			case err != nil && ctx.Err() == nil:
				d.log.Warn("snapshot", zap.Error(err))
				msg := err.Error()
				d.snapshotErr.Store(&msg)
			case err == nil:
				d.snapshotErr.Store(nil)
			}
		}
	}
}

// maxBlobPart is the largest value one KV write of a snapshot carries: the
// connection's max_payload less room for headers.
func (d *Daemon) maxBlobPart() int {
	mp := 0
	if d.nc != nil {
		mp = int(d.nc.MaxPayload())
	}
	if mp <= 0 {
		mp = 1 << 20
	}
	return max(mp-blobPayloadMargin, 4<<10)
}

// snapshotAll writes every window that moved since its last snapshot.
func (d *Daemon) snapshotAll(ctx context.Context, final bool) error {
	var errs []error
	info, infoErr := d.stream.Info(ctx)
	for _, gr := range d.order {
		if gr.streamRenewed.Swap(false) {
			// The positions saved count in a deleted stream's numbers.
			if err := d.voidThrough(ctx, gr); err != nil {
				gr.streamRenewed.Store(true)
				errs = append(errs, fmt.Errorf("graph %q: %w", gr.name, err))
				continue
			}
			gr.snapshotSeq = 0
		}
		s := gr.win.snapshot(gr.name)
		if c := gr.streamCreated.Load(); c != 0 {
			s.StreamCreated = time.Unix(0, c).UTC()
		}
		if s.Seq == gr.snapshotSeq && !final {
			continue
		}
		if err := d.fenced(); err != nil {
			return err
		}
		data, err := json.Marshal(s)
		if err == nil {
			err = putBlob(ctx, d.kv, "window."+gr.name, data, d.maxBlobPart())
		}
		if err != nil {
			d.metrics.snapshots.WithLabelValues("error").Inc()
			errs = append(errs, fmt.Errorf("graph %q: %w", gr.name, err))
			continue
		}
		d.metrics.snapshots.WithLabelValues("ok").Inc()
		gr.snapshotSeq = s.Seq
	}
	if infoErr == nil {
		// The positions saved with the windows fail as the windows do
		// (a KV bucket deleted under the daemon fails these first, as
		// an unmoved window is not written): counted alike, so the
		// snapshot alert fires as /readyz turns not ready.
		for _, gr := range d.order {
			if err := d.saveThrough(ctx, gr, info.State.LastSeq); err != nil {
				d.metrics.snapshots.WithLabelValues("error").Inc()
				errs = append(errs, fmt.Errorf("graph %q: %w", gr.name, err))
			}
		}
		if err := d.saveUnroutedThrough(ctx); err != nil {
			d.metrics.snapshots.WithLabelValues("error").Inc()
			errs = append(errs, err)
		}
	}
	if final {
		if err := d.saveTracker(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// saveThrough records how far along the stream gr's saved window snapshot
// is complete: through last, the stream's last sequence read before this
// call, when the snapshot holds its subject's last event (read after
// last, so no event of the subject up to last is missing) or one its
// through point is past (a window that skipped its subject's events as
// out of reach: bindConsumer), else through the snapshot's own seq. It is what the replay-gap check at the next
// start measures from (reportGap), so a graph without events of its own
// is not taken for one that lost events when other graphs' events are
// discarded. It measures the snapshot, not the live window: after a crash
// the window restarts from the snapshot, and events the window applied
// after it are replayed from the stream, or are a gap if discarded.
func (d *Daemon) saveThrough(ctx context.Context, gr *graphRT, last uint64) error {
	if err := d.fenced(); err != nil {
		return err
	}
	seq := gr.snapshotSeq
	// The snapshot is complete through the later of its own last event
	// and the point known before (the stream's start, at a first start).
	through := max(seq, gr.through.Load())
	m, err := d.stream.GetLastMsgForSubject(ctx, EventsSubject(d.cfg.Subjects.Prefix, gr.name))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound), err == nil && m.Sequence <= through:
		through = max(through, last)
	case err != nil:
		return fmt.Errorf("last event of the graph: %w", err)
	}
	if through <= gr.throughSaved {
		return nil
	}
	if _, err := d.kv.Put(ctx, "through."+gr.name, []byte(strconv.FormatUint(through, 10))); err != nil {
		return fmt.Errorf("saving through.%s: %w", gr.name, err)
	}
	gr.throughSaved = through
	gr.through.Store(through)
	return nil
}

// Reload re-reads the configuration (WithReload), rebuilds the Localizer
// (bundle and plugin) of every graph whose model may have changed and
// swaps them in atomically; the old ones are closed once their in-flight
// inference is done. A graph whose Localizer is healthy, whose last
// inference did not fail and whose Localizer reports itself unchanged for
// the new settings (Unchanged) keeps it, plugin process and all. Events keep flowing throughout. On any failure
// nothing changes. Per-graph settings (bundle, forward plugin and
// params, window, decay, interval, min_changes, min_infected, restarts)
// take effect; the graph set, edge files and the
// daemon-wide settings (NATS, HTTP, workers, data dir) need a restart.
//
// The outcome is kept for /status (last_reload) and the metric
// sourcewatch_config_last_reload_successful, since a failed reload leaves
// the daemon ready on its old setup and would otherwise show only in the
// log.
func (d *Daemon) Reload(ctx context.Context) error {
	d.reloadMu.Lock()
	replaced, err := d.reload(ctx)
	rs := ReloadStatus{At: d.now().UTC(), OK: err == nil}
	if err != nil {
		rs.Error = err.Error()
	}
	d.lastReload.Store(&rs)
	d.metrics.reloadOK.Set(boolGauge(err == nil))
	d.reloadMu.Unlock()
	// Closing a replaced localizer waits for the inference running on it
	// (a Power Grid Solve, a plugin hanging until its call timeout): done
	// outside reloadMu, so another graph's relaunch does not wait for it,
	// and all at once, so the reload takes the longest such wait, not
	// their sum. Reload still returns once every replaced plugin is gone.
	d.closeReplaced(replaced)
	return err
}

// replacedLocalizer is a graph's localizer a reload swapped out, to close.
type replacedLocalizer struct {
	graph string
	h     *locHolder
}

// closeReplaced closes each replaced localizer, each waiting for its own
// graph's running inference, in parallel.
func (d *Daemon) closeReplaced(replaced []replacedLocalizer) {
	var wg sync.WaitGroup
	for _, r := range replaced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.h.close(); err != nil {
				d.log.Warn("closing old localizer", zap.String("graph", r.graph), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

func boolGauge(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// unchangedChecker is a Localizer that can tell whether building it
// from gc now would give the model it runs (the same bundle file, plugin
// binary and settings), so a reload keeps it and its plugin process
// instead of starting another for nothing; one that cannot tell is
// rebuilt. An error (a bundle file gone) means it cannot tell.
type unchangedChecker interface {
	Unchanged(ctx context.Context, gc GraphConfig) (bool, error)
}

// keeps reports whether a reload to gc keeps gr's running localizer: it
// is healthy (a dead or hung plugin is rebuilt, as it was before
// localizers could tell), its last inference did not fail, and it
// reports itself unchanged.
func (d *Daemon) keeps(ctx context.Context, gr *graphRT, gc GraphConfig) bool {
	if !gr.healthy() || gr.failing.Load() {
		// A plugin whose calls fail is healthy as a process; a reload
		// is the operator's way to give it a fresh one.
		return false
	}
	uc, ok := gr.loc.Load().localizer().(unchangedChecker)
	if !ok {
		return false
	}
	same, err := uc.Unchanged(ctx, gc)
	if err != nil {
		// The factory gets to say what is wrong, or to build it anyway.
		d.log.Warn("cannot tell whether the graph's model changed; building it again", zap.String("graph", gr.name), zap.Error(err))
		return false
	}
	return same
}

// relaunchesPerMinute bounds a graph's relaunches, the daemon's and its
// localizers' supervisors' together.
const relaunchesPerMinute = 5

// relaunchBudgeter is a Localizer whose plugin's supervisor takes its
// relaunches from a budget the daemon's relaunches of the graph share.
type relaunchBudgeter interface {
	relaunchBudget() *forward.RelaunchBudget
}

// spanWords says a relaunch span as /readyz has: "a minute" for the
// daemon's.
func spanWords(d time.Duration) string {
	if d == time.Minute {
		return "a minute"
	}
	return d.String()
}

// errRelaunchRate is a relaunch refused for relaunchesPerMinute.
var errRelaunchRate = errors.New("forward plugin relaunched too often")

// graphPrefix is the `graph "NAME": ` that names the graph of a
// localizer factory's error, or "" where the error names it already as
// its config key (BundleLocalizers' graphs[NAME]...).
func graphPrefix(name string, err error) string {
	if strings.HasPrefix(err.Error(), "graphs["+name+"]") {
		return ""
	}
	return fmt.Sprintf("graph %q: ", name)
}

// reload is Reload under reloadMu. It swaps in the new localizer of
// every graph it does not keep and returns the ones it replaced, for
// Reload to close once the lock is released: closing one waits for its
// graph's running inference, which must not hold the other graphs on
// their old bundles and settings meanwhile.
func (d *Daemon) reload(ctx context.Context) ([]replacedLocalizer, error) {
	select {
	case <-d.ready:
	default:
		if d.standby.Load() != nil {
			// Nothing runs to reload: the file is checked now and read
			// again at takeover.
			return nil, d.checkOnStandby(ctx)
		}
		// Nothing runs to reload yet: the file is checked now, so a
		// broken one is reported at once, and read again once started.
		cfg, err := d.checkFile(ctx)
		if err != nil {
			return nil, err
		}
		if msg := d.waiting.Load(); msg != nil && cfg != nil && cfg.NATS.URL != d.cfg.NATS.URL {
			// nats.url is a daemon-wide setting: no reload changes it.
			return nil, fmt.Errorf("%w: not started yet (%s), and nats.url changed in the file; to use it, restart the daemon", ErrReload, *msg)
		}
		d.reloadAfterStart = true
		d.log.Info("reload requested during the start: config file checked; it is read again and applied once started")
		return nil, nil
	}
	cfg := d.Config()
	if d.reloadCfg != nil {
		var err error
		if cfg, err = d.reloadCfg(ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrReload, err)
		}
		if err := d.validate(cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrReload, err)
		}
	}
	if err := d.sameGraphs(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	// The cheap checks of every graph first, so a reload names each graph
	// it refuses, as the start does, rather than the first one built.
	if err := d.preflightAll(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	// built[i] is graph i's new localizer, nil where the running one is
	// kept. gr.loc cannot change meanwhile: a relaunch holds reloadMu.
	built := make([]Localizer, len(cfg.Graphs))
	var kept []string
	for i, gc := range cfg.Graphs {
		if d.keeps(ctx, d.order[i], gc) {
			kept = append(kept, gc.Name)
			continue
		}
		l, err := d.factory(ctx, gc, d.order[i].g)
		if err != nil {
			// Only those built here: the kept ones run on, as does
			// every graph's current localizer.
			for _, b := range built {
				if b != nil {
					_ = b.Close()
				}
			}
			return nil, fmt.Errorf("%w: %s%w%s", ErrReload, graphPrefix(gc.Name, err), err, edgesChangedHint(gc, d.order[i].g, err))
		}
		built[i] = l
	}
	var changed []string
	replaced := make([]replacedLocalizer, 0, len(d.order))
	for i, gr := range d.order {
		gc := cfg.Graphs[i]
		changed = append(changed, changedKeys(fmt.Sprintf("graphs[%s].", gr.name), *gr.gc.Load(), gc)...)
		gr.gc.Store(&gc)
		gr.win.setParams(gc.Window, gc.Decay)
		if built[i] == nil {
			// Kept: the same model and plugin process, so its relaunch
			// budget, its last relaunch error and the incident it has
			// inferred stand.
			continue
		}
		if was, now := modelOf(gr.loc.Load().localizer()), modelOf(built[i]); was != now {
			// A bundle retrained in place changes no key.
			changed = append(changed, fmt.Sprintf("graphs[%s].model", gr.name))
		}
		gr.relaunchErr.Store(nil)
		// A new localizer, maybe a fixed plugin: a full relaunch budget.
		gr.relaunches.Store(0)
		gr.diedInCall.Store(false)
		replaced = append(replaced, replacedLocalizer{graph: gr.name, h: gr.loc.Swap(&locHolder{l: built[i]})})
		// The new model has not seen the window: an open incident is
		// inferred again at the next tick (published only if its source
		// set changes).
		gr.inferred.Store(nil)
	}
	d.current.Store(d.keepStartOnly(cfg))
	d.log.Info("reloaded", zap.Int("graphs", len(d.order)), zap.Strings("changed", changed), zap.Strings("kept", kept), zap.Strings("models", d.models()))
	return replaced, nil
}

// keepStartOnly returns file's graph settings with the daemon-wide ones it
// runs on, which only a restart changes, and warns of those the file
// changed, so an edited events.max_age or http.addr followed by a reload
// does not look applied.
func (d *Daemon) keepStartOnly(file Config) *Config {
	running := d.Config()
	if file.HA.Replica == "" {
		file.HA.Replica = running.HA.Replica // Run named it
	}
	if keys := StartOnlyChanges(running, file); len(keys) > 0 {
		d.log.Warn("config keys changed in the file are read at start only: restart to apply them; the running values stay",
			zap.Strings("keys", keys))
	}
	running.Graphs = file.Graphs
	return &running
}

// modelOf is l's model, zero when it does not say.
func modelOf(l Localizer) ModelInfo {
	if mr, ok := l.(modelReporter); ok {
		return mr.Model()
	}
	return ModelInfo{}
}

// models describes each graph's model as graph=bundle (forward version),
// so a log line says which bundle serves, even when a reload read a file
// retrained in place, whose path did not change.
func (d *Daemon) models() []string {
	var out []string
	for _, gr := range d.order {
		h := gr.loc.Load()
		if h == nil {
			continue
		}
		if mr, ok := h.l.(modelReporter); ok {
			m := mr.Model()
			out = append(out, fmt.Sprintf("%s=%s (%s %s)", gr.name, m.Bundle, m.Forward, m.ForwardVersion))
		}
	}
	return out
}

// changedKeys lists the config keys (prefix + mapstructure tag) whose
// values differ between a and b, for the reload's log line.
func changedKeys(prefix string, a, b GraphConfig) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := 0; i < va.NumField(); i++ {
		tag := va.Type().Field(i).Tag.Get("mapstructure")
		if tag != "" && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, prefix+tag)
		}
	}
	return out
}

// logLimiter logs a kind of problem at most once per interval, with the
// number of occurrences it held back. What it held back after the last
// line of a kind is reported by flush, so a burst that stops is not
// under-counted until the problem comes back.
type logLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	now      func() time.Time
	log      *zap.Logger
	last     map[string]time.Time
	held     map[string]int
	msg      map[string]string
	level    map[string]zapcore.Level // of kinds logged above warn
}

func newLogLimiter(interval time.Duration, now func() time.Time, log *zap.Logger) *logLimiter {
	return &logLimiter{interval: interval, now: now, log: log, last: map[string]time.Time{}, held: map[string]int{}, msg: map[string]string{}}
}

// httpErrorLog is the HTTP server's ErrorLog output: each line a
// rate-limited warning.
type httpErrorLog struct{ l *logLimiter }

func (w httpErrorLog) Write(p []byte) (int, error) {
	w.l.warn("http.server", "http server error", zap.String("error", strings.TrimSpace(string(p))))
	return len(p), nil
}

func (l *logLimiter) warn(kind, msg string, fields ...zap.Field) {
	l.logAt(zapcore.WarnLevel, kind, msg, fields...)
}

// logAt is warn at another level.
func (l *logLimiter) logAt(level zapcore.Level, kind, msg string, fields ...zap.Field) {
	l.mu.Lock()
	now := l.now()
	if level != zapcore.WarnLevel {
		if l.level == nil {
			l.level = map[string]zapcore.Level{}
		}
		l.level[kind] = level
	}
	if now.Sub(l.last[kind]) < l.interval {
		l.held[kind]++
		l.msg[kind] = msg
		l.mu.Unlock()
		return
	}
	held := l.held[kind]
	l.last[kind], l.held[kind] = now, 0
	l.mu.Unlock()
	l.log.Log(level, msg, append(fields, zap.String("kind", kind), zap.Int("suppressed", held))...)
}

// mark starts kind's interval now, as a line logged outside the limiter
// (the first of a problem, at a higher level) would have.
func (l *logLimiter) mark(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[kind] = l.now()
}

// ended forgets a kind of problem that has stopped and returns how many of
// its lines were held back since its last one, so that the caller's line
// saying it stopped can count them, and no later flush reports the
// problem as if it went on.
func (l *logLimiter) ended(kind string) (held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held = l.held[kind]
	delete(l.last, kind)
	delete(l.held, kind)
	delete(l.msg, kind)
	delete(l.level, kind)
	return held
}

// flush logs, for each kind whose interval has passed since its last
// line (every kind when all is set, as at shutdown), how many lines it
// held back since then.
func (l *logLimiter) flush(all bool) {
	l.mu.Lock()
	now := l.now()
	type report struct {
		kind, msg string
		held      int
		level     zapcore.Level
	}
	var out []report
	for kind, n := range l.held {
		if n == 0 || (!all && now.Sub(l.last[kind]) < l.interval) {
			continue
		}
		level, ok := l.level[kind]
		if !ok {
			level = zapcore.WarnLevel
		}
		out = append(out, report{kind, l.msg[kind], n, level})
		l.held[kind] = 0
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].kind < out[j].kind })
	for _, r := range out {
		l.log.Log(r.level, r.msg+" (held back since the last line of its kind)", zap.String("kind", r.kind), zap.Int("suppressed", r.held))
	}
}

// flushLoop reports held-back log lines once their interval has passed.
func (l *logLimiter) flushLoop(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush(true)
			return
		case <-t.C:
			l.flush(false)
		}
	}
}

// ErrUnknownNode is returned (wrapped) by the localize endpoint for ids
// the graph does not have. It is graph.ErrUnknownNode, so a caller that
// tests for either matches the graph package's errors and this one's.
var ErrUnknownNode = graph.ErrUnknownNode

// ctxMutex is a mutex whose waiters can give up when their ctx ends. The
// zero value is unlocked.
type ctxMutex struct {
	once sync.Once
	ch   chan struct{}
}

func (m *ctxMutex) lock(ctx context.Context) error {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *ctxMutex) unlock() { <-m.ch }

// maxHTTPConns bounds the HTTP connections open at once; past it a new
// one replaces the one idle longest, or waits for one to close when none
// is idle (see connLimit). Health checks, scrapes and a few dashboards
// need a handful.
const maxHTTPConns = 256
