package forward

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A socket directory is swept only when it is old and nothing is bound in
// it; a live plugin's, a starting plugin's and other directories stay.
func TestSweepStaleSocketDirs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bound sockets are read from Linux's /proc/net/unix")
	}
	tmp := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * staleSocketDirAge)
	mk := func(name string, socket string, mtime time.Time) string {
		dir := filepath.Join(tmp, name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		if socket != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, socket), nil, 0o600))
		}
		require.NoError(t, os.Chtimes(dir, mtime, mtime))
		return dir
	}
	stale := mk(socketDirPrefix+"1", "plugin1", old) // its plugin died: the file is no socket
	empty := mk(socketDirPrefix+"2", "", old)
	starting := mk(socketDirPrefix+"3", "", now)
	other := mk("something-else", "plugin1", old)

	live := mk(socketDirPrefix+"4", "", now)
	l, err := net.Listen("unix", filepath.Join(live, "plugin4"))
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, os.Chtimes(live, old, old))

	n, err := sweepStaleSocketDirs(tmp, now)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, gone := range []string{stale, empty} {
		require.NoDirExists(t, gone)
	}
	for _, kept := range []string{starting, other, live} {
		require.DirExists(t, kept)
	}
}
