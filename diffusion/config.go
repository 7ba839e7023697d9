package diffusion

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/sourcewatch/sourcewatch/graph"
)

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid diffusion config")

// ErrUnreachable is wrapped by the error Simulate returns when a cascade
// cannot reach its observation target within MaxRedraws draws in a row
// (an *UnreachableError, which names the parameters to blame).
var ErrUnreachable = errors.New("observation target unreachable")

// SourceSpec says how many sources a cascade has. Exactly one of the three
// forms is set: a fixed Count > 0; a Ratio > 0 of the nodes (rounded, at
// least 1); or a range Min..Max (1 <= Min <= Max), the count drawn uniformly
// per cascade.
type SourceSpec struct {
	Count int
	Ratio float64
	Min   int
	Max   int
}

// String renders the spec the way the CLI accepts it.
func (s SourceSpec) String() string {
	switch {
	case s.Count > 0:
		return fmt.Sprint(s.Count)
	case s.Ratio > 0:
		return fmt.Sprintf("ratio %g", s.Ratio)
	default:
		return fmt.Sprintf("%d-%d", s.Min, s.Max)
	}
}

// count draws the number of sources of one cascade on n nodes; the rng is
// touched only for a range, so fixed counts do not shift the random stream.
func (s SourceSpec) count(n int, draw func(int) int) int {
	switch {
	case s.Count > 0:
		return s.Count
	case s.Ratio > 0:
		k := int(math.Round(s.Ratio * float64(n)))
		return max(1, min(k, n))
	default:
		return s.Min + draw(s.Max-s.Min+1)
	}
}

// Config describes one family of cascades.
type Config struct {
	// Model is the diffusion process.
	Model Model
	// Beta is the SI/SIR infection probability per infected contact per
	// step: a susceptible node with k infected in-neighbours is infected
	// in a step with probability 1 - (1 - Beta)^k. SI and SIR use Beta on
	// every arc: a weighted graph's weights are not read.
	Beta float64
	// Gamma is the SIR recovery probability per infected node per step.
	Gamma float64
	// P is the IC activation probability of every arc; a weighted graph's
	// arc weights replace it.
	P float64
	// Threshold is the LT node threshold: negative draws theta_v ~ U[0,1]
	// per node per cascade; otherwise every node uses this value.
	Threshold float64
	// Sources is how many sources each cascade gets, Pattern how they are
	// placed. The empty Pattern means Uniform.
	Sources SourceSpec
	Pattern Pattern
	// ObserveMin and ObserveMax bound the per-cascade target fraction
	// f ~ U[ObserveMin, ObserveMax]; the snapshot is taken at the first
	// step with at least ceil(f n) infected nodes.
	ObserveMin, ObserveMax float64
	// MaxSteps caps one run; a run that reaches it below the target is
	// redrawn like one that died out. RunFull runs without a cap when it
	// is not positive.
	MaxSteps int
	// MaxRedraws is how many failed draws in a row Simulate tolerates per
	// cascade before giving up with ErrUnreachable.
	MaxRedraws int
}

// DefaultConfig returns SI with beta 0.1 (gamma 0.05, p 0.1, random LT
// thresholds for the other models), 10% uniform sources as in the paper,
// and a snapshot when 20-50% of the nodes are infected.
func DefaultConfig() Config {
	return Config{
		Model:      SI,
		Beta:       0.1,
		Gamma:      0.05,
		P:          0.1,
		Threshold:  -1,
		Sources:    SourceSpec{Ratio: 0.1},
		Pattern:    Uniform,
		ObserveMin: 0.2,
		ObserveMax: 0.5,
		MaxSteps:   100000,
		MaxRedraws: 100,
	}
}

// ParseModel parses a model name, case-insensitively.
func ParseModel(s string) (Model, error) {
	switch m := Model(strings.ToUpper(strings.TrimSpace(s))); m {
	case SI, SIR, IC, LT:
		return m, nil
	}
	return "", fmt.Errorf("%w: unknown diffusion model %q (want SI, SIR, IC or LT)", ErrConfig, s)
}

// ParsePattern parses a source pattern name, case-insensitively.
func ParsePattern(s string) (Pattern, error) {
	switch p := Pattern(strings.ToLower(strings.TrimSpace(s))); p {
	case Uniform, Degree, Cluster:
		return p, nil
	case "":
		return Uniform, nil
	}
	return "", fmt.Errorf("%w: unknown source pattern %q (want uniform, degree or cluster)", ErrConfig, s)
}

// Validate checks c against the graph it will run on. Only the parameters
// of c.Model are checked.
func (c Config) Validate(g *graph.Graph) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if g == nil || g.N() == 0 {
		return bad("graph has no nodes")
	}
	n := g.N()
	prob := func(name string, v float64, allowZero bool) error {
		if math.IsNaN(v) || v > 1 || v < 0 || (v == 0 && !allowZero) {
			lo := "(0"
			if allowZero {
				lo = "[0"
			}
			return bad("%s %v outside %s, 1]", name, v, lo)
		}
		return nil
	}
	switch c.Model {
	case SI:
		if err := prob("beta", c.Beta, false); err != nil {
			return err
		}
	case SIR:
		if err := prob("beta", c.Beta, false); err != nil {
			return err
		}
		if err := prob("gamma", c.Gamma, true); err != nil {
			return err
		}
	case IC:
		if !g.Weighted() {
			if err := prob("p", c.P, false); err != nil {
				return err
			}
		}
	case LT:
		if math.IsNaN(c.Threshold) || c.Threshold > 1 {
			return bad("threshold %v: want at most 1 (negative means uniform random)", c.Threshold)
		}
	default:
		return bad("unknown model %q (want SI, SIR, IC or LT)", c.Model)
	}

	s := c.Sources
	forms := 0
	if s.Count != 0 {
		forms++
	}
	if s.Ratio != 0 {
		forms++
	}
	if s.Min != 0 || s.Max != 0 {
		forms++
	}
	switch {
	case forms != 1:
		return bad("sources: set exactly one of count, ratio or min..max range")
	case s.Count < 0:
		return bad("sources: count %d is negative", s.Count)
	case s.Count > n:
		return bad("sources: count %d exceeds the graph's %d nodes", s.Count, n)
	case s.Ratio != 0 && (math.IsNaN(s.Ratio) || s.Ratio < 0 || s.Ratio > 1):
		return bad("sources: ratio %v outside (0, 1]", s.Ratio)
	case forms == 1 && s.Count == 0 && s.Ratio == 0 && (s.Min < 1 || s.Max < s.Min):
		return bad("sources: range %d-%d needs 1 <= min <= max", s.Min, s.Max)
	case s.Max > n:
		return bad("sources: range maximum %d exceeds the graph's %d nodes", s.Max, n)
	}
	if _, err := ParsePattern(string(c.Pattern)); err != nil {
		return err
	}

	if math.IsNaN(c.ObserveMin) || math.IsNaN(c.ObserveMax) ||
		c.ObserveMin <= 0 || c.ObserveMax > 1 || c.ObserveMin > c.ObserveMax {
		return bad("observe range %v-%v needs 0 < min <= max <= 1", c.ObserveMin, c.ObserveMax)
	}
	if c.MaxSteps < 1 {
		return bad("max steps %d must be positive", c.MaxSteps)
	}
	if c.MaxRedraws < 1 {
		return bad("max redraws %d must be positive", c.MaxRedraws)
	}
	return nil
}

// UsesWeights reports whether model m reads a weighted graph's arc
// weights: IC takes them as activation probabilities (in place of P) and
// LT as influences (in place of 1/in-degree); SI and SIR ignore them and
// spread with Beta on every arc.
func (m Model) UsesWeights() bool { return m == IC || m == LT }

// Suspect is a parameter that, moved in the direction given, makes an
// observation target easier to reach.
type Suspect struct {
	// Param is the Config field: "Beta", "Gamma", "P", "Threshold",
	// "MaxSteps", "MaxRedraws", or "Observe" for the range
	// ObserveMin..ObserveMax; or "Weights", the graph's arc weights, which
	// IC and LT use, or "RandomThreshold", LT's thresholds drawn per node
	// (Threshold negative), which a fixed one below 0.5 replaces.
	Param string
	// Raise is true when a larger value helps, false when a smaller one
	// does.
	Raise bool
}

// UnreachableError is the error Simulate returns when a cascade's draws
// keep stopping below its observation target. It wraps ErrUnreachable.
// Its message names the parameters to blame in Config's terms; a front end
// with its own names for them (command-line flags) renders it with
// Explain.
type UnreachableError struct {
	// Cascade is the index of the cascade that failed.
	Cascade int
	// Draws is the number of failed draws in a row (MaxRedraws).
	Draws int
	// Need is the infected count the target asks for at once, Target
	// the target fraction it came from.
	Need   int
	Target float64
	// Peak is the most nodes infected at once over the failed draws.
	Peak int
	// Suspects are the parameters most likely to blame, the model's own
	// first (only those that can still move the right way: no higher beta
	// than 1); MaxSteps is among them only when a draw was still spreading
	// when it hit the cap, MaxRedraws only when the best draw came within
	// a tenth of the target.
	Suspects []Suspect
	// Directed is set on a directed graph, where the spread reaches only
	// what the arcs lead to from the sources.
	Directed bool
	// Reached counts the cascades of the same Simulate call that
	// infected at least Need nodes at once: some draws can, so more
	// redraws would find one.
	Reached int
	// Largest is the node count of the graph's largest weakly connected
	// component, 0 if not known. Below Need it tells a user why sources
	// confined to one component (a cluster) cannot reach the target.
	Largest int
}

// Error renders the message with Config's field names.
func (e *UnreachableError) Error() string { return e.Explain(nil) }

// Unwrap returns ErrUnreachable.
func (e *UnreachableError) Unwrap() error { return ErrUnreachable }

// Explain renders the message with each suspect named by name(param);
// a nil name, or one returning "", uses Config's names.
func (e *UnreachableError) Explain(name func(param string) string) string {
	parts := make([]string, len(e.Suspects))
	for i, s := range e.Suspects {
		n := ""
		if name != nil {
			n = name(s.Param)
		}
		if n == "" {
			n = configName(s.Param)
		}
		way := " too high"
		if s.Raise {
			way = " too low"
		}
		if s.Param == "RandomThreshold" {
			way = "" // no value to lower: the name says what to do
		}
		parts[i] = n + way
	}
	blame := "the model too weak"
	switch len(parts) {
	case 0:
	case 1:
		blame = parts[0]
	default:
		blame = strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	shape := "the graph's components too small"
	if e.Largest > 0 && e.Largest < e.Need {
		shape += fmt.Sprintf(" (the largest has %d nodes)", e.Largest)
	}
	if e.Directed {
		shape = "too few nodes reachable from the sources along the arcs"
	}
	rare := ""
	if e.Reached > 0 {
		redraws := ""
		if name != nil {
			redraws = name("MaxRedraws")
		}
		if redraws == "" {
			redraws = "MaxRedraws"
		}
		redraws, _, _ = strings.Cut(redraws, " (")
		cascades := "cascades of this run"
		if e.Reached == 1 {
			cascades = "cascade of this run"
		}
		rare = fmt.Sprintf(" (%d other %s infected at least %d nodes at once, so it is rare rather than out of reach: a higher %s draws until one does, but the cascades kept then start where a spread can reach it)",
			e.Reached, cascades, e.Need, redraws)
	}
	return fmt.Sprintf("cascade %d: %d draws in a row stayed below the observation target of %d infected nodes (%.0f%%); the most infected at once was %d: %s, or %s%s: %v",
		e.Cascade, e.Draws, e.Need, 100*e.Target, e.Peak, blame, shape, rare, ErrUnreachable)
}

// configName is how UnreachableError names a suspect by default.
func configName(param string) string {
	switch param {
	case "Observe":
		return "the observation range ObserveMin-ObserveMax"
	case "Weights":
		return "the arc weights"
	case "MaxRedraws":
		return "MaxRedraws (the best draw came close)"
	case "RandomThreshold":
		return "the random node thresholds (a fixed Threshold below their mean 0.5 spreads further)"
	}
	return param
}

// suspects names the parameters most likely to blame when cascades keep
// stopping below the target on g: the model's own, MaxSteps when a draw
// hit it while still spreading, and the target itself.
func (c Config) suspects(g *graph.Graph, capped, nearMiss bool) []Suspect {
	var out []Suspect
	switch c.Model {
	case SI:
		if c.Beta < 1 {
			out = append(out, Suspect{"Beta", true})
		}
	case SIR:
		// the infected count at once must reach the target, so recovery
		// competes with infection
		if c.Beta < 1 {
			out = append(out, Suspect{"Beta", true})
		}
		if c.Gamma > 0 {
			out = append(out, Suspect{"Gamma", false})
		}
	case IC:
		switch {
		case g.Weighted():
			out = append(out, Suspect{"Weights", true})
		case c.P < 1:
			out = append(out, Suspect{"P", true})
		}
	case LT:
		switch {
		case c.Threshold > 0: // a fixed threshold, which can go lower
			out = append(out, Suspect{"Threshold", false})
		case c.Threshold < 0: // drawn per node
			out = append(out, Suspect{"RandomThreshold", false})
		}
		if g.Weighted() {
			out = append(out, Suspect{"Weights", true})
		}
	}
	if capped {
		out = append(out, Suspect{"MaxSteps", true})
	}
	if nearMiss {
		out = append(out, Suspect{"MaxRedraws", true})
	}
	return append(out, Suspect{"Observe", false})
}

// Record is what a Config made of the cascades on one graph, as a bundle
// records it: the model's own parameters and nothing it did not read (SI
// reads no gamma; IC on a weighted graph reads the arc weights, not P).
type Record struct {
	Model Model    `json:"model"`
	Beta  *float64 `json:"beta,omitempty"`
	Gamma *float64 `json:"gamma,omitempty"`
	P     *float64 `json:"p,omitempty"`
	// Threshold is LT's node threshold; "random" for theta_v ~ U[0,1].
	Threshold string `json:"threshold,omitempty"`
	// ArcWeights says what the graph's arc weights were to the model
	// (IC: activation probabilities; LT: influence), absent when it
	// read none.
	ArcWeights string     `json:"arc_weights,omitempty"`
	Sources    string     `json:"sources"`
	Pattern    Pattern    `json:"pattern"`
	Observe    [2]float64 `json:"observe"`
	MaxSteps   int        `json:"max_steps"`
}

// Record returns c as it shaped cascades on g.
func (c Config) Record(g *graph.Graph) Record {
	val := func(v float64) *float64 { return &v }
	pattern := c.Pattern
	if pattern == "" {
		pattern = Uniform
	}
	r := Record{Model: c.Model, Sources: c.Sources.String(), Pattern: pattern,
		Observe: [2]float64{c.ObserveMin, c.ObserveMax}, MaxSteps: c.MaxSteps}
	weighted := g != nil && g.Weighted()
	switch c.Model {
	case SI:
		r.Beta = val(c.Beta)
	case SIR:
		r.Beta, r.Gamma = val(c.Beta), val(c.Gamma)
	case IC:
		if weighted {
			r.ArcWeights = "activation probability"
		} else {
			r.P = val(c.P)
		}
	case LT:
		r.Threshold = "random"
		if c.Threshold >= 0 {
			r.Threshold = fmt.Sprint(c.Threshold)
		}
		if weighted { // otherwise each arc weighs 1/in-degree
			r.ArcWeights = "influence"
		}
	}
	return r
}
