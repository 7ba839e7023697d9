package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// pluginDirHelp ends each --plugin-dir's help: the default printed is
// resolved from where this binary runs, relative to the working directory
// when inside it, which reads like a fixed "bin".
const pluginDirHelp = " (by default the directory this sourcewatch binary is in when it holds a plugin, else ./bin)"

// daemonPluginDir is cfg's plugin_dir, or where no config sets one, the
// one-shot commands' default: a config copied out of the repository then
// still finds the plugins beside the binary that runs it.
func daemonPluginDir(cfg monitor.Config) string {
	if cfg.PluginDir != "" {
		return cfg.PluginDir
	}
	return defaultPluginDir()
}

// defaultPluginDir is the --plugin-dir of the one-shot commands when none
// is given: the directory the sourcewatch binary was started from (a
// symlink's own directory first, then the binary's), when a forward plugin
// is there, else bin under the working directory. make build puts the
// binary and its plugins side by side in bin/, so bin/sourcewatch (or an
// installed copy with its plugins) finds them from any working directory;
// go run's binary lives in a build cache directory with no plugins, so it
// keeps looking in ./bin.
func defaultPluginDir() string {
	return pluginDirBeside(os.Args[0], os.Executable)
}

func pluginDirBeside(arg0 string, executable func() (string, error)) string {
	const fallback = "bin"
	var candidates []string
	if strings.ContainsRune(arg0, filepath.Separator) {
		candidates = append(candidates, filepath.Dir(arg0)) // where the user ran it from
	}
	if exe, err := executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		candidates = append(candidates, filepath.Dir(exe))
	}
	for _, dir := range candidates {
		if !holdsPlugin(dir) {
			continue
		}
		if wd, err := os.Getwd(); err == nil && filepath.IsAbs(dir) {
			if rel, err := filepath.Rel(wd, dir); err == nil && filepath.IsLocal(rel) {
				return rel // shorter in help and errors: "bin", not /home/.../bin
			}
		}
		return dir
	}
	return fallback
}

// holdsPlugin reports whether dir holds an executable file named like a
// forward plugin (a stray sourcewatch-forward-notes.txt does not count).
func holdsPlugin(dir string) bool {
	matches, err := filepath.Glob(filepath.Join(dir, forward.BinaryPrefix+"*"))
	if err != nil {
		return false
	}
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}

// withPluginCheckHint points a plugin's failure (an output of the wrong
// shape or NaN, a crash, a panic, a call that never answered) at plugin check,
// which runs each call apart and says which one fails and how.
func withPluginCheckHint(err error, name, dir string) error {
	if err == nil || strings.Contains(err.Error(), "plugin check") {
		return err
	}
	if !errors.Is(err, forward.ErrBadOutput) && !errors.Is(err, forward.ErrCallTimeout) && !errors.Is(err, forward.ErrPluginExited) && !errors.Is(err, forward.ErrPluginPanic) {
		return err
	}
	return fmt.Errorf("%w (sourcewatch plugin check %s --plugin-dir %s checks the plugin call by call)", err, name, dir)
}
