package alerts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// startJS starts an in-process nats-server with JetStream in a temp dir and
// returns a JetStream client connected to it.
func startJS(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server not ready")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, connect(t, s)
}

func connect(t *testing.T, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func fire(t *testing.T, tr *Tracker, graph string, nodes ...string) Alert {
	t.Helper()
	a, ok := tr.Observe(obs(graph, nodes...))
	require.True(t, ok)
	return a
}

func TestSubject(t *testing.T) {
	require.Equal(t, "sourcewatch.alerts.jazz", Subject("sourcewatch", "jazz"))
	for _, bad := range []struct{ prefix, graph string }{
		{"", "g"}, {"p", ""}, {"p", "a b"}, {"p", "*"}, {"p", "g.>"}, {"p.", "g"}, {"p", "a..b"},
	} {
		err := NewPublisher(nil, bad.prefix).Publish(context.Background(), Alert{Graph: bad.graph, Fingerprint: "f", Seq: 1, Status: Firing})
		require.ErrorIs(t, err, ErrSubject, "%q %q", bad.prefix, bad.graph)
	}
}

func TestEnsureStreamIdempotent(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	s1, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	tr := NewTracker(nil)
	require.NoError(t, NewPublisher(js, "sw").Publish(ctx, fire(t, tr, "g", "a")))
	s2, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err, "second EnsureStream must succeed")
	info, err := s2.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "EnsureStream must keep stored alerts")
	require.Equal(t, StreamName, s1.CachedInfo().Config.Name)
	require.Equal(t, []string{"sw.alerts.>"}, info.Config.Subjects)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, StreamMaxAge, info.Config.MaxAge)
	require.Equal(t, StreamDuplicates, info.Config.Duplicates)

	_, err = EnsureStream(ctx, js, "bad prefix")
	require.ErrorIs(t, err, ErrSubject)
}

// The limits an operator sets reach the stream, on creation and on an
// existing stream, which keeps its alerts; a max age under the duplicate
// window shortens the window, which JetStream would otherwise refuse.
func TestEnsureStreamLimits(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	_, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	tr := NewTracker(nil)
	require.NoError(t, NewPublisher(js, "sw").Publish(ctx, fire(t, tr, "g", "a")))

	s, err := EnsureStream(ctx, js, "sw", WithMaxAge(time.Hour), WithMaxBytes(1<<20))
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)
	require.Equal(t, time.Hour, info.Config.MaxAge)
	require.Equal(t, time.Hour, info.Config.Duplicates)
	require.Equal(t, int64(1<<20), info.Config.MaxBytes)

	s, err = EnsureStream(ctx, js, "sw", WithMaxAge(0), WithMaxBytes(0))
	require.NoError(t, err)
	info, err = s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), info.Config.MaxAge, "0 keeps alerts until another limit")
	require.Equal(t, StreamDuplicates, info.Config.Duplicates)
	require.Equal(t, int64(-1), info.Config.MaxBytes)

	require.Equal(t, 3, StreamConfig("sw", WithReplicas(3)).Replicas)
	require.Equal(t, 1, StreamConfig("sw", WithReplicas(0)).Replicas)
	// the last option wins, back to no cap
	require.Equal(t, int64(-1), StreamConfig("sw", WithMaxBytes(5), WithMaxBytes(0)).MaxBytes)
}

func TestPublishDeduplicatesRepublish(t *testing.T) {
	srv, js := startJS(t)
	ctx := ctxT(t)
	stream, err := EnsureStream(ctx, js, "sourcewatch")
	require.NoError(t, err)
	tr := NewTracker(nil)
	a := fire(t, tr, "jazz", "1", "2")
	require.NoError(t, NewPublisher(js, "sourcewatch").Publish(ctx, a))

	// A crashed monitor restarting from a snapshot republishes the same
	// alert on a new connection; the stream must keep one copy.
	js2 := connect(t, srv)
	again := a
	again.ObservedAt = a.ObservedAt.Add(time.Minute) // a re-run stamps a new time
	require.NoError(t, NewPublisher(js2, "sourcewatch").Publish(ctx, again))

	u, ok := tr.Observe(obs("jazz", "3"))
	require.True(t, ok)
	require.NoError(t, NewPublisher(js2, "sourcewatch").Publish(ctx, u))

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs)

	m, err := stream.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "sourcewatch.alerts.jazz", m.Subject)
	require.Equal(t, a.ID, m.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, a.Fingerprint+"-1", m.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, "firing", m.Header.Get(HeaderStatus))
	got, err := Decode(m.Data)
	require.NoError(t, err)
	require.Equal(t, a.ObservedAt, got.ObservedAt, "the first copy is the one kept")
	require.Equal(t, a.Sources, got.Sources)
	m2, err := stream.GetMsg(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, a.Fingerprint+"-2", m2.Header.Get(jetstream.MsgIDHeader))
}

func TestPublishRejectsInvalid(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	_, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	good := fire(t, NewTracker(nil), "g", "a")
	tests := []struct {
		name string
		edit func(*Alert)
		want string
	}{
		{"no fingerprint", func(a *Alert) { a.Fingerprint = ""; a.ID = "" }, "empty fingerprint"},
		{"seq 0", func(a *Alert) { a.Seq = 0; a.ID = "" }, "seq 0"},
		{"id mismatch", func(a *Alert) { a.ID = "x-1" }, `id "x-1"`},
		{"bad status", func(a *Alert) { a.Status = "open" }, `status "open"`},
		{"other schema", func(a *Alert) { a.Schema = "sourcewatch.alert.v2" }, `schema "sourcewatch.alert.v2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			err := NewPublisher(js, "sw").Publish(ctx, a)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.want)
		})
	}
	// Missing schema and id are filled in.
	a := good
	a.Schema, a.ID = "", ""
	require.NoError(t, NewPublisher(js, "sw").Publish(ctx, a))
}

func TestPublishWithoutStream(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	err := NewPublisher(js, "sw").Publish(ctx, fire(t, NewTracker(nil), "g", "a"))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	require.ErrorContains(t, err, "sw.alerts.g")
}

// An alert over the server's max_payload is refused by the client; the
// error says by how much and what raises the limit.
func TestPublishTooLarge(t *testing.T) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: 4 << 10,
	})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	js := connect(t, s)
	ctx := ctxT(t)
	_, err = EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	nodes := make([]string, 200)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%03d", i)
	}
	err = NewPublisher(js, "sw").Publish(ctx, fire(t, NewTracker(nil), "g", nodes...))
	require.ErrorIs(t, err, nats.ErrMaxPayload)
	require.ErrorContains(t, err, "(200 sources), over the server's max_payload of 4096 bytes; raise max_payload")
}

// tailer runs Tail in a goroutine and collects what it delivers.
type tailer struct {
	mu     sync.Mutex
	got    []Alert
	done   chan error
	cancel context.CancelFunc
}

func startTail(t *testing.T, js jetstream.JetStream, prefix, graph string, opts ...TailOption) *tailer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tl := &tailer{done: make(chan error, 1), cancel: cancel}
	ready := make(chan struct{})
	opts = append(opts, OnReady(func() { close(ready) }))
	go func() {
		tl.done <- Tail(ctx, js, prefix, graph, func(a Alert) error {
			tl.mu.Lock()
			defer tl.mu.Unlock()
			tl.got = append(tl.got, a)
			return nil
		}, opts...)
	}()
	t.Cleanup(func() { cancel(); <-tl.done })
	select {
	case <-ready:
	case err := <-tl.done:
		t.Fatalf("Tail stopped before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Tail not ready")
	}
	return tl
}

func (tl *tailer) ids() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := []string{}
	for _, a := range tl.got {
		out = append(out, a.ID)
	}
	return out
}

func (tl *tailer) waitFor(t *testing.T, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(tl.ids()) >= n }, 10*time.Second, 5*time.Millisecond,
		"want %d alerts, have %v", n, tl.ids())
	return tl.ids()
}

// streamAndTracker starts a server with the alert stream of prefix "sw"
// and returns its JetStream, a context for the test, a publisher and a
// tracker.
func streamAndTracker(t *testing.T) (jetstream.JetStream, context.Context, *Publisher, *Tracker) {
	t.Helper()
	_, js := startJS(t)
	ctx := ctxT(t)
	_, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	return js, ctx, NewPublisher(js, "sw"), NewTracker(nil)
}

// remake makes the alert stream of prefix "sw" anew after its deletion,
// trying again while the server has not yet removed the deleted one's
// store (it refuses a create meanwhile: error creating store for stream).
func remake(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		_, err = EnsureStream(t.Context(), js, "sw")
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "making the stream anew: %v", err)
}

func TestTail(t *testing.T) {
	js, ctx, pub, tr := streamAndTracker(t)

	old := fire(t, tr, "g", "a")
	require.NoError(t, pub.Publish(ctx, old))
	// The server stamps messages on receipt; a cut strictly between them.
	time.Sleep(2 * time.Millisecond)
	cut := time.Now()
	time.Sleep(2 * time.Millisecond)
	oldH := fire(t, tr, "h", "x")
	require.NoError(t, pub.Publish(ctx, oldH))

	newOnly := startTail(t, js, "sw", "g")
	all := startTail(t, js, "sw", "", FromStart())
	since := startTail(t, js, "sw", "", Since(cut))

	u, ok := tr.Observe(obs("g", "b"))
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, u))
	r, ok := tr.Resolve("h", Window{}, 0)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, r))
	last, ok := tr.Resolve("g", Window{}, 0)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, last))

	require.Equal(t, []string{old.ID, oldH.ID, u.ID, r.ID, last.ID}, all.waitFor(t, 5))
	require.Equal(t, []string{oldH.ID, u.ID, r.ID, last.ID}, since.waitFor(t, 4))
	require.Equal(t, []string{u.ID, last.ID}, newOnly.waitFor(t, 2))

	// Delivered alerts decode to what was published.
	all.mu.Lock()
	got := all.got[2]
	all.mu.Unlock()
	require.Equal(t, u, got)

	all.cancel()
	select {
	case err := <-all.done:
		require.NoError(t, err, "a canceled Tail returns nil")
		all.done <- err // for Cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Tail did not stop on cancel")
	}
}

func TestTailInvalidMessages(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	_, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	good := fire(t, NewTracker(nil), "g", "a")
	_, err = js.Publish(ctx, "sw.alerts.g", []byte("{not json"))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "sw.alerts.g", []byte(`{"schema":"sourcewatch.alert.v2","id":"x"}`))
	require.NoError(t, err)
	require.NoError(t, NewPublisher(js, "sw").Publish(ctx, good))

	// Default: the first bad message stops Tail, naming where it is.
	err = Tail(ctx, js, "sw", "", func(Alert) error { return nil }, FromStart())
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "sw.alerts.g stream seq 1")

	// With OnInvalid: reported, skipped, and the good alert still arrives.
	var bad []string
	stop := errors.New("stop")
	var got []Alert
	err = Tail(ctx, js, "sw", "g", func(a Alert) error {
		got = append(got, a)
		return stop
	}, FromStart(), OnInvalid(func(subject string, seq uint64, err error) {
		bad = append(bad, fmt.Sprintf("%s %v %d", subject, err, seq))
	}))
	require.ErrorIs(t, err, stop, "deliver's error must come back")
	require.Len(t, bad, 2)
	require.Contains(t, bad[0], "invalid alert")
	require.True(t, strings.HasSuffix(bad[0], " 1"))
	require.Contains(t, bad[1], `unsupported schema: "sourcewatch.alert.v2"`)
	require.Equal(t, []Alert{good}, got)
}

func TestTailErrors(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	err := Tail(ctx, js, "sw", "", func(Alert) error { return nil })
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.ErrorContains(t, err, StreamName)
	require.ErrorIs(t, Tail(ctx, js, "sw", "a b", nil), ErrSubject)
	require.ErrorContains(t, Tail(ctx, js, "sw", "a.b", nil), `graph "a.b" has a dot`)
	require.ErrorIs(t, Tail(ctx, js, "", "", nil), ErrSubject)

	_, err = EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	err = Tail(ctx, js, "other", "g", func(Alert) error { return nil })
	require.ErrorIs(t, err, ErrSubject)
	require.ErrorContains(t, err, "not other.alerts.g (wrong prefix?)")
}

func TestCovers(t *testing.T) {
	tests := []struct {
		pattern, filter string
		want            bool
	}{
		{"p.alerts.>", "p.alerts.>", true},
		{"p.alerts.>", "p.alerts.g", true},
		{"p.alerts.>", "p.alerts.g.h", true},
		{"p.alerts.>", "p.alerts", false},
		{"p.alerts.>", "q.alerts.g", false},
		{"p.alerts.*", "p.alerts.g", true},
		{"p.alerts.*", "p.alerts.*", true},
		{"p.alerts.*", "p.alerts.>", false},
		{"p.alerts.*", "p.alerts.g.h", false},
		{"p.alerts.g", "p.alerts.*", false},
		{"p.alerts.g", "p.alerts.g", true},
		{"p.alerts.g", "p.alerts", false},
		{"p.alerts.*", "p.alerts", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, covers(tt.pattern, tt.filter), "%s covers %s", tt.pattern, tt.filter)
	}
}

func TestFormat(t *testing.T) {
	tr := NewTracker(func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) })
	o := obs("jazz", "12", "7", "150")
	o.Sources[0].Probability, o.Sources[1].Probability, o.Sources[2].Probability = 0.61, 0.3, 0.09
	o.Sources[2].Score = -1.234567
	o.InferenceMS = 12.25
	a, _ := tr.Observe(o)
	var buf bytes.Buffer
	require.NoError(t, Format(&buf, a))
	out := buf.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Equal(t, "FIRING jazz at 2026-03-04T05:06:07Z (seq 1)", lines[0])
	for _, want := range []string{
		"id            " + a.ID,
		"window        2026-01-02T02:00:00Z .. 2026-01-02T03:00:00Z",
		"infected      10",
		"credible set  12, 7 (2 of the 3 rows below, marked *)",
		"model         bundle b, forward si 1",
		"inference 12.2 ms",
	} {
		require.Contains(t, out, want)
	}
	require.Len(t, lines, 11)
	require.Regexp(t, `^\s+rank\s+node\s+score\s+probability$`, lines[7])
	require.Regexp(t, `^\s+1\s+12\s+3\s+0\.610\s+\*$`, lines[8])
	require.Regexp(t, `^\s+3\s+150\s+-1\.235\s+0\.090$`, lines[10])
	for _, l := range lines {
		require.Equal(t, strings.TrimRight(l, " "), l, "no trailing blanks")
	}

	// Node ids in Chinese (two columns a character) or with a combining
	// accent keep the columns in line: every row of the right-aligned
	// table ends at the same terminal column. text/tabwriter counted
	// runes and pushed the rows with wide ids out.
	wide := obs("weibo", "张三丰", "e\u0301mile", "7")
	for i := range wide.Sources {
		wide.Sources[i].Probability = 0.5
	}
	a2, _ := NewTracker(nil).Observe(wide)
	buf.Reset()
	require.NoError(t, Format(&buf, a2))
	rows := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")[7:]
	require.Len(t, rows, 4)
	for _, r := range rows[1:] { // the header has no mark, and ends before
		require.Equal(t, TextWidth(rows[1]), TextWidth(r), "%q", r)
		require.True(t, strings.HasSuffix(r, "0.500  *"), "%q", r)
	}

	// A model that measures the chance gets its column and the expected
	// source count; one that does not (a, above) gets neither.
	require.NotContains(t, out, "chance")
	require.NotContains(t, out, "expected")
	withChance := obs("jazz", "12", "7")
	c0, c1, sum := 0.42, 0.07, 1.96
	withChance.Sources[0].Chance, withChance.Sources[1].Chance, withChance.ExpectedSources = &c0, &c1, &sum
	chanced, _ := NewTracker(nil).Observe(withChance)
	buf.Reset()
	require.NoError(t, Format(&buf, chanced))
	require.Contains(t, buf.String(), "expected      2.0 sources (the sum of every node's chance of being one)")
	require.Regexp(t, `(?m)^\s+rank\s+node\s+score\s+probability\s+chance$`, buf.String())
	require.Regexp(t, `(?m)^\s+1\s+12\s+\S+\s+\S+\s+0\.420\s+\*$`, buf.String())
	require.Regexp(t, `(?m)^\s+2\s+7\s+\S+\s+\S+\s+0\.070\s*\*?$`, buf.String())

	// Sources the floor named are marked, and the header says why.
	floored := obs("jazz", "12", "7", "150")
	floored.Sources[0].Probability, floored.Sources[1].Probability, floored.Sources[2].Probability = 0.61, 0.3, 0.09
	floored.Sources[2].Floor = true
	a3, _ := NewTracker(nil).Observe(floored)
	require.True(t, a3.Sources[2].Floor, "the tracker keeps the mark")
	buf.Reset()
	require.NoError(t, Format(&buf, a3))
	require.Contains(t, buf.String(), "floor         1 below the threshold, as the observation demands: a lone infected node is a source, and every infected component holds one (marked +)")
	rows = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Regexp(t, `^\s+3\s+150\s+\S+\s+0\.090\s+\+$`, rows[len(rows)-1])
	require.NotContains(t, out, "floor", "no floor line where no source is one")

	// Control characters from the stream are shown, not sent to the
	// terminal: an escape sequence in a node id or note would act on it.
	hostile := obs("jazz\x1b[2J", "12\x1b]0;owned\x07", "7", "150")
	for i := range hostile.Sources {
		hostile.Sources[i].Probability = 0.5
	}
	hostile.Note = "line one\nline two\u0085"
	a4, _ := NewTracker(nil).Observe(hostile)
	buf.Reset()
	require.NoError(t, Format(&buf, a4))
	require.NotContains(t, buf.String(), "\x1b")
	require.NotContains(t, buf.String(), "\x07")
	require.Contains(t, buf.String(), `FIRING "jazz\x1b[2J" at `)
	require.Contains(t, buf.String(), `note          "line one\nline two\u0085"`)
	require.Contains(t, buf.String(), `"12\x1b]0;owned\a"`)
	require.Len(t, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"), 12, "the note stays on one line")

	buf.Reset()
	require.NoError(t, Format(&buf, Alert{Status: Resolved}))
	require.Contains(t, buf.String(), "RESOLVED - at - (seq 0)")
	require.Contains(t, buf.String(), "no sources")
	require.Contains(t, buf.String(), "credible set  -\n", "no count of rows where there are none")

	require.ErrorContains(t, Format(failWriter{}, a), "writing "+a.ID)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestRestartFromOldSnapshotDeduplicates is the crash story end to end: a
// monitor snapshots its tracker, publishes an update, and dies before the
// next snapshot; the restarted monitor restores the older snapshot, sees the
// same observation again, and republishes the same id, which the stream
// drops.
func TestRestartFromOldSnapshotDeduplicates(t *testing.T) {
	srv, js := startJS(t)
	ctx := ctxT(t)
	stream, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	c := &clock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}

	tr := NewTracker(c.now)
	pub := NewPublisher(js, "sw")
	require.NoError(t, pub.Publish(ctx, fire(t, tr, "g", "a")))
	snap, err := tr.MarshalJSON()
	require.NoError(t, err)
	c.add(time.Minute)
	u, ok := tr.Observe(obs("g", "a", "b"))
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, u))

	// Crash. The restart restores the older snapshot.
	c.add(time.Minute)
	tr2 := NewTracker(c.now)
	require.NoError(t, tr2.UnmarshalJSON(snap))
	u2, ok := tr2.Observe(obs("g", "b", "a"))
	require.True(t, ok)
	require.Equal(t, u.ID, u2.ID)
	require.NotEqual(t, u.ObservedAt, u2.ObservedAt)
	require.NoError(t, NewPublisher(connect(t, srv), "sw").Publish(ctx, u2))

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "the replayed update must be deduplicated")

	// The restarted tracker goes on from there.
	r, ok := tr2.Resolve("g", Window{}, 0)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, r))
	info, err = stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.Msgs)
}

// A field quoted for its control characters cannot be told from another
// field: the credible set quotes each member on its own, as the table
// does, and an id written to look quoted is quoted again.
func TestFormatQuotesEachFieldUnambiguously(t *testing.T) {
	a := Alert{Status: Firing, Graph: "g", CredibleSet: []string{"a, b", "12\x1b]0;owned\a"},
		Sources: []Source{{Node: "a, b", Probability: 0.5}, {Node: "12\x1b]0;owned\a", Probability: 0.5}, {Node: `"12\x1b]0;owned\a"`, Probability: 0.4}}}
	var buf bytes.Buffer
	require.NoError(t, Format(&buf, a))
	out := buf.String()
	require.Contains(t, out, `credible set  a, b, "12\x1b]0;owned\a" (2 of the 3 rows below, marked *)`)
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Contains(t, rows[len(rows)-2], ` "12\x1b]0;owned\a"  `)
	require.Contains(t, rows[len(rows)-1], ` "\"12\\x1b]0;owned\\a\""  `)
	for _, r := range rows[len(rows)-3:] {
		require.Equal(t, TextWidth(rows[len(rows)-4]), TextWidth(strings.TrimSuffix(strings.TrimSuffix(r, "  *"), "  ")), "%q", r)
	}
}

// A bidirectional formatting character in a field reorders what a
// terminal shows after it, so one id could pass for another: such a
// field is quoted, the character written as an escape.
func TestFormatQuotesBidiControls(t *testing.T) {
	for _, tc := range []struct {
		name, node, want string
	}{
		{"right-to-left override", "12\u202e34", `"12\u202e34"`},
		{"right-to-left isolate", "7\u20671\u2069", `"7\u20671\u2069"`},
		{"arabic letter mark", "\u061c9", `"\u061c9"`},
		{"left-to-right mark", "5\u200e", `"5\u200e"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Alert{Status: Firing, Graph: "g", Note: "see " + tc.node, CredibleSet: []string{tc.node},
				Sources: []Source{{Node: tc.node, Probability: 1}}}
			var buf bytes.Buffer
			require.NoError(t, Format(&buf, a))
			out := buf.String()
			require.False(t, strings.ContainsFunc(out, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }), "%q", out)
			require.Contains(t, out, "credible set  "+tc.want+" (1 of the 1 row below, marked *)")
			require.Contains(t, out, `note          "see `+tc.want[1:])
			require.Contains(t, out, " "+tc.want+"  ")
		})
	}
	// A joiner inside an emoji is no bidi control: shown as written.
	require.Equal(t, "a\u200db", visible("a\u200db"))
}

// A stream deleted and made anew starts its sequence numbers again: Tail
// notices the new stream when idle and delivers its alerts from its first,
// each once, where the ordered consumer alone would wait past them for the
// sequence after the last it saw.
func TestTailFollowsARecreatedStream(t *testing.T) {
	js, ctx, pub, tr := streamAndTracker(t)
	var recreated atomic.Int32
	tl := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond), OnRecreated(func() { recreated.Add(1) }))

	var want []string
	publish := func(graph, node string) {
		a := fire(t, tr, graph, node)
		require.NoError(t, pub.Publish(ctx, a))
		want = append(want, a.ID)
	}
	for _, g := range []string{"a", "b", "c"} {
		publish(g, "1")
	}
	require.Equal(t, want, tl.waitFor(t, 3))

	require.NoError(t, js.DeleteStream(ctx, StreamName))
	remake(t, js)
	// Two alerts below the old stream's last sequence, then, past it, three
	// more, which the old consumer may deliver before Tail notices.
	for _, g := range []string{"d", "e", "f", "g", "h"} {
		publish(g, "1")
	}
	got := tl.waitFor(t, len(want))
	require.ElementsMatch(t, want, got, "every alert, each once")
	require.Equal(t, int32(1), recreated.Load())
	time.Sleep(500 * time.Millisecond) // two more checks: nothing delivered twice
	require.Len(t, tl.ids(), len(want))
}

// Under alerts steadier than the check interval Tail is never idle: it
// checks for a stream made anew all the same, every interval, and so
// holds the delivered sequences of one interval, where it held every
// alert's since the last idle moment (a tail running for months on a busy
// stream grew without bound).
func TestTailChecksUnderSteadyTraffic(t *testing.T) {
	js, ctx, pub, tr := streamAndTracker(t)
	var mostHeld atomic.Int64
	held := func(o *tailOptions) {
		o.onCheck = func(n int) {
			if int64(n) > mostHeld.Load() {
				mostHeld.Store(int64(n))
			}
		}
	}
	tl := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond), held)

	const alerts = 80 // one every 20 ms: 1.6 s, eight intervals
	var want []string
	for i := range alerts {
		a := fire(t, tr, fmt.Sprintf("g%d", i), "1")
		require.NoError(t, pub.Publish(ctx, a))
		want = append(want, a.ID)
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, want, tl.waitFor(t, alerts))
	require.Less(t, mostHeld.Load(), int64(alerts/2), "sequences held for the next check")
}

// With the stream deleted and not made again for longer than the ordered
// consumer's resets last, a cancelled Tail returns (the resets held a lock
// its Stop needed, with no bound on their number), and one left running
// waits for the next stream and delivers its alerts.
func TestTailOutlivesADeletedStream(t *testing.T) {
	js, ctx, pub, tr := streamAndTracker(t)
	first := fire(t, tr, "a", "1")
	cancelled := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond))
	waiting := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond))
	require.NoError(t, pub.Publish(ctx, first))
	cancelled.waitFor(t, 1)
	waiting.waitFor(t, 1)

	require.NoError(t, js.DeleteStream(ctx, StreamName))
	time.Sleep(500 * time.Millisecond) // the consumers are resetting
	cancelled.cancel()
	select {
	case err := <-cancelled.done:
		require.NoError(t, err)
		cancelled.done <- err // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("a cancelled Tail did not return while its stream was gone")
	}

	time.Sleep(9 * time.Second) // past the resets (1 s, 2 s, 4 s)
	remake(t, js)
	next := fire(t, tr, "b", "1")
	require.NoError(t, pub.Publish(t.Context(), next))
	require.Equal(t, []string{first.ID, next.ID}, waiting.waitFor(t, 2))
}

// Once the ordered consumer's resets failed on a stream that stays gone,
// Tail waits for the stream, asking about it once per check: its idle
// test read its timer's context after cancelling it, so every failed Next
// counted as idle and Tail asked the server for the stream's info in a
// busy loop (thousands of requests a second) on an iterator that returns
// at once.
func TestTailWaitsForAGoneStreamWithoutSpinning(t *testing.T) {
	js, ctx, pub, tr := streamAndTracker(t)
	first := fire(t, tr, "a", "1")
	tl := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond))
	require.NoError(t, pub.Publish(ctx, first))
	tl.waitFor(t, 1)

	// Every stream info request Tail makes, as the server sees it.
	var infos atomic.Int64
	nc := js.Conn()
	sub, err := nc.Subscribe("$JS.API.STREAM.INFO."+StreamName, func(*nats.Msg) { infos.Add(1) })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	require.NoError(t, js.DeleteStream(ctx, StreamName))
	time.Sleep(6 * time.Second) // past the resets (1 s, 2 s apart)
	before := infos.Load()
	time.Sleep(time.Second)
	asked := infos.Load() - before
	require.LessOrEqual(t, asked, int64(10), "stream info requests within a second while the stream is gone (one per 200 ms check expected)")

	remake(t, js)
	next := fire(t, tr, "b", "1")
	require.NoError(t, pub.Publish(t.Context(), next))
	require.Equal(t, []string{first.ID, next.ID}, tl.waitFor(t, 2))
}

// A server that comes back without JetStream for a while (a restart whose
// JetStream is still recovering its store) outlasts the ordered
// consumer's bounded resets: Tail waits for the stream as it does for a
// deleted one, where it returned the server's answer as its error and
// alerts tail exited, though the stream came back unchanged.
func TestTailOutlivesAServerWithoutJetStreamForAWhile(t *testing.T) {
	dir := t.TempDir()
	opts := func(js bool, port int) *server.Options {
		return &server.Options{Host: "127.0.0.1", Port: port, JetStream: js, StoreDir: dir, NoLog: true, NoSigs: true}
	}
	run := func(o *server.Options) *server.Server {
		s, err := server.NewServer(o)
		require.NoError(t, err)
		go s.Start()
		require.True(t, s.ReadyForConnections(10*time.Second), "nats-server not ready")
		return s
	}
	s := run(opts(true, -1))
	port := s.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := ctxT(t)
	_, err = EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	pub, tr := NewPublisher(js, "sw"), NewTracker(nil)
	first := fire(t, tr, "a", "1")
	tl := startTail(t, js, "sw", "", RecreationCheck(200*time.Millisecond))
	require.NoError(t, pub.Publish(ctx, first))
	tl.waitFor(t, 1)

	s.Shutdown()
	s.WaitForShutdown()
	s = run(opts(false, port))
	time.Sleep(8 * time.Second) // past the resets (1 s, 2 s apart) on the server without JetStream
	select {
	case err := <-tl.done:
		tl.done <- err // for the cleanup
		t.Fatalf("Tail returned while JetStream was away: %v", err)
	default:
	}
	s.Shutdown()
	s.WaitForShutdown()
	s = run(opts(true, port))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	next := fire(t, tr, "b", "1")
	require.Eventually(t, func() bool { return pub.Publish(ctx, next) == nil }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{first.ID, next.ID}, tl.waitFor(t, 2))
	time.Sleep(500 * time.Millisecond) // two more checks: nothing delivered twice
	require.Len(t, tl.ids(), 2)
}
