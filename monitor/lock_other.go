//go:build !unix

package monitor

// lockDataDir does nothing where flock is not available: there, running
// two daemons on one data_dir is the operator's to avoid.
func lockDataDir(string) (func(), error) { return func() {}, nil }
