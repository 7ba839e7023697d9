package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Config is one benchmark: which cascades, how many runs, which methods.
type Config struct {
	// Sim describes the cascades.
	Sim diffusion.Config
	// Cascades is the number simulated per run; Runs repeats the whole
	// protocol with fresh seeds.
	Cascades, Runs int
	Seed           int64
	// TrainFrac and ValFrac split each run's cascades; the rest is test.
	TrainFrac, ValFrac float64
	// Methods are registered method names.
	Methods []string
	// Params are method parameters as "method.key" -> value.
	Params map[string]string
	// Workers bounds the parallelism of simulation and of methods
	// (< 1: GOMAXPROCS). Results do not depend on it; timings do.
	Workers int
	// PairedWith is the method every other one is compared with cascade by
	// cascade (Result.Paired); "" means infected. No comparison is made
	// when it is not among Methods.
	PairedWith string
	// Recorded, when not empty, replaces the simulation: every run splits
	// these cascades (recorded ones, e.g. diffusion.ReadJSONL's) anew
	// with its own seed, Cascades is taken to be their number, Sim is not
	// read, and no forward floor is estimated (it needs the spread's
	// model). RecordedFrom names them in the report.
	Recorded     []diffusion.Cascade
	RecordedFrom string
	// PluginDir is where every method with a forward model (SL-VAE and
	// its variants) looks for its plugin binary unless its own
	// "<method>.plugin_dir" parameter says otherwise; "" leaves each
	// method's default (bin).
	PluginDir string
	// CallTimeout is the deadline of every forward plugin call of those
	// methods unless their own "<method>.call_timeout" parameter says
	// otherwise; 0 leaves the plugin host's default.
	CallTimeout time.Duration
}

// DefaultConfig is 300 SI cascades with the diffusion defaults, 3 runs, a
// 60/20/20 split and every registered method.
func DefaultConfig() Config {
	return Config{Sim: diffusion.DefaultConfig(), Cascades: 300, Runs: 3, Seed: 1, TrainFrac: 0.6, ValFrac: 0.2, Methods: DefaultMethods()}
}

// controlOrder fixes the order controls are listed in.
var controlOrder = []string{"infected", "degree", "prior", "random"}

// DefaultMethods lists the methods "all" means: every registered
// localizer but SL-VAE's ablations and per-plugin expansions, then the
// controls.
func DefaultMethods() []string {
	var out []string
	for _, n := range Names() {
		// SL-VAE's ablations and its per-plugin expansions are asked for
		// by name; "all" is the methods and the controls.
		if (IsSLVAE(n) && n != "slvae") || strings.Contains(n, "[") || optIn[n] {
			continue
		}
		if !IsControl(n) {
			out = append(out, n)
		}
	}
	for _, n := range controlOrder {
		if _, err := Lookup(n); err == nil {
			out = append(out, n)
		}
	}
	for _, n := range Names() {
		if IsControl(n) && !contains(controlOrder, n) && !optIn[n] {
			out = append(out, n)
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ErrConfig is wrapped by every Config validation error.
var ErrConfig = errors.New("invalid eval config")

// Split shuffles cs in place with a PCG stream seeded by seed and cuts it
// into the first ntrain (training), the next nval (validation) and the
// rest (test). train and eval use it, so a seed means the same split.
func Split(cs []diffusion.Cascade, ntrain, nval int, seed int64) (train, val, test []diffusion.Cascade) {
	if ntrain < 0 || nval < 0 || ntrain+nval > len(cs) {
		panic("eval: Split sizes do not fit the cascades")
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5b1175))
	rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
	// Full slice expressions: methods run side by side on one split, and
	// one that appended to its training set must not write over the
	// validation cascades the others are reading.
	return cs[:ntrain:ntrain], cs[ntrain : ntrain+nval : ntrain+nval], cs[ntrain+nval:]
}

// split returns the train, validation and test sizes.
func (c Config) split() (train, val, test int) {
	train = int(math.Round(c.TrainFrac * float64(c.Cascades)))
	val = int(math.Round(c.ValFrac * float64(c.Cascades)))
	return train, val, c.Cascades - train - val
}

// MaxRuns bounds Config.Runs.
const MaxRuns = 10000

// Validate checks the config against g, naming the first bad field.
func (c Config) Validate(g *graph.Graph) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Runs < 1:
		return bad("runs %d: want >= 1", c.Runs)
	case c.Runs > MaxRuns:
		// Each run simulates and fits anew, and the report holds every
		// run's results: 2,000,000,000 died allocating them.
		return bad("runs %d: want at most %d", c.Runs, MaxRuns)
	case !(c.TrainFrac > 0 && c.ValFrac > 0 && c.TrainFrac+c.ValFrac < 1):
		return bad("train fraction %g, validation fraction %g: want both > 0 with sum < 1", c.TrainFrac, c.ValFrac)
	case len(c.Methods) == 0:
		return bad("methods: none given")
	}
	if tr, va, te := c.split(); tr < 1 || va < 1 || te < 1 {
		return bad("cascades %d: split %d/%d/%d leaves a part empty", c.Cascades, tr, va, te)
	}
	seen := map[string]bool{}
	for _, m := range c.Methods {
		if _, err := Lookup(m); err != nil {
			return fmt.Errorf("%w: methods: %w", ErrConfig, err)
		}
		if seen[m] {
			return bad("methods: %q given twice", m)
		}
		seen[m] = true
	}
	// Every method that cannot run on g, named at once, before any
	// cascade is simulated or any method fitted.
	if err := CheckGraph(g, c.Methods); err != nil {
		return fmt.Errorf("%w: methods: %w", ErrConfig, err)
	}
	if c.PairedWith != "" && c.PairedWith != "infected" && !seen[c.PairedWith] {
		return bad("paired with %q: not among the methods", c.PairedWith)
	}
	for k := range c.Params {
		m, key, ok := strings.Cut(k, ".")
		if !ok || key == "" {
			return bad("method parameter %q: want method.key=value", k)
		}
		if !seen[m] {
			return bad("method parameter %q: method %q is not being evaluated", k, m)
		}
	}
	if len(c.Recorded) > 0 {
		if c.Cascades != len(c.Recorded) {
			return bad("cascades %d: %d recorded cascades given", c.Cascades, len(c.Recorded))
		}
		for i, rc := range c.Recorded {
			if rc.N != g.N() {
				return bad("recorded cascade %d is over %d nodes, the graph has %d", i+1, rc.N, g.N())
			}
		}
	} else if err := c.Sim.Validate(g); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// Each method's constructor checks its parameters (unknown keys, bad
	// values): build each once now, so a typo fails before any cascade is
	// simulated rather than after. Constructors start no processes. A
	// method's forward plugin is found now too (not started), so a
	// missing one fails here rather than at the fit after the simulation.
	for _, m := range c.Methods {
		f, _ := Lookup(m)
		built, err := f(Env{Graph: g, Params: c.paramsFor(m), Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfig, m, err)
		}
		if cl, ok := built.(io.Closer); ok {
			_ = cl.Close()
		}
		if pu, ok := built.(pluginUser); ok {
			dir, name := pu.plugin()
			if _, err := forward.PluginPath(dir, name); err != nil {
				// --plugin-dir is every method's; one plugin kept
				// elsewhere (your own beside the shipped ones) gets its own.
				return fmt.Errorf("%w: %s: %w (one plugin dir serves every SL-VAE method; to look for this one's elsewhere: %s.plugin_dir=DIR)", ErrConfig, m, err, m)
			}
		}
	}
	return nil
}

// pluginUser is a method that runs a forward plugin: the binary's
// directory and name.
type pluginUser interface {
	plugin() (dir, name string)
}

// paramsFor returns method m's parameters without their "m." prefix,
// with PluginDir as plugin_dir for a method with a forward model that was
// not given its own.
func (c Config) paramsFor(m string) map[string]string {
	out := map[string]string{}
	for k, v := range c.Params {
		if name, key, ok := strings.Cut(k, "."); ok && name == m {
			out[key] = v
		}
	}
	if _, own := out["plugin_dir"]; !own && c.PluginDir != "" && hasForwardModel(m) {
		out["plugin_dir"] = c.PluginDir
	}
	if _, own := out["call_timeout"]; !own && c.CallTimeout > 0 && hasForwardModel(m) {
		out["call_timeout"] = c.CallTimeout.String()
	}
	return out
}

// Option configures Run.
type Option func(*runOptions)

type runOptions struct {
	progress func(stage string, done, total int)
	// note forwards a method's Env.Progress note (set by Run)
	note func(string)
	log  *zap.Logger
	now  func() time.Time
	name string
	// spreadIgnoresWeights is Env.SpreadIgnoresWeights (set by Run).
	spreadIgnoresWeights bool
	// diffusion is Env.Diffusion (set by Run).
	diffusion json.RawMessage
	// simulation is Env.Simulation (set by Run).
	simulation *diffusion.Config
	// keyTests has runMethod record each test cascade's Key (set by Run
	// for recorded cascades, the only ones whose keys are used).
	keyTests bool
}

// OnProgress receives progress: stage "simulate" counts cascades over all
// runs, stage "methods" counts (run, method) fits scored, and any other
// stage is a method's own note ("method: note", from Env.Progress) with
// the counts of "methods". Calls never overlap.
func OnProgress(f func(stage string, done, total int)) Option {
	return func(o *runOptions) { o.progress = f }
}

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *runOptions) { o.log = l } }

// WithClock sets the clock used for timings (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *runOptions) { o.now = now } }

// WithGraphName names the graph in the report (for example its file).
func WithGraphName(name string) Option { return func(o *runOptions) { o.name = name } }

// mix derives an independent seed from a seed and a salt (splitmix64).
func mix(seed int64, salt uint64) int64 {
	z := uint64(seed) + salt*0x9e3779b97f4a7c15 + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64(z ^ (z >> 31))
}

// seedNames maps a method to the name its seed is salted with when that
// differs from its own: the name it was first measured under, so that
// renaming a method does not move the numbers published for it. slvae was
// measured as slvae-datainit before that schedule became the default, and
// slvae-paper as slvae.
var seedNames = map[string]string{
	"slvae":       "slvae-datainit",
	"slvae-paper": "slvae",
}

// methodSalt is the salt of name's seed within a run.
func methodSalt(name string) uint64 {
	if s, ok := seedNames[name]; ok {
		name = s
	}
	return nameSalt(name)
}

func nameSalt(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// cascadeResult is one test cascade's outcome for one method.
type cascadeResult struct {
	m       Metrics
	seconds float64
	// key is the test cascade's diffusion.Cascade.Key: recorded cascades
	// that are one cascade, tested in several runs or copied in the file,
	// count once in the paired intervals.
	key string
}

type methodRun struct {
	cascades []cascadeResult
	fit      float64
	extras   map[string]float64
	done     bool // fitted and scored on every test cascade
}

// ErrInterrupted is returned, wrapping the context's error, by a Run
// stopped early that still has a partial report: see Report.Partial.
var ErrInterrupted = errors.New("eval: interrupted")

// ErrMethodFailed is returned, with a report of the other methods, by a
// Run in which a method failed (its plugin crashed for good, say): the
// failed method is not run again, the others go on, and Report.Failed
// says what failed where.
var ErrMethodFailed = errors.New("eval: a method failed")

// Run benchmarks cfg.Methods on g. Per run r it simulates cfg.Cascades
// cascades with a seed derived from (cfg.Seed, r), shuffles them and splits
// them into train, validation and test; every method is built fresh, fitted
// on train and validation, and scored on each test cascade. The report
// holds, per method, each metric's mean and standard deviation over all
// test cascades of all runs.
//
// When ctx ends before the last run is done, Run returns what it has, if
// anything: a report whose Partial says which runs and methods it holds,
// with an error wrapping ErrInterrupted and ctx's error (see partialReport).
func Run(ctx context.Context, g *graph.Graph, cfg Config, opts ...Option) (*Report, error) {
	o := runOptions{log: zap.NewNop(), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if len(cfg.Recorded) > 0 {
		cfg.Cascades = len(cfg.Recorded)
	}
	o.spreadIgnoresWeights = g.Weighted() && len(cfg.Recorded) == 0 && !cfg.Sim.Model.UsesWeights()
	if len(cfg.Recorded) == 0 {
		o.diffusion, _ = json.Marshal(map[string]any{"simulated": cfg.Sim.Record(g)})
		sim := cfg.Sim
		o.simulation = &sim
	} else {
		o.diffusion, _ = json.Marshal(map[string]any{"recorded": true})
	}
	o.keyTests = len(cfg.Recorded) > 0
	if err := cfg.Validate(g); err != nil {
		return nil, err
	}
	workers := cfg.Workers
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	var progMu sync.Mutex
	progress := func(stage string, done, total int) {
		if o.progress != nil {
			progMu.Lock()
			defer progMu.Unlock()
			o.progress(stage, done, total)
		}
	}
	ntrain, nval, _ := cfg.split()
	results := make([][]methodRun, cfg.Runs) // [run][method]
	var floors, countFloors, observed []float64
	redrawn := 0
	methodsDone, methodsTotal := 0, cfg.Runs*len(cfg.Methods)
	// failed holds each method that failed, by index: it is not run
	// again, since its results could no longer be paired with the others'.
	failed := map[int]FailedMethod{}
	var failMu sync.Mutex // failed, written by the workers of a run
	o.note = func(note string) {
		progMu.Lock()
		done, total := methodsDone, methodsTotal
		progMu.Unlock()
		progress(note, done, total)
	}
	for r := 0; r < cfg.Runs; r++ {
		seed := mix(cfg.Seed, uint64(r))
		base := r * cfg.Cascades
		cs, rep, err := runCascades(ctx, g, cfg, seed, workers, func(done int) { progress("simulate", base+done, cfg.Runs*cfg.Cascades) })
		if err != nil {
			if ctx.Err() != nil {
				return partialReport(ctx, g, cfg, o, redrawn, results[:r], observed, floors, countFloors, failed)
			}
			return nil, fmt.Errorf("run %d: simulating: %w", r+1, err)
		}
		redrawn += rep.Redrawn
		train, val, test := Split(cs, ntrain, nval, seed)
		observedBefore, redrawnBefore := len(observed), redrawn-rep.Redrawn
		for _, c := range test {
			observed = append(observed, float64(len(c.Infected))/float64(g.N()))
		}
		// What an interruption keeps of this run's diagnostics, should
		// none of its methods finish.
		dropRun := func() {
			observed, redrawn = observed[:observedBefore], redrawnBefore
			floors, countFloors = floors[:min(len(floors), r)], countFloors[:min(len(countFloors), r)]
		}
		if cfg.hasForwardModel() && len(cfg.Recorded) == 0 {
			// The truth is read here only for a diagnostic no method sees.
			sets := make([][]int, min(len(test), FloorSourceSets))
			for i := range sets {
				sets[i] = test[i].Sources
			}
			floor, err := diffusion.ForwardFloor(ctx, g, cfg.Sim, sets, FloorDraws, mix(seed, nameSalt("forward-floor")), diffusion.Workers(workers))
			if err != nil {
				if ctx.Err() != nil {
					dropRun()
					return partialReport(ctx, g, cfg, o, redrawn, results[:r], observed, floors, countFloors, failed)
				}
				return nil, fmt.Errorf("run %d: forward floor: %w", r+1, err)
			}
			floors = append(floors, floor)
			// The same sets observed at their own infected counts: what a
			// forward model told the observation time could reach.
			counts := make([]int, len(sets))
			for i := range counts {
				counts[i] = len(test[i].Infected)
			}
			floor, err = diffusion.ForwardFloor(ctx, g, cfg.Sim, sets, FloorDraws, mix(seed, nameSalt("forward-floor")), diffusion.Workers(workers), diffusion.ObservedCounts(counts))
			if err != nil {
				if ctx.Err() != nil {
					dropRun()
					return partialReport(ctx, g, cfg, o, redrawn, results[:r], observed, floors, countFloors, failed)
				}
				return nil, fmt.Errorf("run %d: forward floor at the observed counts: %w", r+1, err)
			}
			countFloors = append(countFloors, floor)
		}

		results[r] = make([]methodRun, len(cfg.Methods))
		jobs := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < min(workers, len(cfg.Methods)); w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for mi := range jobs {
					name := cfg.Methods[mi]
					res, err := runMethod(ctx, g, name, cfg.paramsFor(name), mix(seed, methodSalt(name)), train, val, test, o)
					if err != nil {
						if ctx.Err() == nil {
							failMu.Lock()
							failed[mi] = FailedMethod{Method: name, Run: r + 1, Error: err.Error(), err: err}
							failMu.Unlock()
							progMu.Lock()
							methodsTotal -= cfg.Runs - r // this run's and the later ones, never run
							progMu.Unlock()
							o.log.Warn("method failed; the others go on without it", zap.String("method", name), zap.Int("run", r+1), zap.Error(err))
						}
						continue
					}
					res.done = true
					results[r][mi] = res
					progMu.Lock()
					methodsDone++
					done, total := methodsDone, methodsTotal
					progMu.Unlock()
					progress("methods", done, total)
				}
			}()
		}
	feed:
		for mi := range cfg.Methods {
			failMu.Lock()
			_, gone := failed[mi]
			failMu.Unlock()
			if gone {
				continue
			}
			select {
			case jobs <- mi:
			case <-ctx.Done():
				break feed
			}
		}
		close(jobs)
		wg.Wait()
		if ctx.Err() != nil {
			// A method's error is then most likely the interruption. The
			// interrupted run is reported when every method finished it,
			// or when it is the first (its finished methods alone);
			// otherwise the runs before it, with every method.
			// Failed methods are not expected to finish it.
			finished, active := 0, len(cfg.Methods)-len(failed)
			for _, m := range results[r] {
				if m.done {
					finished++
				}
			}
			if finished == active && r == cfg.Runs-1 {
				break // ended as the last run finished: nothing is missing
			}
			runs := results[:r+1]
			if finished == 0 || (r > 0 && finished < active) {
				runs = results[:r]
				dropRun()
			}
			return partialReport(ctx, g, cfg, o, redrawn, runs, observed, floors, countFloors, failed)
		}
		if len(failed) == len(cfg.Methods) {
			break // nothing left to run
		}
	}
	if len(failed) > 0 {
		return failedReport(g, cfg, o, redrawn, results, observed, floors, countFloors, failed)
	}
	return finishReport(g, cfg, o, redrawn, results, observed, floors, countFloors), nil
}

// failedReport is Run's answer when methods failed: the report of the
// others, which finished every run, with Failed saying what failed where,
// and an error wrapping ErrMethodFailed. No report when every method failed.
func failedReport(g *graph.Graph, cfg Config, o runOptions, redrawn int, results [][]methodRun,
	observed, floors, countFloors []float64, failed map[int]FailedMethod) (*Report, error) {
	var list []FailedMethod
	var also []string
	for mi := range cfg.Methods {
		if f, ok := failed[mi]; ok {
			list = append(list, f)
			if len(list) > 1 {
				also = append(also, fmt.Sprintf("; and in run %d: %s", f.Run, f.Error))
			}
		}
	}
	// The first failure stays reachable (errors.Is), the others in words.
	err := fmt.Errorf("%w: in run %d: %w%s", ErrMethodFailed, list[0].Run, list[0].err, strings.Join(also, ""))
	rep, _ := keptReport(g, cfg, o, redrawn, results, observed, floors, countFloors)
	if rep == nil {
		return nil, err
	}
	rep.Failed = list
	return rep, err
}

func finishReport(g *graph.Graph, cfg Config, o runOptions, redrawn int, results [][]methodRun, observed, floors, countFloors []float64) *Report {
	rep := buildReport(g, cfg, o.name, redrawn, results)
	rep.Settings.ObservedInfected = Summarize(observed)
	if len(floors) > 0 {
		floor, atCount := Summarize(floors).Mean, Summarize(countFloors).Mean
		rep.ForwardFloorMSE, rep.ForwardFloorAtCountMSE = &floor, &atCount
	}
	rep.Notes = rep.notes()
	return rep
}

// partialReport is Run's answer when ctx ended early: the report of the
// methods that finished every run in runs (Run passes the runs every
// method finished, or the first run alone when it was cut short), so that
// every method in it is scored on the same test cascades and the paired
// differences stay paired. It returns no report when nothing finished.
func partialReport(ctx context.Context, g *graph.Graph, cfg Config, o runOptions, redrawn int, runs [][]methodRun,
	observed, floors, countFloors []float64, failed map[int]FailedMethod) (*Report, error) {
	err := fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
	rep, left := keptReport(g, cfg, o, redrawn, runs, observed, floors, countFloors)
	if rep == nil {
		return nil, err
	}
	// A method that failed before the interruption is said so, not
	// listed as unfinished.
	for mi, name := range cfg.Methods {
		if f, ok := failed[mi]; ok {
			rep.Failed = append(rep.Failed, f)
			left = slices.DeleteFunc(left, func(l string) bool { return l == name })
		}
	}
	if len(left) == 0 {
		left = nil
	}
	rep.Partial = &Partial{RunsPlanned: cfg.Runs, LeftOut: left}
	return rep, err
}

// keptReport is the report of the methods that finished every run in
// runs, and the methods left out; no report when none did.
func keptReport(g *graph.Graph, cfg Config, o runOptions, redrawn int, runs [][]methodRun,
	observed, floors, countFloors []float64) (*Report, []string) {
	if len(runs) == 0 {
		return nil, nil
	}
	var kept, left []string
	var keptIdx []int
	for mi, name := range cfg.Methods {
		if slices.ContainsFunc(runs, func(run []methodRun) bool { return !run[mi].done }) {
			left = append(left, name)
			continue
		}
		kept, keptIdx = append(kept, name), append(keptIdx, mi)
	}
	if len(kept) == 0 {
		return nil, left
	}
	sub := make([][]methodRun, len(runs))
	for r, run := range runs {
		for _, mi := range keptIdx {
			sub[r] = append(sub[r], run[mi])
		}
	}
	pcfg := cfg
	pcfg.Methods = kept
	if !pcfg.hasForwardModel() {
		floors, countFloors = nil, nil // no forward error left to set them beside
	}
	rep := finishReport(g, pcfg, o, redrawn, sub, observed, floors, countFloors)
	rep.Settings.Methods = cfg.Methods
	rep.Settings.Runs = len(runs)
	return rep, left
}

// FloorSourceSets and FloorDraws size the forward-floor estimates of a run
// (Report.ForwardFloorMSE and ForwardFloorAtCountMSE): the first
// FloorSourceSets test cascades' sources, FloorDraws observations from
// each.
const (
	FloorSourceSets = 60
	FloorDraws      = 64
)

// runCascades simulates a run's cascades, or copies the recorded ones
// (Split shuffles its input in place).
func runCascades(ctx context.Context, g *graph.Graph, cfg Config, seed int64, workers int, done func(int)) ([]diffusion.Cascade, diffusion.Report, error) {
	if len(cfg.Recorded) > 0 {
		done(len(cfg.Recorded))
		return slices.Clone(cfg.Recorded), diffusion.Report{}, nil
	}
	return diffusion.Simulate(ctx, g, cfg.Sim, cfg.Cascades, seed,
		diffusion.Workers(workers), diffusion.OnProgress(func(n, _ int) { done(n) }))
}

// hasForwardModel reports whether a method uses a forward model (SL-VAE or
// one of its variants), whose error the forward floor puts in context.
func (c Config) hasForwardModel() bool {
	return slices.ContainsFunc(c.Methods, hasForwardModel)
}

// hasForwardModel reports whether method m has a forward model: SL-VAE,
// one of its ablations, or one of their per-plugin expansions
// ("slvae[gat]", RegisterSLVAEWith).
func hasForwardModel(m string) bool {
	return IsSLVAE(m) || strings.Contains(m, "[")
}

// runMethod builds, fits and scores one method in one run.
func runMethod(ctx context.Context, g *graph.Graph, name string, params map[string]string, seed int64,
	train, val, test []diffusion.Cascade, o runOptions) (methodRun, error) {
	var res methodRun
	f, err := Lookup(name)
	if err != nil {
		return res, err
	}
	log := o.log.With(zap.String("method", name))
	m, err := f(Env{Graph: g, Seed: seed, Logger: log, Params: params, SpreadIgnoresWeights: o.spreadIgnoresWeights, Diffusion: o.diffusion, Simulation: o.simulation, Progress: func(note string) {
		log.Debug(note)
		note = name + ": " + note
		o.note(note)
	}})
	if err != nil {
		return res, methodError{name, "", err}
	}
	// a method may own a process (a forward-model plugin): stop it
	// whatever happens below
	if c, ok := m.(io.Closer); ok {
		defer func() {
			if err := c.Close(); err != nil {
				log.Warn("closing method", zap.Error(err))
			}
		}()
	}
	start := o.now()
	if err := m.Fit(ctx, g, train, val); err != nil {
		return res, methodError{name, "fit", err}
	}
	res.fit = o.now().Sub(start).Seconds()
	if e, ok := m.(Extraser); ok {
		res.extras = e.Extras()
	}
	n := g.N()
	y := make([]float64, n)
	res.cascades = make([]cascadeResult, len(test))
	for i, c := range test {
		y = observe(n, c, y)
		start := o.now()
		p, err := m.Localize(ctx, y)
		if err != nil {
			return res, methodError{name, fmt.Sprintf("test cascade %d", i), err}
		}
		sec := o.now().Sub(start).Seconds()
		if err := checkPrediction(n, p); err != nil {
			return res, methodError{name, fmt.Sprintf("test cascade %d", i), err}
		}
		res.cascades[i] = cascadeResult{m: Score(g, c.Sources, p), seconds: sec}
		if o.keyTests {
			res.cascades[i].key = c.Key()
		}
	}
	// Diagnostics that need the truth (a forward model's test error) are
	// computed only now, after every test cascade has been localized.
	if d, ok := m.(Diagnoser); ok {
		extra, err := d.Diagnose(ctx, test)
		if err != nil {
			return res, methodError{name, "diagnose", err}
		}
		if res.extras == nil {
			res.extras = map[string]float64{}
		}
		for k, v := range extra {
			res.extras[k] = v
		}
	}
	log.Debug("method scored", zap.Float64("fit_seconds", res.fit), zap.Int("test", len(test)))
	return res, nil
}

// methodError is a method's error with the harness's stage, naming the
// method once: "slvae: fit: forward plugin ...", where the method's own
// "slvae: " prefix would otherwise follow the harness's.
type methodError struct {
	method, stage string
	err           error
}

func (e methodError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), e.method+": ")
	if e.stage == "" {
		return e.method + ": " + msg
	}
	return e.method + ": " + e.stage + ": " + msg
}

func (e methodError) Unwrap() error { return e.err }

// ErrBadPrediction is returned when a method's prediction is malformed.
var ErrBadPrediction = errors.New("bad prediction")

func checkPrediction(n int, p Prediction) error {
	if len(p.Scores) != n {
		return fmt.Errorf("%w: %d scores for %d nodes", ErrBadPrediction, len(p.Scores), n)
	}
	for i, s := range p.Scores {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: score of node %d is %g", ErrBadPrediction, i, s)
		}
	}
	for _, s := range p.Sources {
		if s < 0 || s >= n {
			return fmt.Errorf("%w: source index %d out of range", ErrBadPrediction, s)
		}
	}
	return nil
}

func buildReport(g *graph.Graph, cfg Config, name string, redrawn int, results [][]methodRun) *Report {
	_, _, ntest := cfg.split()
	rep := &Report{
		Graph:       name,
		Nodes:       g.N(),
		Edges:       g.Stats().Edges,
		Directed:    g.Directed(),
		Fingerprint: g.Fingerprint(),
		Diffusion:   string(cfg.Sim.Model),
		Settings: Settings{
			Cascades: cfg.Cascades, Runs: cfg.Runs, Seed: cfg.Seed,
			Train: int(math.Round(cfg.TrainFrac * float64(cfg.Cascades))), Validation: int(math.Round(cfg.ValFrac * float64(cfg.Cascades))), Test: ntest,
			Sources: cfg.Sim.Sources.String(), Pattern: string(cfg.Sim.Pattern),
			Observe: [2]float64{cfg.Sim.ObserveMin, cfg.Sim.ObserveMax},
			Methods: cfg.Methods, Params: cfg.Params, Redrawn: redrawn,
			PluginDir: cfg.PluginDir,
		},
	}
	if rep.Settings.Pattern == "" {
		rep.Settings.Pattern = string(diffusion.Uniform)
	}
	switch sim := cfg.Sim; sim.Model {
	case diffusion.SI:
		rep.Settings.Beta = &sim.Beta
	case diffusion.SIR:
		rep.Settings.Beta, rep.Settings.Gamma = &sim.Beta, &sim.Gamma
	case diffusion.IC:
		if !g.Weighted() {
			rep.Settings.P = &sim.P
		}
	case diffusion.LT:
		rep.Settings.Threshold = &sim.Threshold
	}
	if len(cfg.Recorded) > 0 {
		// Nothing was simulated: the simulation's settings would only mislead.
		rep.Diffusion = "recorded"
		s := &rep.Settings
		s.Recorded = cfg.RecordedFrom
		if s.Recorded == "" {
			s.Recorded = "recorded cascades"
		}
		s.Sources, s.Pattern, s.Beta, s.Gamma, s.P, s.Threshold, s.Observe = "", "", nil, nil, nil, nil, [2]float64{}
	}
	// Every method is scored on the same test cascades in the same order,
	// so a method's values pair with the reference method's.
	perCascade := func(mi int, get func(Metrics) float64) []float64 {
		var out []float64
		for run := range results {
			for _, c := range results[run][mi].cascades {
				out = append(out, get(c.m))
			}
		}
		return out
	}
	// perRun is, per run, the mean over its test cascades of method mi
	// minus method ref, where both are defined (NaN where none is).
	perRun := func(mi, ref int, get func(Metrics) float64) []float64 {
		out := make([]float64, len(results))
		for run := range results {
			a, b := results[run][mi].cascades, results[run][ref].cascades
			var sum float64
			n := 0
			for i := range min(len(a), len(b)) {
				if d := get(a[i].m) - get(b[i].m); !math.IsNaN(d) {
					sum += d
					n++
				}
			}
			out[run] = math.NaN()
			if n > 0 {
				out[run] = sum / float64(n)
			}
		}
		return out
	}
	refName := cfg.PairedWith
	if refName == "" {
		refName = "infected"
	}
	ref := slices.Index(cfg.Methods, refName)
	// Simulated cascades are independent draws, each its own unit, even
	// where two came out alike; recorded ones are a fixed set that every
	// run splits anew, so a cascade tested in several runs, or copied in
	// the file, is one unit of the paired intervals.
	// Every method was tested on the same cascades: any that ran them
	// gives their units.
	unitsFrom := ref
	if unitsFrom < 0 {
		unitsFrom = 0
	}
	var units []string // nil: each cascade its own unit
	if len(cfg.Recorded) > 0 {
		if len(results) > 0 && unitsFrom < len(results[0]) {
			distinct := map[string]bool{}
			for run := range results {
				for _, c := range results[run][unitsFrom].cascades {
					units = append(units, c.key)
					distinct[c.key] = true
				}
			}
			rep.Settings.DistinctTest = len(distinct)
		}
		rep.Settings.Repeats = len(diffusion.Repeats(cfg.Recorded))
	}
	for mi, name := range cfg.Methods {
		var p, r, f1, auc, topk, ed, sec, fit []float64
		empty := 0
		extraSum := map[string]float64{}
		extraN := map[string]int{}
		for run := range results {
			mr := results[run][mi]
			fit = append(fit, mr.fit)
			for k, v := range mr.extras {
				extraSum[k] += v
				extraN[k]++
			}
			for _, c := range mr.cascades {
				p, r, f1 = append(p, c.m.Precision), append(r, c.m.Recall), append(f1, c.m.F1)
				auc, topk, ed = append(auc, c.m.AUC), append(topk, c.m.TopK), append(ed, c.m.ErrorDistance)
				sec = append(sec, c.seconds)
				if c.m.Empty {
					empty++
				}
			}
		}
		res := Result{
			Method: name, Control: IsControl(name),
			Precision: Summarize(p), Recall: Summarize(r), F1: Summarize(f1), AUC: Summarize(auc),
			TopK: Summarize(topk), ErrorDistance: Summarize(ed),
			SecondsPerCascade: Summarize(sec), FitSeconds: Summarize(fit), EmptyPredictions: empty,
		}
		if len(extraSum) > 0 {
			res.Extra = map[string]float64{}
			for k, v := range extraSum {
				res.Extra[k] = v / float64(extraN[k])
			}
		}
		if ref >= 0 && mi != ref && !res.Control {
			f1Of := func(m Metrics) float64 { return m.F1 }
			aucOf := func(m Metrics) float64 { return m.AUC }
			res.Paired = &Paired{
				Reference: refName,
				F1:        pairedDifference(perCascade(mi, f1Of), perCascade(ref, f1Of), units),
				AUC:       pairedDifference(perCascade(mi, aucOf), perCascade(ref, aucOf), units),
			}
			if len(results) > 1 {
				res.Paired.F1.ByRun, res.Paired.AUC.ByRun = perRun(mi, ref, f1Of), perRun(mi, ref, aucOf)
			}
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
