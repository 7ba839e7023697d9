package monitor

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
			if why := notRelaunchedWords(gr); why != "" {
				msg += "; " + why
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

func boolGauge(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}
