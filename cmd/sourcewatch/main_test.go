package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// TestMain removes the plugin binaries the tests build.
func TestMain(m *testing.M) { forwardtest.Main(m) }

// A top-level key that exists only as a flag and is never read from the
// file (--http-addr's http_addr, --config, --help) is an error naming the
// key and the config key meant; flags read from the file too (log_level,
// log_format) stay accepted. Every config has workers: 0, so a file that
// passes the key check stops at validation before the daemon starts.
func TestServeConfigRefusesFlagOnlyKeys(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"http_addr: 127.0.0.1:17077\n", "http_addr: not a config key; did you mean http.addr?"},
		{"nats_url: nats://127.0.0.1:4222\n", "nats_url: not a config key; did you mean nats.url?"},
		{"nats-url: nats://127.0.0.1:4222\n", "nats-url: not a config key; did you mean nats.url?"},
		{"help: true\n", "help: not a config key; --help is a command-line flag only"},
		{"config: other.yaml\n", "config: not a config key; --config names the file itself"},
		{"data-dir: elsewhere\n", "data-dir: not a config key; did you mean data_dir?"},
		{"data-dir:\n", "data-dir: not a config key; did you mean data_dir?"},
		{"wrkers:\n", `unknown key "wrkers"`},
		{"log_level: warn\nlog_format: json\n", "workers: must be > 0"},
		{"plugin_dir: bin\nlog_level: warn\n", "workers: must be > 0"},
	} {
		for _, cmdName := range []string{"serve", "demo"} {
			t.Run(cmdName+" "+strings.TrimSpace(tc.extra), func(t *testing.T) {
				_, _, err := runCmd(t, "", cmdName, "--config", configWithoutBundle(t, tc.extra+"workers: 0\n"))
				require.ErrorContains(t, err, tc.want)
			})
		}
	}
}

// A bad value names the file and line that set it, at start (serve and
// demo read the config alike).
func TestServeConfigErrorNamesTheLine(t *testing.T) {
	path := configWithoutBundle(t, "workers: 0\n")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	line := slices.Index(strings.Split(string(data), "\n"), "workers: 0") + 1
	require.Positive(t, line)
	for _, cmdName := range []string{"serve", "demo"} {
		_, _, err := runCmd(t, "", cmdName, "--config", path)
		require.ErrorContains(t, err, fmt.Sprintf("invalid config: %s:%d: workers: must be > 0", path, line))
	}
	// A top-level key nothing reads, too.
	path = configWithoutBundle(t, "wrkers: 3\n")
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	line = slices.Index(strings.Split(string(data), "\n"), "wrkers: 3") + 1
	_, _, err = runCmd(t, "", "serve", "--config", path)
	require.ErrorContains(t, err, fmt.Sprintf("invalid config: %s:%d: unknown key \"wrkers\"; did you mean workers? (known: ", path, line))
}

// A missing edge list or bundle is named at its line in the config file,
// every one at once, before anything starts.
func TestServeConfigNamesMissingFilesAtTheirLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sw.yaml")
	config := "graphs:\n" +
		"  - name: a\n" +
		"    edges: ../../configs/demo/karate.edges\n" +
		"    bundle: " + filepath.Join(dir, "a.swb") + "\n" +
		"  - name: b\n" +
		"    edges: nope.edges\n" +
		"    bundle: " + filepath.Join(dir, "b.swb") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(config), 0o644))
	_, _, err := runCmd(t, "", "serve", "--config", path)
	require.ErrorIs(t, err, monitor.ErrConfig)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, fmt.Sprintf("invalid config: %s:4: graphs[0].bundle: open %s: no such file or directory", path, filepath.Join(dir, "a.swb")))
	require.ErrorContains(t, err, fmt.Sprintf("invalid config: %s:6: graphs[1].edges: open nope.edges: no such file or directory (a relative path is read from the working directory", path))
	require.ErrorContains(t, err, fmt.Sprintf("invalid config: %s:7: graphs[1].bundle: open %s", path, filepath.Join(dir, "b.swb")))
}

// The "known:" list of an unknown key holds what a file may set, not the
// flags it may not.
func TestServeConfigUnknownKeyListsFileKeys(t *testing.T) {
	_, _, err := runCmd(t, "", "serve", "--config", configWithoutBundle(t, "colour: red\n"))
	require.ErrorContains(t, err, `unknown key "colour" (known: `)
	_, list, _ := strings.Cut(err.Error(), "(known: ")
	known := strings.Split(strings.TrimSuffix(list, ")"), ", ")
	require.Subset(t, known, []string{"workers", "http", "nats", "graphs", "log_level", "log_format", "data_dir", "plugin_dir"})
	for _, k := range []string{"http_addr", "nats_url", "help", "config"} {
		require.NotContains(t, known, k)
	}
}

// Commands that read only their flags from a config file refuse a dashed
// key, which viper would ignore, naming the key meant, and name the other
// keys they ignore in one warning.
func TestFlagCommandConfigKeys(t *testing.T) {
	for _, tc := range []struct {
		name, file, wantErr, wantWarn string
		cascades                      int
	}{
		{"underscored keys are read", "cascades: 2\nsource_ratio: 0.3\n", "", "", 2},
		{"a dashed key is refused", "cascades: 2\nsource-ratio: 0.3\n", `key "source-ratio": config keys use underscores; did you mean source_ratio?`, "", 0},
		{"a dashed key with no value is refused", "cascades: 2\nsource-ratio:\n", `key "source-ratio": config keys use underscores; did you mean source_ratio?`, "", 0},
		{"a key of no flag is named", "cascdes: 2\nlog_level: warn\n", "", `"keys":["cascdes"]`, 100},
		{"a misspelt flag's key is named with the key meant", "cascdes: 2\nlog_level: warn\n", "", `"did_you_mean":["cascdes -> cascades"]`, 100},
		{"a key far from every flag's has no guess", "colour: red\nlog_level: warn\n", "", `"keys":["colour"]}`, 100},
		{"a key of no flag and no value is named", "cascdes:\nlog_level: warn\n", "", `"keys":["cascdes"]`, 100},
		{"a flag-only key is refused", "help: true\n", `key "help": --help is a command-line flag only`, "", 0},
		{"a section where a flag takes a value", "nats:\n  url: nats://127.0.0.1:4222\n", `key "nats" is a section, but sourcewatch simulate reads it as --nats, a string`, "", 0},
		{"a list where a flag takes a value", "sources: [2]\n", `key "sources" is a list, but sourcewatch simulate reads it as --sources, one string`, "", 0},
		{"a list where a number flag takes a value", "seed: [5]\n", `key "seed" is a list, but sourcewatch simulate reads it as --seed, one int64`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "simulate.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(tc.file), 0o644))
			out, stderr, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--config", cfg, "--log-format", "json")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.cascades, strings.Count(out, "\n"))
			if tc.wantWarn != "" {
				require.Contains(t, stderr, tc.wantWarn)
			} else {
				require.NotContains(t, stderr, "does not read")
			}
		})
	}
}

// alerts tail reads a daemon config's sections silently but refuses a
// dashed spelling of its own flags.
func TestTailConfigKeys(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tail.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("from-start: true\n"), 0o644))
	_, _, err := runCmd(t, "", "alerts", "tail", "--config", cfg, "--nats", "nats://127.0.0.1:1")
	require.ErrorContains(t, err, `key "from-start": config keys use underscores; did you mean from_start?`)

	require.NoError(t, os.WriteFile(cfg, []byte("workers: 2\nnats:\n  url: nats://127.0.0.1:1\nfrom_start: true\n"), 0o644))
	_, stderr, err := runCmd(t, "", "alerts", "tail", "--config", cfg, "--log-format", "json")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "key ", "a daemon config's keys pass the check")
	require.Contains(t, err.Error(), "nats://127.0.0.1:1", "and its nats section is read")
	require.NotContains(t, stderr, "not read", "without a warning")

	// A key neither the daemon nor tail reads, and a misspelt key inside
	// a section tail reads, are warned about: tail would run on defaults.
	require.NoError(t, os.WriteFile(cfg, []byte("bogus_key: 1\nsubjects:\n  prefx: other\nnats:\n  url: nats://127.0.0.1:1\n"), 0o644))
	_, stderr, err = runCmd(t, "", "alerts", "tail", "--config", cfg, "--log-format", "json")
	require.Error(t, err)
	require.Contains(t, stderr, `"keys":["bogus_key"]`)
	require.Contains(t, stderr, `subjects: unknown key \"prefx\"`)
}

// A NATS URL's password never reaches the error of the commands that
// connect with it.
func TestConnectErrorsHideThePassword(t *testing.T) {
	url := "nats://sw:s3cretPW@127.0.0.1:1"
	_, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1", "--publish", "--nats", url)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretPW")
	require.Contains(t, err.Error(), "127.0.0.1:1")
	_, _, err = runCmd(t, "", "alerts", "tail", "--nats", url)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cretPW")
}

// A mistyped subcommand of a group fails, so a script notices; the group
// alone still prints its help.
func TestUnknownSubcommandFails(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bundle", "inspct", "x.swb"}, `unknown command "inspct" for "sourcewatch bundle"; did you mean inspect?`},
		{[]string{"plugin", "list"}, `unknown command "list" for "sourcewatch plugin" (commands: check)`},
		{[]string{"alerts", "tial"}, `did you mean tail?`},
	} {
		_, _, err := runCmd(t, "", tc.args...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	out, _, err := runCmd(t, "", "bundle")
	require.NoError(t, err)
	require.Contains(t, out, "inspect")
}

// --version says what an upgrade needs to know: the bundle formats this
// build reads and the plugin protocol it speaks.
func TestVersionFlag(t *testing.T) {
	out, _, err := runCmd(t, "", "--version")
	require.NoError(t, err)
	require.Contains(t, out, "sourcewatch "+monitor.Version+" (")
	require.Contains(t, out, fmt.Sprintf("bundle format %d, reads 1-%d", localize.FormatVersion, localize.FormatVersion))
	require.Contains(t, out, fmt.Sprintf("forward plugin protocol %d", forward.ProtocolVersion))
	require.NotContains(t, out, "commit", "a plain go build carries none")

	defer func(was string) { commit = was }(commit)
	commit = "eb49d90"
	out, _, err = runCmd(t, "", "--version")
	require.NoError(t, err)
	require.Contains(t, out, "sourcewatch "+monitor.Version+" (commit eb49d90; go")
}

// The shipped systemd unit runs a command line this build accepts, reloads
// by SIGHUP (which serve handles) and lets the daemon stop its own
// plugins: a unit that named a flag since renamed would fail only on the
// operator's machine.
func TestSystemdUnitRunsThisBuild(t *testing.T) {
	data, err := os.ReadFile("../../configs/systemd/sourcewatch.service")
	require.NoError(t, err)
	keys := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	args := strings.Fields(keys["ExecStart"])
	require.NotEmpty(t, args)
	require.Equal(t, "sourcewatch", filepath.Base(args[0]))
	root := newRootCmd(io.Discard, io.Discard)
	cmd, rest, err := root.Find(args[1:])
	require.NoError(t, err)
	require.Equal(t, "serve", cmd.Name())
	require.NoError(t, cmd.ParseFlags(rest))
	require.NotEmpty(t, cmd.Flags().Lookup("config").Value.String())
	require.Equal(t, "/bin/kill -HUP $MAINPID", keys["ExecReload"])
	require.Equal(t, "mixed", keys["KillMode"], "SIGTERM to the daemon alone; it stops its plugins")
}

// TestUnreadEnvironmentIsNamed sets SOURCEWATCH_* variables that no setting
// reads, a misspelt key and a graph key (the graphs list is file-only), and
// expects a warning naming each; variables that name a daemon key or any
// command's flag pass without one.
func TestUnreadEnvironmentIsNamed(t *testing.T) {
	t.Setenv("SOURCEWATCH_NATS_LISTN", "127.0.0.1:1")
	t.Setenv("SOURCEWATCH_GRAPHS_0_MIN_INFECTED", "0")
	t.Setenv("SOURCEWATCH_EVENTS_MAX_AGE", "48h") // a daemon key
	t.Setenv("SOURCEWATCH_PROTOTYPES", "64")      // a flag of train
	t.Setenv("SOURCEWATCH_FORWARD_PLUGIN", "x")   // the plugin handshake's
	_, stderr, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1", "--log-format", "json")
	require.NoError(t, err)
	require.Contains(t, stderr, `"variable":"SOURCEWATCH_NATS_LISTN"`)
	require.Contains(t, stderr, "it names no config key or flag (misspelt?)")
	require.Contains(t, stderr, `"variable":"SOURCEWATCH_GRAPHS_0_MIN_INFECTED"`)
	require.Contains(t, stderr, "the graphs list comes from the config file only")
	for _, known := range []string{"SOURCEWATCH_EVENTS_MAX_AGE", "SOURCEWATCH_PROTOTYPES", "SOURCEWATCH_FORWARD_PLUGIN"} {
		require.NotContains(t, stderr, known)
	}
}

// A variable naming a config section would replace the file's whole
// section by a string (SOURCEWATCH_NATS=1 dropped the file's nats.url and
// started the embedded server): serve refuses it, naming the keys to set;
// other commands warn.
func TestEnvironmentNamingASectionIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("nats:\n  url: nats://127.0.0.1:1\ngraphs:\n  - name: k\n    edges: ../../configs/demo/karate.edges\n    bundle: k.swb\n"), 0o644))
	for _, tc := range []struct {
		env, want string
		flag      bool // also a flag's variable: no warning elsewhere
	}{
		{"SOURCEWATCH_NATS", "environment variable SOURCEWATCH_NATS names the config section nats, not a key (it is also the --nats flag of simulate and alerts", true},
		{"SOURCEWATCH_NATS_TLS", "names the config section nats.tls, not a key", false},
		{"SOURCEWATCH_HTTP", "names the config section http, not a key", false},
		{"SOURCEWATCH_GRAPHS", "would replace the graphs list, which comes from the config file only", false},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "1")
			_, _, err := runCmd(t, "", "serve", "--config", cfgPath, "--data-dir", dir, "--log-format", "json")
			require.ErrorIs(t, err, monitor.ErrConfig)
			require.ErrorContains(t, err, tc.want)
			_, stderr, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "1", "--log-format", "json")
			require.NoError(t, err)
			require.Equal(t, !tc.flag, strings.Contains(stderr, "environment variable names a config section, not a key"), stderr)
		})
	}
	// Empty, viper reads it as unset: not refused.
	t.Setenv("SOURCEWATCH_NATS", "")
	require.NoError(t, envReplacesSection(os.Environ()))
}

// A config file or SOURCEWATCH_* value that the flag would refuse on the
// command line is refused naming where it came from: viper read "abc" as
// 0 and 2.7 as 2, so seed: abc ran on seed 0 without a word.
func TestFlagCommandRefusesValuesOfTheWrongType(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"seed: abc\n", `key "seed": "abc" is not a whole number, as --seed wants`},
		{"seed: 2.7\n", `key "seed": "2.7" is not a whole number, as --seed wants`},
		{"beta: high\n", `key "beta": "high" is not a number, as --beta wants`},
		{"directed: maybe\n", `key "directed": "maybe" is not true or false, as --directed wants`},
	} {
		cfg := filepath.Join(t.TempDir(), "simulate.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte("cascades: 2\n"+tc.file), 0o644))
		_, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--config", cfg)
		require.ErrorContains(t, err, tc.want)
	}
	t.Setenv("SOURCEWATCH_SEED", "abc")
	_, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "2")
	require.ErrorContains(t, err, `SOURCEWATCH_SEED: "abc" is not a whole number, as --seed wants`)
	// On the command line the flag wins, and the environment is not read.
	out, _, err := runCmd(t, "", "simulate", "--graph", "../../configs/demo/karate.edges", "--cascades", "2", "--seed", "3")
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(out, "\n"))
}

// A bad log_level or log_format names where it was set, as every other
// key's error does: the file and line, the environment variable or the
// flag; and a list or map given for one is refused, not read as the
// default (info, auto) without a word.
func TestLogSettingErrorsNameWhereTheyWereSet(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"log_level: verbose", `log_level: unrecognized level "verbose" (want debug, info, warn or error)`},
		{"log_format: xml", `log_format: want auto, console or json, got "xml"`},
		{"log_level: [debug]", "log_level: want a string, got a list"},
		{"log_format:\n  json: true", "log_format: want a string, got a map"},
	} {
		path := configWithoutBundle(t, tc.line+"\nworkers: 0\n")
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		first, _, _ := strings.Cut(tc.line, "\n")
		line := slices.Index(strings.Split(string(data), "\n"), first) + 1
		require.Positive(t, line)
		for _, cmdName := range []string{"serve", "simulate"} {
			t.Run(cmdName+" "+first, func(t *testing.T) {
				_, _, err := runCmd(t, "", cmdName, "--config", path)
				require.EqualError(t, err, fmt.Sprintf("invalid config: %s:%d: %s", path, line, tc.want))
			})
		}
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("SOURCEWATCH_LOG_LEVEL", "verbose")
		_, _, err := runCmd(t, "", "serve", "--config", configWithoutBundle(t, "workers: 0\n"))
		require.EqualError(t, err, `invalid config: $SOURCEWATCH_LOG_LEVEL: log_level: unrecognized level "verbose" (want debug, info, warn or error)`)
	})
	t.Run("flag", func(t *testing.T) {
		_, _, err := runCmd(t, "", "serve", "--config", configWithoutBundle(t, "log_level: verbose\n"), "--log-level", "loud")
		require.EqualError(t, err, `--log-level: unrecognized level "loud" (want debug, info, warn or error)`)
	})
}

// A reload reads log_level and log_format as the start does: a bad one
// fails the reload, naming the file and line, where it passed unseen and
// stopped the next start; a changed one is said to wait for a restart,
// since the logger is built at start only.
func TestReloadChecksLogSettings(t *testing.T) {
	path := configWithoutBundle(t, "log_level: info\n")
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	var stderr bytes.Buffer
	a := &app{v: viper.New(), stdout: io.Discard, stderr: &stderr, log: zap.NewNop()}
	root := a.rootCmd()
	ran := false
	for _, c := range root.Commands() {
		if c.Name() != "serve" {
			continue
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			ran = true
			reload := configReloader(cmd, a)
			_, err := reload(cmd.Context())
			require.NoError(t, err)
			require.NotContains(t, stderr.String(), "read at start only")

			bad := strings.Replace(string(orig), "log_level: info", "log_level: verbose", 1)
			require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
			line := slices.Index(strings.Split(bad, "\n"), "log_level: verbose") + 1
			_, err = reload(cmd.Context())
			require.EqualError(t, err, fmt.Sprintf(`invalid config: %s:%d: log_level: unrecognized level "verbose" (want debug, info, warn or error)`, path, line))

			debug := strings.Replace(string(orig), "log_level: info", "log_level: debug", 1)
			require.NoError(t, os.WriteFile(path, []byte(debug), 0o600))
			_, err = reload(cmd.Context())
			require.NoError(t, err)
			require.Contains(t, stderr.String(), `"msg":"config keys changed in the file are read at start only: restart to apply them; the running values stay","keys":["log_level"]`)
			return nil
		}
	}
	root.SetArgs([]string{"serve", "--config", path, "--log-format", "json"})
	require.NoError(t, root.ExecuteContext(t.Context()))
	require.True(t, ran)
}
