package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
)

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

// snapshotAll writes every window that moved since its last snapshot,
// every one (with the positions and the alert state) when final or when
// the state bucket was made anew since the last snapshot.
func (d *Daemon) snapshotAll(ctx context.Context, final bool) error {
	var errs []error
	if !final {
		d.checkStateBucket(ctx)
	}
	// A bucket made anew holds only what was written since: everything
	// is written again (a failure leaves the flag for the next snapshot).
	rewrite := d.stateRemade.Swap(false)
	if rewrite {
		for _, gr := range d.order {
			gr.throughSaved = 0
		}
		d.unrouted.saved, d.unrouted.savedCreated = 0, 0
	}
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
		if s.Seq == gr.snapshotSeq && !final && !rewrite {
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
	if final || rewrite {
		if err := d.saveTracker(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if rewrite && len(errs) > 0 {
		d.stateRemade.Store(true)
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
