package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// addSimulationFlags registers the flags that describe a graph and a family
// of simulated cascades. simulate, train and eval share them, so a data set
// is described the same way everywhere; read them back with loadGraph,
// simulationConfig and simulationRun.
func addSimulationFlags(cmd *cobra.Command) {
	d := diffusion.DefaultConfig()
	f := cmd.Flags()
	f.String("graph", "", "edge list file: \"u v\" or \"u v w\" per line, # comments")
	f.Bool("directed", false, "treat each line u v as an arc u->v")
	f.String("diffusion", string(d.Model), "diffusion model: SI, SIR, IC or LT")
	f.Float64("beta", d.Beta, "SI/SIR infection probability per infected contact per step (on every arc: SI and SIR do not read edge weights)")
	f.Float64("gamma", d.Gamma, "SIR recovery probability per step")
	f.Float64("p", d.P, "IC activation probability per arc (a weighted graph's weights replace it)")
	f.Float64("lt-threshold", d.Threshold, "LT node threshold in [0,1]; negative draws U[0,1] per node per cascade")
	f.String("sources", "", "sources per cascade: a count N or a range MIN-MAX (instead of --source-ratio)")
	f.Float64("source-ratio", d.Sources.Ratio, "sources per cascade as a fraction of the nodes")
	f.String("pattern", string(d.Pattern), "source placement: uniform, degree (proportional to degree) or cluster (BFS ball)")
	f.String("observe", fmt.Sprintf("%g-%g", d.ObserveMin, d.ObserveMax), "infected fraction at the snapshot, drawn per cascade from MIN-MAX (or one value)")
	f.Int("max-steps", d.MaxSteps, "longest run in steps before a cascade is redrawn")
	f.Int("max-redraws", d.MaxRedraws, "failed draws in a row before giving up on a cascade")
	cascades := countOrFile("100")
	if cmd.Name() == "simulate" {
		f.Var(&cascadeCount{cascades}, "cascades", "number of cascades")
	} else {
		f.Var(&cascades, "cascades", "number of cascades to simulate, or a JSONL file of recorded ones (the same as --cascades-file)")
	}
	f.Int64("seed", 1, "random seed; the same seed gives the same cascades")
	f.Int("workers", 0, "parallel simulations; 0 uses every core")
}

// countOrFile is the value of --cascades: a number of cascades to
// simulate or, where recorded ones can be read instead (train, eval), the
// file holding them, as `train --cascades cascades.jsonl` reads; see
// recordedFile. A count is checked where it is read (simulationRun), so
// the flag takes any non-empty text.
type countOrFile string

func (c *countOrFile) String() string { return string(*c) }
func (c *countOrFile) Type() string   { return "count|file" }
func (c *countOrFile) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty: want a number of cascades")
	}
	*c = countOrFile(s)
	return nil
}

// cascadeCount is --cascades where only a count is read (simulate): the
// same value, named "count" in help rather than "count|file".
type cascadeCount struct{ countOrFile }

func (c *cascadeCount) Type() string { return "count" }

// isCount reports whether --cascades holds a number, not a file name: an
// integer as an int flag reads one (base prefixes and underscores too).
func isCount(s string) bool {
	_, err := parseCount(s)
	return err == nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, strconv.IntSize)
	return int(n), err
}

// recordedFile is the file of recorded cascades train and eval read
// instead of simulating: --cascades-file, or --cascades given a file name
// rather than a count. "" means simulate.
func recordedFile(v *viper.Viper) string {
	if path := v.GetString("cascades_file"); path != "" {
		return path
	}
	if s := v.GetString("cascades"); !isCount(s) {
		return s
	}
	return ""
}

// errGraphStdin refuses --graph -: standard input carries the other input
// (localize's observations, train's and eval's --cascades-file -), and
// "-" would otherwise fail as a file named "-" that is missing.
var errGraphStdin = errors.New("--graph -: the graph is read from a file, not standard input (save it to a file, or pass /dev/stdin where nothing else reads it)")

// loadGraph loads --graph (with --directed).
func loadGraph(v *viper.Viper) (*graph.Graph, error) {
	path := v.GetString("graph")
	if path == "" {
		return nil, errors.New("--graph: an edge list file is required")
	}
	if path == "-" {
		return nil, errGraphStdin
	}
	// A directory opens fine and fails only on the first read, as
	// "tmp:1: read /tmp: is a directory": say what is wrong instead.
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("--graph %s: is a directory, want an edge list file", path)
	}
	g, err := graph.Load(path, graph.Directed(v.GetBool("directed")))
	if err != nil {
		return nil, fmt.Errorf("--graph: %w", err)
	}
	return g, nil
}

// modelFlags are the simulation flags (as config keys) each model reads.
var modelFlags = map[diffusion.Model][]string{
	diffusion.SI:  {"beta"},
	diffusion.SIR: {"beta", "gamma"},
	diffusion.IC:  {"p"},
	diffusion.LT:  {"lt_threshold"},
}

// warnUnusedSettings warns, once each, when the simulation does not use
// what the user gave it: a weighted graph's weights under SI or SIR, which
// spread with --beta on every arc; an explicit --p under IC on a weighted
// graph, whose weights replace it; and a flag set explicitly (on the
// command line, in the environment or the config file) that only another
// model reads, such as --p under SI.
func (a *app) warnUnusedSettings(g *graph.Graph, cfg diffusion.Config) {
	graphFile := zap.String("graph", a.v.GetString("graph"))
	switch {
	case g.Weighted() && !cfg.Model.UsesWeights():
		msg := fmt.Sprintf("the graph's edge weights are not used: %s infects along every arc with --beta (only IC and LT read weights)", cfg.Model)
		if a.flags["forward"] != nil {
			// train and eval: the cascades ignore the weights, so the
			// forward models are configured without them (a weight of 1
			// everywhere, read as a probability, left deepis 244% above
			// the floor where the unweighted list fitted it).
			msg += "; the forward models are given the graph without them too"
		}
		a.log.Warn(msg, graphFile, zap.Float64("beta", cfg.Beta))
	case g.Weighted() && cfg.Model == diffusion.IC && a.v.IsSet("p"):
		a.log.Warn("--p is not used: IC on a weighted graph activates each arc with its weight",
			graphFile, zap.Float64("p", cfg.P))
	}
	if g.Weighted() && cfg.Model == diffusion.LT {
		// LT's weights are a node's share of influence: summed over its
		// in-arcs above 1, any one infected in-neighbour of weight above
		// the threshold activates it, and the model drifts towards "any
		// infected in-neighbour infects".
		over := 0
		for v := range g.N() {
			_, ws := g.In(v)
			sum := 0.0
			for _, w := range ws {
				sum += w
			}
			if sum > 1+1e-9 {
				over++
			}
		}
		if over*10 >= g.N() {
			a.log.Warn(fmt.Sprintf("%d of %d nodes have incoming weights summing above 1: LT reads a node's weights as shares of its in-neighbours' influence, "+
				"which should sum to at most 1 (scale each node's in-weights, or drop the weights for LT's default 1/in-degree)", over, g.N()), graphFile)
		}
	}
	switch st := g.Stats(); {
	case !g.Weighted() && !g.Directed() && st.Reciprocal > 0 && st.Reciprocal < st.Edges:
		// An undirected list gives each edge once, or every edge both
		// ways; some both ways and the rest one way is what a directed
		// graph (a follower or citation network) looks like.
		a.log.Warn(fmt.Sprintf("%d of %d edges are listed both ways (u v and v u), the others one way only: read as an undirected graph, each pair is one edge; "+
			"if the file lists arcs (a directed graph), pass --directed", st.Reciprocal, st.Edges), graphFile)
	}
	st := g.Stats()
	switch d := st.Duplicates; {
	case !g.Weighted() || d == 0:
	case !g.Directed():
		// Reciprocal arcs of a directed file read as one undirected edge,
		// whatever their weights; --directed keeps them apart. An edge
		// listed the same way twice is dropped either way, so --directed
		// is no advice for it.
		if r := st.Reciprocal; r > 0 {
			a.log.Warn(fmt.Sprintf("%d repeated edges of the weighted edge list were merged into one, the first weight kept: "+
				"if the file lists u v and v u as two arcs with weights of their own, pass --directed", r), graphFile)
		}
		if same := d - st.Reciprocal; same > 0 {
			a.log.Warn(fmt.Sprintf("%d edge(s) of the weighted edge list listed again the same way (u v twice) dropped: the first weight of each is kept", same), graphFile)
		}
	default:
		a.log.Warn(fmt.Sprintf("%d repeated arc(s) of the weighted edge list dropped: the first weight of each arc is kept", d), graphFile)
	}
	models := []diffusion.Model{diffusion.SI, diffusion.SIR, diffusion.IC, diffusion.LT}
	warned := slices.Clone(modelFlags[cfg.Model])
	for _, m := range models {
		for _, key := range modelFlags[m] {
			if slices.Contains(warned, key) || !a.v.IsSet(key) {
				continue
			}
			warned = append(warned, key)
			var readers []string
			for _, r := range models {
				if slices.Contains(modelFlags[r], key) {
					readers = append(readers, string(r))
				}
			}
			// Set on the command line, in SOURCEWATCH_* or in the config
			// file: named as the flag, the form the other two follow.
			a.log.Warn(fmt.Sprintf("--%s is not used: %s does not read it (%s %s)", strings.ReplaceAll(key, "_", "-"), cfg.Model,
				strings.Join(readers, " and "), byCount(len(readers), "does", "do")))
		}
	}
}

// warnOvershoot warns when many snapshots hold far more than the --observe
// target: a step of the spread can infect a large part of a dense graph
// at once, and a snapshot of every node infected tells nothing of where
// the spread began, yet train would learn on it (eval says what its test
// snapshots held; see warnOvershootMean).
func (a *app) warnOvershoot(g *graph.Graph, cfg diffusion.Config, cs []diffusion.Cascade) {
	if n := len(sourcesOnly(cs)); n > 0 && n*10 >= len(cs) {
		a.log.Warn(fmt.Sprintf("%d of %d snapshots hold only their sources, taken before the spread had begun because the sources alone reached the --observe target %g: "+
			"such a snapshot names its sources outright, so the held-out numbers on it say nothing of localization; fewer --sources (or a lower --source-ratio) or a higher --observe observe a spread",
			n, len(cs), cfg.ObserveMin))
	}
	over, all, bySources := 0, 0, 0
	for _, c := range cs {
		if float64(len(c.Infected)) > (cfg.ObserveMax+0.1)*float64(g.N()) {
			over++
			if len(c.Infected) <= len(c.Sources) {
				// observed at the start: the sources alone are past it
				bySources++
			}
		}
		if len(c.Infected) == g.N() {
			all++
		}
	}
	if len(cs) == 0 || (over*4 < len(cs) && all*20 < len(cs)) {
		return
	}
	if bySources*2 >= over && over > 0 {
		a.log.Warn(fmt.Sprintf("%d of %d snapshots hold over %.0f%% of the nodes, past the --observe maximum %g, %d of them at the start: "+
			"the sources alone are that many; fewer --sources (or a lower --source-ratio) or a higher --observe observe a spread, not its sources",
			over, len(cs), 100*(cfg.ObserveMax+0.1), cfg.ObserveMax, bySources))
		return
	}
	if math.Ceil(cfg.ObserveMin*float64(g.N())-1e-9) >= float64(g.N()) {
		// Every target is every node (--observe 1, or near it on a small
		// graph): the snapshots hold what was asked for, and no slower
		// spread observes them earlier.
		a.log.Warn(fmt.Sprintf("%d of %d snapshots hold every node, as --observe %g asks on this graph of %d nodes: "+
			"a snapshot of every node infected says nothing of where the spread began; a lower --observe observes it earlier",
			all, len(cs), cfg.ObserveMin, g.N()))
		return
	}
	if cfg.ObserveMax+0.1 >= 1 {
		// Nothing lies past the target but every node.
		a.log.Warn(fmt.Sprintf("%d of %d snapshots hold every node: one step of the spread infects all of this graph at once; %s, "+
			"and a snapshot of every node infected says nothing of where it began", all, len(cs), slowerSpread(g, cfg)))
		return
	}
	a.log.Warn(fmt.Sprintf("%d of %d snapshots hold over %.0f%% of the nodes, past the --observe maximum %g (%d every node): "+
		"one step of the spread infects that much of this graph at once; %s, "+
		"and a snapshot of every node infected says nothing of where it began",
		over, len(cs), 100*(cfg.ObserveMax+0.1), cfg.ObserveMax, all, slowerSpread(g, cfg)))
}

// warnRedrawn warns when draws were redrawn many times over for dying
// out below their targets. A redraw draws the sources and the spread's
// chance anew, so a few per cascade say only that spreads often die out;
// many times more than the cascades kept say that where a cascade starts
// decides whether it reaches the target, and the kept cascades' sources
// then lean towards the nodes that can (a directed star: its hub).
func (a *app) warnRedrawn(cfg diffusion.Config, redrawn, count int) {
	if count == 0 || redrawn <= 5*count {
		return
	}
	a.log.Warn(fmt.Sprintf("%d draws were redrawn for %d cascades, for dying out below their observation targets: where whether a spread reaches the target depends on where it starts, "+
		"the sources kept lean towards the nodes that can reach it and no longer follow --pattern %s; a lower --observe (or a stronger spread) keeps the draws as drawn",
		redrawn, count, cmp.Or(cfg.Pattern, diffusion.Uniform)))
}

// warnOvershootMean is warnOvershoot for eval, which sees only the mean
// infected fraction of its test snapshots.
func (a *app) warnOvershootMean(g *graph.Graph, cfg diffusion.Config, mean float64) {
	if mean <= cfg.ObserveMax+0.1 {
		return
	}
	// The sources alone past the target (--sources 5 on a graph of 5):
	// a slower spread cannot help a snapshot taken at the start.
	n := float64(g.N())
	var sources float64
	switch src := cfg.Sources; {
	case src.Count > 0:
		sources = float64(src.Count)
	case src.Ratio > 0:
		sources = max(1, min(math.Round(src.Ratio*n), n))
	default:
		sources = float64(src.Min+src.Max) / 2
	}
	if sources/n > cfg.ObserveMax {
		a.log.Warn(fmt.Sprintf("the test snapshots held %.0f%% of the nodes on average, past the --observe maximum %g: "+
			"the sources alone are that many (%s of %d nodes); fewer --sources (or a lower --source-ratio) or a higher --observe observe a spread, not its sources",
			100*mean, cfg.ObserveMax, cfg.Sources, g.N()))
		return
	}
	a.log.Warn(fmt.Sprintf("the test snapshots held %.0f%% of the nodes on average, past the --observe maximum %g: "+
		"one step of the spread infects that much of this graph at once; %s", 100*mean, cfg.ObserveMax, slowerSpread(g, cfg)))
}

// slowerSpread says what observes a spread earlier, in the terms of the
// model and graph at hand.
func slowerSpread(g *graph.Graph, cfg diffusion.Config) string {
	switch {
	case cfg.Model == diffusion.IC && g.Weighted():
		return "smaller arc weights (IC on a weighted graph reads them, not --p) observe it earlier"
	case cfg.Model == diffusion.IC:
		return "a lower --p observes it earlier"
	case cfg.Model == diffusion.LT && g.Weighted():
		return "a higher --lt-threshold or smaller arc weights observe it earlier"
	case cfg.Model == diffusion.LT:
		return "a higher --lt-threshold observes it earlier"
	default:
		return "a lower --beta observes it earlier"
	}
}

// warnRecorded warns of recorded cascades that are valid but suspect,
// naming their lines: a snapshot of every node infected says nothing of
// where the spread began (and, in the training split, widens the range
// of infected fractions the bundle says it was trained on), and a source
// in neither "infected" nor "recovered" is a recovered source left out of
// "recovered" under SIR but a data error under SI.
func (a *app) warnRecorded(g *graph.Graph, cs []diffusion.Cascade, path string) {
	// lines maps indices of cs to the file's line numbers.
	lines := func(idx []int) []int {
		out := make([]int, len(idx))
		for i, k := range idx {
			out[i] = cs[k].Line
		}
		return out
	}
	if only := sourcesOnly(cs); len(only) > 0 && len(only)*10 >= len(cs) {
		a.log.Warn(fmt.Sprintf("%d of %d cascades infect only their sources (%s): such a snapshot names its sources outright, "+
			"so the held-out numbers on it say nothing of localization; drop them unless that is what you observe",
			len(only), len(cs), linesOf(lines(only), path)), zap.String("cascades_file", path))
	}
	if repeats := diffusion.Repeats(cs); len(repeats) > 0 {
		a.log.Warn(fmt.Sprintf("%d of %d cascades repeat an earlier line's sources and infected nodes (%s): the split puts copies on both sides, "+
			"so the held-out numbers reward remembering training cascades, not localizing; drop the copies unless your history really repeats (small outbreaks on a small graph can, by chance)",
			len(repeats), len(cs), linesOf(lines(repeats), path)), zap.String("cascades_file", path))
	}
	var all, unobserved []int
	for _, c := range cs {
		if len(c.Infected) == g.N() {
			all = append(all, c.Line)
		}
		// A "recovered" given for other nodes says nothing of a source
		// missing from both lists.
		for _, s := range c.Sources {
			_, infected := slices.BinarySearch(c.Infected, s)
			if !infected && (c.Recovered == nil || c.Recovered[s] < 0) {
				unobserved = append(unobserved, c.Line)
				break
			}
		}
	}
	if len(all) > 0 {
		a.log.Warn(fmt.Sprintf("%d of %d cascades have every node infected (%s): such a snapshot says nothing of where the spread began, "+
			"and one in the training split widens the range of infected fractions the bundle says it was trained on; drop them unless that is what you observe",
			len(all), len(cs), linesOf(all, path)),
			zap.String("cascades_file", path))
	}
	if len(unobserved) > 0 {
		a.log.Warn(fmt.Sprintf(`%d of %d cascades have a source that is in neither "infected" nor "recovered" (%s): `+
			"under SIR a source may have recovered (list it in \"recovered\"); under SI it is a data error", len(unobserved), len(cs), linesOf(unobserved, path)),
			zap.String("cascades_file", path))
	}
}

// sourcesOnly returns the indices of the cascades whose snapshot holds
// exactly their sources.
func sourcesOnly(cs []diffusion.Cascade) []int {
	var out []int
	for i, c := range cs {
		if len(c.Sources) > 0 && slices.Equal(c.Sources, c.Infected) {
			out = append(out, i)
		}
	}
	return out
}

// linesOf names up to five lines of path, and how many more there are.
func linesOf(lines []int, path string) string {
	const most = 5
	var b strings.Builder
	b.WriteString("line")
	if len(lines) > 1 {
		b.WriteString("s")
	}
	for i, l := range lines[:min(len(lines), most)] {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d", l)
	}
	if len(lines) > most {
		fmt.Fprintf(&b, " and %d more", len(lines)-most)
	}
	fmt.Fprintf(&b, " of %s", filepath.Base(path))
	return b.String()
}

// simFlags names the diffusion.Config parameters an unreachable
// observation target is blamed on by the flags that set them.
var simFlags = map[string]string{
	"Beta":       "--beta",
	"Gamma":      "--gamma",
	"P":          "--p",
	"Threshold":  "--lt-threshold",
	"MaxSteps":   "--max-steps",
	"MaxRedraws": "--max-redraws (the best draw came close)",
	"Observe":    "--observe",
	"Weights":    "the edge weights",
	// LT's default draws each node's threshold; a fixed one replaces it.
	"RandomThreshold": "the random node thresholds (a fixed --lt-threshold below their mean 0.5 spreads further)",
}

// simulationError renders a diffusion.UnreachableError inside err with the
// flags' names for the parameters it blames ("--max-steps too low", not
// "MaxSteps too low"), keeping the context wrapped around it and
// errors.Is and errors.As. Any other error is returned as it is.
func simulationError(err error) error {
	var ue *diffusion.UnreachableError
	if !errors.As(err, &ue) {
		return err
	}
	// Every wrapper on the way ends its message with the wrapped one's.
	prefix, ok := strings.CutSuffix(err.Error(), ue.Error())
	if !ok {
		return err
	}
	return &renamedError{msg: prefix + ue.Explain(func(p string) string { return simFlags[p] }), err: err}
}

// renamedError is err under another message.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// simulationConfig builds the diffusion config from the simulation flags.
// It checks what it can without the graph; source counts against the
// graph's size are checked by diffusion.Config.Validate.
// sourcesFit names --sources when it asks for more sources than g has
// nodes, the one simulation setting the flags cannot check before the
// graph is read (diffusion's own check names its field, not the flag).
func sourcesFit(s diffusion.SourceSpec, g *graph.Graph) error {
	if most := max(s.Count, s.Max); most > g.N() {
		return fmt.Errorf("--sources: %d sources asked for, and the graph has %d nodes", most, g.N())
	}
	return nil
}

func (a *app) simulationConfig() (diffusion.Config, error) {
	v := a.v
	cfg := diffusion.DefaultConfig()
	var err error
	if cfg.Model, err = diffusion.ParseModel(v.GetString("diffusion")); err != nil {
		return cfg, fmt.Errorf("--diffusion: %w", err)
	}
	if cfg.Pattern, err = diffusion.ParsePattern(v.GetString("pattern")); err != nil {
		return cfg, fmt.Errorf("--pattern: %w", err)
	}
	cfg.Beta, cfg.Gamma, cfg.P = v.GetFloat64("beta"), v.GetFloat64("gamma"), v.GetFloat64("p")
	cfg.Threshold = v.GetFloat64("lt_threshold")
	switch cfg.Model {
	case diffusion.SI, diffusion.SIR:
		if err := probability("--beta", cfg.Beta, false); err != nil {
			return cfg, err
		}
		if cfg.Model == diffusion.SIR {
			if err := probability("--gamma", cfg.Gamma, true); err != nil {
				return cfg, err
			}
		}
	case diffusion.IC:
		if err := probability("--p", cfg.P, false); err != nil {
			return cfg, err
		}
	case diffusion.LT:
		if math.IsNaN(cfg.Threshold) || cfg.Threshold > 1 {
			return cfg, fmt.Errorf("--lt-threshold: %v, want at most 1 (negative means uniform random)", cfg.Threshold)
		}
	}

	count, ratio := a.settingLayer("sources"), a.settingLayer("source_ratio")
	if count == ratio && count > fromDefault {
		// Either would be silently dropped for the other.
		return cfg, fmt.Errorf("--sources %s and --source-ratio %v both given: give one (a count or range of sources, or a fraction of the nodes)",
			v.GetString("sources"), v.GetFloat64("source_ratio"))
	}
	if s := strings.TrimSpace(v.GetString("sources")); s != "" && count >= ratio {
		if cfg.Sources, err = parseSources(s); err != nil {
			return cfg, fmt.Errorf("--sources: %w", err)
		}
	} else {
		r := v.GetFloat64("source_ratio")
		if math.IsNaN(r) || r <= 0 || r > 1 {
			return cfg, fmt.Errorf("--source-ratio: %v is outside (0, 1]", r)
		}
		cfg.Sources = diffusion.SourceSpec{Ratio: r}
	}

	if cfg.ObserveMin, cfg.ObserveMax, err = parseFraction(v.GetString("observe")); err != nil {
		return cfg, fmt.Errorf("--observe: %w", err)
	}
	if cfg.MaxSteps = v.GetInt("max_steps"); cfg.MaxSteps < 1 {
		return cfg, fmt.Errorf("--max-steps: %d is not positive", cfg.MaxSteps)
	}
	if cfg.MaxRedraws = v.GetInt("max_redraws"); cfg.MaxRedraws < 1 {
		return cfg, fmt.Errorf("--max-redraws: %d is not positive", cfg.MaxRedraws)
	}
	return cfg, nil
}

// simulationRun reads how many cascades to simulate, the seed and the
// worker count.
func simulationRun(v *viper.Viper) (cascades int, seed int64, workers int, err error) {
	s := v.GetString("cascades")
	if cascades, err = parseCount(s); err != nil {
		return 0, 0, 0, fmt.Errorf("--cascades: %q is not a number of cascades", s)
	}
	if cascades < 1 {
		return 0, 0, 0, fmt.Errorf("--cascades: %d is not positive", cascades)
	}
	if cascades > diffusion.MaxCascades {
		return 0, 0, 0, fmt.Errorf("--cascades: %d is over %d a run (every cascade is held in memory); simulate in several runs with other --seed values", cascades, diffusion.MaxCascades)
	}
	if workers = v.GetInt("workers"); workers < 0 {
		return 0, 0, 0, fmt.Errorf("--workers: %d is negative", workers)
	}
	return cascades, v.GetInt64("seed"), workers, nil
}

func probability(flag string, p float64, allowZero bool) error {
	if math.IsNaN(p) || p < 0 || p > 1 || (p == 0 && !allowZero) {
		return fmt.Errorf("%s: %v is not a probability in %s, 1]", flag, p, map[bool]string{true: "[0", false: "(0"}[allowZero])
	}
	return nil
}

// parseSources reads "N" or "MIN-MAX".
func parseSources(s string) (diffusion.SourceSpec, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return diffusion.SourceSpec{}, fmt.Errorf("want a count N or a range MIN-MAX, got %q", s)
	}
	if !isRange {
		if a < 1 {
			return diffusion.SourceSpec{}, fmt.Errorf("count %d is not positive", a)
		}
		return diffusion.SourceSpec{Count: a}, nil
	}
	b, err := strconv.Atoi(strings.TrimSpace(hi))
	if err != nil {
		return diffusion.SourceSpec{}, fmt.Errorf("want a count N or a range MIN-MAX, got %q", s)
	}
	if a < 1 || b < a {
		return diffusion.SourceSpec{}, fmt.Errorf("range %d-%d needs 1 <= MIN <= MAX", a, b)
	}
	return diffusion.SourceSpec{Min: a, Max: b}, nil
}

// parseFraction reads "MIN-MAX" or a single value, both in (0, 1].
func parseFraction(s string) (lo, hi float64, err error) {
	// The range's dash is the first one that is not an exponent's sign
	// (3e-1 is a number) nor a leading minus.
	t := strings.TrimSpace(s)
	a, b := t, t
	for i := 1; i < len(t); i++ {
		if t[i] == '-' && t[i-1] != 'e' && t[i-1] != 'E' {
			a, b = t[:i], t[i+1:]
			break
		}
	}
	lo, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	hi, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("want a fraction range like 0.2-0.5, got %q", s)
	}
	if !(lo > 0 && lo <= hi && hi <= 1) {
		return 0, 0, fmt.Errorf("range %g-%g needs 0 < MIN <= MAX <= 1", lo, hi)
	}
	return lo, hi, nil
}
