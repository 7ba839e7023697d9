package forward

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// handshakeError's rewording of go-plugin's handshake errors, by case;
// the expected texts are the package's documented ones.
func TestHandshakeError(t *testing.T) {
	const prefix = "Unrecognized remote plugin message: "
	for _, tc := range []struct {
		name, msg, want string
	}{
		{"nothing on stdout", prefix + "\nFailed to read any lines from plugin's stdout",
			exitedBeforeHandshake + ", printing nothing to stdout"},
		{"a line before the handshake", prefix + "hello\nFailed to read any lines from plugin's stdout",
			`the plugin wrote "hello" to stdout before its handshake line (in Go, before forward.Serve), where the host reads the handshake: write it to stderr`},
		{"an empty line, then something else", prefix + "\nThis usually means...",
			`the plugin wrote "" to stdout before its handshake line (in Go, before forward.Serve), where the host reads the handshake: write it to stderr`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.EqualError(t, handshakeError(errors.New(tc.msg)), tc.want)
		})
	}
	// another error keeps its text, with the TLS hint where one applies
	plain := errors.New("connection refused")
	require.Equal(t, plain, handshakeError(plain))
	const b64 = "illegal base64 data at input byte 682"
	got := handshakeError(errors.New(b64))
	require.ErrorContains(t, got, b64)
	require.Equal(t, b64+tlsHint(b64), got.Error())
	require.NotEmpty(t, tlsHint(b64))
}

// An empty plugin dir says it holds no plugin; a binary named by the
// prefix alone gives no name to pass.
func TestPluginPathEdges(t *testing.T) {
	dir := t.TempDir()
	_, err := PluginPath(dir, "icmf")
	require.ErrorContains(t, err, "(the plugin dir holds no plugin;")
	require.NoError(t, os.WriteFile(filepath.Join(dir, BinaryPrefix), nil, 0o755))
	require.Nil(t, PluginsIn(dir), "the prefix alone names no plugin")
	err = CheckPluginName(filepath.Join(dir, BinaryPrefix))
	require.ErrorContains(t, err, "want a plain name")
	require.NotContains(t, err.Error(), "as the name")
	err = CheckPluginName(filepath.Join(dir, "a-long-name-with-no-prefix-at-all"))
	require.ErrorContains(t, err, "want a plain name")
	require.NotContains(t, err.Error(), "as the name", "a hint only for a binary named with the prefix")
}

// The checksum helpers pass on what they cannot open or read (a directory
// opens, but does not read).
func TestChecksumHelpersFail(t *testing.T) {
	dir := t.TempDir()
	_, err := FileSHA256(dir)
	require.ErrorContains(t, err, "checksum "+dir)
	_, err = FileSHA256(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	f, err := openVerified(filepath.Join(dir, "missing"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Nil(t, f)
	_, err = openVerified(dir, []byte{1})
	require.ErrorContains(t, err, "checksum "+dir)

	// the open file is checked: its sum, not another's
	// (printf abc | sha256sum)
	file := filepath.Join(dir, "bin")
	require.NoError(t, os.WriteFile(file, []byte("abc"), 0o755))
	sum, err := hex.DecodeString("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
	require.NoError(t, err)
	got, err := FileSHA256(file)
	require.NoError(t, err)
	require.Equal(t, sum, got)
	f, err = openVerified(file, sum)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	other := append([]byte(nil), sum...)
	other[0] ^= 1
	f, err = openVerified(file, other)
	require.ErrorIs(t, err, ErrChecksum)
	require.Nil(t, f)

	// CheckBinary, the same check before a launch
	require.NoError(t, CheckBinary(file, sum))
	require.NoError(t, CheckBinary(file, nil))
	require.ErrorIs(t, CheckBinary(file, other), ErrChecksum)
	require.NoError(t, os.Chmod(file, 0o644))
	require.ErrorContains(t, CheckBinary(file, sum), "is not an executable file")
}
