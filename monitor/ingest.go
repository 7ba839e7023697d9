package monitor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	name := consumerName(gr.name)
	if err := d.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: resetting consumer %s: %w", ErrNATS, name, err)
	}
	_, _, seq := gr.win.counts()
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "sourcewatch window of graph " + gr.name,
		FilterSubject: EventsSubject(d.cfg.Subjects.Prefix, gr.name),
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if seq > 0 {
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = seq + 1
	}
	cons, err := d.stream.CreateConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("%w: consumer %s: %w", ErrNATS, name, err)
	}
	run, err := cons.Consume(func(m jetstream.Msg) { d.handle(gr, m) },
		jetstream.PullMaxMessages(consumeBatch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.limiter.warn("consume."+gr.name, "consumer error", zap.String("graph", gr.name), zap.Error(err))
		}))
	if err != nil {
		return fmt.Errorf("%w: consuming %s: %w", ErrNATS, name, err)
	}
	gr.cons.Store(&consHandle{run})
	return nil
}

// consHandle holds a graph's ConsumeContext, swapped when it is rebound.
type consHandle struct{ cc jetstream.ConsumeContext }

// rebindIfStopped recreates gr's consumer when its consuming stopped on
// its own (the consumer was deleted, or the server lost it). The window
// knows the last sequence it applied, so nothing is skipped.
func (d *Daemon) rebindIfStopped(ctx context.Context, gr *graphRT) {
	h := gr.cons.Load()
	if h == nil {
		return
	}
	select {
	case <-h.cc.Closed():
	default:
		return
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
	d.log.Warn("consumer stopped; rebound", zap.String("graph", gr.name), zap.Uint64("from_seq", seq+1))
}

// stopConsumers drains every graph consumer, waits for its callback to
// finish, and acknowledges what was applied but not yet acked.
func (d *Daemon) stopConsumers(drain bool) {
	for _, gr := range d.order {
		h := gr.cons.Load()
		switch {
		case h == nil:
		case drain:
			h.cc.Drain()
		default:
			h.cc.Stop()
		}
	}
	deadline := time.After(10 * time.Second)
	for _, gr := range d.order {
		h := gr.cons.Load()
		if h == nil {
			continue
		}
		select {
		case <-h.cc.Closed():
		case <-deadline:
			d.log.Warn("consumer did not drain", zap.String("graph", gr.name))
			continue
		}
		if gr.pendingAck != nil && drain {
			_ = gr.pendingAck.Ack()
			gr.pendingAck = nil
		}
	}
}

// handle applies one message to gr's window. It runs in the consumer's
// callback, one message at a time.
func (d *Daemon) handle(gr *graphRT, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream message: nothing to apply or acknowledge.
		d.limiter.warn("metadata", "message without metadata", zap.Error(err))
		return
	}
	seq := meta.Sequence.Stream
	data := m.Data()
	if len(data) > d.cfg.MaxEventBytes {
		d.deadLetter(gr, m.Subject(), data, ReasonTooLarge, fmt.Sprintf("%d bytes > max_event_bytes %d", len(data), d.cfg.MaxEventBytes), seq, -1)
	} else {
		els, array := decodeMessage(gr.scratch, data)
		gr.scratch = els[:0]
		now := d.now()
		gc := gr.gc.Load()
		minTS, maxTS := now.Add(-gc.Window).UnixNano(), now.Add(d.cfg.MaxFutureSkew).UnixNano()
		arrival := meta.Timestamp.UnixNano()
		for i := range els {
			el := &els[i]
			idx := -1
			if array {
				idx = i
			}
			if el.reason == "" {
				d.check(gr, el, arrival, minTS, maxTS)
			}
			if el.reason != "" {
				d.deadLetter(gr, m.Subject(), el.raw, el.reason, el.detail, seq, idx)
				continue
			}
			gr.outcomes[gr.win.apply(el.node, el.state, el.ts, el.ev.ID)].Inc()
		}
	}
	gr.win.markSeq(seq)
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

// check validates a decoded event against the graph and the clock, and
// fills its node, state and time, or its reason.
func (d *Daemon) check(gr *graphRT, el *decoded, arrival, minTS, maxTS int64) {
	v, ok := gr.g.Index(el.ev.Node)
	if !ok {
		el.reason, el.detail = ReasonUnknownNode, fmt.Sprintf("graph %q has no node %q", gr.name, el.ev.Node)
		return
	}
	st, ok := parseState(el.ev.State)
	if !ok {
		el.reason, el.detail = ReasonBadState, fmt.Sprintf("state %q: want infected, recovered or susceptible", el.ev.State)
		return
	}
	ts := arrival
	if el.ev.TS != "" {
		t, err := time.Parse(time.RFC3339Nano, el.ev.TS)
		if err != nil {
			el.reason, el.detail = ReasonBadJSON, fmt.Sprintf("ts %q: want RFC 3339", el.ev.TS)
			return
		}
		ts = t.UnixNano()
	}
	switch {
	case ts > maxTS:
		el.reason, el.detail = ReasonFutureTS, fmt.Sprintf("ts %s is beyond max_future_skew", el.ev.TS)
		return
	case ts < minTS:
		el.reason, el.detail = ReasonTooOld, fmt.Sprintf("ts %s is older than the window", time.Unix(0, ts).UTC().Format(time.RFC3339Nano))
		return
	}
	el.node, el.state, el.ts = v, st, ts
}

// deadLetter republishes a rejected message or array element with the
// reason in a header. Its Nats-Msg-Id is derived from the stream sequence,
// so a redelivery after a crash does not dead-letter it twice.
func (d *Daemon) deadLetter(gr *graphRT, subject string, data []byte, reason, detail string, seq uint64, idx int) {
	d.metrics.deadLetters.WithLabelValues(reason).Inc()
	graphName := ""
	if gr != nil {
		graphName = gr.name
		gr.outcomes["deadletter"].Inc()
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
	id := "sw-dl-" + strconv.FormatUint(seq, 10)
	if idx >= 0 {
		msg.Header.Set(HeaderIndex, strconv.Itoa(idx))
		id += "-" + strconv.Itoa(idx)
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = d.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			return
		}
	}
	d.metrics.dlFailed.Inc()
	d.log.Error("dead letter lost", zap.String("reason", reason), zap.String("subject", subject), zap.Error(err))
}

// startUnrouted consumes the headers of every event message and
// dead-letters those on subjects no graph is configured for. Routed
// messages are acknowledged in bulk (AckAll) without their bodies ever
// being sent.
func (d *Daemon) startUnrouted(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := d.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       unroutedConsumer,
		Description:   "sourcewatch: dead-letters events for unknown graphs",
		FilterSubject: d.cfg.Subjects.Prefix + ".events.>",
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: maxAckPending,
		MaxDeliver:    -1,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: consumer %s: %w", ErrNATS, unroutedConsumer, err)
	}
	prefix := d.cfg.Subjects.Prefix + ".events."
	since := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		name := strings.TrimPrefix(m.Subject(), prefix)
		if _, ok := d.graphs[name]; !ok {
			d.deadLetterUnrouted(ctx, m.Subject(), meta.Sequence.Stream)
		}
		since++
		if since >= ackEvery*4 || meta.NumPending == 0 {
			_ = m.Ack()
			since = 0
		}
	}, jetstream.PullMaxMessages(consumeBatch*4),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.limiter.warn("consume.unrouted", "consumer error", zap.Error(err))
		}))
	if err != nil {
		return nil, fmt.Errorf("%w: consuming %s: %w", ErrNATS, unroutedConsumer, err)
	}
	return cc, nil
}

func (d *Daemon) deadLetterUnrouted(ctx context.Context, subject string, seq uint64) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	raw, err := d.stream.GetMsg(gctx, seq)
	cancel()
	var data []byte
	if err == nil {
		data = raw.Data
	} else {
		d.log.Warn("fetching unrouted message", zap.Uint64("seq", seq), zap.Error(err))
	}
	d.deadLetter(nil, subject, data, ReasonUnknownGraph, "no graph is configured for this subject", seq, -1)
}
