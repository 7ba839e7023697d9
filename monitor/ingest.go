package monitor

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

const (
	// ackEvery is how many applied messages one AckAll acknowledgement
	// covers at most; the last pending message is always acked at once.
	ackEvery = 64
	// unroutedConsumer sees the headers of every event message.
	unroutedConsumer = "sourcewatch-unrouted"
	maxAckPending    = 20000
	consumeBatch     = 500
	// maxBadElements is how many bad elements of one message are
	// dead-lettered one by one. Past it the whole message is dead-lettered
	// once more (too_many_bad): a huge array of bad elements would
	// otherwise cost one synchronous publish each, outlast AckWait, and be
	// redelivered and reprocessed over and over.
	maxBadElements = 100
	// progressEvery is how often a message still being dead-lettered
	// tells the server it is in progress, well within the 30 s AckWait.
	progressEvery = 10 * time.Second
	// drainTimeout bounds how long shutdown waits for the consumers to
	// drain before it makes their callbacks give up (abandonTimeout more).
	drainTimeout   = 10 * time.Second
	abandonTimeout = 2 * time.Second
)

func consumerName(graph string) string { return "sourcewatch-" + graph }

// startConsumers (re)creates each graph's durable consumer to deliver from
// just after its snapshot and starts consuming. The consumer is recreated
// rather than resumed because the window in memory is the snapshot's: the
// events acknowledged after it must be seen again.
func (d *Daemon) startConsumers(ctx context.Context) error {
	for _, gr := range d.order {
		if err := d.bindConsumer(ctx, gr); err != nil {
			return err
		}
	}
	return nil
}

// bindConsumer recreates gr's consumer from just after the last message
// its window has applied, and consumes it.
func (d *Daemon) bindConsumer(ctx context.Context, gr *graphRT) error {
	// Deleting the consumer while another replica is active would take
	// its events from under it.
	if err := d.fenced(); err != nil {
		return err
	}
	renewed, err := d.checkEventsStream(ctx, gr)
	if err != nil {
		return err
	}
	name := consumerName(gr.name)
	if err := d.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: resetting consumer %s: %w", ErrNATS, name, err)
	}
	_, _, seq := gr.win.counts()
	subject := EventsSubject(d.cfg.Subjects.Prefix, gr.name)
	// A window that applied nothing yet reads only what was stored
	// within reach of it (see freshStart): a graph added to a running
	// deployment, or added back after its state was dropped, would
	// otherwise read its subject's whole history, dead-lettering each old
	// event as too_old and applying what the removed graph had resolved.
	start := d.freshStart(gr)
	switch last, err := d.stream.GetLastMsgForSubject(ctx, subject); {
	case err == nil && last.Sequence > seq && (seq > 0 || !last.Time.Before(start)):
		gr.replayFrom.Store(d.now().UnixNano())
		gr.replayTo.Store(last.Sequence)
	case err == nil, errors.Is(err, jetstream.ErrMsgNotFound):
		gr.replayTo.Store(0) // nothing queued: alerts at once
		if err == nil && last.Sequence > seq {
			// seq 0, and the subject's last event (so every one before
			// it) out of the window's reach: skipped, as reading them
			// would have dead-lettered them, the window is complete
			// through it. Else the through point would stay where it
			// was until the stream dropped that event, and each start
			// and rebind meanwhile would report what the stream
			// discarded before it as a gap (reportGap, saveThrough).
			gr.through.Store(max(gr.through.Load(), last.Sequence))
		}
	default:
		return fmt.Errorf("%w: last event of %s: %w", ErrNATS, subject, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "sourcewatch window of graph " + gr.name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if seq > 0 {
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = seq + 1
	} else {
		cc.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cc.OptStartTime = &start
		if !renewed { // else checkEventsStream said why
			d.log.Info("graph has applied no events yet; reading those stored since its window began",
				zap.String("graph", gr.name), zap.Time("since", start))
		}
	}
	// A window that continues an earlier run's, or this run's after a
	// rebind, has a gap if the stream discarded what it had not applied,
	// though it applied none of its graph's events yet (seq 0: a graph
	// without events, or whose first was still queued at the last stop).
	// A first start has none: what the stream discarded before was never
	// this daemon's, so the window is complete up to the stream's start.
	if seq > 0 || gr.resumed.Load() || gr.cons.Load() != nil {
		d.reportGap(ctx, gr, seq)
	} else if info, err := d.stream.Info(ctx); err == nil && info.State.FirstSeq > 1 {
		gr.through.Store(max(gr.through.Load(), info.State.FirstSeq-1))
	}
	cons, err := d.stream.CreateConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("%w: consumer %s: %w", ErrNATS, name, err)
	}
	run, err := cons.Consume(func(m jetstream.Msg) { d.handle(gr, m) },
		jetstream.PullMaxMessages(consumeBatch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.limiter.warn("consume."+gr.name, "consumer error", zap.String("graph", gr.name), zap.Error(err))
			if consumerMaybeGone(err) {
				gr.checkConsumer.Store(true)
			}
		}))
	if err != nil {
		return fmt.Errorf("%w: consuming %s: %w", ErrNATS, name, err)
	}
	gr.cons.Store(&consHandle{run})
	return nil
}

// checkEventsStream makes the events stream anew when it was deleted
// under the daemon (an operator's nats stream rm), as the alert stream
// is, and, when the stream gr's window applied its events from is not
// the one there now (deleted and made anew, while the daemon ran or
// between two runs), drops the window's stream position, keeping its
// nodes: the new stream numbers its messages from 1 again, and a
// consumer started after the old position would skip every event until
// the new stream passed it, while /readyz said ready. renewed reports a
// window that kept its nodes so, which it logged.
func (d *Daemon) checkEventsStream(ctx context.Context, gr *graphRT) (renewed bool, err error) {
	info, err := d.stream.Info(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Created, not updated: another replica that made it first wins.
		_, cerr := waitOutStoreRefusal(ctx, func() (jetstream.Stream, error) { return d.js.CreateStream(ctx, eventsStreamConfig(d.cfg)) })
		if cerr != nil && !errors.Is(cerr, jetstream.ErrStreamNameAlreadyInUse) {
			return false, fmt.Errorf("%w: making the deleted events stream %s anew: %w", ErrNATS, EventsStream, cerr)
		} else if cerr == nil {
			d.log.Warn("events stream was deleted; made it anew (the events it held are gone: publish them again if the windows need them)",
				zap.String("stream", EventsStream))
		}
		info, err = d.stream.Info(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("%w: events stream %s: %w", ErrNATS, EventsStream, err)
	}
	created := info.Created.UnixNano()
	before := gr.streamCreated.Swap(created)
	// The window's through point is a position too, also of a window
	// that applied no events (the stream's last at the snapshots).
	_, _, seq := gr.win.counts()
	through, last := gr.through.Load(), info.State.LastSeq
	if max(seq, through) == 0 || (seq <= last && through <= last && (before == 0 || before == created)) {
		return false, nil
	}
	if seq > 0 {
		d.log.Warn("the window applied its events from an events stream since deleted and made anew: keeping its nodes, and reading the new stream from the window's start",
			zap.String("graph", gr.name), zap.Uint64("applied_through_seq", seq), zap.Uint64("stream_last_seq", last),
			zap.Time("stream_created", info.Created))
		gr.win.forgetSeq()
	}
	gr.through.Store(0)
	gr.streamRenewed.Store(true)
	return seq > 0, nil
}

// freshStartMargin covers a NATS server's clock running behind the
// daemon's in freshStart: the server stamps the messages, the daemon's
// clock places the start, so a server behind stamps events within the
// window before it. (One ahead only reads more.)
const freshStartMargin = time.Minute

// freshStart is the stream time from which a window that applied no
// events reads its subject: its window and max_future_skew before now,
// less freshStartMargin. An event stored before it is older than the
// window by its arrival time, and so is one whose ts was within
// max_future_skew of its arrival: either would be dead-lettered as
// too_old, counting for nothing. Only an event stamped further ahead of
// its arrival than max_future_skew, and then left unread until that time
// came, is skipped that would have counted.
func (d *Daemon) freshStart(gr *graphRT) time.Time {
	return d.now().Add(-gr.gc.Load().Window - d.cfg.MaxFutureSkew - freshStartMargin).UTC()
}

// reportGap warns, and counts, when the stream no longer holds the events
// after the point through which the graph's window is complete (seq, the
// last it applied, or later: graphRT.through): its limits (max_msgs,
// max_bytes, max_age) discarded them while the daemon was down or behind,
// so the window may lack them, which no replay can mend. The stream's
// sequence is shared by every graph and whose events they were is lost
// with them, so the gap is an upper bound on this graph's share.
func (d *Daemon) reportGap(ctx context.Context, gr *graphRT, seq uint64) {
	info, err := d.stream.Info(ctx)
	if err != nil {
		d.log.Debug("stream info for the replay gap check", zap.String("graph", gr.name), zap.Error(err))
		return
	}
	// Complete through the later of its own last event and the stream
	// position recorded at the last snapshot (saveThrough).
	base := max(seq, gr.through.Load())
	first := info.State.FirstSeq
	if first <= base+1 {
		return
	}
	lost := first - base - 1
	// Events discarded for their age alone, by a max_age at least the
	// window, had left the window anyway: the default (24h against 1h)
	// after a long stop. A count or size limit at its end may have taken
	// recent ones.
	c, st := info.Config, info.State
	full := (c.MaxMsgs > 0 && st.Msgs >= uint64(c.MaxMsgs)) || (c.MaxBytes > 0 && int64(st.Bytes)+int64(d.cfg.MaxEventBytes) >= c.MaxBytes)
	if gc := gr.gc.Load(); !full && c.MaxAge > 0 && gc != nil && c.MaxAge >= gc.Window {
		d.log.Debug("events aged out of the stream before the window applied them, older than the window", zap.String("graph", gr.name), zap.Uint64("discarded_at_most", lost))
		return
	}
	d.metrics.gap.WithLabelValues(gr.name).Add(float64(lost))
	d.log.Warn("events discarded by the stream's limits before this graph's window applied them: the window lacks them; raise events.max_msgs, max_bytes or max_age if they were this graph's",
		zap.String("graph", gr.name), zap.Uint64("applied_through_seq", base), zap.Uint64("stream_first_seq", first),
		zap.Uint64("discarded_at_most", lost))
}

// consumerMaybeGone reports whether a consume error can mean that the
// consumer no longer exists. nats.go stops consuming only on the server's
// notice to a pull waiting when the consumer is deleted; one deleted
// while no pull waited (during a reconnect, or between two pulls) answers
// every later pull with no responders or nothing at all, and Consume
// pulls again every 30 s for ever.
func consumerMaybeGone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}

// consHandle holds a graph's ConsumeContext, swapped when it is rebound.
type consHandle struct{ cc jetstream.ConsumeContext }

// rebindIfStopped recreates gr's consumer when its consuming stopped on
// its own (the consumer was deleted, or the server lost it). The window
// knows the last sequence it applied, so nothing is skipped.
func (d *Daemon) rebindIfStopped(ctx context.Context, gr *graphRT) {
	h := gr.cons.Load()
	if h == nil || !d.consumingStopped(ctx, h, &gr.checkConsumer, consumerName(gr.name), "rebind."+gr.name, zap.String("graph", gr.name)) {
		return
	}
	if d.ingestCtx.Err() != nil {
		return // stopping (or the lease lost): the consumer is another's now
	}
	// The old callback has returned for good: its ack state is ours.
	gr.pendingAck, gr.sinceAck = nil, 0
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.bindConsumer(bctx, gr); err != nil {
		d.limiter.warn("rebind."+gr.name, "consumer stopped; rebinding failed", zap.String("graph", gr.name), zap.Error(err))
		return
	}
	_, _, seq := gr.win.counts()
	fields := []zap.Field{zap.String("graph", gr.name), zap.Uint64("from_seq", seq+1)}
	now := d.now()
	gr.rebinds = append(slices.DeleteFunc(gr.rebinds, func(t time.Time) bool { return now.Sub(t) > time.Minute }), now)
	if len(gr.rebinds) >= rebindsSuspect {
		fields = append(fields, zap.Int("rebinds_last_minute", len(gr.rebinds)), zap.String("hint", rebindHint))
	}
	d.log.Warn("consumer stopped; rebound", fields...)
}

// consumingStopped reports whether h's consuming has stopped for good: on
// its own, or, when check was set by a consume error (consumerMaybeGone),
// because the server says the durable named is gone, in which case it is
// stopped here and waited for.
func (d *Daemon) consumingStopped(ctx context.Context, h *consHandle, check *atomic.Bool, durable, warnKey string, who zap.Field) bool {
	select {
	case <-h.cc.Closed():
		return true
	default:
	}
	if !check.CompareAndSwap(true, false) || !d.consumerGone(ctx, durable) {
		return false
	}
	// Consuming goes on pulling from a consumer that is not there: stop
	// it, so the caller can recreate the consumer.
	h.cc.Stop()
	select {
	case <-h.cc.Closed():
		return true
	case <-time.After(10 * time.Second):
		d.limiter.warn(warnKey, "consumer gone; its consuming did not stop, tried again at the next error", who)
	case <-ctx.Done():
	}
	return false
}

// consumerGone asks the server whether the durable consumer exists; false
// when it does, or when the server cannot say. A stream that is gone took
// its consumers with it: a server restarted on an empty store (its store
// lost, or a new server in its place) has neither, and the consumer,
// found gone only as a consumer of a stream still there, was never bound
// again (nor the stream made anew), while /readyz said ready and every
// producer's publish failed.
func (d *Daemon) consumerGone(ctx context.Context, durable string) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := d.stream.Consumer(cctx, durable)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// rebindsSuspect rebinds of one graph's consumer within a minute suggest
// that something deletes it on purpose: most often a second daemon.
const rebindsSuspect = 3

const rebindHint = "something keeps deleting this consumer: most often another sourcewatch daemon on the same NATS account and subjects.prefix, " +
	"each resetting the other's consumer at every start and rebind; run the two as replicas (ha.enabled) or give each its own prefix or account"

// stopConsumers drains (or stops) every graph consumer and the unrouted
// one (those started), waits for their callbacks to finish, and
// acknowledges what was applied but not yet acked. One deadline bounds the
// wait for all of them together; past it the ingest context is cancelled,
// so a callback stuck dead-lettering gives up and leaves its message
// unacknowledged (it is redelivered and applied again, idempotently), and
// the wait ends abandonTimeout later at the latest.
func (d *Daemon) stopConsumers(drain bool) {
	all := make([]jetstream.ConsumeContext, 0, len(d.order)+1)
	for _, gr := range d.order {
		if h := gr.cons.Load(); h != nil {
			all = append(all, h.cc)
		}
	}
	if h := d.unrouted.cons.Load(); h != nil {
		all = append(all, h.cc)
	}
	for _, cc := range all {
		if drain {
			cc.Drain()
		} else {
			cc.Stop()
		}
	}
	// A drain needs the server: with the connection lost meanwhile (the
	// server stopped just before the daemon), waiting out drainTimeout
	// for it only delays the stop.
	lost := func() bool { return drain && d.nc != nil && !d.nc.IsConnected() }
	ctx, cancel := context.WithTimeout(context.Background(), d.drainTimeout)
	defer cancel()
	start := time.Now()
	if !waitClosed(ctx, all, lost) {
		if lost() {
			d.log.Warn("nats connection lost while the consumers drained; abandoning their messages", zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
		} else {
			d.log.Warn("consumers did not drain in time; abandoning their messages", zap.Duration("waited", d.drainTimeout))
		}
		d.stopIngest()
		actx, acancel := context.WithTimeout(context.Background(), d.abandonTimeout)
		defer acancel()
		waitClosed(actx, all, nil)
	}
	for _, gr := range d.order {
		h := gr.cons.Load()
		if h == nil {
			continue
		}
		select {
		case <-h.cc.Closed():
		default:
			// Its callback may still run: its ack state is not ours.
			d.log.Warn("consumer did not stop", zap.String("graph", gr.name))
			continue
		}
		if gr.pendingAck != nil && drain {
			_ = gr.pendingAck.Ack()
			gr.pendingAck = nil
		}
	}
}

// waitClosed waits until every one of ccs has closed, ctx ends or lost
// (when not nil, polled) reports true, and reports whether all closed.
func waitClosed(ctx context.Context, ccs []jetstream.ConsumeContext, lost func() bool) bool {
	var poll <-chan time.Time
	if lost != nil {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		poll = t.C
	}
	for _, cc := range ccs {
	wait:
		for {
			select {
			case <-cc.Closed():
				break wait
			case <-ctx.Done():
				return false
			case <-poll:
				if lost() {
					return false
				}
			}
		}
	}
	return true
}

// maxScratch is the most decoded elements a graph's scratch slice keeps
// between messages: arrays of up to this many events decode without
// allocating, and one huge array does not pin its size for good.
const maxScratch = 1024

// reusable returns els emptied for the next message: cleared, so it holds
// no message's bytes or error texts, and dropped when it grew past
// maxScratch.
func reusable(els []decoded) []decoded {
	if cap(els) > maxScratch {
		return nil
	}
	clear(els)
	return els[:0]
}

// maxDetailBytes bounds a dead letter's HeaderDetail: the detail quotes
// the offending value, and a header block over 64 KiB is refused by the
// server, which would lose the dead letter.
const maxDetailBytes = 1024

// handle applies one message to gr's window. It runs in the consumer's
// callback, one message at a time. Once the ingest context is cancelled
// (shutdown gave up waiting) it returns without acknowledging: the message
// is redelivered to the next run, which applies it again idempotently.
func (d *Daemon) handle(gr *graphRT, m jetstream.Msg) {
	if d.ingestCtx.Err() != nil || d.fenced() != nil {
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to apply or acknowledge.
		d.limiter.warn("metadata", "message without metadata", zap.Error(err))
		return
	}
	seq := meta.Sequence.Stream
	if _, _, applied := gr.win.counts(); seq <= applied {
		// A redelivery of a message handled already: its AckWait ran out
		// while it waited behind slow dead letters (the unrouted
		// consumer skips these too). Handled again, it was dead-lettered
		// again (one publish per bad element, stored once) and counted
		// again in events_total, which made the wait behind it longer
		// still. Acknowledged (AckAll: with all before it, handled too),
		// or, when a later message's ack is pending, by that one, at
		// once when nothing more is to come.
		ack := m
		switch {
		case gr.pendingAck != nil && meta.NumPending == 0:
			ack = gr.pendingAck
		case gr.pendingAck != nil:
			return
		}
		if err := ack.Ack(); err != nil {
			d.limiter.warn("ack."+gr.name, "ack failed", zap.String("graph", gr.name), zap.Error(err))
		}
		gr.pendingAck, gr.sinceAck = nil, 0
		return
	}
	data := m.Data()
	if len(data) > d.cfg.MaxEventBytes {
		if d.deadLetter(gr, m.Subject(), data, ReasonTooLarge, fmt.Sprintf("%d bytes > max_event_bytes %d", len(data), d.cfg.MaxEventBytes), seq, -1) != nil {
			return
		}
	} else {
		els, array := decodeMessage(gr.scratch, data)
		defer func() { gr.scratch = reusable(els) }()
		now := d.now()
		gc := gr.gc.Load()
		minT, maxT := now.Add(-gc.Window), now.Add(d.cfg.MaxFutureSkew)
		bad := 0
		progressed := time.Now()
		for i := range els {
			el := &els[i]
			if el.reason == "" {
				d.check(gr, el, meta.Timestamp, minT, maxT)
			}
			if el.reason == "" {
				gr.outcomes[gr.win.apply(el.node, el.state, el.ts, el.ev.ID)].Inc()
				continue
			}
			if bad++; bad > maxBadElements {
				// Dead-lettered with the whole message below, but an
				// event all the same: events_total counts each.
				gr.outcomes["deadletter"].Inc()
				continue
			}
			idx := -1
			if array {
				idx = i
			}
			if d.deadLetter(gr, m.Subject(), el.raw, el.reason, el.detail, seq, idx) != nil {
				return
			}
			if time.Since(progressed) >= progressEvery {
				d.inProgress(gr, m)
				progressed = time.Now()
			}
		}
		if bad > maxBadElements {
			detail := fmt.Sprintf("%d of %d elements bad: the first %d were dead-lettered one by one, the rest only in this whole message; the good elements were applied", bad, len(els), maxBadElements)
			if d.deadLetter(gr, m.Subject(), data, ReasonTooManyBad, detail, seq, -1) != nil {
				return
			}
		}
	}
	gr.win.markSeq(seq)
	gr.backlog.Set(float64(meta.NumPending))
	gr.lastApplied.Set(float64(meta.Timestamp.UnixNano()) / 1e9)
	// AckAll: acknowledging this message acknowledges every earlier one,
	// all of which are applied by now.
	gr.sinceAck++
	if gr.sinceAck >= ackEvery || meta.NumPending == 0 {
		if err := m.Ack(); err != nil {
			d.limiter.warn("ack."+gr.name, "ack failed", zap.String("graph", gr.name), zap.Error(err))
		}
		gr.sinceAck, gr.pendingAck = 0, nil
	} else {
		gr.pendingAck = m
	}
}

// inProgress keeps m from being redelivered while it is still being
// dead-lettered, and acknowledges the messages applied before it, whose
// AckWait runs too.
func (d *Daemon) inProgress(gr *graphRT, m jetstream.Msg) {
	if gr.pendingAck != nil {
		_ = gr.pendingAck.Ack()
		gr.pendingAck, gr.sinceAck = nil, 0
	}
	if err := m.InProgress(); err != nil {
		d.limiter.warn("progress."+gr.name, "in-progress ack failed", zap.String("graph", gr.name), zap.Error(err))
	}
}

// check validates a decoded event against the graph and the clock
// (arrival is the message's JetStream time, used when the event has none;
// minT and maxT bound the event time), and fills its node, state and time,
// or its reason. The bounds are compared as time.Time: UnixNano is only
// defined for 1678-2262 and wraps around outside, so a time like year 2611
// would otherwise pass as a recent one.
func (d *Daemon) check(gr *graphRT, el *decoded, arrival, minT, maxT time.Time) {
	v, ok := gr.g.Index(el.ev.Node)
	if !ok {
		el.reason, el.detail = ReasonUnknownNode, fmt.Sprintf("graph %q has no node %q", gr.name, el.ev.Node)
		// Invisible in a log: a decomposed "ë", a trailing space; or
		// ids of another naming scheme ("node-7" for "7").
		el.detail += gr.g.UnknownIDHint(el.ev.Node)
		return
	}
	st, ok := parseState(el.ev.State)
	if !ok {
		el.reason, el.detail = ReasonBadState, fmt.Sprintf("state %q: want infected, recovered or susceptible", el.ev.State)
		if el.ev.State == "" {
			el.detail = `"state" is missing or empty: want infected, recovered or susceptible`
		}
		return
	}
	t := arrival
	if el.ev.TS != "" {
		var err error
		if t, err = parseEventTime(el.ev.TS); err != nil {
			el.reason, el.detail = ReasonBadJSON, fmt.Sprintf("ts %q: want RFC 3339", el.ev.TS)
			if errors.Is(err, errOffsetRange) {
				el.detail += " (" + err.Error() + ")"
			} else {
				el.detail += tsHint(el.ev.TS)
			}
			return
		}
	}
	switch {
	case t.After(maxT):
		// How far ahead, so a producer can tell a clock that runs
		// ahead from a local time written as UTC (hours ahead).
		now := maxT.Add(-d.cfg.MaxFutureSkew)
		el.reason, el.detail = ReasonFutureTS, fmt.Sprintf("%s is %s ahead of the daemon's clock (%s), beyond max_future_skew %s%s",
			timeText(el, t), skewText(t, now), now.UTC().Format(time.RFC3339), d.cfg.MaxFutureSkew, zoneHint(el, t, now))
		return
	case t.Before(minT):
		now := maxT.Add(-d.cfg.MaxFutureSkew)
		el.reason, el.detail = ReasonTooOld, fmt.Sprintf("%s is %s behind the daemon's clock (%s), older than the window %s",
			timeText(el, t), skewText(now, t), now.UTC().Format(time.RFC3339), now.Sub(minT))
		return
	}
	// Within [minT, maxT], both near the clock: UnixNano cannot wrap.
	el.node, el.state, el.ts = v, st, t.UnixNano()
}

// tsHint names the commonest slips of a ts that is no RFC 3339 time:
// no offset (Python's isoformat() of a naive datetime, a local time
// formatted without its zone), a space or a lower-case t between date and
// time, or a lower-case z; "" otherwise.
func tsHint(ts string) string {
	const local = "2006-01-02T15:04:05.999999999"
	switch {
	case isTime(local, ts):
		return " (no offset: end it in Z for UTC, or give the zone's, e.g. +02:00)"
	case len(ts) > 10 && (ts[10] == ' ' || ts[10] == 't') && isTime(time.RFC3339Nano, ts[:10]+"T"+strings.ToUpper(ts[11:])):
		return " (an upper-case T between date and time)"
	case strings.HasSuffix(ts, "z") && isTime(time.RFC3339Nano, ts[:len(ts)-1]+"Z"):
		return " (an upper-case Z)"
	}
	return ""
}

func isTime(layout, s string) bool {
	_, err := time.Parse(layout, s)
	return err == nil
}

// timeText names the time t an event was judged by in a dead letter's
// detail: its ts, or, without one, its arrival, the NATS server's stamp,
// so the producer does not look for a ts it never sent (a server clock
// ahead of the daemon's; a backlog after an outage).
func timeText(el *decoded, t time.Time) string {
	if el.ev.TS == "" {
		return "the arrival time " + t.UTC().Format(time.RFC3339Nano) + " (no ts: the NATS server's clock)"
	}
	return "ts " + t.UTC().Format(time.RFC3339Nano)
}

// skewText is how far later is than earlier, for a dead letter's detail:
// rounded to the millisecond, or "over 100 years" (a time.Duration holds
// at most 292 years, and a year-1 or year-9999 stamp is a bug, not skew).
func skewText(later, earlier time.Time) string {
	const century = 100 * 365 * 24 * time.Hour
	if later.After(earlier.Add(century)) {
		return "over 100 years"
	}
	return later.Sub(earlier).Round(time.Millisecond).String()
}

// zoneHint suggests a time zone mistake when el's ts, t, is ahead of now
// by about a whole number of hours (or half hours), as a local time
// written with a "Z" is: the commonest way for a producer's stamps to be
// far ahead. An event without ts (its arrival time) gets none.
func zoneHint(el *decoded, t, now time.Time) string {
	if el.ev.TS == "" {
		return "" // the server's clock, not a producer's stamp
	}
	ahead := t.Sub(now)
	if ahead < 30*time.Minute || ahead > 15*time.Hour {
		return ""
	}
	if off := ahead % (30 * time.Minute); off > 2*time.Minute && off < 28*time.Minute {
		return ""
	}
	return ": about a whole number of hours, as a local time written as UTC is (give the offset, e.g. +02:00, or stamp in UTC)"
}

// deadLetter republishes a rejected message or array element with the
// reason in a header. Its Nats-Msg-Id is derived from the stream sequence,
// so a redelivery after a crash does not dead-letter it twice, nor count
// it twice in sourcewatch_deadletters_total. A dead
// letter that cannot be published after retries is counted and logged,
// and nil returned: the message goes on. Within dlCooldown of a lost dead
// letter, one short attempt replaces the retries (see Daemon.dlTimeout).
// Only when the ingest context is cancelled (shutdown) does it give up
// early and return its error, and the caller must then leave the message
// unacknowledged.
func (d *Daemon) deadLetter(gr *graphRT, subject string, data []byte, reason, detail string, seq uint64, idx int) error {
	if err := d.fenced(); err != nil {
		return err // left unacknowledged, for the active replica
	}
	detail = clipN(detail, maxDetailBytes)
	graphName := ""
	if gr != nil {
		graphName = gr.name
		// The whole message of too_many_bad is no event of its own:
		// each of its bad elements was counted.
		if reason != ReasonTooManyBad {
			gr.outcomes["deadletter"].Inc()
		}
	}
	d.limiter.warn("deadletter."+reason, "event dead-lettered",
		zap.String("reason", reason), zap.String("detail", detail), zap.String("subject", subject), zap.String("graph", graphName))
	msg := nats.NewMsg(DeadLetterSubject(d.cfg.Subjects.Prefix))
	msg.Data = data
	msg.Header.Set(HeaderReason, reason)
	msg.Header.Set(HeaderSubject, subject)
	if detail != "" {
		msg.Header.Set(HeaderDetail, detail)
	}
	if idx >= 0 {
		msg.Header.Set(HeaderIndex, strconv.Itoa(idx))
	}
	msg.Header.Set(jetstream.MsgIDHeader, d.deadLetterID(seq, idx))
	clipDeadLetter(msg, d.nc.MaxPayload())
	attempts, timeout := 3, d.dlTimeout
	lostAt := d.dlLostAt.Load()
	down := lostAt != 0 && d.now().Sub(time.Unix(0, lostAt)) < d.dlCooldown
	if down {
		attempts, timeout = 1, d.dlProbeTimeout
	}
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			if serr := SleepContext(d.ingestCtx, time.Duration(attempt)*100*time.Millisecond); serr != nil {
				return fmt.Errorf("dead-lettering seq %d: %w", seq, serr)
			}
		}
		ctx, cancel := context.WithTimeout(d.ingestCtx, timeout)
		var ack *jetstream.PubAck
		ack, err = d.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			// A message delivered again (a restart replays from the last
			// snapshot) has its dead letter stored already: counted once,
			// as the stream holds it once.
			if !ack.Duplicate {
				d.metrics.deadLetters.WithLabelValues(reason).Inc()
			}
			if lostAt != 0 && d.dlLostAt.CompareAndSwap(lostAt, 0) {
				d.log.Info("dead letters are stored again", zap.String("subject", msg.Subject))
			}
			return nil
		}
		if cerr := d.ingestCtx.Err(); cerr != nil {
			return fmt.Errorf("dead-lettering seq %d: %w", seq, cerr)
		}
		if attempt == 0 && !down {
			d.remakeDeadLetterStream()
		}
	}
	d.metrics.deadLetters.WithLabelValues(reason).Inc()
	d.metrics.dlFailed.Inc()
	d.dlLostAt.Store(d.now().UnixNano())
	if down {
		d.limiter.warn("deadletter.lost", "dead letter lost while the dead-letter stream is down",
			zap.String("reason", reason), zap.String("subject", subject), zap.Error(err))
		return nil
	}
	d.log.Error("dead letter lost; until one is stored, or for "+d.dlCooldown.String()+", each dead letter gets one try of "+d.dlProbeTimeout.String()+" so that ingest goes on",
		zap.String("reason", reason), zap.String("subject", subject), zap.Error(err))
	return nil
}

// remakeDeadLetterStream makes the dead-letter stream anew, as the start
// does, when a dead letter's publish failed because the stream is gone
// (deleted under the daemon): a publish to a subject no stream keeps is
// never acknowledged, and every dead letter would be lost until a
// restart. The dead letters it held went with it.
func (d *Daemon) remakeDeadLetterStream() {
	ctx, cancel := context.WithTimeout(d.ingestCtx, 5*time.Second)
	defer cancel()
	if _, err := d.js.Stream(ctx, DeadLetterStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if d.fenced() != nil {
		return
	}
	if _, err := updateStream(ctx, d.js, deadLetterStreamConfig(d.cfg), "dead-letter", d.log); err != nil {
		d.limiter.warn("deadletter_stream", "dead-letter stream gone; making it anew failed", zap.Error(err))
		return
	}
	d.log.Warn("dead-letter stream was deleted; made it anew (the dead letters it held are gone)", zap.String("stream", DeadLetterStream))
}

// deadLetterID is a dead letter's Nats-Msg-Id, sw-dl-<c>-<seq>[-<idx>]:
// the events stream's creation time c (Unix nanoseconds), the event's
// sequence in it and its index in an array. A redelivery is stored once.
// The sequence alone collided, for the dead-letter stream's 24-hour
// duplicate window, with the events of a stream made anew, whose
// sequences start over: they were acknowledged as duplicates and never
// stored.
func (d *Daemon) deadLetterID(seq uint64, idx int) string {
	var created int64
	if info := d.stream.CachedInfo(); info != nil {
		created = info.Created.UnixNano()
	}
	id := "sw-dl-" + strconv.FormatInt(created, 10) + "-" + strconv.FormatUint(seq, 10)
	if idx >= 0 {
		id += "-" + strconv.Itoa(idx)
	}
	return id
}

// clipDeadLetter cuts msg's body to what fits the server's max_payload
// with its headers, and says so in HeaderTruncated (the original length):
// the headers added to an event just under the limit would otherwise make
// its dead letter too large to publish, and the event would be lost from
// both streams. maxPayload <= 0 (not known) leaves msg as it is.
func clipDeadLetter(msg *nats.Msg, maxPayload int64) {
	if maxPayload <= 0 {
		return
	}
	// The encoded header block: "NATS/1.0\r\n", "Key: value\r\n" per
	// value, "\r\n"; with room for the truncation header itself.
	size := int64(len("NATS/1.0\r\n\r\n")) + int64(len(HeaderTruncated)+4+20)
	for k, vs := range msg.Header {
		for _, v := range vs {
			size += int64(len(k) + len(v) + 4)
		}
	}
	room := maxPayload - size
	if int64(len(msg.Data)) <= room {
		return
	}
	msg.Header.Set(HeaderTruncated, strconv.Itoa(len(msg.Data)))
	msg.Data = msg.Data[:max(room, 0)]
}

// unroutedRT is the consumer of every event message's headers, which
// dead-letters those on subjects no graph is configured for.
type unroutedRT struct {
	cons atomic.Pointer[consHandle]
	// check is set by a consume error that can mean the consumer is gone
	// (consumerMaybeGone); watchUnrouted then asks the server.
	check atomic.Bool
	// through is the stream sequence of the last message this daemon
	// handled (messages are handled in order), or the floor of the
	// consumer it replaced at start: a rebind starts after it, so a
	// deletion neither skips an unrouted event nor sends the stream's
	// older ones to the dead letters again.
	through atomic.Uint64
	// created is the creation time (Unix ns) of the events stream through
	// counts in: a rebind onto a stream made anew since (its sequences
	// start over) reads it from its start.
	created atomic.Int64
	// rebinds are the times of the rebinds within the last minute, and
	// token names this process in the consumer's metadata (only the
	// start, then watchUnrouted, touch them).
	rebinds []time.Time
	token   string
	// saved is the position last stored in the state bucket, and
	// savedCreated its stream's creation time (read at the start, then
	// only by the snapshots, which run one at a time).
	saved        uint64
	savedCreated int64
}

// startUnrouted makes the unrouted consumer anew from the first message
// the one it replaces had not acknowledged (the stream's start the first
// time), as a graph's consumer is made anew at each start: a consumer
// kept where it stood would keep the deliveries a replica that died (or
// an earlier run) never handled, and the next AckAll would acknowledge
// them unhandled. Routed messages are acknowledged in bulk (AckAll)
// without their bodies ever being sent.
func (d *Daemon) startUnrouted(ctx context.Context) error {
	var floor uint64
	switch existing, err := d.stream.Consumer(ctx, unroutedConsumer); {
	case err == nil:
		floor = unroutedFloor(existing)
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrNotPullConsumer):
	default:
		return fmt.Errorf("%w: consumer %s: %w", ErrNATS, unroutedConsumer, err)
	}
	floor = max(floor, d.loadUnroutedThrough(ctx))
	if info, err := d.stream.Info(ctx); err == nil {
		d.unrouted.created.Store(info.Created.UnixNano())
	}
	cons, err := d.bindUnrouted(ctx, floor+1)
	if err != nil {
		return fmt.Errorf("%w: consumer %s: %w", ErrNATS, unroutedConsumer, err)
	}
	d.unrouted.through.Store(floor)
	return d.consumeUnrouted(cons)
}

// unroutedKey is the state bucket's key of the unrouted position. A graph
// name holds no dot, so no graph's key ("window.<graph>", "through.<graph>")
// can be it.
const unroutedKey = "unrouted.through"

// unroutedPosition is the stored unrouted position: the stream sequence
// through which every message was handled, with the events stream's
// creation time, so a stream deleted and made again (its sequences start
// over) is not read at the old one's position.
type unroutedPosition struct {
	Through       uint64    `json:"through"`
	StreamCreated time.Time `json:"stream_created"`
}

// loadUnroutedThrough is the stored unrouted position, or 0 where there
// is none, it is unreadable or it belongs to another incarnation of the
// events stream. It matters when the consumer is gone (deleted while no
// daemon ran): without it, the start would scan the whole stream again
// and dead-letter, and count, its unknown-graph events a second time
// (stored once only within the dead-letter stream's duplicate window).
func (d *Daemon) loadUnroutedThrough(ctx context.Context) uint64 {
	e, err := d.kv.Get(ctx, unroutedKey)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			d.log.Warn("reading the unrouted position; starting from the consumer's", zap.Error(err))
		}
		return 0
	}
	var p unroutedPosition
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		d.log.Warn("unrouted position unreadable; starting from the consumer's", zap.String("key", unroutedKey), zap.Error(err))
		return 0
	}
	info, err := d.stream.Info(ctx)
	if err != nil {
		d.log.Warn("reading the events stream; starting the unrouted consumer from its own position", zap.Error(err))
		return 0
	}
	if !info.Created.Equal(p.StreamCreated) || p.Through > info.State.LastSeq {
		d.log.Info("unrouted position belongs to an earlier events stream; not used",
			zap.Uint64("through", p.Through), zap.Time("stream_created", p.StreamCreated))
		return 0
	}
	d.unrouted.saved, d.unrouted.savedCreated = p.Through, p.StreamCreated.UnixNano()
	return p.Through
}

// saveUnroutedThrough stores how far the unrouted consumer has handled
// the stream, when it moved since the last save (with the snapshots, and
// at a clean stop after the consumers drained).
// The position is stored with the creation time of the stream it counts
// in, which is the stream there now only once the consumer was rebound
// onto a stream made anew.
func (d *Daemon) saveUnroutedThrough(ctx context.Context) error {
	if err := d.fenced(); err != nil {
		return err
	}
	u := &d.unrouted
	created := u.created.Load()
	through := u.through.Load()
	if created == 0 || (through <= u.saved && created == u.savedCreated) || u.created.Load() != created {
		// (A rebind onto a stream made anew between the two reads: the
		// pair would mix the streams; the next snapshot saves it.)
		return nil
	}
	data, err := json.Marshal(unroutedPosition{Through: through, StreamCreated: time.Unix(0, created).UTC()})
	if err != nil {
		return fmt.Errorf("encoding %s: %w", unroutedKey, err)
	}
	if _, err := d.kv.Put(ctx, unroutedKey, data); err != nil {
		return fmt.Errorf("saving %s: %w", unroutedKey, err)
	}
	u.saved, u.savedCreated = through, created
	return nil
}

// rebindUnrouted makes the unrouted consumer anew after the last message
// this daemon handled, when its consuming stopped on its own or the
// server lost it, as rebindIfStopped does for a graph's. One recreated by
// someone else meanwhile is replaced: kept where it stood, it could skip
// events (made to deliver new ones) or keep deliveries never handled.
func (d *Daemon) rebindUnrouted(ctx context.Context) {
	h := d.unrouted.cons.Load()
	if h == nil || !d.consumingStopped(ctx, h, &d.unrouted.check, unroutedConsumer, "rebind.unrouted", zap.String("consumer", unroutedConsumer)) {
		return
	}
	if d.ingestCtx.Err() != nil {
		return // stopping (or the lease lost): the consumer is another's now
	}
	// Not cut short by shutdown between the delete and the create, which
	// would leave no consumer and the next start to scan the stream again.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	u := &d.unrouted
	// A stream deleted and made anew numbers its messages from 1 again: a
	// consumer started after the old position would skip the new
	// stream's unknown-graph events until its sequence passed it. So a
	// stream that cannot be read is not bound to: it may be made anew
	// (by a graph's rebind) before the bind, which would then start the
	// new stream at the old position. The next check tries again (the
	// consuming stays stopped).
	info, err := d.stream.Info(bctx)
	if err != nil {
		d.limiter.warn("rebind.unrouted", "consumer stopped; reading the events stream failed, rebinding at the next check",
			zap.String("consumer", unroutedConsumer), zap.Error(err))
		return
	}
	c, prev := info.Created.UnixNano(), u.created.Load()
	if (prev != 0 && c != prev) || u.through.Load() > info.State.LastSeq {
		if u.through.Load() > 0 {
			d.log.Warn("the unrouted consumer read an events stream since deleted and made anew: reading the new stream from its start",
				zap.Uint64("handled_through_seq", u.through.Load()), zap.Time("stream_created", info.Created))
		}
		u.through.Store(0)
	}
	u.created.Store(c)
	from := u.through.Load() + 1
	cons, err := d.bindUnrouted(bctx, from)
	if err == nil {
		err = d.consumeUnrouted(cons)
	}
	if err != nil {
		d.limiter.warn("rebind.unrouted", "consumer stopped; rebinding failed", zap.String("consumer", unroutedConsumer), zap.Error(err))
		return
	}
	fields := []zap.Field{zap.String("consumer", unroutedConsumer), zap.Uint64("from_seq", from)}
	now := d.now()
	u.rebinds = append(slices.DeleteFunc(u.rebinds, func(t time.Time) bool { return now.Sub(t) > time.Minute }), now)
	if len(u.rebinds) >= rebindsSuspect {
		fields = append(fields, zap.Int("rebinds_last_minute", len(u.rebinds)), zap.String("hint", rebindHint))
	}
	d.log.Warn("consumer stopped; rebound", fields...)
}

// bindUnrouted deletes the unrouted consumer if there is one and creates
// it to deliver from the stream sequence from (from the stream's start
// when from <= 1). Dead letters carry their event's stream sequence as
// Nats-Msg-Id, so what is delivered again is stored once.
func (d *Daemon) bindUnrouted(ctx context.Context, from uint64) (jetstream.Consumer, error) {
	if err := d.fenced(); err != nil {
		return nil, err
	}
	cc := d.unroutedConfig()
	if from > 1 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	// A create identical to an existing consumer returns that one: the
	// process's own token makes another replica's (two overlap for a
	// moment at a takeover) ErrConsumerExists, so it is replaced, not
	// shared.
	u := &d.unrouted
	if u.token == "" {
		var b [8]byte
		_, _ = cryptorand.Read(b[:])
		u.token = hex.EncodeToString(b[:])
	}
	cc.Metadata = map[string]string{"sourcewatch_process": u.token}
	for range 3 {
		if err := d.stream.DeleteConsumer(ctx, unroutedConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, err
		}
		cons, err := d.stream.CreateConsumer(ctx, cc)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return cons, err
		}
		// Created again meanwhile: replace that one too.
	}
	return nil, fmt.Errorf("%w: created again each time it was replaced", jetstream.ErrConsumerExists)
}

// watchUnrouted rebinds the unrouted consumer when it stops, checking as
// often as the most frequent graph's interval, within 100ms to 30s.
func (d *Daemon) watchUnrouted(ctx context.Context) {
	for {
		every := 30 * time.Second
		for _, gr := range d.order {
			every = min(every, gr.gc.Load().Interval)
		}
		t := time.NewTimer(max(every, 100*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.rebindUnrouted(ctx)
	}
}

// unroutedFloor is the stream sequence through which cons has handled
// every message: its ack floor, or the sequence before the one it was
// created to start from.
func unroutedFloor(cons jetstream.Consumer) uint64 {
	info := cons.CachedInfo()
	if info == nil {
		return 0
	}
	floor := info.AckFloor.Stream
	if info.Config.DeliverPolicy == jetstream.DeliverByStartSequencePolicy && info.Config.OptStartSeq > 0 {
		floor = max(floor, info.Config.OptStartSeq-1)
	}
	return floor
}

func (d *Daemon) unroutedConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       unroutedConsumer,
		Description:   "sourcewatch: dead-letters events for unknown graphs",
		FilterSubject: d.cfg.Subjects.Prefix + ".events.>",
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
		HeadersOnly:   true,
	}
}

func (d *Daemon) consumeUnrouted(cons jetstream.Consumer) error {
	prefix := d.cfg.Subjects.Prefix + ".events."
	since := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if d.ingestCtx.Err() != nil || d.fenced() != nil {
			return // shutting down: left unacknowledged, redelivered
		}
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		seq := meta.Sequence.Stream
		name := strings.TrimPrefix(m.Subject(), prefix)
		// Every consumer starts after through, so a sequence not past it
		// is a redelivery (the ack wait ran out behind slow dead letters)
		// of one already handled.
		if _, ok := d.graphs[name]; !ok && seq > d.unrouted.through.Load() {
			if d.deadLetterUnrouted(m.Subject(), seq) != nil {
				return
			}
		}
		if seq > d.unrouted.through.Load() {
			d.unrouted.through.Store(seq)
		}
		since++
		if since >= ackEvery*4 || meta.NumPending == 0 {
			_ = m.Ack()
			since = 0
		}
	}, jetstream.PullMaxMessages(consumeBatch*4),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.limiter.warn("consume.unrouted", "consumer error", zap.Error(err))
			if consumerMaybeGone(err) {
				d.unrouted.check.Store(true)
			}
		}))
	if err != nil {
		return fmt.Errorf("%w: consuming %s: %w", ErrNATS, unroutedConsumer, err)
	}
	d.unrouted.cons.Store(&consHandle{cc})
	return nil
}

func (d *Daemon) deadLetterUnrouted(subject string, seq uint64) error {
	if err := d.fenced(); err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(d.ingestCtx, 5*time.Second)
	raw, err := d.stream.GetMsg(gctx, seq)
	cancel()
	var data []byte
	switch {
	case err == nil:
		data = raw.Data
	case d.ingestCtx.Err() != nil:
		return fmt.Errorf("fetching unrouted seq %d: %w", seq, d.ingestCtx.Err())
	default:
		d.log.Warn("fetching unrouted message", zap.Uint64("seq", seq), zap.Error(err))
	}
	return d.deadLetter(nil, subject, data, ReasonUnknownGraph, d.unknownGraphDetail(subject), seq, -1)
}

// unknownGraphDetail says which graph an event's subject names and which
// are configured, with the likely mistake: a name in another case, or
// more tokens after a graph's name.
func (d *Daemon) unknownGraphDetail(subject string) string {
	name := strings.TrimPrefix(subject, d.cfg.Subjects.Prefix+".events.")
	names := make([]string, 0, len(d.order))
	for _, gr := range d.order {
		names = append(names, gr.name)
	}
	detail := fmt.Sprintf("no graph %q is configured (graphs: %s)", name, strings.Join(names, ", "))
	for _, n := range names {
		switch {
		case strings.EqualFold(n, name):
			return detail + fmt.Sprintf("; graph names are case-sensitive: its events go on %s", EventsSubject(d.cfg.Subjects.Prefix, n))
		case strings.HasPrefix(name, n+"."):
			return detail + fmt.Sprintf("; graph %q takes its events on %s, with no token after its name", n, EventsSubject(d.cfg.Subjects.Prefix, n))
		}
	}
	return detail
}
