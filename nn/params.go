package nn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// Parameter stream format (all integers little-endian):
//
//	magic   "SWNNPARM" (8 bytes)
//	version uint32 (paramsVersion)
//	count   uint32
//	count times:
//	  name  uint32 length + bytes
//	  rows, cols uint32
//	  rows*cols float64 (IEEE 754 bits)
//	crc     uint32, CRC-32 (IEEE) of every byte before it
const (
	paramsMagic   = "SWNNPARM"
	paramsVersion = 1
	maxNameLen    = 4096
)

// Sentinel errors of ReadParams.
var (
	// ErrCorruptParams means the stream is not a parameter stream, is of an
	// unknown version, is truncated, or fails its checksum.
	ErrCorruptParams = errors.New("corrupt parameter stream")
	// ErrParamMismatch means the stream is intact but holds other
	// parameters (names, count or shapes) than the model.
	ErrParamMismatch = errors.New("parameters do not match the model")
)

// WriteParams writes ps (names, shapes and values) to w in the format
// ReadParams reads.
func WriteParams(w io.Writer, ps []*Param) error {
	crc := crc32.NewIEEE()
	mw := io.MultiWriter(w, crc)
	buf := make([]byte, 0, 64)
	buf = append(buf, paramsMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, paramsVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(ps)))
	if _, err := mw.Write(buf); err != nil {
		return fmt.Errorf("write params: %w", err)
	}
	for _, p := range ps {
		if len(p.Value) != p.Rows*p.Cols {
			panic(fmt.Sprintf("nn: param %q has %d values for shape %dx%d", p.Name, len(p.Value), p.Rows, p.Cols))
		}
		if len(p.Name) > maxNameLen {
			panic(fmt.Sprintf("nn: param name longer than %d bytes", maxNameLen))
		}
		buf = buf[:0]
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p.Name)))
		buf = append(buf, p.Name...)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.Rows))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.Cols))
		if _, err := mw.Write(buf); err != nil {
			return fmt.Errorf("write param %q: %w", p.Name, err)
		}
		data := make([]byte, 8*len(p.Value))
		for i, v := range p.Value {
			binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
		}
		if _, err := mw.Write(data); err != nil {
			return fmt.Errorf("write param %q: %w", p.Name, err)
		}
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return fmt.Errorf("write params: %w", err)
	}
	return nil
}

// paramReader reads exactly what it is asked for, hashing as it goes, and
// turns a short read into ErrCorruptParams naming what was being read.
type paramReader struct {
	r   io.Reader
	crc hash.Hash32
}

func (pr *paramReader) read(n int, what string) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(pr.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated while reading %s", ErrCorruptParams, what)
		}
		return nil, fmt.Errorf("read params: %s: %w", what, err)
	}
	pr.crc.Write(b)
	return b, nil
}

func (pr *paramReader) u32(what string) (uint32, error) {
	b, err := pr.read(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

// ReadParams reads a stream written by WriteParams into ps. It reads
// exactly the stream's bytes, so the stream may be embedded in a larger
// one. Names, count and shapes must match ps (ErrParamMismatch); a bad
// magic, unknown version, truncation, non-finite value or checksum failure
// is ErrCorruptParams. ps is only written once the whole stream checks out.
func ReadParams(r io.Reader, ps []*Param) error {
	pr := &paramReader{r: r, crc: crc32.NewIEEE()}
	magic, err := pr.read(len(paramsMagic), "header")
	if err != nil {
		return err
	}
	if string(magic) != paramsMagic {
		return fmt.Errorf("%w: bad magic %q, want %q", ErrCorruptParams, magic, paramsMagic)
	}
	version, err := pr.u32("version")
	if err != nil {
		return err
	}
	if version != paramsVersion {
		return fmt.Errorf("%w: unsupported version %d, want %d", ErrCorruptParams, version, paramsVersion)
	}
	count, err := pr.u32("parameter count")
	if err != nil {
		return err
	}
	if int64(count) != int64(len(ps)) {
		return fmt.Errorf("%w: stream has %d parameters, model has %d", ErrParamMismatch, count, len(ps))
	}
	values := make([][]float64, len(ps))
	for k, p := range ps {
		nameLen, err := pr.u32(fmt.Sprintf("parameter %d name length", k))
		if err != nil {
			return err
		}
		if nameLen > maxNameLen {
			return fmt.Errorf("%w: parameter %d name length %d exceeds %d", ErrCorruptParams, k, nameLen, maxNameLen)
		}
		name, err := pr.read(int(nameLen), fmt.Sprintf("parameter %d name", k))
		if err != nil {
			return err
		}
		if string(name) != p.Name {
			return fmt.Errorf("%w: parameter %d is %q, model has %q", ErrParamMismatch, k, name, p.Name)
		}
		rows, err := pr.u32(fmt.Sprintf("parameter %q rows", p.Name))
		if err != nil {
			return err
		}
		cols, err := pr.u32(fmt.Sprintf("parameter %q cols", p.Name))
		if err != nil {
			return err
		}
		if int64(rows) != int64(p.Rows) || int64(cols) != int64(p.Cols) {
			return fmt.Errorf("%w: parameter %q is %dx%d, model has %dx%d", ErrParamMismatch, p.Name, rows, cols, p.Rows, p.Cols)
		}
		data, err := pr.read(8*p.Rows*p.Cols, fmt.Sprintf("parameter %q values", p.Name))
		if err != nil {
			return err
		}
		v := make([]float64, p.Rows*p.Cols)
		for i := range v {
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
			if math.IsNaN(v[i]) || math.IsInf(v[i], 0) {
				return fmt.Errorf("%w: parameter %q value %d is %v", ErrCorruptParams, p.Name, i, v[i])
			}
		}
		values[k] = v
	}
	want := pr.crc.Sum32()
	sum, err := pr.read(4, "checksum")
	if err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint32(sum); got != want {
		return fmt.Errorf("%w: checksum %08x, content hashes to %08x", ErrCorruptParams, got, want)
	}
	for k, p := range ps {
		copy(p.Value, values[k])
	}
	return nil
}
