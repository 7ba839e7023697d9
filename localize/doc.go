// Package localize implements SL-VAE inference (Algorithm 1 of Ling et al.,
// KDD 2022) and the trained model bundle it runs from.
//
// Given an observation y in [0,1]^n, a forward model f (a plugin process,
// reached through its vector-Jacobian product) and the generative prior of
// a bundle, Solve minimises over x in [0,1]^n, batched over R restarts:
//
//	stage 1 (InitSteps):  L_init(x) = ||y - f(x)||^2 - w·sum_i [x_i a_i + (1-x_i) b_i]
//	stage 2 (OptSteps):   L_pred(x) = ||y - f(x)||^2 - w·logsumexp_j (D x + c)_j
//
// with a = log d(z_bar), b = log(1 - d(z_bar)) from the decoder at the mean
// latent, and D, c from N prototype latents of training source sets (see
// package prior). w is the prior weight. The paper uses w = 1; Train
// calibrates it instead to w = 2·sigma^2, sigma^2 the forward model's
// squared error per node on validation pairs, because ||y - f(x)||^2 is
// the Gaussian log-likelihood -log p(y|x) only up to the factor
// 1/(2 sigma^2) (see Train). Each step takes an Adam step on x and clamps x
// to [0,1]. Between the stages x is binarised at 1/2, as the paper's
// Algorithm 1 binarises its initialisation.
//
// Options.Variant picks the schedule. Full is the paper's: stage 1 on
// L_init as above. DataInit, the one `sourcewatch train` records by
// default, runs stage 1 on the data term alone, ||y - f(x)||^2, and keeps
// the prior for stage 2: the descent first finds where the data points,
// then the prototypes act from there. Where the prototypes sit on training
// clusters far from the test one (Power Grid with clustered sources) L_init
// holds x near them and 50 steps of L_pred do not cross to the truth, which
// the objective favours; DataInit reaches it, and elsewhere it measures
// level with Full (see the README's results). A step costs the same under
// both: L_init's prior term is a dot product, L_pred's is the prior's cost.
//
// The paper runs 20 + 50 steps. Train can choose OptSteps on validation
// together with delta (TrainConfig.OptStepsGrid; train and eval do, from
// DefaultOptStepsGrid), reading every candidate from checkpoints of the
// same descents (Options.Checkpoints): the objective's minimum is not the
// true source set (Solve finds a lower objective than the truth's, see
// Result.Objective and Objective), so stopping earlier can regularise, and
// each step saved is a forward round trip saved.
//
// The paper's Algorithm 1 also thresholds x inside every step; that makes
// the gradient steps vanish (a small step cannot cross the threshold), so
// Solve keeps x continuous within a stage, as the design specifies.
//
// The output is, per node, a score, the fraction of restarts that reach
// the source set's cut on their own (the source probability: x_v >= delta
// for the plain threshold rule; see Result.Probability), with a bundle of
// format 7 the chance that it is a source (Result.Chance, see
// SourceChance), and the source set {v : score_v >= delta}. delta is chosen on a validation split when the
// bundle is trained and stored in it. Train may record a count rule
// instead (SourceRule): the first K nodes of the ranking, K fixed (at most
// the infected count) or a fraction of the infected count, when that cut
// has the higher F1 on the same validation
// solves; a vote of R restarts can only be thresholded into R + 1 set
// sizes, and a count cuts the ranking where the baselines cut theirs.
// The score is the mean of the final x over the restarts, with ties broken by the gradient of the objective at
// the final x (see Result.Scores), a first-order estimate of which node
// the descent would raise next: Adam's normalised steps drive almost every
// x_v to exactly 0 or 1, so the mean alone takes few values (k/R) and ties
// heavily, which ruins any ranking metric. The descent may also set x_v = 1
// on a node the observation calls uninfected, to explain its infected
// neighbours; Train may then record the ranking InfectedFirst, which puts
// every such node below every infected one, when that raises the mean
// ROC-AUC of the same validation solves (under SI a source is always
// observed infected, so it cannot lower it there), or
// InfectedThenPredicted, which also orders the uninfected nodes by the
// forward model's f(xbar): under SIR a recovered source is observed
// uninfected, the descent rarely names it (its own output would call it
// infected), and the nodes the model expects infected but the observation
// does not are the ones that recovered, the earliest infected first. Train
// may also record LoneInfectedFirst: the lone infected nodes (observed
// infected, no in-neighbour observed infected; where nothing recovers and
// every infection is observed, certain sources) above every other node,
// when that raises the validation ROC-AUC further. Where the training
// snapshots proved every lone node a source and the infected rank first,
// the source set also names, after the cut, every lone node and the
// first-ranked node of every infected component the cut leaves without
// one: each holds a source (Manifest.NamesInfectedComponents). The data term reads y
// as independent noise around f(x), so it charges at most 1 for leaving
// such a node unexplained, and the descent often does. Or, instead, a
// Calibration: every infected component holds a source under the same
// conditions, so Train fits, per class of infected component size, the
// isotonic regression of "was a source" on the score over the validation
// solves, and keeps it when its two-fold cross-fitted ROC-AUC is strictly
// higher still; an infected node's score is then the rate of sources
// among validation nodes like it. Train may also drop the prior term
// (TrainConfig.ChoosePrior): where the sources follow no pattern the
// prior has nothing to learn, and on some graphs it then costs ranking,
// so every choice above is made with and without it and the bundle keeps
// the schedule whose validation ROC-AUC is higher.
//
// # Using it from Go
//
// A bundle file (from `sourcewatch train`, or Train and Bundle.WriteFile)
// holds all inference needs besides the forward model's code. LoadBundle
// reads it (WithoutVAE skips decoding the network inference does not
// read), LaunchForward starts the bundle's forward plugin from a
// directory of sourcewatch-forward-<name> binaries, refusing a binary
// whose SHA-256 is not the one the bundle recorded (or
// LaunchOptions.Checksum pins), and configures it with the bundle's
// state; Solve then localizes an observation y, 1 for each node seen
// infected and 0 for the others, indexed as b.Graph (Graph.Lookup maps
// ids to indices, graph.ErrUnknownNode for one it lacks):
//
//	b, err := localize.LoadBundle("my.swb", nil, localize.WithoutVAE())
//	f, err := localize.LaunchForward(ctx, b, localize.LaunchOptions{PluginDir: "bin"})
//	defer f.Close()
//	res, err := localize.Solve(ctx, b, f, y, b.Options())
//	// res.Sources: node indices, highest score first (then the floor's,
//	// see Result.Sources); b.Graph.ID names them.
//
// Any Forward will do in place of the plugin (a forward.Model in the same
// process, as ExampleSolve runs icmf), but LaunchForward is what checks
// the binary and supervises the process: a crashed or hung plugin is
// relaunched and the call retried once. The supervised plugin is safe
// for concurrent calls.
//
// Give Solve the bundle's options, b.Options(), changed field by field,
// as `sourcewatch localize` does, rather than an Options built from
// zero: a zero field takes DefaultOptions' value, the paper's schedule
// (Full, R = 8, 20 + 50 steps), not the schedule and step counts the
// bundle's delta was chosen with (`sourcewatch train` records DataInit
// and, unless --opt-steps is given, the n_opt validation chose). Of a
// partly set Options, also:
//
//   - InitSteps and OptSteps take the defaults only when both are zero:
//     OptSteps set alone runs no stage 1;
//   - a zero PriorWeight is the bundle's calibrated weight (1 for a
//     bundle without one), and Bundle.Options sets it;
//   - a positive Threshold replaces not only the bundle's delta but its
//     count rule (SourceRule) and the floor of lone infected nodes and
//     components too: the source set is then every node scored at or
//     above it; the bundle's ranking still applies;
//   - a zero Seed is seed 1; bundles do not record a seed.
//
// The same holds for TrainConfig.Solve: a zero Variant trains and
// records the paper's Full, where `sourcewatch train` uses DataInit
// unless told otherwise.
package localize
