//go:build unix

package monitor

import (
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/sourcewatch/sourcewatch/forward"
)

// readableByOthers says who other than this process's user may read the
// file at path (every user, or its group unless that is this user's
// private group) and its permission bits; ok is false when nobody else
// may, or the file cannot be read.
func readableByOthers(path string) (who string, perm fs.FileMode, ok bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, false
	}
	perm = fi.Mode().Perm()
	switch {
	case perm&0o004 != 0:
		return "every user", perm, true
	case perm&0o040 != 0 && !forward.OwnPrivateGroup(fi):
		name := "?"
		if st, isStat := fi.Sys().(*syscall.Stat_t); isStat {
			name = strconv.Itoa(int(st.Gid))
			if g, err := user.LookupGroupId(name); err == nil {
				name = g.Name
			}
		}
		return "its group " + name, perm, true
	}
	return "", 0, false
}
