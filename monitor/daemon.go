package monitor

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
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
	// lastPermErr is the server's last permissions violation, for the
	// setup's error: a JetStream request the user may not make gets no
	// answer, only its timeout.
	lastPermErr atomic.Pointer[string]
	// setupFor bounds the setup's NATS work (streams, bucket, restore);
	// zero is 30 s. Tests shorten it.
	setupFor time.Duration
	// requests are the service requests answered on goroutines of their
	// own (localize); Run waits for them at shutdown. reqMu guards adding
	// to it against reqStopping, so none is added once Run waits.
	requests    sync.WaitGroup
	reqMu       sync.Mutex
	reqStopping bool
	// stateRemade is set when this daemon made the state bucket anew: the
	// next snapshot writes every window, position and the alert state
	// again, not only what moved since the bucket was lost.
	stateRemade atomic.Bool
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
	// dlTimeout bounds each of a dead letter's three publish attempts.
	// Once one is lost, the dead-letter stream is taken to be down (a
	// JetStream cluster without quorum, a store that refuses writes) for
	// dlCooldown: each dead letter then gets one attempt of dlProbeTimeout,
	// so a trickle of bad events does not hold its graph's ingest 15 s
	// apiece, and the first that is stored ends the outage. Tests shorten
	// them.
	dlTimeout, dlProbeTimeout, dlCooldown time.Duration
	// dlLostAt is when the last dead letter was lost (unix ns, 0 when the
	// last one was stored).
	dlLostAt atomic.Int64
}

// graphRT is one graph at run time.
type graphRT struct {
	name string
	g    *graph.Graph
	win  *window
	gc   atomic.Pointer[GraphConfig]
	loc  atomic.Pointer[locHolder]
	// retime tells the scheduler loop that a reload changed the graph's
	// interval, so the tick it waits for is timed anew (setConfig).
	retime chan struct{}

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
		retime:       make(chan struct{}, 1),
		budget:       forward.NewRelaunchBudget(relaunchesPerMinute, time.Minute, func() time.Time { return d.now() })}
	gr.gc.Store(&gc)
	for _, o := range []outcome{outApplied, outRefreshed, outUnchanged, outStale, outDuplicate, "deadletter"} {
		gr.outcomes[o] = d.metrics.events.WithLabelValues(gc.Name, string(o))
	}
	gr.backlog = d.metrics.backlog.WithLabelValues(gc.Name)
	gr.lastApplied = d.metrics.lastApplied.WithLabelValues(gc.Name)
	return gr
}

// setConfig puts gc in place of the graph's settings (a reload's) and,
// when it changes the interval, wakes the scheduler loop to time its next
// tick by the new one: a tick already waited for under the old interval
// held every new setting back that long (an interval cut from 1h to 10s
// took effect up to an hour later).
func (gr *graphRT) setConfig(gc GraphConfig) {
	old := gr.gc.Swap(&gc)
	gr.win.setParams(gc.Window, gc.Decay)
	if old != nil && old.Interval != gc.Interval {
		select {
		case gr.retime <- struct{}{}:
		default:
		}
	}
}

// warnShortInterval warns of a graph's interval below a second, at a
// start and at a reload that sets one: more often a slip (1ms for 1m)
// than meant.
func (d *Daemon) warnShortInterval(graph string, iv time.Duration) {
	if iv < time.Second {
		d.log.Warn("interval below a second: the graph is considered for inference that often (1m is a minute, 1ms a millisecond)",
			zap.String("graph", graph), zap.Duration("interval", iv))
	}
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
		dlTimeout:       5 * time.Second,
		dlProbeTimeout:  500 * time.Millisecond,
		dlCooldown:      30 * time.Second,
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

// Ready is closed once Run is consuming and serving. A Run that fails
// before then (a port in use, a bundle refused) returns its error without
// closing it, so wait for Ready and for Run's return together.
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
	// stoppedUnstarted is it for a stop before the daemon started
	// (waiting for NATS, or standing by), which has no state of its own
	// to write.
	stoppedUnstarted := func() { d.log.Info("sourcewatch stopped", zap.Bool("final_snapshot", false)) }
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
		msg := redactedError{err, cfg.NATS.URL}.Error() + tlsHint(cfg.NATS, err) + CredsValidityHint("nats.creds", cfg.NATS.Creds, err, d.now())
		d.lastConnErr.Store(&msg)
	}, func(err error) {
		// A publish the account may not make fails only by its timeout
		// (an alert "not published ... context deadline exceeded"): this
		// line names the subject and the reason.
		d.limiter.warn("nats_async."+asyncErrKind(err), "error from the NATS server", zap.Error(err))
		if errors.Is(err, nats.ErrPermissionViolation) {
			msg := err.Error()
			d.lastPermErr.Store(&msg)
		}
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
			// Asked to stop first: a clean stop, said as one.
			d.log.Info("stopped while waiting for the first NATS connection")
			stopped = stoppedUnstarted
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
	setupCtx, cancelSetup := context.WithTimeout(ctx, d.setupTimeout())
	defer cancelSetup()
	// Before anything is written: the streams' limits are the running
	// daemon's to keep.
	if err := d.checkNoOtherDaemon(setupCtx); err != nil {
		return d.withPermissionRefusal(err)
	}
	d.stream, d.kv, err = ensureJetStream(setupCtx, js, cfg, d.log)
	if err != nil {
		return d.withPermissionRefusal(err)
	}
	d.kv = fencedKV{KeyValue: d.kv, d: d}
	if err := ensureAlertStream(setupCtx, js, cfg, d.log); err != nil {
		return d.withPermissionRefusal(err)
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
				stopped = stoppedUnstarted
				return nil
			}
			return d.withPermissionRefusal(err)
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
		setupCtx, cancelSetup = context.WithTimeout(ctx, d.setupTimeout())
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
		return d.withPermissionRefusal(err)
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
		d.warnShortInterval(gr.name, gr.gc.Load().Interval)
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
	if connected && !nc.IsConnected() {
		// Lost while the consumers drained (a server stopped just before
		// the daemon): the final snapshot would wait out its deadline.
		connected, finalSaved = false, false
	}
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

// withPermissionRefusal adds to a setup error that timed out the server's
// last permissions violation, if there was one: a JetStream request the
// user may not make is refused only asynchronously, so the setup's own
// error would say no more than "context deadline exceeded".
func (d *Daemon) withPermissionRefusal(err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if why := d.lastPermErr.Load(); why != nil {
		return fmt.Errorf("%w (the NATS server refused this user a permission: %s; the permissions the daemon needs are in README, Security)", err, *why)
	}
	return err
}

// setupTimeout is how long the setup's NATS work may take.
func (d *Daemon) setupTimeout() time.Duration {
	if d.setupFor > 0 {
		return d.setupFor
	}
	return 30 * time.Second
}
