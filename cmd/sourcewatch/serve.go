package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
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
nats CLI can publish and subscribe. Health and metrics are served on
http.addr (default 127.0.0.1:7070): /healthz, /readyz, /metrics.

The NATS micro service "sourcewatch" answers on <prefix>.svc.localize,
<prefix>.svc.status and <prefix>.svc.reload. SIGHUP reloads the config file,
bundles and plugins without dropping events; SIGINT or SIGTERM shut down
cleanly (final snapshot, drain) and exit 0.

Every key can be set in the config file (see configs/sourcewatch.yaml) or
the environment: nats.url is SOURCEWATCH_NATS_URL.`,
		Example: `  sourcewatch serve --config configs/demo.yaml
  SOURCEWATCH_NATS_URL=nats://nats.internal:4222 sourcewatch serve --config configs/sourcewatch.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, key := range map[string]string{"nats-url": "nats.url", "http-addr": "http.addr", "data-dir": "data_dir", "plugin-dir": "plugin_dir"} {
				if f := cmd.Flags().Lookup(flag); f.Changed {
					a.v.Set(key, f.Value.String())
				}
			}
			cfg, err := loadDaemonConfig(cmd, a.v)
			if err != nil {
				return err
			}
			factory := localizerFactory
			if factory == nil {
				factory = bundleLocalizers(cfg.PluginDir, a.log)
			}
			return serve(cmd, a, cfg, factory)
		},
	}
	f := cmd.Flags()
	f.String("nats-url", "", "NATS server URL (nats.url); empty starts an embedded server")
	f.String("http-addr", "", "health and metrics address (http.addr)")
	f.String("data-dir", "", "data directory (data_dir)")
	f.String("plugin-dir", "", "forward plugin directory (plugin_dir)")
	return cmd
}

// localizerFactory replaces the bundle-backed localizers when set (tests).
var localizerFactory monitor.LocalizerFactory

// errNoLocalizer is returned when serve has no way to build localizers.
var errNoLocalizer = errors.New("serve: no localizer")

func serve(cmd *cobra.Command, a *app, cfg monitor.Config, factory monitor.LocalizerFactory) error {
	ctx := cmd.Context()
	if factory == nil {
		return errNoLocalizer
	}
	reload := func(context.Context) (monitor.Config, error) {
		if path := a.v.GetString("config"); path != "" {
			if err := a.v.ReadInConfig(); err != nil {
				return monitor.Config{}, fmt.Errorf("re-reading %s: %w", path, err)
			}
		}
		return loadDaemonConfig(cmd, a.v)
	}
	d, err := monitor.New(cfg,
		monitor.WithLogger(a.log),
		monitor.WithLocalizerFactory(factory),
		monitor.WithReload(reload),
	)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		case <-hup:
			a.log.Info("SIGHUP: reloading")
			if err := d.Reload(ctx); err != nil {
				a.log.Error("keeping the running setup", zap.Error(err))
			}
		}
	}
}

// loadDaemonConfig is monitor.Load plus a check of the config file's
// top-level keys: monitor checks inside sections, and a top-level key is
// either one the daemon reads or one of the command's flags (log_level,
// ...), so a misspelt one (wrkers, plugin_dirr) would otherwise be ignored
// and its default used.
func loadDaemonConfig(cmd *cobra.Command, v *viper.Viper) (monitor.Config, error) {
	cfg, err := monitor.Load(v)
	if err != nil {
		return cfg, err
	}
	fv, err := configFile(v)
	if err != nil || fv == nil {
		return cfg, err
	}
	known := map[string]bool{}
	for _, k := range monitor.Keys() {
		known[k] = true
	}
	add := func(f *pflag.Flag) { known[strings.ReplaceAll(f.Name, "-", "_")] = true }
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	var unknown []string
	for k := range fv.AllSettings() {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		names := slices.Sorted(maps.Keys(known))
		return cfg, fmt.Errorf("%w: %s: unknown key %q (known: %s)", monitor.ErrConfig, fv.ConfigFileUsed(), unknown[0], strings.Join(names, ", "))
	}
	return cfg, nil
}
