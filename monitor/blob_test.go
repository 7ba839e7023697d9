package monitor

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Snapshots are stored compressed, in parts when one message cannot carry
// them; a write replaces the parts of the one before, and damaged parts
// are reported as such, not as a NATS failure.
func TestBlobRoundTrip(t *testing.T) {
	kv := newKV(t, StateBucket)
	ctx := context.Background()
	keys := func() []string {
		l, err := kv.ListKeys(ctx)
		require.NoError(t, err)
		var out []string
		for k := range l.Keys() {
			out = append(out, k)
		}
		return out
	}

	// Compressible: one value, far smaller than the data.
	text := []byte(strings.Repeat(`{"node":"12345","state":"infected","ts":1795686014481209300},`, 20000))
	require.NoError(t, putBlob(ctx, kv, "window.p", text, 64<<10))
	got, err := getBlob(ctx, kv, "window.p")
	require.NoError(t, err)
	require.Equal(t, text, got)
	e, err := kv.Get(ctx, "window.p")
	require.NoError(t, err)
	require.Less(t, len(e.Value()), 64<<10)
	require.Equal(t, []string{"window.p"}, keys())

	// Incompressible and larger than a part: stored in parts.
	noise := make([]byte, 300<<10)
	_, _ = rand.Read(noise)
	require.NoError(t, putBlob(ctx, kv, "window.p", noise, 64<<10))
	got, err = getBlob(ctx, kv, "window.p")
	require.NoError(t, err)
	require.True(t, bytes.Equal(noise, got))
	require.Len(t, keys(), 1+5, "the header and five parts of at most 64 KiB")

	// Written again, small: the old parts go.
	require.NoError(t, putBlob(ctx, kv, "window.p", []byte(`{"graph":"p"}`), 64<<10))
	require.Equal(t, []string{"window.p"}, keys())

	// A damaged part is errBadBlob.
	require.NoError(t, putBlob(ctx, kv, "window.p", noise, 64<<10))
	for _, k := range keys() {
		if strings.HasSuffix(k, ".2") {
			_, err := kv.Put(ctx, k, []byte("x"))
			require.NoError(t, err)
		}
	}
	_, err = getBlob(ctx, kv, "window.p")
	require.ErrorIs(t, err, errBadBlob)
	require.ErrorContains(t, err, "checksum")

	// A value stored before compression is read as it is.
	_, err = kv.Put(ctx, "window.q", []byte(`{"graph":"q","seq":3}`))
	require.NoError(t, err)
	got, err = getBlob(ctx, kv, "window.q")
	require.NoError(t, err)
	require.Equal(t, `{"graph":"q","seq":3}`, string(got))
	_, err = getBlob(ctx, kv, "window.none")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
}

// Snapshots written in parts again and again keep the bucket bounded: the
// parts' keys are used again, where fresh keys at every write left a
// purge marker per old part for good.
func TestBlobPartsDoNotAccumulate(t *testing.T) {
	kv := newKV(t, StateBucket)
	ctx := context.Background()
	noise := make([]byte, 300<<10)
	for range 20 {
		_, _ = rand.Read(noise)
		require.NoError(t, putBlob(ctx, kv, "window.p", noise, 64<<10))
		got, err := getBlob(ctx, kv, "window.p")
		require.NoError(t, err)
		require.True(t, bytes.Equal(noise, got))
	}
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Values(), uint64(1+2*5), "the header and two generations of five parts (live or purged), not 20")
}

// headerGetFails is a KeyValue whose next Get of key fails as a timeout.
type headerGetFails struct {
	jetstream.KeyValue
	key string
}

func (h *headerGetFails) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == h.key {
		h.key = ""
		return nil, errors.New("nats: timeout")
	}
	return h.KeyValue.Get(ctx, key)
}

// A write that cannot read the current header does not guess the next
// parts' name, which could be the live parts': it fails, and the stored
// snapshot stays whole.
func TestBlobWriteNeedsTheCurrentHeader(t *testing.T) {
	kv := newKV(t, StateBucket)
	ctx := context.Background()
	live := make([]byte, 300<<10)
	_, _ = rand.Read(live)
	require.NoError(t, putBlob(ctx, kv, "window.p", live, 64<<10)) // parts "a", the first name a guess would take

	next := make([]byte, 300<<10)
	_, _ = rand.Read(next)
	err := putBlob(ctx, &headerGetFails{KeyValue: kv, key: "window.p"}, "window.p", next, 64<<10)
	require.ErrorContains(t, err, "reading window.p before replacing it: nats: timeout")
	got, err := getBlob(ctx, kv, "window.p")
	require.NoError(t, err)
	require.True(t, bytes.Equal(live, got), "the stored snapshot is untouched")
}
