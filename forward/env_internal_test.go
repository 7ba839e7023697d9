package forward

import (
	"testing"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"
)

// A plugin gets the host's environment, without the daemon's NATS
// settings: they hold its credentials (a password, a URL with a user and
// password, where its creds file, nkey seed and TLS key are).
func TestPluginEnvLeavesOutNATSCredentials(t *testing.T) {
	host := []string{
		"HOME=/var/lib/sourcewatch",
		"OMP_NUM_THREADS=2",
		"SOURCEWATCH_NATS_PASSWORD=s3cret",
		"SOURCEWATCH_NATS_URL=nats://alice:s3cret@nats:4222",
		"SOURCEWATCH_NATS_CREDS=/etc/sourcewatch/sw.creds",
		"SOURCEWATCH_NATS_TLS_KEY=/etc/sourcewatch/key.pem",
		"SOURCEWATCH_LOG_LEVEL=debug",
		plugin.EnvUnixSocketDir + "=/tmp/inherited",
		SharedMemoryEnv + "=3",
	}
	require.Equal(t, []string{
		"HOME=/var/lib/sourcewatch",
		"OMP_NUM_THREADS=2",
		"SOURCEWATCH_LOG_LEVEL=debug",
		plugin.EnvUnixSocketDir + "=/tmp/own",
	}, pluginEnv(host, plugin.EnvUnixSocketDir+"=/tmp/own"))
}
