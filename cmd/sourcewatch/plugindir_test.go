package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPluginDirBesideTheBinary: the one-shot commands look for plugins
// beside the sourcewatch binary when one is there (bin/sourcewatch run
// from another directory), else in ./bin (go run, a binary alone).
func TestPluginDirBesideTheBinary(t *testing.T) {
	withPlugin, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(withPlugin, "sourcewatch"), nil, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(withPlugin, "sourcewatch-forward-icmf"), nil, 0o755))
	alone := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(alone, "sourcewatch"), nil, 0o755))
	link := filepath.Join(t.TempDir(), "sourcewatch")
	require.NoError(t, os.Symlink(filepath.Join(withPlugin, "sourcewatch"), link))

	// A symlink with plugins of its own beside it, to a binary alone.
	farm := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(alone, "sourcewatch"), filepath.Join(farm, "sourcewatch")))
	require.NoError(t, os.WriteFile(filepath.Join(farm, "sourcewatch-forward-icmf"), nil, 0o755))
	// A stray file named like a plugin that is no program.
	stray := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(stray, "sourcewatch"), nil, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stray, "sourcewatch-forward-notes.txt"), nil, 0o644))

	exe := func(path string) func() (string, error) { return func() (string, error) { return path, nil } }
	for _, tc := range []struct {
		name string
		arg0 string
		exe  func() (string, error)
		want string
	}{
		{"plugins beside it", filepath.Join(withPlugin, "sourcewatch"), exe(filepath.Join(withPlugin, "sourcewatch")), withPlugin},
		{"a symlink to a binary with plugins beside it", link, exe(filepath.Join(withPlugin, "sourcewatch")), withPlugin},
		{"plugins beside the symlink run", filepath.Join(farm, "sourcewatch"), exe(filepath.Join(alone, "sourcewatch")), farm},
		{"found on PATH: the binary's own directory", "sourcewatch", exe(filepath.Join(withPlugin, "sourcewatch")), withPlugin},
		{"no plugin beside it", filepath.Join(alone, "sourcewatch"), exe(filepath.Join(alone, "sourcewatch")), "bin"},
		{"a stray file is no plugin", filepath.Join(stray, "sourcewatch"), exe(filepath.Join(stray, "sourcewatch")), "bin"},
		{"executable unknown", "sourcewatch", func() (string, error) { return "", errors.New("no /proc") }, "bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pluginDirBeside(tc.arg0, tc.exe))
		})
	}
}
