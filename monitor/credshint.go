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

// CredsValidityHint is what a refused connection means when the user
// JWT of the creds file at path (named key in the config, or a flag)
// expired before now, or is not valid until after now: the server says
// only "Authorization Violation". Empty when err is no such refusal, or
// the JWT is valid at now by its "exp" and "nbf", or the file does not
// read as one. The JWT's signature is not checked: the server did that;
// its payload is only read for the two times.
func CredsValidityHint(key, path string, err error, now time.Time) string {
	if path == "" || err == nil {
		return ""
	}
	if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "authorization violation") && !strings.Contains(msg, "authentication expired") {
		return ""
	}
	notBefore, expires, ok := credsValidity(path)
	switch {
	case !ok:
		return ""
	case !expires.IsZero() && !expires.After(now):
		return fmt.Sprintf(" (the user JWT in %s %s expired at %s, %s ago: replace the file with new credentials from the account's issuer, e.g. nsc generate creds)",
			key, path, expires.UTC().Format(time.RFC3339), now.Sub(expires).Round(time.Second))
	case notBefore.After(now):
		return fmt.Sprintf(" (the user JWT in %s %s is not valid before %s, %s from now: the issuer dated it ahead, or this machine's clock is behind)",
			key, path, notBefore.UTC().Format(time.RFC3339), notBefore.Sub(now).Round(time.Second))
	}
	return ""
}

// credsValidity reads the "nbf" and "exp" claims of the user JWT in the
// creds file at path (its first -----BEGIN ... JWT----- block): a JWT is
// three base64url parts, the second a JSON object of claims, the times in
// Unix seconds. A claim that is absent is the zero time; ok is false when
// the file holds no JWT to read.
func credsValidity(path string) (notBefore, expires time.Time, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	defer clear(data) // it holds the seed
	token, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	var claims struct {
		Nbf int64 `json:"nbf"`
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return time.Time{}, time.Time{}, false
	}
	if claims.Nbf > 0 {
		notBefore = time.Unix(claims.Nbf, 0)
	}
	if claims.Exp > 0 {
		expires = time.Unix(claims.Exp, 0)
	}
	return notBefore, expires, true
}
