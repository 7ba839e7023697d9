package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

func TestPluginCheck(t *testing.T) {
	icmf := forwardtest.Build(t, "icmf")
	out, _, err := runCmd(t, "", "plugin", "check", icmf, "--graph", "../../configs/demo/karate.edges", "--cascades", "20", "--log-level", "warn")
	require.NoError(t, err, out)
	require.Contains(t, out, "graph: undirected graph, 34 nodes, 78 edges")
	require.Contains(t, out, "PASS  vjp")
	require.Contains(t, out, "PASS  fused call        loss and dx agree with Predict and VJP")
	require.Contains(t, out, "\nPASS\n")

	// By name in a plugin directory, on the built-in graph, as JSON.
	out, _, err = runCmd(t, "", "plugin", "check", "icmf", "--plugin-dir", filepath.Dir(icmf), "--json", "--param", "steps=2", "--log-level", "warn")
	require.NoError(t, err)
	var rep struct {
		Passed  bool
		Info    struct{ Name string }
		Results []struct{ Name, Status string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.Passed)
	require.Equal(t, "icmf", rep.Info.Name)
	require.Len(t, rep.Results, 13)
	// By name from a directory holding a directory of that name (the
	// plugin's source tree): the plugin dir's binary, not the directory.
	karate, err := filepath.Abs("../../configs/demo/karate.edges")
	require.NoError(t, err)
	t.Run("name beside a directory of that name", func(t *testing.T) {
		t.Chdir(t.TempDir())
		require.NoError(t, os.Mkdir("icmf", 0o755))
		out, _, err := runCmd(t, "", "plugin", "check", "icmf", "--plugin-dir", filepath.Dir(icmf), "--graph", karate, "--cascades", "4", "--log-level", "warn")
		require.NoError(t, err, out)
		require.Contains(t, out, "\nPASS\n")
	})
	// By its binary's name, as ls shows it.
	out, _, err = runCmd(t, "", "plugin", "check", "sourcewatch-forward-icmf", "--plugin-dir", filepath.Dir(icmf), "--cascades", "4", "--log-level", "warn")
	require.NoError(t, err, out)
	require.Contains(t, out, "\nPASS\n")

	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	out, _, err = runCmd(t, "", "plugin", "check", faulty, "--param", "fault=nan", "--log-level", "warn")
	require.ErrorContains(t, err, "predict: forward plugin sourcewatch-forward-faulty: predict: y[0][0] is NaN")
	require.Contains(t, out, "FAIL  predict")

	// train's name for the flag is taken too, so a train command line's
	// parameters can be checked as they are.
	t.Run("param as --forward-param", func(t *testing.T) {
		out, _, err := runCmd(t, "", "plugin", "check", faulty, "--forward-param", "fault=nan", "--log-level", "warn")
		require.ErrorContains(t, err, "y[0][0] is NaN")
		require.Contains(t, out, "FAIL  predict")
	})
	// The parameters come from the environment or a config file too.
	t.Run("param from environment", func(t *testing.T) {
		t.Setenv("SOURCEWATCH_PARAM", "fault=nan")
		out, _, err := runCmd(t, "", "plugin", "check", faulty, "--log-level", "warn")
		require.ErrorContains(t, err, "y[0][0] is NaN")
		require.Contains(t, out, "FAIL  predict")
	})
	t.Run("param from config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "check.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte("param:\n  fault: nan\n"), 0o600))
		_, _, err := runCmd(t, "", "plugin", "check", faulty, "--config", cfg, "--log-level", "warn")
		require.ErrorContains(t, err, "y[0][0] is NaN")
	})
	t.Run("malformed param in environment", func(t *testing.T) {
		t.Setenv("SOURCEWATCH_PARAM", "fault")
		_, _, err := runCmd(t, "", "plugin", "check", faulty, "--log-level", "warn")
		require.ErrorContains(t, err, `param: want name=value[,name=value...], got "fault"`)
	})
	t.Run("param given twice or empty", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--param", "steps=3", "--param", "steps=4"}, "--param: steps given twice"},
			{[]string{"--param", "steps=3,steps=4"}, "--param: steps given twice"},
			{[]string{"--param", "p=,steps=3"}, "--param: p has an empty value (leave it out for the plugin's default)"},
			// A piece with no "=" is the rest of the value before it, which
			// reaches the plugin whole.
			{[]string{"--param", "p=0.1,0.2,steps=3"}, `param p="0.1,0.2": want a number in [0,1]`},
		} {
			_, _, err := runCmd(t, "", append([]string{"plugin", "check", icmf, "--log-level", "warn"}, tc.args...)...)
			require.ErrorContains(t, err, tc.want, "%v", tc.args)
		}
	})

	_, _, err = runCmd(t, "", "plugin", "check", faulty, "--sha256", "00", "--log-level", "warn")
	require.ErrorContains(t, err, "--sha256 \"00\": want 64 hex digits")
	_, _, err = runCmd(t, "", "plugin", "check", "nosuch", "--plugin-dir", filepath.Dir(icmf))
	require.ErrorContains(t, err, "sourcewatch-forward-nosuch does not exist")
}

// On a graph whose components are too small for the default spread to
// reach 20% of the nodes, the fit set is observed lower instead of the
// check failing for want of flags it does not have.
func TestPluginCheckOnSmallComponents(t *testing.T) {
	edges := filepath.Join(t.TempDir(), "triangles.edges")
	var b strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "%d %d\n%d %d\n%d %d\n", 3*i, 3*i+1, 3*i+1, 3*i+2, 3*i+2, 3*i)
	}
	require.NoError(t, os.WriteFile(edges, []byte(b.String()), 0o600))
	out, _, err := runCmd(t, "", "plugin", "check", forwardtest.Build(t, "icmf"), "--graph", edges, "--cascades", "10", "--log-level", "warn")
	require.NoError(t, err, out)
	require.Contains(t, out, "\nPASS\n")
}

// Each check's line is printed as the check ends, not with the whole
// report: a plugin whose Fit hangs shows what passed before it while
// check waits out --fit-idle-timeout, and an interrupt ends the wait.
func TestPluginCheckPrintsEachLineAsItEnds(t *testing.T) {
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	var stdout, stderr lockedBuffer
	root := newRootCmd(&stdout, &stderr)
	root.SetArgs([]string{"plugin", "check", faulty, "--param", "fault=hang", "--fit-idle-timeout", "10m", "--log-level", "warn"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "PASS  configure") }, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, stdout.String(), "plugin "+faulty+"\n  PASS  handshake")
	select {
	case err := <-done:
		t.Fatalf("check ended while the fit hangs: %v\n%s", err, stdout.String())
	case <-time.After(300 * time.Millisecond):
	}
	require.NotContains(t, stdout.String(), "fit ")
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("an interrupt did not end the wait for a hung fit")
	}
	require.Contains(t, stdout.String(), "FAIL  fit")
	require.Contains(t, stdout.String(), "FAIL: fit")
}

// A batch larger than inference ever sends is refused by name: --batch
// 100000000 died of a 51 GB allocation for the check's inputs.
func TestPluginCheckRefusesAHugeBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sourcewatch-forward-none")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755))
	for _, b := range []string{"4097", "100000000"} {
		_, _, err := runCmd(t, "", "plugin", "check", path, "--batch", b, "--log-level", "warn")
		require.ErrorContains(t, err, "--batch: "+b+", want at most 4096")
	}
}
