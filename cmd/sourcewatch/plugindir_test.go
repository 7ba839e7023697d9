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

	exe := func(path string) func() (string, error) { return func() (string, error) { return path, nil } }
	for _, tc := range []struct {
		name string
		exe  func() (string, error)
		want string
	}{
		{"plugins beside it", exe(filepath.Join(withPlugin, "sourcewatch")), withPlugin},
		{"a symlink to a binary with plugins beside it", exe(link), withPlugin},
		{"no plugin beside it", exe(filepath.Join(alone, "sourcewatch")), "bin"},
		{"executable unknown", func() (string, error) { return "", errors.New("no /proc") }, "bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pluginDirBeside(tc.exe))
		})
	}
}
