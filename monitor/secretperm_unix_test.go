//go:build unix

package monitor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/forward"
)

// A credentials file other users may read is warned of, naming the key,
// the file, its mode and the fix, as ssh does of a private key; it is
// not refused (a container may mount it 0644). 0600, a file in this
// user's own private group, and one that does not open say nothing.
func TestWarnReadableSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	warned := func(mode os.FileMode) []observer.LoggedEntry {
		t.Helper()
		require.NoError(t, os.Chmod(path, mode))
		core, logs := observer.New(zapcore.WarnLevel)
		WarnReadableSecrets(zap.New(core), SecretFile{"nats.creds", path}, SecretFile{"nats.nkey", ""},
			SecretFile{"nats.tls.key", filepath.Join(t.TempDir(), "missing.key")})
		return logs.All()
	}
	got := warned(0o644)
	require.Len(t, got, 1)
	require.Equal(t, "nats.creds "+path+" is readable by every user (mode 0644), and it holds a secret: chmod 600 "+path+" (or 0640 with this user's own group)", got[0].Message)
	require.Equal(t, "0644", got[0].ContextMap()["mode"])
	require.Equal(t, path, got[0].ContextMap()["file"])
	require.Len(t, warned(0o604), 1)
	require.Empty(t, warned(0o600))
	require.Empty(t, warned(0o400))
	// Group-readable: said unless the group is this user's own private
	// group (root's "root" here, or the systemd unit's sourcewatch).
	require.NoError(t, os.Chown(path, -1, os.Getegid()))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if forward.OwnPrivateGroup(fi) {
		require.Empty(t, warned(0o640), "this user's own group")
	}
	if os.Geteuid() == 0 {
		// Root can give the file a group that is not its own.
		other := 4242
		require.NotEqual(t, other, os.Getegid())
		require.NoError(t, os.Chown(path, -1, other))
		got = warned(0o640)
		require.Len(t, got, 1)
		require.Contains(t, got[0].Message, "nats.creds "+path+" is readable by its group ")
		require.Contains(t, got[0].Message, "(mode 0640)")
	}
}

// The daemon warns of a readable credentials file when it connects at
// start, before the server is even reached.
func TestConnectWarnsOfReadableCreds(t *testing.T) {
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	path := writeUserCreds(t, acct, 0)
	require.NoError(t, os.Chmod(path, 0o644))

	cfg := testConfig(t, "p")
	cfg.NATS.URL, cfg.NATS.Creds = "nats://127.0.0.1:1", path
	core, logs := observer.New(zapcore.WarnLevel)
	nc, err := connect(cfg, nil, zap.New(core), func() {}, func(error) {}, func(error) {})
	require.NoError(t, err, "a daemon started before its server waits for it")
	nc.Close()
	got := logs.FilterFieldKey("mode").All()
	require.Len(t, got, 1)
	require.Contains(t, got[0].Message, "nats.creds "+path+" is readable by every user (mode 0644)")
}
