package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream that keeps alerts.
const StreamName = "SOURCEWATCH_ALERTS"

// Stream limits. Alerts are few and small, so a week of them is cheap and
// lets a late subscriber see last week's incidents; the duplicate window
// covers a crashed monitor restarting from an older tracker snapshot.
const (
	StreamMaxAge     = 7 * 24 * time.Hour
	StreamDuplicates = 24 * time.Hour
)

// Headers set on every published alert besides Nats-Msg-Id, so that
// header-only consumers can filter without decoding the body.
const (
	HeaderSchema = "Sourcewatch-Schema"
	HeaderStatus = "Sourcewatch-Status"
)

var (
	// ErrSubject is returned (wrapped) for a prefix or graph name that does
	// not make a valid NATS subject.
	ErrSubject = errors.New("alerts: invalid subject")
	// ErrInvalid is returned (wrapped) by Publish for an alert that is not
	// publishable, and by Decode (so Tail and Last) for a message that
	// does not decode.
	ErrInvalid = errors.New("alerts: invalid alert")
	// ErrSchema is returned (wrapped) by Decode (so Tail and Last) for an
	// alert of another schema version.
	ErrSchema = errors.New("alerts: unsupported schema")
)

// Subject is the subject alerts for graph are published on:
// prefix + ".alerts." + graph.
func Subject(prefix, graph string) string {
	return prefix + ".alerts." + graph
}

// checkTokens rejects what would make a subject invalid or a wildcard:
// empty tokens, whitespace, '*' and '>'.
func checkTokens(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty %s", ErrSubject, what)
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return fmt.Errorf("%w: %s %q has an empty token", ErrSubject, what, s)
		}
		if strings.ContainsAny(tok, " \t\r\n*>") {
			return fmt.Errorf("%w: %s %q contains whitespace or a wildcard", ErrSubject, what, s)
		}
	}
	return nil
}

// checkGraph rejects a graph name that is not one subject token: a name
// with a dot ("a.b") makes a valid subject no graph publishes on.
func checkGraph(s string) error {
	if err := checkTokens("graph", s); err != nil {
		return err
	}
	if strings.Contains(s, ".") {
		return fmt.Errorf("%w: graph %q has a dot: a graph name is one subject token", ErrSubject, s)
	}
	return nil
}

// CheckPrefix reports a subject prefix that is empty, has an empty token,
// whitespace or a wildcard, wrapping ErrSubject; the daemon refuses the
// same ones (subjects.prefix).
func CheckPrefix(prefix string) error { return checkTokens("prefix", prefix) }

// StreamOption changes a limit of the alert stream from its default.
type StreamOption func(*jetstream.StreamConfig)

// WithMaxAge keeps alerts for d instead of StreamMaxAge; zero or less
// keeps them until another limit removes them. The duplicate window is
// shortened to d where d is shorter, as JetStream requires.
func WithMaxAge(d time.Duration) StreamOption {
	return func(c *jetstream.StreamConfig) { c.MaxAge = max(d, 0) }
}

// WithMaxBytes caps the stream at n bytes, the oldest alerts removed
// first; zero or less leaves it uncapped (the default).
func WithMaxBytes(n int64) StreamOption {
	return func(c *jetstream.StreamConfig) {
		c.MaxBytes = -1
		if n > 0 {
			c.MaxBytes = n
		}
	}
}

// WithReplicas stores the stream on r servers of a JetStream cluster (at
// least one).
func WithReplicas(r int) StreamOption {
	return func(c *jetstream.StreamConfig) { c.Replicas = max(r, 1) }
}

// StreamConfig is the configuration EnsureStream applies: the defaults
// (alerts kept StreamMaxAge, no size cap, one replica) changed by opts.
func StreamConfig(prefix string, opts ...StreamOption) jetstream.StreamConfig {
	c := jetstream.StreamConfig{
		Name:        StreamName,
		Description: "sourcewatch alerts (schema " + Schema + ")",
		Subjects:    []string{prefix + ".alerts.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      StreamMaxAge,
		MaxBytes:    -1,
		Duplicates:  StreamDuplicates,
		Replicas:    1,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.MaxAge > 0 && c.Duplicates > c.MaxAge {
		c.Duplicates = c.MaxAge
	}
	return c
}

// EnsureStream creates the alert stream, or updates it to
// StreamConfig(prefix, opts...) when it exists; calling it again is
// harmless. The stream name does not depend on the prefix: one server (or
// account) serves one prefix.
func EnsureStream(ctx context.Context, js jetstream.JetStream, prefix string, opts ...StreamOption) (jetstream.Stream, error) {
	if err := checkTokens("prefix", prefix); err != nil {
		return nil, err
	}
	s, err := js.CreateOrUpdateStream(ctx, StreamConfig(prefix, opts...))
	if err != nil {
		return nil, fmt.Errorf("alerts: ensuring stream %s: %w", StreamName, err)
	}
	return s, nil
}

// Publisher publishes alerts to JetStream.
type Publisher struct {
	js     jetstream.JetStream
	prefix string
}

// NewPublisher returns a Publisher for subjects under prefix. The stream
// must exist (EnsureStream) for publishes to be acknowledged.
func NewPublisher(js jetstream.JetStream, prefix string) *Publisher {
	return &Publisher{js: js, prefix: prefix}
}

// Publish publishes a on Subject(prefix, a.Graph) with Nats-Msg-Id
// fingerprint + "-" + seq and waits for the stream's acknowledgement. A
// duplicate (the same id inside the stream's duplicate window, as after a
// crash and restart) is acknowledged without being stored again, and is not
// an error. An empty Schema or ID is filled in; times are written in UTC.
func (p *Publisher) Publish(ctx context.Context, a Alert) error {
	if err := checkTokens("prefix", p.prefix); err != nil {
		return err
	}
	if err := checkGraph(a.Graph); err != nil {
		return err
	}
	if a.Schema == "" {
		a.Schema = Schema
	}
	id := ID(a.Fingerprint, a.Seq)
	if a.ID == "" {
		a.ID = id
	}
	switch {
	case a.Schema != Schema:
		return fmt.Errorf("%w: schema %q, want %q", ErrInvalid, a.Schema, Schema)
	case a.Fingerprint == "":
		return fmt.Errorf("%w: graph %q: empty fingerprint", ErrInvalid, a.Graph)
	case a.Seq == 0:
		return fmt.Errorf("%w: graph %q: seq 0", ErrInvalid, a.Graph)
	case a.ID != id:
		return fmt.Errorf("%w: id %q, want fingerprint-seq %q", ErrInvalid, a.ID, id)
	case a.Status != Firing && a.Status != Updated && a.Status != Resolved:
		return fmt.Errorf("%w: %s: status %q", ErrInvalid, id, a.Status)
	}
	data, err := json.Marshal(a.utc())
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, id, err)
	}
	msg := &nats.Msg{Subject: Subject(p.prefix, a.Graph), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Header.Set(HeaderSchema, Schema)
	msg.Header.Set(HeaderStatus, string(a.Status))
	if _, err := p.js.PublishMsg(ctx, msg); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			// Retrying cannot help: say what would.
			return fmt.Errorf("alerts: publishing %s on %s: %w: the alert is %d bytes (%d sources), over the server's max_payload of %d bytes; raise max_payload in the server's config",
				id, msg.Subject, err, len(data), len(a.Sources), p.js.Conn().MaxPayload())
		}
		return fmt.Errorf("alerts: publishing %s on %s: %w", id, msg.Subject, err)
	}
	return nil
}

// TailOption configures Tail.
type TailOption func(*tailOptions)

type tailOptions struct {
	policy      jetstream.DeliverPolicy
	since       time.Time
	onReady     func()
	onInvalid   func(subject string, streamSeq uint64, err error)
	onRecreated func()
	// checkEvery is how long Tail waits for an alert before it asks
	// whether the stream was made anew, and how often it asks under
	// steady traffic.
	checkEvery time.Duration
	// onCheck, for tests, is told before each wait for an alert how many
	// delivered sequences Tail holds for the next check.
	onCheck func(held int)
}

// DefaultRecreationCheck is how long Tail goes without an alert before it
// checks whether the alert stream was deleted and made anew.
const DefaultRecreationCheck = 5 * time.Second

// OnRecreated is called when Tail finds the alert stream deleted and made
// anew (the daemon makes it again at its next publish), before it
// delivers the new stream's alerts from its first.
func OnRecreated(f func()) TailOption {
	return func(o *tailOptions) { o.onRecreated = f }
}

// RecreationCheck sets how long Tail goes without an alert before it
// checks whether the stream was made anew, and how often it checks while
// alerts keep coming (default, and for d <= 0, DefaultRecreationCheck).
func RecreationCheck(d time.Duration) TailOption {
	return func(o *tailOptions) { o.checkEvery = d }
}

// FromStart replays every alert the stream still holds before following new
// ones.
func FromStart() TailOption {
	return func(o *tailOptions) { o.policy = jetstream.DeliverAllPolicy }
}

// Since replays alerts stored at or after t (the stream's receive time)
// before following new ones.
func Since(t time.Time) TailOption {
	return func(o *tailOptions) { o.policy, o.since = jetstream.DeliverByStartTimePolicy, t }
}

// OnReady is called once the consumer exists: every alert published after
// it returns is delivered.
func OnReady(f func()) TailOption {
	return func(o *tailOptions) { o.onReady = f }
}

// OnInvalid makes Tail report a message that is not a v1 alert to f and go
// on; without it such a message stops Tail with an error naming the subject
// and stream sequence.
func OnInvalid(f func(subject string, streamSeq uint64, err error)) TailOption {
	return func(o *tailOptions) { o.onInvalid = f }
}

// Tail follows the alert stream with an ordered consumer and calls deliver
// for each alert of graph (every graph when graph is ""), in stream order.
// By default only alerts published from now on are delivered; see FromStart
// and Since. It returns nil once ctx is done, and the (wrapped) error when
// deliver fails.
//
// A stream deleted and made anew restarts its sequence numbers, and an
// ordered consumer, which resumes after the last sequence it saw, would
// wait past every alert of the new stream up to that number. So after
// DefaultRecreationCheck without an alert Tail compares the stream's
// creation time with the one it started on; when it changed, it calls
// OnRecreated and delivers the new stream's alerts from its first (each
// once: those already delivered from it are skipped).
func Tail(ctx context.Context, js jetstream.JetStream, prefix, graph string, deliver func(Alert) error, opts ...TailOption) error {
	return TailRaw(ctx, js, prefix, graph, func(a Alert, _ []byte) error { return deliver(a) }, opts...)
}

// TailRaw is Tail that also hands deliver the message's body as the
// stream holds it: the JSON Decode read a into, with any field this build
// does not know (additive fields keep the version), for a consumer that
// passes alerts on whole. The body is only valid during the call.
func TailRaw(ctx context.Context, js jetstream.JetStream, prefix, graph string, deliver func(a Alert, data []byte) error, opts ...TailOption) error {
	o := tailOptions{policy: jetstream.DeliverNewPolicy, checkEvery: DefaultRecreationCheck}
	for _, opt := range opts {
		opt(&o)
	}
	if o.checkEvery <= 0 {
		o.checkEvery = DefaultRecreationCheck
	}
	if err := checkTokens("prefix", prefix); err != nil {
		return err
	}
	filter := prefix + ".alerts.>"
	if graph != "" {
		if err := checkGraph(graph); err != nil {
			return err
		}
		filter = Subject(prefix, graph)
	}
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("alerts: looking up stream %s (is sourcewatch serve running on this server?): %w", StreamName, err)
	}
	// The server accepts a consumer whose filter lies outside the stream and
	// then delivers nothing, so a wrong prefix would wait silently forever.
	if subjects := stream.CachedInfo().Config.Subjects; !slices.ContainsFunc(subjects, func(s string) bool { return covers(s, filter) }) {
		return fmt.Errorf("%w: stream %s holds %v, not %s (wrong prefix?)", ErrSubject, StreamName, subjects, filter)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: o.policy, MaxResetAttempts: tailResetAttempts}
	if o.policy == jetstream.DeliverByStartTimePolicy {
		since := o.since.UTC()
		cfg.OptStartTime = &since
	}
	created := stream.CachedInfo().Created
	var skip map[uint64]bool // seqs of the new stream already delivered
	for ready := o.onReady; ; ready = nil {
		next, err := tailOnce(ctx, stream, cfg, filter, created, skip, deliver, ready, o)
		if err != nil || next == nil {
			return err
		}
		if next.from > 0 {
			// The same stream, back after the consumer gave up its
			// resets: on from the alert after the last one seen.
			cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, next.from
			continue
		}
		if next.created.Equal(created) {
			continue // nothing seen yet: as first asked
		}
		if o.onRecreated != nil {
			o.onRecreated()
		}
		created, skip = next.created, next.delivered
		cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverAllPolicy, nil, 0
	}
}

// tailResetAttempts bounds how often Tail's ordered consumer tries to
// recreate itself (1 s, then 2 s apart) before its Next fails: while it
// tries it holds a lock its Stop needs, so an unbounded number (the
// default) on a deleted stream kept a cancelled Tail from returning.
const tailResetAttempts = 3

// awaitStream waits, every poll, for stream to exist again and for a
// server that can answer (one restarting, or without JetStream for now),
// and returns its info; any other error of the server's, or ctx's.
func awaitStream(ctx context.Context, stream jetstream.Stream, poll time.Duration) (*jetstream.StreamInfo, error) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		info, err := stream.Info(ctx)
		if err == nil || !(errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) ||
			errors.Is(err, nats.ErrDisconnected)) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// recreated is when the stream Tail found made anew was made, and the
// sequences of it the old consumer delivered before Tail noticed; or,
// with from above 0, the stream Tail followed, to be followed on from
// that sequence.
type recreated struct {
	created   time.Time
	delivered map[uint64]bool
	from      uint64
}

// tailOnce follows stream, made at created, until ctx is done (nil, nil),
// deliver fails, or the stream is found made anew.
func tailOnce(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig, filter string, created time.Time,
	skip map[uint64]bool, deliver func(Alert, []byte) error, ready func(), o tailOptions) (*recreated, error) {
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("alerts: ordered consumer on %s: %w", filter, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("alerts: consuming %s: %w", filter, err)
	}
	defer it.Stop()
	if ready != nil {
		ready()
	}
	// When each sequence delivered since the last check was stored, to
	// tell which of them a new stream holds once one is found.
	stored := map[uint64]time.Time{}
	// madeAnew compares the stream as it is now with the one followed:
	// the same, what was delivered so far came from it (nil); made anew,
	// what the new one holds of it.
	madeAnew := func(now *jetstream.StreamInfo) *recreated {
		if now.Created.Equal(created) {
			clear(stored)
			return nil
		}
		delivered := map[uint64]bool{}
		for seq, at := range stored {
			if !at.Before(now.Created) {
				delivered[seq] = true
			}
		}
		return &recreated{created: now.Created, delivered: delivered}
	}
	var last uint64 // the stream sequence of the last message seen
	checked := time.Now()
	for {
		if o.onCheck != nil {
			o.onCheck(len(stored))
		}
		if time.Since(checked) >= o.checkEvery {
			// Never idle under steady traffic: check all the same, which
			// also bounds stored to about one interval's alerts.
			checked = time.Now()
			if now, err := stream.Info(ctx); err == nil {
				if r := madeAnew(now); r != nil {
					return r, nil
				}
			}
		}
		wait, cancel := context.WithTimeout(ctx, o.checkEvery)
		msg, err := it.Next(jetstream.NextContext(wait))
		// Read before cancel, after which wait.Err is never nil.
		failed := wait.Err() == nil
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			// Idle, or the consumer gave up recreating itself: was the
			// stream deleted and made anew? (The handle names the stream;
			// it serves the new one as well.)
			now, serr := stream.Info(ctx)
			if failed {
				// Its resets failed: the stream is gone. Wait for the
				// next one; an error of the stream as it was is Tail's.
				now, serr = awaitStream(ctx, stream, o.checkEvery)
				if serr != nil {
					if ctx.Err() != nil {
						return nil, nil
					}
					return nil, fmt.Errorf("alerts: consuming %s: %w", filter, serr)
				}
				if now.Created.Equal(created) {
					// The same stream (the server was away): a new
					// consumer, after the last alert seen.
					r := &recreated{created: created, delivered: skip}
					if last > 0 {
						r.from = last + 1
					}
					return r, nil
				}
			}
			if serr != nil {
				// Deleted and not yet made again, or the server is
				// away: wait.
				continue
			}
			checked = time.Now()
			if r := madeAnew(now); r != nil {
				return r, nil
			}
			continue
		}
		var seq uint64
		if md, mdErr := msg.Metadata(); mdErr == nil {
			seq = md.Sequence.Stream
			last = seq
			if skip[seq] {
				continue
			}
			stored[seq] = md.Timestamp
		}
		a, err := Decode(msg.Data())
		if err != nil {
			if o.onInvalid == nil {
				return nil, fmt.Errorf("%s stream seq %d: %w", msg.Subject(), seq, err)
			}
			o.onInvalid(msg.Subject(), seq, err)
			continue
		}
		if err := deliver(a, msg.Data()); err != nil {
			return nil, fmt.Errorf("alerts: delivering %s: %w", a.ID, err)
		}
	}
}

// covers reports whether every subject filter matches also matches pattern.
func covers(pattern, filter string) bool {
	p, f := strings.Split(pattern, "."), strings.Split(filter, ".")
	for i, pt := range p {
		if pt == ">" {
			return len(f) > i
		}
		if i >= len(f) || f[i] == ">" {
			return false
		}
		if pt != "*" && (pt != f[i] || f[i] == "*") {
			return false
		}
	}
	return len(f) == len(p)
}

// Last returns the last alert s, the alert stream (StreamName), holds for
// graph, and false when it holds none.
func Last(ctx context.Context, s jetstream.Stream, prefix, graph string) (Alert, bool, error) {
	if err := checkTokens("prefix", prefix); err != nil {
		return Alert{}, false, err
	}
	if err := checkGraph(graph); err != nil {
		return Alert{}, false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, Subject(prefix, graph))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Alert{}, false, nil
	case err != nil:
		return Alert{}, false, fmt.Errorf("alerts: last alert on %s: %w", Subject(prefix, graph), err)
	}
	a, err := Decode(m.Data)
	if err != nil {
		return Alert{}, false, fmt.Errorf("alerts: last alert on %s (stream seq %d): %w", Subject(prefix, graph), m.Sequence, err)
	}
	return a, true, nil
}

// Decode reads one alert as the alert stream holds it (the body of a
// message on <prefix>.alerts.<graph>), for a consumer that reads the
// stream with its own client rather than Tail; Tail and Last decode with
// it. Data that is not a JSON object of Alert's fields is ErrInvalid
// (JSON null aside, which decodes as an empty object and so has no
// schema field); an alert whose schema field is not Schema (another
// version, or none) is ErrSchema, so that a consumer refuses what it would misread (see the
// package documentation's Versioning). Both are wrapped, for errors.Is.
//
// Decode checks the version, not every field against JSONSchema: fields
// it does not know are ignored, as additive changes keep the version, and
// a value out of the schema's range (a negative infected count) decodes
// as it is. A consumer that wants the whole contract checked validates
// data against JSONSchema with a JSON Schema validator first.
func Decode(data []byte) (Alert, error) {
	var a Alert
	if err := json.Unmarshal(data, &a); err != nil {
		return Alert{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if a.Schema != Schema {
		return Alert{}, fmt.Errorf("%w: %q, this build reads %q", ErrSchema, a.Schema, Schema)
	}
	return a, nil
}
