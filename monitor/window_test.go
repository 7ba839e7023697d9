package monitor

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func pathGraph(t testing.TB, n int) *graph.Graph {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < n; i++ {
		b.WriteString(itoa(i) + " " + itoa(i+1) + "\n")
	}
	g, err := graph.Read(strings.NewReader(b.String()), "path")
	require.NoError(t, err)
	return g
}

func itoa(i int) string { return strconv.Itoa(i) }

// sameWindow reports whether two windows hold the same node states and
// times.
func sameWindow(a, b *window) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(a.nodes) != len(b.nodes) {
		return false
	}
	for i := range a.nodes {
		if a.nodes[i] != b.nodes[i] {
			return false
		}
	}
	return true
}

func TestWindowApply(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(m int) int64 { return t0.Add(time.Duration(m) * time.Minute).UnixNano() }
	type ev struct {
		v    int
		s    nodeState
		ts   int64
		id   string
		want outcome
	}
	tests := []struct {
		name    string
		events  []ev
		now     time.Time
		wantY   []float64
		changes uint64
	}{
		{"infect", []ev{{0, infected, at(0), "", outApplied}}, t0, []float64{1, 0, 0, 0}, 1},
		{"recover", []ev{{0, infected, at(0), "", outApplied}, {0, recovered, at(1), "", outApplied}}, t0.Add(time.Minute), []float64{0, 0, 0, 0}, 2},
		{"late recovery older than infection is stale",
			[]ev{{1, infected, at(5), "", outApplied}, {1, recovered, at(2), "", outStale}}, t0.Add(5 * time.Minute), []float64{0, 1, 0, 0}, 1},
		{"out of order ends the same as in order",
			[]ev{{2, recovered, at(3), "", outApplied}, {2, infected, at(1), "", outStale}}, t0.Add(3 * time.Minute), []float64{0, 0, 0, 0}, 1},
		{"same event twice", []ev{{3, infected, at(0), "", outApplied}, {3, infected, at(0), "", outUnchanged}}, t0, []float64{0, 0, 0, 1}, 1},
		{"duplicate id with other content", []ev{{3, infected, at(0), "a", outApplied}, {3, recovered, at(1), "a", outDuplicate}}, t0.Add(time.Minute), []float64{0, 0, 0, 1}, 1},
		{"newer infected refreshes time", []ev{{0, infected, at(0), "", outApplied}, {0, infected, at(50), "", outRefreshed}}, t0.Add(100 * time.Minute), []float64{1, 0, 0, 0}, 1},
		{"expired infection counts 0", []ev{{0, infected, at(0), "", outApplied}, {1, infected, at(30), "", outApplied}}, t0.Add(61 * time.Minute), []float64{0, 1, 0, 0}, 2},
		{"susceptible again", []ev{{0, infected, at(0), "", outApplied}, {0, susceptible, at(1), "", outApplied}}, t0.Add(time.Minute), []float64{0, 0, 0, 0}, 2},
		{"infected then recovered at one time", []ev{{1, infected, at(0), "", outApplied}, {1, recovered, at(0), "", outApplied}}, t0, []float64{0, 0, 0, 0}, 2},
		{"recovered then infected at one time", []ev{{1, recovered, at(0), "", outApplied}, {1, infected, at(0), "", outStale}}, t0, []float64{0, 0, 0, 0}, 1},
		{"susceptible then infected at one time", []ev{{2, susceptible, at(0), "", outRefreshed}, {2, infected, at(0), "", outApplied}}, t0, []float64{0, 0, 1, 0}, 1},
		{"infected then susceptible at one time", []ev{{2, infected, at(0), "", outApplied}, {2, susceptible, at(0), "", outStale}}, t0, []float64{0, 0, 1, 0}, 1},
	}
	g := pathGraph(t, 4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(g, time.Hour, 0)
			for i, e := range tc.events {
				require.Equal(t, e.want, w.apply(e.v, e.s, e.ts, e.id), "event %d", i)
			}
			o := w.observe(tc.now, nil)
			require.Equal(t, tc.wantY, o.y)
			require.Equal(t, tc.changes, o.changes)
			inf := 0
			for _, y := range tc.wantY {
				if y > 0 {
					inf++
				}
			}
			require.Equal(t, inf, o.infected)
		})
	}
}

func TestWindowDecayAndBounds(t *testing.T) {
	g := pathGraph(t, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newWindow(g, time.Hour, 10*time.Minute)
	w.apply(0, infected, t0.UnixNano(), "")
	w.apply(2, infected, t0.Add(10*time.Minute).UnixNano(), "")
	o := w.observe(t0.Add(20*time.Minute), make([]float64, 1))
	require.InDelta(t, math.Exp(-2), o.y[0], 1e-12)
	require.Equal(t, 0.0, o.y[1])
	require.InDelta(t, math.Exp(-1), o.y[2], 1e-12)
	require.Equal(t, t0, o.from)
	require.Equal(t, t0.Add(10*time.Minute), o.to)
}

func TestWindowSnapshotRoundTrip(t *testing.T) {
	g := pathGraph(t, 5)
	t0 := time.Now()
	w := newWindow(g, time.Hour, 0)
	w.apply(1, infected, t0.UnixNano(), "x")
	w.apply(4, recovered, t0.UnixNano()+5, "")
	w.markSeq(17)
	s := w.snapshot("p")
	require.Equal(t, uint64(17), s.Seq)
	r := newWindow(g, time.Hour, 0)
	skipped, err := r.restore(s)
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.True(t, sameWindow(w, r))
	inf, ch, seq := r.counts()
	require.Equal(t, 1, inf)
	require.Equal(t, uint64(2), ch)
	require.Equal(t, uint64(17), seq)

	s.Nodes = append(s.Nodes, snapshotEntry{Node: "nope", State: "infected", TS: 1})
	skipped, err = r.restore(s)
	require.NoError(t, err)
	require.Equal(t, []string{"nope"}, skipped)
	s.Nodes[0].State = "zombie"
	_, err = r.restore(s)
	require.ErrorContains(t, err, `bad state "zombie"`)
}

// TestWindowSameTimeIsOrderIndependent applies every order of a node's
// events that share one time, then all of them again (a redelivery): the
// state is the same whatever the order, and the redelivery changes
// nothing.
func TestWindowSameTimeIsOrderIndependent(t *testing.T) {
	g := pathGraph(t, 2)
	ts := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).UnixNano()
	tests := []struct {
		name   string
		states []nodeState
		want   nodeState
	}{
		{"infected, recovered", []nodeState{infected, recovered}, recovered},
		{"susceptible, infected", []nodeState{susceptible, infected}, infected},
		{"susceptible, recovered", []nodeState{susceptible, recovered}, recovered},
		{"all three", []nodeState{susceptible, infected, recovered}, recovered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range permutations(tc.states) {
				w := newWindow(g, time.Hour, 0)
				for _, s := range order {
					w.apply(0, s, ts, "")
				}
				require.Equal(t, entry{state: tc.want, ts: ts}, w.nodes[0], "order %v", order)
				before := w.snapshot("p")
				for _, s := range order {
					require.NotEqual(t, outApplied, w.apply(0, s, ts, ""), "redelivered %v of %v", s, order)
				}
				require.Equal(t, before, w.snapshot("p"), "order %v", order)
			}
		})
	}
}

func permutations(s []nodeState) [][]nodeState {
	if len(s) <= 1 {
		return [][]nodeState{append([]nodeState(nil), s...)}
	}
	var out [][]nodeState
	for i := range s {
		rest := append(append([]nodeState(nil), s[:i]...), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]nodeState{s[i]}, p...))
		}
	}
	return out
}

// The window's counters by hand: infected of any age, changes applied,
// the newest event time and the sequence applied through.
func TestWindowCounts(t *testing.T) {
	w := newWindow(pathGraph(t, 4), time.Hour, 0)
	steps := []struct {
		v        int
		s        nodeState
		ts       int64
		want     outcome
		infected int
		changes  uint64
	}{
		{0, infected, 10, outApplied, 1, 1},
		{1, infected, 12, outApplied, 2, 2},
		{0, recovered, 11, outApplied, 1, 3},
		{1, infected, 13, outRefreshed, 1, 3},
		{2, susceptible, 5, outRefreshed, 1, 3}, // never seen: susceptible already
		{0, infected, 14, outApplied, 2, 4},
		{3, infected, 9, outApplied, 3, 5},
		{3, susceptible, 20, outApplied, 2, 6},
	}
	for i, st := range steps {
		require.Equal(t, st.want, w.apply(st.v, st.s, st.ts, ""), "step %d", i)
		infected, changes, _ := w.counts()
		require.Equal(t, st.infected, infected, "step %d", i)
		require.Equal(t, st.changes, changes, "step %d", i)
	}
	require.Equal(t, int64(20), w.snapshot("g").Latest, "the newest event time, not the last applied")
	w.markSeq(5)
	w.markSeq(3)
	_, _, seq := w.counts()
	require.Equal(t, uint64(5), seq)
	w.forgetSeq()
	_, _, seq = w.counts()
	require.Zero(t, seq)
}

// Event ids deduplicate for the last recentIDs ids, a long id by its key;
// the key of a 65-byte id is sha256: and the hex of its SHA-256 (printf
// 'a%.0s' $(seq 65) | sha256sum).
func TestWindowRemembersIDs(t *testing.T) {
	long := strings.Repeat("a", 65)
	key := "sha256:635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"
	require.Equal(t, key, idKey(long))
	require.Equal(t, key, idKey(key), "a key is its own key")
	require.Equal(t, strings.Repeat("a", 64), idKey(strings.Repeat("a", 64)))
	for _, notKey := range []string{key[:len(key)-1], strings.ToUpper(key), "sha256:" + strings.Repeat("g", 64), "md5:" + key[7:]} {
		require.False(t, isIDHash(notKey), notKey)
	}

	w := newWindow(pathGraph(t, 2), time.Hour, 0)
	require.Equal(t, outApplied, w.apply(0, infected, 1, long))
	require.Equal(t, outDuplicate, w.apply(1, infected, 2, long))
	require.Equal(t, outDuplicate, w.apply(1, infected, 2, key), "a long id and its key are one id")
	for i := range recentIDs - 1 {
		require.Equal(t, outStale, w.apply(0, infected, 0, "id-"+itoa(i)))
	}
	require.Equal(t, outDuplicate, w.apply(1, infected, 2, long), "still among the last recentIDs")
	require.Equal(t, outStale, w.apply(0, infected, 0, "one more"))
	require.Equal(t, outApplied, w.apply(1, infected, 2, long), "pushed out: not a duplicate any more")
	require.Equal(t, outDuplicate, w.apply(1, infected, 2, "id-5"))

	// a restored window remembers the same ids and counts the same
	// infected nodes; a reset one neither
	r := newWindow(pathGraph(t, 2), time.Hour, 0)
	_, err := r.restore(w.snapshot("g"))
	require.NoError(t, err)
	require.Equal(t, outDuplicate, r.apply(1, infected, 3, long))
	require.Equal(t, outDuplicate, r.apply(1, infected, 3, "id-5"))
	require.Equal(t, outStale, r.apply(0, infected, 0, "id-0"), "pushed out before the snapshot")
	infectedNow, _, _ := r.counts()
	require.Equal(t, 2, infectedNow)
	r.reset()
	infectedNow, changes, _ := r.counts()
	require.Zero(t, infectedNow)
	require.Zero(t, changes)
	require.Equal(t, outApplied, r.apply(1, infected, 3, long), "a reset window forgets the ids")
}

// observe reuses dst without keeping what it held, counts an infection
// exactly at the window's edge, names the oldest and newest infection
// counted, and follows setParams; values by hand (no decay: 1 inside the
// window, 0 outside).
func TestWindowObserveEdges(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(m int) int64 { return t0.Add(time.Duration(m) * time.Minute).UnixNano() }
	w := newWindow(pathGraph(t, 4), 10*time.Minute, 0)
	w.apply(0, infected, at(0), "")
	w.apply(1, infected, at(5), "")
	w.apply(2, infected, at(7), "")
	now := t0.Add(10 * time.Minute) // node 0 is exactly 10 minutes old: in
	dst := []float64{9, 9, 9, 9, 9}
	o := w.observe(now, dst)
	require.Equal(t, []float64{1, 1, 1, 0}, o.y)
	require.Equal(t, 3, o.infected)
	require.Equal(t, t0, o.from)
	require.Equal(t, t0.Add(7*time.Minute), o.to)

	w.setParams(4*time.Minute, 0) // node 2 alone within 4 minutes
	o = w.observe(now, o.y)
	require.Equal(t, []float64{0, 0, 1, 0}, o.y)
	require.Equal(t, 1, o.infected)
	require.Equal(t, t0.Add(7*time.Minute), o.from)
	require.Equal(t, o.from, o.to)

	w.setParams(time.Minute, 0)
	o = w.observe(now, o.y)
	require.Equal(t, []float64{0, 0, 0, 0}, o.y)
	require.Zero(t, o.infected)
	require.True(t, o.from.IsZero() && o.to.IsZero())
}
