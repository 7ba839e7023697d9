//go:build linux

package forward

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// dieWithParent asks the kernel to SIGKILL this plugin when the process
// that started it dies. The host sets the same signal on the process it
// starts (isolateProcess), which is the plugin itself unless a wrapper
// script started it without exec; then the signal reaches only the script,
// and this one, set by the plugin on itself, carries it on down the chain:
// host killed, script killed, plugin killed. A parent gone before the call
// (reparented already) is a host gone, so the plugin exits at once.
//
// The kernel ties the signal to the parent's forking thread: a wrapper
// script's is its only thread, and a Go host's threads live as long as it
// does (see isolateProcess).
func dieWithParent() {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return // not fatal: the host's own stop still reaches the plugin
	}
	if os.Getppid() != parent {
		os.Exit(1)
	}
}
