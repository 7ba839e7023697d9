//go:build unix

package monitor

import (
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"sync"
	"syscall"
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
	case perm&0o040 != 0:
		st, isStat := fi.Sys().(*syscall.Stat_t)
		if !isStat {
			return "", 0, false
		}
		gid := int(st.Gid)
		if own := privateGID(); own >= 0 && gid == own {
			return "", 0, false
		}
		name := strconv.Itoa(gid)
		if g, err := user.LookupGroupId(name); err == nil {
			name = g.Name
		}
		return "its group " + name, perm, true
	}
	return "", 0, false
}

// privateGID is this process's effective group id when that group is
// the user's private group (named as the user), else -1: as
// forward.ReplaceableBy judges a plugin's group.
var privateGID = sync.OnceValue(func() int {
	u, uerr := user.Current()
	g, gerr := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if uerr != nil || gerr != nil || u.Username == "" || g.Name != u.Username {
		return -1
	}
	return os.Getegid()
})
