package forward

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"gonum.org/v1/gonum/mat"
)

// The batches of a fused call (x, the target and the gradient) can travel
// through a memory region shared by the host and the plugin instead of
// through gRPC: on Power Grid a call moves about 670 KB, which gRPC's
// 16 KB frames, TLS records and copies turn into milliseconds of CPU on
// both sides, a third of the call. The region is an anonymous memory file
// (memfd) the plugin inherits at launch, so nothing is left on disk when
// either side dies; gRPC still carries the call and its errors, and the
// shapes. A plugin that does not map the region (another language, another
// platform) does not say so in Info and is sent bytes as before.

// SharedMemoryEnv names the environment variable holding the plugin's file
// descriptor of the shared batch region; forward.Serve reads it.
const SharedMemoryEnv = "SOURCEWATCH_FORWARD_SHM_FD"

// maxSharedBytes bounds the region; a larger call travels as bytes.
const maxSharedBytes = 1 << 30

// sharedLayout returns the byte offsets of x (rows x cols), the target
// (targetRows x cols) and dx (rows x cols) in the region, and its size, or
// ok false when the batch exceeds maxSharedBytes.
func sharedLayout(rows, cols, targetRows int) (xOff, targetOff, dxOff, size int, ok bool) {
	if rows <= 0 || cols <= 0 || targetRows <= 0 {
		return 0, 0, 0, 0, false
	}
	// Compare before multiplying: rows and cols come off the wire.
	if cols > maxSharedBytes/8 || 2*rows+targetRows > maxSharedBytes/(8*cols) {
		return 0, 0, 0, 0, false
	}
	targetOff = 8 * rows * cols
	dxOff = targetOff + 8*targetRows*cols
	return 0, targetOff, dxOff, dxOff + 8*rows*cols, true
}

// floatsAt views n float64 of mem from byte off (a multiple of 8 on a
// page-aligned mapping) in the machine's byte order: both sides of the
// region run on the same machine.
func floatsAt(mem []byte, off, n int) []float64 {
	if off < 0 || n <= 0 || off+8*n > len(mem) {
		panic(fmt.Sprintf("forward: %d floats at byte %d of a %d-byte region", n, off, len(mem)))
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&mem[off])), n)
}

// putDense copies m into the region at byte off.
func putDense(mem []byte, off int, m *mat.Dense) {
	r, c := m.Dims()
	dst := floatsAt(mem, off, r*c)
	raw := m.RawMatrix()
	for i := 0; i < r; i++ {
		copy(dst[i*c:(i+1)*c], raw.Data[i*raw.Stride:i*raw.Stride+c])
	}
}

// denseAt copies a rows x cols matrix out of the region at byte off.
func denseAt(mem []byte, off, rows, cols int) *mat.Dense {
	data := make([]float64, rows*cols)
	copy(data, floatsAt(mem, off, rows*cols))
	return mat.NewDense(rows, cols, data)
}

// sharedRegion is the shared file and this process's mapping of it.
type sharedRegion struct {
	file *os.File
	mem  []byte
}

// grow makes the file at least size bytes (rounded up to whole pages) and
// maps all of it; the host calls it before writing a call's batches.
func (r *sharedRegion) grow(size int) ([]byte, error) {
	if len(r.mem) >= size {
		return r.mem, nil
	}
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	if err := r.file.Truncate(int64(size)); err != nil {
		return nil, fmt.Errorf("shared memory: growing to %d bytes: %w", size, err)
	}
	return r.remap(size)
}

// view returns a mapping of at least size bytes, mapping the file again
// when the host has grown it; the plugin calls it for each shared call.
func (r *sharedRegion) view(size int) ([]byte, error) {
	if len(r.mem) >= size {
		return r.mem, nil
	}
	fi, err := r.file.Stat()
	if err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	if fi.Size() < int64(size) {
		return nil, fmt.Errorf("shared memory: batch needs %d bytes, the region holds %d", size, fi.Size())
	}
	return r.remap(int(fi.Size()))
}

func (r *sharedRegion) remap(size int) ([]byte, error) {
	if r.mem != nil {
		if err := unmapShared(r.mem); err != nil {
			return nil, fmt.Errorf("shared memory: unmapping: %w", err)
		}
		r.mem = nil
	}
	mem, err := mapShared(r.file, size)
	if err != nil {
		return nil, fmt.Errorf("shared memory: mapping %d bytes: %w", size, err)
	}
	r.mem = mem
	return mem, nil
}

func (r *sharedRegion) close() {
	if r.mem != nil {
		_ = unmapShared(r.mem)
		r.mem = nil
	}
	_ = r.file.Close()
}

// ErrSharedMemory is returned, wrapped, by a plugin that could not use the
// shared batch region for a call (it has none, or cannot map what the host
// grew). Such a plugin has not touched the region, so the host sends the
// same call as bytes, and every later one.
var ErrSharedMemory = errors.New("shared memory region unusable")

// hostShared is a Process's side of the region. One call at a time uses
// it; a concurrent call sends bytes instead of waiting.
type hostShared struct {
	mu     sync.Mutex
	region sharedRegion
	// retired: a call through the region failed, so the plugin may still be
	// reading or writing it; the process sends bytes from then on.
	retired atomic.Bool
	calls   atomic.Int64
}

// newHostShared creates the region a plugin will inherit, or returns an
// error where the platform has no memory files.
func newHostShared() (*hostShared, error) {
	f, err := createSharedFile()
	if err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	return &hostShared{region: sharedRegion{file: f}}, nil
}

// pluginShared opens the region the host handed this plugin, or returns
// nil (and why) when there is none or it cannot be used.
func pluginShared() (*sharedRegion, error) {
	v, ok := os.LookupEnv(SharedMemoryEnv)
	if !ok {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("shared memory: %s=%q is not an inherited file descriptor", SharedMemoryEnv, v)
	}
	if !sharedSupported {
		return nil, fmt.Errorf("shared memory: not supported on this platform")
	}
	closeOnExec(fd)
	f := os.NewFile(uintptr(fd), "shared batches")
	if _, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("shared memory: descriptor %d: %w", fd, err)
	}
	return &sharedRegion{file: f}, nil
}
