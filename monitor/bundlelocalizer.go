package monitor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// bundleLocalizer runs SL-VAE for one graph of the daemon: the graph's
// bundle and its forward plugin process.
type bundleLocalizer struct {
	mu     sync.Mutex // one Solve at a time per plugin process
	bundle *localize.Bundle
	proc   *forward.Supervised
	opts   localize.Options
	model  ModelInfo
	// launch is how proc was launched, for Relaunch.
	launch localize.LaunchOptions
	// unverified is launch.Unverified for the bundle: proc runs with no
	// checksum check.
	unverified bool
	name       string // the graph's
}

// BundleLocalizers returns the daemon's LocalizerFactory for SL-VAE
// bundles: it loads each graph's bundle (checked against the configured
// edge file), launches the bundle's forward plugin from pluginDir
// (checksum-verified, supervised: relaunched when it dies or hangs) and
// configures it with the bundle's state. An empty pluginDir is bin (the
// sourcewatch command passes the directory of its own binary instead).
func BundleLocalizers(pluginDir string, log *zap.Logger) LocalizerFactory {
	if pluginDir == "" {
		pluginDir = "bin"
	}
	// The daemon calls the factory again whenever it rebuilds a graph's
	// localizer (a reload, a plugin that keeps failing); a bundle's poor
	// fit or wrong gradient is news once.
	var (
		warnedMu sync.Mutex
		warned   = map[string]bool{}
	)
	firstWarning := func(graph, bundle, about string) bool {
		warnedMu.Lock()
		defer warnedMu.Unlock()
		key := graph + "\x00" + bundle + "\x00" + about
		if warned[key] {
			return false
		}
		warned[key] = true
		return true
	}
	return func(ctx context.Context, gc GraphConfig, g *graph.Graph) (Localizer, error) {
		b, err := localize.LoadBundle(gc.Bundle, g, localize.WithoutVAE())
		if err != nil {
			return nil, fmt.Errorf("graphs[%s].bundle: %w%s", gc.Name, err, relativePathHint(gc.Bundle, err))
		}
		// Loading leaves the bundle's entries as garbage, which the
		// runtime would hand back to the system only over minutes.
		debug.FreeOSMemory()
		if floor := b.Manifest.Metrics[localize.ForwardFloorMetric]; floor > 0 {
			if mse, split, _ := b.Manifest.ForwardError(); localize.PoorFit(mse, floor) && firstWarning(gc.Name, b.Manifest.ID, "fit") {
				log.Warn("the bundle's forward model fits its graph poorly (its error far above the floor), which can cost the alerts' rankings; see bundle inspect",
					zap.String("graph", gc.Name), zap.Float64("forward_"+split+"_mse", mse), zap.Float64("forward_floor_mse", floor))
			}
		}
		if s := b.Manifest.VJPCheckFailure(pluginDir); s != "" && firstWarning(gc.Name, b.Manifest.ID, "vjp") {
			log.Warn("the bundle's forward model has a wrong gradient: "+s, zap.String("graph", gc.Name), zap.String("bundle", b.Manifest.ID))
		}
		if s := b.Manifest.WeakRanking(); s != "" && firstWarning(gc.Name, b.Manifest.ID, "control") {
			log.Warn("the bundle ranks weakly: "+s, zap.String("graph", gc.Name), zap.String("bundle", b.Manifest.ID))
		}
		if s := b.Manifest.LargeSourceSets(); s != "" && firstWarning(gc.Name, b.Manifest.ID, "wide") {
			log.Warn("the bundle names many suspects: "+s, zap.String("graph", gc.Name), zap.String("bundle", b.Manifest.ID))
		}
		o := launchOptions(pluginDir, gc)
		o.Logger = log.Named("plugin").With(zap.String("graph", gc.Name))
		return launchBundle(ctx, gc.Name, b, o)
	}
}

// launchBundle starts b's forward plugin as o says, for graph name.
func launchBundle(ctx context.Context, name string, b *localize.Bundle, o localize.LaunchOptions) (*bundleLocalizer, error) {
	proc, err := localize.LaunchForward(ctx, b, o)
	if err != nil {
		return nil, fmt.Errorf("graphs[%s]: %w", name, err)
	}
	info, err := proc.Info(ctx)
	if err != nil {
		proc.Close()
		return nil, fmt.Errorf("graphs[%s]: forward plugin info: %w", name, err)
	}
	// Alerts name the binary run, which is what the operator configured
	// and can act on; the version is the one the process reports.
	run := o.PluginName(&b.Manifest)
	if info.Name != run && o.Logger != nil {
		o.Logger.Info("the forward plugin reports another name than its file's; alerts name it by its file",
			zap.String("plugin", run), zap.String("reported_name", info.Name), zap.String("version", info.Version))
	}
	return &bundleLocalizer{
		bundle: b, proc: proc, opts: b.Options(), launch: o, name: name,
		model: ModelInfo{Bundle: b.Manifest.ID, Forward: run, ForwardVersion: info.Version},
		// The launch's own decision (LaunchForward skips the check where
		// o.Unverified holds), so status cannot say otherwise.
		unverified: o.Unverified(&b.Manifest),
	}, nil
}

// Relaunch starts a new plugin process for the bundle l has loaded, not
// the file as it is now: replacing a bundle file takes effect at a
// reload, not behind the operator's back when a plugin dies.
func (l *bundleLocalizer) Relaunch(ctx context.Context) (Localizer, error) {
	return launchBundle(ctx, l.name, l.bundle, l.launch)
}

// BundlePreflight returns the cheap check of a graph's model for
// WithPreflight: its bundle file, without loading it, is an archive of a
// format this sourcewatch reads, trained on g (when it is not, and only
// then, the whole bundle is read, as a localizer would load it, for its
// copy of the graph to say what differs), and its forward plugin in
// pluginDir (as BundleLocalizers finds it) is the build the bundle
// records or the graph's forward_checksum pins. A plugin rebuilt since
// the bundle was trained then stops the start before NATS, for every
// graph it concerns, instead of at the first graph's localizer. The
// version the plugin reports is checked when it is launched.
func BundlePreflight(pluginDir string) func(GraphConfig, *graph.Graph) error {
	if pluginDir == "" {
		pluginDir = "bin"
	}
	return func(gc GraphConfig, g *graph.Graph) error {
		m, err := localize.ReadManifest(gc.Bundle)
		if err == nil {
			err = m.CheckGraph(g)
		}
		if errors.Is(err, localize.ErrGraphMismatch) {
			// Another graph: the bundle's own copy of its graph says what
			// differs (a weight, an arc, the weight column), which the
			// manifest alone cannot. Read only on this failure.
			if _, lerr := localize.LoadBundle(gc.Bundle, g, localize.WithoutVAE()); errors.Is(lerr, localize.ErrGraphMismatch) {
				err = lerr
			}
		}
		if err != nil {
			return fmt.Errorf("bundle: %w%s", err, relativePathHint(gc.Bundle, err)) // the daemon names the graph
		}
		return localize.CheckForward(&m, launchOptions(pluginDir, gc))
	}
}

// launchOptions is how the daemon runs gc's forward plugin from pluginDir.
func launchOptions(pluginDir string, gc GraphConfig) localize.LaunchOptions {
	return localize.LaunchOptions{
		PluginDir:       pluginDir,
		Forward:         gc.Forward,
		Params:          gc.ForwardParams,
		Checksum:        gc.ForwardChecksum,
		AllowUnverified: gc.AllowUnverified,
	}
}

// Model names the bundle and the forward plugin that answered Info.
func (l *bundleLocalizer) Model() ModelInfo { return l.model }

// Unverified reports whether the plugin was launched (and is relaunched)
// with no checksum check: allow_unverified with no SHA-256 pinned.
func (l *bundleLocalizer) Unverified() bool { return l.unverified }

func (l *bundleLocalizer) Localize(ctx context.Context, y []float64) (Inference, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	res, err := localize.Solve(ctx, l.bundle, l.proc, y, l.opts)
	if err != nil {
		return Inference{}, err
	}
	infected := 0
	for _, v := range y {
		if v > 0 {
			infected++
		}
	}
	rule := l.bundle.Manifest.SourceRule
	if l.opts.Threshold != 0 {
		rule = localize.SourceRule{} // an explicit threshold overrides it, as in Solve
	}
	return Inference{
		Scores: res.Scores, Probability: res.Probability, Sources: res.Sources, Floor: res.Floor,
		Threshold: res.Threshold, Model: l.model, Note: l.bundle.Manifest.AnswerNote(infected, len(res.Sources)-res.Floor, rule),
	}, nil
}

// Healthy reports whether the plugin process is up (false from a crash or
// hang until its relaunch succeeds).
func (l *bundleLocalizer) Healthy() bool { return l.proc.Healthy() }

// PluginPID is the process id of the running plugin process (0 while
// none runs), for tests and diagnostics that kill it.
func (l *bundleLocalizer) PluginPID() int { return l.proc.Pid() }

// Restarts counts the plugin's relaunches, for the daemon's metrics.
func (l *bundleLocalizer) Restarts() int { return int(l.proc.Restarts()) }

func (l *bundleLocalizer) Close() error { return l.proc.Close() }
