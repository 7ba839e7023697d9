//go:build !linux

package forward

// dieWithParent has no portable equivalent off Linux; the host's stop is
// what ends the plugin there.
func dieWithParent() {}
