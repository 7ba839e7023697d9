package monitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

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
	last := time.Now() // the last tick (or the start)
	for {
		gc := gr.gc.Load()
		t := time.NewTimer(gc.Interval - time.Since(last))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-gr.retime:
			// A reload changed the interval: the next tick comes the new
			// interval after the last one, or now if that is past.
			t.Stop()
			continue
		case <-t.C:
		}
		last = time.Now()
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
		// The plugin's supervisor refused to relaunch it for the graph's
		// relaunch budget: /readyz says so beside "localizer unhealthy",
		// as for a relaunch of the daemon's own.
		if limit := (*forward.RelaunchLimitError)(nil); errors.As(err, &limit) {
			msg := relaunchLimitWords(limit)
			gr.relaunchErr.Store(&msg)
		}
		return Inference{}, nil, dur, fmt.Errorf("graph %q: localizing: %w", gr.name, err)
	}
	if gr.healthy() {
		// The plugin is up: a relaunch refused earlier no longer says
		// why it is down.
		gr.relaunchErr.Store(nil)
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
	if inf.Chance != nil && len(inf.Chance) != n {
		return nil, fmt.Errorf("%w: %d chances for %d nodes", ErrBadInference, len(inf.Chance), n)
	}
	if inf.Floor < 0 || inf.Floor > len(inf.Sources) {
		return nil, fmt.Errorf("%w: %d floor sources of %d", ErrBadInference, inf.Floor, len(inf.Sources))
	}
	// Every value an alert or a localize reply can carry lies in [0, 1], as
	// the alert schema says: one outside it (a score of another scale, a
	// NaN JSON cannot encode) would be published to consumers that refuse
	// it, or not published at all.
	if !unit(inf.Threshold) {
		return nil, fmt.Errorf("%w: threshold %v, want a number in [0, 1]", ErrBadInference, inf.Threshold)
	}
	for _, c := range []struct {
		what string
		xs   []float64
	}{{"score", inf.Scores}, {"probability", inf.Probability}, {"chance", inf.Chance}} {
		for v, x := range c.xs {
			if !unit(x) {
				return nil, fmt.Errorf("%w: node %q: %s %v, want a number in [0, 1]", ErrBadInference, g.ID(v), c.what, x)
			}
		}
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
		srcs = append(srcs, alerts.Source{Node: g.ID(v), Score: inf.Scores[v], Probability: inf.Probability[v], Chance: chanceOf(inf, v), Floor: i >= floorFrom})
	}
	slices.SortStableFunc(srcs, byRank)
	return srcs, nil
}

// unit reports whether x is a number in [0, 1] (not NaN).
func unit(x float64) bool { return x >= 0 && x <= 1 }

// chanceOf is node v's chance in inf, nil without one.
func chanceOf(inf Inference, v int) *float64 {
	if inf.Chance == nil {
		return nil
	}
	c := inf.Chance[v]
	return &c
}

// byRank orders sources by score, best first, node id breaking ties: the
// order of an alert's sources and of the localize endpoint's ranking.
func byRank(a, b alerts.Source) int {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c
	}
	return strings.Compare(a.Node, b.Node)
}

func (d *Daemon) infer(ctx context.Context, gr *graphRT) {
	// While an earlier alert cannot be published, no new one is made: it
	// would take the next seq behind one subscribers have not seen.
	if !d.flush(ctx, gr, 1) {
		return
	}
	o := gr.win.observe(d.now(), nil)
	if o.infected < gr.gc.Load().MinInfected {
		// The window fell under min_infected since the tick that queued
		// this job: no incident opens or updates on it, and the next tick
		// resolves an open one.
		return
	}
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
		Graph:           gr.name,
		Window:          alerts.Window{From: o.from, To: o.to},
		Infected:        o.infected,
		Sources:         srcs,
		Threshold:       inf.Threshold,
		Model:           alerts.ModelRef{Bundle: inf.Model.Bundle, Forward: inf.Model.Forward, ForwardVersion: inf.Model.ForwardVersion},
		InferenceMS:     float64(dur.Microseconds()) / 1000,
		Note:            inf.Note,
		MaxBytes:        d.alertMaxBytes(),
		ExpectedSources: localize.ExpectedSources(inf.Chance),
	})
	if publish {
		d.flush(ctx, gr, d.publishAttempts)
	}
}
