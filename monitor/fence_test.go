package monitor

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// stuckKV is a state bucket whose Put waits for its context: a server
// that stopped answering.
type stuckKV struct {
	jetstream.KeyValue
	puts atomic.Int32
}

func (k *stuckKV) Put(ctx context.Context, _ string, _ []byte) (uint64, error) {
	k.puts.Add(1)
	<-ctx.Done()
	return 0, ctx.Err()
}

// Each write of the state bucket is fenced on its own: one under way is
// cut off at the point the lease is given up, not at its own timeout,
// and one after it is not tried. Without a lease (no HA) a write has its
// own timeout alone.
func TestFencedKVStopsAtTheLeasesPoint(t *testing.T) {
	d := &Daemon{stopIngest: func() {}}
	l := &lease{ttl: 3 * time.Second}
	l.wrote(time.Now().Add(-2*l.ttl/3 + 200*time.Millisecond)) // 200 ms left
	d.held.Store(l)
	kv := &stuckKV{}
	fenced := fencedKV{KeyValue: kv, d: d}

	start := time.Now()
	_, err := fenced.Put(t.Context(), "tracker", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 3*time.Second, "cut at the lease's point, not after the write's own 5 s")
	_, err = fenced.PutString(t.Context(), "tracker", "")
	require.ErrorIs(t, err, ErrLeaseLost)
	require.Equal(t, int32(1), kv.puts.Load(), "nothing tried after the point")

	// The same for an alert's publish, attempt by attempt: the first,
	// inside the lease, fails (a prefix the publisher refuses at once);
	// the retry 200 ms later comes after the point and is not made.
	d2 := &Daemon{stopIngest: func() {}, pub: alerts.NewPublisher(nil, "bad prefix")}
	l2 := &lease{ttl: 3 * time.Second}
	l2.wrote(time.Now().Add(-2*l2.ttl/3 + 100*time.Millisecond))
	d2.held.Store(l2)
	err = d2.publishAlert(t.Context(), alerts.Alert{ID: "p-1", Graph: "p"}, 3)
	require.ErrorIs(t, err, ErrLeaseLost, "the retry is fenced: %v", err)

	d.held.Store(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = fenced.Put(ctx, "tracker", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int32(2), kv.puts.Load())
}

// The state bucket deleted under the daemon (an operator's nats kv rm, or
// a server restarted on an empty store) is made anew by the next write,
// which is tried again: the windows and the alert state live in the
// daemon. Every snapshot and alert state save failed until a restart,
// the daemon not ready and every alert held back.
func TestStateBucketDeletedIsMadeAnew(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.SnapshotInterval = 20 * time.Millisecond
	r := start(t, cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	sink := subscribeAlerts(t, r.nc, "p")
	r.publish(t, "p", Event{Node: "1", State: StateInfected, TS: now}, "")
	sink.wait(t, 1)
	ctx := context.Background()
	require.NoError(t, r.js.DeleteKeyValue(ctx, StateBucket))

	// A new outbreak: the snapshot and the alert state are saved again.
	r.publish(t, "p", Event{Node: "1", State: StateRecovered, TS: now.Add(time.Second)}, "")
	r.publish(t, "p", Event{Node: "0", State: StateInfected, TS: now.Add(2 * time.Second)}, "")
	// A tick between the two events resolves the first incident (its
	// alert names node 1) before node 0's fires: the alert for node 0 is
	// waited for, not read as the second (under load a tick came between
	// them and the second alert was that resolve).
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(sink.all()[1:], func(a alerts.Alert) bool {
			return len(a.Sources) > 0 && a.Sources[0].Node == "0"
		})
	}, 20*time.Second, 5*time.Millisecond, "an alert for node 0")
	require.Eventually(t, func() bool {
		kv, err := r.js.KeyValue(ctx, StateBucket)
		if err != nil {
			return false
		}
		_, werr := kv.Get(ctx, "window.p")
		return werr == nil
	}, 10*time.Second, 10*time.Millisecond, "the bucket made anew holds the window")
	require.Eventually(t, func() bool { return len(r.d.readiness()) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// The state bucket deleted under a daemon whose windows do not move is
// made anew too, and every window, position and the alert state written
// into it again: no write found the bucket gone (an unmoved window is not
// written), so it stayed gone, and a crash meanwhile lost every window and
// open incident. Likewise, a bucket made anew by one graph's write gets
// the other graphs' unmoved windows back.
func TestStateBucketDeletedUnderIdleDaemonIsWrittenAgain(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p", "q")
	cfg.SnapshotInterval = 20 * time.Millisecond
	r := start(t, cfg, preload(t, 4, "p", "q"), WithLocalizerFactory((&factoryOf{}).factory))
	sinkP, sinkQ := subscribeAlerts(t, r.nc, "p"), subscribeAlerts(t, r.nc, "q")
	r.publish(t, "p", Event{Node: "1", State: StateInfected, TS: now}, "")
	r.publish(t, "q", Event{Node: "2", State: StateInfected, TS: now}, "")
	sinkP.wait(t, 1)
	sinkQ.wait(t, 1)
	ctx := context.Background()
	keys := []string{"window.p", "window.q", "through.p", "through.q", "tracker"}
	holds := func(keys ...string) func() bool {
		return func() bool {
			kv, err := r.js.KeyValue(ctx, StateBucket)
			if err != nil {
				return false
			}
			for _, k := range keys {
				if _, err := kv.Get(ctx, k); err != nil {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, holds(keys...), 10*time.Second, 10*time.Millisecond)

	require.NoError(t, r.js.DeleteKeyValue(ctx, StateBucket))
	require.Eventually(t, holds(keys...), 10*time.Second, 10*time.Millisecond,
		"an idle daemon makes the bucket anew and writes its state again")

	// Made anew by p's write: q's window comes back as well.
	require.NoError(t, r.js.DeleteKeyValue(ctx, StateBucket))
	r.publish(t, "p", Event{Node: "0", State: StateInfected, TS: now.Add(time.Second)}, "")
	require.Eventually(t, holds(keys...), 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(r.d.readiness()) == 0 }, 10*time.Second, 10*time.Millisecond)
}
