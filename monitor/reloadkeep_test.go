package monitor

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// reloadKeepEnv is what the cases of TestReloadKeepsUnchangedModels
// change: a plugin dir of the test's own (so a case can replace the
// binary) and the bundle files.
type reloadKeepEnv struct {
	dir string
	// bundle is the file the graph is configured with; retrained is
	// another bundle for the same graph and plugin, unrecorded the first
	// one recording no plugin checksum.
	bundle, retrained, unrecorded string
}

// A reload keeps a graph's running localizer, plugin process and all,
// when nothing it was built from changed, and rebuilds it otherwise: a
// bundle file rewritten in place, other forward params, a plugin binary
// replaced under allow_unverified, a plugin that died. A kept graph keeps
// its relaunch budget and the incident it inferred; a rebuilt one starts
// afresh on both. Real parts: the daemon on its embedded NATS server,
// BundleLocalizers on a built icmf plugin, bundles trained here.
func TestReloadKeepsUnchangedModels(t *testing.T) {
	plugin, sum, g, b, _ := karateICMFBundle(t)
	other := diffusion.DefaultConfig()
	other.Beta = 0.2 // another spread: other cascades, another bundle
	b2, _ := trainSmallICMFBundle(t, g, other, sum)
	require.NotEqual(t, b.Manifest.ID, b2.Manifest.ID)
	bin, err := os.ReadFile(plugin)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		// initial adjusts the config the daemon starts on.
		initial func(gc *GraphConfig, env reloadKeepEnv)
		// change edits the config and the files before the reload.
		change func(t *testing.T, gc *GraphConfig, env reloadKeepEnv, l *bundleLocalizer)
		// failing marks the graph's last inference failed.
		failing bool
		keep    bool
		// changed is the reload line's changed keys.
		changed []string
	}{
		{
			name: "window only",
			change: func(_ *testing.T, gc *GraphConfig, _ reloadKeepEnv, _ *bundleLocalizer) {
				gc.Window = 2 * time.Hour
			},
			keep: true, changed: []string{"graphs[karate].window"},
		},
		{
			name: "nothing",
			keep: true,
		},
		{
			name: "no params given as an empty map",
			change: func(_ *testing.T, gc *GraphConfig, _ reloadKeepEnv, _ *bundleLocalizer) {
				gc.ForwardParams = map[string]string{}
			},
			// The key's value differs (nil to {}), the launch does not.
			keep: true, changed: []string{"graphs[karate].forward_params"},
		},
		{
			name: "bundle retrained in place",
			change: func(t *testing.T, _ *GraphConfig, env reloadKeepEnv, _ *bundleLocalizer) {
				copyFile(t, env.retrained, env.bundle)
			},
			changed: []string{"graphs[karate].model"},
		},
		{
			name: "forward params",
			change: func(_ *testing.T, gc *GraphConfig, _ reloadKeepEnv, _ *bundleLocalizer) {
				gc.ForwardParams = map[string]string{"steps": "3"}
			},
			changed: []string{"graphs[karate].forward_params"},
		},
		{
			name: "unverified plugin replaced",
			initial: func(gc *GraphConfig, env reloadKeepEnv) {
				gc.Bundle, gc.AllowUnverified = env.unrecorded, true
			},
			change: func(t *testing.T, _ *GraphConfig, env reloadKeepEnv, _ *bundleLocalizer) {
				// Another build (a byte more, which runs the same),
				// renamed over the running binary as an install does.
				path := filepath.Join(env.dir, forward.BinaryPrefix+"icmf")
				tmp := path + ".new"
				require.NoError(t, os.WriteFile(tmp, append(append([]byte(nil), bin...), 0), 0o755))
				require.NoError(t, os.Rename(tmp, path))
			},
		},
		{
			// healthy as a process, but its calls fail: rebuilt
			name:    "last inference failed",
			failing: true,
		},
		{
			name: "plugin died",
			change: func(t *testing.T, _ *GraphConfig, _ reloadKeepEnv, l *bundleLocalizer) {
				require.NoError(t, syscall.Kill(l.PluginPID(), syscall.SIGKILL))
				require.Eventually(t, func() bool { return !l.Healthy() }, 10*time.Second, 5*time.Millisecond)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := reloadKeepEnv{dir: t.TempDir()}
			require.NoError(t, os.WriteFile(filepath.Join(env.dir, forward.BinaryPrefix+"icmf"), bin, 0o755))
			files := t.TempDir()
			env.bundle, env.retrained, env.unrecorded = filepath.Join(files, "karate.swb"), filepath.Join(files, "retrained.swb"), filepath.Join(files, "unrecorded.swb")
			require.NoError(t, b.WriteFile(env.bundle))
			require.NoError(t, b2.WriteFile(env.retrained))
			unrecorded := *b
			unrecorded.Manifest.Forward.SHA256 = ""
			require.NoError(t, unrecorded.WriteFile(env.unrecorded))

			cfg := testConfig(t, "karate")
			gc := &cfg.Graphs[0]
			gc.Edges, gc.Bundle = "../configs/demo/karate.edges", env.bundle
			// No tick: a dead plugin is left for the reload to find, not
			// relaunched by the graph's next tick.
			gc.Interval, gc.MinInfected = time.Hour, 1000
			if tc.initial != nil {
				tc.initial(gc, env)
			}
			next := cfg
			next.Graphs = []GraphConfig{*gc}
			core, logs := observer.New(zapcore.InfoLevel)
			log := zap.New(core)
			r := start(t, cfg, WithGraphs(map[string]*graph.Graph{"karate": g}), WithLogger(log),
				WithLocalizerFactory(BundleLocalizers(env.dir, log)), WithPreflight(BundlePreflight(env.dir)),
				WithReload(func(context.Context) (Config, error) { return next, nil }))
			gr := r.d.graphs["karate"]
			before := gr.loc.Load()
			l := before.localizer().(*bundleLocalizer)
			pid := l.PluginPID()
			require.Positive(t, pid)
			// A relaunch spent and an incident inferred, which a kept
			// model keeps.
			gr.relaunches.Store(1)
			inferred := make([]bool, g.N())
			gr.inferred.Store(&inferred)
			if tc.failing {
				msg := "forward plugin: predict: boom"
				gr.lastErr.Store(&msg)
				gr.failing.Store(true)
			}
			if tc.change != nil {
				tc.change(t, &next.Graphs[0], env, l)
			}

			require.NoError(t, r.d.Reload(t.Context()))
			lines := logs.FilterMessage("reloaded").All()
			require.Len(t, lines, 1)
			fields := lines[0].ContextMap()
			require.Contains(t, fields, "kept")
			after := gr.loc.Load()
			now := after.localizer().(*bundleLocalizer)
			require.Equal(t, next.Graphs[0], *gr.gc.Load(), "the new settings apply either way")
			if len(tc.changed) == 0 {
				require.Empty(t, fields["changed"])
			} else {
				want := make([]any, len(tc.changed))
				for i, k := range tc.changed {
					want[i] = k
				}
				require.Equal(t, want, fields["changed"])
			}
			if tc.keep {
				require.Same(t, before, after, "the running localizer is kept")
				require.Equal(t, pid, now.PluginPID(), "and its plugin process")
				require.Equal(t, []any{"karate"}, fields["kept"])
				require.EqualValues(t, 1, gr.relaunches.Load())
				require.NotNil(t, gr.inferred.Load())
				gr.win.mu.Lock()
				length, decay := gr.win.length, gr.win.decay
				gr.win.mu.Unlock()
				require.Equal(t, next.Graphs[0].Window, length, "the window's settings apply to a kept model too")
				require.Equal(t, next.Graphs[0].Decay, decay)
				return
			}
			require.NotSame(t, before, after, "a new localizer")
			require.NotEqual(t, pid, now.PluginPID(), "on a new plugin process")
			require.True(t, now.Healthy())
			require.Empty(t, fields["kept"])
			require.Zero(t, gr.relaunches.Load())
			require.Nil(t, gr.inferred.Load(), "the new model infers the open incident again")
			// The old one is closed, so its process is gone.
			require.False(t, l.Healthy())
		})
	}
}

// A failed reload closes only the localizers it built: a graph whose
// model it kept runs on, as does one whose new build failed.
func TestReloadFailingKeepsKeptModels(t *testing.T) {
	plugin, _, g, b, _ := karateICMFBundle(t)
	dir := filepath.Dir(plugin)
	files := t.TempDir()
	cfg := testConfig(t, "a", "z")
	for i := range cfg.Graphs {
		gc := &cfg.Graphs[i]
		gc.Edges, gc.Bundle = "../configs/demo/karate.edges", filepath.Join(files, gc.Name+".swb")
		gc.Interval, gc.MinInfected = time.Hour, 1000
		require.NoError(t, b.WriteFile(gc.Bundle))
	}
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	// a is rebuilt (other params), z kept, but the third build fails:
	// steps out of range is refused when the plugin is configured.
	next.Graphs[0].ForwardParams = map[string]string{"steps": "3"}
	log := zap.NewNop()
	factory := BundleLocalizers(dir, log)
	var made []Localizer
	r := start(t, cfg, WithGraphs(map[string]*graph.Graph{"a": g, "z": g}), WithLogger(log),
		WithLocalizerFactory(func(ctx context.Context, gc GraphConfig, g *graph.Graph) (Localizer, error) {
			l, err := factory(ctx, gc, g)
			if err == nil {
				made = append(made, l)
			}
			return l, err
		}),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	a, z := r.d.graphs["a"].loc.Load(), r.d.graphs["z"].loc.Load()
	require.Len(t, made, 2)

	// z unchanged but for a bad param: a is built, z's build fails.
	next.Graphs[1].ForwardParams = map[string]string{"steps": "0"}
	err := r.d.Reload(t.Context())
	require.ErrorIs(t, err, ErrReload)
	// Named once, by its config key.
	require.ErrorContains(t, err, `reload failed: graphs[z]: forward plugin sourcewatch-forward-icmf: configure: `)
	require.Len(t, made, 3, "a was built")
	require.False(t, made[2].(*bundleLocalizer).Healthy(), "and closed again")
	require.Same(t, a, r.d.graphs["a"].loc.Load())
	require.Same(t, z, r.d.graphs["z"].loc.Load())
	require.True(t, a.localizer().(*bundleLocalizer).Healthy())
	require.True(t, z.localizer().(*bundleLocalizer).Healthy())

	// z back as it was: kept, and a built anew.
	next.Graphs[1].ForwardParams = nil
	require.NoError(t, r.d.Reload(t.Context()))
	require.Len(t, made, 4)
	require.Same(t, made[3], r.d.graphs["a"].loc.Load().localizer())
	require.Same(t, z, r.d.graphs["z"].loc.Load())
	require.True(t, z.localizer().(*bundleLocalizer).Healthy())
}

// Unchanged compares every key the factory reads: a key of GraphConfig
// that changes the plugin's launch (launchOptions) or the bundle read
// makes it report a change, and any other does not. A key added to
// launchOptions but not to sameLaunch fails here.
func TestBundleLocalizerUnchangedReadsTheFactoryKeys(t *testing.T) {
	plugin, _, g, b, _ := karateICMFBundle(t)
	dir := filepath.Dir(plugin)
	gc := DefaultGraphConfig("karate")
	gc.Edges, gc.Bundle = "../configs/demo/karate.edges", filepath.Join(t.TempDir(), "karate.swb")
	require.NoError(t, b.WriteFile(gc.Bundle))
	l, err := BundleLocalizers(dir, zap.NewNop())(t.Context(), gc, g)
	require.NoError(t, err)
	defer l.Close()
	uc := l.(unchangedChecker)
	same, err := uc.Unchanged(t.Context(), gc)
	require.NoError(t, err)
	require.True(t, same)

	// Relaunched on the bundle it loaded (its plugin died), it is as
	// unchanged as before.
	re, err := l.(relauncher).Relaunch(t.Context())
	require.NoError(t, err)
	defer re.Close()
	same, err = re.(unchangedChecker).Unchanged(t.Context(), gc)
	require.NoError(t, err)
	require.True(t, same, "relaunched")

	v := reflect.ValueOf(gc)
	for i := range v.NumField() {
		field := v.Type().Field(i)
		mut := gc
		f := reflect.ValueOf(&mut).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"steps": "3"}))
		default:
			t.Fatalf("GraphConfig.%s: a %s, which this test cannot change", field.Name, f.Kind())
		}
		read := field.Name == "Bundle" || !reflect.DeepEqual(launchOptions(dir, gc), launchOptions(dir, mut))
		same, err := uc.Unchanged(t.Context(), mut)
		require.NoError(t, err, field.Name)
		require.Equal(t, !read, same, "GraphConfig.%s", field.Name)
	}

	// The file's content, not its name: a bundle file gone cannot be
	// told unchanged.
	require.NoError(t, os.Remove(gc.Bundle))
	_, err = uc.Unchanged(t.Context(), gc)
	require.ErrorIs(t, err, os.ErrNotExist)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, b.WriteFile(gc.Bundle))
	_, err = uc.Unchanged(ctx, gc)
	require.ErrorIs(t, err, context.Canceled)
}

// copyFile replaces dst by a copy of src, renamed over it as train's
// WriteFile does.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := dst + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, dst))
}

// A reload warns of an edge file edited in place since the start (and of
// one that no longer loads): edge files are read at start only, so the
// daemon goes on serving the old graph, and its next start reads the new
// one and refuses the bundle trained on the old. Such a reload said
// "reloaded" and nothing else, and the next restart failed.
func TestReloadWarnsOfAnEdgeFileChangedInPlace(t *testing.T) {
	edges := filepath.Join(t.TempDir(), "p.edges")
	require.NoError(t, os.WriteFile(edges, []byte("0 1\n1 2\n2 3\n"), 0o644))
	cfg := testConfig(t, "p")
	cfg.Graphs[0].Edges = edges
	core, logs := observer.New(zapcore.WarnLevel)
	r := start(t, cfg, WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)),
		WithReload(func(context.Context) (Config, error) { return cfg, nil }))
	require.NoError(t, r.d.Reload(context.Background()))
	require.Empty(t, logs.FilterMessageSnippet("edge file").All(), "the file is as it was")

	require.NoError(t, os.WriteFile(edges, []byte("0 1\n1 2\n2 3\n3 4\n"), 0o644))
	require.NoError(t, r.d.Reload(context.Background()), "a warning, not a refusal: the running graph is fine")
	warned := logs.FilterMessageSnippet("edge file has changed since the start").All()
	require.Len(t, warned, 1)
	m := warned[0].ContextMap()
	require.Equal(t, "p", m["graph"])
	require.EqualValues(t, 4, m["nodes_running"])
	require.EqualValues(t, 5, m["nodes_in_file"])
	require.Equal(t, 4, r.d.graphs["p"].g.N(), "the daemon serves the graph read at start")

	require.NoError(t, os.Remove(edges))
	require.NoError(t, r.d.Reload(context.Background()))
	require.Len(t, logs.FilterMessageSnippet("edge file no longer loads").All(), 1)
}
