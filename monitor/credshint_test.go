package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// ExpiredCredsHint names an expired user JWT's expiry when the server
// refused the connection, and says nothing otherwise.
func TestExpiredCredsHint(t *testing.T) {
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	write := func(exp int64) string { return writeUserCreds(t, acct, exp) }
	now := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	refused := errors.New("nats: Authorization Violation")
	expired := write(now.Add(-26 * time.Hour).Unix())
	require.Equal(t, " (the user JWT in nats.creds "+expired+" expired at 2026-11-28T19:00:00Z, 26h0m0s ago: replace the file with new credentials from the account's issuer, e.g. nsc generate creds)",
		ExpiredCredsHint("nats.creds", expired, refused, now))
	require.Contains(t, ExpiredCredsHint("--creds", expired, errors.New("nats: user authentication expired"), now), "the user JWT in --creds ")
	require.Empty(t, ExpiredCredsHint("nats.creds", expired, errors.New("dial tcp: connection refused"), now), "not a refusal")
	require.Empty(t, ExpiredCredsHint("nats.creds", write(now.Add(time.Hour).Unix()), refused, now), "not yet expired")
	require.Empty(t, ExpiredCredsHint("nats.creds", write(0), refused, now), "no exp")
	require.Empty(t, ExpiredCredsHint("nats.creds", "", refused, now), "no creds file")
	require.Empty(t, ExpiredCredsHint("nats.creds", filepath.Join(t.TempDir(), "missing"), refused, now))
	junk := filepath.Join(t.TempDir(), "junk.creds")
	require.NoError(t, os.WriteFile(junk, []byte("-----BEGIN NATS USER JWT-----\nnot.a!jwt.at-all\n------END NATS USER JWT------\n"), 0o600))
	require.Empty(t, ExpiredCredsHint("nats.creds", junk, refused, now))
}
