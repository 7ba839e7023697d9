//go:build unix

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// alerts tail refused by a server for an expired user JWT says it
// expired, and when, where the server says only "Authorization
// Violation" (a fake server that refuses every connection so).
func TestAlertsTailNamesExpiredCreds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"fake\",\"version\":\"2.10.0\",\"auth_required\":true,\"nonce\":\"abc\",\"max_payload\":1048576}\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n') // CONNECT
				if strings.HasPrefix(line, "CONNECT") {
					fmt.Fprintf(c, "-ERR 'Authorization Violation'\r\n")
				}
			}()
		}
	}()
	expired := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	path := writeCreds(t, expired.Unix(), 0o600)
	_, _, err = runCmd(t, "", "alerts", "tail", "--creds", path, "--nats", "nats://"+ln.Addr().String())
	require.ErrorContains(t, err, "Authorization Violation (the user JWT in --creds "+path+" expired at "+expired.UTC().Format(time.RFC3339)+", 48h0m")
}
