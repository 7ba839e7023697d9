package monitor

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// ExpiredCredsHint is what a refused connection means when the user JWT
// of the creds file at path (named key in the config, or a flag) expired
// before now: the server says only "Authorization Violation". Empty when
// err is no such refusal, or the JWT has no "exp" in the past, or the
// file does not read as one. The JWT's signature is not checked: the
// server did that; its payload is only read for "exp".
func ExpiredCredsHint(key, path string, err error, now time.Time) string {
	if path == "" || err == nil {
		return ""
	}
	if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "authorization violation") && !strings.Contains(msg, "authentication expired") {
		return ""
	}
	exp, ok := credsExpiry(path)
	if !ok || exp.After(now) {
		return ""
	}
	return fmt.Sprintf(" (the user JWT in %s %s expired at %s, %s ago: replace the file with new credentials from the account's issuer, e.g. nsc generate creds)",
		key, path, exp.UTC().Format(time.RFC3339), now.Sub(exp).Round(time.Second))
}

// credsExpiry reads the "exp" claim of the user JWT in the creds file at
// path (its first -----BEGIN ... JWT----- block): a JWT is three
// base64url parts, the second a JSON object of claims, "exp" in Unix
// seconds. ok is false without one.
func credsExpiry(path string) (time.Time, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	defer clear(data) // it holds the seed
	token, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return time.Time{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}
