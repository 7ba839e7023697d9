//go:build !linux

package forward

import "os/exec"

// isolateProcess has no portable equivalent off Linux; go-plugin's cleanup
// on Close and on host exit remains.
func isolateProcess(*exec.Cmd) {}

// killProcessGroup kills the started plugin process only.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// execByFD: Launch executes the binary it hashed through /proc/self/fd
// (Linux only).
const execByFD = false
