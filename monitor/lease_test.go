package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/graph"
)

// replica is a daemon of an HA pair, run by hand: start only returns once
// a daemon is ready, and a standby is not.
type replica struct {
	d      *Daemon
	f      *factoryOf
	cancel context.CancelFunc
	done   chan error
}

func runReplica(t *testing.T, cfg Config, opts ...Option) *replica {
	t.Helper()
	r := &replica{f: &factoryOf{}, done: make(chan error, 1)}
	var err error
	r.d, err = New(cfg, append([]Option{preload(t, 6, "p"), WithLocalizerFactory(r.f.factory)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("replica did not stop")
		}
	})
	require.Eventually(t, func() bool { return r.d.HTTPAddr() != "" }, 30*time.Second, 5*time.Millisecond, "HTTP up")
	return r
}

func (r *replica) ready() bool {
	select {
	case <-r.d.Ready():
		return true
	default:
		return false
	}
}

// stop stops the replica, as a crash (kill -9) when crash is set, and
// returns Run's error.
func (r *replica) stop(t *testing.T, crash bool) error {
	t.Helper()
	r.d.crash.Store(crash)
	r.cancel()
	return r.stopped(t, "replica did not stop")
}

// stopped waits for the replica's Run to end and returns its error; fail
// says what it means when it does not within 30 s.
func (r *replica) stopped(t *testing.T, fail string) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal(fail)
		return nil
	}
}

// TestHAStandbyTakesOver runs three replicas of one configuration on a
// shared server: one is active, the others stand by (HTTP up, /readyz says
// who is active, no plugin launched). When the active one stops, a standby
// takes over at once from its final snapshot and keeps the window and the
// open incident; when that one dies without a word, the last takes over
// once the lease expires.
func TestHAStandbyTakesOver(t *testing.T) {
	s := runServer(t)
	nc, js := connectJS(t, s.ClientURL())
	ttl := 2 * time.Second
	cfgFor := func(id string) Config {
		cfg := testConfig(t, "p")
		cfg.NATS.URL = s.ClientURL()
		cfg.HA = HAConfig{Enabled: true, Replica: id, LeaseTTL: ttl}
		cfg.Graphs[0].MinInfected = 2
		return cfg
	}
	publish := func(node string) {
		(&running{js: js}).publish(t, "p", Event{Node: node, State: StateInfected, TS: time.Now()}, "")
	}
	sink := subscribeAlerts(t, nc, "p")

	a := runReplica(t, cfgFor("a"))
	require.Eventually(t, a.ready, 30*time.Second, 5*time.Millisecond, "the first replica becomes active")
	b := runReplica(t, cfgFor("b"))
	c := runReplica(t, cfgFor("c"))
	for _, r := range []*replica{b, c} {
		require.Eventually(t, func() bool {
			code, body := get(t, "http://"+r.d.HTTPAddr()+"/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "standby: replica a is active")
		}, 10*time.Second, 10*time.Millisecond)
		code, _ := get(t, "http://"+r.d.HTTPAddr()+"/healthz")
		require.Equal(t, http.StatusOK, code)
		m := metricFamilies(t, r.d)
		require.Zero(t, m["sourcewatch_active"], "a standby does not do the work")
		require.Zero(t, m["sourcewatch_ready"])
		// /status says which replica this is, and why it is not ready.
		st := r.d.Status()
		require.Equal(t, r.d.cfg.HA.Replica, st.Replica)
		require.False(t, *st.Active)
		require.Equal(t, []string{"standby: replica a is active"}, st.NotReady)
	}
	require.Equal(t, 1.0, metricFamilies(t, a.d)["sourcewatch_active"])
	ast := a.d.Status()
	require.Equal(t, "a", ast.Replica)
	require.True(t, *ast.Active)
	require.Empty(t, ast.NotReady)

	publish("3")
	publish("4")
	require.Equal(t, alerts.Firing, sink.wait(t, 1)[0].Status)
	// Seen by a subscriber is not yet acknowledged by the stream: a stop
	// before that leaves it pending, for the next replica to send again.
	waitAcknowledged(t, a.d, "p")
	require.False(t, b.ready() || c.ready())
	require.Empty(t, b.f.all(), "a standby launches no plugin")

	// a stops: it writes its final snapshot and gives the lease up, and a
	// standby takes over at once, well inside the TTL.
	stopped := time.Now()
	require.NoError(t, a.stop(t, false))
	kv, err := js.KeyValue(context.Background(), LeaseBucket)
	require.NoError(t, err)
	if e, err := kv.Get(context.Background(), leaseKey); err == nil {
		require.NotEqual(t, "a", holderID(e.Value()), "a gave its lease up as it stopped")
	} else {
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a gave its lease up as it stopped")
	}
	require.Eventually(t, func() bool { return b.ready() || c.ready() }, 3*ttl, 5*time.Millisecond, "a standby takes over")
	next, last := b, c
	if c.ready() {
		next, last = c, b
	}
	t.Logf("took over %v after the stop", time.Since(stopped).Round(time.Millisecond))
	st := next.d.Status().Graphs[0]
	require.Equal(t, 2, st.WindowInfected, "the window continues from the snapshot")
	require.NotNil(t, st.LastAlert)
	require.Equal(t, alerts.Firing, st.LastAlert.Status, "the open incident continues")
	publish("5")
	waitSeq(t, next.d, "p", 3)
	require.Equal(t, 3, next.d.Status().Graphs[0].WindowInfected)
	require.False(t, last.ready())

	// next dies without releasing the lease: the last replica waits for the
	// lease to expire, then takes over with every acknowledged event.
	died := time.Now()
	require.NoError(t, next.stop(t, true))
	require.Never(t, last.ready, ttl/2, 10*time.Millisecond, "the lease of a dead replica holds for its TTL")
	require.Eventually(t, last.ready, 5*ttl, 10*time.Millisecond, "then the standby takes over")
	t.Logf("took over %v after the crash", time.Since(died).Round(time.Millisecond))
	publish("1")
	waitSeq(t, last.d, "p", 4)
	require.Equal(t, 4, last.d.Status().Graphs[0].WindowInfected, "nothing acknowledged was lost")
}

// TestHADuplicateReplicaIDStandsBy: a second live process given the same
// ha.replica does not take the lease (both used to stay active, each
// taking the other's renewals for its own); it says why and stands by,
// and takes over, as a restarted replica does, once the first stops
// renewing.
func TestHADuplicateReplicaIDStandsBy(t *testing.T) {
	s := runServer(t)
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	// Renewals every second against a watch of 2.25 s: room for a slow
	// renewal under -race.
	cfg.HA = HAConfig{Enabled: true, Replica: "a", LeaseTTL: 3 * time.Second}
	first := runReplica(t, cfg)
	require.Eventually(t, first.ready, 30*time.Second, 5*time.Millisecond)

	core, logs := observer.New(zapcore.WarnLevel)
	second := runReplica(t, cfg, WithLogger(zap.New(core)))
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("another live replica has this replica's id").Len() > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Never(t, second.ready, 2*time.Second, 10*time.Millisecond, "one lease, one active replica")
	require.True(t, first.ready())

	died := time.Now()
	require.NoError(t, first.stop(t, true))
	require.Eventually(t, second.ready, 15*time.Second, 10*time.Millisecond, "the same id takes over once the lease is not renewed")
	t.Logf("took over %v after the crash", time.Since(died).Round(time.Millisecond))
}

// takeOwn takes a key holding this replica's id that nobody renews while
// it watches, stands by for one another process with the id renews, and
// says neither when the key expired or changed hands meanwhile (a restart
// after its old lease ran out is no duplicate).
func TestLeaseTakeOwn(t *testing.T) {
	ctx := context.Background()
	update := func(value string) func(jetstream.KeyValue, uint64) error {
		return func(kv jetstream.KeyValue, rev uint64) error {
			_, err := kv.Update(ctx, leaseKey, []byte(value), rev)
			return err
		}
	}
	for _, tc := range []struct {
		name             string
		meanwhile        func(kv jetstream.KeyValue, rev uint64) error
		taken, duplicate bool
	}{
		{"left by a dead process", nil, true, false},
		{"renewed by a live one", update("a#other"), false, true},
		{"expired", func(kv jetstream.KeyValue, _ uint64) error { return kv.Delete(ctx, leaseKey) }, false, false},
		{"taken by another replica", update("b#x"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newKV(t, LeaseBucket)
			rev, err := kv.Create(ctx, leaseKey, []byte("a#other"))
			require.NoError(t, err)
			e, err := kv.Get(ctx, leaseKey)
			require.NoError(t, err)
			// A TTL whose quarter-TTL looks a loaded machine's stalls do
			// not push past the 3/4 bound below: at 400 ms a stall of
			// 200 ms around the first look (100 ms in) fails a case
			// that did end at a look, as it should.
			l := &lease{kv: kv, id: "a", instance: "mine", ttl: 1200 * time.Millisecond}
			// The change comes after the entry takeOwn was given was read
			// and before its first look: made from a goroutine 50 ms into
			// the watch, a loaded machine could delay it past the last
			// look, and the case would test nothing it names.
			if tc.meanwhile != nil {
				require.NoError(t, tc.meanwhile(kv, rev))
			}
			watched := time.Now()
			taken, duplicate, err := l.takeOwn(ctx, e)
			require.NoError(t, err)
			require.Equal(t, tc.taken, taken)
			require.Equal(t, tc.duplicate, duplicate)
			if !taken {
				// Looked at every quarter TTL: what changed ends the watch.
				require.Less(t, time.Since(watched), 3*l.ttl/4)
			}
			if taken {
				// Past the two thirds of a TTL the old writer may still
				// write for after its last renewal began.
				require.Greater(t, time.Since(watched), 2*l.ttl/3)
				now, err := kv.Get(ctx, leaseKey)
				require.NoError(t, err)
				require.Equal(t, "a#mine", string(now.Value()))
			}
		})
	}
}

// TestHALostLease: a replica whose lease is taken from it (here: deleted
// and re-created by another id) stops with ErrLeaseLost.
func TestHALostLease(t *testing.T) {
	r, kv := activeReplica(t)
	require.NoError(t, kv.Delete(context.Background(), leaseKey))
	_, err := kv.Create(context.Background(), leaseKey, []byte("intruder"))
	require.NoError(t, err)
	require.ErrorIs(t, r.stopped(t, "the replica kept running without its lease"), ErrLeaseLost)
}

// TestHALapsedLeaseWritesNothing: a replica whose lease went unrenewed
// past the point where the keeper gives it up (a process paused past the
// TTL resumes every goroutine at once, the keeper's among them) writes
// nothing more from then on, whatever its keeper has yet to report: no
// alert, no alert state, no acknowledgement, no consumer taken over.
func TestHALapsedLeaseWritesNothing(t *testing.T) {
	r, cfgFor := activeWithTTL(t, time.Second)
	nc, js := connectJS(t, cfgFor("").NATS.URL)
	sink := subscribeAlerts(t, nc, "p")
	event := func(node string) {
		data, err := json.Marshal(Event{Node: node, State: StateInfected, TS: time.Now()})
		require.NoError(t, err)
		_, err = js.Publish(context.Background(), EventsSubject(DefaultPrefix, "p"), data)
		require.NoError(t, err)
	}
	event("2")
	require.Equal(t, alerts.Firing, sink.wait(t, 1)[0].Status)

	// Every write of the state bucket goes through the fence on its own.
	require.IsType(t, fencedKV{}, r.d.kv)
	// The keeper, as if not yet run after the pause; the lease lapsed.
	l := r.d.held.Load()
	require.NotNil(t, l)
	l.stopKeeping()
	past := time.Now().Add(-time.Millisecond)
	l.validUntil.Store(&past)
	// A write that passed the check just before lands (a save of the
	// alert state after the publish, say); nothing after it may.
	time.Sleep(200 * time.Millisecond)
	kv, err := js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	tracker, err := kv.Get(context.Background(), "tracker")
	require.NoError(t, err)
	cons, err := js.Consumer(context.Background(), EventsStream, consumerName("p"))
	require.NoError(t, err)
	before, err := cons.Info(context.Background())
	require.NoError(t, err)
	// An event that would make an update (a lower-indexed infected node
	// is the fake's source): nothing comes of it.
	event("1")
	time.Sleep(500 * time.Millisecond) // 25 intervals
	require.Len(t, sink.all(), 1, "no alert after the lease lapsed")
	now, err := kv.Get(context.Background(), "tracker")
	require.NoError(t, err)
	require.Equal(t, tracker.Revision(), now.Revision(), "the alert state is not written")
	after, err := cons.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, before.AckFloor.Stream, after.AckFloor.Stream, "the new event is not acknowledged")
	require.Equal(t, before.Created, after.Created, "the consumer is not taken over")
	// The daemon got as far as a write and the fence stopped it (which
	// stops ingest; with the keeper stopped, nothing else does), so the
	// checks above saw the fence at work, not a daemon that did nothing.
	require.Error(t, r.d.ingestCtx.Err(), "no write reached the fence")
	require.ErrorIs(t, r.d.fenced(), ErrLeaseLost)
}

// TestHALapseIsALoss: a lease found lapsed by a write (here: its point
// moved into the past under a running keeper, as a slow renewal or a
// pause can) is lost for good, even though the keeper's next renewal
// succeeds: the replica steps down, rather than staying active with its
// consumers stopped and nothing to say so.
func TestHALapseIsALoss(t *testing.T) {
	r, _ := activeWithTTL(t, 3*time.Second)
	l := r.d.held.Load()
	past := time.Now().Add(-time.Millisecond)
	l.validUntil.Store(&past)
	require.ErrorIs(t, r.d.fenced(), ErrLeaseLost)
	require.False(t, *r.d.Status().Active)
	require.ErrorIs(t, r.stopped(t, "a replica that fenced itself kept running"), ErrLeaseLost)
}

// TestHAReplicaRefusesToTakeOverBesideADaemonWithoutHA: a daemon without
// HA started while no replica was active (the active one killed, its
// lease not yet expired) is not refused by anyone; the standby that then
// takes the lease finds it and gives the lease back instead of running
// beside it.
func TestHAReplicaRefusesToTakeOverBesideADaemonWithoutHA(t *testing.T) {
	a, cfgFor := activeWithTTL(t, 3*time.Second)
	b := runReplica(t, cfgFor("b"))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, a.stop(t, true)) // kill -9: the lease stays until it expires

	plain := cfgFor("")
	plain.HA = HAConfig{}
	start(t, plain, preload(t, 6, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	_, js := connectJS(t, plain.NATS.URL)

	err := b.stopped(t, "the standby took over beside a daemon without HA")
	require.ErrorIs(t, err, ErrAnotherDaemon)
	require.ErrorContains(t, err, "a daemon without ha.enabled")
	require.False(t, b.ready())
	kv, err := js.KeyValue(context.Background(), LeaseBucket)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), leaseKey)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the lease is given back")
}

// activeReplica runs replica "a" with a 1 s lease on a server of its own
// until it is active, and returns it with the lease bucket.
func activeReplica(t *testing.T) (*replica, jetstream.KeyValue) {
	t.Helper()
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.HA = HAConfig{Enabled: true, Replica: "a", LeaseTTL: time.Second}
	r := runReplica(t, cfg)
	require.Eventually(t, r.ready, 30*time.Second, 5*time.Millisecond)
	kv, err := js.KeyValue(context.Background(), LeaseBucket)
	require.NoError(t, err)
	return r, kv
}

func TestHAConfig(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.HA.Enabled = true
	require.ErrorContains(t, cfg.Validate(), "ha.enabled: replicas must share a NATS server or cluster: set nats.url")
	cfg.NATS.URL = "nats://127.0.0.1:4222"
	cfg.HA.LeaseTTL = 100 * time.Millisecond
	require.ErrorContains(t, cfg.Validate(), "ha.lease_ttl: must be >= 1s")
	cfg.HA.LeaseTTL = DefaultLeaseTTL
	require.NoError(t, cfg.Validate())
}

// TestHAStopReleasesAfterRenewals stops an active replica that has renewed
// its lease a few times: the lease is released (a standby could take over
// at once), and under -race the release does not overlap the keeper's
// renewals (it waits for the keeper first).
func TestHAStopReleasesAfterRenewals(t *testing.T) {
	r, kv := activeReplica(t)
	first, err := kv.Get(context.Background(), leaseKey)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := kv.Get(context.Background(), leaseKey)
		return err == nil && e.Revision() >= first.Revision()+2
	}, 5*time.Second, 10*time.Millisecond, "renewed twice")
	require.NoError(t, r.stop(t, false))
	_, err = kv.Get(context.Background(), leaseKey)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the lease was released")
}

// cutOffKV applies a renewal on the server but loses its reply when the
// keeper is stopped meanwhile, as a renewal racing shutdown can.
type cutOffKV struct {
	jetstream.KeyValue
	entered chan struct{}
}

func (k *cutOffKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	close(k.entered)
	<-ctx.Done()
	if _, err := k.KeyValue.Update(context.Background(), key, value, rev); err != nil {
		return 0, err
	}
	return 0, ctx.Err()
}

// hungKV is a lease bucket that renews once, slowly (a round trip of
// 50 ms), and is then cut off from the server: every later Update waits
// for its context and fails.
type hungKV struct {
	jetstream.KeyValue
	calls   atomic.Int32
	renewed atomic.Int64 // when the one renewal was sent, unix ns
}

func (k *hungKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if k.calls.Add(1) == 1 {
		k.renewed.Store(time.Now().UnixNano())
		time.Sleep(50 * time.Millisecond)
		return k.KeyValue.Update(ctx, key, value, rev)
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestLeaseKeepGivesUpBeforeExpiry: with the server unreachable, renewals
// that hang are cut off, and the keeper reports the lease lost two thirds
// of the TTL after its last renewal was sent (where the daemon's writes
// are fenced), before the lease expires and a standby may take it. Waiting out each hung renewal on a fixed ticker,
// the renewal's round trip put the check a hair short at two thirds and
// gave up only at the full TTL.
func TestLeaseKeepGivesUpBeforeExpiry(t *testing.T) {
	kv := newKV(t, LeaseBucket)
	ctx := context.Background()
	rev, err := kv.Create(ctx, leaseKey, []byte("a"))
	require.NoError(t, err)
	// The report comes at two thirds of the TTL and must come before the
	// TTL less 100 ms: the keeper's wakeup at its deadline and this
	// goroutine's have ttl/3 - 100 ms between them, 300 ms at a 1.2 s
	// TTL, about the stalls seen under -race on a loaded machine (the
	// same slack lapsed TestLeaseKeepRidesOutSlowRenewals at 150 ms); at
	// 3 s, 900 ms.
	const ttl = 3 * time.Second
	hung := &hungKV{KeyValue: kv}
	l := &lease{kv: hung, id: "a", ttl: ttl, rev: rev}
	l.wrote(time.Now()) // created just above
	lost := make(chan error, 1)
	l.startKeeping(ctx, lost)
	defer l.stopKeeping()
	select {
	case err := <-lost:
		took := time.Since(time.Unix(0, hung.renewed.Load()))
		require.ErrorIs(t, err, ErrLeaseLost)
		require.ErrorContains(t, err, "not renewed for")
		require.GreaterOrEqual(t, took, 2*ttl/3-20*time.Millisecond, "not before two thirds of the TTL")
		require.Less(t, took, ttl-100*time.Millisecond, "well before the lease expires")
	case <-time.After(5 * time.Second):
		t.Fatal("a lease that cannot be renewed was not reported lost")
	}
}

// slowKV renews with a round trip of delay.
type slowKV struct {
	jetstream.KeyValue
	delay time.Duration
}

func (k *slowKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := SleepContext(ctx, k.delay); err != nil {
		return 0, err
	}
	return k.KeyValue.Update(ctx, key, value, rev)
}

// TestLeaseKeepRidesOutSlowRenewals: renewals whose round trip is under a
// third of the TTL keep the lease, and the writes are never fenced
// meanwhile (renewals timed from the last one's end, round trips over a
// sixth of the TTL lapsed it).
func TestLeaseKeepRidesOutSlowRenewals(t *testing.T) {
	kv := newKV(t, LeaseBucket)
	ctx := context.Background()
	// Each renewal ends delay after its send and must land within two
	// thirds of the TTL of the last one's send, a third of the TTL later:
	// the slack is ttl/3 - delay. At 1.2 s and 250 ms, 150 ms, which the
	// renewal's own round trip and a late timer under -race on a loaded
	// machine outlasted (1 failure in 3 monitor runs); at 3 s and 600 ms,
	// 400 ms, and the delay is still over a sixth of the TTL.
	const ttl, delay = 3 * time.Second, 600 * time.Millisecond
	// Taken as slowly: the first renewal is timed from the take's start,
	// not from the keeper's (which lost the lease at the first renewal).
	sent := time.Now()
	time.Sleep(delay)
	rev, err := kv.Create(ctx, leaseKey, []byte("a"))
	require.NoError(t, err)
	l := &lease{kv: &slowKV{KeyValue: kv, delay: delay}, id: "a", ttl: ttl, rev: rev}
	l.wrote(sent)
	lost := make(chan error, 1)
	l.startKeeping(ctx, lost)
	defer l.stopKeeping()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		require.False(t, l.lapsed(), "fenced while renewals arrive on time")
	}
	require.Empty(t, lost)
}

// TestLeaseReleaseAfterCutOffRenewal: release stops the keeper before it
// deletes, and a renewal that landed on the server though the keeper never
// learnt its revision does not make the release fail (which would leave a
// standby waiting a whole TTL).
func TestLeaseReleaseAfterCutOffRenewal(t *testing.T) {
	kv := newKV(t, LeaseBucket)
	ctx := context.Background()
	rev, err := kv.Create(ctx, leaseKey, []byte("a"))
	require.NoError(t, err)
	ckv := &cutOffKV{KeyValue: kv, entered: make(chan struct{})}
	l := &lease{kv: ckv, id: "a", ttl: 1200 * time.Millisecond, rev: rev}
	l.wrote(time.Now()) // created just above
	lost := make(chan error, 1)
	l.startKeeping(ctx, lost)
	select {
	case <-ckv.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal")
	}
	require.NoError(t, l.release(ctx))
	_, err = kv.Get(ctx, leaseKey)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	require.Empty(t, lost)

	// Held by another replica by now: release says so and deletes nothing.
	_, err = kv.Create(ctx, leaseKey, []byte("b"))
	require.NoError(t, err)
	require.ErrorContains(t, l.release(ctx), "replica b holds it now")
	e, err := kv.Get(ctx, leaseKey)
	require.NoError(t, err)
	require.Equal(t, "b", string(e.Value()))
}

// TestLeaseKeepAdoptsALostRenewal: a renewal the server applied but whose
// reply was lost (a reconnect) leaves the keeper's revision behind; the
// key still holds this replica's id, so the keeper adopts its revision and
// keeps the lease instead of reporting it lost. Another replica's id is
// a loss, named.
func TestLeaseKeepAdoptsALostRenewal(t *testing.T) {
	kv := newKV(t, LeaseBucket)
	ctx := context.Background()
	rev, err := kv.Create(ctx, leaseKey, []byte("a"))
	require.NoError(t, err)
	// A TTL that a loaded CI machine's stalls do not outlast: at 600 ms a
	// 400 ms stall under -race lost the lease, which is the keeper
	// working, not the adoption failing.
	l := &lease{kv: kv, id: "a", ttl: 1200 * time.Millisecond, rev: rev}
	l.wrote(time.Now()) // created just above
	// The renewal whose reply never came.
	_, err = kv.Update(ctx, leaseKey, []byte("a"), rev)
	require.NoError(t, err)
	lost := make(chan error, 1)
	l.startKeeping(ctx, lost)
	time.Sleep(2 * time.Second) // several renewals, one every 400 ms
	require.Empty(t, lost, "still this replica's lease")
	e, err := kv.Get(ctx, leaseKey)
	require.NoError(t, err)
	require.Equal(t, "a", string(e.Value()))
	require.Greater(t, e.Revision(), rev+2, "and renewed since")

	l.stopKeeping()
	e, err = kv.Get(ctx, leaseKey)
	require.NoError(t, err)
	_, err = kv.Update(ctx, leaseKey, []byte("b"), e.Revision())
	require.NoError(t, err)
	l.startKeeping(ctx, lost)
	select {
	case err := <-lost:
		require.ErrorIs(t, err, ErrLeaseLost)
		require.ErrorContains(t, err, "replica b holds it")
	case <-time.After(5 * time.Second):
		t.Fatal("a lease another replica holds was not reported lost")
	}
	l.stopKeeping()
}

// TestHAStandbyReadsItsConfigAtTakeover: a standby answers a reload by
// checking the file (a broken one is an error now) and applies the file as
// it is when it takes over, so a change signalled to every replica is not
// undone by the next failover.
// activeAndConfig runs replica "a" on a server of its own until it is
// active, and returns it with the config of a replica of that id.
func activeAndConfig(t *testing.T) (*replica, func(id string) Config) {
	t.Helper()
	return activeWithTTL(t, 2*time.Second)
}

// activeWithTTL is activeAndConfig with a lease TTL of ttl.
func activeWithTTL(t *testing.T, ttl time.Duration) (*replica, func(id string) Config) {
	t.Helper()
	s := runServer(t)
	cfgFor := func(id string) Config {
		cfg := testConfig(t, "p")
		cfg.NATS.URL = s.ClientURL()
		cfg.HA = HAConfig{Enabled: true, Replica: id, LeaseTTL: ttl}
		return cfg
	}
	a := runReplica(t, cfgFor("a"))
	require.Eventually(t, a.ready, 30*time.Second, 5*time.Millisecond)
	return a, cfgFor
}

func TestHAStandbyReadsItsConfigAtTakeover(t *testing.T) {
	a, cfgFor := activeAndConfig(t)

	var file atomic.Pointer[Config]
	started := cfgFor("b")
	file.Store(&started)
	b := runReplica(t, started, WithReload(func(context.Context) (Config, error) { return *file.Load(), nil }))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)

	changed := cfgFor("b")
	changed.Graphs[0].Window = 7 * time.Minute
	broken := changed
	broken.Graphs = append(append([]GraphConfig(nil), changed.Graphs...), DefaultGraphConfig("q"))
	broken.Graphs[1].Edges, broken.Graphs[1].Bundle = "q.edges", "q.swb"
	file.Store(&broken)
	require.ErrorContains(t, b.d.Reload(context.Background()), "adding or removing graphs needs a restart", "checked on the standby")
	file.Store(&changed)
	require.NoError(t, b.d.Reload(context.Background()))
	require.Equal(t, time.Hour, b.d.graphs["p"].gc.Load().Window, "not applied while standing by")

	require.NoError(t, a.stop(t, false))
	require.Eventually(t, b.ready, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 7*time.Minute, b.d.graphs["p"].gc.Load().Window, "applied at takeover")
	lr := b.d.Status().LastReload
	require.NotNil(t, lr)
	require.True(t, lr.OK)
}

// TestHAStandbyKeepsACheckedReloadAtTakeover: a reload a standby accepted
// is what it runs at takeover when the file broke since, not the settings
// read at start, as a standalone daemon would keep running it.
func TestHAStandbyKeepsACheckedReloadAtTakeover(t *testing.T) {
	a, cfgFor := activeAndConfig(t)
	var file atomic.Pointer[Config]
	started := cfgFor("b")
	file.Store(&started)
	b := runReplica(t, started, WithReload(func(context.Context) (Config, error) {
		if c := file.Load(); c != nil {
			return *c, nil
		}
		return Config{}, errors.New("b.yaml:3: broken")
	}))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)

	changed := cfgFor("b")
	changed.Graphs[0].Interval = 9 * time.Second
	file.Store(&changed)
	require.NoError(t, b.d.Reload(context.Background()))
	file.Store(nil)
	require.ErrorContains(t, b.d.Reload(context.Background()), "b.yaml:3: broken")

	require.NoError(t, a.stop(t, false))
	require.Eventually(t, b.ready, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 9*time.Second, b.d.graphs["p"].gc.Load().Interval, "the reload checked on standby, not the start's settings")
	lr := b.d.Status().LastReload
	require.NotNil(t, lr)
	require.False(t, lr.OK, "the file itself did not load")
	require.Contains(t, lr.Error, "at takeover")
}

// TestHAStandbyChecksTheBundle: a standby's reload makes the start's
// model check, so a bundle that would not load (trained on another graph,
// say) is refused when the operator signals it, and a takeover with such
// a file runs the settings last checked good instead of failing.
func TestHAStandbyChecksTheBundle(t *testing.T) {
	a, cfgFor := activeAndConfig(t)
	var file atomic.Pointer[Config]
	started := cfgFor("b")
	file.Store(&started)
	b := runReplica(t, started, WithReload(func(context.Context) (Config, error) { return *file.Load(), nil }),
		WithPreflight(func(gc GraphConfig, _ *graph.Graph) error {
			if gc.Bundle == "other.swb" {
				return errors.New("bundle: trained on another graph")
			}
			return nil
		}))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)

	wrong := cfgFor("b")
	wrong.Graphs[0].Bundle = "other.swb"
	file.Store(&wrong)
	require.ErrorContains(t, b.d.Reload(context.Background()), `graph "p": bundle: trained on another graph`)

	require.NoError(t, a.stop(t, false))
	require.Eventually(t, b.ready, 10*time.Second, 5*time.Millisecond, "takes over, on the settings read at start")
	require.Equal(t, "p.swb", b.d.graphs["p"].gc.Load().Bundle)
	lr := b.d.Status().LastReload
	require.NotNil(t, lr)
	require.False(t, lr.OK)
	require.Contains(t, lr.Error, "at takeover")
}

// TestHAFailedTakeoverReleasesTheLease: a standby whose start fails after
// it took the lease (its plugin will not launch) gives the lease up, so
// another replica need not wait out its TTL.
func TestHAFailedTakeoverReleasesTheLease(t *testing.T) {
	a, cfgFor := activeAndConfig(t)
	b := runReplica(t, cfgFor("b"))
	b.f.fail.Store(true)
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, a.stop(t, false))
	var err error
	select {
	case err = <-b.done:
		b.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("the failing takeover did not end")
	}
	require.ErrorContains(t, err, `graph "p": localizer`)
	_, js := connectJS(t, cfgFor("x").NATS.URL)
	kv, kerr := js.KeyValue(context.Background(), LeaseBucket)
	require.NoError(t, kerr)
	_, kerr = kv.Get(context.Background(), leaseKey)
	require.ErrorIs(t, kerr, jetstream.ErrKeyNotFound, "the lease is free at once, not after its 2 s TTL")
}

// A standby that sees the active replica's lease go unrenewed says so
// once, before it takes over at expiry, so the log explains the wait.
func TestHAStandbySaysWhyItWaits(t *testing.T) {
	a, cfgFor := activeAndConfig(t)
	core, logs := observer.New(zapcore.InfoLevel)
	b := runReplica(t, cfgFor("b"), WithLogger(zap.New(core)))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, a.stop(t, true))
	require.Eventually(t, b.ready, 10*time.Second, 5*time.Millisecond)
	said := logs.FilterMessage("the active replica stopped renewing its lease; taking over when it expires").All()
	require.Len(t, said, 1)
	require.Equal(t, "a", said[0].ContextMap()["active"])
	require.Zero(t, logs.FilterMessageSnippet("stopped renewing").Len()-1, "not repeated")
}

// TestRunStandingBy: a replica whose lease is taken stands by again in the
// same process, with a daemon built anew, and becomes active once the
// lease is free; only ctx ends it.
func TestRunStandingBy(t *testing.T) {
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.HA = HAConfig{Enabled: true, Replica: "a", LeaseTTL: time.Second}
	var built atomic.Int32
	var cur atomic.Pointer[Daemon]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunStandingBy(ctx, zap.NewNop(), func(context.Context) (*Daemon, error) {
			built.Add(1)
			return New(cfg, preload(t, 6, "p"), WithLocalizerFactory((&factoryOf{}).factory))
		}, cur.Store)
	}()
	isReady := func() bool {
		d := cur.Load()
		if d == nil {
			return false
		}
		select {
		case <-d.Ready():
			return true
		default:
			return false
		}
	}
	require.Eventually(t, isReady, 30*time.Second, 5*time.Millisecond)
	first := cur.Load()

	kv, err := js.KeyValue(context.Background(), LeaseBucket)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(context.Background(), leaseKey))
	_, err = kv.Create(context.Background(), leaseKey, []byte("intruder"))
	require.NoError(t, err)
	// The intruder renews its lease, as an active replica would.
	stopIntruder := make(chan struct{})
	var intruder sync.WaitGroup
	intruder.Go(func() {
		for {
			select {
			case <-stopIntruder:
				return
			case <-time.After(200 * time.Millisecond):
				_, _ = kv.Put(context.Background(), leaseKey, []byte("intruder"))
			}
		}
	})
	require.Eventually(t, func() bool {
		d := cur.Load()
		msg := d.standby.Load()
		return d != first && msg != nil && strings.Contains(*msg, "intruder")
	}, 15*time.Second, 5*time.Millisecond, "standing by again, in this process")
	require.Empty(t, done)

	close(stopIntruder)
	intruder.Wait()
	require.NoError(t, kv.Delete(context.Background(), leaseKey))
	require.Eventually(t, isReady, 15*time.Second, 5*time.Millisecond, "active again once the lease is free")
	require.EqualValues(t, 2, built.Load())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop")
	}
}

// A replica with a shorter lease_ttl does not shorten the lease key's
// life under an active replica that renews and fences by a longer one
// (it rewrote the bucket's TTL, and took the key while the active one
// still wrote); it stands by, says why its takeover will be slower, and
// a replica with a longer lease_ttl raises the bucket's.
func TestHALeaseBucketTTLIsNeverLowered(t *testing.T) {
	a, cfgFor := activeWithTTL(t, 3*time.Second)
	_, js := connectJS(t, a.d.cfg.NATS.URL)
	bucketTTL := func() time.Duration {
		kv, err := js.KeyValue(t.Context(), LeaseBucket)
		require.NoError(t, err)
		st, err := kv.Status(t.Context())
		require.NoError(t, err)
		return st.TTL()
	}
	require.Equal(t, 3*time.Second, bucketTTL())

	short := cfgFor("b")
	short.HA.LeaseTTL = time.Second
	core, logs := observer.New(zapcore.InfoLevel)
	b := runReplica(t, short, WithLogger(zap.New(core)))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3*time.Second, bucketTTL())
	require.Equal(t, 1, logs.FilterMessageSnippet("ha.lease_ttl is shorter than the lease bucket's TTL").Len())
	require.Never(t, func() bool { return b.ready() || !a.ready() }, 4*time.Second, 20*time.Millisecond,
		"the standby took the lease from a replica renewing it")

	long := cfgFor("c")
	long.HA.LeaseTTL = 5 * time.Second
	c := runReplica(t, long)
	require.Eventually(t, func() bool { return c.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 5*time.Second, bucketTTL())
	require.True(t, a.ready())
}

// A bucket TTL lowered under the active replica (an older build's replica
// rewrote it, or one racing this one's raise) moves the fence's point to
// two thirds of it after the next renewal, as the key lives only that
// long, and the renewals to a third of it, so the lease is kept.
func TestHALoweredBucketTTLMovesTheFence(t *testing.T) {
	a, _ := activeWithTTL(t, 3*time.Second)
	_, js := connectJS(t, a.d.cfg.NATS.URL)
	kv, err := js.KeyValue(t.Context(), LeaseBucket)
	require.NoError(t, err)
	st, err := kv.Status(t.Context())
	require.NoError(t, err)
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	cfg.MaxAge = 1500 * time.Millisecond
	cfg.Duplicates = cfg.MaxAge
	_, err = js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	l := a.d.held.Load()
	require.Eventually(t, func() bool { return l.bucketTTL.Load() == int64(1500*time.Millisecond) }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return time.Until(l.until()) <= time.Second+50*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	// Renewed a third of the lowered TTL apart, it keeps the lease.
	require.Never(t, func() bool { return l.lost.Load() || !a.ready() }, 2*time.Second, 20*time.Millisecond)
}
