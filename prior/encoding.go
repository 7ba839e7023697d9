package prior

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Errors returned when decoding a VAE or Terms. They are wrapped with
// context; test with errors.Is.
var (
	// ErrFormat means the data is not an encoding this package wrote:
	// wrong magic, truncated, inconsistent sizes or non-finite values.
	ErrFormat = errors.New("prior: malformed encoding")
	// ErrVersion means the encoding's format version is not supported.
	ErrVersion = errors.New("prior: unsupported format version")
	// ErrChecksum means the contents do not match their CRC-32.
	ErrChecksum = errors.New("prior: checksum mismatch")
)

// The encodings are: 4-byte magic, uint32 version, a body, and the CRC-32
// (IEEE) of everything before it. All numbers are little-endian.

type writer struct{ buf []byte }

func newWriter(magic string, version uint32) *writer {
	w := &writer{buf: append([]byte(nil), magic...)}
	w.u32(version)
	return w
}

func (w *writer) u32(v uint32) { w.buf = binary.LittleEndian.AppendUint32(w.buf, v) }
func (w *writer) u64(v uint64) { w.buf = binary.LittleEndian.AppendUint64(w.buf, v) }
func (w *writer) i64(v int64)  { w.u64(uint64(v)) }
func (w *writer) f64(v float64) {
	w.u64(math.Float64bits(v))
}

func (w *writer) floats(v []float64) {
	for _, f := range v {
		w.f64(f)
	}
}

func (w *writer) bytes(b []byte) {
	w.u64(uint64(len(b)))
	w.buf = append(w.buf, b...)
}

// finish appends the checksum and returns the encoding.
func (w *writer) finish() []byte {
	return binary.LittleEndian.AppendUint32(w.buf, crc32.ChecksumIEEE(w.buf))
}

// reader decodes a body; the first error sticks and later reads return zero
// values, so callers check err once at the end (or before allocating).
type reader struct {
	what string
	buf  []byte
	off  int
	err  error
}

// newReader checks magic, version and checksum and returns a reader
// positioned at the body.
func newReader(what string, data []byte, magic string, version uint32) (*reader, error) {
	if len(data) < len(magic)+8 || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("%s: not a %s encoding: %w", what, what, ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(data[len(magic):]); v != version {
		return nil, fmt.Errorf("%s: version %d, want %d: %w", what, v, version, ErrVersion)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%s: %w", what, ErrChecksum)
	}
	return &reader{what: what, buf: body, off: len(magic) + 4}, nil
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s: %w", r.what, fmt.Sprintf(format, args...), ErrFormat)
	}
}

func (r *reader) take(k int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if k < 0 || len(r.buf)-r.off < k {
		r.fail("truncated at %s (offset %d)", field, r.off)
		return nil
	}
	b := r.buf[r.off : r.off+k]
	r.off += k
	return b
}

func (r *reader) u64(field string) uint64 {
	b := r.take(8, field)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (r *reader) i64(field string) int64 { return int64(r.u64(field)) }

func (r *reader) f64(field string) float64 {
	v := math.Float64frombits(r.u64(field))
	if r.err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		r.fail("%s is not finite", field)
	}
	return v
}

// size reads a dimension and checks it lies in [lo, hi].
func (r *reader) size(field string, lo, hi int) int {
	v := r.u64(field)
	if r.err == nil && (v < uint64(lo) || v > uint64(hi)) {
		r.fail("%s = %d out of range [%d, %d]", field, v, lo, hi)
		return 0
	}
	return int(v)
}

// floats reads k finite float64 values.
// maxMagnitude bounds every stored value. Trained weights and logits are
// many orders of magnitude smaller; finite values near the float64 limit
// would make the prior terms' sums overflow to Inf - Inf = NaN in a
// solve, while under this bound they stay finite at the largest sizes the
// format allows.
const maxMagnitude = 1e30

func (r *reader) floats(k int, field string) []float64 {
	if r.err != nil {
		return nil
	}
	if k < 0 || (len(r.buf)-r.off)/8 < k {
		r.fail("truncated at %s (want %d values)", field, k)
		return nil
	}
	out := make([]float64, k)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(r.buf[r.off:]))
		r.off += 8
		if math.IsNaN(out[i]) || math.IsInf(out[i], 0) {
			r.fail("%s[%d] is not finite", field, i)
			return nil
		}
		if math.Abs(out[i]) > maxMagnitude {
			r.fail("%s[%d] = %g is beyond ±%g", field, i, out[i], maxMagnitude)
			return nil
		}
	}
	return out
}

func (r *reader) bytes(field string) []byte {
	k := r.u64(field + " length")
	if r.err != nil {
		return nil
	}
	if k > uint64(len(r.buf)-r.off) {
		r.fail("truncated at %s (want %d bytes)", field, k)
		return nil
	}
	return r.take(int(k), field)
}

// done reports the first error, or trailing bytes.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.buf) {
		r.fail("%d trailing bytes", len(r.buf)-r.off)
	}
	return r.err
}
