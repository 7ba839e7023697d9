package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/monitor"
)

func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the streaming monitor: events in from NATS JetStream, source alerts out",
		Long: `serve consumes node-state events from <prefix>.events.<graph>, keeps a
rolling window per graph, localizes the sources with each graph's SL-VAE
bundle and forward plugin, and publishes alerts on <prefix>.alerts.<graph>.

Without nats.url it starts an embedded NATS server with JetStream in
<data_dir>/nats, listening on nats.listen (default 127.0.0.1:4222), so the
nats CLI can publish and subscribe. HTTP is served on http.addr (default
127.0.0.1:7070): /healthz, /readyz, /metrics, /status (JSON), the
dashboard on /, and the JSON Schemas of events, alerts and the service on
/schema/event.v1.json, /schema/alert.v1.json, /schema/service.v1.json.

The NATS micro service "sourcewatch" answers on <prefix>.svc.localize,
<prefix>.svc.window, <prefix>.svc.status and <prefix>.svc.reload. SIGHUP reloads the config file,
bundles and plugins without dropping events; SIGINT or SIGTERM shut down
cleanly (final snapshot, drain) and exit 0.

Every key can be set in the config file (see configs/sourcewatch.yaml) or
the environment: nats.url is SOURCEWATCH_NATS_URL.`,
		Example: `  sourcewatch serve --config configs/demo.yaml
  SOURCEWATCH_NATS_URL=nats://nats.internal:4222 sourcewatch serve --config configs/sourcewatch.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, key := range serveFlagKeys {
				if f := cmd.Flags().Lookup(flag); f.Changed {
					a.v.Set(key, f.Value.String())
				}
			}
			cfg, err := loadDaemonConfig(cmd, a.v)
			if err != nil {
				return err
			}
			return serve(cmd, a, cfg, monitor.BundleLocalizers(daemonPluginDir(cfg), a.log))
		},
	}
	f := cmd.Flags()
	f.String("nats-url", "", "NATS server URL (nats.url); empty starts an embedded server")
	f.String("http-addr", "", "health and metrics address (http.addr)")
	f.String("data-dir", "", "data directory (data_dir)")
	f.String("plugin-dir", "", "forward plugin directory (plugin_dir)")
	return cmd
}

// serveFlagKeys are serve's flags and the config keys they set. A config
// file spells each as its key: nats-url and http-addr are nats.url and
// http.addr there, and nats_url or http_addr in a file is an error.
var serveFlagKeys = map[string]string{"nats-url": "nats.url", "http-addr": "http.addr", "data-dir": "data_dir", "plugin-dir": "plugin_dir"}

// flagOnlyKeys are flags whose value never comes from a config file, and
// why: a file that sets them is refused rather than silently ignored.
var flagOnlyKeys = map[string]string{
	"config": "--config names the file itself",
	"help":   "--help is a command-line flag only",
}

// errNoLocalizer is returned when serve has no way to build localizers.
var errNoLocalizer = errors.New("serve: no localizer")

func serve(cmd *cobra.Command, a *app, cfg monitor.Config, factory monitor.LocalizerFactory) error {
	ctx := cmd.Context()
	if factory == nil {
		return errNoLocalizer
	}
	reload := configReloader(cmd, a)
	// Which build runs, in the log too.
	built := []zap.Field{zap.String("version", monitor.Version)}
	if commit != "" {
		built = append(built, zap.String("commit", commit))
	}
	a.log.Info("sourcewatch starting", built...)
	opts := []monitor.Option{
		monitor.WithLogger(a.log),
		monitor.WithLocalizerFactory(factory),
		monitor.WithReload(reload),
		monitor.WithPreflight(monitor.BundlePreflight(daemonPluginDir(cfg))),
		monitor.WithCommit(commit),
	}
	// A replica that loses its lease stands by again in this process,
	// built anew from the config file as it is then.
	first := true
	newDaemon := func(ctx context.Context) (*monitor.Daemon, error) {
		c := cfg
		if !first {
			if fresh, err := reload(ctx); err != nil {
				a.log.Warn("config file not read again; standing by with the one read at start", zap.Error(err))
			} else {
				c = fresh
			}
		}
		first = false
		return monitor.New(c, opts...)
	}
	var current atomic.Pointer[monitor.Daemon]
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	done := make(chan error, 1)
	go func() { done <- monitor.RunStandingBy(ctx, a.log, newDaemon, current.Store) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		case <-hup:
			a.log.Info("SIGHUP: reloading")
			if d := current.Load(); d != nil {
				if err := d.Reload(ctx); err != nil {
					a.log.Error("keeping the running setup", zap.Error(err))
				}
			}
		}
	}
}

// configReloader returns the daemon's reload: the config file (when there
// is one) read again and loaded as at start. Reads come from SIGHUP, the
// reload endpoint and a replica standing by again, which may meet: viper
// is not safe for concurrent use, so they take turns.
func configReloader(cmd *cobra.Command, a *app) func(context.Context) (monitor.Config, error) {
	var readMu sync.Mutex
	return func(context.Context) (monitor.Config, error) {
		readMu.Lock()
		defer readMu.Unlock()
		if path := a.v.GetString("config"); path != "" {
			if err := readConfigFile(a.v, path); err != nil {
				return monitor.Config{}, err
			}
		}
		// The logger is built at start only: a bad setting is refused as
		// the start would refuse it, a changed one is said to wait for a
		// restart, as the daemon says of its own start-only keys.
		level, format, err := a.logSettings()
		if err != nil {
			return monitor.Config{}, err
		}
		cfg, err := loadDaemonConfig(cmd, a.v)
		if err != nil {
			return monitor.Config{}, err
		}
		var changed []string
		if level != a.logLevel {
			changed = append(changed, "log_level")
		}
		if format != a.logFormat {
			changed = append(changed, "log_format")
		}
		if len(changed) > 0 {
			a.log.Warn("config keys changed in the file are read at start only: restart to apply them; the running values stay",
				zap.Strings("keys", changed))
		}
		return cfg, nil
	}
}

// loadDaemonConfig is monitor.Load after a check of the config file's
// top-level keys: monitor checks inside sections, and a top-level key is
// either one the daemon reads or a flag of the command read from the file
// too (log_level, log_format, demo's speed, ...), so a misspelt one
// (wrkers, plugin_dirr) would otherwise be ignored and its default used.
// Flags that are never read from the file (config, help, and nats-url and
// http-addr, whose keys are nats.url and http.addr) are errors too. The
// keys are checked first, so a misspelt key is named before any error its
// missing value causes.
func loadDaemonConfig(cmd *cobra.Command, v *viper.Viper) (monitor.Config, error) {
	fv, err := configFile(v)
	if err != nil {
		return monitor.Config{}, err
	}
	if fv != nil {
		if err := checkTopLevelKeys(cmd, fv); err != nil {
			return monitor.Config{}, err
		}
	}
	if err := envReplacesSection(os.Environ()); err != nil {
		return monitor.Config{}, err
	}
	cfg, err := monitor.Load(v)
	if err != nil {
		// Load names the key; the file and line are this reader's to add.
		return monitor.Config{}, monitor.LocateKeyError(err, v.ConfigFileUsed(), envPrefix)
	}
	// Every missing edge list or bundle at once, each at its line: a
	// fleet's paths are fixed in one edit, not one start at a time.
	var missing []error
	for _, e := range cfg.MissingFiles() {
		missing = append(missing, monitor.LocateKeyError(e, v.ConfigFileUsed(), envPrefix))
	}
	if err := errors.Join(missing...); err != nil {
		return monitor.Config{}, err
	}
	return cfg, nil
}

// checkTopLevelKeys reports the first top-level key of the config file fv
// that nothing reads, naming the key meant where there is one.
func checkTopLevelKeys(cmd *cobra.Command, fv *viper.Viper) error {
	known := map[string]bool{}
	for _, k := range monitor.Keys() {
		known[k] = true
	}
	add := func(f *pflag.Flag) {
		k := flagKey(f.Name)
		if _, only := flagOnlyKeys[k]; only {
			return
		}
		if key, ok := serveFlagKeys[f.Name]; ok && key != k {
			return // read from the file as key only
		}
		known[k] = true
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	for _, k := range topLevelKeys(fv) {
		if known[k] {
			continue
		}
		var e *monitor.KeyError
		if hint := keyHint(k, known); hint != "" {
			e = monitor.TopLevelKeyError(k, k+": not a config key; "+hint)
		} else {
			names := slices.Sorted(maps.Keys(known))
			guess := ""
			if near := monitor.NearestKey(flagKey(k), names); near != "" {
				guess = "; did you mean " + near + "?"
			}
			e = monitor.TopLevelKeyError(k, fmt.Sprintf("unknown key %q%s (known: %s)", k, guess, strings.Join(names, ", ")))
		}
		return monitor.LocateKeyError(e, fv.ConfigFileUsed(), "")
	}
	return nil
}

// keyHint says what a top-level key k that nothing reads was probably
// meant as: a flag's config key, or a known key spelt with dashes.
func keyHint(k string, known map[string]bool) string {
	u := flagKey(k)
	if why, ok := flagOnlyKeys[u]; ok {
		return why
	}
	for flag, key := range serveFlagKeys {
		if flagKey(flag) == u && key != u {
			return "did you mean " + key + "?"
		}
	}
	if u != k && known[u] {
		return "did you mean " + u + "?"
	}
	return ""
}

// flagKey is the viper key of a flag: dashes as underscores.
func flagKey(name string) string { return strings.ReplaceAll(name, "-", "_") }
