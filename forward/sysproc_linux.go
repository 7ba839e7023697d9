//go:build linux

package forward

import (
	"os/exec"
	"syscall"
)

// isolateProcess starts the plugin in a process group of its own and asks
// the kernel to SIGKILL it when the host dies, even by SIGKILL, which
// go-plugin's own cleanup cannot cover. The kernel ties the signal to the OS
// thread that forked, so Launch must not run on a goroutine locked to a
// thread that later exits (runtime.LockOSThread without Unlock); ordinary
// goroutines are fine, as the Go runtime does not retire their threads.
//
// The group is for plugins started by a wrapper script that does not exec
// the binary: the plugin is then the script's child, holds the pipes
// go-plugin reads, and would outlive a kill of the script alone, with the
// host waiting on those pipes until it exits. killProcessGroup takes the
// whole group down. Pdeathsig reaches the script only; a plugin built on
// Serve sets it on itself too (dieWithParent), so it follows the script down
// when the host is killed outright. forward/README.md asks authors to exec.
func isolateProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// killProcessGroup SIGKILLs every process in the group of the started cmd.
// cmd.Process must not be written concurrently: call it only after the
// start has returned.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// execByFD: Launch executes the binary it hashed through /proc/self/fd.
const execByFD = true
