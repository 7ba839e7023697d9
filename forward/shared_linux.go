//go:build linux

package forward

import (
	"os"

	"golang.org/x/sys/unix"
)

const sharedSupported = true

// createSharedFile makes an anonymous memory file; close-on-exec, so only
// the plugin it is handed to (through exec.Cmd.ExtraFiles) inherits it.
func createSharedFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("sourcewatch-forward-batches", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "memfd:sourcewatch-forward-batches"), nil
}

func mapShared(f *os.File, size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func unmapShared(mem []byte) error { return unix.Munmap(mem) }

// closeOnExec keeps the region from leaking into processes the plugin
// itself starts: the descriptor arrives without the flag.
func closeOnExec(fd int) { unix.CloseOnExec(fd) }
