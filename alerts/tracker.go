package alerts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrState is returned (wrapped) by Tracker.UnmarshalJSON for a snapshot it
// cannot restore.
var ErrState = errors.New("alerts: bad tracker state")

// stateSchema versions the Tracker snapshot, independently of the alert
// schema.
const stateSchema = "sourcewatch.alert-tracker.v1"

// Tracker turns a stream of observations per graph into the alert lifecycle.
// Per graph it holds at most one open incident. Seq counts the alerts
// published for one incident: 1 for firing, then +1 per update and for the
// resolve; a new incident starts again at 1 with a new fingerprint.
//
// Every alert Observe or Resolve hands out to publish is also queued as
// pending for its graph until Published acknowledges it, and the queue is
// part of the MarshalJSON snapshot. So a caller that saves the snapshot
// before publishing (write-ahead) and calls Published after the stream's
// acknowledgement can resend an alert whose publish failed, in a later
// attempt or after a restart, under the same id; an alert handed out is
// never lost and its seq never reused for other content.
//
// A Tracker is safe for concurrent use.
type Tracker struct {
	now func() time.Time

	mu     sync.Mutex
	graphs map[string]*graphState
}

type graphState struct {
	// Incidents counts incidents ever opened for the graph; it goes into the
	// fingerprint so that two incidents that fire at the same instant (a
	// coarse or injected clock) still differ.
	Incidents uint64 `json:"incidents"`
	// Open is the open incident's latest state: the fields of its last
	// published alert (status, seq, id) with the latest observation's data.
	Open *Alert `json:"open,omitempty"`
	// Pending are the alerts handed out to publish and not yet
	// acknowledged through Published, oldest first.
	Pending []Alert `json:"pending,omitempty"`
}

// NewTracker returns an empty Tracker that stamps alerts with now (time.Now
// when nil).
func NewTracker(now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{now: now, graphs: map[string]*graphState{}}
}

func (t *Tracker) init() {
	if t.now == nil {
		t.now = time.Now
	}
	if t.graphs == nil {
		t.graphs = map[string]*graphState{}
	}
}

// Fingerprint identifies an incident: the hex of the first 16 bytes of
//
//	SHA-256(graph || 0x00 || firstFired as RFC 3339 nanoseconds UTC || 0x00 || n)
//
// where n numbers the graph's incidents from 1, written in decimal. It
// stays the same across
// the incident's updates and its resolve.
func Fingerprint(graph string, firstFired time.Time, n uint64) string {
	h := sha256.New()
	h.Write([]byte(graph))
	h.Write([]byte{0})
	h.Write([]byte(firstFired.UTC().Format(time.RFC3339Nano)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(n, 10)))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ID is the identity of one published alert: fingerprint + "-" + seq. It is
// also the Nats-Msg-Id the Publisher sends, so a republish deduplicates.
func ID(fingerprint string, seq uint64) string {
	return fingerprint + "-" + strconv.FormatUint(seq, 10)
}

// Observe records an inference result. It reports true, with the alert to
// publish, when the observation opens an incident (Firing) or changes the
// open incident's source set — the node ids of o.Sources, order and scores
// ignored (Updated); that alert is queued as pending (see Pending). Otherwise
// it returns false with the incident's current state (last status, seq and
// id handed out, latest data) and publishes nothing; the latest data is
// still remembered for a later resolve.
func (t *Tracker) Observe(o Observation) (Alert, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	now := t.now().UTC()
	gs := t.graphs[o.Graph]
	if gs == nil {
		gs = &graphState{}
		t.graphs[o.Graph] = gs
	}
	a := Alert{
		Schema:      Schema,
		Graph:       o.Graph,
		Window:      o.Window,
		Infected:    o.Infected,
		Sources:     slices.Clone(o.Sources),
		CredibleSet: CredibleSet(o.Sources, DefaultMass),
		Threshold:   o.Threshold,
		Model:       o.Model,
		InferenceMS: o.InferenceMS,
		Note:        o.Note,
		ObservedAt:  now,
	}
	if o.ExpectedSources != nil {
		e := *o.ExpectedSources
		a.ExpectedSources = &e
	}
	a = FitSources(a, o.MaxBytes)
	if gs.Open == nil {
		gs.Incidents++
		a.Fingerprint = Fingerprint(o.Graph, now, gs.Incidents)
		a.Status = Firing
		a.Seq = 1
		a.ID = ID(a.Fingerprint, a.Seq)
		a = a.utc()
		gs.Open = &a
		gs.Pending = append(gs.Pending, cloneAlert(a))
		return cloneAlert(a), true
	}
	prev := gs.Open
	a.Fingerprint = prev.Fingerprint
	if sameAnswer(prev, o.Sources) {
		a.Status, a.Seq, a.ID = prev.Status, prev.Seq, prev.ID
		a = a.utc()
		gs.Open = &a
		return cloneAlert(a), false
	}
	a.Status = Updated
	a.Seq = prev.Seq + 1
	a.ID = ID(a.Fingerprint, a.Seq)
	a = a.utc()
	gs.Open = &a
	gs.Pending = append(gs.Pending, cloneAlert(a))
	return cloneAlert(a), true
}

// Resolve closes the graph's open incident, reporting true with the Resolved
// alert to publish, which is queued as pending (see Pending); it carries the
// incident's latest sources and model with the given window and infected
// count. Without an open incident it returns false and a zero Alert.
func (t *Tracker) Resolve(graph string, w Window, infected int) (Alert, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.resolve(graph, w, infected, "")
}

// ResolveBecause is Resolve with why appended to the alert's note (after
// the latest inference's), for a resolve a consumer could not otherwise
// tell from a mistake: one whose window still holds infected nodes.
func (t *Tracker) ResolveBecause(graph string, w Window, infected int, why string) (Alert, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	gs := t.graphs[graph]
	if gs == nil || gs.Open == nil {
		return Alert{}, false
	}
	return t.resolve(graph, w, infected, because(gs.Open.Note, why))
}

// because is an incident's latest note with why appended, the part on
// the sources it left out taken off (resolve puts it back at the end).
func because(latest, why string) string {
	if base := omittedNoteRE.ReplaceAllString(latest, ""); base != "" {
		return base + "; " + why
	}
	return why
}

// resolve is Resolve, with note on the alert, under t.mu.
func (t *Tracker) resolve(graph string, w Window, infected int, note string) (Alert, bool) {
	t.init()
	gs := t.graphs[graph]
	if gs == nil || gs.Open == nil {
		return Alert{}, false
	}
	a := cloneAlert(*gs.Open)
	a.Status = Resolved
	a.Seq++
	a.ID = ID(a.Fingerprint, a.Seq)
	a.Window = w
	a.Infected = infected
	if note != "" {
		// The sources it left out stay left out: so says the note still.
		if left := strings.TrimPrefix(omittedNoteRE.FindString(a.Note), "; "); left != "" {
			note += "; " + left
		}
		a.Note = note
	}
	a.ObservedAt = t.now()
	a = a.utc()
	gs.Open = nil
	gs.Pending = append(gs.Pending, cloneAlert(a))
	return a, true
}

// Retire closes the open incident of a graph that is no longer watched,
// as Resolve does with the incident's last window and count, and note
// saying why after the latest inference's (as ResolveBecause), and
// reports whether there was one to close. The resolve is
// queued as pending like any other; Forget drops the graph once nothing
// is.
func (t *Tracker) Retire(graph, note string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.graphs[graph]
	if gs == nil || gs.Open == nil {
		return false
	}
	_, ok := t.resolve(graph, gs.Open.Window, gs.Open.Infected, because(gs.Open.Note, note))
	return ok
}

// Forget drops a graph's state when it has neither an open incident nor a
// pending alert, and reports whether it did (or there was none).
func (t *Tracker) Forget(graph string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.graphs[graph]
	if gs == nil {
		return true
	}
	if gs.Open != nil || len(gs.Pending) > 0 {
		return false
	}
	delete(t.graphs, graph)
	return true
}

// Known returns the names of every graph the tracker holds state for
// (an open incident, a pending alert, or past incidents), sorted.
func (t *Tracker) Known() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.graphs))
}

// Pending returns the graph's alerts handed out by Observe and Resolve and
// not yet acknowledged through Published, oldest first: they are to be
// (re)published in this order, each under its own id.
func (t *Tracker) Pending(graph string) []Alert {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.graphs[graph]
	if gs == nil || len(gs.Pending) == 0 {
		return nil
	}
	out := make([]Alert, len(gs.Pending))
	for i, a := range gs.Pending {
		out[i] = cloneAlert(a)
	}
	return out
}

// Published acknowledges the graph's pending alert with the given id: it
// was stored by the stream and is no longer pending. It reports whether
// such an alert was pending.
func (t *Tracker) Published(graph, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.graphs[graph]
	if gs == nil {
		return false
	}
	for i, a := range gs.Pending {
		if a.ID == id {
			gs.Pending = slices.Delete(gs.Pending, i, i+1)
			if len(gs.Pending) == 0 {
				gs.Pending = nil
			}
			return true
		}
	}
	return false
}

// Open returns the graph's open incident as Observe last left it, and
// whether there is one. Its status, seq and id are those of the last alert
// handed out, which may still be pending.
func (t *Tracker) Open(graph string) (Alert, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := t.graphs[graph]
	if gs == nil || gs.Open == nil {
		return Alert{}, false
	}
	return cloneAlert(*gs.Open), true
}

type trackerState struct {
	Schema string                 `json:"schema"`
	Graphs map[string]*graphState `json:"graphs"`
}

// MarshalJSON snapshots the tracker (open incidents, incident counters and
// pending alerts) so that a restarted monitor continues the same incidents
// and resends what was not acknowledged.
func (t *Tracker) MarshalJSON() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	return json.Marshal(trackerState{Schema: stateSchema, Graphs: t.graphs})
}

// UnmarshalJSON replaces the tracker's state with a MarshalJSON snapshot.
// The clock is kept.
func (t *Tracker) UnmarshalJSON(data []byte) error {
	var s trackerState
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if s.Schema != stateSchema {
		return fmt.Errorf("%w: schema %q, want %q", ErrState, s.Schema, stateSchema)
	}
	for name, gs := range s.Graphs {
		if gs == nil {
			return fmt.Errorf("%w: graph %q: null state", ErrState, name)
		}
		if o := gs.Open; o != nil {
			switch {
			case o.Graph != name:
				return fmt.Errorf("%w: graph %q: open incident names graph %q", ErrState, name, o.Graph)
			case o.Fingerprint == "" || o.Seq == 0:
				return fmt.Errorf("%w: graph %q: open incident without fingerprint or seq", ErrState, name)
			case o.Status != Firing && o.Status != Updated:
				return fmt.Errorf("%w: graph %q: open incident has status %q", ErrState, name, o.Status)
			}
		}
		for i, p := range gs.Pending {
			switch {
			case p.Graph != name:
				return fmt.Errorf("%w: graph %q: pending alert %d names graph %q", ErrState, name, i, p.Graph)
			case p.Fingerprint == "" || p.Seq == 0 || p.ID != ID(p.Fingerprint, p.Seq):
				return fmt.Errorf("%w: graph %q: pending alert %d has id %q for fingerprint %q seq %d", ErrState, name, i, p.ID, p.Fingerprint, p.Seq)
			case p.Status != Firing && p.Status != Updated && p.Status != Resolved:
				return fmt.Errorf("%w: graph %q: pending alert %d has status %q", ErrState, name, i, p.Status)
			}
		}
	}
	if s.Graphs == nil {
		s.Graphs = map[string]*graphState{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	t.graphs = s.Graphs
	return nil
}

// Graphs returns the names of graphs with an open incident, sorted. A graph
// whose only state is a pending resolve is not among them.
func (t *Tracker) Graphs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(t.graphs)) {
		if t.graphs[name].Open != nil {
			out = append(out, name)
		}
	}
	return out
}

// sameAnswer reports whether sources, the latest answer in full, is the
// one prev published: the same node ids, or, where prev left its
// lowest-ranked sources out (SourcesOmitted), the same count with the
// kept ones first. Not prev's kept set against the latest one fitted, as
// how many fit moves with the length of the note.
func sameAnswer(prev *Alert, sources []Source) bool {
	if prev.SourcesOmitted == 0 {
		return sameSet(prev.Sources, sources)
	}
	return len(sources) == len(prev.Sources)+prev.SourcesOmitted &&
		sameSet(prev.Sources, sources[:len(prev.Sources)])
}

func sameSet(a, b []Source) bool {
	sa := make(map[string]struct{}, len(a))
	for _, s := range a {
		sa[s.Node] = struct{}{}
	}
	sb := make(map[string]struct{}, len(b))
	for _, s := range b {
		sb[s.Node] = struct{}{}
	}
	if len(sa) != len(sb) {
		return false
	}
	for n := range sa {
		if _, ok := sb[n]; !ok {
			return false
		}
	}
	return true
}

func cloneAlert(a Alert) Alert {
	a.Sources = slices.Clone(a.Sources)
	a.CredibleSet = slices.Clone(a.CredibleSet)
	return a
}
