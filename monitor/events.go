package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Node states carried by events.
const (
	StateInfected    = "infected"
	StateRecovered   = "recovered"
	StateSusceptible = "susceptible"
)

// Event is one node-state change as published on <prefix>.events.<graph>.
// A zero TS means arrival time; an empty ID disables id deduplication.
type Event struct {
	Node  string    `json:"node"`
	State string    `json:"state"`
	TS    time.Time `json:"ts,omitzero"`
	ID    string    `json:"id,omitempty"`
}

// CascadeEvents turns a simulated cascade into the events a live system
// would emit: node v infected at start + Times[v]*step and, under SIR,
// recovered at start + Recovered[v]*step, for steps up to the snapshot
// step. Events are in time order (node index breaking ties); ids are
// unique per start time, so replaying the same slice twice deduplicates.
// A cascade without Times yields its infected nodes at start.
func CascadeEvents(g *graph.Graph, c diffusion.Cascade, start time.Time, step time.Duration) []Event {
	type timed struct {
		at    int
		node  int
		state string
	}
	var ts []timed
	if c.Times == nil {
		for _, v := range c.Infected {
			ts = append(ts, timed{0, v, StateInfected})
		}
	} else {
		for v, t := range c.Times {
			if t >= 0 && t <= c.Step {
				ts = append(ts, timed{t, v, StateInfected})
			}
		}
		for v, t := range c.Recovered {
			if t >= 0 && t <= c.Step {
				ts = append(ts, timed{t, v, StateRecovered})
			}
		}
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].at != ts[j].at {
			return ts[i].at < ts[j].at
		}
		if ts[i].node != ts[j].node {
			return ts[i].node < ts[j].node
		}
		return ts[i].state == StateInfected && ts[j].state != StateInfected
	})
	prefix := strconv.FormatInt(start.UnixNano(), 36)
	events := make([]Event, len(ts))
	for i, e := range ts {
		id := g.ID(e.node)
		events[i] = Event{
			Node:  id,
			State: e.state,
			TS:    start.Add(time.Duration(e.at) * step).UTC(),
			ID:    prefix + "-" + id + "-" + e.state,
		}
	}
	return events
}

// SleepContext waits d or until ctx ends; it is PublishEvents' default
// sleep.
func SleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PublishEvents publishes events one per message on subject, each with
// Nats-Msg-Id set to its ID, waiting for JetStream's acknowledgement. With
// speed > 0 it sleeps (ts[i] - ts[i-1]) / speed between events, so event
// time passes speed times faster than wall time; the events' ts are sent
// as they are, so for a live replay build them with CascadeEvents(start =
// now, step = wall step * speed). speed <= 0 publishes without pauses.
// sleep nil means SleepContext.
func PublishEvents(ctx context.Context, js jetstream.JetStream, subject string, events []Event, speed float64, sleep func(context.Context, time.Duration) error) error {
	if sleep == nil {
		sleep = SleepContext
	}
	for i, e := range events {
		if i > 0 && speed > 0 && !e.TS.IsZero() && !events[i-1].TS.IsZero() {
			gap := time.Duration(float64(e.TS.Sub(events[i-1].TS)) / speed)
			if gap > 0 {
				if err := sleep(ctx, gap); err != nil {
					return fmt.Errorf("publishing events: %w", err)
				}
			}
		}
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("publishing event %d: %w", i, err)
		}
		msg := nats.NewMsg(subject)
		msg.Data = data
		if e.ID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, e.ID)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("publishing event %d (node %q): %w", i, e.Node, err)
		}
	}
	return nil
}

// Dead-letter reasons, the value of the Sourcewatch-Reason header.
const (
	ReasonBadJSON      = "bad_json"
	ReasonUnknownGraph = "unknown_graph"
	ReasonUnknownNode  = "unknown_node"
	ReasonBadState     = "bad_state"
	ReasonFutureTS     = "future_ts"
	ReasonTooOld       = "too_old"
	ReasonTooLarge     = "too_large"
	// ReasonTooManyBad is the whole message whose array had more bad
	// elements than are dead-lettered one by one (maxBadElements); its
	// detail says how many.
	ReasonTooManyBad = "too_many_bad"
)

var deadReasons = []string{ReasonBadJSON, ReasonUnknownGraph, ReasonUnknownNode, ReasonBadState, ReasonFutureTS, ReasonTooOld, ReasonTooLarge, ReasonTooManyBad}

// wireEvent is an event as decoded, before checks.
type wireEvent struct {
	Node  string `json:"node"`
	State string `json:"state"`
	TS    string `json:"ts"`
	ID    string `json:"id"`
}

// decoded is one element of a message: either a checked event or the
// reason it was rejected, with its raw bytes for the dead letter.
type decoded struct {
	raw    []byte
	ev     wireEvent
	reason string
	detail string
	// Filled by the checks once the event is known good.
	node  int
	state nodeState
	ts    int64
}

var errNotEvent = errors.New("an empty event: an event needs node and state")

// decodeMessage splits a message body into elements, appended to dst[:0]
// (reused across messages: ingest decodes one message at a time per
// graph), reporting whether they came from an array. A body that is
// neither an object nor an array is one bad_json element; an array element
// that is not an object is a bad_json element of its own.
//
// Elements from the fast path hold strings that view data rather than
// copy it: they are valid while data is, and whatever outlives the message
// (an event id remembered for deduplication) must be cloned.
func decodeMessage(dst []decoded, data []byte) ([]decoded, bool) {
	out := dst[:0]
	// A byte-order mark (Windows tools write one) is not JSON.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	i := skipSpace(data, 0)
	if i < len(data) && data[i] == '[' {
		if j := skipSpace(data, i+1); j < len(data) && data[j] == ']' && skipSpace(data, j+1) == len(data) {
			// Nothing to apply, but a producer that sends it has a bug
			// worth seeing.
			return append(out, decoded{raw: data, reason: ReasonBadJSON, detail: "an empty array: a batch holds at least one event"}), false
		}
		// Fast path: a well-formed array decodes in one pass; only a bad
		// one is split into elements to find and keep the bad ones.
		if evs, ok := fastArray(out, data); ok {
			// An element without a node (or with an empty one) is
			// bad_json as a lone event is, which decodeOne says: taken as
			// it is, it was dead-lettered as unknown_node "".
			good := true
			for k := range evs {
				if evs[k].ev.Node == "" {
					good = false
					break
				}
			}
			if good {
				return evs, true
			}
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(data, &raws); err != nil {
			return append(out[:0], decoded{raw: data, reason: ReasonBadJSON, detail: eventJSONError(err)}), false
		}
		out = out[:0]
		for _, r := range raws {
			out = append(out, decodeOne(r))
		}
		return out, true
	}
	return append(out, decodeOne(data)), false
}

// decodeOne decodes one event. A key other than node, state, ts and id is
// refused, not ignored: "timestamp" for "ts" would otherwise apply an old
// infection as a fresh one, at arrival time. (Keys match case-
// insensitively, as encoding/json's do.)
func decodeOne(raw []byte) decoded {
	d := decoded{raw: raw}
	ev, ok := fastDecode(raw)
	if !ok {
		// encoding/json reads invalid UTF-8 as U+FFFD: a Latin-1 "Zoë"
		// was dead-lettered as unknown_node "Zo\ufffd", which names
		// neither the node meant nor the mistake, and two such names
		// were one. (The fast path takes ASCII only.)
		if at := invalidUTF8(raw); at >= 0 {
			d.reason, d.detail = ReasonBadJSON, fmt.Sprintf("not valid UTF-8 at byte %d (0x%02x): JSON text is UTF-8; was it written in Latin-1, or another encoding?", at, raw[at])
			return d
		}
		// Only this path allocates: the event escapes into encoding/json.
		slow := new(wireEvent)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err := dec.Decode(slow)
		if err == nil {
			// Token, not More: More reports false before a stray '}' or
			// ']', and {"node":"1","state":"infected"}} would pass as an
			// event rather than be dead-lettered as the bad JSON it is.
			if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
				err = errors.New("more after the event object: one JSON object (or an array of them) per message")
			}
		}
		if err != nil {
			d.reason, d.detail = ReasonBadJSON, eventJSONError(err)
			return d
		}
		ev = *slow
		if k := diffusion.RepeatedKey(raw); k != "" {
			// encoding/json keeps the last, matching keys in any case; a
			// consumer in another language may keep the first.
			d.reason, d.detail = ReasonBadJSON, fmt.Sprintf("%q is given twice (keys match in any case): an event names each of node, state, ts and id once", k)
			return d
		}
		if ev.TS == "" {
			// A producer that meant to stamp the event and did not (an
			// empty string, or a JavaScript null): read as absent, it would
			// apply at arrival time without a word.
			if what := failedTS(raw); what != "" {
				d.reason, d.detail = ReasonBadJSON, `"ts" is `+what+`: give an RFC 3339 time, or leave "ts" out for the arrival time`
				return d
			}
		}
	}
	d.ev = ev
	switch {
	case ev == (wireEvent{}):
		d.reason, d.detail = ReasonBadJSON, errNotEvent.Error()
	case ev.Node == "":
		d.reason, d.detail = ReasonBadJSON, `no "node": an event names the node it is about`
	}
	return d
}

// invalidUTF8 is the offset of the first byte of b that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// failedTS says how raw, one event object that decoded, holds a "ts" key
// (in any case) whose value is no time: "empty" for the empty string,
// "null" for null; "" when its ts is a string or absent.
func failedTS(raw []byte) string {
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil {
		return ""
	}
	for k, v := range probe {
		if !strings.EqualFold(k, "ts") {
			continue
		}
		switch string(bytes.TrimSpace(v)) {
		case `""`:
			return "empty"
		case "null":
			return "null"
		}
	}
	return ""
}

// eventJSONError says what was wrong with an event in the event's terms,
// not Go's (encoding/json names the Go type it decoded into).
func eventJSONError(err error) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn) && strings.HasPrefix(syn.Error(), "unexpected end"):
		return "the JSON ends early (cut off?): " + err.Error()
	case errors.As(err, &syn):
		// Go's text alone ("invalid character 'o' in literal null")
		// does not say the body is not JSON, nor where.
		return fmt.Sprintf("not valid JSON at byte %d: %s", syn.Offset, err.Error())
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Sprintf("not an event: a JSON %s, want an object (or an array of them)", typ.Value)
	case errors.As(err, &typ):
		return fmt.Sprintf("%q is a JSON %s, want a string", typ.Field, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return err.Error() + " (an event has node, state, ts and id)"
	case errors.Is(err, io.EOF):
		return "an empty message: want an event object (or an array of them)"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early (cut off?): " + err.Error()
	}
	return err.Error()
}

var errOffsetRange = errors.New("its offset is out of range: -23:59 to +23:59")

// parseEventTime reads an event's ts: RFC 3339 as Go's time.RFC3339Nano
// reads it, but for an offset whose hours pass 23 or minutes 59, which
// Go takes (+24:00 a day off) and RFC 3339, and so the event schema,
// does not.
func parseEventTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, err
	}
	if n := len(s); n >= 6 && (s[n-6] == '+' || s[n-6] == '-') && s[n-3] == ':' {
		if s[n-5:n-3] > "23" || s[n-2:] > "59" {
			return time.Time{}, errOffsetRange
		}
	}
	return t, nil
}

// parseState maps an event state to the window's.
func parseState(s string) (nodeState, bool) {
	switch s {
	case StateInfected:
		return infected, true
	case StateRecovered:
		return recovered, true
	case StateSusceptible:
		return susceptible, true
	}
	return 0, false
}

// fastDecode parses the common event shape, a flat object whose values are
// plain strings (no escapes, ASCII) under the keys node, state, ts and id,
// several times faster than encoding/json. Anything else reports false and
// goes through encoding/json, so the result never differs from it.
func fastDecode(b []byte) (wireEvent, bool) {
	ev, i, ok := fastObject(b, skipSpace(b, 0))
	return ev, ok && skipSpace(b, i) == len(b)
}

// fastArray is fastDecode for a JSON array of such objects, appending
// the elements to dst.
func fastArray(dst []decoded, b []byte) ([]decoded, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return dst, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for {
		start := i
		ev, j, ok := fastObject(b, i)
		if !ok {
			return dst, false
		}
		dst = append(dst, decoded{raw: b[start:j], ev: ev})
		i = skipSpace(b, j)
		if i >= len(b) {
			return dst, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return dst, skipSpace(b, i+1) == len(b)
		default:
			return dst, false
		}
	}
}

// fastObject parses the object at b[i], returning the index after it.
func fastObject(b []byte, i int) (wireEvent, int, bool) {
	var ev wireEvent
	if i >= len(b) || b[i] != '{' {
		return ev, 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ev, i + 1, true
	}
	var seen [4]bool // node, state, ts, id: a repeat goes the slow way, which refuses it
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return ev, 0, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return ev, 0, false
		}
		val, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return ev, 0, false
		}
		k := -1
		switch string(key) {
		case "node":
			k, ev.Node = 0, view(val)
		case "state":
			k, ev.State = 1, view(val)
		case "ts":
			if len(val) == 0 {
				return ev, 0, false // the slow path tells "" from absent
			}
			k, ev.TS = 2, view(val)
		case "id":
			k, ev.ID = 3, view(val)
		}
		if k < 0 || seen[k] {
			return ev, 0, false
		}
		seen[k] = true
		i = skipSpace(b, j)
		if i >= len(b) {
			return ev, 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ev, i + 1, true
		default:
			return ev, 0, false
		}
	}
}

// view is b as a string without a copy: ingest decodes several hundred
// thousand events a second and, but for the event id, nothing it decodes
// outlives the message, so copying every field would be the largest cost
// of the path. The caller must not retain the string past b's lifetime.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] with no escapes and only
// printable ASCII, returning its contents and the index after it.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		switch {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}
