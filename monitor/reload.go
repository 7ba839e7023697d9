package monitor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// sameGraphs reports a config whose graph set differs from the running
// one, which needs a restart, naming the graphs added or removed, or the
// graph whose edges or directed changed. Graphs are matched by name, not
// by their place in the list: a list reordered (sorted, a graph moved) is
// the same set, and sameGraphs puts cfg.Graphs in the running order, which
// the reload and takeover then pair with d.order by index.
func (d *Daemon) sameGraphs(cfg *Config) error {
	byName := make(map[string]GraphConfig, len(cfg.Graphs))
	for _, gc := range cfg.Graphs {
		byName[gc.Name] = gc // Validate refused duplicates
	}
	running := make(map[string]bool, len(d.order))
	var removed []string
	for _, gr := range d.order {
		running[gr.name] = true
		if _, ok := byName[gr.name]; !ok {
			removed = append(removed, strconv.Quote(gr.name))
		}
	}
	var added []string
	for _, gc := range cfg.Graphs {
		if !running[gc.Name] {
			added = append(added, strconv.Quote(gc.Name))
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		var what []string
		if len(added) > 0 {
			what = append(what, strings.Join(added, ", ")+" added")
		}
		if len(removed) > 0 {
			what = append(what, strings.Join(removed, ", ")+" removed")
		}
		return fmt.Errorf("graphs: %d configured, %d running (%s); adding or removing graphs needs a restart (a renamed graph is one removed and one added)",
			len(cfg.Graphs), len(d.order), strings.Join(what, ", "))
	}
	ordered := make([]GraphConfig, 0, len(d.order))
	for _, gr := range d.order {
		gc, old := byName[gr.name], gr.gc.Load()
		if gc.Edges != old.Edges || gc.Directed != old.Directed {
			return fmt.Errorf("graph %q: edges and directed need a restart (edges %q -> %q, directed %v -> %v)",
				gr.name, old.Edges, gc.Edges, old.Directed, gc.Directed)
		}
		ordered = append(ordered, gc)
	}
	cfg.Graphs = ordered
	return nil
}

// checkOnStandby is a standby's reload: the config file is loaded and
// checked as a reload would, so a broken one is reported now, but applied
// only when this replica takes over (rereadAtTakeover).
func (d *Daemon) checkOnStandby(ctx context.Context) error {
	cfg, err := d.checkFile(ctx)
	if err != nil || cfg == nil {
		return err
	}
	d.checked.Store(cfg)
	d.warnEdgesChanged(*cfg)
	d.log.Info("standby: config file checked; this replica applies it when it takes over")
	return nil
}

// checkFile loads the config file (WithReload) and checks it as a reload
// would, without applying it; nil without a file to read.
func (d *Daemon) checkFile(ctx context.Context) (*Config, error) {
	if d.reloadCfg == nil {
		return nil, nil
	}
	cfg, err := d.readAndCheck(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	return &cfg, nil
}

// readAndCheck loads the config file and checks it as every reload does:
// valid, the same graphs as running, and each graph's bundle passing the
// preflight. d.reloadCfg must be set.
func (d *Daemon) readAndCheck(ctx context.Context) (Config, error) {
	cfg, err := d.reloadCfg(ctx)
	if err == nil {
		err = d.validate(cfg)
	}
	if err == nil {
		err = d.sameGraphs(&cfg)
	}
	if err == nil {
		err = d.preflightAll(cfg)
	}
	return cfg, err
}

// preflightAll makes the cheap model check of WithPreflight on each graph
// of cfg (same graphs as running), so a standby's check and its takeover
// refuse a bundle that would not load, as a reload does by loading it.
func (d *Daemon) preflightAll(cfg Config) error {
	if d.preflight == nil {
		return nil
	}
	var errs []error
	for i, gc := range cfg.Graphs {
		if err := d.preflight(gc, d.order[i].g); err != nil {
			errs = append(errs, fmt.Errorf("graph %q: %w%s", gc.Name, err, edgesChangedHint(gc, d.order[i].g, err)))
		}
	}
	return errors.Join(errs...)
}

// pluginDirChangedHint explains a reload refused while the file names
// another plugin_dir than the running one: plugin_dir is read at start
// only, so the reload looked for every plugin in the running directory,
// and the refusal's own advice (point plugin_dir at the build the bundle
// was trained with) reads as if the edit had been ignored. "" otherwise.
func (d *Daemon) pluginDirChangedHint(file Config) string {
	running := d.Config().PluginDir
	if file.PluginDir == running {
		return ""
	}
	return fmt.Sprintf(" (plugin_dir changed in the file, %q -> %q, but it is read at start only: this reload looked for the plugins in %q; restart the daemon to use the new directory)", running, file.PluginDir, running)
}

// edgesChangedHint explains a bundle refused at a reload for another
// graph when the edge file itself has changed since the start: the
// daemon serves the graph it read then, so a bundle retrained on the new
// file matches the file and not the running graph. "" otherwise.
func edgesChangedHint(gc GraphConfig, running *graph.Graph, err error) string {
	if !errors.Is(err, localize.ErrGraphMismatch) || gc.Edges == "" {
		return ""
	}
	now, lerr := graph.Load(gc.Edges, graph.Directed(gc.Directed))
	if lerr != nil || now.Fingerprint() == running.Fingerprint() {
		return ""
	}
	return fmt.Sprintf(" (the edge file %s has changed since the daemon started, %d nodes then, %d now: edge files are read at start only, so restart to serve the new graph)",
		gc.Edges, running.N(), now.N())
}

// warnEdgesChanged warns of each graph of cfg whose edge file no longer
// holds the graph read at start: edge files are read at start only, so
// the reload goes on serving the old graph, and the next start reads the
// new one, which the bundle trained on the old one does not fit (a start
// refuses it). An edge file edited in place and signalled was otherwise
// "reloaded" with nothing said, and the daemon failed its next restart,
// perhaps months later.
func (d *Daemon) warnEdgesChanged(cfg Config) {
	for i, gc := range cfg.Graphs {
		gr := d.order[i]
		if gc.Edges == "" || d.preloaded[gc.Name] != nil {
			continue
		}
		now, err := graph.Load(gc.Edges, graph.Directed(gc.Directed))
		switch {
		case err != nil:
			d.log.Warn("the graph's edge file no longer loads: the daemon serves the graph read at start, and the next start fails on it",
				zap.String("graph", gr.name), zap.String("edges", gc.Edges), zap.Error(err))
		case now.Fingerprint() != gr.g.Fingerprint():
			d.log.Warn("the graph's edge file has changed since the start: edge files are read at start only, so the daemon serves the graph read then; the next start reads the new one and refuses a bundle trained on the old one (retrain on the new file, then restart)",
				zap.String("graph", gr.name), zap.String("edges", gc.Edges), zap.Int("nodes_running", gr.g.N()), zap.Int("nodes_in_file", now.N()))
		}
	}
}

// reloadIfRequestedDuringStart runs the reload a request before the start
// was done deferred (reloadAfterStart).
func (d *Daemon) reloadIfRequestedDuringStart(ctx context.Context) {
	d.reloadMu.Lock()
	pending := d.reloadAfterStart
	d.reloadAfterStart = false
	d.reloadMu.Unlock()
	if !pending {
		return
	}
	if err := d.Reload(ctx); err != nil {
		d.log.Error("reload requested during the start failed; keeping the running setup", zap.Error(err))
		return
	}
	d.log.Info("reload requested during the start applied")
}

// rereadAtTakeover applies the per-graph settings of the config file as
// it is when a standby takes over: it may have stood by for weeks while
// the file changed and every replica was signalled (a standby answers
// SIGHUP by waiting for this). A file that does not load, or that changes
// the graph set, leaves the settings read at start, and says so.
func (d *Daemon) rereadAtTakeover(ctx context.Context) {
	if d.reloadCfg == nil {
		return
	}
	cfg, err := d.readAndCheck(ctx)
	rs := ReloadStatus{At: d.now().UTC(), OK: err == nil}
	apply := func(cfg *Config) {
		for i, gr := range d.order {
			gc := cfg.Graphs[i]
			gr.setConfig(gc)
		}
		d.current.Store(d.keepStartOnly(*cfg))
	}
	switch checked := d.checked.Load(); {
	case err == nil:
		apply(&cfg)
		d.log.Info("config file read again at takeover", zap.Int("graphs", len(d.order)))
	case checked != nil:
		// A reload this standby accepted is not undone by a file broken
		// since: a standalone daemon would be running it.
		rs.Error = fmt.Sprintf("%v: at takeover: %v", ErrReload, err)
		apply(checked)
		d.log.Warn("config file not applied at takeover; running the settings last checked good on standby", zap.Error(err))
	default:
		rs.Error = fmt.Sprintf("%v: at takeover: %v", ErrReload, err)
		d.log.Warn("config file not applied at takeover; running the settings read at start", zap.Error(err))
	}
	d.lastReload.Store(&rs)
	d.metrics.reloadOK.Set(boolGauge(err == nil))
}

// Reload re-reads the configuration (WithReload), rebuilds the Localizer
// (bundle and plugin) of every graph whose model may have changed and
// swaps them in atomically; the old ones are closed once their in-flight
// inference is done. A graph whose Localizer is healthy, whose last
// inference did not fail and whose Localizer reports itself unchanged for
// the new settings (Unchanged) keeps it, plugin process and all. Events keep flowing throughout. On any failure
// nothing changes. Per-graph settings (bundle, forward plugin and
// params, window, decay, interval, min_changes, min_infected, restarts)
// take effect; the graph set, edge files and the
// daemon-wide settings (NATS, HTTP, workers, data dir) need a restart.
//
// The outcome is kept for /status (last_reload) and the metric
// sourcewatch_config_last_reload_successful, since a failed reload leaves
// the daemon ready on its old setup and would otherwise show only in the
// log.
func (d *Daemon) Reload(ctx context.Context) error {
	d.reloadMu.Lock()
	replaced, err := d.reload(ctx)
	rs := ReloadStatus{At: d.now().UTC(), OK: err == nil}
	if err != nil {
		rs.Error = err.Error()
	}
	d.lastReload.Store(&rs)
	d.metrics.reloadOK.Set(boolGauge(err == nil))
	d.reloadMu.Unlock()
	// Closing a replaced localizer waits for the inference running on it
	// (a Power Grid Solve, a plugin hanging until its call timeout): done
	// outside reloadMu, so another graph's relaunch does not wait for it,
	// and all at once, so the reload takes the longest such wait, not
	// their sum. Reload still returns once every replaced plugin is gone.
	d.closeReplaced(replaced)
	return err
}

// replacedLocalizer is a graph's localizer a reload swapped out, to close.
type replacedLocalizer struct {
	graph string
	h     *locHolder
}

// closeReplaced closes each replaced localizer, each waiting for its own
// graph's running inference, in parallel.
func (d *Daemon) closeReplaced(replaced []replacedLocalizer) {
	var wg sync.WaitGroup
	for _, r := range replaced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.h.close(); err != nil {
				d.log.Warn("closing old localizer", zap.String("graph", r.graph), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// unchangedChecker is a Localizer that can tell whether building it
// from gc now would give the model it runs (the same bundle file, plugin
// binary and settings), so a reload keeps it and its plugin process
// instead of starting another for nothing; one that cannot tell is
// rebuilt. An error (a bundle file gone) means it cannot tell.
type unchangedChecker interface {
	Unchanged(ctx context.Context, gc GraphConfig) (bool, error)
}

// keeps reports whether a reload to gc keeps gr's running localizer: it
// is healthy (a dead or hung plugin is rebuilt, as it was before
// localizers could tell), its last inference did not fail, and it
// reports itself unchanged.
func (d *Daemon) keeps(ctx context.Context, gr *graphRT, gc GraphConfig) bool {
	if !gr.healthy() || gr.failing.Load() {
		// A plugin whose calls fail is healthy as a process; a reload
		// is the operator's way to give it a fresh one.
		return false
	}
	uc, ok := gr.loc.Load().localizer().(unchangedChecker)
	if !ok {
		return false
	}
	same, err := uc.Unchanged(ctx, gc)
	if err != nil {
		// The factory gets to say what is wrong, or to build it anyway.
		d.log.Warn("cannot tell whether the graph's model changed; building it again", zap.String("graph", gr.name), zap.Error(err))
		return false
	}
	return same
}

// graphPrefix is the `graph "NAME": ` that names the graph of a
// localizer factory's error, or "" where the error names it already as
// its config key (BundleLocalizers' graphs[NAME]...).
func graphPrefix(name string, err error) string {
	if strings.HasPrefix(err.Error(), "graphs["+name+"]") {
		return ""
	}
	return fmt.Sprintf("graph %q: ", name)
}

// reload is Reload under reloadMu. It swaps in the new localizer of
// every graph it does not keep and returns the ones it replaced, for
// Reload to close once the lock is released: closing one waits for its
// graph's running inference, which must not hold the other graphs on
// their old bundles and settings meanwhile.
func (d *Daemon) reload(ctx context.Context) ([]replacedLocalizer, error) {
	select {
	case <-d.ready:
	default:
		if d.standby.Load() != nil {
			// Nothing runs to reload: the file is checked now and read
			// again at takeover.
			return nil, d.checkOnStandby(ctx)
		}
		// Nothing runs to reload yet: the file is checked now, so a
		// broken one is reported at once, and read again once started.
		cfg, err := d.checkFile(ctx)
		if err != nil {
			return nil, err
		}
		if msg := d.waiting.Load(); msg != nil && cfg != nil && cfg.NATS.URL != d.cfg.NATS.URL {
			// nats.url is a daemon-wide setting: no reload changes it.
			return nil, fmt.Errorf("%w: not started yet (%s), and nats.url changed in the file; to use it, restart the daemon", ErrReload, *msg)
		}
		d.reloadAfterStart = true
		d.log.Info("reload requested during the start: config file checked; it is read again and applied once started")
		return nil, nil
	}
	cfg := d.Config()
	if d.reloadCfg != nil {
		var err error
		if cfg, err = d.reloadCfg(ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrReload, err)
		}
		if err := d.validate(cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrReload, err)
		}
	}
	if err := d.sameGraphs(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReload, err)
	}
	// The cheap checks of every graph first, so a reload names each graph
	// it refuses, as the start does, rather than the first one built.
	if err := d.preflightAll(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w%s", ErrReload, err, d.pluginDirChangedHint(cfg))
	}
	// built[i] is graph i's new localizer, nil where the running one is
	// kept. gr.loc cannot change meanwhile: a relaunch holds reloadMu.
	built := make([]Localizer, len(cfg.Graphs))
	var kept []string
	for i, gc := range cfg.Graphs {
		if d.keeps(ctx, d.order[i], gc) {
			kept = append(kept, gc.Name)
			continue
		}
		l, err := d.factory(ctx, gc, d.order[i].g)
		if err != nil {
			// Only those built here: the kept ones run on, as does
			// every graph's current localizer.
			for _, b := range built {
				if b != nil {
					_ = b.Close()
				}
			}
			return nil, fmt.Errorf("%w: %s%w%s%s", ErrReload, graphPrefix(gc.Name, err), err, edgesChangedHint(gc, d.order[i].g, err), d.pluginDirChangedHint(cfg))
		}
		built[i] = l
	}
	var changed []string
	replaced := make([]replacedLocalizer, 0, len(d.order))
	for i, gr := range d.order {
		gc := cfg.Graphs[i]
		changed = append(changed, changedKeys(fmt.Sprintf("graphs[%s].", gr.name), *gr.gc.Load(), gc)...)
		if gr.gc.Load().Interval != gc.Interval {
			// As the start warns of one.
			d.warnShortInterval(gr.name, gc.Interval)
		}
		gr.setConfig(gc)
		if built[i] == nil {
			// Kept: the same model and plugin process, so its relaunch
			// budget, its last relaunch error and the incident it has
			// inferred stand.
			continue
		}
		if was, now := modelOf(gr.loc.Load().localizer()), modelOf(built[i]); was != now {
			// A bundle retrained in place changes no key.
			changed = append(changed, fmt.Sprintf("graphs[%s].model", gr.name))
		}
		gr.relaunchErr.Store(nil)
		// A new localizer, maybe a fixed plugin: a full relaunch budget.
		gr.relaunches.Store(0)
		gr.diedInCall.Store(false)
		replaced = append(replaced, replacedLocalizer{graph: gr.name, h: gr.loc.Swap(&locHolder{l: built[i]})})
		// The new model has not seen the window: an open incident is
		// inferred again at the next tick (published only if its source
		// set changes).
		gr.inferred.Store(nil)
	}
	d.current.Store(d.keepStartOnly(cfg))
	d.warnEdgesChanged(cfg)
	d.log.Info("reloaded", zap.Int("graphs", len(d.order)), zap.Strings("changed", changed), zap.Strings("kept", kept), zap.Strings("models", d.models()))
	return replaced, nil
}

// keepStartOnly returns file's graph settings with the daemon-wide ones it
// runs on, which only a restart changes, and warns of those the file
// changed, so an edited events.max_age or http.addr followed by a reload
// does not look applied.
func (d *Daemon) keepStartOnly(file Config) *Config {
	running := d.Config()
	if file.HA.Replica == "" {
		file.HA.Replica = running.HA.Replica // Run named it
	}
	if keys := StartOnlyChanges(running, file); len(keys) > 0 {
		d.log.Warn("config keys changed in the file are read at start only: restart to apply them; the running values stay",
			zap.Strings("keys", keys))
	}
	running.Graphs = file.Graphs
	return &running
}

// modelOf is l's model, zero when it does not say.
func modelOf(l Localizer) ModelInfo {
	if mr, ok := l.(modelReporter); ok {
		return mr.Model()
	}
	return ModelInfo{}
}

// models describes each graph's model as graph=bundle (forward version),
// so a log line says which bundle serves, even when a reload read a file
// retrained in place, whose path did not change.
func (d *Daemon) models() []string {
	var out []string
	for _, gr := range d.order {
		h := gr.loc.Load()
		if h == nil {
			continue
		}
		if mr, ok := h.l.(modelReporter); ok {
			m := mr.Model()
			out = append(out, fmt.Sprintf("%s=%s (%s %s)", gr.name, m.Bundle, m.Forward, m.ForwardVersion))
		}
	}
	return out
}

// changedKeys lists the config keys (prefix + mapstructure tag) whose
// values differ between a and b, for the reload's log line.
func changedKeys(prefix string, a, b GraphConfig) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := 0; i < va.NumField(); i++ {
		tag := va.Type().Field(i).Tag.Get("mapstructure")
		if tag != "" && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, prefix+tag)
		}
	}
	return out
}
