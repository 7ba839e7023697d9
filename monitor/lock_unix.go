//go:build unix

package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDataDir takes an exclusive lock on dir/LOCK, which the embedded
// server's store in dir needs: two daemons on one store corrupt it (one
// was seen to hang the other's shutdown). The lock is the kernel's
// (flock), so it goes with the process, however that ends. The returned
// function releases it.
func lockDataDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %q: %w%s", ErrDataDir, dir, err, dataDirAdvice)
	}
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: lock file: %w%s", ErrDataDir, dir, err, dataDirAdvice)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %q (%s)", ErrDataDirInUse, dir, describeHolder(holder))
		}
		return nil, fmt.Errorf("%w: data_dir lock %q: %w", ErrConfig, path, err)
	}
	// Who holds it, for the error another daemon will print.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

func describeHolder(lock []byte) string {
	if s := strings.TrimSpace(string(lock)); s != "" && len(s) < 64 {
		return "held by " + s + "; give each daemon its own data_dir"
	}
	return "give each daemon its own data_dir"
}
