package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
)

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

func (d *Daemon) resolve(ctx context.Context, gr *graphRT) {
	if !d.flush(ctx, gr, 1) {
		return
	}
	o := gr.win.observe(d.now(), nil)
	if o.infected >= gr.gc.Load().MinInfected {
		// Infections since the tick that queued this job (it can wait
		// behind other graphs' inferences) brought the window back: the
		// incident goes on, and the next tick infers it.
		return
	}
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
