package localize

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/nn"
)

// Forward is the part of a forward model inference needs.
type Forward interface {
	Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error)
	VJP(ctx context.Context, x, dy *mat.Dense) (y, dx *mat.Dense, err error)
}

// Prior is the part of the generative prior inference needs. Both methods
// take a batch x (one restart per row), return each row's loss and write
// the gradient with respect to x into grad (same shape as x).
type Prior interface {
	// Init is -sum_i [x_i a_i + (1 - x_i) b_i] at the mean latent.
	Init(x, grad *mat.Dense) []float64
	// Pred is -logsumexp_j (D x + c)_j over the prototypes.
	Pred(x, grad *mat.Dense) []float64
}

// Start says how restarts are initialised.
type Start string

const (
	// Bernoulli starts each x_v at 0 or 1 with probability 1/2 (the paper).
	Bernoulli Start = "bernoulli"
	// SigmoidNoise starts each x_v at sigmoid(e), e ~ N(0, 1).
	SigmoidNoise Start = "sigmoid"
)

// Variant selects the inference schedule: the paper's (Full), DataInit (the
// one `sourcewatch train` records by default), or one of the paper's
// ablations (Table 4).
type Variant string

const (
	// Full is SL-VAE: L_init, then L_pred.
	Full Variant = "full"
	// NoPriorPred is ablation (a): L_init, then the forward term alone.
	NoPriorPred Variant = "a"
	// NoInit is ablation (b): L_pred from the random start, without the
	// initialisation stage (its steps are added to stage 2).
	NoInit Variant = "b"
	// NoPrior drops the prior in both stages: the forward term alone. It
	// shows what the learned prior contributes.
	NoPrior Variant = "noprior"
	// DataInit starts stage 2 (L_pred) from a stage 1 on the forward term
	// alone instead of L_init: the descent first finds where the data
	// points, then the prior's prototypes act from there.
	DataInit Variant = "datainit"
)

// ErrBadObservation is returned when y has the wrong length or a value
// outside [0, 1].
var ErrBadObservation = errors.New("bad observation")

// Options configure Solve. Zero values take the defaults of DefaultOptions.
type Options struct {
	Restarts     int     // R, restarts batched in one forward call per step
	InitSteps    int     // n_init
	OptSteps     int     // n_opt
	LearningRate float64 // Adam step size on x
	// PriorWeight is w, the weight of the prior term. Zero takes the
	// bundle's calibrated weight (see Train), or 1 when it has none.
	PriorWeight float64
	Start       Start
	Variant     Variant
	// Threshold overrides the bundle's delta when positive.
	Threshold float64
	Seed      uint64
	// Trace records the objective at every step, before its update.
	Trace bool
	// Checkpoints are values of n_opt (each in 1..OptSteps) at which Solve
	// also records the scores a Solve with that n_opt would return, in
	// Result.Checkpoints: one descent answers for every step count up to
	// OptSteps, which is how Train chooses n_opt on validation.
	Checkpoints []int
	// Predict computes f at the mean of the restarts' final x, for the
	// final x and every checkpoint (Result.Predicted, Checkpoint.Predicted):
	// one more forward call. Solve makes it whenever the bundle's ranking
	// reads it (InfectedThenPredicted).
	Predict bool
}

// DefaultOptions are the paper's settings: its schedule (Full, with which
// bundles made before the schedule was recorded are solved), R = 8,
// n_init = 20, n_opt = 50, with the prior weight left to the bundle
// (PriorWeight 0).
func DefaultOptions() Options {
	return Options{
		Restarts:     8,
		InitSteps:    20,
		OptSteps:     50,
		LearningRate: 0.05,
		Start:        Bernoulli,
		Variant:      Full,
		Seed:         1,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Restarts <= 0 {
		o.Restarts = d.Restarts
	}
	if o.InitSteps < 0 || (o.InitSteps == 0 && o.OptSteps == 0) {
		o.InitSteps, o.OptSteps = d.InitSteps, d.OptSteps
	}
	if o.LearningRate <= 0 {
		o.LearningRate = d.LearningRate
	}
	if o.PriorWeight <= 0 {
		o.PriorWeight = 1
	}
	if o.Start == "" {
		o.Start = d.Start
	}
	if o.Variant == "" {
		o.Variant = d.Variant
	}
	if o.Seed == 0 {
		o.Seed = d.Seed
	}
	return o
}

// Validate reports the first bad field.
func (o Options) Validate() error {
	switch o.Start {
	case "", Bernoulli, SigmoidNoise:
	default:
		return fmt.Errorf("start: want %q or %q, got %q", Bernoulli, SigmoidNoise, o.Start)
	}
	switch o.Variant {
	case "", Full, NoPriorPred, NoInit, NoPrior, DataInit:
	default:
		return fmt.Errorf("variant: want full, a, b, noprior or datainit, got %q", o.Variant)
	}
	if o.Threshold < 0 || o.Threshold > 1 {
		return fmt.Errorf("threshold: %g outside [0, 1]", o.Threshold)
	}
	// The bounds a bundle's manifest is held to (see Manifest.check): a
	// bundle trained with more could not be loaded.
	if o.Restarts < 0 || o.Restarts > MaxRestarts {
		return fmt.Errorf("restarts: %d outside 0..%d", o.Restarts, MaxRestarts)
	}
	if o.InitSteps < 0 || o.InitSteps > maxSteps {
		return fmt.Errorf("init_steps: %d outside 0..%d", o.InitSteps, maxSteps)
	}
	if o.OptSteps < 0 || o.OptSteps > maxSteps {
		return fmt.Errorf("opt_steps: %d outside 0..%d", o.OptSteps, maxSteps)
	}
	if !(o.PriorWeight >= 0 && o.PriorWeight <= MaxPriorWeight) {
		return fmt.Errorf("prior_weight: %g, want a value in [0, %g] (0: the default 1)", o.PriorWeight, float64(MaxPriorWeight))
	}
	if !(o.LearningRate >= 0 && o.LearningRate <= MaxLearningRate) {
		return fmt.Errorf("learning_rate: %g, want a value in [0, %g] (0: the default)", o.LearningRate, float64(MaxLearningRate))
	}
	return nil
}

// MaxPriorWeight and MaxLearningRate bound Options and a bundle's solve
// settings: the calibrated weight is at most 2 (times train's scale),
// and x lives in [0, 1], so a step over 1 leaves the box at once. A
// weight of 1e308 made the objective overflow to NaN, which the plugin
// was then blamed for.
const (
	MaxPriorWeight  = 1e6
	MaxLearningRate = 1
)

// tieWeight is epsilon of Result.Scores: small enough that the gradient
// only orders nodes whose mean x is (nearly) tied, as the clamped restarts
// leave most nodes at exactly 0 or 1.
const tieWeight = 1e-3

// Result is what Solve finds.
type Result struct {
	// Mean is, per node, the mean of the final x over the restarts.
	Mean []float64
	// Scores rank the nodes: with xbar = Mean and g the mean over restarts
	// of the gradient of the last stage's objective at the final x,
	//
	//	score_v = (1 - eps)·xbar_v + eps·rank(-g_v)/(n + 1),   eps = 1e-3,
	//
	// rank counting from 1 with ties sharing their average rank. -g_v is
	// how fast the objective falls as x_v grows, so among nodes the
	// restarts left at the same x (most end at exactly 0 or 1) the one the
	// objective would raise first comes first. Scores lie in [0, 1].
	// A node whose mean sits exactly at delta (k of R restarts) is a
	// source when the tie-break keeps its score there. A bundle whose
	// ranking is InfectedFirst or InfectedThenPredicted has the scores of
	// the nodes observed uninfected rescaled below every infected node's
	// (see those), one with LoneInfectedFirst the lone infected nodes'
	// above every other node's (see LoneInfected), and one with a
	// Calibration the infected nodes' replaced by their calibrated
	// scores (see Calibration).
	Scores []float64
	// Probability is, per node, the fraction of restarts that name it a
	// source when each restart's own final x is reranked as Scores are
	// and cut at the source set's cut: the fraction with x_v >= delta
	// (each restart tie-broken by its own gradient) under the plain
	// threshold rule, and under a count rule the fraction whose x,
	// reranked, reaches the mean x of the K-th source, reranked (voteAt:
	// a source the rule named with a mean x above 0 has at least one
	// restart's vote). With a floor each restart's set then takes the
	// floor by its own scores: every lone node (probability 1) and the
	// restart's own first node of each infected component its cut left
	// without one, so a component's node the floor named by Scores may
	// have few votes, or none, where the restarts disagree on which node
	// of the component comes first. (Solve's internal
	// summaries, before the bundle's rules, hold the fraction with
	// x_v >= delta.)
	Probability []float64
	// Chance is, per node, the chance that it is a source: its score's
	// rate of sources among the nodes of its class in the cascades the
	// bundle measured it on (see SourceChance), so sum_v Chance_v
	// estimates the observation's source count; nil for a bundle without
	// a SourceChance (format 6 and older). Where every infected component
	// holds a source (Manifest.NamesInfectedComponents), a component's
	// chances summing to less than 1 are raised to sum to 1.
	Chance []float64
	// Predicted is f(Mean), the forward model's infection probability at
	// the mean final x, when Options.Predict is set or the bundle's
	// ranking reads it; nil otherwise.
	Predicted []float64
	// Sources are the suspected sources, highest score first: the nodes
	// with Scores >= Threshold under the threshold rule, the first K of
	// the ranking under a count rule (see SourceRule), then the Floor
	// nodes the observation proves or demands (see
	// Manifest.NamesInfectedComponents), at or below Threshold.
	Sources []int
	// Floor is how many of the last Sources the floor added: lone
	// infected nodes, and the first-ranked node of each infected
	// component the cut left without one.
	Floor int
	// Threshold is the cut of the scores: delta under the threshold rule,
	// the K-th highest score under a count rule (see SourceRule), where a
	// node tied with it may rank after the K-th and stay out.
	Threshold float64
	// Trace is the objective (mean over restarts) at every step, before
	// its update (so Trace[0] is at the starting x), when Options.Trace is
	// set; Objective is the one at the final x.
	Trace []float64
	// Checkpoints are the scores at Options.Checkpoints, one per distinct
	// value, by step count.
	Checkpoints []Checkpoint
	// Objective is, per restart, the last stage's objective at the final
	// x (its minimised value: compare Objective at the true sources, see
	// the package function Objective).
	Objective []float64
	// Timing splits the wall time of the solve.
	Timing Timing

	// final and finalGrad are the restarts' final x and the gradient of
	// the objective there, one row per restart.
	final, finalGrad *mat.Dense
}

// Checkpoint is what a Solve with OptSteps = Steps would have scored.
type Checkpoint struct {
	Steps  int
	Scores []float64
	// Mean is the mean x over the restarts there, and Predicted f(Mean)
	// when Result.Predicted is set.
	Mean, Predicted []float64
}

// Timing splits a solve's time between the forward model and the prior.
type Timing struct {
	ForwardSeconds float64 `json:"forward_seconds"` // in Forward calls (plugin compute and round trips)
	PriorSeconds   float64 `json:"prior_seconds"`   // in the prior terms, which overlap the Forward calls
	TotalSeconds   float64 `json:"total_seconds"`
}

// Problem is one inference problem: a forward model, a prior and an
// observation. Its evaluate method gives each stage's objective and
// gradient, which the tests check against finite differences.
type Problem struct {
	Forward     Forward
	Prior       Prior
	Y           []float64
	PriorWeight float64

	target *mat.Dense // Y as a 1 x n matrix, for the fused forward call
}

// stage is which objective a step minimises.
type stage int

const (
	stageInit    stage = iota // ||y - f(x)||^2 + w·Init
	stagePred                 // ||y - f(x)||^2 + w·Pred
	stageForward              // ||y - f(x)||^2
)

// evaluate returns the per-row objective of stage s at x and writes its
// gradient into grad (when non-nil). scratch must be shaped like x.
//
// The prior terms do not depend on f(x), so they are computed in a
// goroutine while the forward call runs; with a plugin process that call
// is mostly waiting for the other process, and the two overlap.
func (p *Problem) evaluate(ctx context.Context, s stage, x, grad, scratch *mat.Dense, clock *Timing) ([]float64, error) {
	var (
		pl        []float64
		priorSecs float64
		priorDone chan struct{}
	)
	if s != stageForward && p.PriorWeight != 0 {
		priorDone = make(chan struct{})
		go func() {
			defer close(priorDone)
			t := nowSeconds()
			if s == stageInit {
				pl = p.Prior.Init(x, scratch)
			} else {
				pl = p.Prior.Pred(x, scratch)
			}
			priorSecs = nowSeconds() - t
		}()
	}
	t0 := nowSeconds()
	loss, err := p.dataTerm(ctx, x, grad)
	clock.ForwardSeconds += nowSeconds() - t0
	if priorDone == nil {
		return loss, err
	}
	<-priorDone
	clock.PriorSeconds += priorSecs
	if err != nil {
		return nil, err
	}
	for i := range loss {
		loss[i] += p.PriorWeight * pl[i]
	}
	if grad != nil {
		r, _ := x.Dims()
		for i := 0; i < r; i++ {
			g, s := grad.RawRowView(i), scratch.RawRowView(i)
			for v := range g {
				g[v] += p.PriorWeight * s[v]
			}
		}
	}
	return loss, nil
}

// dataTerm returns ||y - f(x)||^2 per row and writes its gradient into
// grad (when non-nil).
func (p *Problem) dataTerm(ctx context.Context, x, grad *mat.Dense) ([]float64, error) {
	r, n := x.Dims()
	if grad != nil {
		// One round trip for the loss and its gradient: the plugin host's
		// fused call, or Predict then VJP for a model without it.
		if p.target == nil {
			p.target = mat.NewDense(1, n, append([]float64(nil), p.Y...))
		}
		loss, dx, err := forward.SquaredErrorLoss(ctx, p.Forward, x, p.target)
		if err != nil {
			return nil, fmt.Errorf("forward vjp: %w", err)
		}
		if gr, gc := dx.Dims(); gr != r || gc != n || len(loss) != r {
			return nil, fmt.Errorf("forward vjp: got %dx%d gradient and %d losses for %dx%d input: %w", gr, gc, len(loss), r, n, errShape)
		}
		grad.Copy(dx)
		return loss, nil
	}
	fy, err := p.Forward.Predict(ctx, x)
	if err != nil {
		return nil, fmt.Errorf("forward predict: %w", err)
	}
	if fr, fc := fy.Dims(); fr != r || fc != n {
		return nil, fmt.Errorf("forward: got %dx%d for %dx%d input: %w", fr, fc, r, n, errShape)
	}
	loss := make([]float64, r)
	for i := 0; i < r; i++ {
		var sum float64
		for v, f := range fy.RawRowView(i) {
			d := f - p.Y[v]
			sum += d * d
		}
		loss[i] = sum
	}
	return loss, nil
}

var errShape = errors.New("shape mismatch")

// Solve runs SL-VAE inference (Algorithm 1, or the schedule opts.Variant
// names) for observation y with the bundle's prior, threshold, ranking
// and source rule and the forward model f. See the package documentation
// for the objective.
func Solve(ctx context.Context, b *Bundle, f Forward, y []float64, opts Options) (*Result, error) {
	delta := b.Manifest.Threshold
	if opts.Threshold > 0 {
		delta = opts.Threshold
	}
	if opts.PriorWeight == 0 {
		opts.PriorWeight = b.Manifest.Solve.PriorWeight
	}
	r := b.Manifest.Ranking
	opts.Predict = opts.Predict || r.needsPrediction()
	res, err := solve(ctx, b.Manifest.Graph.Nodes, delta, b.Prior(), f, y, opts)
	if err != nil {
		return nil, err
	}
	rr := b.reranking(y)
	rr.apply(res.Scores, res.Predicted)
	for _, cp := range res.Checkpoints {
		rr.apply(cp.Scores, cp.Predicted)
	}
	cut := sourceCut{delta: delta, infected: countInfected(y)}
	// An explicit threshold overrides the bundle's rule, whichever it is.
	if opts.Threshold == 0 {
		cut.rule = b.Manifest.SourceRule
		if b.Manifest.NamesInfectedComponents() {
			cut.floor = &sourceFloor{
				lone:       LoneInfected(b.Graph, y, nil),
				components: InfectedComponents(b.Graph, y, nil),
			}
		}
	}
	var ruled int
	res.Sources, ruled, res.Threshold = cut.apply(res.Scores)
	res.Floor = len(res.Sources) - ruled
	vote := voteAt(cut, res.Threshold, res.Sources[:ruled], res.Mean, rr, res.Predicted)
	vote.floor = cut.floor
	res.Probability = namedFraction(res.final, res.finalGrad, rr, vote, res.Predicted)
	if sc := b.Manifest.SourceChance; sc != nil {
		res.Chance = sc.apply(nil, res.Scores, y)
		if b.Manifest.NamesInfectedComponents() {
			comp := InfectedComponents(b.Graph, y, nil)
			if cut.floor != nil {
				comp = cut.floor.components
			}
			floorComponents(res.Chance, res.Scores, comp)
		}
	}
	return res, nil
}

// reranking is what a bundle does to the descent's scores for one
// observation: its ranking, then the lone infected nodes' lift or the
// calibration by infected component size.
type reranking struct {
	ranking Ranking
	y       []float64
	lone    []bool // nil: no lift
	cal     *Calibration
	sizes   []int
}

func (b *Bundle) reranking(y []float64) reranking {
	rr := reranking{ranking: b.Manifest.Ranking, y: y, cal: b.Manifest.Calibration}
	if b.Manifest.LoneInfectedFirst {
		rr.lone = LoneInfected(b.Graph, y, nil)
	}
	if rr.cal != nil {
		rr.sizes = InfectedComponentSizes(b.Graph, y, nil)
	}
	return rr
}

// apply reranks scores in place; predicted is f(xbar), which only the
// InfectedThenPredicted ranking reads.
func (rr reranking) apply(scores, predicted []float64) {
	rr.ranking.apply(scores, rr.y, predicted)
	if rr.lone != nil {
		liftLone(scores, rr.lone)
	}
	if rr.cal != nil {
		rr.cal.apply(scores, rr.y, rr.sizes)
	}
}

// namedFraction returns, per node, the fraction of the restarts that
// name it, each restart's final x reranked by rr as the mean's was and
// cut by vote: under the plain threshold rule (tie-broken by the
// restart's own gradient, as Result.Scores over one restart), the
// fraction with x_v at delta or over (up to the tie-break's 0.001), with
// a lift or a calibration at delta or over once reranked; where a node's
// score cut the set (a count, or the floor of proven sources), the fraction
// whose x, reranked without the tie-break, reaches the mean x of the
// set's last node, reranked the same way (see voteAt).
func namedFraction(x, grad *mat.Dense, rr reranking, vote restartVote, predicted []float64) []float64 {
	r, n := x.Dims()
	frac := make([]float64, n)
	scores := make([]float64, n)
	pull := make([]float64, n)
	var named []int
	for i := 0; i < r; i++ {
		row := x.RawRowView(i)
		if vote.tieBreak {
			for v, g := range grad.RawRowView(i) {
				pull[v] = -g
			}
			rank := averageRanks(pull)
			for v, xv := range row {
				scores[v] = tieBroken(xv, rank[v], n)
			}
		} else {
			copy(scores, row)
		}
		rr.apply(scores, predicted)
		named = named[:0]
		for v, s := range scores {
			if s > vote.at || (s == vote.at && !vote.strict) {
				named = append(named, v)
			}
		}
		if vote.floor != nil {
			named = vote.floor.extendBest(named, scores)
		}
		for _, v := range named {
			frac[v] += 1 / float64(r)
		}
	}
	return frac
}

// restartVote is where namedFraction cuts a restart's scores.
type restartVote struct {
	at float64
	// tieBreak is whether the restart's scores carry its gradient's
	// tie-break; strict, whether a score must exceed at, not reach it.
	tieBreak, strict bool
	// floor, when set, adds to each restart's vote what it adds to the
	// source set, by the restart's own scores.
	floor *sourceFloor
}

// voteTolerance is how far, relative to the cut, a restart's x may fall
// short of the mean x that cut a set and still vote: the rounding of a
// mean over up to MaxRestarts restarts, far below any difference of x
// that ranks.
const voteTolerance = 1e-9

// voteAt is the cut of each restart's vote for the source set sources
// (highest score first) that cut, given the threshold it returned, made
// from the restarts' mean x: delta, with each restart's own tie-break,
// under the threshold rule; where a node's score cut the set (a count,
// or the floor of proven sources), the lowest mean x of the set's nodes
// (the last node's, unless the tie-break ranked a lower one above it),
// reranked by rr, against each restart's x reranked the same way, neither
// with a tie-break. Not the last node's score: it carries the mean gradient's
// tie-break, which no one restart need reach (a source at the clamp's 1
// in every restart had no vote), and not each restart's own K-th (a node
// at 0.98 in every restart, ranked 4th of 8 by the mean, had none either,
// each restart having other nodes at 1). Where that mean x is 0 (the
// node named by the tie-break alone), a vote needs more than 0: at 0, or
// less the tie-break's share, every node of the graph had every vote.
func voteAt(cut sourceCut, threshold float64, sources []int, mean []float64, rr reranking, predicted []float64) restartVote {
	if (cut.rule.IsThreshold() && threshold >= cut.delta) || len(sources) == 0 {
		return restartVote{at: threshold, tieBreak: true}
	}
	m := slices.Clone(mean)
	rr.apply(m, predicted)
	// The lowest of the set's mean x, not the last node's: the tie-break
	// can rank a node above the last whose mean x is lower (by up to its
	// share), and that node's restarts, none reaching the last one's mean,
	// had no vote.
	at := m[sources[0]]
	for _, v := range sources[1:] {
		at = min(at, m[v])
	}
	if !(at > 0) {
		return restartVote{at: at, strict: true}
	}
	// A restart at the mean's own x reaches it: the mean of R equal x,
	// summed in R-ths, can round above every one of them (three restarts
	// at 0.445 have the mean 0.44500000000000006).
	return restartVote{at: at * (1 - voteTolerance)}
}

// Objective returns, per row of x, the objective the last stage of Solve
// (with the same b, f, y and opts) minimises, at x: for the full method
// ||y - f(x)||^2 - w logsumexp_j (D x + c)_j. Evaluated at the true
// sources and set beside Result.Objective it tells the optimiser's
// shortfall (the truth scores lower than what Solve found) from the
// objective's (Solve found lower than the truth: the objective does not
// single out the truth).
func Objective(ctx context.Context, b *Bundle, f Forward, y []float64, x *mat.Dense, opts Options) ([]float64, error) {
	if opts.PriorWeight == 0 {
		opts.PriorWeight = b.Manifest.Solve.PriorWeight
	}
	return objective(ctx, b.Manifest.Graph.Nodes, b.Prior(), f, y, x, opts)
}

func objective(ctx context.Context, n int, pr Prior, f Forward, y []float64, x *mat.Dense, opts Options) ([]float64, error) {
	p, opts, err := newProblem(n, pr, f, y, opts)
	if err != nil {
		return nil, err
	}
	r, c := x.Dims()
	if c != n {
		return nil, fmt.Errorf("%w: x has %d columns for %d nodes", errShape, c, n)
	}
	var clock Timing
	return p.evaluate(ctx, opts.Variant.lastStage(), x, nil, mat.NewDense(r, c, nil), &clock)
}

// lastStage is the objective of a variant's last stage.
func (v Variant) lastStage() stage {
	switch v {
	case NoPriorPred, NoPrior:
		return stageForward
	default:
		return stagePred
	}
}

// newProblem checks opts and y and builds the inference problem.
func newProblem(n int, pr Prior, f Forward, y []float64, opts Options) (*Problem, Options, error) {
	if err := opts.Validate(); err != nil {
		return nil, opts, err
	}
	opts = opts.withDefaults()
	for _, k := range opts.Checkpoints {
		if k < 1 || k > opts.OptSteps {
			return nil, opts, fmt.Errorf("checkpoints: %d outside 1..opt_steps (%d)", k, opts.OptSteps)
		}
	}
	if len(y) != n {
		return nil, opts, fmt.Errorf("%w: %d values for a %d-node graph", ErrBadObservation, len(y), n)
	}
	for v, yv := range y {
		if !(yv >= 0 && yv <= 1) {
			return nil, opts, fmt.Errorf("%w: node %d has y = %g, want [0, 1]", ErrBadObservation, v, yv)
		}
	}
	p := &Problem{Forward: f, Prior: pr, Y: y, PriorWeight: opts.PriorWeight}
	if opts.Variant == NoPrior {
		p.PriorWeight = 0
	}
	return p, opts, nil
}

func solve(ctx context.Context, n int, delta float64, pr Prior, f Forward, y []float64, opts Options) (*Result, error) {
	p, opts, err := newProblem(n, pr, f, y, opts)
	if err != nil {
		return nil, err
	}
	start := nowSeconds()
	d, err := p.descend(ctx, opts)
	if err != nil {
		return nil, err
	}
	res := summarize(d.x, d.grad, delta)
	res.final, res.finalGrad = d.x, d.grad
	res.Objective = d.final
	res.Trace = d.trace
	res.Checkpoints = d.checkpoints
	if opts.Predict {
		if err := predictAtMeans(ctx, f, res, &d.clock); err != nil {
			return nil, err
		}
	}
	d.clock.TotalSeconds = nowSeconds() - start
	res.Timing = d.clock
	return res, nil
}

// predictAtMeans sets res.Predicted and every checkpoint's Predicted to f
// at the mean x, in one forward call.
func predictAtMeans(ctx context.Context, f Forward, res *Result, clock *Timing) error {
	n := len(res.Mean)
	means := mat.NewDense(1+len(res.Checkpoints), n, nil)
	means.SetRow(0, res.Mean)
	for i, cp := range res.Checkpoints {
		means.SetRow(1+i, cp.Mean)
	}
	start := nowSeconds()
	pred, err := f.Predict(ctx, means)
	clock.ForwardSeconds += nowSeconds() - start
	if err != nil {
		return fmt.Errorf("predicting at the mean x: %w", err)
	}
	if r, c := pred.Dims(); r != 1+len(res.Checkpoints) || c != n {
		return fmt.Errorf("predicting at the mean x: forward model returned %dx%d for %dx%d", r, c, 1+len(res.Checkpoints), n)
	}
	res.Predicted = append([]float64(nil), pred.RawRowView(0)...)
	for i := range res.Checkpoints {
		res.Checkpoints[i].Predicted = append([]float64(nil), pred.RawRowView(1+i)...)
	}
	return nil
}

// descent is what descend returns.
type descent struct {
	x, grad     *mat.Dense // the final x, and the last stage's gradient there
	final       []float64  // the last stage's objective per restart at x
	trace       []float64
	checkpoints []Checkpoint
	clock       Timing
}

// descend runs the two stages from fresh starts.
func (p *Problem) descend(ctx context.Context, opts Options) (descent, error) {
	var d descent
	r, n := opts.Restarts, len(p.Y)
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	x := mat.NewDense(r, n, nil)
	raw := x.RawMatrix().Data
	for i := range raw {
		switch opts.Start {
		case SigmoidNoise:
			raw[i] = 1 / (1 + math.Exp(-rng.NormFloat64()))
		default:
			if rng.IntN(2) == 1 {
				raw[i] = 1
			}
		}
	}
	type phase struct {
		s     stage
		steps int
	}
	var phases []phase
	switch opts.Variant {
	case Full:
		phases = []phase{{stageInit, opts.InitSteps}, {stagePred, opts.OptSteps}}
	case NoPriorPred:
		phases = []phase{{stageInit, opts.InitSteps}, {stageForward, opts.OptSteps}}
	case NoInit:
		phases = []phase{{stagePred, opts.InitSteps + opts.OptSteps}}
	case NoPrior:
		phases = []phase{{stageForward, opts.InitSteps}, {stageForward, opts.OptSteps}}
	case DataInit:
		phases = []phase{{stageForward, opts.InitSteps}, {stagePred, opts.OptSteps}}
	}
	// A checkpoint for n_opt = k falls after k steps of the last phase,
	// which for ablation (b) also holds the n_init steps.
	offset := 0
	if opts.Variant == NoInit {
		offset = opts.InitSteps
	}
	at := make(map[int]bool, len(opts.Checkpoints))
	for _, k := range opts.Checkpoints {
		at[offset+k] = true
	}
	grad := mat.NewDense(r, n, nil)
	scratch := mat.NewDense(r, n, nil)
	// Adam on x (nn.Adam: bias-corrected moments, beta 0.9 and 0.999),
	// reading the gradient evaluate writes into grad.
	adam := nn.NewAdam([]*nn.Param{{Name: "x", Value: raw, Grad: grad.RawMatrix().Data, Rows: r, Cols: n}}, opts.LearningRate)
	for k, ph := range phases {
		if k > 0 {
			// Algorithm 1 feeds the binarised initialisation to stage 2.
			for i, v := range raw {
				if v >= 0.5 {
					raw[i] = 1
				} else {
					raw[i] = 0
				}
			}
			adam.Reset()
		}
		last := k == len(phases)-1
		for step := 0; step < ph.steps; step++ {
			if err := ctx.Err(); err != nil {
				return d, err
			}
			loss, err := p.evaluate(ctx, ph.s, x, grad, scratch, &d.clock)
			if err != nil {
				return d, err
			}
			if last && at[step] {
				// x has had step updates and grad is the objective's
				// gradient there: a shorter Solve's final state.
				sum := summarize(x, grad, 1)
				d.checkpoints = append(d.checkpoints, Checkpoint{Steps: step - offset, Scores: sum.Scores, Mean: sum.Mean})
			}
			adam.Step()
			for i, v := range raw {
				raw[i] = math.Min(1, math.Max(0, v))
			}
			if opts.Trace {
				d.trace = append(d.trace, mean(loss))
			}
		}
	}
	// One more gradient, at the final x, for the scores' tie-break (the
	// loop's last gradient is from before its last step).
	if err := ctx.Err(); err != nil {
		return d, err
	}
	final, err := p.evaluate(ctx, phases[len(phases)-1].s, x, grad, scratch, &d.clock)
	if err != nil {
		return d, err
	}
	d.x, d.grad, d.final = x, grad, final
	if at[offset+opts.OptSteps] {
		sum := summarize(x, grad, 1)
		d.checkpoints = append(d.checkpoints, Checkpoint{Steps: opts.OptSteps, Scores: sum.Scores, Mean: sum.Mean})
	}
	sort.Slice(d.checkpoints, func(i, j int) bool { return d.checkpoints[i].Steps < d.checkpoints[j].Steps })
	return d, nil
}

// summarize turns the restarts' final x and objective gradient into
// scores, probabilities and the source set.
func summarize(x, grad *mat.Dense, delta float64) *Result {
	r, n := x.Dims()
	res := &Result{Mean: make([]float64, n), Scores: make([]float64, n), Probability: make([]float64, n), Threshold: delta}
	pull := make([]float64, n) // -g, mean over restarts
	for i := 0; i < r; i++ {
		g := grad.RawRowView(i)
		for v, xv := range x.RawRowView(i) {
			res.Mean[v] += xv / float64(r)
			pull[v] -= g[v] / float64(r)
			if xv >= delta {
				res.Probability[v] += 1 / float64(r)
			}
		}
	}
	rank := averageRanks(pull)
	for v, m := range res.Mean {
		res.Scores[v] = tieBroken(m, rank[v], n)
		if res.Scores[v] >= delta {
			res.Sources = append(res.Sources, v)
		}
	}
	sort.SliceStable(res.Sources, func(i, j int) bool {
		return res.Scores[res.Sources[i]] > res.Scores[res.Sources[j]]
	})
	return res
}

// tieBroken is the score of a node at mean x m whose pull ranks rank
// (from 1) among n nodes: see Result.Scores.
func tieBroken(m, rank float64, n int) float64 {
	return (1-tieWeight)*m + tieWeight*rank/float64(n+1)
}

// averageRanks returns the ascending rank of each value, from 1, with tied
// values sharing their average rank.
func averageRanks(vals []float64) []float64 {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return vals[idx[a]] < vals[idx[b]] })
	rank := make([]float64, len(vals))
	for lo := 0; lo < len(idx); {
		hi := lo + 1
		for hi < len(idx) && vals[idx[hi]] == vals[idx[lo]] {
			hi++
		}
		// places lo+1 .. hi share their mean
		for _, i := range idx[lo:hi] {
			rank[i] = float64(lo+1+hi) / 2
		}
		lo = hi
	}
	return rank
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// nowSeconds is a monotonic clock reading for the timing breakdown.
func nowSeconds() float64 { return float64(time.Since(epoch)) / float64(time.Second) }

var epoch = time.Now()
