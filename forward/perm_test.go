//go:build unix

package forward_test

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
)

// A plugin others can write, or swap in a directory they can write, is
// named, as the daemon warns at each start and reload.
func TestReplaceableBy(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, 0o700))
	dir := filepath.Join(base, "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755)) // whatever the umask
	bin := filepath.Join(dir, forward.BinaryPrefix+"icmf")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Chmod(bin, 0o755))
	// t.TempDir's parents (/tmp and up) are not this test's to judge.
	only := func(path string) []string { return within(forward.ReplaceableBy(path), base) }
	require.Empty(t, only(bin))

	require.NoError(t, os.Chmod(bin, 0o775))
	groupWritable := []string{"plugin binary " + bin + " is writable by its group (mode 0775)"}
	if os.Geteuid() == 0 {
		// Another group's: named. (Others cannot give a file away.)
		require.NoError(t, os.Chown(bin, -1, 4242))
		require.Equal(t, groupWritable, only(bin))
		// This user's private group (root's root, as umask 002
		// distributions give each user), where there is one: not named.
		if g, err := user.LookupGroupId("0"); err == nil && g.Name == "root" {
			require.NoError(t, os.Chown(bin, -1, 0))
			require.Empty(t, only(bin))
		}
	} else if g, err := user.LookupGroupId(strconv.Itoa(os.Getegid())); err == nil {
		u, err := user.Current()
		require.NoError(t, err)
		if g.Name == u.Username {
			require.Empty(t, only(bin))
		} else {
			require.Equal(t, groupWritable, only(bin))
		}
	}
	require.NoError(t, os.Chmod(bin, 0o755))

	require.NoError(t, os.Chmod(dir, 0o777))
	require.Equal(t, []string{"plugin directory " + dir + " is writable by every user (mode 0777)"}, only(bin))
	// The sticky bit does not protect the directory holding the plugin: its
	// name is free for anyone to take while the plugin is not there.
	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky))
	require.Len(t, only(bin), 1)
	require.NoError(t, os.Chmod(dir, 0o755))

	require.NoError(t, os.Chmod(base, 0o777))
	require.Equal(t, []string{"directory " + base + " is writable by every user (mode 0777)"}, only(bin))
	require.NoError(t, os.Chmod(base, 0o777|os.ModeSticky))
	require.Empty(t, only(bin), "above the plugin's directory, the sticky bit keeps others from renaming it")
	require.NoError(t, os.Chmod(base, 0o700))

	// Through a symlink, the file it leads to is judged too.
	linkDir := filepath.Join(base, "links")
	require.NoError(t, os.Mkdir(linkDir, 0o755))
	require.NoError(t, os.Chmod(linkDir, 0o755))
	link := filepath.Join(linkDir, forward.BinaryPrefix+"icmf")
	require.NoError(t, os.Symlink(bin, link))
	require.Empty(t, only(link))
	require.NoError(t, os.Chmod(bin, 0o777))
	require.Equal(t, []string{
		"plugin " + link + " is a symlink to " + bin,
		"plugin binary " + bin + " is writable by every user (mode 0777)",
	}, only(link))
}

// within keeps the problems of paths within base.
func within(problems []string, base string) []string {
	var in []string
	for _, p := range problems {
		if strings.Contains(p, base) {
			in = append(in, p)
		}
	}
	return in
}
