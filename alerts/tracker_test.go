package alerts

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a settable injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func src(nodes ...string) []Source {
	out := make([]Source, len(nodes))
	for i, n := range nodes {
		out[i] = Source{Node: n, Score: float64(len(nodes) - i), Probability: 1 / float64(len(nodes))}
	}
	return out
}

func obs(graph string, nodes ...string) Observation {
	from := time.Date(2026, 1, 2, 3, 0, 0, 0, time.FixedZone("X", 3600))
	return Observation{
		Graph: graph, Window: Window{From: from, To: from.Add(time.Hour)}, Infected: 10,
		Sources: src(nodes...), Threshold: 0.5, Model: ModelRef{Bundle: "b", Forward: "si", ForwardVersion: "1"},
		InferenceMS: 3,
	}
}

func TestTrackerLifecycle(t *testing.T) {
	type step struct {
		resolve  bool
		graph    string
		nodes    []string
		publish  bool
		status   Status
		seq      uint64
		incident int // which incident (0-based, in order of firing) the alert belongs to
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fire once, same set is quiet", []step{
			{graph: "g", nodes: []string{"a", "b"}, publish: true, status: Firing, seq: 1, incident: 0},
			{graph: "g", nodes: []string{"a", "b"}, publish: false, status: Firing, seq: 1, incident: 0},
		}},
		{"reordered set is the same set", []step{
			{graph: "g", nodes: []string{"a", "b", "c"}, publish: true, status: Firing, seq: 1},
			{graph: "g", nodes: []string{"c", "a", "b"}, publish: false, status: Firing, seq: 1},
		}},
		{"changed set updates, then resolve", []step{
			{graph: "g", nodes: []string{"a"}, publish: true, status: Firing, seq: 1},
			{graph: "g", nodes: []string{"a", "b"}, publish: true, status: Updated, seq: 2},
			{graph: "g", nodes: []string{"b", "a"}, publish: false, status: Updated, seq: 2},
			{graph: "g", nodes: []string{"b"}, publish: true, status: Updated, seq: 3},
			{resolve: true, graph: "g", publish: true, status: Resolved, seq: 4},
		}},
		{"resolve without incident", []step{
			{resolve: true, graph: "g", publish: false},
		}},
		{"double resolve", []step{
			{graph: "g", nodes: []string{"a"}, publish: true, status: Firing, seq: 1},
			{resolve: true, graph: "g", publish: true, status: Resolved, seq: 2},
			{resolve: true, graph: "g", publish: false},
		}},
		{"refire after resolve is a new incident", []step{
			{graph: "g", nodes: []string{"a"}, publish: true, status: Firing, seq: 1, incident: 0},
			{resolve: true, graph: "g", publish: true, status: Resolved, seq: 2, incident: 0},
			{graph: "g", nodes: []string{"a"}, publish: true, status: Firing, seq: 1, incident: 1},
		}},
		{"graphs are independent", []step{
			{graph: "g", nodes: []string{"a"}, publish: true, status: Firing, seq: 1, incident: 0},
			{graph: "h", nodes: []string{"a"}, publish: true, status: Firing, seq: 1, incident: 1},
			{resolve: true, graph: "h", publish: true, status: Resolved, seq: 2, incident: 1},
			{graph: "g", nodes: []string{"b"}, publish: true, status: Updated, seq: 2, incident: 0},
		}},
		{"empty source set fires and updates", []step{
			{graph: "g", publish: true, status: Firing, seq: 1},
			{graph: "g", nodes: []string{"a"}, publish: true, status: Updated, seq: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A clock that never moves: fingerprints must still differ per incident.
			c := &clock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
			tr := NewTracker(c.now)
			var fingerprints []string
			ids := map[string]bool{}
			for i, s := range tt.steps {
				var a Alert
				var ok bool
				if s.resolve {
					a, ok = tr.Resolve(s.graph, Window{}, 2)
				} else {
					a, ok = tr.Observe(obs(s.graph, s.nodes...))
				}
				require.Equal(t, s.publish, ok, "step %d", i)
				if s.resolve && !ok {
					require.Equal(t, Alert{}, a, "step %d", i)
					continue
				}
				require.Equal(t, s.status, a.Status, "step %d", i)
				require.Equal(t, s.seq, a.Seq, "step %d", i)
				require.Equal(t, Schema, a.Schema)
				require.Equal(t, s.graph, a.Graph)
				require.Equal(t, ID(a.Fingerprint, a.Seq), a.ID)
				if s.incident == len(fingerprints) {
					require.NotContains(t, fingerprints, a.Fingerprint, "step %d: new incident must get a new fingerprint", i)
					fingerprints = append(fingerprints, a.Fingerprint)
				}
				require.Equal(t, fingerprints[s.incident], a.Fingerprint, "step %d", i)
				if ok {
					require.False(t, ids[a.ID], "step %d: id %s published twice", i, a.ID)
					ids[a.ID] = true
				}
				if !s.resolve {
					require.ElementsMatch(t, s.nodes, nodeIDs(a.Sources))
				}
				c.add(time.Second)
			}
		})
	}
}

func nodeIDs(ss []Source) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Node)
	}
	return out
}

func TestTrackerRemembersLatest(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	tr := NewTracker(c.now)
	_, ok := tr.Observe(obs("g", "a", "b"))
	require.True(t, ok)

	// Same set, new scores and model: nothing to publish, but the resolve
	// must carry the latest data.
	o := obs("g", "b", "a")
	o.Sources[0].Probability, o.Sources[1].Probability = 0.95, 0.05
	o.Model.Bundle = "b2"
	o.InferenceMS = 42
	c.add(time.Minute)
	a, ok := tr.Observe(o)
	require.False(t, ok)
	require.Equal(t, []string{"b"}, a.CredibleSet)
	require.Equal(t, c.now(), a.ObservedAt)

	c.add(time.Minute)
	w := Window{From: c.now().Add(-time.Hour), To: c.now()}
	r, ok := tr.Resolve("g", w, 1)
	require.True(t, ok)
	require.Equal(t, Resolved, r.Status)
	require.Equal(t, uint64(2), r.Seq)
	require.Equal(t, o.Sources, r.Sources)
	require.Equal(t, []string{"b"}, r.CredibleSet)
	require.Equal(t, "b2", r.Model.Bundle)
	require.Equal(t, 42.0, r.InferenceMS)
	require.Equal(t, 1, r.Infected)
	require.Equal(t, w, r.Window)
	require.Equal(t, c.now(), r.ObservedAt)
	_, open := tr.Open("g")
	require.False(t, open)
}

func TestTrackerTimesUTC(t *testing.T) {
	zone := time.FixedZone("Y", -5*3600)
	tr := NewTracker(func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, zone) })
	a, ok := tr.Observe(obs("g", "a"))
	require.True(t, ok)
	for _, tm := range []time.Time{a.ObservedAt, a.Window.From, a.Window.To} {
		require.Equal(t, time.UTC, tm.Location())
	}
	b, err := json.Marshal(a)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "2026-01-01T05:00:00Z", m["observed_at"])
	require.Equal(t, map[string]any{"from": "2026-01-02T02:00:00Z", "to": "2026-01-02T03:00:00Z"}, m["window"])
	for _, k := range []string{"schema", "id", "fingerprint", "status", "graph", "window", "infected", "sources",
		"credible_set", "threshold", "model", "inference_ms", "seq", "observed_at"} {
		require.Contains(t, m, k)
	}
	require.Len(t, m, 14)
	require.Equal(t, map[string]any{"bundle": "b", "forward": "si", "forward_version": "1"}, m["model"])
	require.Equal(t, map[string]any{"node": "a", "score": 1.0, "probability": 1.0}, m["sources"].([]any)[0])

	// the same answer again, an update and the resolve (stamped by the
	// same clock, its window given in another zone): UTC throughout
	o := obs("g", "a")
	same, publish := tr.Observe(o)
	require.False(t, publish)
	upd, publish := tr.Observe(obs("g", "a", "b"))
	require.True(t, publish)
	r, ok := tr.Resolve("g", o.Window, 0)
	require.True(t, ok)
	for _, al := range []Alert{same, upd, r} {
		for _, tm := range []time.Time{al.ObservedAt, al.Window.From, al.Window.To} {
			require.Equal(t, time.UTC, tm.Location(), "%s", al.Status)
		}
	}
	require.Equal(t, "2026-01-01T05:00:00Z", r.ObservedAt.Format(time.RFC3339))

	// no source: [] for the lists, not null
	none := obs("g")
	none.Sources = nil
	e, ok := tr.Observe(none)
	require.True(t, ok)
	b, err = json.Marshal(e)
	require.NoError(t, err)
	require.Contains(t, string(b), `"sources":[],"credible_set":[]`)
}

// The fingerprint is the documented hash; expected values computed apart
// from the package, with
// printf 'jazz\0002026-01-02T03:04:05.123456789Z\0003' | sha256sum | cut -c1-32
// (the time in UTC, nanoseconds as RFC 3339 writes them, n in decimal).
func TestFingerprintIsTheDocumentedHash(t *testing.T) {
	at := time.Date(2026, 1, 2, 4, 4, 5, 123456789, time.FixedZone("Z+1", 3600))
	require.Equal(t, "df9ad5191774a327c49324f4e1ec73b4", Fingerprint("jazz", at, 3))
	require.Equal(t, "da393cfb5b67d66b9f426cdda1d3ade8", Fingerprint("jazz", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 12))
	require.Equal(t, "da393cfb5b67d66b9f426cdda1d3ade8-12", ID("da393cfb5b67d66b9f426cdda1d3ade8", 12))
}

// A Tracker without a clock uses time.Now; the zero Tracker (as JSON
// decodes into) is ready to use.
func TestTrackerDefaults(t *testing.T) {
	before := time.Now()
	a, ok := NewTracker(nil).Observe(obs("g", "a"))
	require.True(t, ok)
	require.False(t, a.ObservedAt.Before(before.Truncate(time.Second)))
	require.False(t, a.ObservedAt.After(time.Now()))

	var zero Tracker
	a, ok = zero.Observe(obs("g", "a"))
	require.True(t, ok)
	require.False(t, a.ObservedAt.IsZero())
	var restored Tracker
	require.NoError(t, restored.UnmarshalJSON([]byte(`{"schema":"sourcewatch.alert-tracker.v1"}`)))
	_, ok = restored.Observe(obs("g", "a"))
	require.True(t, ok)
}

// FitSources over every limit, byte by byte, of an alert that has its id:
// the fitted alert is never over the limit; the count of kept sources
// grows with the limit, and where it grows the alert is exactly the limit
// (at one byte less it did not fit), so no room is wasted or overrun; and
// fitted again to less room, it keeps one count and one sentence.
func TestFitSourcesEveryLimit(t *testing.T) {
	const n = 30
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d-%s", i, strings.Repeat("x", i%7))
	}
	a := Alert{Schema: Schema, ID: "f-1", Fingerprint: "f", Status: Firing, Graph: "g", Sources: src(nodes...), Seq: 1}
	a.CredibleSet = CredibleSet(a.Sources, DefaultMass)
	full, err := json.Marshal(a)
	require.NoError(t, err)
	prevKept := -1
	for limit := 200; limit <= len(full)+5; limit++ {
		f := FitSources(a, limit)
		data, err := json.Marshal(f)
		require.NoError(t, err)
		kept := len(f.Sources)
		require.Equal(t, n, kept+f.SourcesOmitted, "limit %d", limit)
		if kept > 0 {
			require.LessOrEqual(t, len(data), limit, "limit %d", limit)
		}
		require.GreaterOrEqual(t, kept, prevKept, "limit %d", limit)
		if kept > prevKept && prevKept >= 0 {
			require.Equal(t, limit, len(data), "limit %d: %d kept", limit, kept)
		}
		prevKept = kept
		if f.SourcesOmitted == 0 {
			require.Equal(t, a, f, "limit %d: it fits as it is", limit)
			continue
		}
		require.True(t, strings.HasPrefix(f.Note, fmt.Sprintf("the %d lowest-ranked of %d sources are left out", f.SourcesOmitted, n)), f.Note)
		g := FitSources(f, limit-200)
		require.Equal(t, n, len(g.Sources)+g.SourcesOmitted, "limit %d, fitted again", limit)
		require.Equal(t, 1, strings.Count(g.Note, "lowest-ranked"), g.Note)
	}
	require.Equal(t, n, prevKept)
}

func TestTrackerDoesNotAlias(t *testing.T) {
	tr := NewTracker(nil)
	o := obs("g", "a", "b")
	a, ok := tr.Observe(o)
	require.True(t, ok)
	o.Sources[0].Node = "z"
	a.Sources[1].Node = "y"
	a.CredibleSet[0] = "y"
	got, open := tr.Open("g")
	require.True(t, open)
	require.Equal(t, []string{"a", "b"}, nodeIDs(got.Sources))
	require.Equal(t, []string{"a", "b"}, got.CredibleSet)
	require.Equal(t, []string{"a", "b"}, tr.Pending("g")[0].CredibleSet)
}

func TestTrackerSnapshotRestart(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	tr := NewTracker(c.now)
	f1, _ := tr.Observe(obs("g", "a"))
	u, _ := tr.Observe(obs("g", "a", "b"))
	tr.Observe(obs("h", "x"))
	tr.Resolve("h", Window{}, 0)

	snap, err := json.Marshal(tr)
	require.NoError(t, err)

	// A restarted monitor: same clock instant on purpose, so only the
	// restored incident counter keeps h's next fingerprint new.
	tr2 := NewTracker(c.now)
	require.NoError(t, json.Unmarshal(snap, tr2))
	require.Equal(t, []string{"g"}, tr2.Graphs())

	a, ok := tr2.Observe(obs("g", "b", "a"))
	require.False(t, ok, "same set after restart must not republish")
	require.Equal(t, u.ID, a.ID)
	r, ok := tr2.Resolve("g", Window{}, 0)
	require.True(t, ok)
	require.Equal(t, f1.Fingerprint, r.Fingerprint)
	require.Equal(t, uint64(3), r.Seq)

	h, ok := tr2.Observe(obs("h", "x"))
	require.True(t, ok)
	require.Equal(t, Firing, h.Status)
	hOld, _ := tr.Resolve("h", Window{}, 0) // closed already in tr: zero
	require.Empty(t, hOld.Fingerprint)
	require.NotEqual(t, Fingerprint("h", c.now(), 1), h.Fingerprint)
	require.Equal(t, Fingerprint("h", c.now(), 2), h.Fingerprint)

	// The snapshot round-trips exactly.
	again, err := json.Marshal(tr2)
	require.NoError(t, err)
	tr3 := NewTracker(c.now)
	require.NoError(t, tr3.UnmarshalJSON(again))
	again2, err := tr3.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, string(again), string(again2))
}

func TestTrackerUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not json", `{`, "unexpected end"},
		{"wrong schema", `{"schema":"other","graphs":{}}`, `schema "other"`},
		{"null graph", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":null}}`, `graph "g": null state`},
		{"graph mismatch", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"open":{"graph":"h","fingerprint":"f","seq":1,"status":"firing"}}}}`, `open incident names graph "h"`},
		{"no seq", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"open":{"graph":"g","fingerprint":"f","status":"firing"}}}}`, "without fingerprint or seq"},
		{"resolved open", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"open":{"graph":"g","fingerprint":"f","seq":2,"status":"resolved"}}}}`, `status "resolved"`},
		{"pending graph mismatch", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"pending":[{"graph":"h","id":"f-1","fingerprint":"f","seq":1,"status":"firing"}]}}}`, `pending alert 0 names graph "h"`},
		{"pending id mismatch", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"pending":[{"graph":"g","id":"f-2","fingerprint":"f","seq":1,"status":"firing"}]}}}`, `pending alert 0 has id "f-2"`},
		{"pending bad status", `{"schema":"sourcewatch.alert-tracker.v1","graphs":{"g":{"incidents":1,"pending":[{"graph":"g","id":"f-1","fingerprint":"f","seq":1,"status":"gone"}]}}}`, `pending alert 0 has status "gone"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(nil)
			tr.Observe(obs("keep", "a"))
			err := tr.UnmarshalJSON([]byte(tt.in))
			require.ErrorIs(t, err, ErrState)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, []string{"keep"}, tr.Graphs(), "a failed restore must leave the state alone")
		})
	}
}

// TestTrackerPending checks the queue of alerts handed out and not yet
// acknowledged: every published alert is queued in order, Published removes
// exactly the acknowledged one, and the queue survives a snapshot, so a
// restarted monitor resends the same alerts under the same ids.
func TestTrackerPending(t *testing.T) {
	type step struct {
		observe []string // nodes to observe; nil with resolve
		resolve bool
		ack     int // acknowledge this many pending alerts (oldest first) after the step
		// want is the pending queue after the step, as status/seq.
		want []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"acknowledged alerts leave the queue", []step{
			{observe: []string{"a"}, want: []string{"firing/1"}},
			{observe: []string{"a"}, ack: 1, want: nil},
			{observe: []string{"b"}, ack: 1, want: nil},
			{resolve: true, ack: 1, want: nil},
		}},
		{"unacknowledged alerts queue in seq order", []step{
			{observe: []string{"a"}, want: []string{"firing/1"}},
			{observe: []string{"a"}, want: []string{"firing/1"}},
			{observe: []string{"b"}, want: []string{"firing/1", "updated/2"}},
			{resolve: true, want: []string{"firing/1", "updated/2", "resolved/3"}},
			{observe: []string{"c"}, want: []string{"firing/1", "updated/2", "resolved/3", "firing/1"}},
			{observe: []string{"c"}, ack: 2, want: []string{"resolved/3", "firing/1"}},
		}},
		{"acknowledging all but one keeps the one", []step{
			{observe: []string{"a"}, want: []string{"firing/1"}},
			{observe: []string{"b"}, ack: 1, want: []string{"updated/2"}},
		}},
		{"a pending resolve outlives the incident", []step{
			{observe: []string{"a"}, ack: 1},
			{resolve: true, want: []string{"resolved/2"}},
			{resolve: true, want: []string{"resolved/2"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
			tr := NewTracker(c.now)
			var handed []Alert
			for i, st := range tt.steps {
				c.add(time.Second)
				var a Alert
				var ok bool
				if st.resolve {
					a, ok = tr.Resolve("g", Window{}, 0)
				} else {
					a, ok = tr.Observe(obs("g", st.observe...))
				}
				if ok {
					handed = append(handed, a)
				}
				for range st.ack {
					p := tr.Pending("g")
					require.NotEmpty(t, p, "step %d", i)
					require.True(t, tr.Published("g", p[0].ID), "step %d", i)
					require.False(t, tr.Published("g", p[0].ID), "step %d: acknowledged twice", i)
				}
				var got []string
				for _, p := range tr.Pending("g") {
					got = append(got, string(p.Status)+"/"+strconv.FormatUint(p.Seq, 10))
				}
				require.Equal(t, st.want, got, "step %d", i)
			}
			// The queue holds exactly the handed-out alerts not acknowledged,
			// with their content, and round-trips through a snapshot.
			pending := tr.Pending("g")
			if len(pending) > 0 {
				require.Equal(t, handed[len(handed)-len(pending):], pending)
			}
			snap, err := tr.MarshalJSON()
			require.NoError(t, err)
			tr2 := NewTracker(c.now)
			require.NoError(t, tr2.UnmarshalJSON(snap))
			require.Equal(t, pending, tr2.Pending("g"))
		})
	}
	t.Run("copies", func(t *testing.T) {
		tr := NewTracker(nil)
		tr.Observe(obs("g", "a"))
		p := tr.Pending("g")
		p[0].Sources[0].Node = "z"
		require.Equal(t, "a", tr.Pending("g")[0].Sources[0].Node)
		require.Nil(t, tr.Pending("other"))
		require.False(t, tr.Published("other", p[0].ID))
	})
}

func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker(nil)
	var wg sync.WaitGroup
	published := make([]int, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				g := []string{"g0", "g1"}[i%2]
				if _, ok := tr.Observe(obs(g, []string{"a", "b", "c"}[i%3])); ok {
					published[w]++
				}
				if i%50 == 49 {
					tr.Resolve(g, Window{}, 0)
				}
				_, _ = tr.MarshalJSON()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range published {
		total += n
	}
	require.Positive(t, total)
}

func TestCredibleSet(t *testing.T) {
	s := func(node string, score, p float64) Source { return Source{Node: node, Score: score, Probability: p} }
	tests := []struct {
		name    string
		sources []Source
		mass    float64
		want    []string
	}{
		{"nil", nil, 0.9, []string{}},
		{"all zero", []Source{s("a", 1, 0), s("b", 2, 0)}, 0.9, []string{}},
		{"negative counts as zero", []Source{s("a", 1, -1), s("b", 0, 0.5)}, 0.9, []string{"b"}},
		{"single", []Source{s("a", 1, 0.3)}, 0.9, []string{"a"}},
		{"sorted by probability not input order", []Source{s("a", 9, 0.1), s("b", 1, 0.6), s("c", 2, 0.3)}, 0.9, []string{"b", "c"}},
		{"exactly at mass stops", []Source{s("a", 0, 0.45), s("b", 0, 0.45), s("c", 0, 0.1)}, 0.9, []string{"a", "b"}},
		{"just below mass takes one more", []Source{s("a", 0, 0.45), s("b", 0, 0.44), s("c", 0, 0.11)}, 0.9, []string{"a", "b", "c"}},
		{"relative to total, not 1", []Source{s("a", 0, 4), s("b", 0, 5), s("c", 0, 1)}, 0.9, []string{"b", "a"}},
		{"tie broken by score", []Source{s("a", 1, 0.5), s("b", 2, 0.5)}, 0.5, []string{"b"}},
		{"tie broken by node id", []Source{s("b", 1, 0.5), s("a", 1, 0.5)}, 0.5, []string{"a"}},
		{"mass 1 skips zero tail", []Source{s("a", 0, 0.1), s("b", 0, 0.2), s("c", 0, 0.7), s("d", 0, 0)}, 1, []string{"c", "b", "a"}},
		{"mass above 1 is 1", []Source{s("a", 0, 0.5), s("b", 0, 0.5), s("z", 0, 0)}, 7, []string{"a", "b"}},
		{"mass 0 is empty", []Source{s("a", 0, 1)}, 0, []string{}},
		{"mass NaN is empty", []Source{s("a", 0, 1)}, nan(), []string{}},
		{"NaN probability counts as zero", []Source{s("a", 0, nan()), s("b", 0, 0.2)}, 0.9, []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Source(nil), tt.sources...)
			got := CredibleSet(tt.sources, tt.mass)
			require.Equal(t, tt.want, got)
			require.Equal(t, nodeIDs(in), nodeIDs(tt.sources), "input must not be reordered")
		})
	}
}

// TestCredibleSetMinimal checks the defining property on many random
// inputs: the set holds the mass, and dropping its last member does not.
func TestCredibleSetMinimal(t *testing.T) {
	for seed := range uint64(200) {
		r := newRand(seed)
		n := 1 + r.IntN(20)
		ss := make([]Source, n)
		var total float64
		for i := range ss {
			ss[i] = Source{Node: string(rune('a' + i)), Score: r.Float64(), Probability: r.Float64()}
			total += ss[i].Probability
		}
		mass := r.Float64()
		got := CredibleSet(ss, mass)
		byNode := map[string]float64{}
		for _, s := range ss {
			byNode[s.Node] = s.Probability
		}
		var sum, last float64
		for _, node := range got {
			sum += byNode[node]
			last = byNode[node]
		}
		require.GreaterOrEqual(t, sum, mass*total*(1-1e-9), "seed %d", seed)
		require.Less(t, sum-last, mass*total, "seed %d: not minimal", seed)
		// Every member is at least as probable as every non-member.
		in := map[string]bool{}
		for _, node := range got {
			in[node] = true
		}
		for _, s := range ss {
			if !in[s.Node] && len(got) > 0 {
				require.LessOrEqual(t, s.Probability, last, "seed %d", seed)
			}
		}
	}
}

// An observation's note reaches its alert and the alert's JSON, and an
// alert without one has no note field.
func TestTrackerNote(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	tr := NewTracker(c.now)
	o := obs("g", "a")
	o.Note = "2.0% of the nodes infected, outside the 20-50% the bundle's training snapshots held"
	a, ok := tr.Observe(o)
	require.True(t, ok)
	require.Equal(t, o.Note, a.Note)
	data, err := json.Marshal(a)
	require.NoError(t, err)
	require.Contains(t, string(data), `"note":"2.0% of the nodes infected`)

	a, ok = tr.Observe(obs("g", "b"))
	require.True(t, ok)
	require.Empty(t, a.Note)
	data, err = json.Marshal(a)
	require.NoError(t, err)
	require.NotContains(t, string(data), `"note"`)
}

// Retire resolves a graph's open incident with a note, queued like any
// resolve; Forget drops the graph only once nothing is open or pending.
func TestTrackerRetireAndForget(t *testing.T) {
	tr := NewTracker(func() time.Time { return time.Date(2026, 1, 2, 5, 0, 0, 0, time.UTC) })
	o := obs("g", "a")
	o.Note = "observed early"
	fired, ok := tr.Observe(o)
	require.True(t, ok)
	require.True(t, tr.Published("g", fired.ID))
	_, ok = tr.Observe(obs("h", "b"))
	require.True(t, ok)
	require.Equal(t, []string{"g", "h"}, tr.Known())

	require.False(t, tr.Retire("nope", "gone"))
	require.True(t, tr.Retire("g", "gone"))
	require.False(t, tr.Retire("g", "gone"), "closed already")
	p := tr.Pending("g")
	require.Len(t, p, 1)
	require.Equal(t, Resolved, p[0].Status)
	require.Equal(t, fired.Fingerprint, p[0].Fingerprint)
	require.Equal(t, fired.Seq+1, p[0].Seq)
	require.Equal(t, fired.Window, p[0].Window, "the incident's last window")
	require.Equal(t, fired.Infected, p[0].Infected)
	require.Equal(t, "observed early; gone", p[0].Note, "why after the latest inference's note")

	require.False(t, tr.Forget("g"), "its resolve is pending")
	require.True(t, tr.Published("g", p[0].ID))
	require.True(t, tr.Forget("g"))
	require.Equal(t, []string{"h"}, tr.Known())
	require.False(t, tr.Forget("h"), "an open incident is kept")
	require.True(t, tr.Forget("never-seen"))
}

// An alert too large for the server keeps its highest-ranked sources, says
// how many it left out, fits (with its id) and stays the same alert when
// the same sources come again; its resolve fits too.
func TestTrackerFitsAlertsToMaxBytes(t *testing.T) {
	tr, o := longSources(40)
	o.Note = "observed early"
	o.MaxBytes = 4000
	a, publish := tr.Observe(o)
	require.True(t, publish)
	data, err := json.Marshal(a)
	require.NoError(t, err)
	require.LessOrEqual(t, len(data), o.MaxBytes)
	require.Positive(t, a.SourcesOmitted)
	require.Equal(t, len(o.Sources), len(a.Sources)+a.SourcesOmitted)
	require.Equal(t, o.Sources[:len(a.Sources)], a.Sources, "the highest-ranked are kept, in order")
	require.Equal(t, slices.DeleteFunc(CredibleSet(o.Sources, DefaultMass), func(n string) bool {
		return !slices.ContainsFunc(a.Sources, func(s Source) bool { return s.Node == n })
	}), a.CredibleSet, "the whole answer's credible set, less what was left out")
	require.Contains(t, a.Note, "observed early; the "+strconv.Itoa(a.SourcesOmitted)+" lowest-ranked of 40 sources are left out")
	// One more source would not have fitted.
	b := a
	b.Sources = o.Sources[:len(a.Sources)+1]
	b.CredibleSet = CredibleSet(b.Sources, DefaultMass)
	data, err = json.Marshal(b)
	require.NoError(t, err)
	require.Greater(t, len(data)+256, o.MaxBytes)

	_, publish = tr.Observe(o)
	require.False(t, publish, "the same sources, fitted the same way, are no update")

	r, ok := tr.Resolve("g", o.Window, 0)
	require.True(t, ok)
	data, err = json.Marshal(r)
	require.NoError(t, err)
	require.LessOrEqual(t, len(data), o.MaxBytes)
	require.Equal(t, a.SourcesOmitted, r.SourcesOmitted)

	// Without a limit, or under it, nothing is left out.
	o.MaxBytes = 0
	a, _ = tr.Observe(o)
	require.Zero(t, a.SourcesOmitted)
	require.Len(t, a.Sources, 40)
}

// Fitting keeps the whole answer's credible set, less the nodes left out
// (not a set of the kept ones alone); a note that grows does not make the
// same sources an update; an alert fitted before is fitted again to a
// smaller limit with one count and one note.
func TestFitSourcesKeepsTheAnswersCredibleSetAndCount(t *testing.T) {
	long := func(s string) string { return strings.Repeat(s, 900) }
	full := []Source{{Node: long("a"), Score: .9, Probability: .2}, {Node: long("b"), Score: .8, Probability: .2},
		{Node: long("c"), Score: .7, Probability: .2}, {Node: long("d"), Score: .6, Probability: .9},
		{Node: long("e"), Score: .5, Probability: .9}}
	fullSet := CredibleSet(full, DefaultMass)
	refits := 0
	for limit := 2000; limit < 6000; limit += 50 {
		a := FitSources(Alert{Schema: Schema, Graph: "g", Sources: full, CredibleSet: fullSet}, limit)
		for _, n := range a.CredibleSet {
			require.Contains(t, fullSet, n, "limit %d", limit)
		}
		if a.SourcesOmitted == 0 {
			continue
		}
		// Fitted again to less room: one count of all that are left out,
		// one note.
		b := FitSources(a, limit-1000)
		require.Equal(t, len(full), len(b.Sources)+b.SourcesOmitted)
		require.Equal(t, 1, strings.Count(b.Note, "lowest-ranked"), b.Note)
		require.Contains(t, b.Note, fmt.Sprintf("the %d lowest-ranked of 5 sources", b.SourcesOmitted))
		// With the daemon's note after the sentence, as it goes out.
		a.Note += "; demo: not a real incident"
		b = FitSources(a, limit-1000)
		require.Equal(t, 1, strings.Count(b.Note, "lowest-ranked"), b.Note)
		if b.SourcesOmitted > a.SourcesOmitted {
			refits++
			require.True(t, strings.HasPrefix(b.Note, "demo: not a real incident; the "), b.Note)
		} else {
			require.Equal(t, a.Note, b.Note, "fitting already")
		}
	}

	require.Positive(t, refits, "some alert was fitted again to less room")

	tr, o := longSources(40)
	o.MaxBytes = 4000
	_, publish := tr.Observe(o)
	require.True(t, publish)
	o.Note = strings.Repeat("the observation is smaller than any the model was trained on ", 5)
	a, publish := tr.Observe(o)
	require.False(t, publish, "the same sources with a longer note: %d kept", len(a.Sources))
	o.Sources = o.Sources[:39]
	_, publish = tr.Observe(o)
	require.True(t, publish, "one source fewer is an update, even among those left out")
}

// An alert the tracker fitted, given the daemon's note as it goes out,
// fits the publish limit as it is: fitting it again there leaves nothing
// more out (the id's room was once counted twice, and the stream held
// one source fewer than the tracker's state).
func TestFittedAlertGoesOutAsMade(t *testing.T) {
	const limit, note = 7168, "demo: inferred from simulated events, not a real incident"
	for _, n := range []int{50, 120, 300} {
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("node-%04d", i)
		}
		tr := NewTracker((&clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}).now)
		o := obs("g", nodes...)
		o.MaxBytes = limit - len(note) - 2
		a, publish := tr.Observe(o)
		require.True(t, publish)
		out := a
		out.Note += "; " + note
		sent := FitSources(out, limit)
		require.Equal(t, a.SourcesOmitted, sent.SourcesOmitted, "%d sources", n)
		require.Equal(t, out.Note, sent.Note)
		data, err := json.Marshal(sent)
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), limit)
	}
}

// longSources is a tracker and an observation of n sources with ids of
// about 200 bytes.
func longSources(n int) (*Tracker, Observation) {
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = strings.Repeat(strconv.Itoa(i%10), 200) + "-" + strconv.Itoa(i)
	}
	return NewTracker(c.now), obs("g", nodes...)
}

// A fitted incident retired with a note of its own still says, in its
// resolve's note, what it leaves out.
func TestRetiredFittedIncidentSaysWhatIsLeftOut(t *testing.T) {
	tr, o := longSources(40)
	o.MaxBytes = 4000
	a, _ := tr.Observe(o)
	require.Positive(t, a.SourcesOmitted)
	require.True(t, tr.Retire("g", "resolved because graph g is no longer in the daemon's config"))
	p := tr.Pending("g")
	res := p[len(p)-1]
	require.Equal(t, Resolved, res.Status)
	require.Equal(t, a.SourcesOmitted, res.SourcesOmitted)
	require.True(t, strings.HasPrefix(res.Note, "resolved because graph g is no longer in the daemon's config; the "), res.Note)
	require.Contains(t, res.Note, strconv.Itoa(a.SourcesOmitted)+" lowest-ranked of 40 sources are left out")
}

// A resolve with infected nodes left in the window says why after the
// latest inference's note, with the left-out sources' part still last.
func TestTrackerResolveBecause(t *testing.T) {
	tr := NewTracker(nil)
	_, ok := tr.ResolveBecause("g", Window{}, 3, "why")
	require.False(t, ok, "nothing open: nothing resolved")

	o := obs("g", "a")
	o.Note = "observed early"
	fire(t, tr, "g", "a")
	_, publish := tr.Observe(o) // the same set with a note: no alert, but the latest note
	require.False(t, publish)
	r, ok := tr.ResolveBecause("g", o.Window, 21, "resolved with 21 infected in the window, under min_infected 100")
	require.True(t, ok)
	require.Equal(t, Resolved, r.Status)
	require.Equal(t, 21, r.Infected)
	require.Equal(t, "observed early; resolved with 21 infected in the window, under min_infected 100", r.Note)

	big, lo := longSources(40)
	lo.Note = "observed early"
	lo.MaxBytes = 4000
	a, publish := big.Observe(lo)
	require.True(t, publish)
	require.Positive(t, a.SourcesOmitted)
	r, ok = big.ResolveBecause("g", lo.Window, 5, "why")
	require.True(t, ok)
	require.Regexp(t, `^observed early; why; the \d+ lowest-ranked of 40 sources are left out`, r.Note)
}

// An incident that left exactly one source out is not updated by the same
// answer again (sameAnswer compares the kept ones and the count), and
// fitted again it keeps one sentence on what it leaves out.
func TestOneSourceLeftOutIsNoUpdate(t *testing.T) {
	for maxBytes := 15000; maxBytes > 1000; maxBytes -= 10 {
		tr, o := longSources(20)
		o.MaxBytes = maxBytes
		a, publish := tr.Observe(o)
		require.True(t, publish)
		if a.SourcesOmitted != 1 {
			continue
		}
		// fitted again to less room: the one sentence, made anew
		b := FitSources(a, maxBytes-1000)
		require.Equal(t, 20, len(b.Sources)+b.SourcesOmitted)
		require.Equal(t, 1, strings.Count(b.Note, "lowest-ranked"), b.Note)
		_, publish = tr.Observe(o)
		require.False(t, publish, "the same 20 sources, one left out")
		o.Sources = o.Sources[:19]
		_, publish = tr.Observe(o)
		require.True(t, publish, "19 sources are another answer")
		return
	}
	t.Fatal("no limit left exactly one source out")
}
