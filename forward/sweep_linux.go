//go:build linux

package forward

import (
	"bufio"
	"os"
	"strings"
)

// boundUnixSockets returns the paths of the unix sockets bound on this
// machine, from /proc/net/unix; a plugin that died leaves its socket file
// behind, but not its entry there.
func boundUnixSockets() (map[string]bool, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bound := make(map[string]bool)
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode [Path]
		fields := strings.Fields(sc.Text())
		if len(fields) >= 8 {
			bound[fields[7]] = true
		}
	}
	return bound, sc.Err()
}
