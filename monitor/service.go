package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// LocalizeRequest is the body of a request to <prefix>.svc.localize.
type LocalizeRequest struct {
	// ID is the caller's own name for the observation, echoed in the
	// answer (as localize's observation files take one).
	ID       string   `json:"id,omitempty"`
	Graph    string   `json:"graph"`
	Infected []string `json:"infected"`
	// Top asks for the Top highest-scored nodes as well (Ranked), whether
	// or not they pass the bundle's threshold: an observation unlike the
	// training data may have no source set but still a ranking. 0: none.
	Top int `json:"top,omitempty"`
}

// LocalizeResponse is its answer: the ranked source set.
type LocalizeResponse struct {
	ID          string          `json:"id,omitempty"`
	Graph       string          `json:"graph"`
	Sources     []alerts.Source `json:"sources"`
	CredibleSet []string        `json:"credible_set"`
	Threshold   float64         `json:"threshold"`
	Model       alerts.ModelRef `json:"model"`
	InferenceMS float64         `json:"inference_ms"`
	// Note is the localizer's note, as in an alert.
	Note string `json:"note,omitempty"`
	// ExpectedSources is the sum of every node's chance, as in an alert;
	// absent when the model does not measure it.
	ExpectedSources *float64 `json:"expected_sources,omitempty"`
	// Ranked is the request's Top highest-scored nodes, best first (node
	// id breaking ties), sources or not; absent when Top is 0.
	Ranked []alerts.Source `json:"ranked,omitempty"`
}

// WindowRequest is the body of a request to <prefix>.svc.window.
type WindowRequest struct {
	Graph string `json:"graph"`
}

// WindowResponse is the graph's observation now: the nodes infected
// within its window, the ones an alert made now would count, for a
// service that wants to localize them itself (svc.localize with top).
type WindowResponse struct {
	Graph string `json:"graph"`
	// Infected are the node ids, in the graph's node order (the ids
	// sorted, as numbers when every id is a non-negative integer without
	// leading zeros or sign, else as strings), not the edge list's.
	Infected []string `json:"infected"`
	// Window is the events' own times of the oldest and newest infection
	// counted (zero times when none is), as in an alert.
	Window alerts.Window `json:"window"`
	// Seq is the events stream's sequence the window applied last.
	Seq        uint64    `json:"seq"`
	ObservedAt time.Time `json:"observed_at"`
}

// Window reports graph's observation now.
func (d *Daemon) Window(req WindowRequest) (WindowResponse, error) {
	gr, err := d.graphNamed(req.Graph)
	if err != nil {
		return WindowResponse{}, err
	}
	now := d.now()
	o := gr.win.observe(now, nil)
	_, _, seq := gr.win.counts()
	resp := WindowResponse{Graph: gr.name, Infected: make([]string, 0, o.infected), Window: alerts.Window{From: o.from, To: o.to}, Seq: seq, ObservedAt: now.UTC()}
	for v, y := range o.y {
		if y > 0 {
			resp.Infected = append(resp.Infected, gr.g.ID(v))
		}
	}
	return resp, nil
}

// graphNamed is the configured graph of that name, or an error naming
// the configured ones.
func (d *Daemon) graphNamed(name string) (*graphRT, error) {
	if gr, ok := d.graphs[name]; ok {
		return gr, nil
	}
	names := make([]string, len(d.order))
	for i, g := range d.order {
		names[i] = g.name
	}
	if name == "" {
		return nil, fmt.Errorf(`%w: "graph" is missing or empty: name one of %s`, errBadRequest, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w: %q (graphs: %s)", ErrUnknownGraph, clip(name), strings.Join(names, ", "))
}

// GraphStatus is one graph in the status answer.
type GraphStatus struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
	// Fingerprint is the graph's content fingerprint (graph.Fingerprint),
	// for a producer to check it publishes ids of the same edge list.
	Fingerprint    string `json:"fingerprint"`
	WindowInfected int    `json:"window_infected"`
	Changes        uint64 `json:"changes"`
	// ChangedSinceInference is how many nodes entered or left the
	// observation's infected set since the last inference of this process
	// (what min_changes is compared with); -1 before the first one.
	ChangedSinceInference int    `json:"changed_since_inference"`
	Seq                   uint64 `json:"seq"`
	Inflight              bool   `json:"inflight"`
	LocalizerHealth       bool   `json:"localizer_healthy"`
	// Standby is true on an HA replica standing by while another holds
	// the lease: it launches no plugin until it takes over, so
	// LocalizerHealth is false by design there, not a failure. Absent
	// (false) otherwise.
	Standby bool `json:"standby,omitempty"`
	// Model is the bundle and forward plugin the graph runs now (since
	// the start, the last reload or relaunch), as an alert names them: with
	// many graphs, how to see which model each serves, and that a reload
	// of one graph's bundle took, before the graph's next alert. Absent
	// when its localizer does not say.
	Model *GraphModel `json:"model,omitempty"`
	// Replaying is whether the window is still applying the events queued
	// before this process bound its consumer; no alert is made meanwhile.
	Replaying bool   `json:"replaying,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// LastAlert is the last alert the stream acknowledged (after a
	// restart: the open incident's, unless that one is pending).
	LastAlert *alerts.Alert `json:"last_alert,omitempty"`
	// PendingAlerts are alerts made but not yet acknowledged by the
	// stream, oldest first; they are retried every interval.
	PendingAlerts []alerts.Alert `json:"pending_alerts,omitempty"`
	// LastAlertID and PendingCount stand for LastAlert and PendingAlerts
	// in an answer too large to send with them (Status.AlertsOmitted).
	LastAlertID  string `json:"last_alert_id,omitempty"`
	PendingCount int    `json:"pending_count,omitempty"`
}

// GraphModel is the model a graph runs, in its status: the bundle and
// forward plugin as an alert names them, and whether that plugin runs
// unchecked.
type GraphModel struct {
	alerts.ModelRef
	// Unverified is true when the running forward plugin was launched
	// with no checksum check (allow_unverified, and no SHA-256 recorded
	// for it by the bundle or pinned by forward_checksum): whatever file
	// was at its path ran. Absent (false) otherwise.
	Unverified bool `json:"unverified,omitempty"`
}

// unverifiedReporter is the optional report of a Localizer whose plugin
// may run with no checksum check (the bundle localizer's).
type unverifiedReporter interface{ Unverified() bool }

// graphModel is l's model for its graph's status, nil when l does not say.
func graphModel(l Localizer) *GraphModel {
	m := modelOf(l)
	if m == (ModelInfo{}) {
		return nil
	}
	gm := &GraphModel{ModelRef: alerts.ModelRef{Bundle: m.Bundle, Forward: m.Forward, ForwardVersion: m.ForwardVersion}}
	if ur, ok := l.(unverifiedReporter); ok {
		gm.Unverified = ur.Unverified()
	}
	return gm
}

// Status is the answer of <prefix>.svc.status.
type Status struct {
	Version string `json:"version"`
	// Commit is the source commit of the build (WithCommit), when known.
	Commit string        `json:"commit,omitempty"`
	Ready  bool          `json:"ready"`
	Graphs []GraphStatus `json:"graphs"`
	// LastReload is the outcome of the last reload (SIGHUP or the reload
	// endpoint), absent before one.
	LastReload *ReloadStatus `json:"last_reload,omitempty"`
	// AlertsOmitted says why the graphs' alerts are left out, with their
	// ids and counts in their stead: the whole answer was over the server's
	// max_payload. Absent when they are there.
	AlertsOmitted string `json:"alerts_omitted,omitempty"`
	// Replica is this process's ha.replica and Active whether it holds
	// the lease and does the work; both absent without HA. Of two
	// daemons answering one prefix, they tell which one this is.
	Replica string `json:"replica,omitempty"`
	Active  *bool  `json:"active,omitempty"`
	// NotReady says why Ready is false, as /readyz does (a standby names
	// the active replica); absent when ready.
	NotReady []string `json:"not_ready,omitempty"`
}

// statusRoom is what a svc.status answer leaves of max_payload for the
// reply's headers.
const statusRoom = 1024

// fitted returns st, or, when its encoding (size bytes) is over limit
// less statusRoom, st with each graph's last and pending alerts replaced
// by the last one's id and the pending count: alerts of long node ids
// or many sources, one per graph, outgrow a message together, and the
// answer would fail for as long as they are the last (past restarts).
func (st Status) fitted(size int, limit int64) Status {
	if limit <= 0 || int64(size) <= limit-statusRoom {
		return st
	}
	st.Graphs = slices.Clone(st.Graphs)
	for i := range st.Graphs {
		gs := &st.Graphs[i]
		if gs.LastAlert != nil {
			gs.LastAlertID = gs.LastAlert.ID
		}
		gs.PendingCount = len(gs.PendingAlerts)
		gs.LastAlert, gs.PendingAlerts = nil, nil
	}
	st.AlertsOmitted = fmt.Sprintf("last_alert and pending_alerts are left out: with them the answer is %d bytes, over the server's max_payload of %d; GET /status holds them, and the alert stream each alert by id", size, limit)
	return st
}

// ReloadStatus is the outcome of one reload: a failed one left the
// running setup as it was.
type ReloadStatus struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// Status reports the daemon's graphs.
func (d *Daemon) Status() Status {
	problems := d.readiness()
	st := Status{Version: Version, Commit: d.commit, Ready: len(problems) == 0, NotReady: problems, LastReload: d.lastReload.Load()}
	if d.cfg.HA.Enabled {
		l := d.held.Load()
		active := l != nil && !l.lost.Load() && time.Now().Before(l.until())
		st.Replica, st.Active = d.cfg.HA.Replica, &active
	}
	now := d.now()
	standby := d.standby.Load() != nil
	for _, gr := range d.order {
		o := gr.win.observe(now, nil)
		_, ch, seq := gr.win.counts()
		gs := GraphStatus{
			Name: gr.name, Nodes: gr.g.N(), Fingerprint: gr.g.Fingerprint(), WindowInfected: o.infected, Changes: ch,
			ChangedSinceInference: changedSince(gr.inferred.Load(), o.y), Seq: seq,
			Inflight: gr.inflight.Load(), LocalizerHealth: gr.healthy(), Standby: standby, LastAlert: gr.lastAlert.Load(),
			Replaying:     gr.replayTo.Load() != 0,
			PendingAlerts: d.tracker.Pending(gr.name),
		}
		if e := gr.lastErr.Load(); e != nil {
			gs.LastError = *e
		}
		gs.Model = graphModel(gr.loc.Load().localizer())
		st.Graphs = append(st.Graphs, gs)
	}
	return st
}

// Localize answers a localize request for any configured graph: y is 1 on
// the listed nodes. It waits for an inference of the same graph that is
// already running.
func (d *Daemon) Localize(ctx context.Context, req LocalizeRequest) (LocalizeResponse, error) {
	gr, y, err := d.localizeInput(req)
	if err != nil {
		return LocalizeResponse{}, err
	}
	return d.localizeFor(ctx, gr, y, req)
}

// localizeInput checks req and returns its graph and observation.
func (d *Daemon) localizeInput(req LocalizeRequest) (*graphRT, []float64, error) {
	gr, err := d.graphNamed(req.Graph)
	if err != nil {
		return nil, nil, err
	}
	if len(req.Infected) == 0 {
		return nil, nil, fmt.Errorf(`%w: "infected" is missing or empty: nothing to localize`, errBadRequest)
	}
	if req.Top < 0 {
		return nil, nil, fmt.Errorf(`%w: "top" is %d: want a count of nodes, 0 for none`, errBadRequest, req.Top)
	}
	y := make([]float64, gr.g.N())
	for _, id := range req.Infected {
		v, ok := gr.g.Index(id)
		if !ok {
			return nil, nil, fmt.Errorf("%w: graph %q has no node %q%s", ErrUnknownNode, req.Graph, clip(id), gr.g.UnknownIDHint(clip(id)))
		}
		y[v] = 1
	}
	return gr, y, nil
}

// localizeFor answers req, checked by localizeInput, on gr's observation y.
func (d *Daemon) localizeFor(ctx context.Context, gr *graphRT, y []float64, req LocalizeRequest) (LocalizeResponse, error) {
	inf, srcs, dur, err := d.localize(ctx, gr, y)
	if err != nil {
		return LocalizeResponse{}, err
	}
	return LocalizeResponse{
		ID: req.ID, Graph: req.Graph, Sources: srcs, CredibleSet: alerts.CredibleSet(srcs, alerts.DefaultMass),
		Threshold: inf.Threshold, InferenceMS: float64(dur.Microseconds()) / 1000,
		Model:           alerts.ModelRef{Bundle: inf.Model.Bundle, Forward: inf.Model.Forward, ForwardVersion: inf.Model.ForwardVersion},
		Note:            inf.Note,
		Ranked:          topScored(gr.g, inf, req.Top),
		ExpectedSources: localize.ExpectedSources(inf.Chance),
	}, nil
}

// topScored is the k highest-scored nodes of inf (all of them when k is
// more), best first, node id breaking ties; nil for k = 0. inf's shape
// was checked by rankSources.
func topScored(g *graph.Graph, inf Inference, k int) []alerts.Source {
	k = min(k, g.N())
	if k <= 0 {
		return nil
	}
	all := make([]alerts.Source, g.N())
	for v := range all {
		all[v] = alerts.Source{Node: g.ID(v), Score: inf.Scores[v], Probability: inf.Probability[v], Chance: chanceOf(inf, v)}
	}
	slices.SortStableFunc(all, byRank)
	return all[:k:k]
}

// serviceMetadata is the micro service's metadata: the subjects prefix
// and the build's commit, when known.
func (d *Daemon) serviceMetadata() map[string]string {
	// The prefix tells daemons of one account apart, and ha replicas
	// from a daemon without it (checkNoOtherDaemon).
	meta := map[string]string{"prefix": d.cfg.Subjects.Prefix, "ha": strconv.FormatBool(d.cfg.HA.Enabled)}
	if d.cfg.HA.Enabled {
		meta["replica"] = d.cfg.HA.Replica
	}
	if d.commit != "" {
		meta["commit"] = d.commit
	}
	return meta
}

// serviceName is the micro service every daemon registers.
const serviceName = "sourcewatch"

// checkNoOtherDaemon asks the account's sourcewatch services (a micro
// PING) whether one serves this daemon's prefix that it cannot share the
// prefix with, and returns ErrAnotherDaemon naming it if so: without HA,
// any; with HA, one without it (HA replicas leave it to the lease, and
// only the active one answers). Nothing else stops a daemon without HA
// beside another on an external server (an embedded one's data_dir is
// locked): the two would delete each other's consumers and each open its
// own incident of a graph, one never resolved, and an HA replica beside
// one publishes the same incident's seqs with other content. A daemon
// stopped hard has no connection left to answer, so a restart is not
// refused. Best effort: two started in the same instant both pass, and a
// build older than this check does not say its prefix or whether it runs
// with HA (it is warned of, not refused).
func (d *Daemon) checkNoOtherDaemon(ctx context.Context) error {
	inbox := d.nc.NewRespInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("%w: asking for other daemons: %w", ErrNATS, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := d.nc.PublishRequest("$SRV.PING."+serviceName, inbox, nil); err != nil {
		return fmt.Errorf("%w: asking for other daemons: %w", ErrNATS, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			return nil // no more answers within the wait
		}
		if m.Header.Get("Status") == "503" {
			return nil // no service answers at all (no responders)
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) != nil {
			continue
		}
		prefix, said := p.Metadata["prefix"]
		ha, saidHA := p.Metadata["ha"]
		switch {
		case prefix == d.cfg.Subjects.Prefix && !d.cfg.HA.Enabled:
			return fmt.Errorf("%w: a daemon (service id %s, version %s%s) serves prefix %q on this NATS account: stop it, give this one another subjects.prefix, or run both as replicas with ha.enabled",
				ErrAnotherDaemon, p.ID, p.Version, commitOf(p.Metadata), prefix)
		case prefix == d.cfg.Subjects.Prefix && ha == "false":
			return fmt.Errorf("%w: a daemon without ha.enabled (service id %s, version %s%s) serves prefix %q on this NATS account, and an HA replica beside it would publish the same incidents: stop it, or run it as a replica with ha.enabled too",
				ErrAnotherDaemon, p.ID, p.Version, commitOf(p.Metadata), prefix)
		case prefix == d.cfg.Subjects.Prefix && !saidHA:
			d.log.Warn("a sourcewatch daemon of an older build serves this prefix; if it runs without ha.enabled, stop it: an HA replica beside it publishes the same incidents",
				zap.String("service_id", p.ID), zap.String("version", p.Version))
		case !said:
			d.log.Warn("a sourcewatch daemon of an older build runs on this NATS account; if it serves the same prefix, stop one of the two",
				zap.String("service_id", p.ID), zap.String("version", p.Version))
		}
	}
}

func commitOf(meta map[string]string) string {
	if c := meta["commit"]; c != "" {
		return ", commit " + c
	}
	return ""
}

// startService registers the micro service "sourcewatch" with endpoints
// <prefix>.svc.localize, .window, .status and .reload. Handlers derive their
// deadlines from ctx, so shutdown cancels requests in flight. It returns
// only once the server has the endpoint subscriptions (a flush bounded by
// setupCtx), so a client on another connection that sees the daemon ready
// finds responders.
func (d *Daemon) startService(ctx, setupCtx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(d.nc, micro.Config{
		Name:        serviceName,
		Version:     Version,
		Description: "SL-VAE source localization on live event streams",
		Metadata:    d.serviceMetadata(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: micro service: %w", ErrNATS, err)
	}
	grp := svc.AddGroup(d.cfg.Subjects.Prefix + ".svc")
	// respond answers r with v or err. An answer that cannot be sent (over
	// the server's max_payload) is replaced by a short error, so the caller
	// gets a reply instead of a timeout.
	respond := func(r replier, v any, err error) {
		var serr error
		if err != nil {
			code := "500"
			switch {
			case errors.Is(err, ErrUnknownGraph) || errors.Is(err, ErrUnknownNode) || errors.Is(err, errBadRequest):
				code = "400"
			case errors.Is(err, errBusy):
				code = "503"
			}
			serr = r.Error(code, clipN(err.Error(), maxErrorText), nil)
		} else {
			serr = r.RespondJSON(v)
		}
		if serr == nil {
			return
		}
		// Rate-limited: callers choose what makes an answer too large.
		d.limiter.warn("svc_respond", "service response not sent; answering with an error", zap.String("subject", r.Subject()), zap.Error(serr))
		msg := "response not sent: " + clipN(serr.Error(), clipLen)
		// micro wraps the client's error as text only.
		if errors.Is(serr, nats.ErrMaxPayload) || strings.Contains(serr.Error(), nats.ErrMaxPayload.Error()) {
			msg = fmt.Sprintf("response too large (max_payload %d bytes)", d.nc.MaxPayload())
			if strings.HasSuffix(r.Subject(), ".svc.localize") {
				// The one answer whose size the caller sets.
				msg += `: ask for fewer ranked nodes (a smaller "top"), or raise the server's max_payload`
			}
		}
		if ferr := r.Error("500", msg, nil); ferr != nil {
			d.log.Error("service error response not sent", zap.String("subject", r.Subject()), zap.Error(ferr))
		}
	}
	meta := endpointMetadata
	eps := []struct {
		name string
		h    micro.HandlerFunc
	}{
		{"localize", func(r micro.Request) {
			// Strict, unlike localize's observation files (which may be
			// recorded cascades with keys of their own): a request is
			// written for this endpoint, and a misspelt key would
			// otherwise localize nothing infected.
			req, err := decodeLocalizeRequest(r.Data())
			if err != nil {
				respond(r, nil, err)
				return
			}
			gr, y, err := d.localizeInput(req)
			if err != nil {
				respond(r, nil, err)
				return
			}
			if r.Reply() == "" {
				// Published, not requested: nobody would read the answer.
				d.limiter.warn("svc_noreply", "svc.localize message without a reply subject (published rather than requested): not localized",
					zap.String("graph", gr.name))
				return
			}
			// Answered on a goroutine of its own, so one graph's queue
			// does not hold up another's (a handler runs one request at
			// a time), and refused at once past maxLocalizeWaiting: the
			// callers of a storm give up long before a deep queue is
			// worked off, and nothing tells the daemon they did. The
			// goroutine answers through the connection, not r, which
			// micro reads once the handler returns.
			if gr.localizeWaiting.Add(1) > maxLocalizeWaiting {
				gr.localizeWaiting.Add(-1)
				d.metrics.requests.WithLabelValues(gr.name, "busy").Inc()
				respond(r, nil, fmt.Errorf("%w: graph %q has %d localize requests waiting already; retry later", errBusy, gr.name, maxLocalizeWaiting))
				return
			}
			reply := asyncReply{nc: d.nc, subject: r.Subject(), reply: r.Reply()}
			started := d.goRequest(func() {
				defer gr.localizeWaiting.Add(-1)
				ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				// One request at a time waits for the graph's inference,
				// so a scheduled one waits behind one request at most.
				var resp LocalizeResponse
				var err error
				select {
				case gr.localizeTurn <- struct{}{}:
					resp, err = d.localizeFor(ctx, gr, y, req)
					<-gr.localizeTurn
				case <-ctx.Done():
					err = fmt.Errorf("graph %q: waiting for the requests before this one: %w", gr.name, ctx.Err())
				}
				if err != nil && d.stopping() {
					err = fmt.Errorf("%w: the daemon is stopping (%w)", errBusy, err)
				}
				result := "ok"
				if err != nil {
					result = "error"
				}
				d.metrics.requests.WithLabelValues(gr.name, result).Inc()
				respond(reply, resp, err)
			})
			if !started {
				gr.localizeWaiting.Add(-1)
				d.metrics.requests.WithLabelValues(gr.name, "busy").Inc()
				respond(r, nil, fmt.Errorf("%w: the daemon is stopping", errBusy))
			}
		}},
		{"status", func(r micro.Request) {
			// A body asking for one graph's status would be ignored.
			if !emptyBody(r.Data()) {
				respond(r, nil, fmt.Errorf("%w: status takes no request body (got %q): it answers for every graph", errBadRequest, clipN(string(r.Data()), 64)))
				return
			}
			st := d.Status()
			data, err := json.Marshal(st)
			if err != nil {
				respond(r, nil, err)
				return
			}
			respond(r, st.fitted(len(data), d.nc.MaxPayload()), nil)
		}},
		{"window", func(r micro.Request) {
			var req WindowRequest
			if what := decodeRequest(r.Data(), &req, "graph alone"); what != "" {
				respond(r, nil, fmt.Errorf(`%w: want {"graph":"<name>"}: %s`, errBadRequest, what))
				return
			}
			resp, err := d.Window(req)
			respond(r, resp, err)
		}},
		{"reload", func(r micro.Request) {
			// A reload is of the whole config file: a body asking for more
			// (one graph, a setting) would be silently ignored, so it is
			// refused before anything is reloaded.
			if !emptyBody(r.Data()) {
				respond(r, nil, fmt.Errorf("%w: reload takes no request body (got %q): it reads the whole config file again; change the file, then send an empty request", errBadRequest, clipN(string(bytes.TrimSpace(r.Data())), 64)))
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			err := d.Reload(ctx)
			if err != nil {
				// The caller gets the error; the operator should see it too,
				// as after a SIGHUP.
				d.log.Error("reload requested through the service failed; keeping the running setup", zap.Error(err))
			} else {
				d.log.Info("reloaded through the service")
			}
			respond(r, map[string]bool{"reloaded": err == nil}, err)
		}},
	}
	for _, ep := range eps {
		if err := grp.AddEndpoint(ep.name, ep.h, micro.WithEndpointMetadata(meta[ep.name])); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("%w: endpoint %s: %w", ErrNATS, ep.name, err)
		}
	}
	if err := d.nc.FlushWithContext(setupCtx); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("%w: micro service: %w", ErrNATS, err)
	}
	return svc, nil
}

var errBadRequest = errors.New("bad request")

// replier is how a service handler answers: a micro.Request, or an
// asyncReply for an answer sent after the handler returned.
type replier interface {
	Error(code, description string, data []byte, opts ...micro.RespondOpt) error
	RespondJSON(v any, opts ...micro.RespondOpt) error
	Subject() string
}

// asyncReply answers a request on the connection, with micro's error
// headers, once its handler has returned: micro reads a Request's state
// right after the handler, so it must not be used later. Such answers are
// not in micro's endpoint stats ($SRV.STATS), which count the request
// only.
type asyncReply struct {
	nc             *nats.Conn
	subject, reply string
}

func (a asyncReply) Subject() string { return a.subject }

func (a asyncReply) RespondJSON(v any, _ ...micro.RespondOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return a.nc.Publish(a.reply, data)
}

func (a asyncReply) Error(code, description string, data []byte, _ ...micro.RespondOpt) error {
	return a.nc.PublishMsg(&nats.Msg{Subject: a.reply, Data: data,
		Header: nats.Header{micro.ErrorHeader: []string{description}, micro.ErrorCodeHeader: []string{code}}})
}

// goRequest runs f as a service request of its own, unless the daemon is
// stopping (then it returns false): once stopRequests has begun, nothing
// is added to what it waits for.
func (d *Daemon) goRequest(f func()) bool {
	d.reqMu.Lock()
	defer d.reqMu.Unlock()
	if d.reqStopping {
		return false
	}
	d.requests.Go(f)
	return true
}

// stopping reports whether stopRequests has begun.
func (d *Daemon) stopping() bool {
	d.reqMu.Lock()
	defer d.reqMu.Unlock()
	return d.reqStopping
}

// stopRequests refuses new service requests, cancels those running
// (cancel is their context's) and waits for them.
func (d *Daemon) stopRequests(cancel context.CancelFunc) {
	d.reqMu.Lock()
	d.reqStopping = true
	d.reqMu.Unlock()
	cancel()
	d.requests.Wait()
}

// errBusy is a localize request refused because maxLocalizeWaiting of its
// graph's are waiting already (code 503).
var errBusy = errors.New("busy")

// maxLocalizeWaiting bounds the localize requests of one graph waiting or
// running at once.
const maxLocalizeWaiting = 16

// decodeRequest decodes data, one request object, into v as strictly as
// an event is read: no key unknown (keys names the known ones) or given
// twice in any case (encoding/json keeps the last; another language's
// reader may keep the first), nothing after the object. It returns what
// was wrong in the request's terms, "" when nothing was.
func decodeRequest(data []byte, v any, keys string) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return requestJSONError(err, keys)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "more after the request object (one JSON object per request)"
	}
	if k := diffusion.RepeatedKey(data); k != "" {
		return fmt.Sprintf("%q is given twice (keys match in any case)", k)
	}
	return ""
}

// decodeLocalizeRequest reads a localize request as strictly as an event:
// one JSON object, no key unknown or given twice (encoding/json keeps the
// last, in any case; another language's reader may keep the first), no
// null node id, and nothing after it.
func decodeLocalizeRequest(data []byte) (LocalizeRequest, error) {
	var wire struct {
		ID       string          `json:"id"`
		Graph    string          `json:"graph"`
		Infected []*string       `json:"infected"`
		Top      json.RawMessage `json:"top"`
	}
	bad := func(what string) (LocalizeRequest, error) {
		return LocalizeRequest{}, fmt.Errorf(`%w: want {"graph":"<name>","infected":[ids...]}: %s`, errBadRequest, what)
	}
	if what := decodeRequest(data, &wire, "graph, infected, top and id"); what != "" {
		return bad(what)
	}
	req := LocalizeRequest{ID: wire.ID, Graph: wire.Graph, Infected: make([]string, len(wire.Infected))}
	for i, id := range wire.Infected {
		if id == nil {
			return bad(fmt.Sprintf(`"infected"[%d] is null, want a node id as a string`, i))
		}
		req.Infected[i] = *id
	}
	if raw := bytes.TrimSpace(wire.Top); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if kind := jsonKind(raw[0]); kind != "number" {
			return bad(fmt.Sprintf(`"top" holds a JSON %s, want a whole number`, kind))
		}
		// JSON has no integer type: 1e2 is a whole number too.
		top, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || top != math.Trunc(top) {
			return bad(fmt.Sprintf(`"top" holds %s, want a whole number`, raw))
		}
		if top < 0 {
			return bad(fmt.Sprintf(`"top" is %s: want a count of nodes, 0 for none`, raw))
		}
		// Past the graph's size it asks for every node anyway.
		req.Top = int(min(top, 1<<31))
	}
	return req, nil
}

// emptyBody reports whether a request body asks for nothing: empty, {} or
// null.
func emptyBody(data []byte) bool {
	body := bytes.TrimSpace(data)
	if len(body) == 0 || bytes.Equal(body, []byte("null")) {
		return true
	}
	// {} however it is spaced ({ }, a pretty-printer's {\n}).
	inner, ok := bytes.CutPrefix(body, []byte("{"))
	if !ok {
		return false
	}
	inner, ok = bytes.CutSuffix(inner, []byte("}"))
	return ok && len(bytes.TrimSpace(inner)) == 0
}

// jsonKind names the JSON type of a value starting with c, as
// encoding/json's errors do.
func jsonKind(c byte) string {
	switch c {
	case '"':
		return "string"
	case '[':
		return "array"
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// requestJSONError says what was wrong with a localize request in the
// request's terms, not Go's (encoding/json names the Go type it decoded
// into).
func requestJSONError(err error, keys string) string {
	want := map[string]string{
		"graph": "a string", "id": "a string", "top": "a whole number",
		"infected": "an array of node ids as strings, as in the edge list",
	}
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the request is empty"
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Sprintf("a JSON %s, want an object", typ.Value)
	case errors.As(err, &typ):
		field, _, _ := strings.Cut(typ.Field, ".")
		if w, ok := want[field]; ok {
			return fmt.Sprintf("%q holds a JSON %s, want %s", field, typ.Value, w)
		}
		return fmt.Sprintf("%q holds a JSON %s", typ.Field, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") + " (a request has " + keys + ")"
	}
	return err.Error()
}

// clipLen is how many bytes of a caller's graph name or node id an error
// text echoes, and maxErrorText how long a service error text may be: it
// travels in a header, and a reply over max_payload would not be sent.
const (
	clipLen      = 64
	maxErrorText = 1024
)

// clip shortens a caller-provided name for an error text.
func clip(s string) string { return clipN(s, clipLen) }

// clipN cuts s to at most n bytes on a rune boundary, marking the cut with
// an ellipsis.
func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// ErrUnknownNode is returned (wrapped) by the localize endpoint for ids
// the graph does not have. It is graph.ErrUnknownNode, so a caller that
// tests for either matches the graph package's errors and this one's.
var ErrUnknownNode = graph.ErrUnknownNode

// endpointMetadata is what `nats micro info sourcewatch` and $SRV.INFO
// show of each endpoint, so a client in another language finds the
// request format and the answer's fields there.
var endpointMetadata = map[string]map[string]string{
	"localize": {
		"request":  `{"graph": "<name>", "infected": ["<node id>", ...], "top": <n, optional>, "id": "<yours, optional>"}`,
		"response": "graph, sources [{node, score, probability, chance, floor}], credible_set, threshold, model, inference_ms, note, expected_sources, ranked [{node, score, probability, chance}] (with top), id",
	},
	"status": {"request": "empty", "response": "version, commit, ready, not_ready, replica, active, graphs [...], last_reload, alerts_omitted"},
	"reload": {"request": "empty: reads the whole config file again", "response": `{"reloaded": true}`},
	"window": {"request": `{"graph": "<name>"}`, "response": "graph, infected [node ids], window {from, to}, seq, observed_at"},
}
