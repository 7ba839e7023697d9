package monitor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/sourcewatch/sourcewatch/graph"
)

// nodeState is a node's state in a window; the zero value is susceptible,
// the state of a node no event has mentioned.
type nodeState uint8

const (
	susceptible nodeState = iota
	infected
	recovered
)

func (s nodeState) String() string {
	switch s {
	case infected:
		return StateInfected
	case recovered:
		return StateRecovered
	}
	return StateSusceptible
}

// outranks reports whether s wins over t for two events of one node at
// the same event time: the state further along susceptible -> infected ->
// recovered does.
func (s nodeState) outranks(t nodeState) bool { return s > t }

// outcome is what applying one event did.
type outcome string

const (
	outApplied   outcome = "applied"   // the node's state changed
	outRefreshed outcome = "refreshed" // same state, newer time
	outUnchanged outcome = "unchanged" // the same event again
	outStale     outcome = "stale"     // older than the node's last change, or outranked at the same time
	outDuplicate outcome = "duplicate" // an event id seen before
)

// recentIDs is how many event ids a window remembers for deduplication.
// JetStream's Nats-Msg-Id window catches fast duplicates; this catches the
// ones that share an id but arrive later or with other content. The ids
// are part of the snapshot (so a replay drops the same duplicates as the
// first run), which bounds how many are worth keeping.
const recentIDs = 4096

// maxKeptID is the longest event id a window keeps as it is; a longer
// one is kept as "sha256:" and the hex of its SHA-256. Long ids (a URL, a
// serialised key) then deduplicate as short ones do, while the ring and
// its snapshots stay bounded: kept whole, 600 events with ids of 900 KB
// held gigabytes.
const maxKeptID = 64

// idHashPrefix starts the key of an id longer than maxKeptID.
const idHashPrefix = "sha256:"

// isIDHash reports whether id has the form of a long id's key.
func isIDHash(id string) bool {
	h, ok := strings.CutPrefix(id, idHashPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// idKey is what a window keeps of event id id. It is idempotent, as
// restore needs: a snapshot holds the keys, and a key of a long id is
// itself longer than maxKeptID.
func idKey(id string) string {
	if len(id) <= maxKeptID || isIDHash(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return idHashPrefix + hex.EncodeToString(sum[:])
}

// entry is a node's last change.
type entry struct {
	state nodeState
	ts    int64 // event time, unix ns; 0 = never seen
}

// window is one graph's rolling window. It is safe for concurrent use: the
// graph's consumer applies events while the scheduler, snapshots and the
// status endpoint read it.
type window struct {
	g      *graph.Graph
	length time.Duration
	decay  time.Duration

	mu       sync.Mutex
	nodes    []entry
	changes  uint64 // state changes applied, ever (restored from snapshot)
	lastSeq  uint64 // stream sequence of the last message applied
	latest   int64  // newest event time applied, unix ns
	ids      map[string]struct{}
	idRing   []string
	idNext   int
	infected int // nodes whose state is infected, of any age
}

func newWindow(g *graph.Graph, length, decay time.Duration) *window {
	return &window{
		g:      g,
		length: length,
		decay:  decay,
		nodes:  make([]entry, g.N()),
		ids:    make(map[string]struct{}),
		idRing: make([]string, recentIDs),
	}
}

// apply records that node v entered state s at event time ts (unix ns).
// It is idempotent: applying an event a second time, or an event older
// than the node's last change, leaves the window as it was.
//
// Two events of one node at the same time are ordered by state, the later
// one in susceptible -> infected -> recovered winning (outranks): a node
// reported infected and recovered at one instant is recovered, one
// reported susceptible and infected is infected, whichever arrives first.
// Otherwise the last to arrive would win, and a redelivery could flip the
// node back and forth.
func (w *window) apply(v int, s nodeState, ts int64, id string) outcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	if id != "" {
		id = idKey(id)
		if _, dup := w.ids[id]; dup {
			return outDuplicate
		}
		w.rememberLocked(id)
	}
	cur := w.nodes[v]
	switch {
	case ts < cur.ts:
		return outStale
	case ts == cur.ts && s == cur.state:
		return outUnchanged
	case ts == cur.ts && !s.outranks(cur.state):
		return outStale
	}
	if ts > w.latest {
		w.latest = ts
	}
	w.nodes[v] = entry{state: s, ts: ts}
	if s == cur.state {
		return outRefreshed
	}
	if cur.state == infected {
		w.infected--
	}
	if s == infected {
		w.infected++
	}
	w.changes++
	return outApplied
}

func (w *window) rememberLocked(id string) {
	if _, dup := w.ids[id]; dup {
		return
	}
	// id may view a message buffer (see decodeMessage): keep a copy.
	id = strings.Clone(id)
	if old := w.idRing[w.idNext]; old != "" {
		delete(w.ids, old)
	}
	w.idRing[w.idNext] = id
	w.idNext = (w.idNext + 1) % len(w.idRing)
	w.ids[id] = struct{}{}
}

// forgetSeq drops the stream sequence the window has applied through,
// keeping its nodes: that sequence belongs to an events stream since
// deleted, and the new one numbers its messages from 1 again.
func (w *window) forgetSeq() {
	w.mu.Lock()
	w.lastSeq = 0
	w.mu.Unlock()
}

// markSeq records that every message up to stream sequence seq has been
// applied.
func (w *window) markSeq(seq uint64) {
	w.mu.Lock()
	if seq > w.lastSeq {
		w.lastSeq = seq
	}
	w.mu.Unlock()
}

// setParams changes the window length and decay (on reload).
func (w *window) setParams(length, decay time.Duration) {
	w.mu.Lock()
	w.length, w.decay = length, decay
	w.mu.Unlock()
}

// observation is y at one moment, with what the scheduler and alerts need.
type observation struct {
	y        []float64
	infected int       // nodes with y_v > 0
	from, to time.Time // oldest and newest infection counted
	changes  uint64
}

// observe computes y at now into dst (reused when long enough):
// y_v = exp(-age/decay) (1 without decay) for nodes infected within the
// window, 0 otherwise.
func (w *window) observe(now time.Time, dst []float64) observation {
	// The graph's size, not len(w.nodes): restore and reset replace
	// w.nodes (same length) under the lock, which is not held yet.
	n := w.g.N()
	if cap(dst) < n {
		dst = make([]float64, n)
	}
	dst = dst[:n]
	nowNS := now.UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	horizon := nowNS - int64(w.length)
	o := observation{y: dst, changes: w.changes}
	var from, to int64
	for v, e := range w.nodes {
		dst[v] = 0
		if e.state != infected || e.ts < horizon {
			continue
		}
		val := 1.0
		if w.decay > 0 {
			if age := nowNS - e.ts; age > 0 {
				val = math.Exp(-float64(age) / float64(w.decay))
			}
		}
		dst[v] = val
		o.infected++
		if from == 0 || e.ts < from {
			from = e.ts
		}
		if e.ts > to {
			to = e.ts
		}
	}
	if o.infected > 0 {
		o.from, o.to = time.Unix(0, from).UTC(), time.Unix(0, to).UTC()
	}
	return o
}

// counts is the cheap summary the status endpoint and gauges use.
func (w *window) counts() (infectedAnyAge int, changes, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.infected, w.changes, w.lastSeq
}

// snapshot is a window as stored in KV: the nodes any event mentioned,
// the change counter and the stream sequence the snapshot covers.
type snapshot struct {
	Graph       string `json:"graph"`
	Fingerprint string `json:"fingerprint"`
	Seq         uint64 `json:"seq"`
	// StreamCreated is when the events stream Seq counts in was made, so
	// a start finds a stream deleted and made anew since (zero in a
	// snapshot of an earlier build).
	StreamCreated time.Time       `json:"stream_created,omitzero"`
	Changes       uint64          `json:"changes"`
	Latest        int64           `json:"latest"`
	Nodes         []snapshotEntry `json:"nodes"`
	// IDs are the remembered event ids, oldest first.
	IDs []string `json:"ids,omitempty"`
}

type snapshotEntry struct {
	Node  string `json:"node"`
	State string `json:"state"`
	TS    int64  `json:"ts"`
}

func (w *window) snapshot(name string) snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := snapshot{Graph: name, Fingerprint: w.g.Fingerprint(), Seq: w.lastSeq, Changes: w.changes, Latest: w.latest}
	for v, e := range w.nodes {
		if e.ts != 0 {
			s.Nodes = append(s.Nodes, snapshotEntry{Node: w.g.ID(v), State: e.state.String(), TS: e.ts})
		}
	}
	for i := range w.idRing {
		if id := w.idRing[(w.idNext+i)%len(w.idRing)]; id != "" {
			s.IDs = append(s.IDs, id)
		}
	}
	return s
}

// reset empties the window, in place: readers (the status endpoint, on a
// standby taking over) hold the same *window and only its lock.
func (w *window) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nodes = make([]entry, w.g.N())
	w.ids = make(map[string]struct{})
	w.idRing = make([]string, recentIDs)
	w.idNext, w.infected = 0, 0
	w.changes, w.lastSeq, w.latest = 0, 0, 0
}

// restore replaces the window's contents by s. Nodes the graph no longer
// has are skipped and returned, so a changed edge file does not stop the
// daemon.
func (w *window) restore(s snapshot) (skipped []string, err error) {
	nodes := make([]entry, w.g.N())
	inf := 0
	for _, e := range s.Nodes {
		v, ok := w.g.Index(e.Node)
		if !ok {
			skipped = append(skipped, e.Node)
			continue
		}
		st, ok := parseState(e.State)
		if !ok {
			return nil, fmt.Errorf("snapshot of %q: node %q: bad state %q", s.Graph, e.Node, e.State)
		}
		nodes[v] = entry{state: st, ts: e.TS}
		if st == infected {
			inf++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids = make(map[string]struct{}, len(s.IDs))
	w.idRing = make([]string, recentIDs)
	w.idNext = 0
	for _, id := range s.IDs {
		// Snapshots of older versions hold long ids as they came.
		w.rememberLocked(idKey(id))
	}
	w.nodes, w.infected = nodes, inf
	w.changes, w.lastSeq, w.latest = s.Changes, s.Seq, s.Latest
	return skipped, nil
}
