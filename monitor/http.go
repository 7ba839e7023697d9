package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// metrics live in a registry of the daemon's own, so two daemons in one
// process (as in tests) do not collide.
type metrics struct {
	reg         *prometheus.Registry
	events      *prometheus.CounterVec   // graph, outcome
	deadLetters *prometheus.CounterVec   // reason
	dlFailed    prometheus.Counter       // dead letters that could not be published
	infected    *prometheus.GaugeVec     // graph
	inference   *prometheus.HistogramVec // graph
	inferErrors *prometheus.CounterVec   // graph
	alerts      *prometheus.CounterVec   // graph, status
	pending     *prometheus.GaugeVec     // graph
	pubFailed   *prometheus.CounterVec   // graph
	reloadOK    prometheus.Gauge
	restarts    *prometheus.CounterVec // graph
	snapshots   *prometheus.CounterVec // result
	gap         *prometheus.CounterVec // graph
	backlog     *prometheus.GaugeVec   // graph
	lastApplied *prometheus.GaugeVec   // graph
	requests    *prometheus.CounterVec // graph, result
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_events_total",
			Help: "Events by graph and outcome (applied, refreshed, unchanged, stale, duplicate, deadletter).",
		}, []string{"graph", "outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_deadletters_total",
			Help: "Rejected events, by reason; each is republished to the dead-letter subject or counted in sourcewatch_deadletter_publish_failures_total.",
		}, []string{"reason"}),
		dlFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sourcewatch_deadletter_publish_failures_total",
			Help: "Dead letters that could not be published (after three tries, or one while the dead-letter stream is down).",
		}),
		infected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sourcewatch_window_infected",
			Help: "Nodes infected within the window, at the last scheduler tick.",
		}, []string{"graph"}),
		inference: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sourcewatch_inference_seconds",
			Help:    "Time of one scheduled localization (not svc.localize requests).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"graph"}),
		inferErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_inference_errors_total",
			Help: "Scheduled localizations that failed (not svc.localize requests).",
		}, []string{"graph"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_alerts_total",
			Help: "Alerts published, by graph and status.",
		}, []string{"graph", "status"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sourcewatch_alerts_pending",
			Help: "Alerts made but not yet acknowledged by the alerts stream (a new alert waits behind them).",
		}, []string{"graph"}),
		pubFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_alert_publish_failures_total",
			Help: "Attempts to publish a graph's pending alerts that failed (each retried at the next tick).",
		}, []string{"graph"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sourcewatch_config_last_reload_successful",
			Help: "Whether the last reload (SIGHUP or the reload endpoint) succeeded; 1 before any.",
		}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_plugin_restarts_total",
			Help: "Forward plugin processes relaunched.",
		}, []string{"graph"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_snapshots_total",
			Help: "Window snapshots written to KV, by result.",
		}, []string{"result"}),
		gap: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_events_discarded_unapplied_total",
			Help: "Stream sequence numbers the stream's limits discarded before the graph's window applied them (stream-wide: some may be other graphs' events).",
		}, []string{"graph"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sourcewatch_events_backlog",
			Help: "Messages of the graph's events subject still to deliver after the last one its window applied, as JetStream counted when it delivered that one: growing means ingest falls behind.",
		}, []string{"graph"}),
		lastApplied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sourcewatch_events_last_applied_timestamp_seconds",
			Help: "JetStream's arrival time of the last message the graph's window applied (0 before one); with a backlog, time() minus it is how far behind the window is.",
		}, []string{"graph"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sourcewatch_localize_requests_total",
			Help: "svc.localize requests of a graph past their checks, by result: ok, error (the inference failed or timed out), busy (refused: too many waiting).",
		}, []string{"graph", "result"}),
	}
	m.reg.MustRegister(m.events, m.deadLetters, m.dlFailed, m.infected, m.inference, m.inferErrors,
		m.alerts, m.pending, m.pubFailed, m.reloadOK, m.restarts, m.snapshots, m.gap, m.backlog, m.lastApplied, m.requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range deadReasons {
		m.deadLetters.WithLabelValues(r)
	}
	// Failure series exist from the start, so increase() sees the first.
	m.snapshots.WithLabelValues("ok")
	m.snapshots.WithLabelValues("error")
	m.reloadOK.Set(1)
	return m
}

// handler serves /healthz, /readyz, /status (as the micro endpoint),
// /metrics, the dashboard at /, and with http.pprof Go's profiles under
// /debug/pprof/.
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", d.serveReadyz)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{Registry: d.metrics.reg}))
	mux.HandleFunc("GET /{$}", d.serveDashboard)
	// The message formats, for producers and consumers in other languages.
	for path, schema := range map[string][]byte{
		"/schema/event.v1.json": eventJSONSchema, "/schema/alert.v1.json": alerts.JSONSchema(), "/schema/service.v1.json": serviceJSONSchema,
	} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/schema+json")
			_, _ = w.Write(schema)
		})
	}
	if d.cfg.HTTP.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// serveReadyz answers /readyz: 200 when the daemon is ready, 503 with the
// problems otherwise. With ?graph=NAME it answers for that graph alone:
// the daemon's problems that keep every graph from working (starting,
// standby, NATS, the consumers, the state store) and the graph's own, so
// one graph's unhealthy plugin does not fail the others' probes; 404 for
// a graph the daemon does not run, 400 for an empty or repeated graph.
func (d *Daemon) serveReadyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	names, perGraph := r.URL.Query()["graph"]
	if !perGraph {
		problems := d.readiness()
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": len(problems) == 0, "problems": problems})
		return
	}
	if len(names) != 1 {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": false, "error": fmt.Sprintf("graph is given %d times: name one graph", len(names))})
		return
	}
	problems, err := d.graphReadiness(names[0])
	if err != nil {
		code := http.StatusNotFound
		if !errors.Is(err, ErrUnknownGraph) {
			code = http.StatusBadRequest // an empty name
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": false, "error": err.Error()})
		return
	}
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ready": len(problems) == 0, "graph": names[0], "problems": problems})
}
