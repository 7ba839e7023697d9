//go:build !unix

package monitor

import "io/fs"

// readableByOthers says nothing off Unix, where permission bits do not
// say who may read a file.
func readableByOthers(string) (string, fs.FileMode, bool) { return "", 0, false }
