//go:build !linux

package forward

import "errors"

// boundUnixSockets is unknown off Linux, so stale socket directories are
// not swept there.
func boundUnixSockets() (map[string]bool, error) { return nil, errors.ErrUnsupported }
