package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
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
		"--val-solves", "8", "--test-solves", "8", "--restarts", "4", "--out", bundle, "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "36 train, 12 validation, 12 test")
	require.Contains(t, out, "forward     icmf")
	return bundle, pluginDir
}

// TestDemo runs the make-run demo end to end: the daemon on an embedded
// server, a real plugin process, one replayed cascade, its alert and its
// resolution.
func TestDemo(t *testing.T) {
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
	out, _, err := runCmd(t, "", "demo", "--config", config, "--cascades", "1", "--speed", "20", "--seed", "4", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, `sourcewatch demo: graph "club" (34 nodes)`)
	require.Contains(t, out, "--- cascade 1: true sources")
	require.Contains(t, out, "FIRING club")
	require.Contains(t, out, "RESOLVED club")
	require.Contains(t, out, "forward icmf")
}
