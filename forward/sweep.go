package forward

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// socketDirPrefix names the per-plugin socket directories Launch makes in
// the temporary directory.
const socketDirPrefix = "sourcewatch-plugin-"

// staleSocketDirAge is how old a socket directory with no bound socket must
// be to be swept: a plugin that is starting has not bound its socket yet.
const staleSocketDirAge = time.Minute

var sweepOnce sync.Once

// sweepStaleSocketDirs removes, from dir, the socket directories of plugins
// whose host was killed before it could remove them (SIGKILL, the OOM
// killer): the kernel kills the plugin with its host, and nobody is left to
// clean up. A directory is stale when it is older than staleSocketDirAge
// and none of its entries is a bound socket; one the user may not remove is
// left alone. It returns how many it removed.
func sweepStaleSocketDirs(dir string, now time.Time) (int, error) {
	bound, err := boundUnixSockets()
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), socketDirPrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleSocketDirAge {
			continue
		}
		inside, err := os.ReadDir(path)
		if err != nil {
			continue
		}
		live := false
		for _, s := range inside {
			if bound[filepath.Join(path, s.Name())] {
				live = true
				break
			}
		}
		if !live && os.RemoveAll(path) == nil {
			removed++
		}
	}
	return removed, nil
}
