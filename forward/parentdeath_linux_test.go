//go:build linux

package forward_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

// The kernel's parent-death signal (Pdeathsig) is Linux's; elsewhere a
// plugin outlives a host killed outright, as the README says.

// startOrphanHost starts this test binary as a host (orphanHost) that
// launches the plugin at path, and returns it with the pid of the process
// it launched.
func startOrphanHost(t *testing.T, path string) (*exec.Cmd, int) {
	t.Helper()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), orphanEnv+"="+path)
	out, err := host.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "host said %q", line)
	return host, pid
}

// TestPluginDiesWithHost SIGKILLs a host process, which gets no chance to
// clean up, and checks the kernel takes its plugin down too (Pdeathsig).
func TestPluginDiesWithHost(t *testing.T) {
	t.Parallel()
	host, pid := startOrphanHost(t, forwardtest.Build(t, "icmf"))
	require.True(t, alive(pid))
	require.NoError(t, host.Process.Kill())
	_ = host.Wait()
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond,
		"plugin %d outlived its host", pid)
}

// A plugin started by a wrapper script that does not exec it dies with a
// host killed outright too: the kernel kills the script (the host's
// Pdeathsig), and the plugin, child of the script, by the signal Serve set on
// itself. Before, it was left running, reparented to init.
func TestWrappedPluginDiesWithHost(t *testing.T) {
	t.Parallel()
	path, pidFile := wrapper(t, forwardtest.Build(t, "icmf"))
	host, script := startOrphanHost(t, path)
	child := readPid(t, pidFile)
	require.NotEqual(t, script, child)
	require.True(t, alive(child))
	require.NoError(t, host.Process.Kill())
	_ = host.Wait()
	require.Eventually(t, func() bool { return !alive(script) && !alive(child) }, 10*time.Second, 20*time.Millisecond,
		"script %d or its plugin %d outlived the host", script, child)
}
