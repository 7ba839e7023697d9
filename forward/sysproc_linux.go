//go:build linux

package forward

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to SIGKILL the plugin when the host
// dies, even by SIGKILL, which go-plugin's own cleanup cannot cover. The
// kernel ties the signal to the OS thread that forked, so Launch must not
// run on a goroutine locked to a thread that later exits (runtime.LockOSThread
// without Unlock); ordinary goroutines are fine, as the Go runtime does not
// retire their threads.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
