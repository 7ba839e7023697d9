package monitor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"sync"
	"time"

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
	// src is the bundle file l was loaded from, for Unchanged.
	src bundleSource
	// pluginSHA256 is the SHA-256 of the plugin binary, hashed before
	// proc was launched from it, for Unchanged.
	pluginSHA256 []byte
}

// bundleSource is where a bundleLocalizer's bundle came from: the
// configured path and the SHA-256 of the file as it was loaded.
type bundleSource struct {
	path   string
	sha256 []byte
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
		// budgets holds each graph's relaunches, shared by every
		// supervisor of its localizers and by the daemon's relaunches of
		// them (relaunchBudget), so the rate holds whoever relaunches.
		budgets = map[string]*forward.RelaunchBudget{}
	)
	budgetFor := func(graph string) *forward.RelaunchBudget {
		warnedMu.Lock()
		defer warnedMu.Unlock()
		if budgets[graph] == nil {
			budgets[graph] = forward.NewRelaunchBudget(relaunchesPerMinute, time.Minute, nil)
		}
		return budgets[graph]
	}
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
		if gc.Bundle == "" {
			return nil, fmt.Errorf("graphs[%s].bundle: must be set", gc.Name)
		}
		// The sum of the bytes loaded, not of the file read again
		// after: a file replaced in between would pass for the one that
		// runs at the next reload.
		b, sum, err := localize.LoadBundleSHA256(gc.Bundle, g, localize.WithoutVAE())
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
		o.RelaunchBudget = budgetFor(gc.Name)
		return launchBundle(ctx, gc.Name, b, bundleSource{path: gc.Bundle, sha256: sum}, o)
	}
}

// launchBundle starts b's forward plugin as o says, for graph name; src
// is where b was loaded from.
func launchBundle(ctx context.Context, name string, b *localize.Bundle, src bundleSource, o localize.LaunchOptions) (*bundleLocalizer, error) {
	// Hashed before the launch: a binary replaced in between then shows
	// as changed at the next reload, which rebuilds the localizer, rather
	// than as the one that runs. A binary LaunchForward cannot resolve
	// fails it below with the better message.
	var pluginSum []byte
	if path, err := o.PluginPath(&b.Manifest); err == nil {
		if pluginSum, err = forward.FileSHA256(path); err != nil {
			return nil, fmt.Errorf("graphs[%s]: forward plugin: %w", name, err)
		}
	}
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
	if info.Name != run && o.Logger != nil && !o.Relaunch {
		o.Logger.Info("the forward plugin reports another name than its file's; alerts name it by its file",
			zap.String("plugin", run), zap.String("reported_name", info.Name), zap.String("version", info.Version))
	}
	return &bundleLocalizer{
		bundle: b, proc: proc, opts: b.Options(), launch: o, name: name, src: src, pluginSHA256: pluginSum,
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
	// What the first launch logged once (no checksum check, another
	// name) is not news at every relaunch of a crash-looping plugin.
	o := l.launch
	o.Relaunch = true
	nl, err := launchBundle(ctx, l.name, l.bundle, l.src, o)
	if err != nil {
		return nil, err
	}
	nl.launch.Relaunch = false // what Unchanged compares
	return nl, nil
}

// Unchanged reports whether BundleLocalizers, building gc's localizer
// now, would run the model l runs: the keys it reads (bundle, forward,
// forward_params, forward_checksum, allow_unverified, call_timeout; plugin_dir is
// read at start only) are the same, the bundle file has the SHA-256 of
// the one l loaded, and the plugin binary those resolve to has the
// SHA-256 of the one l launched. A reload then keeps l and its plugin
// process. The files are hashed whole: a bundle retrained in place, or a
// plugin rebuilt in place, keeps its path and often its size.
func (l *bundleLocalizer) Unchanged(ctx context.Context, gc GraphConfig) (bool, error) {
	now := launchOptions(l.launch.PluginDir, gc)
	if gc.Bundle != l.src.path || !sameLaunch(now, l.launch) || l.src.sha256 == nil || l.pluginSHA256 == nil {
		return false, nil
	}
	sum, err := fileSHA256(ctx, gc.Bundle)
	if err != nil {
		return false, fmt.Errorf("bundle: %w", err)
	}
	if !bytes.Equal(sum, l.src.sha256) {
		return false, nil
	}
	path, err := now.PluginPath(&l.bundle.Manifest)
	if err != nil {
		return false, fmt.Errorf("forward plugin: %w", err)
	}
	if sum, err = fileSHA256(ctx, path); err != nil {
		return false, fmt.Errorf("forward plugin: %w", err)
	}
	return bytes.Equal(sum, l.pluginSHA256), nil
}

// sameLaunch reports whether a and b launch the same plugin the same way:
// the fields launchOptions sets from the config (Logger and the like are
// the daemon's own). Params compare as the launch merges them: no
// override is the same whether nil or empty.
func sameLaunch(a, b localize.LaunchOptions) bool {
	return a.PluginDir == b.PluginDir && a.Forward == b.Forward && maps.Equal(a.Params, b.Params) &&
		a.Checksum == b.Checksum && a.AllowUnverified == b.AllowUnverified && a.CallTimeout == b.CallTimeout
}

// fileSHA256 hashes the file at path, giving up when ctx is done: a
// reload hashes each graph's bundle, which can be hundreds of MB.
func fileSHA256(ctx context.Context, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return nil, fmt.Errorf("hashing %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// ctxReader reads r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
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
		if gc.Bundle == "" {
			return errors.New("bundle: must be set") // the daemon names the graph
		}
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
// A field set here from gc must be compared by sameLaunch too, or a
// reload changing its key keeps the old plugin running.
func launchOptions(pluginDir string, gc GraphConfig) localize.LaunchOptions {
	return localize.LaunchOptions{
		PluginDir: pluginDir,
		Forward:   gc.Forward,
		// A copy: the localizer keeps it to compare with the next
		// config's at a reload.
		Params:          maps.Clone(gc.ForwardParams),
		Checksum:        gc.ForwardChecksum,
		AllowUnverified: gc.AllowUnverified,
		CallTimeout:     gc.CallTimeout,
	}
}

// relaunchBudget is the graph's relaunch budget, which l's supervisor
// takes its relaunches from: the daemon takes its own from it too.
func (l *bundleLocalizer) relaunchBudget() *forward.RelaunchBudget { return l.launch.RelaunchBudget }

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
		Scores: res.Scores, Probability: res.Probability, Chance: res.Chance, Sources: res.Sources, Floor: res.Floor,
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
