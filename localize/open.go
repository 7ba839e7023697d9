package localize

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// ErrUnverified is returned when a bundle records no checksum for its
// forward plugin and the caller did not allow unverified plugins.
var ErrUnverified = errors.New("forward plugin checksum unknown")

// LaunchOptions say where to find the forward plugin of a bundle and how
// to run it.
type LaunchOptions struct {
	// PluginDir holds the sourcewatch-forward-<name> binaries.
	PluginDir string
	// Forward overrides the bundle's plugin name (a compatible build of
	// the same model, say); the bundle's state is still passed to it.
	Forward string
	// Params override the bundle's recorded forward params key by key;
	// the others stay as the bundle recorded them (the state was fitted
	// with them), so an empty map changes nothing.
	Params map[string]string
	// Checksum, when set, is the hex SHA-256 the plugin binary must have,
	// instead of the one the bundle recorded.
	Checksum string
	// AllowUnverified launches a plugin whose checksum nobody recorded.
	AllowUnverified bool
	// Relaunch marks a launch of a plugin launched before (the daemon's
	// relaunch of a dead one): what its first launch warned of is logged
	// at debug level.
	Relaunch    bool
	CallTimeout time.Duration
	Logger      *zap.Logger
	// OnRestart is called after the plugin was relaunched (it crashed or
	// missed a deadline), with the cause.
	OnRestart func(cause error)
	// RelaunchBudget, when set, bounds the supervisor's relaunches in
	// place of its own limit (forward.WithRelaunchBudget): a caller that
	// launches the plugin again itself, say for a graph, shares it with
	// every supervisor it starts for that graph.
	RelaunchBudget *forward.RelaunchBudget
}

// PluginName is the name of the plugin binary o runs for a bundle with
// manifest m (sourcewatch-forward-<name> in PluginDir): Forward when set,
// or the name the bundle recorded. It is what alerts name as the model's
// forward plugin, since a pinned build beside another (icmf2 beside icmf)
// often reports the same name from Info.
func (o LaunchOptions) PluginName(m *Manifest) string {
	if o.Forward != "" {
		return o.Forward
	}
	return m.Forward.Name
}

// PluginPath is the plugin binary LaunchForward (and CheckForward) run
// for a bundle with manifest m: PluginName(m) in PluginDir, which must
// exist.
func (o LaunchOptions) PluginPath(m *Manifest) (string, error) {
	return forward.PluginPath(o.PluginDir, o.PluginName(m))
}

// LaunchForward starts the bundle's forward plugin, verifies its binary's
// SHA-256 against the bundle (or o.Checksum) and configures it with the
// bundle's graph, params and state. The plugin is supervised: a crashed or
// hung process is relaunched (checksum verified again), re-configured, and
// the interrupted call retried once. The caller closes it.
func LaunchForward(ctx context.Context, b *Bundle, o LaunchOptions) (*forward.Supervised, error) {
	path, want, err := resolvePlugin(&b.Manifest, o)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if problems := forward.ReplaceableBy(path); problems != nil {
		log.Warn("forward plugin can be replaced by users other than this one: give the binary and the directories above it to this user or root, writable by their owner only",
			zap.String("plugin", path), zap.Strings("problems", problems))
	}
	opts := []forward.LaunchOption{forward.WithLogger(log)}
	if o.CallTimeout > 0 {
		opts = append(opts, forward.WithCallTimeout(o.CallTimeout))
	}
	if want != nil {
		opts = append(opts, forward.WithChecksum(want))
	} else {
		got, err := forward.FileSHA256(path)
		if err != nil {
			return nil, err
		}
		level := zapcore.WarnLevel
		if o.Relaunch {
			level = zapcore.DebugLevel
		}
		log.Log(level, "launching forward plugin without checksum verification (allow_unverified)",
			zap.String("plugin", path), zap.String("sha256", hex.EncodeToString(got)))
	}
	sup := []forward.SuperviseOption{forward.WithLaunchOptions(opts...), forward.WithSupervisorLogger(log)}
	if o.Checksum == "" && b.Manifest.Forward.Version != "" {
		// The checksum pins the file the host starts; for a plugin that a
		// script runs (node server.js) that is the script's wrapper, so the
		// version the plugin reports is the check on the code behind it,
		// at this launch and at every relaunch.
		sup = append(sup, forward.WithVersion(b.Manifest.Forward.Version))
	}
	if o.OnRestart != nil {
		sup = append(sup, forward.WithOnRestart(o.OnRestart))
	}
	if o.RelaunchBudget != nil {
		sup = append(sup, forward.WithRelaunchBudget(o.RelaunchBudget))
	}
	p, err := forward.Supervise(ctx, path, sup...)
	if err != nil {
		return nil, explainPluginError(err, &b.Manifest, o)
	}
	if err := ConfigureForward(ctx, p, b, o.Params); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// ConfigureForward configures m with b's graph, its params (overridden by
// params) and its state, and has it predict one row, so a state that
// configures yet leaves the model unusable (empty, another model's) is
// refused here, when a start, reload or bundle inspect loads the bundle,
// rather than at every inference after.
func ConfigureForward(ctx context.Context, m interface {
	Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error
	Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error)
}, b *Bundle, params map[string]string) error {
	g := b.Manifest.Forward.ForwardGraph(b.Graph)
	if err := m.Configure(ctx, g, mergeParams(b.Manifest.Forward.Params, params), b.ForwardState); err != nil {
		return err // names the plugin and the call
	}
	if _, err := m.Predict(ctx, mat.NewDense(1, g.N(), nil)); err != nil {
		return fmt.Errorf("bundle %s: forward model %s configured with the bundle's %d-byte state cannot predict: %w", b.Manifest.ID, b.Manifest.Forward.Name, len(b.ForwardState), err)
	}
	return nil
}

// CheckForward makes the checks LaunchForward makes on the plugin binary
// before it starts it (the plugin found in o.PluginDir, executable, with
// the SHA-256 the manifest records or o.Checksum pins), without starting
// it: a daemon checks every graph's plugin this way before it connects to
// anything. The version the plugin reports is checked only at launch.
func CheckForward(m *Manifest, o LaunchOptions) error {
	path, want, err := resolvePlugin(m, o)
	if err != nil {
		return err
	}
	if err := forward.CheckBinary(path, want); err != nil {
		return explainPluginError(err, m, o)
	}
	return nil
}

// pinnedChecksum is the hex SHA-256 o holds m's plugin to: o.Checksum
// when set, else the one the bundle records, when o runs the plugin the
// bundle names; "" when nothing pins one.
func (o LaunchOptions) pinnedChecksum(m *Manifest) string {
	if o.Checksum != "" {
		return o.Checksum
	}
	if o.Forward != "" && o.Forward != m.Forward.Name {
		return ""
	}
	return m.Forward.SHA256
}

// Unverified reports whether LaunchForward (and CheckForward) run the
// plugin of a bundle with manifest m with no checksum check: nothing pins
// its SHA-256 (neither o.Checksum nor, for the plugin the bundle names,
// the bundle's record) and o.AllowUnverified lets it run anyway. It is
// the decision those make, not a copy of it; without AllowUnverified such
// a launch fails with ErrUnverified instead.
func (o LaunchOptions) Unverified(m *Manifest) bool {
	return o.AllowUnverified && o.pinnedChecksum(m) == ""
}

// resolvePlugin returns the path of the plugin binary o runs for m and
// the SHA-256 it must have: nil only where o allows an unverified plugin
// (o.Unverified).
func resolvePlugin(m *Manifest, o LaunchOptions) (path string, want []byte, err error) {
	name := o.PluginName(m)
	path, err = o.PluginPath(m)
	if err != nil {
		return "", nil, err
	}
	sum := o.pinnedChecksum(m)
	switch {
	case o.Unverified(m):
		return path, nil, nil
	case sum != "":
		want, err = hex.DecodeString(sum)
		if err != nil {
			return "", nil, fmt.Errorf("forward plugin %s: recorded checksum %q is not hex: %w", path, sum, err)
		}
		return path, want, nil
	case name != m.Forward.Name && m.Forward.SHA256 != "":
		return "", nil, fmt.Errorf("%w: bundle %s records the SHA-256 of %s, not of %s (the forward override): pin that build's SHA-256 with forward_checksum or --forward-checksum (plugin check it first), or set allow_unverified to run it unchecked", ErrUnverified, m.ID, m.Forward.Name, path)
	default:
		return "", nil, fmt.Errorf("%w: bundle %s records no SHA-256 for %s; set allow_unverified to run it anyway", ErrUnverified, m.ID, path)
	}
}

// explainPluginError adds what to do about the usual causes of a plugin
// the bundle refuses.
func explainPluginError(err error, m *Manifest, o LaunchOptions) error {
	switch {
	case errors.Is(err, forward.ErrChecksum) && o.Checksum != "":
		// The pin names a build the plugin dir does not hold: after an
		// upgrade, the new build's SHA-256 pinned while plugin_dir still
		// names the old builds, say.
		return fmt.Errorf("%w (forward_checksum or --forward-checksum pins a build that %s does not hold: check the pin against the build you mean to run (sha256sum it), or point plugin_dir or --plugin-dir at that build; a daemon reads plugin_dir at start only)",
			err, o.PluginDir)
	case errors.Is(err, forward.ErrChecksum) && o.Checksum == "":
		// The usual cause: the plugin was rebuilt after the bundle was
		// trained.
		return fmt.Errorf("%w (bundle %s was trained with another build of %s %s: point plugin_dir or --plugin-dir at the build it was trained with (kept aside at an upgrade), retrain the bundle with this build or, if this build is a trusted one of the same model, pin its sha256 with forward_checksum in serve's graph config or localize's --forward-checksum)",
			err, m.ID, m.Forward.Name, m.Forward.Version)
	case errors.Is(err, forward.ErrVersion):
		return fmt.Errorf("%w (the version bundle %s was trained with: retrain the bundle, or pin this build's sha256 with forward_checksum or --forward-checksum if it is the same model)",
			err, m.ID)
	}
	return err
}

// mergeParams returns the recorded params with override's keys replacing
// theirs; it changes neither map.
func mergeParams(recorded, override map[string]string) map[string]string {
	if len(override) == 0 {
		return recorded
	}
	params := make(map[string]string, len(recorded)+len(override))
	maps.Copy(params, recorded)
	maps.Copy(params, override)
	return params
}

// PluginChecksum returns the hex SHA-256 of the plugin binary name in dir,
// as recorded in a bundle's manifest.
func PluginChecksum(dir, name string) (string, error) {
	path, err := forward.PluginPath(dir, name)
	if err != nil {
		return "", err
	}
	sum, err := forward.FileSHA256(path)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), nil
}
