package monitor

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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

// What an older sourcewatch left in the state bucket, purge markers of
// parts it named afresh at every write and parts a cut-short write left,
// is removed; the snapshot its current header names, this version's own
// parts and a marker younger than the cutoff stay.
func TestCompactBlobsRemovesOldLeftovers(t *testing.T) {
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: StateBucket, History: 1})
	require.NoError(t, err)
	put := func(key string, v []byte) {
		_, err := kv.Put(ctx, key, v)
		require.NoError(t, err)
	}
	// A snapshot in the older naming, still the current one.
	live := []byte("compressed snapshot bytes")
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(live)
	require.NoError(t, zw.Close())
	data := buf.Bytes()
	sum := sha256.Sum256(data)
	half := len(data) / 2
	put(partKey("window.p", "0f1e2d3c", 0), data[:half])
	put(partKey("window.p", "0f1e2d3c", 1), data[half:])
	header, err := json.Marshal(blobHeader{Parts: 2, ID: "0f1e2d3c", SHA256: hex.EncodeToString(sum[:])})
	require.NoError(t, err)
	put("window.p", header)
	// Parts of a write cut short, and markers of parts replaced long ago.
	put(partKey("window.p", "99aa88bb", 0), []byte("orphan"))
	for i := range 3 {
		key := partKey("window.p", "77665544", i)
		put(key, []byte("replaced"))
		require.NoError(t, kv.Purge(ctx, key))
	}
	// This version's parts: not the compaction's to judge.
	put(partKey("window.q", "a", 0), []byte("being written"))

	markers, parts, err := compactBlobs(ctx, js, kv, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, markers, "markers younger than the cutoff stay")
	require.Equal(t, 1, parts)

	markers, parts, err = compactBlobs(ctx, js, kv, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 3, markers)
	require.Zero(t, parts)

	got, err := getBlob(ctx, kv, "window.p")
	require.NoError(t, err)
	require.Equal(t, live, got, "the current snapshot is whole")
	_, err = kv.Get(ctx, partKey("window.q", "a", 0))
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), st.Values(), "the header, its two parts and this version's part")
}
