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

// CredsValidityHint names an expired user JWT's expiry, or a JWT's
// validity that has not begun, when the server refused the connection,
// and says nothing otherwise.
func TestCredsValidityHint(t *testing.T) {
	acct, err := nkeys.CreateAccount()
	require.NoError(t, err)
	write := func(exp int64) string { return writeUserCreds(t, acct, exp) }
	now := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	refused := errors.New("nats: Authorization Violation")
	expired := write(now.Add(-26 * time.Hour).Unix())
	require.Equal(t, " (the user JWT in nats.creds "+expired+" expired at 2026-11-28T19:00:00Z, 26h0m0s ago: replace the file with new credentials from the account's issuer, e.g. nsc generate creds)",
		CredsValidityHint("nats.creds", expired, refused, now))
	require.Contains(t, CredsValidityHint("--creds", expired, errors.New("nats: user authentication expired"), now), "the user JWT in --creds ")
	require.Empty(t, CredsValidityHint("nats.creds", expired, errors.New("dial tcp: connection refused"), now), "not a refusal")
	require.Empty(t, CredsValidityHint("nats.creds", write(now.Add(time.Hour).Unix()), refused, now), "not yet expired")
	require.Empty(t, CredsValidityHint("nats.creds", write(0), refused, now), "no exp")
	early := writeUserCreds(t, acct, 0, now.Add(90*time.Minute).Unix())
	require.Equal(t, " (the user JWT in nats.creds "+early+" is not valid before 2026-11-29T22:30:00Z, 1h30m0s from now: the issuer dated it ahead, or this machine's clock is behind)",
		CredsValidityHint("nats.creds", early, refused, now))
	require.Empty(t, CredsValidityHint("nats.creds", writeUserCreds(t, acct, 0, now.Add(-time.Minute).Unix()), refused, now), "valid since a minute")
	require.Contains(t, CredsValidityHint("nats.creds", writeUserCreds(t, acct, now.Add(-time.Hour).Unix(), now.Add(-2*time.Hour).Unix()), refused, now),
		"expired at 2026-11-29T20:00:00Z", "valid once, expired since")
	require.Empty(t, CredsValidityHint("nats.creds", "", refused, now), "no creds file")
	require.Empty(t, CredsValidityHint("nats.creds", filepath.Join(t.TempDir(), "missing"), refused, now))
	junk := filepath.Join(t.TempDir(), "junk.creds")
	require.NoError(t, os.WriteFile(junk, []byte("-----BEGIN NATS USER JWT-----\nnot.a!jwt.at-all\n------END NATS USER JWT------\n"), 0o600))
	require.Empty(t, CredsValidityHint("nats.creds", junk, refused, now))
}
