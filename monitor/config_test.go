package monitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/graph"
)

func loadYAML(t *testing.T, yaml string, env map[string]string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	for k, v := range env {
		t.Setenv(k, v)
	}
	v := viper.New()
	v.SetEnvPrefix("SOURCEWATCH")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	v.SetConfigFile(path)
	require.NoError(t, v.ReadInConfig())
	return Load(v)
}

const minimalYAML = `
graphs:
  - name: karate
    edges: karate.edges
    bundle: karate.swb
`

func TestLoadDefaultsAndEnv(t *testing.T) {
	cfg, err := loadYAML(t, minimalYAML, map[string]string{"SOURCEWATCH_NATS_URL": "nats://x:4222", "SOURCEWATCH_WORKERS": "5"})
	require.NoError(t, err)
	require.Equal(t, "nats://x:4222", cfg.NATS.URL)
	require.Equal(t, 5, cfg.Workers)
	require.Equal(t, DefaultPrefix, cfg.Subjects.Prefix)
	require.Equal(t, DefaultHTTPAddr, cfg.HTTP.Addr)
	require.Equal(t, DefaultListen, cfg.NATS.Listen)
	want := DefaultGraphConfig("karate")
	want.Edges, want.Bundle = "karate.edges", "karate.swb"
	require.Equal(t, want, cfg.Graphs[0])
}

func TestLoadFull(t *testing.T) {
	cfg, err := loadYAML(t, `
nats:
  listen: "-1"
  tls: {cert: c.pem, key: k.pem}
subjects: {prefix: acme.sw}
snapshot_interval: 5s
graphs:
  - name: a
    edges: a.edges
    bundle: a.swb
    forward: si
    forward_params: {beta: "0.2"}
    window: 30m
    decay: 10m
    interval: 2s
    min_changes: 3
    min_infected: 4
    restarts: 0
`, nil)
	require.NoError(t, err)
	g := cfg.Graphs[0]
	require.Equal(t, "acme.sw", cfg.Subjects.Prefix)
	require.Equal(t, 5*time.Second, cfg.SnapshotInterval)
	require.Equal(t, map[string]string{"beta": "0.2"}, g.ForwardParams)
	require.Equal(t, 30*time.Minute, g.Window)
	require.Equal(t, 10*time.Minute, g.Decay)
	require.Equal(t, 2*time.Second, g.Interval)
	require.Equal(t, 3, g.MinChanges)
	require.Equal(t, 4, g.MinInfected)
	require.Equal(t, 0, g.Restarts)
	l, err := parseListen(cfg.NATS.Listen)
	require.NoError(t, err)
	require.True(t, l.off)
}

// A misspelt or dashed key in a section is an error naming it, not a
// silent default.
func TestLoadRefusesUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"graph key", minimalYAML + "    intervall: 1s\n", `graphs[0]: unknown key "intervall"; did you mean interval? (known: name, edges`},
		{"dashed graph key", minimalYAML + "    min-infected: 4\n", `graphs[0]: unknown key "min-infected": config keys use underscores; did you mean min_infected?`},
		{"nested section", "nats:\n  tls:\n    cafile: ca.pem\n" + minimalYAML, `nats.tls: unknown key "cafile" (known: cert, key, ca)`},
		{"section", "ha:\n  enable: true\n" + minimalYAML, `ha: unknown key "enable"; did you mean enabled?`},
		{"far from every key", "ha:\n  colour: red\n" + minimalYAML, `ha: unknown key "colour" (known: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml, nil)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Top-level keys are shared with the command's flags and not checked;
	// maps (forward_params) hold the plugin's own keys.
	_, err := loadYAML(t, "log_level: debug\n"+minimalYAML+"    forward_params: {anything: \"1\"}\n", nil)
	require.NoError(t, err)
}

func TestValidateNamesTheKey(t *testing.T) {
	two := minimalYAML + `
  - name: jazz
    edges: jazz.edges
    bundle: jazz.swb
`
	tests := []struct {
		name, yaml, want string
	}{
		{"window zero", two + "    window: 0s\n", "graphs[1].window: must be > 0"},
		{"negative decay", two + "    decay: -1s\n", "graphs[1].decay: must be >= 0"},
		{"negative call_timeout", two + "    call_timeout: -1s\n", "graphs[1].call_timeout: must be >= 0 (0: the default, 10s plus 1µs per row × (nodes + arcs)), got -1s"},
		{"interval", two + "    interval: 0s\n", "graphs[1].interval: must be >= 5ms, got 0s"},
		{"fractional count", minimalYAML + "workers: 1.5\n", "workers: 1.5 is not a whole number"},
		{"huge count", minimalYAML + "workers: 99999999999999999999\n", "workers: 1e+20 is out of range"},
		{"fractional graph count", two + "    min_infected: 2.5\n", "graphs[1].min_infected: 2.5 is not a whole number"},
		{"interval too short", two + "    interval: 1ns\n", "graphs[1].interval: must be >= 5ms, got 1ns (1m is a minute, 1ms a millisecond)"},
		{"min_infected", two + "    min_infected: 0\n", "graphs[1].min_infected: must be >= 1"},
		{"dup name", minimalYAML + minimalYAML[len("\ngraphs:\n"):], `graphs[1].name: "karate" already used by graphs[0]`},
		{"bad name", strings.Replace(minimalYAML, "karate\n", "a.b\n", 1), `graphs[0].name: "a.b"`},
		{"reserved name", strings.Replace(minimalYAML, "karate\n", "unrouted\n", 1), `graphs[0].name: "unrouted" is reserved: its consumer name sourcewatch-unrouted`},
		{"name too long", strings.Replace(minimalYAML, "karate\n", strings.Repeat("h", MaxGraphName+1)+"\n", 1), `graphs[0].name: 244 characters: at most 243 (its consumer, sourcewatch-<name>, takes a name of at most 255)`},
		{"no bundle", "graphs:\n  - {name: x, edges: e}\n", "graphs[0].bundle: must be set"},
		{"no graphs", "workers: 1\n", "graphs: at least one graph"},
		{"workers", minimalYAML + "workers: 0\n", "workers: must be > 0"},
		{"too many workers", minimalYAML + "workers: 100000000\n", "workers: at most 1024 (more than the graphs do nothing"},
		{"listen", minimalYAML + "nats: {listen: nonsense}\n", "nats.listen: want host:port"},
		{"prefix", minimalYAML + "subjects: {prefix: 'a.>'}\n", "subjects.prefix"},
		{"checksum", strings.Replace(minimalYAML, "bundle: karate.swb", "bundle: k\n    forward_checksum: abc", 1), "graphs[0].forward_checksum"},
		{"tls", minimalYAML + "nats: {tls: {cert: c}}\n", "nats.tls: cert and key go together"},
		{"dup window", minimalYAML + "events: {max_age: 1m}\n", "events.max_age: 1m0s is shorter than the 2m0s duplicate window"},
		{"replay", minimalYAML + "snapshot_interval: 1h\nevents: {max_age: 30m}\n", "events.max_age: 30m0s is shorter than snapshot_interval"},
		{"alert cap", minimalYAML + "alerts: {max_bytes: 65536}\n", "alerts.max_bytes: 65536 is below 1048576 (1 MiB)"},
		{"future skew past a year", minimalYAML + "max_future_skew: 2100000h\n", "max_future_skew: must be in 0..8760h0m0s (a year), got 2100000h0m0s"},
		{"forward param a list", strings.Replace(minimalYAML, "bundle: karate.swb", "bundle: karate.swb\n    forward_params: {p: [1]}", 1), "graphs[0].forward_params.p: want a plain value (a string, number or true/false), got a list"},
		{"dead-letter cap", minimalYAML + "deadletter: {max_bytes: 4096}\n", "deadletter.max_bytes: 4096 is below 1048576 (1 MiB)"},
		{"dead-letter age", minimalYAML + "deadletter: {max_age: 10ms}\n", "deadletter.max_age: 10ms: want 0 (no limit) or at least 1s"},
		{"alert age", minimalYAML + "alerts: {max_age: 500ms}\n", "alerts.max_age: 500ms: want 0 (no limit) or at least 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml, nil)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConfig))
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// durationKeys lists every time.Duration key of Config by its path, graph
// keys as graphs[0].<key>.
func durationKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("mapstructure")
		switch {
		case key == "":
		case f.Type == durationType:
			keys = append(keys, prefix+key)
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, durationKeys(f.Type, prefix+key+".")...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			keys = append(keys, durationKeys(f.Type.Elem(), prefix+key+"[0].")...)
		}
	}
	return keys
}

// withKey returns minimalYAML with key (a path from durationKeys) set to
// the YAML value val.
func withKey(key, val string) string {
	if g, ok := strings.CutPrefix(key, "graphs[0]."); ok {
		return minimalYAML + "    " + g + ": " + val + "\n"
	}
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	return b.String() + " " + val + "\n" + minimalYAML
}

// New checks only what the daemon itself reads: a graph given WithGraphs
// needs no edge file, and a custom factory no bundle; the bundle
// factory and preflight refuse an empty bundle themselves.
func TestNewWaivesWhatTheOptionsSupply(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Graphs = []GraphConfig{DefaultGraphConfig("p")}
	given := WithGraphs(map[string]*graph.Graph{"p": pathGraph(t, 4)})
	factory := WithLocalizerFactory(func(context.Context, GraphConfig, *graph.Graph) (Localizer, error) {
		return nil, errors.New("unused")
	})
	for _, tc := range []struct {
		name string
		opts []Option
		want string // "" for no error
	}{
		{"neither", nil, "graphs[0].edges: must be set"},
		{"factory alone", []Option{factory}, "graphs[0].edges: must be set"},
		{"graph alone", []Option{given}, "graphs[0].bundle: must be set"},
		{"graph and factory", []Option{given, factory}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(cfg, tc.opts...)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Validate is a config file's check, for serve: both are needed.
	require.ErrorContains(t, cfg.Validate(), "graphs[0].edges: must be set")

	_, err := BundleLocalizers("", zap.NewNop())(context.Background(), cfg.Graphs[0], pathGraph(t, 4))
	require.EqualError(t, err, "graphs[p].bundle: must be set")
	require.EqualError(t, BundlePreflight("")(cfg.Graphs[0], pathGraph(t, 4)), "bundle: must be set")
}

// Every duration key with a value that is not a duration is an error
// naming the key, the value and the form wanted, not mapstructure's
// "'graphs[0].window' time: unknown unit".
func TestLoadNamesBadDurations(t *testing.T) {
	keys := durationKeys(reflect.TypeOf(Config{}), "")
	require.Subset(t, keys, []string{"snapshot_interval", "max_future_skew", "events.max_age", "ha.lease_ttl",
		"graphs[0].window", "graphs[0].decay", "graphs[0].interval"})
	for _, key := range keys {
		for _, tc := range []struct{ val, want string }{
			{"60 seconds", `"60 seconds" is not a duration (want e.g. 90s, 5m, 1h)`},
			{"5 m", `"5 m" is not a duration (want e.g. 90s, 5m, 1h)`},
			{`""`, `"" is not a duration (want e.g. 90s, 5m, 1h)`},
			// A bare number would be nanoseconds.
			{"60", `60 is not a duration (want e.g. 90s, 5m, 1h; a number needs a unit)`},
			{"true", `true is not a duration (want e.g. 90s, 5m, 1h)`},
			// A duration, but past what one holds.
			{"99999999h", `"99999999h" is longer than a duration can be (at most 2562047h47m16.854775807s, about 292 years)`},
		} {
			t.Run(key+"="+tc.val, func(t *testing.T) {
				_, err := loadYAML(t, withKey(key, tc.val), nil)
				require.ErrorIs(t, err, ErrConfig)
				require.EqualError(t, err, "invalid config: "+key+": "+tc.want)
			})
		}
		// Good values still load: the check refuses only what is not a
		// duration (0 needs no unit).
		for _, val := range []string{"90s", "1h30m", "0"} {
			t.Run(key+"="+val, func(t *testing.T) {
				_, err := loadYAML(t, withKey(key, val), nil)
				if err != nil {
					require.NotContains(t, err.Error(), "is not a duration")
				}
			})
		}
	}
}

// A duration from the environment is judged the same way.
func TestLoadNamesBadDurationsFromEnv(t *testing.T) {
	for _, tc := range []struct{ env, key string }{
		{"SOURCEWATCH_SNAPSHOT_INTERVAL", "snapshot_interval"},
		{"SOURCEWATCH_EVENTS_MAX_AGE", "events.max_age"},
		{"SOURCEWATCH_HA_LEASE_TTL", "ha.lease_ttl"},
		{"SOURCEWATCH_MAX_FUTURE_SKEW", "max_future_skew"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			_, err := loadYAML(t, minimalYAML, map[string]string{tc.env: "60 seconds"})
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.key+`: "60 seconds" is not a duration (want e.g. 90s, 5m, 1h)`)
		})
	}
}

// A reload that reads a bad duration fails with the same message and
// keeps the running setup.
func TestReloadNamesBadDuration(t *testing.T) {
	cfg := testConfig(t, "p")
	f := &factoryOf{}
	yaml := "graphs:\n  - name: p\n    edges: p.edges\n    bundle: p.swb\n    window: 60 seconds\n"
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return loadYAML(t, yaml, nil) }))
	err := r.d.Reload(t.Context())
	require.ErrorIs(t, err, ErrReload)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, `graphs[0].window: "60 seconds" is not a duration (want e.g. 90s, 5m, 1h)`)
	require.Equal(t, cfg.Graphs[0].Window, r.d.Config().Graphs[0].Window)
}

// A key's error names the file and line it was written on, or the
// environment variable that set it.
func TestLocateKeyErrorNamesFileAndLine(t *testing.T) {
	const doc = `nats:
  listen: "127.0.0.1:4222"
graphs:
  - name: karate
    edges: karate.edges
    bundle: karate.swb
  - name: grid
    edges: grid.edges
    bundle: grid.swb
    Window: 0s
    intervall: 2s
`
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"validate, second item", doc[:strings.Index(doc, "    intervall")], nil,
			"c.yaml:10: graphs[1].window: must be > 0"},
		{"unknown key, at itself", doc, nil,
			`c.yaml:11: graphs[1]: unknown key "intervall"`},
		{"duration", strings.Replace(doc, "    intervall: 2s\n", "    decay: 10 minutes\n", 1), nil,
			`c.yaml:11: graphs[1].decay: "10 minutes" is not a duration`},
		{"whole number", minimalYAML + "    min_changes: 1.5\n", nil,
			"c.yaml:6: graphs[0].min_changes: 1.5 is not a whole number"},
		{"set by the environment", minimalYAML, map[string]string{"SOURCEWATCH_WORKERS": "1.5"},
			"invalid config: $SOURCEWATCH_WORKERS: workers: 1.5 is not a whole number"},
		{"a word for a number", minimalYAML + "    min_infected: three\n", nil,
			`c.yaml:6: graphs[0].min_infected: "three" is not a whole number`},
		{"a word for a number, from the environment", minimalYAML, map[string]string{"SOURCEWATCH_WORKERS": "abc"},
			`invalid config: $SOURCEWATCH_WORKERS: workers: "abc" is not a whole number`},
		{"not a bool", minimalYAML + "    directed: maybe\n", nil,
			"c.yaml:6: graphs[0].directed: maybe is not true or false"},
		{"a number for a bool that turns a check off", minimalYAML + "    allow_unverified: 2\n", nil,
			"c.yaml:6: graphs[0].allow_unverified: 2 is not true or false"},
		{"a letter for a bool", minimalYAML + "    allow_unverified: \"T\"\n", nil,
			"c.yaml:6: graphs[0].allow_unverified: T is not true or false"},
		{"yes for a bool, from the environment", minimalYAML, map[string]string{"SOURCEWATCH_HA_ENABLED": "yes"},
			"invalid config: $SOURCEWATCH_HA_ENABLED: ha.enabled: yes is not true or false"},
		{"a section's own value", "nats:\n  tls:\n    cert: c.pem\n" + minimalYAML, nil,
			"c.yaml:2: nats.tls: cert and key go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml, tc.env)
			require.Error(t, err)
			file := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(file, []byte(tc.yaml), 0o600))
			located := LocateKeyError(err, file, "SOURCEWATCH")
			require.ErrorIs(t, located, ErrConfig)
			require.ErrorContains(t, located, tc.want)
			var ke *KeyError
			require.ErrorAs(t, located, &ke)
		})
	}
	// Errors that are not a key's come back as they were; a file of
	// another format is named without a line.
	other := errors.New("other")
	require.Same(t, other, LocateKeyError(other, "c.yaml", "SOURCEWATCH"))
	require.EqualError(t, LocateKeyError(keyError("ha.ttl", "too short"), "c.json", ""), "invalid config: c.json: ha.ttl: too short")
}

// The forms the decoder took before the key checks ran still load: 1 and
// 0 for a bool (environments set flags so), a hex or underscored int.
func TestLoadKeepsDecoderForms(t *testing.T) {
	cfg, err := loadYAML(t, minimalYAML+"    directed: 1\n    allow_unverified: \"0\"\n    min_changes: 1_000\n",
		map[string]string{"SOURCEWATCH_WORKERS": "0x10", "SOURCEWATCH_HA_ENABLED": "0"})
	require.NoError(t, err)
	require.True(t, cfg.Graphs[0].Directed)
	require.False(t, cfg.Graphs[0].AllowUnverified)
	require.Equal(t, 1000, cfg.Graphs[0].MinChanges)
	require.Equal(t, 16, cfg.Workers)
	require.False(t, cfg.HA.Enabled)
}

// A relative path that is not there says where it was looked for.
func TestRelativePathHint(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	_, err = os.Open("no-such.edges")
	require.Equal(t, " (a relative path is read from the working directory, "+wd+"; use an absolute path or start the daemon there)", relativePathHint("no-such.edges", err))
	require.Empty(t, relativePathHint("/abs/no-such.edges", err), "an absolute path says it all")
	require.Empty(t, relativePathHint("x.edges", errors.New("x.edges:3: want 2 or 3 fields")), "not a missing file")
}

func TestNearestKey(t *testing.T) {
	keys := []string{"workers", "window", "restarts", "interval", "p", "beta", "gamma"}
	for _, tc := range []struct{ k, want string }{
		{"wrkers", "workers"},    // one deletion
		{"restrats", "restarts"}, // a swap is two edits
		{"intervall", "interval"},
		{"bta", "beta"}, // short: one edit
		{"btaa", ""},    // short: two edits is too far
		{"q", ""},       // one edit from p, but sharing nothing with it
		{"colour", ""},  // far from all
		{"windows", "window"},
	} {
		t.Run(tc.k, func(t *testing.T) {
			require.Equal(t, tc.want, NearestKey(tc.k, keys))
		})
	}
	// Two keys as near: no guess.
	require.Empty(t, NearestKey("ab", []string{"aa", "bb"}))
}

// A list or a map where a key takes one value, a section given one value,
// and a graphs list given as a map are errors naming the key and what was
// written, which LocateKeyError places in the file, not the decoder's
// "decoding failed due to the following error(s): 'workers' expected type
// 'int', got unconvertible type '[]interface {}'" with no file or line.
func TestLoadNamesValuesOfTheWrongShape(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{withKey("workers", "[2]"), "workers: want a whole number, got a list"},
		{withKey("max_event_bytes", "{a: 1}"), "max_event_bytes: want a whole number, got a map"},
		{withKey("subjects.prefix", "[a]"), "subjects.prefix: want a string, got a list"},
		{withKey("http.addr", "[x]"), "http.addr: want a string, got a list"},
		{withKey("nats.listen", "{a: b}"), "nats.listen: want a string, got a map"},
		{withKey("nats.tls.ca", "[a]"), "nats.tls.ca: want a string, got a list"},
		{withKey("graphs[0].min_infected", "[3]"), "graphs[0].min_infected: want a whole number, got a list"},
		{withKey("graphs[0].forward", "{a: b}"), "graphs[0].forward: want a string, got a map"},
		{"workers: 2\nevents: 5\n" + minimalYAML, "events: want a section of keys (max_age, max_bytes, max_msgs, replicas), got 5"},
		{"ha: true\n" + minimalYAML, "ha: want a section of keys (enabled, replica, lease_ttl), got true"},
		{"alerts: [a]\n" + minimalYAML, "alerts: want a section of keys (max_age, max_bytes), got a list"},
		{"graphs:\n  karate:\n    edges: karate.edges\n", "graphs: want a list of graphs (each item - name: ...), got a map"},
		{"graphs: [karate]\n", "graphs[0]: want a graph's keys (name, edges, bundle, ...), got karate"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml, nil)
			require.ErrorIs(t, err, ErrConfig)
			require.EqualError(t, err, "invalid config: "+tc.want)
			var ke *KeyError
			require.ErrorAs(t, err, &ke, "a KeyError, so LocateKeyError adds the file and line")
		})
	}
}
