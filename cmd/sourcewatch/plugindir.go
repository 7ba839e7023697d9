package main

import (
	"os"
	"path/filepath"

	"github.com/sourcewatch/sourcewatch/forward"
)

// defaultPluginDir is the --plugin-dir of the one-shot commands when none
// is given: the directory of the running sourcewatch binary when a forward
// plugin is there, else bin under the working directory. make build puts
// the binary and its plugins side by side in bin/, so bin/sourcewatch (or
// an installed copy with its plugins) finds them from any working
// directory; go run's binary lives in a build cache directory with no
// plugins, so it keeps looking in ./bin.
func defaultPluginDir() string {
	return pluginDirBeside(os.Executable)
}

func pluginDirBeside(executable func() (string, error)) string {
	const fallback = "bin"
	exe, err := executable()
	if err != nil {
		return fallback
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Dir(exe)
	plugins, err := filepath.Glob(filepath.Join(dir, forward.BinaryPrefix+"*"))
	if err != nil || len(plugins) == 0 {
		return fallback
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, dir); err == nil && filepath.IsLocal(rel) {
			return rel // shorter in help and errors: "bin", not /home/.../bin
		}
	}
	return dir
}
