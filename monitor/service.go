package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// LocalizeRequest is the body of a request to <prefix>.svc.localize.
type LocalizeRequest struct {
	Graph    string   `json:"graph"`
	Infected []string `json:"infected"`
}

// LocalizeResponse is its answer: the ranked source set.
type LocalizeResponse struct {
	Graph       string          `json:"graph"`
	Sources     []alerts.Source `json:"sources"`
	CredibleSet []string        `json:"credible_set"`
	Threshold   float64         `json:"threshold"`
	Model       alerts.ModelRef `json:"model"`
	InferenceMS float64         `json:"inference_ms"`
}

// GraphStatus is one graph in the status answer.
type GraphStatus struct {
	Name            string        `json:"name"`
	Nodes           int           `json:"nodes"`
	WindowInfected  int           `json:"window_infected"`
	Changes         uint64        `json:"changes"`
	Seq             uint64        `json:"seq"`
	Inflight        bool          `json:"inflight"`
	LocalizerHealth bool          `json:"localizer_healthy"`
	LastError       string        `json:"last_error,omitempty"`
	LastAlert       *alerts.Alert `json:"last_alert,omitempty"`
}

// Status is the answer of <prefix>.svc.status.
type Status struct {
	Version string        `json:"version"`
	Ready   bool          `json:"ready"`
	Graphs  []GraphStatus `json:"graphs"`
}

// Status reports the daemon's graphs.
func (d *Daemon) Status() Status {
	st := Status{Version: Version, Ready: len(d.readiness()) == 0}
	now := d.now()
	for _, gr := range d.order {
		o := gr.win.observe(now, nil)
		_, ch, seq := gr.win.counts()
		gs := GraphStatus{
			Name: gr.name, Nodes: gr.g.N(), WindowInfected: o.infected, Changes: ch, Seq: seq,
			Inflight: gr.inflight.Load(), LocalizerHealth: gr.healthy(), LastAlert: gr.lastAlert.Load(),
		}
		if e := gr.lastErr.Load(); e != nil {
			gs.LastError = *e
		}
		st.Graphs = append(st.Graphs, gs)
	}
	return st
}

// Localize answers a localize request for any configured graph: y is 1 on
// the listed nodes. It waits for an inference of the same graph that is
// already running.
func (d *Daemon) Localize(ctx context.Context, req LocalizeRequest) (LocalizeResponse, error) {
	gr, ok := d.graphs[req.Graph]
	if !ok {
		return LocalizeResponse{}, fmt.Errorf("%w: %q", ErrUnknownGraph, req.Graph)
	}
	y := make([]float64, gr.g.N())
	for _, id := range req.Infected {
		v, ok := gr.g.Index(id)
		if !ok {
			return LocalizeResponse{}, fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, req.Graph, id)
		}
		y[v] = 1
	}
	inf, srcs, dur, err := d.localize(ctx, gr, y)
	if err != nil {
		return LocalizeResponse{}, err
	}
	return LocalizeResponse{
		Graph: req.Graph, Sources: srcs, CredibleSet: alerts.CredibleSet(srcs, alerts.DefaultMass),
		Threshold: inf.Threshold, InferenceMS: float64(dur.Microseconds()) / 1000,
		Model: alerts.ModelRef{Bundle: inf.Model.Bundle, Forward: inf.Model.Forward, ForwardVersion: inf.Model.ForwardVersion},
	}, nil
}

// startService registers the micro service "sourcewatch" with endpoints
// <prefix>.svc.localize, .status and .reload. Handlers derive their
// deadlines from ctx, so shutdown cancels requests in flight. It returns
// only once the server has the endpoint subscriptions (a flush bounded by
// setupCtx), so a client on another connection that sees the daemon ready
// finds responders.
func (d *Daemon) startService(ctx, setupCtx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(d.nc, micro.Config{
		Name:        "sourcewatch",
		Version:     Version,
		Description: "SL-VAE source localization on live event streams",
	})
	if err != nil {
		return nil, fmt.Errorf("%w: micro service: %w", ErrNATS, err)
	}
	grp := svc.AddGroup(d.cfg.Subjects.Prefix + ".svc")
	respond := func(r micro.Request, v any, err error) {
		if err != nil {
			code := "500"
			if errors.Is(err, ErrUnknownGraph) || errors.Is(err, ErrUnknownNode) || errors.Is(err, errBadRequest) {
				code = "400"
			}
			_ = r.Error(code, err.Error(), nil)
			return
		}
		_ = r.RespondJSON(v)
	}
	eps := []struct {
		name string
		h    micro.HandlerFunc
	}{
		{"localize", func(r micro.Request) {
			var req LocalizeRequest
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				respond(r, nil, fmt.Errorf("%w: %w", errBadRequest, err))
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			resp, err := d.Localize(ctx, req)
			respond(r, resp, err)
		}},
		{"status", func(r micro.Request) { respond(r, d.Status(), nil) }},
		{"reload", func(r micro.Request) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			err := d.Reload(ctx)
			respond(r, map[string]bool{"reloaded": err == nil}, err)
		}},
	}
	for _, ep := range eps {
		if err := grp.AddEndpoint(ep.name, ep.h); err != nil {
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
