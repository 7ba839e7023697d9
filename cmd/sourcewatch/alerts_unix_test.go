//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// writeCreds writes a .creds file (a user JWT, expiring at exp unless it
// is 0, and its seed) with the given mode, returning its path.
func writeCreds(t *testing.T, exp int64, mode os.FileMode) string {
	t.Helper()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := user.PublicKey()
	require.NoError(t, err)
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	claims := jwt.NewUserClaims(upub)
	claims.Expires = exp
	ujwt, err := claims.Encode(acct)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))
	require.NoError(t, os.Chmod(path, mode))
	return path
}

// alerts tail warns of a credentials file every user may read, naming
// the file, its mode and the fix, and goes on to use it.
func TestAlertsTailWarnsOfReadableCreds(t *testing.T) {
	path := writeCreds(t, 0, 0o644)
	_, stderr, err := runCmd(t, "", "alerts", "tail", "--creds", path, "--nats", "nats://127.0.0.1:1")
	require.ErrorContains(t, err, "no servers available")
	require.Contains(t, stderr, "--creds "+path+" is readable by every user (mode 0644), and it holds a secret: chmod 600 "+path)
	path = writeCreds(t, 0, 0o600)
	_, stderr, err = runCmd(t, "", "alerts", "tail", "--creds", path, "--nats", "nats://127.0.0.1:1")
	require.ErrorContains(t, err, "no servers available")
	require.NotContains(t, stderr, "is readable by")
}
