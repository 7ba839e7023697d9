//go:build !linux

package forward

import "os/exec"

// setParentDeathSignal has no portable equivalent off Linux; go-plugin's
// cleanup on Close and on host exit remains.
func setParentDeathSignal(*exec.Cmd) {}
