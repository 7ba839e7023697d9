package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// alertsSyncBuffer is written by the command's goroutine and read by the test.
type alertsSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *alertsSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *alertsSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startAlertsNATS(t *testing.T, prefix string) (string, jetstream.JetStream) {
	t.Helper()
	return startAlertsNATSWith(t, prefix, "", "")
}

// startAlertsNATSWith is startAlertsNATS for a server that wants user and
// password when user is set.
func startAlertsNATSWith(t *testing.T, prefix, user, password string) (string, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Username: user, Password: password,
	})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	var copts []nats.Option
	if user != "" {
		copts = append(copts, nats.UserInfo(user, password))
	}
	nc, err := nats.Connect(s.ClientURL(), copts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = alerts.EnsureStream(ctx, js, prefix)
	require.NoError(t, err)
	return s.ClientURL(), js
}

// runAlertsTail runs `sourcewatch alerts tail args...` until stop is called,
// which cancels its context and returns the command's error.
func runAlertsTail(t *testing.T, args ...string) (stdout, stderr *alertsSyncBuffer, stop func() error) {
	t.Helper()
	stdout, stderr = &alertsSyncBuffer{}, &alertsSyncBuffer{}
	root := newRootCmd(stdout, stderr)
	root.SetArgs(append([]string{"alerts", "tail"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("alerts tail did not stop on cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stdout, stderr, stop
}

func observe(t *testing.T, tr *alerts.Tracker, graph string, nodes ...string) alerts.Alert {
	t.Helper()
	o := alerts.Observation{Graph: graph, Infected: 9, Threshold: 0.5,
		Model: alerts.ModelRef{Bundle: "bundle-1", Forward: "si", ForwardVersion: "1.0.0"}, InferenceMS: 7}
	for i, n := range nodes {
		o.Sources = append(o.Sources, alerts.Source{Node: n, Score: float64(10 - i), Probability: 1 / float64(i+1)})
	}
	a, ok := tr.Observe(o)
	require.True(t, ok)
	return a
}

func TestAlertsTailReadable(t *testing.T) {
	url, js := startAlertsNATS(t, "sourcewatch")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub := alerts.NewPublisher(js, "sourcewatch")
	tr := alerts.NewTracker(nil)
	before := observe(t, tr, "jazz", "5")
	require.NoError(t, pub.Publish(ctx, before))

	stdout, stderr, stop := runAlertsTail(t, "--nats", url, "--graph", "jazz")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "tailing alerts") },
		10*time.Second, 5*time.Millisecond, "stderr: %s", stderr.String())

	other := observe(t, tr, "karate", "1")
	require.NoError(t, pub.Publish(ctx, other))
	up := observe(t, tr, "jazz", "12", "7")
	require.NoError(t, pub.Publish(ctx, up))
	res, ok := tr.Resolve("jazz", alerts.Window{}, 0)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, res))

	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "RESOLVED jazz") },
		10*time.Second, 5*time.Millisecond, "stdout: %s", stdout.String())
	require.NoError(t, stop(), "Ctrl-C is a clean exit")

	out := stdout.String()
	require.Contains(t, out, "UPDATED jazz at ")
	require.Contains(t, out, "(seq 2)")
	require.Contains(t, out, "(seq 3)")
	require.Contains(t, out, "id            "+up.ID)
	require.Contains(t, out, "model         bundle bundle-1, forward si 1.0.0")
	require.Regexp(t, `(?m)^\s+1\s+12\s+10\s+1\.000\s+\*$`, out)
	require.NotContains(t, out, "karate", "--graph filters")
	require.NotContains(t, out, before.ID, "only new alerts by default")
	require.Equal(t, 2, strings.Count(out, "rank"))
	require.NotContains(t, stderr.String(), "no alert of this graph")

	// A misspelt graph is said to have no alerts where others have some.
	_, stderr, stop = runAlertsTail(t, "--nats", url, "--graph", "jaz")
	const misspelt = "no alert of this graph is stored, while other graphs have some (misspelt --graph?)"
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), misspelt) },
		10*time.Second, 5*time.Millisecond, "stderr: %s", stderr.String())
	require.NoError(t, stop())
	require.Contains(t, stderr.String(), `"graphs_with_alerts":"jazz, karate"`)
	require.Less(t, strings.Index(stderr.String(), "tailing alerts"), strings.Index(stderr.String(), misspelt),
		"the warning follows the line saying what is tailed")
}

func TestAlertsTailJSONFromStart(t *testing.T) {
	url, js := startAlertsNATS(t, "sourcewatch")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub := alerts.NewPublisher(js, "sourcewatch")
	tr := alerts.NewTracker(nil)
	want := []alerts.Alert{observe(t, tr, "jazz", "5"), observe(t, tr, "karate", "1", "2")}
	for _, a := range want {
		require.NoError(t, pub.Publish(ctx, a))
	}

	// The server URL through a config file, as serve reads it.
	cfg := filepath.Join(t.TempDir(), "sw.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("nats:\n  url: "+url+"\n"), 0o600))
	stdout, _, stop := runAlertsTail(t, "--config", cfg, "--json", "--from-start")
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= 2 },
		10*time.Second, 5*time.Millisecond, "stdout: %s", stdout.String())
	more := observe(t, tr, "jazz", "6")
	require.NoError(t, pub.Publish(ctx, more))
	want = append(want, more)
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= 3 },
		10*time.Second, 5*time.Millisecond, "stdout: %s", stdout.String())
	require.NoError(t, stop())

	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 3)
	for i, line := range lines {
		var got alerts.Alert
		require.NoError(t, json.Unmarshal([]byte(line), &got), "line %d: %s", i, line)
		require.Equal(t, want[i], got)
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &raw))
		require.Equal(t, alerts.Schema, raw["schema"])
		require.Contains(t, raw, "credible_set")
	}
}

// TestAlertsTailJSONKeepsUnknownFields prints an alert as its message
// carried it: a field a newer build adds to v1 (additive, so the same
// schema) reaches the consumer, and a message published indented is
// still one line.
func TestAlertsTailJSONKeepsUnknownFields(t *testing.T) {
	url, js := startAlertsNATS(t, "sourcewatch")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := observe(t, alerts.NewTracker(nil), "jazz", "5", "7")
	b, err := json.Marshal(a)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	fields["added_later"] = map[string]any{"region": "north", "n": 3.0}
	data, err := json.MarshalIndent(fields, "", "  ")
	require.NoError(t, err)
	_, err = js.Publish(ctx, alerts.Subject("sourcewatch", "jazz"), data)
	require.NoError(t, err)

	stdout, stderr, stop := runAlertsTail(t, "--nats", url, "--json", "--from-start")
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "\n") },
		10*time.Second, 5*time.Millisecond, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	require.NoError(t, stop())

	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 1, "one line per alert: %s", stdout.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
	require.Equal(t, fields, got, "every field the message carried")
	require.Contains(t, lines[0], `"added_later":{"n":3,"region":"north"}`)
}

func TestAlertsTailErrors(t *testing.T) {
	url, _ := startAlertsNATS(t, "sourcewatch")
	badCreds := filepath.Join(t.TempDir(), "bad.creds")
	require.NoError(t, os.WriteFile(badCreds, []byte("not a creds file\n"), 0o600))
	pastedSeed := "SUA" + strings.Repeat("Q", 55)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"both replay flags", []string{"--nats", url, "--from-start", "--since", "1h"}, "--from-start and --since"},
		{"bad since", []string{"--nats", url, "--since", "yesterday"}, `--since "yesterday"`},
		{"bad graph", []string{"--nats", url, "--graph", "a>b"}, `graph "a>b"`},
		{"no server", []string{"--nats", "nats://127.0.0.1:1"}, "connecting to NATS at nats://127.0.0.1:1"},
		{"wrong prefix", []string{"--nats", url, "--prefix", "other"}, "wrong prefix"},
		{"creds without a seed", []string{"--nats", url, "--creds", badCreds}, "creds: " + badCreds + ": no nkey seed (a .creds file holds a user JWT and its seed)"},
		// A seed pasted where the file's path belongs is not echoed.
		{"seed for creds", []string{"--nats", url, "--creds", pastedSeed}, "creds holds what looks like an nkey seed itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr := &alertsSyncBuffer{}, &alertsSyncBuffer{}
			root := newRootCmd(stdout, stderr)
			root.SetArgs(append([]string{"alerts", "tail"}, tt.args...))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := root.ExecuteContext(ctx)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), pastedSeed)
			require.Empty(t, stdout.String())
		})
	}
}

// TestAlertsTailServeConfig reaches serve's embedded server through its
// config: nats.listen and subjects.prefix, and the environment.
func TestAlertsTailServeConfig(t *testing.T) {
	url, js := startAlertsNATS(t, "custom")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := observe(t, alerts.NewTracker(nil), "jazz", "5")
	require.NoError(t, alerts.NewPublisher(js, "custom").Publish(ctx, a))
	hostPort := strings.TrimPrefix(url, "nats://")

	tests := []struct {
		name string
		yaml string
		env  map[string]string
	}{
		{"listen and prefix from file", "nats:\n  url: \"\"\n  listen: " + hostPort + "\nsubjects:\n  prefix: custom\n", nil},
		{"url and prefix from env", "", map[string]string{"SOURCEWATCH_NATS_URL": url, "SOURCEWATCH_SUBJECTS_PREFIX": "custom"}},
		{"env beats file", "nats:\n  url: nats://127.0.0.1:1\nsubjects:\n  prefix: wrong\n",
			map[string]string{"SOURCEWATCH_NATS_URL": url, "SOURCEWATCH_SUBJECTS_PREFIX": "custom"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, val := range tt.env {
				t.Setenv(k, val)
			}
			args := []string{"--json", "--from-start"}
			if tt.yaml != "" {
				cfg := filepath.Join(t.TempDir(), "serve.yaml")
				require.NoError(t, os.WriteFile(cfg, []byte(tt.yaml), 0o600))
				args = append(args, "--config", cfg)
			}
			stdout, stderr, stop := runAlertsTail(t, args...)
			require.Eventually(t, func() bool { return strings.Contains(stdout.String(), a.ID) },
				10*time.Second, 5*time.Millisecond, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			require.NoError(t, stop())
		})
	}

	// An explicit --prefix wins over the file.
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("nats:\n  url: "+url+"\nsubjects:\n  prefix: custom\n"), 0o600))
	root := newRootCmd(&alertsSyncBuffer{}, &alertsSyncBuffer{})
	root.SetArgs([]string{"alerts", "tail", "--config", cfg, "--prefix", "flagged"})
	require.ErrorContains(t, root.ExecuteContext(ctx), "not flagged.alerts.>")

	// A server without clients is named, not waited on.
	require.NoError(t, os.WriteFile(cfg, []byte("nats:\n  listen: \"-1\"\n"), 0o600))
	root = newRootCmd(&alertsSyncBuffer{}, &alertsSyncBuffer{})
	root.SetArgs([]string{"alerts", "tail", "--config", cfg})
	require.ErrorContains(t, root.ExecuteContext(ctx), `nats.listen "-1"`)
}

// TestAlertsTailFileCredentials authenticates with the config file's
// nats.user and nats.password however the server's address is given: in
// the file, by --nats, or by SOURCEWATCH_NATS (which used to shadow the
// file's nats section and lose its credentials).
func TestAlertsTailFileCredentials(t *testing.T) {
	url, js := startAlertsNATSWith(t, "sourcewatch", "tail", "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := observe(t, alerts.NewTracker(nil), "karate", "3")
	require.NoError(t, alerts.NewPublisher(js, "sourcewatch").Publish(ctx, a))

	tests := []struct {
		name string
		yaml string
		args []string
		env  map[string]string
	}{
		{"url in file", "nats:\n  url: " + url + "\n  user: tail\n  password: s3cret\n", nil, nil},
		{"url by flag", "nats:\n  user: tail\n  password: s3cret\n", []string{"--nats", url}, nil},
		{"url by SOURCEWATCH_NATS", "nats:\n  user: tail\n  password: s3cret\n", nil, map[string]string{"SOURCEWATCH_NATS": url}},
		{"password by environment", "nats:\n  user: tail\n  password: wrong\n", []string{"--nats", url},
			map[string]string{"SOURCEWATCH_NATS_PASSWORD": "s3cret"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, val := range tt.env {
				t.Setenv(k, val)
			}
			cfg := filepath.Join(t.TempDir(), "serve.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(tt.yaml), 0o600))
			args := append([]string{"--json", "--from-start", "--config", cfg}, tt.args...)
			stdout, stderr, stop := runAlertsTail(t, args...)
			require.Eventually(t, func() bool { return strings.Contains(stdout.String(), a.ID) },
				10*time.Second, 5*time.Millisecond, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			require.NoError(t, stop())
		})
	}

	// Without the credentials the server refuses, and the error says so.
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("nats:\n  url: "+url+"\n"), 0o600))
	root := newRootCmd(&alertsSyncBuffer{}, &alertsSyncBuffer{})
	root.SetArgs([]string{"alerts", "tail", "--config", cfg})
	require.ErrorContains(t, root.ExecuteContext(ctx), "uthorization")
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got, err := parseSince("90m", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(-90*time.Minute), got)
	got, err = parseSince("2025-12-31T23:00:00+01:00", now)
	require.NoError(t, err)
	require.True(t, got.Equal(time.Date(2025, 12, 31, 22, 0, 0, 0, time.UTC)))
	_, err = parseSince("-5m", now)
	require.Error(t, err)
	_, err = parseSince("0s", now)
	require.ErrorContains(t, err, "a positive duration", "nothing is since now: new alerts are the default")
	// A time to come (a mistyped year) would show nothing, new alerts
	// included, until then, without a word.
	_, err = parseSince("2062-01-02T03:04:05Z", now)
	require.EqualError(t, err, `--since "2062-01-02T03:04:05Z" is in the future (now is 2026-01-02T03:04:05Z): no alert would be shown before then, new ones included; leave --since out to follow new alerts`)
}
