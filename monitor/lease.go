package monitor

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// LeaseBucket holds the active replica's lease when ha.enabled is set.
const LeaseBucket = "sourcewatch_lease"

// leaseKey is the one key of LeaseBucket: the active replica's id and
// process (id#instance).
const leaseKey = "active"

// ErrLeaseLost is returned by Run when another replica took the lease (or
// it could not be renewed within its TTL): this replica stopped consuming
// and inferring, and should be restarted to stand by again.
var ErrLeaseLost = errors.New("lease lost")

// defaultReplica names a replica that was not given an id: host and pid,
// unique among live processes.
func defaultReplica() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "replica"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// lease is the active replica's hold on LeaseBucket's key.
type lease struct {
	kv jetstream.KeyValue
	id string
	// instance tells this process from another with the same id: the key
	// holds id#instance. Without it two replicas given one id each took
	// the other's renewals for their own and both stayed active.
	instance string
	// ttl is this replica's ha.lease_ttl, which its renewals and fence
	// keep to; keyTTL is how long the key lives unrenewed, the bucket's
	// TTL, at least ttl: another replica's longer lease_ttl raised it,
	// and a process that held the key under it may still write for two
	// thirds of it after its last renewal began.
	ttl, keyTTL time.Duration
	// bucketTTL is the bucket's TTL as last read (nanoseconds; 0 unread):
	// the keeper reads it again at every renewal, as another process (an
	// older build, a replica racing this one's raise, an operator) may
	// have lowered it, and fences by it when it is below ttl.
	bucketTTL atomic.Int64
	// rev is the revision of the lease's last write. While the keeper runs
	// only it touches rev, so release stops it first.
	rev uint64
	// validUntil is two thirds of the TTL after the start of the last
	// write of the key that succeeded (on the monotonic clock, which a
	// step of the wall clock does not move): where keep gives the lease
	// up, a third of the TTL before a standby may take it. Every write of
	// the daemon checks it (Daemon.fenced), as the keeper's own report of
	// the loss can come late: a process paused (SIGSTOP, a VM frozen) past
	// the TTL resumes all its goroutines at once, and its scheduler
	// published and saved alert state before the keeper had run. lost is
	// set once the lease is given up, by whichever sees it first, and
	// stays set: a renewal that lands after the point does not revive
	// it, since a write may have been refused meanwhile.
	validUntil atomic.Pointer[time.Time]
	lost       atomic.Bool

	cancelKeeper context.CancelFunc
	keeper       sync.WaitGroup
}

// renewPeriod is a third of the shorter of ttl and the bucket's TTL as
// last read: a bucket TTL lowered under this replica moves the fence's
// point nearer, and renewals at the old pace would lapse it.
func (l *lease) renewPeriod() time.Duration { return l.fenceTTL() / 3 }

// fenceTTL is the shorter of ttl and the bucket's TTL as last read: how
// long the key surely lives after a write.
func (l *lease) fenceTTL() time.Duration {
	if b := time.Duration(l.bucketTTL.Load()); b > 0 && b < l.ttl {
		return b
	}
	return l.ttl
}

// keyLife is how long the key lives unrenewed: keyTTL, at least ttl.
func (l *lease) keyLife() time.Duration { return max(l.ttl, l.keyTTL) }

// value is what the lease key holds while this process has it.
func (l *lease) value() []byte {
	if l.instance == "" {
		return []byte(l.id)
	}
	return []byte(l.id + "#" + l.instance)
}

// wrote records a write of the key that succeeded, started at sent.
func (l *lease) wrote(sent time.Time) {
	until := sent.Add(2 * l.fenceTTL() / 3)
	l.validUntil.Store(&until)
}

// until is the point at which the lease is given up unless renewed.
func (l *lease) until() time.Time {
	if u := l.validUntil.Load(); u != nil {
		return *u
	}
	return time.Time{}
}

// lapsed reports whether this process may no longer act on the lease,
// and from the first time it does, gives the lease up for good.
func (l *lease) lapsed() bool {
	if l.lost.Load() {
		return true
	}
	if time.Now().Before(l.until()) {
		return false
	}
	l.lost.Store(true)
	return true
}

// holderID is the replica id in a lease key's value (id#instance).
func holderID(value []byte) string {
	s := string(value)
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

// newInstance is a random tag for this process's lease value.
func newInstance() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// acquireLease waits until this replica holds the lease: the key is absent
// (no replica is active, or the active one's lease expired) or holds this
// replica's own id left by a previous process that no longer renews it
// (watched first, see takeOwn: a live process with the same id is a
// misconfiguration, logged, and this one stands by). Meanwhile /readyz
// says which replica is active.
func (d *Daemon) acquireLease(ctx context.Context) (*lease, error) {
	ha := d.cfg.HA
	kv, keyTTL, err := d.openLeaseBucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: kv %s: %w", ErrNATS, LeaseBucket, err)
	}
	l := &lease{kv: kv, id: ha.Replica, instance: newInstance(), ttl: ha.LeaseTTL, keyTTL: keyTTL}
	l.bucketTTL.Store(int64(keyTTL))
	// The active lease's revision and since when this replica has seen
	// it unchanged: one unrenewed past two renewal periods is said once,
	// so the log explains the wait until it expires.
	var (
		seenRev   uint64
		seenSince time.Time
		saidStale bool
	)
	for {
		sent := time.Now()
		rev, err := kv.Create(ctx, leaseKey, l.value())
		if err == nil {
			l.rev = rev
			l.wrote(sent)
			d.standby.Store(nil)
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			if e, gerr := kv.Get(ctx, leaseKey); gerr == nil {
				holder := holderID(e.Value())
				if holder == l.id {
					// This replica's previous process, if it no longer
					// renews: take it over without waiting for expiry.
					taken, duplicate, err := l.takeOwn(ctx, e)
					if err != nil {
						return nil, err
					}
					if taken {
						d.standby.Store(nil)
						return l, nil
					}
					if !duplicate {
						continue // expired or taken meanwhile: look again
					}
					d.limiter.warn("lease.duplicate", "another live replica has this replica's id: give each replica its own ha.replica; standing by",
						zap.String("replica", l.id))
				}
				msg := "standby: replica " + holder + " is active"
				if d.standby.Swap(&msg) == nil {
					d.log.Info("standing by", zap.String("active", holder), zap.String("replica", l.id))
				}
				if e.Revision() != seenRev {
					seenRev, seenSince, saidStale = e.Revision(), time.Now(), false
				} else if unrenewed := time.Since(seenSince); !saidStale && unrenewed > 2*l.keyLife()/3 {
					saidStale = true
					d.log.Warn("the active replica stopped renewing its lease; taking over when it expires",
						zap.String("active", holder), zap.Duration("unrenewed_for", unrenewed.Round(time.Millisecond)),
						zap.Duration("lease_ttl", l.keyLife()))
				}
			}
		} else {
			d.limiter.warn("lease", "acquiring the lease", zap.Error(err))
		}
		t := time.NewTimer(l.ttl / 4)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// openLeaseBucket opens LeaseBucket, made with this replica's lease_ttl
// if it is missing, and returns it with its TTL, how long the key lives
// unrenewed. A bucket's TTL is raised to a longer lease_ttl, never
// lowered: the active replica renews and fences its writes by its own
// lease_ttl, so a key that expired sooner than that (a standby with a
// shorter lease_ttl rewrote the bucket's) let a standby take it while
// the active one still wrote.
func (d *Daemon) openLeaseBucket(ctx context.Context) (jetstream.KeyValue, time.Duration, error) {
	ha := d.cfg.HA
	cfg := jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "sourcewatch active replica (ha.enabled)",
		History:     1,
		TTL:         ha.LeaseTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(d.cfg.Events.Replicas, 1),
	}
	kv, err := d.js.KeyValue(ctx, LeaseBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = d.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = d.js.KeyValue(ctx, LeaseBucket) // another replica made it meanwhile
		}
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, err
	}
	bucketTTL := st.TTL()
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo().Config.Replicas != cfg.Replicas && bucketTTL >= ha.LeaseTTL {
		// events.replicas changed: applied, at the bucket's own TTL
		cfg.TTL = bucketTTL
		if kv, err = d.js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return nil, 0, err
		}
	}
	switch {
	case bucketTTL < ha.LeaseTTL:
		// A key that lives longer only makes a standby wait longer.
		if kv, err = d.js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return nil, 0, err
		}
		if bucketTTL > 0 {
			d.log.Info("lease bucket's TTL raised to this replica's ha.lease_ttl", zap.Duration("was", bucketTTL), zap.Duration("lease_ttl", ha.LeaseTTL))
		}
		return kv, ha.LeaseTTL, nil
	case bucketTTL > ha.LeaseTTL:
		d.log.Warn("ha.lease_ttl is shorter than the lease bucket's TTL, which a replica with a longer one set: the lease key lives that long unrenewed, so a standby takes over after a crash only then; give every replica the same lease_ttl, and to lower it, stop every replica and remove the bucket (nats kv rm "+LeaseBucket+")",
			zap.Duration("lease_ttl", ha.LeaseTTL), zap.Duration("bucket_ttl", bucketTTL))
		return kv, bucketTTL, nil
	default:
		return kv, bucketTTL, nil
	}
}

// takeOwn takes over a lease key holding this replica's id, found as e,
// when its writer no longer renews it: the key is watched for three
// quarters of the key's TTL, past the two thirds its writer may still
// write for after its last renewal began (lease.validUntil, by a
// lease_ttl no longer than the key's TTL), so a writer paused
// rather than dead cannot write beside this process
// (a renewal comes every third), then updated at the revision seen.
// duplicate reports a renewal meanwhile by another process with this id;
// neither taken nor duplicate, the key expired or changed hands while
// watched, and the caller looks again.
func (l *lease) takeOwn(ctx context.Context, e jetstream.KeyValueEntry) (taken, duplicate bool, err error) {
	// Looked at every quarter TTL, as a standby looks: a key that expires
	// or changes hands meanwhile ends the watch at once, so a restart is
	// never slower than a standby's takeover.
	end := time.Now().Add(3 * l.keyLife() / 4)
	for {
		if err := SleepContext(ctx, min(l.keyLife()/4, time.Until(end))); err != nil {
			return false, false, err
		}
		now, err := l.kv.Get(ctx, leaseKey)
		switch {
		case err != nil:
			return false, false, ctx.Err() // gone (expired): looked at again
		case now.Revision() != e.Revision():
			return false, holderID(now.Value()) == l.id && string(now.Value()) != string(l.value()), nil
		}
		if !time.Now().Before(end) {
			break
		}
	}
	sent := time.Now()
	rev, err := l.kv.Update(ctx, leaseKey, l.value(), e.Revision())
	if err != nil {
		return false, false, ctx.Err()
	}
	l.rev = rev
	l.wrote(sent)
	return true, false, nil
}

// startKeeping renews the lease in a goroutine of the lease's own (keep)
// until stopKeeping or release.
func (l *lease) startKeeping(ctx context.Context, lost chan<- error) {
	ctx, l.cancelKeeper = context.WithCancel(ctx)
	l.keeper.Go(func() { l.keep(ctx, lost) })
}

// stopKeeping stops the renewals and waits for the keeper to return, so
// no renewal is in flight afterwards. Calling it again is harmless.
func (l *lease) stopKeeping() {
	if l.cancelKeeper != nil {
		l.cancelKeeper()
	}
	l.keeper.Wait()
}

// keep renews the lease every third of its TTL until ctx ends. It reports
// on lost when another replica holds the key, or when no renewal succeeded
// for two thirds of the TTL, a third before the lease expires and a
// standby may take it. Every attempt is cut off at that point, and a
// failed one is retried every twelfth of the TTL until then: waiting on
// a blocked renewal, then on the next tick, gave up only at the full TTL,
// after the lease had expired.
func (l *lease) keep(ctx context.Context, lost chan<- error) {
	renewEvery, retryEvery := l.ttl/3, l.ttl/12
	// Timed from the start of the write that took the lease, as every
	// renewal after it: from the keeper's own start, a server slow by
	// more than a sixth of the TTL lost the lease at the first renewal.
	last := l.until().Add(-2 * l.ttl / 3)
	next := last.Add(renewEvery)
	t := time.NewTimer(max(0, time.Until(next)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The point the daemon's writes are fenced at (lease.validUntil),
		// so the two agree on when the lease is lost.
		deadline := l.until()
		if l.lapsed() {
			lost <- fmt.Errorf("%w: not renewed for %v (within two thirds of the TTL)", ErrLeaseLost, time.Since(last).Round(time.Millisecond))
			return
		}
		// failed schedules another try after a failure, or reports the
		// lease lost once the deadline has come.
		failed := func(err error) bool {
			if l.lapsed() {
				lost <- fmt.Errorf("%w: not renewed for %v: %w", ErrLeaseLost, time.Since(last).Round(time.Millisecond), err)
				return false
			}
			next = time.Now().Add(retryEvery)
			if next.After(deadline) {
				next = deadline
			}
			return true
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		sent := time.Now()
		rev, err := l.kv.Update(rctx, leaseKey, l.value(), l.rev)
		cancel()
		if err == nil {
			l.rev, last = rev, sent
			l.wrote(sent) // at once: a slow Status below must not lapse it
			// The key lives the bucket's TTL from this write, whoever set
			// it: a lowered one moves the fence's point nearer, and the
			// renewals come a third of it apart (see renewPeriod).
			sctx, cancel := context.WithDeadline(ctx, l.until())
			if st, serr := l.kv.Status(sctx); serr == nil && st.TTL() > 0 {
				l.bucketTTL.Store(int64(st.TTL()))
				l.wrote(sent)
			}
			cancel()
		}
		switch {
		case err == nil && l.lost.Load():
			// Renewed after the point: a write was refused meanwhile,
			// so the lease is given up all the same, and the key with it,
			// so another replica need not wait out the renewal's TTL.
			// Looked at after wrote: a write checked between the renewal's
			// return and wrote saw the old point and may have set lost.
			dctx, cancel := context.WithTimeout(ctx, renewEvery)
			_ = l.kv.Delete(dctx, leaseKey, jetstream.LastRevision(rev))
			cancel()
			lost <- fmt.Errorf("%w: renewed only after two thirds of the TTL", ErrLeaseLost)
			return
		case err == nil:
			// From the write's start, as validUntil: counted from its end,
			// round trips over a sixth of the TTL lapsed a lease renewed
			// on time.
			next = sent.Add(l.renewPeriod())
		case ctx.Err() != nil:
			return
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
			// A renewal the server applied but whose reply was lost (a
			// reconnect) leaves rev behind while the key is still ours:
			// adopt its revision, as release does, and keep it.
			gctx, cancel := context.WithDeadline(ctx, deadline)
			e, gerr := l.kv.Get(gctx, leaseKey)
			cancel()
			switch {
			case gerr == nil && string(e.Value()) == string(l.value()):
				l.rev = e.Revision()
				next = time.Now() // renewed at once with it
			case gerr == nil:
				holder := "replica " + holderID(e.Value())
				if holderID(e.Value()) == l.id {
					holder = "another process with this replica's id (give each replica its own ha.replica)"
				}
				l.lost.Store(true)
				lost <- fmt.Errorf("%w: %s holds it: %w", ErrLeaseLost, holder, err)
				return
			case ctx.Err() != nil:
				return
			case errors.Is(gerr, jetstream.ErrKeyNotFound):
				l.lost.Store(true)
				lost <- fmt.Errorf("%w: the key is gone (expired or deleted): %w", ErrLeaseLost, err)
				return
			// Not reachable to say whose it is: retried as after any
			// failed renewal, until the deadline.
			case !failed(gerr):
				return
			}
		case !failed(err):
			return
		}
		t.Reset(max(0, time.Until(next)))
	}
}

// release stops the renewals and gives the lease up, so a standby takes
// over at once instead of after the TTL. The keeper is waited for first: a
// renewal racing the Delete would change the revision under it. A renewal
// the server applied but whose reply the stop cut off leaves rev one
// behind; the lease is then still this replica's, at the revision Get
// reports, and is deleted at that one.
func (l *lease) release(ctx context.Context) error {
	l.stopKeeping()
	l.lost.Store(true) // nothing more is written under it
	err := l.kv.Delete(ctx, leaseKey, jetstream.LastRevision(l.rev))
	if err == nil {
		return nil
	}
	e, gerr := l.kv.Get(ctx, leaseKey)
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return nil // expired, or already deleted: nothing left to release
	case gerr != nil:
		return fmt.Errorf("releasing the lease: %w", err)
	case string(e.Value()) != string(l.value()):
		return fmt.Errorf("releasing the lease: replica %s holds it now", holderID(e.Value()))
	case e.Revision() == l.rev:
		return fmt.Errorf("releasing the lease: %w", err)
	}
	if err := l.kv.Delete(ctx, leaseKey, jetstream.LastRevision(e.Revision())); err != nil {
		return fmt.Errorf("releasing the lease: %w", err)
	}
	return nil
}

// RunStandingBy runs the daemons newDaemon builds, one after another, for
// as long as ctx lasts: when one returns ErrLeaseLost (another replica
// took the lease, or a NATS outage outlasted its renewals), the next one
// stands by for the lease in this process instead of the process exiting
// for its supervisor to restart it. That one is built anew (newDaemon may
// read the config file again), with its own metrics, since nothing of the
// replica that lost the lease may act any more. current is told each
// daemon before it runs (for SIGHUP). Any other end of Run is returned.
func RunStandingBy(ctx context.Context, log *zap.Logger, newDaemon func(context.Context) (*Daemon, error), current func(*Daemon)) error {
	for {
		d, err := newDaemon(ctx)
		if err != nil {
			return err
		}
		current(d)
		err = d.Run(ctx)
		if !errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
			return err
		}
		log.Warn("lost the lease; standing by again", zap.Error(err))
		if SleepContext(ctx, time.Second) != nil {
			return nil
		}
	}
}
