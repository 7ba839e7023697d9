package monitor

import (
	"context"

	"github.com/sourcewatch/sourcewatch/graph"
)

// Inference is what a Localizer finds in one observation y: per-node
// scores (mean of x over restarts) and source probabilities, the indices
// of the nodes it calls sources, the score cut that selected them (the
// bundle's delta, or the last source's score under a count rule), and
// which model produced it.
//
// Scores and Probability hold one value per node of the graph, Chance one
// per node or none, and Sources indices of the graph's nodes. Every score,
// probability, chance and the Threshold lie in [0, 1], as the alert schema
// (alerts.JSONSchema) has them: the daemon refuses an Inference with a
// value outside that range or NaN, or of the wrong shape, as
// ErrBadInference, a failed inference, rather than publish it.
type Inference struct {
	Scores, Probability []float64
	// Chance is each node's chance of being a source
	// (localize.Result.Chance); nil when the model does not measure it.
	Chance  []float64
	Sources []int
	// Floor is how many of the last Sources were named below Threshold
	// because the observation demands them (localize.Result.Floor).
	Floor     int
	Threshold float64
	Model     ModelInfo
	// Note is what a reader of the alert should know about this answer
	// (an observation unlike the model's training data, say); "" if
	// nothing.
	Note string
}

// ModelInfo names the bundle and forward plugin behind an Inference.
type ModelInfo struct {
	Bundle, Forward, ForwardVersion string
}

// Localizer finds sources in an observation y in [0,1]^n of one graph. The
// daemon calls Localize for one graph at a time and Close once, after the
// last call. Localize should return soon after ctx is done: the daemon
// cancels it when it stops, and Run waits for the call (one that ignores
// ctx holds the stop back as long as it runs), and when a svc.localize
// request's 2 minutes run out.
//
// A Localizer may also have any of these methods, which the daemon finds
// by type assertion, so a stand-in for tests or another model needs none
// of them:
//
//   - Healthy() bool: whether it can answer now (its plugin process is
//     up). /readyz and the status endpoint report it; one found unhealthy
//     between inferences, or after an inference failed, is replaced (see
//     Relaunch) while the graph's restarts allow. Without it a Localizer
//     is always healthy, and a failed inference is only an error.
//   - Restarts() int: how many times it relaunched its plugin itself,
//     which feeds sourcewatch_plugin_restarts_total
//     (Daemon.PluginRestarted is the push alternative).
//   - Model() ModelInfo: the bundle and forward plugin it runs, which the
//     status endpoint reports and the start and reload log lines name; a
//     reload that changes it counts as a changed model even when no
//     config key changed (a bundle retrained in place).
//   - Relaunch(ctx context.Context) (Localizer, error): a new Localizer on
//     the model this one loaded (a new plugin process for the same
//     bundle), which replaces it when it turned unhealthy, so a bundle
//     file replaced since takes effect at a reload, not at a plugin's
//     death. Without it the LocalizerFactory builds the replacement. The
//     daemon closes the old one once the new one is in place.
//   - Unverified() bool: whether its plugin runs with no checksum check,
//     which the status endpoint marks on the graph's model
//     (GraphModel.Unverified). Without it the model is not marked.
//   - Unchanged(ctx context.Context, gc GraphConfig) (bool, error):
//     whether the LocalizerFactory, given gc now, would build the model it
//     runs (for BundleLocalizers: the same bundle, forward,
//     forward_params, forward_checksum and allow_unverified, the bundle
//     file and the plugin binary with the SHA-256s they had when it was
//     built). A reload keeps a healthy one that reports true, plugin
//     process, relaunch count and inferred incident included, and only
//     applies gc's other settings; an error, false, or an unhealthy one
//     is rebuilt. Without it every reload rebuilds it.
//
// The Model field of each Inference, not Model(), names the model in the
// alerts.
type Localizer interface {
	Localize(ctx context.Context, y []float64) (Inference, error)
	Close() error
}

// LocalizerFactory builds the Localizer of one configured graph, at start
// and on every reload.
type LocalizerFactory func(ctx context.Context, gc GraphConfig, g *graph.Graph) (Localizer, error)

// healthChecker is the optional health report of a Localizer.
type healthChecker interface{ Healthy() bool }

// modelReporter is the optional description of the model a Localizer
// runs, for the daemon's start and reload log lines.
type modelReporter interface{ Model() ModelInfo }

// relauncher is a Localizer that can start afresh on the model it has
// loaded (a new plugin process for the same bundle); one that is not is
// rebuilt by the factory.
type relauncher interface {
	Relaunch(ctx context.Context) (Localizer, error)
}

// restartCounter is the optional plugin relaunch count of a Localizer.
type restartCounter interface{ Restarts() int }
