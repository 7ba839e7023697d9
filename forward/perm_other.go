//go:build !unix

package forward

import "os"

func fileOwner(os.FileInfo) (int, bool) { return 0, false }

func fileGroup(os.FileInfo) (int, bool) { return 0, false }
