package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// trainTestBundle trains a small karate bundle with the real icmf plugin
// and returns its path and the plugin directory.
func trainTestBundle(t *testing.T) (bundle, pluginDir string) {
	t.Helper()
	pluginDir = filepath.Dir(forwardtest.Build(t, "icmf"))
	bundle = filepath.Join(t.TempDir(), "karate.swb")
	out, _, err := runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges",
		"--diffusion", "SI", "--beta", "0.3", "--pattern", "cluster", "--cascades", "60", "--seed", "3",
		"--forward", "icmf", "--plugin-dir", pluginDir, "--prior-epochs", "5", "--prototypes", "64",
		"--val-solves", "8", "--test-solves", "8", "--restarts", "4", "--init-steps", "10", "--opt-steps", "30",
		// The daemon tests replay cascades into one window and wait for the
		// source set to change; a count rule (with these clusters' two
		// sources, likely "the 2 highest scores") can keep the same set.
		"--source-rule", "threshold",
		// The tests read the schedule; whether this small prior earns its
		// place is TestTrainRanking's question.
		"--prior", "on",
		"--out", bundle, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "36 train, 12 validation, 12 test")
	require.Contains(t, out, "forward     icmf")
	return bundle, pluginDir
}

// TestDemo runs the make-run demo end to end: the daemon on an embedded
// server, a real plugin process, one replayed cascade, its alert and its
// resolution.
func TestDemo(t *testing.T) {
	config := demoConfig(t)
	out, stderr, err := runCmd(t, "", "demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", "4", "--log-level", "warn")
	require.NoError(t, err)
	require.NotContains(t, stderr, demoSharedWarning, "its own embedded server")
	require.Contains(t, out, `sourcewatch demo: graph "club" (34 nodes)`)
	require.Contains(t, out, "--- cascade 1: true sources")
	require.Contains(t, out, "FIRING club")
	require.Contains(t, out, "RESOLVED club")
	require.Contains(t, out, "forward icmf")
}

// On an external server the demo warns that its simulated events and
// alerts mix with a deployment's that may share it, and every alert it
// publishes, firing and resolved, says in its note that it is a demo's.
func TestDemoOnExternalServerWarns(t *testing.T) {
	url, js := startAlertsNATS(t, "sourcewatch")
	config := demoConfig(t)
	t.Setenv("SOURCEWATCH_NATS_URL", url)
	out, stderr, err := runCmd(t, "", "demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", "4", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "FIRING club")
	require.Contains(t, stderr, demoSharedWarning)

	stream, err := js.Stream(t.Context(), alerts.StreamName)
	require.NoError(t, err)
	info, err := stream.Info(t.Context())
	require.NoError(t, err)
	statuses := map[alerts.Status]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		var a alerts.Alert
		require.NoError(t, json.Unmarshal(m.Data, &a))
		require.True(t, strings.HasSuffix(a.Note, demoAlertNote), "alert %d (%s): note %q", seq, a.Status, a.Note)
		statuses[a.Status]++
	}
	require.Positive(t, statuses[alerts.Firing])
	require.Positive(t, statuses[alerts.Resolved])
}

// demoConfig trains a small bundle and writes a demo config with a 3 s
// window around it, its data directory in a fresh temporary directory.
func demoConfig(t *testing.T) string {
	t.Helper()
	bundle, pluginDir := trainTestBundle(t)
	dir := t.TempDir()
	edges, err := filepath.Abs("../../configs/demo/karate.edges")
	require.NoError(t, err)
	config := filepath.Join(dir, "demo.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
nats:
  listen: 127.0.0.1:0
http:
  addr: 127.0.0.1:0
data_dir: %s
plugin_dir: %s
graphs:
  - name: club
    edges: %s
    bundle: %s
    window: 3s
    interval: 300ms
    min_infected: 2
`, filepath.Join(dir, "data"), pluginDir, edges, bundle)), 0o644))
	return config
}

// TestDemoAfterInterruptedRun stops a demo while its incident is open, as
// Ctrl-C does, and runs it again on the same data: the daemon resolves the
// old incident (its state is durable), and the demo notes that without
// taking it for the resolution of its own cascade.
func TestDemoAfterInterruptedRun(t *testing.T) {
	config := demoConfig(t)
	interrupted := func(seed string) {
		ctx, cancel := context.WithCancel(t.Context())
		var first lockedBuffer
		root := newRootCmd(&first, io.Discard)
		root.SetArgs([]string{"demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", seed, "--log-level", "warn"})
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(ctx) }()
		require.Eventually(t, func() bool { return strings.Contains(first.String(), "FIRING club") },
			time.Minute, 20*time.Millisecond, "the first run's incident fires")
		cancel()
		if err := <-done; err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.NotContains(t, first.String(), "RESOLVED club", "interrupted while its incident was open")
	}
	interrupted("4")

	out, _, err := runCmd(t, "", "demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", "5", "--log-level", "warn")
	require.NoError(t, err)
	// Still in the window, unless this start took longer than its 3 s.
	require.Contains(t, out, "--- an incident left open by an earlier run ")
	require.Contains(t, out, "(an incident left open by an earlier run resolved: ")
	require.Less(t, strings.Index(out, "(an incident left open by an earlier run resolved: "), strings.Index(out, "--- cascade 1: true sources"),
		"the old incident's resolution is printed before the first cascade starts:\n%s", out)
	replayed := strings.Index(out, "--- cascade 1 fully replayed")
	firing, resolved := strings.Index(out, "FIRING club"), strings.Index(out, "RESOLVED club")
	require.Positive(t, firing, out)
	require.Greater(t, resolved, replayed, "the resolution printed is this run's own, after its replay:\n%s", out)
	require.Equal(t, 1, strings.Count(out, "RESOLVED club"), out)

	// Started again long after, the old incident's window has emptied:
	// it is resolved at once, and said so, not waited for.
	interrupted("6")
	time.Sleep(4 * time.Second) // the window, 3 s
	out, _, err = runCmd(t, "", "demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", "7", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "--- an incident left open by an earlier run has left the window since; resolving it first")
	require.Contains(t, out, "(an incident left open by an earlier run resolved: ")
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDemoRejectsBadFlags refuses a replay speed or cascade count that
// cannot work before starting the daemon (a speed of 0 used to stamp every
// event centuries ago, and the daemon dead-lettered them all).
func TestDemoRejectsBadFlags(t *testing.T) {
	config := configWithoutBundle(t, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speed", "0"}, "--speed: want simulation steps per second from 1.16e-05 (one a day) up, finite, got 0"},
		{[]string{"--speed", "1e-12"}, "got 1e-12"},
		{[]string{"--speed", "+Inf"}, "got +Inf"},
		{[]string{"--speed", "-2"}, "got -2"},
		{[]string{"--cascades", "-1"}, "--cascades: want a count >= 0"},
		{[]string{"--diffusion", "SIR", "--gamma", "2"}, "gamma 2 outside [0, 1]"},
		{[]string{"--diffusion", "IC", "--p", "1.5"}, "1.5"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCmd(t, "", append([]string{"demo", "--config", config, "--log-level", "warn"}, tc.args...)...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A misspelt top-level key in a daemon config is an error naming it; the
// command's own flags (log_level) and the daemon's keys are not.
func TestDaemonConfigRefusesUnknownTopLevelKeys(t *testing.T) {
	for _, cmdName := range []string{"serve", "demo"} {
		t.Run(cmdName, func(t *testing.T) {
			config := configWithoutBundle(t, "log_level: warn\nwrkers: 3\n")
			_, _, err := runCmd(t, "", cmdName, "--config", config)
			require.ErrorContains(t, err, `unknown key "wrkers"; did you mean workers? (known: `)
		})
	}
	// Without the typo the demo gets past the config (and stops at its
	// own flag check).
	_, _, err := runCmd(t, "", "demo", "--config", configWithoutBundle(t, "log_level: warn\n"), "--speed", "0")
	require.ErrorContains(t, err, "--speed")
}

// configWithoutBundle writes a daemon config for the demo graph whose
// bundle is an empty file, with extra top-level lines, for tests that
// stop before the daemon starts: the config's reader finds the file
// there (it checks that each opens), and a start would refuse it.
func configWithoutBundle(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	edges, err := filepath.Abs("../../configs/demo/karate.edges")
	require.NoError(t, err)
	config := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(
		"nats:\n  listen: 127.0.0.1:0\nhttp:\n  addr: \"\"\ndata_dir: %s\n%sgraphs:\n  - name: club\n    edges: %s\n    bundle: %s\n",
		filepath.Join(dir, "data"), extra, edges, filepath.Join(dir, "empty.swb"))), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.swb"), nil, 0o644))
	return config
}

// The daemon's localizer notes an observation far smaller than the
// bundle's training snapshots, through a real plugin process, and says
// nothing inside their range.
func TestBundleLocalizerNotesObservationsOutsideTraining(t *testing.T) {
	bundle, pluginDir := trainTestBundle(t)
	edges, err := filepath.Abs("../../configs/demo/karate.edges")
	require.NoError(t, err)
	g, err := graph.Load(edges)
	require.NoError(t, err)
	l, err := monitor.BundleLocalizers(pluginDir, zap.NewNop())(t.Context(), monitor.GraphConfig{Name: "club", Edges: edges, Bundle: bundle}, g)
	require.NoError(t, err)
	defer l.Close()
	y := make([]float64, g.N())
	y[0] = 1
	inf, err := l.Localize(t.Context(), y)
	require.NoError(t, err)
	require.Contains(t, inf.Note, "2.9% of the nodes infected, outside the ")
	for v := range 12 { // 12 of 34, inside what the clustered training snapshots held
		y[v] = 1
	}
	inf, err = l.Localize(t.Context(), y)
	require.NoError(t, err)
	require.Empty(t, inf.Note)
}

// The demo's daemon reloads as serve's does: the reload endpoint and
// SIGHUP read the config file again (a file broken since start is
// reported, not taken for success), and SIGHUP does not end the demo.
func TestDemoReloadsItsConfigFile(t *testing.T) {
	config := demoConfig(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out lockedBuffer
	root := newRootCmd(&out, io.Discard)
	root.SetArgs([]string{"demo", "--config", config, "--speed", "20", "--seed", "4", "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var url string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(out.String(), ", NATS ")
		url, _, _ = strings.Cut(rest, ", alerts on ")
		return ok && strings.Contains(rest, ", alerts on ")
	}, time.Minute, 20*time.Millisecond, "the demo prints its NATS URL")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	status := func() monitor.Status {
		msg, err := nc.Request(monitor.DefaultPrefix+".svc.status", nil, 10*time.Second)
		require.NoError(t, err)
		var st monitor.Status
		require.NoError(t, json.Unmarshal(msg.Data, &st))
		return st
	}

	data, err := os.ReadFile(config)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(config, bytes.Replace(data, []byte("interval: 300ms"), []byte("interval: 3 seconds"), 1), 0o644))
	msg, err := nc.Request(monitor.DefaultPrefix+".svc.reload", nil, time.Minute)
	require.NoError(t, err)
	require.Contains(t, msg.Header.Get("Nats-Service-Error"), "graphs[0].interval")
	st := status()
	require.NotNil(t, st.LastReload)
	require.False(t, st.LastReload.OK)
	require.Contains(t, st.LastReload.Error, "demo.yaml:")

	// Fixed, and signalled: the demo reloads and goes on.
	require.NoError(t, os.WriteFile(config, data, 0o644))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool {
		st := status()
		return st.LastReload != nil && st.LastReload.OK
	}, 30*time.Second, 20*time.Millisecond, "SIGHUP reloads the fixed file")
	select {
	case err := <-done:
		t.Fatalf("the demo ended on SIGHUP: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
}
