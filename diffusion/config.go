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
// cannot reach its observation target within MaxRedraws draws in a row.
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
	// in a step with probability 1 - (1 - Beta)^k.
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
	// redrawn like one that died out.
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
			return bad("threshold %v above 1 (negative means uniform random)", c.Threshold)
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

// hint names the parameter most likely to blame when cascades keep dying
// out below the target.
func (c Config) hint() string {
	switch c.Model {
	case SI:
		return "beta too small or MaxSteps too low"
	case SIR:
		return "beta too small or gamma too large for the peak infected fraction to reach the target"
	case IC:
		return "p (or the edge weights) too small"
	case LT:
		return "thresholds too high"
	}
	return "model too weak"
}
