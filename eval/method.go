package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Prediction is a method's answer for one observation: a score per node
// (higher = more likely a source; only the order matters to the metrics)
// and the predicted source set.
type Prediction struct {
	Scores  []float64
	Sources []int
}

// Method is a source localizer under evaluation.
type Method interface {
	Name() string
	// Fit prepares the method for one graph. Hyper-parameters are chosen
	// on val only; train is what a learned method may learn from.
	Fit(ctx context.Context, g *graph.Graph, train, val []diffusion.Cascade) error
	// Localize answers one observation y in [0,1]^n (1 = infected).
	Localize(ctx context.Context, y []float64) (Prediction, error)
}

// Extraser is implemented by methods that report additional numbers (for
// example a forward model's fit error); the harness averages them over runs.
type Extraser interface {
	Extras() map[string]float64
}

// Diagnoser is implemented by methods with diagnostics that need the true
// test cascades, such as a forward model's test error. The harness calls
// Diagnose once per run, after every test cascade has been localized, so
// the truth cannot leak into the predictions; the numbers join Extras.
type Diagnoser interface {
	Diagnose(ctx context.Context, test []diffusion.Cascade) (map[string]float64, error)
}

// Env is what a Factory builds a method from.
type Env struct {
	Graph *graph.Graph
	// Seed seeds the method's own randomness; the harness derives it from
	// the run seed and the method name.
	Seed   int64
	Logger *zap.Logger
	// Params are the method's own parameters, with the "method." prefix of
	// --method-param removed. A method rejects keys it does not know.
	Params map[string]string
	// Progress, if not nil, receives notes on long fitting work.
	Progress func(string)
	// SpreadIgnoresWeights says the graph is weighted but the cascades
	// spread along every arc alike (SI, SIR): a method that reads the
	// weights as infection probabilities should drop them.
	SpreadIgnoresWeights bool
	// Diffusion is where the run's cascades come from, as `train` records
	// it in a bundle (localize.TrainConfig.Diffusion): {"simulated": the
	// simulation's settings} or {"recorded": true}. A bundle reads from
	// it whether nothing recovers and every infection is observed.
	Diffusion json.RawMessage
	// Simulation is the simulation that made the run's cascades, nil for
	// recorded ones. A localizer must not need it; the bayes control, a
	// ceiling told the truth of the model, reads it.
	Simulation *diffusion.Config
}

// Factory builds a method.
type Factory func(env Env) (Method, error)

// ErrUnknownMethod is returned by Lookup for a name nobody registered.
var ErrUnknownMethod = errors.New("unknown method")

// ErrBadParam is returned for a method parameter that is unknown or does not
// parse.
var ErrBadParam = errors.New("bad method parameter")

// The registry is package state by necessity: methods in other files (and
// later packages' files in eval) add themselves from init.
var registry = struct {
	sync.Mutex
	m          map[string]Factory
	control    map[string]bool
	undirected map[string]bool
}{m: map[string]Factory{}, control: map[string]bool{}, undirected: map[string]bool{}}

// Register makes a method available under name. It panics on an empty name,
// a nil factory or a second registration, which are programming errors.
func Register(name string, f Factory) { register(name, f, false) }

func register(name string, f Factory, control bool) {
	registry.Lock()
	defer registry.Unlock()
	if name == "" || f == nil {
		panic("eval: Register with empty name or nil factory")
	}
	if _, dup := registry.m[name]; dup {
		panic("eval: method " + strconv.Quote(name) + " registered twice")
	}
	registry.m[name] = f
	registry.control[name] = control
}

// Lookup returns the factory registered under name, wrapped so that a nil
// Env.Logger or Env.Params reads as a no-op logger and no parameters.
func Lookup(name string) (Factory, error) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := registry.m[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownMethod, name, namesLocked())
	}
	// methods may log and read params unconditionally
	return func(env Env) (Method, error) {
		if env.Logger == nil {
			env.Logger = zap.NewNop()
		}
		if env.Params == nil {
			env.Params = map[string]string{}
		}
		return f(env)
	}, nil
}

// Names lists the registered methods, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	return namesLocked()
}

func namesLocked() []string {
	out := make([]string, 0, len(registry.m))
	for n := range registry.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// registerUndirected registers a method that needs an undirected graph:
// one whose Fit refuses a directed one. CheckGraph and Unsupported read it,
// so a benchmark can leave such methods out, or refuse them, before
// fitting anything.
func registerUndirected(name string, f Factory) {
	Register(name, f)
	registry.Lock()
	defer registry.Unlock()
	registry.undirected[name] = true
}

// NeedsUndirected reports whether method name needs an undirected graph.
func NeedsUndirected(name string) bool {
	registry.Lock()
	defer registry.Unlock()
	return registry.undirected[name]
}

// ErrUnsupportedGraph is wrapped by CheckGraph's error.
var ErrUnsupportedGraph = errors.New("cannot run on this graph")

// Unsupported returns, in the order given, the methods among names that
// cannot run on g: on a directed graph, those that need an undirected one
// (NeedsUndirected).
func Unsupported(g *graph.Graph, names []string) []string {
	if !g.Directed() {
		return nil
	}
	var out []string
	for _, m := range names {
		if NeedsUndirected(m) {
			out = append(out, m)
		}
	}
	return out
}

// CheckGraph returns an error wrapping ErrUnsupportedGraph that names
// every method among names that cannot run on g, or nil when all can.
func CheckGraph(g *graph.Graph, names []string) error {
	bad := Unsupported(g, names)
	if len(bad) == 0 {
		return nil
	}
	verb := "need"
	if len(bad) == 1 {
		verb = "needs"
	}
	return fmt.Errorf("%w: %s %s an undirected graph and this graph is directed",
		ErrUnsupportedGraph, strings.Join(bad, ", "), verb)
}

// IsControl reports whether name is one of the controls (infected, degree,
// prior, random): reference points, not localizers.
func IsControl(name string) bool {
	registry.Lock()
	defer registry.Unlock()
	return registry.control[name]
}

// params reads a method's parameters and remembers which were used, so
// unknown keys can be reported.
type params struct {
	method string
	m      map[string]string
	used   map[string]bool
	err    error
}

func newParams(method string, m map[string]string) *params {
	return &params{method: method, m: m, used: map[string]bool{}}
}

func (p *params) float(key string, def float64) float64 {
	p.used[key] = true
	s, ok := p.m[key]
	if !ok {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.fail(key, s, "a number")
		return def
	}
	return v
}

func (p *params) int(key string, def int) int {
	p.used[key] = true
	s, ok := p.m[key]
	if !ok {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		p.fail(key, s, "an integer")
		return def
	}
	return v
}

// count is int for a count: negative values are rejected.
func (p *params) count(key string, def int) int {
	v := p.int(key, def)
	if v < 0 {
		p.fail(key, p.m[key], "a count >= 0")
		return def
	}
	return v
}

func (p *params) fail(key, val, want string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w %s.%s=%q: want %s", ErrBadParam, p.method, key, val, want)
	}
}

// done returns the first parse error or an error naming an unknown key.
func (p *params) done() error {
	if p.err != nil {
		return p.err
	}
	keys := make([]string, 0, len(p.m))
	for k := range p.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !p.used[k] {
			known := make([]string, 0, len(p.used))
			for u := range p.used {
				known = append(known, u)
			}
			sort.Strings(known)
			return fmt.Errorf("%w %s.%s: unknown (known: %v)", ErrBadParam, p.method, k, known)
		}
	}
	return nil
}

// KRule says how many top-ranked nodes a method predicts: a fixed count, or
// a fraction of the infected nodes (rounded, at least 1).
type KRule struct {
	Fixed int
	Ratio float64
}

// K applies the rule to an observation with infected infected nodes.
func (r KRule) K(infected int) int {
	if r.Fixed > 0 {
		return r.Fixed
	}
	return max(1, int(math.Round(r.Ratio*float64(infected))))
}

func (r KRule) String() string {
	if r.Fixed > 0 {
		return "k=" + strconv.Itoa(r.Fixed)
	}
	return "k=" + strconv.FormatFloat(r.Ratio, 'g', 3, 64) + "·infected"
}

// ratioGrid is the fractions of the infected count tried by ChooseK.
var ratioGrid = []float64{0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1}

// ChooseK picks the KRule with the largest mean F1 over validation
// cascades, where the prediction for cascade c is its first k nodes of
// ranked[c] (best first). Fixed counts 1..maxK are tried, and, when
// infected is not nil (a method that may look at y), fractions of
// infected[c]. Ties go to the smaller fixed k, then to fixed over ratio.
func ChooseK(ranked [][]int, truths [][]int, infected []int, maxK int) (KRule, float64) {
	if len(ranked) != len(truths) || (infected != nil && len(infected) != len(ranked)) {
		panic("eval: ChooseK length mismatch")
	}
	if len(ranked) == 0 {
		return KRule{Fixed: 1}, math.NaN()
	}
	maxK = max(maxK, 1)
	// f1At[k-1] sums F1 over cascades when predicting the top k
	f1At := make([]float64, maxK)
	ratioF1 := make([]float64, len(ratioGrid))
	for c, order := range ranked {
		truth := make(map[int]bool, len(truths[c]))
		for _, s := range truths[c] {
			truth[s] = true
		}
		// hits[k] = true sources among the first k
		hits := make([]int, len(order)+1)
		for i, v := range order {
			hits[i+1] = hits[i]
			if truth[v] {
				hits[i+1]++
			}
		}
		f1 := func(k int) float64 {
			k = min(k, len(order))
			if k == 0 || hits[k] == 0 {
				return 0
			}
			return 2 * float64(hits[k]) / float64(k+len(truth))
		}
		for k := 1; k <= maxK; k++ {
			f1At[k-1] += f1(k)
		}
		if infected != nil {
			for j, r := range ratioGrid {
				ratioF1[j] += f1(KRule{Ratio: r}.K(infected[c]))
			}
		}
	}
	best, bestF1 := KRule{Fixed: 1}, math.Inf(-1)
	for k, s := range f1At {
		if s > bestF1+1e-12 {
			best, bestF1 = KRule{Fixed: k + 1}, s
		}
	}
	if infected != nil {
		for j, s := range ratioF1 {
			if s > bestF1+1e-12 {
				best, bestF1 = KRule{Ratio: ratioGrid[j]}, s
			}
		}
	}
	return best, bestF1 / float64(len(ranked))
}

// ChooseThreshold picks the threshold t with the largest mean F1 over
// validation cascades when predicting {v : scores[c][v] >= t}. Candidates
// are up to 200 quantiles of the pooled scores; ties go to the larger t.
func ChooseThreshold(scores [][]float64, truths [][]int) (float64, float64) {
	if len(scores) != len(truths) {
		panic("eval: ChooseThreshold length mismatch")
	}
	var pooled []float64
	for _, s := range scores {
		pooled = append(pooled, s...)
	}
	if len(pooled) == 0 {
		return 0.5, math.NaN()
	}
	sort.Float64s(pooled)
	const maxCand = 200
	var cands []float64
	for q := 0; q < maxCand; q++ {
		v := pooled[q*(len(pooled)-1)/(maxCand-1)]
		if len(cands) == 0 || v != cands[len(cands)-1] {
			cands = append(cands, v)
		}
	}
	bestT, bestF1 := cands[len(cands)-1], math.Inf(-1)
	var pred []int
	for j := len(cands) - 1; j >= 0; j-- {
		t := cands[j]
		var sum float64
		for c, s := range scores {
			pred = pred[:0]
			for v, x := range s {
				if x >= t {
					pred = append(pred, v)
				}
			}
			_, _, f1 := PRF(truths[c], pred)
			sum += f1
		}
		if sum > bestF1+1e-12 {
			bestT, bestF1 = t, sum
		}
	}
	return bestT, bestF1 / float64(len(scores))
}

// ranker orders nodes by score, best first, breaking ties by a fixed random
// permutation so that node numbering (often correlated with degree in
// published graphs) cannot help or hurt a method.
type ranker struct {
	tie   []int
	order []int
}

func newRanker(n int, seed int64) *ranker {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	return &ranker{tie: rng.Perm(n), order: make([]int, n)}
}

// rank returns node indices by descending score; the slice is reused by the
// next call.
func (r *ranker) rank(scores []float64) []int {
	for i := range r.order {
		r.order[i] = i
	}
	sort.Slice(r.order, func(a, b int) bool {
		i, j := r.order[a], r.order[b]
		if scores[i] != scores[j] {
			return scores[i] > scores[j]
		}
		return r.tie[i] < r.tie[j]
	})
	return r.order
}

// extend returns picks followed by every other node by descending score:
// the ranking of a method that picks a few nodes greedily and orders the
// rest by its scores.
func (r *ranker) extend(picks []int, scores []float64) []int {
	out := make([]int, 0, len(r.order))
	out = append(out, picks...)
	in := make(map[int]bool, len(picks))
	for _, v := range picks {
		in[v] = true
	}
	for _, v := range r.rank(scores) {
		if !in[v] {
			out = append(out, v)
		}
	}
	return out
}

// observe returns the infected indicator of a cascade as y, and the count.
func observe(n int, c diffusion.Cascade, dst []float64) []float64 {
	if len(dst) != n {
		dst = make([]float64, n)
	}
	for i := range dst {
		dst[i] = 0
	}
	for _, v := range c.Infected {
		dst[v] = 1
	}
	return dst
}

// infectedOf returns the nodes with y >= 1/2, sorted.
func infectedOf(y []float64) []int {
	var out []int
	for i, v := range y {
		if v >= 0.5 {
			out = append(out, i)
		}
	}
	return out
}

// resized is s with length n, reusing its memory when its capacity
// allows; the contents are not cleared.
func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// checkY rejects an observation of the wrong length or with values outside
// [0,1].
func checkY(n int, y []float64) error {
	if len(y) != n {
		return fmt.Errorf("%w: length %d, graph has %d nodes", ErrBadObservation, len(y), n)
	}
	for i, v := range y {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("%w: y[%d] = %g outside [0,1]", ErrBadObservation, i, v)
		}
	}
	return nil
}

// ErrBadObservation is returned by Localize for an observation of the wrong
// length or with a value outside [0,1].
var ErrBadObservation = errors.New("bad observation")

// ErrNotFitted is returned by Localize before a successful Fit.
var ErrNotFitted = errors.New("method not fitted")
