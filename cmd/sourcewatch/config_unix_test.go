//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A config path that is not a regular file is refused at once, where
// /dev/zero or a FIFO would be read forever; a file whose extension viper
// does not know is read as YAML.
func TestConfigMustBeARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, want := range map[string]string{
		t.TempDir(): "a directory, not a config file",
		"/dev/zero": "a device, not a config file",
		fifo:        "a named pipe, not a config file",
	} {
		_, _, err := runCmd(t, "", "serve", "--config", path)
		require.ErrorContains(t, err, want)
	}
	conf := filepath.Join(t.TempDir(), "sourcewatch.conf")
	require.NoError(t, os.WriteFile(conf, []byte("wrkers: 3\n"), 0o644))
	_, _, err := runCmd(t, "", "serve", "--config", conf)
	require.ErrorContains(t, err, `unknown key "wrkers"`, "read as YAML")

	// A file that does not parse is named once, with the parser's words
	// (viper's "While parsing config" said it twice over).
	require.NoError(t, os.WriteFile(conf, []byte("nats:\n  url: [unclosed\n"), 0o644))
	_, _, err = runCmd(t, "", "serve", "--config", conf)
	require.ErrorContains(t, err, `parsing config "`+conf+`": yaml: `)
	require.NotContains(t, err.Error(), "While parsing")

	// A password starting with * left unquoted is a YAML alias: the
	// parser's error quoted it ("unknown anchor 'S3cret' referenced").
	require.NoError(t, os.WriteFile(conf, []byte("nats:\n  url: nats://127.0.0.1:1\n  user: sw\n  password: *S3cret\n"), 0o600))
	_, _, err = runCmd(t, "", "serve", "--config", conf)
	require.ErrorContains(t, err, "an unquoted value starts with * (a YAML alias)")
	require.NotContains(t, err.Error(), "S3cret")
}
