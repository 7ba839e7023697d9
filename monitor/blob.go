package monitor

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Window snapshots are stored gzip-compressed, and in parts when even the
// compressed snapshot exceeds what one NATS message carries (max_payload,
// 1 MiB by default): a window of tens of thousands of nodes, or a ring of
// long event ids, would otherwise fail every snapshot, and a takeover would
// replay the stream from its start.
//
// The value under the key is then either the gzip data itself or a
// blobHeader naming its parts, written after them, so a reader never sees
// a header whose parts are not all there; the parts of the header it
// replaces are deleted afterwards. A value that is plain JSON without
// parts is a snapshot from before compression, read as it is.

// errBadBlob is wrapped by getBlob's errors about the stored data itself
// (a part missing, a checksum or compression that does not hold), as
// opposed to failures to reach NATS.
var errBadBlob = errors.New("stored value damaged")

// blobHeader is the value of a key whose data is stored in parts.
type blobHeader struct {
	Parts  int    `json:"sourcewatch_parts"`
	ID     string `json:"id"`     // names the parts: <key>.part.<id>.<i>
	SHA256 string `json:"sha256"` // of the concatenated parts
}

// maxBlobBytes bounds the decompressed size of a stored blob, so a damaged
// or hostile value cannot exhaust memory.
const maxBlobBytes = 1 << 30

// blobPayloadMargin is left below the connection's max_payload for the
// message's headers and subject.
const blobPayloadMargin = 8 << 10

func partKey(key, id string, i int) string { return key + ".part." + id + "." + strconv.Itoa(i) }

// putBlob stores data under key, compressed, in parts of at most maxPart
// bytes when it does not fit in one.
func putBlob(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, maxPart int) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return fmt.Errorf("compressing %s: %w", key, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compressing %s: %w", key, err)
	}
	old, err := oldHeader(ctx, kv, key)
	if err != nil {
		// Without the current header the next parts' name is unknown:
		// writing could overwrite the parts the stored snapshot needs.
		return fmt.Errorf("reading %s before replacing it: %w", key, err)
	}
	if buf.Len() <= maxPart {
		if _, err := kv.Put(ctx, key, buf.Bytes()); err != nil {
			return fmt.Errorf("storing %s: %w", key, err)
		}
		deleteParts(ctx, kv, key, old)
		return nil
	}
	sum := sha256.Sum256(buf.Bytes())
	h := blobHeader{ID: nextPartsID(old), SHA256: hex.EncodeToString(sum[:])}
	for rest := buf.Bytes(); len(rest) > 0; h.Parts++ {
		n := min(len(rest), maxPart)
		if _, err := kv.Put(ctx, partKey(key, h.ID, h.Parts), rest[:n]); err != nil {
			deleteParts(ctx, kv, key, &blobHeader{Parts: h.Parts, ID: h.ID})
			return fmt.Errorf("storing %s, part %d: %w", key, h.Parts, err)
		}
		rest = rest[n:]
	}
	head, _ := json.Marshal(h)
	if _, err := kv.Put(ctx, key, head); err != nil {
		deleteParts(ctx, kv, key, &h)
		return fmt.Errorf("storing %s: %w", key, err)
	}
	deleteParts(ctx, kv, key, old)
	return nil
}

// putValue stores data under key as it is when it fits in one message
// (so a build that reads only plain values still reads it), and as
// putBlob does, compressed and in parts, when it does not.
func putValue(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, maxPart int) error {
	if len(data) > maxPart {
		return putBlob(ctx, kv, key, data, maxPart)
	}
	old, err := oldHeader(ctx, kv, key)
	if err != nil {
		return fmt.Errorf("reading %s before replacing it: %w", key, err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	deleteParts(ctx, kv, key, old)
	return nil
}

// nextPartsID names the parts of the next write: "a" and "b" in turn, so
// the parts a reader of the current header needs are never overwritten
// before the header is replaced, and the same keys are used again. Fresh
// names at every write would leave a purge marker per part behind for
// good (a KV purge keeps one record per key), thousands a day.
func nextPartsID(old *blobHeader) string {
	if old != nil && old.ID == "a" {
		return "b"
	}
	return "a"
}

// oldHeader returns the parts header stored under key, if that is what
// is stored there (nil for another value or none).
func oldHeader(ctx context.Context, kv jetstream.KeyValue, key string) (*blobHeader, error) {
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if h, ok := parseHeader(e.Value()); ok {
		return &h, nil
	}
	return nil, nil
}

func parseHeader(v []byte) (blobHeader, bool) {
	var h blobHeader
	if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &h) != nil || h.Parts <= 0 {
		return blobHeader{}, false
	}
	return h, true
}

// deleteParts removes h's parts; a part left behind only takes space.
func deleteParts(ctx context.Context, kv jetstream.KeyValue, key string, h *blobHeader) {
	if h == nil {
		return
	}
	for i := range h.Parts {
		_ = kv.Purge(ctx, partKey(key, h.ID, i))
	}
}

// getBlob reads what putBlob stored under key (or a plain value stored
// before it), returning jetstream.ErrKeyNotFound when there is none.
func getBlob(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	v := e.Value()
	if h, ok := parseHeader(v); ok {
		var joined []byte
		for i := range h.Parts {
			p, err := kv.Get(ctx, partKey(key, h.ID, i))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil, fmt.Errorf("%w: part %d of %d missing", errBadBlob, i, h.Parts)
			}
			if err != nil {
				return nil, fmt.Errorf("part %d of %d: %w", i, h.Parts, err)
			}
			joined = append(joined, p.Value()...)
		}
		if sum := sha256.Sum256(joined); hex.EncodeToString(sum[:]) != h.SHA256 {
			return nil, fmt.Errorf("%w: parts do not match their checksum", errBadBlob)
		}
		v = joined
	}
	if len(v) < 2 || v[0] != 0x1f || v[1] != 0x8b {
		return v, nil // stored before compression
	}
	zr, err := gzip.NewReader(bytes.NewReader(v))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadBlob, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxBlobBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadBlob, err)
	}
	if len(out) > maxBlobBytes {
		return nil, fmt.Errorf("%w: more than %d bytes uncompressed", errBadBlob, maxBlobBytes)
	}
	return out, nil
}

// compactBlobs removes from the state bucket what no reader needs:
//   - purge and delete markers created before cutoff. A KV purge keeps one
//     record per key for good; an older sourcewatch named a snapshot's
//     parts afresh at every write, so its markers piled up by thousands a
//     day, each a subject the server tracks;
//   - parts in that older naming (neither "a" nor "b") that their key's
//     current header does not name, left by a write cut short.
//
// Each is removed with the stream records up to its own revision only, so
// a value written to the key meanwhile stays (a KV purge would leave a
// new marker, and nats.go's PurgeDeletes would take the new value too).
// It returns how many of each it removed.
func compactBlobs(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, cutoff time.Time) (markers, parts int, err error) {
	// A bucket's records are the stream KV_<bucket>'s.
	stream, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return 0, 0, fmt.Errorf("the stream of %s: %w", kv.Bucket(), err)
	}
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("listing %s: %w", kv.Bucket(), err)
	}
	type record struct {
		key string
		rev uint64
	}
	var stale, orphans []record
	for e := range w.Updates() {
		if e == nil {
			break // the initial values are all in
		}
		switch e.Operation() {
		case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
			if e.Created().Before(cutoff) {
				stale = append(stale, record{e.Key(), e.Revision()})
			}
		case jetstream.KeyValuePut:
			if _, id, ok := splitPartKey(e.Key()); ok && id != "a" && id != "b" {
				orphans = append(orphans, record{e.Key(), e.Revision()})
			}
		}
	}
	_ = w.Stop()
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	remove := func(r record) error {
		return stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+kv.Bucket()+"."+r.key), jetstream.WithPurgeSequence(r.rev+1))
	}
	for _, r := range stale {
		if err := remove(r); err != nil {
			return markers, parts, fmt.Errorf("removing the marker of %s: %w", r.key, err)
		}
		markers++
	}
	current := map[string]string{} // key -> the parts id its header names
	for _, r := range orphans {
		key, id, _ := splitPartKey(r.key)
		named, seen := current[key]
		if !seen {
			h, err := oldHeader(ctx, kv, key)
			if err != nil {
				return markers, parts, fmt.Errorf("reading %s: %w", key, err)
			}
			if h != nil {
				named = h.ID
			}
			current[key] = named
		}
		if id == named {
			continue
		}
		if err := remove(r); err != nil {
			return markers, parts, fmt.Errorf("removing %s: %w", r.key, err)
		}
		parts++
	}
	return markers, parts, nil
}

// splitPartKey undoes partKey.
func splitPartKey(k string) (key, id string, ok bool) {
	i := strings.LastIndex(k, ".part.")
	if i <= 0 {
		return "", "", false
	}
	id, n, found := strings.Cut(k[i+len(".part."):], ".")
	if !found || id == "" {
		return "", "", false
	}
	if _, err := strconv.Atoi(n); err != nil {
		return "", "", false
	}
	return k[:i], id, true
}
