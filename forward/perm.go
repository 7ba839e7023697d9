package forward

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
)

// ReplaceableBy says how users other than this process's user and root
// could replace or change the plugin binary at path: the binary, or a
// directory above it, writable by a group (other than this user's own
// private group, which umask 002 systems give every file) or by every user (a directory
// with the sticky bit, as /tmp, only when it holds the binary itself) or
// owned by another user; through a symlink, the file it leads to. Launch
// refuses another build than the one pinned, but a binary that others
// can swap at will is theirs. Nil when there is nothing to say or path
// cannot be read.
func ReplaceableBy(path string) []string {
	var problems []string
	seen := map[string]bool{}
	check := func(p, what string, ancestor bool) {
		if seen[p] {
			return
		}
		seen[p] = true
		fi, err := os.Stat(p)
		if err != nil {
			return
		}
		perm := fi.Mode().Perm()
		// Where the sticky bit is set, others cannot rename or remove
		// what they do not own: it protects a directory's entries.
		sticky := ancestor && fi.Mode()&os.ModeSticky != 0
		switch {
		case sticky:
		case perm&0o002 != 0:
			problems = append(problems, fmt.Sprintf("%s %s is writable by every user (mode %04o)", what, p, perm))
		case perm&0o020 != 0 && !OwnPrivateGroup(fi):
			problems = append(problems, fmt.Sprintf("%s %s is writable by its group (mode %04o)", what, p, perm))
		}
		if uid, ok := fileOwner(fi); ok && uid != 0 && uid != os.Geteuid() {
			problems = append(problems, fmt.Sprintf("%s %s is owned by uid %d, neither this process's user (uid %d) nor root", what, p, uid, os.Geteuid()))
		}
	}
	// the directory holding a file, and every one above it
	dirs := func(file, what string) {
		dir := filepath.Dir(file)
		check(dir, what, false)
		for up := filepath.Dir(dir); up != dir; dir, up = up, filepath.Dir(up) {
			check(up, "directory", true)
		}
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	link := ""
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil
		}
		dirs(path, "plugin directory")
		link, path = path, target
	}
	check(path, "plugin binary", false)
	dirs(path, "plugin directory")
	if link != "" && problems != nil {
		problems = append([]string{fmt.Sprintf("plugin %s is a symlink to %s", link, path)}, problems...)
	}
	return problems
}

// OwnPrivateGroup reports whether fi's group is this process's user
// private group: its effective group, named as its user, as distributions
// with umask 002 make for each user, so a group-writable file there is
// writable by that user alone (and a group-readable one readable by that
// user alone: the daemon's check of credential files uses it too).
func OwnPrivateGroup(fi os.FileInfo) bool {
	gid, ok := fileGroup(fi)
	if !ok {
		return false
	}
	own := privateGID()
	return own >= 0 && gid == own
}

// privateGID is this process's effective group id when that group is the
// user's private group (privateGroup), else -1.
var privateGID = sync.OnceValue(func() int {
	u, uerr := user.Current()
	g, gerr := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if uerr != nil || gerr != nil || !privateGroup(u.Username, g.Name) {
		return -1
	}
	return os.Getegid()
})

// privateGroup reports whether a group named group is the private group
// of the user named username (the same name).
func privateGroup(username, group string) bool {
	return username != "" && group == username
}
