package localize

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/forward"
)

// A graph config's forward_params override the bundle's recorded params
// key by key: the state was fitted with the others, and an empty map (the
// shipped config's default) changes nothing.
func TestMergeParams(t *testing.T) {
	recorded := map[string]string{"steps": "5", "p": "0.2"}
	for _, tc := range []struct {
		name     string
		override map[string]string
		want     map[string]string
	}{
		{"none", nil, recorded},
		{"empty", map[string]string{}, recorded},
		{"one key", map[string]string{"p": "0.3"}, map[string]string{"steps": "5", "p": "0.3"}},
		{"a new key", map[string]string{"hops": "2"}, map[string]string{"steps": "5", "p": "0.2", "hops": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, mergeParams(recorded, tc.override))
			require.Equal(t, map[string]string{"steps": "5", "p": "0.2"}, recorded)
		})
	}
	require.Equal(t, map[string]string{"p": "0.3"}, mergeParams(nil, map[string]string{"p": "0.3"}))
}

// CheckForward refuses what LaunchForward would, each with what to do:
// a rebuilt plugin, a pin the plugin dir does not hold, a renamed plugin
// with no pin, a missing one.
func TestCheckForwardSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, forward.BinaryPrefix+name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o755))
		sum, err := forward.FileSHA256(path)
		require.NoError(t, err)
		return hex.EncodeToString(sum)
	}
	trained := write("icmf", "#!/bin/sh\n# the build the bundle was trained with\n")
	m := &Manifest{ID: "swb-1", Forward: ForwardRef{Name: "icmf", Version: "1.0.0", SHA256: trained}}
	require.NoError(t, CheckForward(m, LaunchOptions{PluginDir: dir}))

	write("icmf", "#!/bin/sh\n# rebuilt\n")
	err := CheckForward(m, LaunchOptions{PluginDir: dir})
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, "bundle swb-1 was trained with another build of icmf 1.0.0: point plugin_dir")

	err = CheckForward(m, LaunchOptions{PluginDir: dir, Checksum: trained})
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, "pins a build that "+dir+" does not hold: check the pin against the build you mean to run")

	write("icmf2", "#!/bin/sh\n# a renamed copy\n")
	err = CheckForward(m, LaunchOptions{PluginDir: dir, Forward: "icmf2"})
	require.ErrorIs(t, err, ErrUnverified)
	require.ErrorContains(t, err, "records the SHA-256 of icmf, not of "+filepath.Join(dir, forward.BinaryPrefix+"icmf2")+" (the forward override): pin that build's SHA-256")

	err = CheckForward(m, LaunchOptions{PluginDir: t.TempDir()})
	require.ErrorContains(t, err, "for a bundle trained with an earlier build, copy that build here")
}

// A plugin that other users can replace is named in a warning at each
// launch (a daemon's start and reload, localize), the check it fails said.
func TestLaunchForwardWarnsOfAPluginOthersCanReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plugins")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o777))
	path := filepath.Join(dir, forward.BinaryPrefix+"icmf")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755))
	sum, err := forward.FileSHA256(path)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.WarnLevel)
	b := &Bundle{Manifest: Manifest{ID: "swb-1", Forward: ForwardRef{Name: "icmf", SHA256: hex.EncodeToString(sum)}}}
	_, err = LaunchForward(t.Context(), b, LaunchOptions{PluginDir: dir, Logger: zap.New(core)})
	require.Error(t, err, "the script is no plugin")
	warned := logs.FilterMessageSnippet("can be replaced by users other than this one").All()
	require.Len(t, warned, 1)
	require.Equal(t, path, warned[0].ContextMap()["plugin"])
	require.Contains(t, warned[0].ContextMap()["problems"], "plugin directory "+dir+" is writable by every user (mode 0777)")
}

// Unverified is what resolvePlugin decides for a launch: true exactly
// where the plugin runs with no SHA-256 to check, so what a daemon reports
// as unverified cannot drift from what it launched.
func TestUnverifiedIsTheLaunchsDecision(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"icmf", "icmf2"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, forward.BinaryPrefix+name), []byte("#!/bin/sh\n"), 0o755))
	}
	const sum = "00ff"
	for _, tc := range []struct {
		name       string
		recorded   string
		o          LaunchOptions
		unverified bool
		err        error
	}{
		{"recorded", sum, LaunchOptions{}, false, nil},
		{"recorded, allow_unverified", sum, LaunchOptions{AllowUnverified: true}, false, nil},
		{"none recorded", "", LaunchOptions{}, false, ErrUnverified},
		{"none recorded, allow_unverified", "", LaunchOptions{AllowUnverified: true}, true, nil},
		{"none recorded, pinned", "", LaunchOptions{Checksum: sum, AllowUnverified: true}, false, nil},
		{"the bundle's plugin named", sum, LaunchOptions{Forward: "icmf", AllowUnverified: true}, false, nil},
		{"an override, allow_unverified", sum, LaunchOptions{Forward: "icmf2", AllowUnverified: true}, true, nil},
		{"an override, pinned", sum, LaunchOptions{Forward: "icmf2", Checksum: sum, AllowUnverified: true}, false, nil},
		{"an override", sum, LaunchOptions{Forward: "icmf2"}, false, ErrUnverified},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manifest{ID: "swb-1", Forward: ForwardRef{Name: "icmf", SHA256: tc.recorded}}
			tc.o.PluginDir = dir
			require.Equal(t, tc.unverified, tc.o.Unverified(m))
			_, want, err := resolvePlugin(m, tc.o)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.unverified, want == nil, "the launch checks a checksum unless Unverified")
		})
	}
}
