package eval

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

// directedRandom is randomGraph's edges as arcs.
func directedRandom(n, extra int, seed uint64) *graph.Graph {
	return graph.New(n, randomGraph(n, extra, seed).Edges(), nil, true, false)
}

// The methods that need an undirected graph are named all at once by
// Validate, before anything is fitted; an undirected graph takes them all.
func TestConfigValidateNamesEveryMethodTheGraphCannotRun(t *testing.T) {
	dir, und := directedRandom(50, 50, 1), randomGraph(50, 50, 1)
	for _, tc := range []struct {
		name    string
		g       *graph.Graph
		methods []string
		want    string // "" = valid
	}{
		{"both on directed", dir, []string{"lpsi", "netsleuth", "jordan", "ojc", "infected"},
			"netsleuth, ojc need an undirected graph and this graph is directed"},
		{"one on directed", dir, []string{"ojc", "infected"}, "ojc needs an undirected graph"},
		{"none on directed", dir, []string{"lpsi", "jordan", "infected", "degree", "prior", "random"}, ""},
		{"all on undirected", und, builtin, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Methods = tc.methods
			err := cfg.Validate(tc.g)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorIs(t, err, ErrUnsupportedGraph)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestUnsupported(t *testing.T) {
	dir, und := directedRandom(20, 10, 2), randomGraph(20, 10, 2)
	require.Equal(t, []string{"netsleuth", "ojc"}, Unsupported(dir, DefaultMethods()))
	require.Empty(t, Unsupported(und, DefaultMethods()))
	require.NoError(t, CheckGraph(und, DefaultMethods()))
	require.True(t, NeedsUndirected("netsleuth"))
	require.False(t, NeedsUndirected("jordan"))
}

// Unsupported is the whole truth: every method it does not name fits on a
// directed graph, and every one it names refuses one.
func TestUnsupportedMatchesFit(t *testing.T) {
	g := directedRandom(40, 60, 3)
	cs := siCascades(g, 20, 2, 0.4, 0.3, 5)
	methods := append(slices.Clone(builtin), "local-mlp")
	bad := Unsupported(g, methods)
	for _, name := range methods {
		t.Run(name, func(t *testing.T) {
			params := map[string]string{}
			if name == "local-mlp" {
				params["steps"] = "20"
			}
			m := newMethod(t, name, g, params)
			err := m.Fit(context.Background(), g, cs[:12], cs[12:])
			if slices.Contains(bad, name) {
				require.ErrorContains(t, err, "needs an undirected graph")
				return
			}
			require.NoError(t, err)
		})
	}
}

// PluginDir is the plugin_dir of every method with a forward model that
// does not name its own, and of no other method.
func TestConfigPluginDir(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pluginDir string
		params    map[string]string
		method    string
		want      string // "" = no plugin_dir
	}{
		{"slvae takes it", "/opt/plugins", nil, "slvae", "/opt/plugins"},
		{"an ablation takes it", "/opt/plugins", nil, "slvae-a", "/opt/plugins"},
		{"an expansion takes it", "/opt/plugins", nil, "slvae[gat]", "/opt/plugins"},
		{"its own wins", "/opt/plugins", map[string]string{"slvae.plugin_dir": "/mine"}, "slvae", "/mine"},
		{"the other's own does not", "/opt/plugins", map[string]string{"slvae-a.plugin_dir": "/mine"}, "slvae", "/opt/plugins"},
		{"unset leaves the default", "", nil, "slvae", ""},
		{"not a forward-model method", "/opt/plugins", nil, "lpsi", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{PluginDir: tc.pluginDir, Params: tc.params}
			got, ok := cfg.paramsFor(tc.method)["plugin_dir"]
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, got)
		})
	}

	// and it reaches the method: SL-VAE looks for its plugin there
	cfg := testConfig()
	cfg.Methods, cfg.PluginDir = []string{"slvae"}, "/opt/plugins"
	m, err := newSLVAE(Env{Graph: path(4), Params: cfg.paramsFor("slvae")}, "slvae", slvaeVariants["slvae"])
	require.NoError(t, err)
	require.Equal(t, "/opt/plugins", m.pluginDir)
	// Validate finds the plugin there (without starting it), before any
	// cascade is simulated.
	err = cfg.Validate(path(4))
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, `slvae: forward plugin "deepis": /opt/plugins/sourcewatch-forward-deepis does not exist`)
	require.ErrorContains(t, err, "to look for this one's elsewhere: slvae.plugin_dir=DIR")
	cfg.PluginDir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cfg.PluginDir, "sourcewatch-forward-deepis"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, cfg.Validate(path(4)), "plugin_dir is a parameter slvae knows")
}
