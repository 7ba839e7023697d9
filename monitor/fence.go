package monitor

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// fencedContext is ctx bounded by timeout and, while an HA replica holds
// the lease, by the point it gives the lease up (lease.until), for one
// write; it fails, writing nothing, once the lease has lapsed
// (Daemon.fenced). A write checked once and then retried or made in
// parts could otherwise go on seconds past the point, while a replica
// restarted under its own id takes over only a twelfth of the TTL after
// it.
//
// A timeout of 0 adds none.
func (d *Daemon) fencedContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	if err := d.fenced(); err != nil {
		return nil, nil, err
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	if l := d.held.Load(); l != nil {
		bounded, cancelBounded := context.WithDeadline(wctx, l.until())
		return bounded, func() { cancelBounded(); cancel() }, nil
	}
	return wctx, cancel, nil
}

// fencedKV is the state bucket as the daemon writes it: every write is
// fenced on its own (fencedContext), so a snapshot in parts, the
// deletion of its old parts, or a save retried after a slow server, stops
// at the point the lease is given up rather than at the first check.
// Reads pass as they are.
type fencedKV struct {
	jetstream.KeyValue
	d *Daemon
}

// fencedWriteTimeout bounds one write of the state bucket whose context
// has no deadline, as jetstream's own default would (it applies its 5 s
// only to a context without one); a caller's deadline stands as it is.
const fencedWriteTimeout = 5 * time.Second

// writeTimeout is fencedWriteTimeout for a ctx without a deadline, else 0.
func writeTimeout(ctx context.Context) time.Duration {
	if _, ok := ctx.Deadline(); ok {
		return 0
	}
	return fencedWriteTimeout
}

// write runs one write of the bucket under fencedContext. A write that
// finds the bucket gone (deleted under the daemon, or a server restarted
// on an empty store) makes it anew and is tried once more: the windows
// and the alert state live in the daemon and are written again, where
// every snapshot and alert state save failed until a restart, and so
// every alert was held back.
func (k fencedKV) write(ctx context.Context, f func(context.Context) error) error {
	wctx, cancel, err := k.d.fencedContext(ctx, writeTimeout(ctx))
	if err != nil {
		return err
	}
	defer cancel()
	err = f(wctx)
	if err != nil && k.d.remakeStateBucket(wctx, err) {
		err = f(wctx)
	}
	return err
}

// stateBucketMaybeGone reports whether err, of a write or read of the
// state bucket, can mean that the bucket is gone.
func stateBucketMaybeGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// Get reads key; one that finds the bucket gone makes it anew, as a write
// does, and reads again: a save reads what it replaces first (putValue),
// and so failed on a missing bucket before its write could make it.
func (k fencedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	if err == nil || !stateBucketMaybeGone(err) {
		return e, err
	}
	wctx, cancel, ferr := k.d.fencedContext(ctx, writeTimeout(ctx))
	if ferr != nil {
		return e, err
	}
	defer cancel()
	if !k.d.remakeStateBucket(wctx, err) {
		return e, err
	}
	return k.KeyValue.Get(ctx, key)
}

// remakeStateBucket makes the state bucket anew when err, a write's, came
// of its stream being gone, and reports whether it is there now.
func (d *Daemon) remakeStateBucket(ctx context.Context, err error) bool {
	if d.js == nil || !stateBucketMaybeGone(err) {
		return false
	}
	if _, gerr := d.js.KeyValue(ctx, StateBucket); !errors.Is(gerr, jetstream.ErrBucketNotFound) {
		return false
	}
	switch _, cerr := d.js.CreateKeyValue(ctx, stateBucketConfig(d.cfg)); {
	case cerr == nil:
		d.log.Warn("state bucket was deleted; made it anew (the windows and the alert state are written again from this daemon's at the next snapshot; another replica's stored state is gone)",
			zap.String("bucket", StateBucket))
		d.stateRemade.Store(true)
		return true
	case errors.Is(cerr, jetstream.ErrBucketExists):
		// Made by a concurrent write of this daemon's, most likely.
		d.stateRemade.Store(true)
		return true
	default:
		d.log.Warn("state bucket was deleted; making it anew failed", zap.String("bucket", StateBucket), zap.Error(cerr))
		return false
	}
}

// checkStateBucket makes the state bucket anew when it is gone. The
// periodic snapshot calls it: a daemon whose windows do not move writes
// nothing, so no write of its would find the bucket gone, and a crash
// meanwhile lost every window and open incident it held.
func (d *Daemon) checkStateBucket(ctx context.Context) {
	if d.js == nil {
		return
	}
	_, err := d.js.KeyValue(ctx, StateBucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return
	}
	wctx, cancel, ferr := d.fencedContext(ctx, writeTimeout(ctx))
	if ferr != nil {
		return
	}
	defer cancel()
	d.remakeStateBucket(wctx, err)
}

func (k fencedKV) Put(ctx context.Context, key string, value []byte) (rev uint64, err error) {
	err = k.write(ctx, func(c context.Context) (werr error) { rev, werr = k.KeyValue.Put(c, key, value); return werr })
	return rev, err
}

func (k fencedKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return k.Put(ctx, key, []byte(value))
}

func (k fencedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (rev uint64, err error) {
	err = k.write(ctx, func(c context.Context) (werr error) {
		rev, werr = k.KeyValue.Create(c, key, value, opts...)
		return werr
	})
	return rev, err
}

func (k fencedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (rev uint64, err error) {
	err = k.write(ctx, func(c context.Context) (werr error) {
		rev, werr = k.KeyValue.Update(c, key, value, revision)
		return werr
	})
	return rev, err
}

func (k fencedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return k.write(ctx, func(c context.Context) error { return k.KeyValue.Delete(c, key, opts...) })
}

func (k fencedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return k.write(ctx, func(c context.Context) error { return k.KeyValue.Purge(c, key, opts...) })
}

func (k fencedKV) PurgeDeletes(ctx context.Context, opts ...jetstream.KVPurgeOpt) error {
	return k.write(ctx, func(c context.Context) error { return k.KeyValue.PurgeDeletes(c, opts...) })
}
