package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// forwardChecksumFlag reads --forward-checksum: "" or a hex SHA-256.
func forwardChecksumFlag(v *viper.Viper) (string, error) {
	sum := v.GetString("forward_checksum")
	if sum != "" {
		if _, err := hex.DecodeString(sum); err != nil || len(sum) != 64 {
			return "", fmt.Errorf("--forward-checksum: %q is not a SHA-256 (want 64 hex digits)", sum)
		}
	}
	return sum, nil
}

// checkCallTimeout refuses a negative --call-timeout (0 is the plugin
// host's default deadline).
func checkCallTimeout(v *viper.Viper) error {
	if d := v.GetDuration("call_timeout"); d < 0 {
		return fmt.Errorf("--call-timeout: %v is negative (0 = the production deadline)", d)
	}
	return nil
}

func newLocalizeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "localize",
		Short: "Find the likely sources of an observed spread with a trained bundle",
		Long: `localize reads an observation ({"infected":[node ids...]}, or a JSONL file of
them, one per line) and prints the suspected sources, ranked, with their score
(mean of x over restarts, reordered as the bundle ranks) and probability (the
fraction of restarts whose own x, ranked the same way, reaches the source
set's cut: delta, or under a count rule the K-th source's mean x).`,
		Example: `  sourcewatch localize --bundle karate.swb --observation obs.json`,
		// A file named after the flags (localize --bundle b.swb obs.json)
		// was ignored, and localize read stdin instead: nothing on a
		// pipe, a wait for input on a terminal.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("localize takes no arguments, got %q: give the observation file as --observation %s (stdin without it)", args[0], args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runLocalize(cmd, a) },
	}
	f := cmd.Flags()
	f.String("bundle", "", "bundle file written by train (required)")
	f.String("observation", "-", `observation file: {"infected":[ids...]} or JSONL of them ("-" = stdin)`)
	f.String("graph", "", "edge file to check the bundle against (default: the bundle's own copy)")
	f.Bool("directed", false, "the --graph edge file is directed")
	f.String("plugin-dir", defaultPluginDir(), "directory holding the forward-model plugin binaries"+pluginDirHelp)
	f.Bool("allow-unverified", false, "run a forward plugin whose checksum the bundle does not record")
	f.String("forward-checksum", "", "hex SHA-256 the plugin binary must have, instead of the one the bundle records (a trusted rebuild of the same model)")
	f.Duration("call-timeout", 0, "deadline of every forward plugin call, Configure included (0 = the default: 10s plus 1µs per row × (nodes + arcs)); raise it for a model that loads slowly")
	f.Int("restarts", 0, "inference restarts R (0 = the bundle's)")
	f.Float64("threshold", 0, "override the bundle's threshold delta (0 = the bundle's)")
	f.Int("top", 10, "where no node is named, list this many top-scored nodes instead (the JSON's top holds them always)")
	f.Uint64("seed", 1, "random seed of the restarts")
	f.Bool("json", false, "print one JSON object per observation")
	return cmd
}

type observationFile struct {
	Infected []string `json:"infected"`
	// ID is the observation's own "id", echoed in the output so a batch
	// of incidents can be matched to their answers.
	ID string `json:"id,omitempty"`
	// where is "file" or "file:line", for errors.
	where string
	// n is the observation's number in its file, counting the bad
	// lines too (not the blank ones), as the output numbers it.
	n int
	// nodes are Infected as the graph's indices, set by the check.
	nodes []int
}

type localizeOutput struct {
	Observation int     `json:"observation"`
	ID          string  `json:"id,omitempty"`
	Infected    int     `json:"infected"`
	Threshold   float64 `json:"threshold"`
	// SourceRule describes a count rule that cut the sources (Threshold
	// is then the last source's score); empty when delta did.
	SourceRule string `json:"source_rule,omitempty"`
	// Ranking is "infected-first" or "infected-then-predicted" when the
	// bundle ranks every node observed uninfected below every infected one
	// (see localize.Ranking); empty for the descent's scores.
	Ranking localize.Ranking `json:"ranking,omitempty"`
	// LoneInfectedFirst is set when the bundle ranks the lone infected
	// nodes (infected, no infected in-neighbour) above every other one.
	LoneInfectedFirst bool `json:"lone_infected_first,omitempty"`
	// LoneInfectedNamed and ComponentsNamed are set when every lone
	// infected node, and the first-ranked node of every infected
	// component, is named a source whatever the threshold or count cut
	// (the bundle's training snapshots proved each lone node a source; see
	// localize.Manifest.NamesInfectedComponents). They are the same; the
	// first is kept for readers of the builds before the second.
	LoneInfectedNamed bool `json:"lone_infected_named,omitempty"`
	ComponentsNamed   bool `json:"infected_components_named,omitempty"`
	// FloorNamed is how many of the last Sources are named by that and
	// not by the cut: they score at or below Threshold.
	FloorNamed int `json:"floor_named,omitempty"`
	// Calibrated is set when the bundle's scores of the infected nodes are
	// calibrated by infected component size (see localize.Calibration).
	Calibrated bool `json:"calibrated,omitempty"`
	// Tied are nodes left out of Sources by a count rule although their
	// score equals the last source's (the rule names exactly K nodes, as
	// validation scored it, ties by node order).
	Tied []rankedSource `json:"tied,omitempty"`
	// OutsideTraining describes an infected fraction outside the range the
	// bundle's training snapshots held; empty inside it or when the bundle
	// does not record the range.
	OutsideTraining string `json:"outside_training,omitempty"`
	// Note is what a reader of the answer should know, as an alert's note
	// (localize.Manifest.AnswerNote): OutsideTraining, and that a count
	// rule named every infected node.
	Note string `json:"note,omitempty"`
	// ExpectedSources is the sum of every node's chance of being a
	// source: the source count the bundle expects for this observation;
	// absent with a bundle of format 6 or older.
	ExpectedSources *float64            `json:"expected_sources,omitempty"`
	Sources         []rankedSource      `json:"sources"`
	Top             []rankedSource      `json:"top"`
	Bundle          string              `json:"bundle"`
	Timing          localize.Timing     `json:"timing"`
	Forward         localize.ForwardRef `json:"forward"`
}

type rankedSource struct {
	Node        string  `json:"node"`
	Score       float64 `json:"score"`
	Probability float64 `json:"probability"`
	// Chance is the node's chance of being a source (localize.Result's
	// Chance); absent with a bundle of format 6 or older.
	Chance *float64 `json:"chance,omitempty"`
}

func runLocalize(cmd *cobra.Command, a *app) (err error) {
	ctx := cmd.Context()
	v := a.v
	path := v.GetString("bundle")
	if path == "" {
		return fmt.Errorf("--bundle: the bundle file is required")
	}
	if err := checkSizes(v, map[string]int{"restarts": 0, "top": 0}); err != nil {
		return err
	}
	if r := v.GetInt("restarts"); r > localize.MaxRestarts {
		return fmt.Errorf("--restarts: %d, want at most %d", r, localize.MaxRestarts)
	}
	if t := v.GetFloat64("threshold"); !(t >= 0 && t <= 1) {
		return fmt.Errorf("--threshold: %g outside [0, 1] (0: the bundle's)", t)
	}
	var g *graph.Graph
	if gp := v.GetString("graph"); gp != "" {
		if gp == "-" {
			return errGraphStdin
		}
		var err error
		if g, err = graph.Load(gp, graph.Directed(v.GetBool("directed"))); err != nil {
			return err
		}
	}
	b, err := localize.LoadBundle(path, g, localize.WithoutVAE())
	if err != nil {
		return err
	}
	for _, s := range []string{b.Manifest.VJPCheckFailure(v.GetString("plugin_dir")), b.Manifest.WeakRanking(), b.Manifest.LargeSourceSets()} {
		if s != "" {
			fmt.Fprintf(a.stderr, "warning: %s: %s\n", path, s)
		}
	}
	// Every line is checked, ids included, before the plugin starts, so
	// a typo in the last line of a JSONL is named at once. A bad line
	// loses only itself: it is named on stderr now, the good lines are
	// answered, and the exit status says how many were bad. Not as an
	// object in the --json stream, whose every line stays an answer:
	// its "observation" number skips the bad one.
	obsName := v.GetString("observation")
	if obsName == "-" || obsName == "" {
		obsName = stdinName
	}
	obs, bad, err := readObservations(v.GetString("observation"), cmd.InOrStdin(), func(o *observationFile) error {
		var err error
		if o.nodes, err = b.Graph.Lookup(o.Infected); err != nil {
			return fmt.Errorf("%s: %w (the bundle's graph: %s)", o.where, err, b.Graph)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range bad {
		fmt.Fprintln(a.stderr, e)
	}
	total := len(obs) + len(bad)
	if len(obs) == 0 {
		return fmt.Errorf("%s: all %d observations are bad (each named above); nothing to localize", obsName, total)
	}
	infected := make([][]int, len(obs))
	for i, o := range obs {
		infected[i] = o.nodes
		// A node listed twice is infected once (exports of event logs
		// repeat nodes), and counts once.
		slices.Sort(infected[i])
		infected[i] = slices.Compact(infected[i])
	}
	sum, err := forwardChecksumFlag(v)
	if err != nil {
		return err
	}
	if err := checkCallTimeout(v); err != nil {
		return err
	}
	defer func() { err = withPluginCheckHint(err, b.Manifest.Forward.Name, v.GetString("plugin_dir")) }()
	proc, err := localize.LaunchForward(ctx, b, localize.LaunchOptions{
		PluginDir: v.GetString("plugin_dir"), AllowUnverified: v.GetBool("allow_unverified"), Checksum: sum, Logger: a.log.Named("plugin"),
		CallTimeout: v.GetDuration("call_timeout"),
	})
	if err != nil {
		return err
	}
	defer proc.Close()
	opts := b.Options()
	if r := v.GetInt("restarts"); r > 0 {
		opts.Restarts = r
	}
	opts.Threshold = v.GetFloat64("threshold")
	opts.Seed = v.GetUint64("seed")
	enc := json.NewEncoder(a.stdout)
	for i, idx := range infected {
		y := make([]float64, b.Graph.N())
		for _, u := range idx {
			y[u] = 1
		}
		res, err := localize.Solve(ctx, b, proc, y, opts)
		if err != nil {
			return fmt.Errorf("%s: %w", obs[i].where, err)
		}
		out := localizeOutput{
			Observation: obs[i].n, ID: obs[i].ID, Infected: len(idx), Threshold: res.Threshold, Bundle: b.Manifest.ID,
			SourceRule: sourceRuleUsed(b, opts), Ranking: b.Manifest.Ranking, LoneInfectedFirst: b.Manifest.LoneInfectedFirst,
			Calibrated:        b.Manifest.Calibration != nil,
			LoneInfectedNamed: opts.Threshold == 0 && b.Manifest.NamesInfectedComponents(),
			ComponentsNamed:   opts.Threshold == 0 && b.Manifest.NamesInfectedComponents(),
			FloorNamed:        res.Floor,
			Timing:            res.Timing, Forward: b.Manifest.Forward,
			Sources: ranked(b.Graph, res, res.Sources), Top: ranked(b.Graph, res, topByScore(res.Scores, v.GetInt("top"))),
			OutsideTraining: b.Manifest.OutsideTraining(len(idx)),
			ExpectedSources: localize.ExpectedSources(res.Chance),
		}
		rule := b.Manifest.SourceRule
		if opts.Threshold > 0 {
			rule = localize.SourceRule{}
		}
		out.Note = b.Manifest.AnswerNote(len(idx), len(res.Sources)-res.Floor, rule)
		if out.SourceRule != "" {
			out.Tied = ranked(b.Graph, res, tiedWithLast(res))
		}
		if v.GetBool("json") {
			if err := enc.Encode(out); err != nil {
				return err
			}
			continue
		}
		printLocalized(a.stdout, out, total > 1)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %d of %d observations bad (each named above), not localized; the other %d answered", obsName, len(bad), total, len(obs))
	}
	return nil
}

// tiedWithLast returns the nodes outside res.Sources whose score equals
// the last source's, by node order.
func tiedWithLast(res *localize.Result) []int {
	cut := res.Sources[:len(res.Sources)-res.Floor]
	if len(cut) == 0 {
		return nil
	}
	last := res.Scores[cut[len(cut)-1]]
	in := make(map[int]bool, len(res.Sources))
	for _, v := range res.Sources {
		in[v] = true
	}
	var tied []int
	for v, s := range res.Scores {
		if s == last && !in[v] {
			tied = append(tied, v)
		}
	}
	return tied
}

// sourceRuleUsed describes the bundle's count rule when Solve cut by it
// (no --threshold given), else "".
func sourceRuleUsed(b *localize.Bundle, opts localize.Options) string {
	if opts.Threshold > 0 || b.Manifest.SourceRule.IsThreshold() {
		return ""
	}
	return b.Manifest.SourceRule.String()
}

func ranked(g *graph.Graph, res *localize.Result, nodes []int) []rankedSource {
	out := make([]rankedSource, len(nodes))
	for i, v := range nodes {
		out[i] = rankedSource{Node: g.ID(v), Score: res.Scores[v], Probability: res.Probability[v]}
		if res.Chance != nil {
			out[i].Chance = &res.Chance[v]
		}
	}
	return out
}

// topByScore returns the k highest-scored nodes, best first.
func topByScore(scores []float64, k int) []int {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sortByScore(idx, scores)
	if k > len(idx) {
		k = len(idx)
	}
	return idx[:max(k, 0)]
}

func printLocalized(w io.Writer, o localizeOutput, numbered bool) {
	switch {
	case o.ID != "":
		fmt.Fprintf(w, "observation %d (%s)\n", o.Observation, o.ID)
	case numbered:
		fmt.Fprintf(w, "observation %d\n", o.Observation)
	}
	cut := fmt.Sprintf("threshold delta %.2f", o.Threshold)
	if o.SourceRule != "" {
		// Three significant digits: a cut of 0.0003 is not 0.000.
		at := strconv.FormatFloat(o.Threshold, 'g', 3, 64)
		if o.Threshold < 1 && at == "1" {
			// A calibrated or lone node's score of 0.9996 would read "down
			// to 1" above a table that prints it as 0.9999.
			at = strconv.FormatFloat(min(o.Threshold, 0.9999), 'f', 4, 64)
		}
		cut = fmt.Sprintf("%s (down to %s)", o.SourceRule, at)
	}
	if o.Ranking != localize.RankByScore {
		cut += "; " + string(o.Ranking)
	}
	if o.LoneInfectedFirst {
		cut += "; lone infected first"
	}
	if o.ComponentsNamed {
		cut += "; every lone infected node and infected component named"
	}
	if o.Calibrated {
		cut += "; calibrated by component size"
	}
	fmt.Fprintf(w, "%d infected; %s; %d suspected source(s); %s (forward %s)\n",
		o.Infected, cut, len(o.Sources), time.Duration(o.Timing.TotalSeconds*float64(time.Second)).Round(time.Millisecond), o.Forward.Name)
	list := o.Sources
	switch {
	case len(list) == 0 && len(o.Top) == 0:
		// --top 0: a table of no rows under "the top-scored nodes are"
		// read as a listing that failed.
		fmt.Fprintf(w, "no node is over delta (--top 0: no top-scored nodes listed)\n")
	case len(list) == 0:
		fmt.Fprintf(w, "no node is over delta; the top-scored nodes are:\n")
		list = o.Top
	}
	// The node column is as wide as the widest id listed, from 16 up to
	// 48 terminal columns (a longer id pushes its own row's numbers).
	col := 16
	for _, s := range list {
		col = max(col, min(alerts.TextWidth(s.Node), 48))
	}
	if len(list) > 0 {
		// Four digits: scores of a large infected region often agree to three.
		fmt.Fprintf(w, "%5s  %-*s %7s %12s", "rank", col, "node", "score", "probability")
		if o.ExpectedSources != nil {
			fmt.Fprintf(w, " %7s", "chance")
		}
		fmt.Fprintln(w)
	}
	for i, s := range list {
		score := s.Score
		if score < 1 && score >= 0.99995 {
			// Rounded it would read 1.0000 beside a --threshold 1 that
			// it does not reach.
			score = 0.9999
		}
		// Padded by terminal columns, not runes (%-16s), so a wide id
		// (Chinese, Japanese) leaves the columns after it in line.
		node := s.Node + strings.Repeat(" ", max(col-alerts.TextWidth(s.Node), 0))
		fmt.Fprintf(w, "%5d  %s %7.4f %12.3f", i+1, node, score, s.Probability)
		if s.Chance != nil {
			fmt.Fprintf(w, " %7.3f", *s.Chance)
		}
		fmt.Fprintln(w)
	}
	if e := o.ExpectedSources; e != nil {
		fmt.Fprintf(w, "sources expected: %.1f (the sum of every node's chance of being one)\n", *e)
	}
	if n := o.FloorNamed; n > 0 && len(o.Sources) > 0 {
		first := len(o.Sources) - n + 1
		ranks := fmt.Sprintf("ranks %d-%d are", first, len(o.Sources))
		if n == 1 {
			ranks = fmt.Sprintf("rank %d is", first)
		}
		fmt.Fprintf(w, "%s named below the cut: a lone infected node is a source, and every infected component holds one\n", ranks)
	}
	if len(o.Tied) > 0 {
		names := make([]string, len(o.Tied))
		for i, s := range o.Tied {
			names[i] = s.Node
		}
		fmt.Fprintf(w, "tied with the last suspect, left out by the count: %s\n", strings.Join(names, ", "))
	}
	if o.Note != "" {
		fmt.Fprintf(w, "note: %s\n", o.Note)
	}
}

// stdinName is how errors name standard input read for "-": as
// `<stdin>:3: ...`, never mistaken for a file named "stdin".
const stdinName = "<stdin>"

// readObservations reads one JSON object or JSONL of them from path ("-"
// is stdin). Each object must have a non-empty "infected" list and no
// other field (a misspelt key would otherwise read as nothing infected)
// but an "id" (a string, echoed in the output) and those of a cascade
// file (sources, times, recovered), which are ignored, so `simulate`'s
// output and a recorded cascade file can be localized as they are.
// A byte-order mark is skipped.
//
// A bad line of a JSONL file loses only itself: it is returned in bad,
// as `file:line: reason`, and the good ones in obs, each numbered (n) as
// the observation it is among all of them, bad ones included. err is
// what fails the whole input: one it cannot read, one not JSON lines
// (UTF-16, CR line ends, binary), a single object that is bad, or none
// at all. Errors name the file and line.
func readObservations(path string, stdin io.Reader, check func(*observationFile) error) (obs []observationFile, bad []error, err error) {
	var data []byte
	if path == "-" || path == "" {
		path = stdinName
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading observation %q: %w", path, err)
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if json.Valid(data) {
		// One JSON value (perhaps over many lines): one observation. On
		// one line its errors name that line, as a JSONL line's do.
		where := path
		if !bytes.Contains(bytes.TrimSpace(data), []byte("\n")) {
			where += ":1"
		}
		msg, _ := diffusion.TextProblem(data, true)
		one, err := decodeObservation(data, where, check)
		if err != nil {
			if msg != "" {
				// Not UTF-8: why an id is unknown.
				err = fmt.Errorf("%w (%s)", err, msg)
			}
			return nil, nil, err
		}
		one.n = 1
		return []observationFile{one}, nil, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line, n := 0, 0
	for sc.Scan() {
		line++
		// A byte-order mark on a later line too: a file joined to the
		// one before it, outside every JSON value.
		text := bytes.TrimSpace(bytes.TrimPrefix(sc.Bytes(), []byte("\ufeff")))
		if len(text) == 0 {
			continue
		}
		msg, stop := diffusion.TextProblem(text, line == 1)
		if stop {
			// UTF-16, CR line ends, a compressed or binary file, said
			// as such rather than as the byte JSON trips on: every line
			// would fail alike.
			return nil, nil, fmt.Errorf("%s:%d: %s", path, line, msg)
		}
		n++
		o, err := decodeObservation(text, fmt.Sprintf("%s:%d", path, line), check)
		if err != nil {
			if msg != "" {
				// Not UTF-8: why an id is unknown.
				err = fmt.Errorf("%w (%s)", err, msg)
			}
			bad = append(bad, err)
			continue
		}
		o.n = n
		obs = append(obs, o)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	switch {
	case n == 0:
		return nil, nil, fmt.Errorf(`%s: no observation; want {"infected":[ids...]} or JSONL of them`, path)
	case n == 1 && len(bad) == 1:
		// The only line: its error is the input's, as a single
		// object's is.
		return nil, nil, bad[0]
	}
	return obs, bad, nil
}

// observationID is an observation's optional id, echoed with its answer:
// a string as it is, a number as written (a recorded file's numeric ids).
func observationID(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf(`"id" holds %s where it wants a string or a number`, describeJSON(raw))
}

// describeJSON names the kind of JSON value raw holds, for errors.
func describeJSON(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	}
	return "a value"
}

// keysFound lists an object's keys for the error about its missing
// "infected" (a misspelt key is then plain to see), or nothing.
func keysFound(data []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || len(m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(m))
	for i, k := range keys {
		keys[i] = fmt.Sprintf("%q", k)
	}
	return " (its keys: " + strings.Join(keys, ", ") + ")"
}

// decodeObservation decodes one {"infected":[ids...]} object, where names
// it in errors, and checks it with check (the ids, against the graph,
// setting nodes) before its own checks of the list.
func decodeObservation(data []byte, where string, check func(*observationFile) error) (observationFile, error) {
	// A cascade file's line (simulate's output, or a recorded cascade
	// with keys of its own, as train reads them) is an observation too:
	// its infected list is read and every other key is not.
	var raw struct {
		Infected *[]*string      `json:"infected"`
		ID       json.RawMessage `json:"id"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		// encoding/json names Go types; say it in the file's terms.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			switch field := typeErr.Field; {
			case field == "":
				err = fmt.Errorf("found a JSON %s, not an object", typeErr.Value)
			case field == "infected" && typeErr.Value == "number":
				err = fmt.Errorf(`"infected" holds a number: node ids are strings ("7", not 7)`)
			case field == "infected":
				err = fmt.Errorf(`"infected" holds a JSON %s where it wants an array of node ids`, typeErr.Value)
			default:
				err = fmt.Errorf("%q holds a JSON %s, not what it should", field, typeErr.Value)
			}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: the line ends inside the object (cut short by an interrupted write or copy?)", err)
		}
		return observationFile{}, fmt.Errorf(`%s: want {"infected":[ids...]}: %v`, where, err)
	}
	// Token, not More: More reports false before a stray '}' or ']',
	// which would pass unread.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return observationFile{}, fmt.Errorf(`%s: want one {"infected":[ids...]} object per line, found more after it`, where)
	}
	if k := diffusion.RepeatedKey(data, "infected", "id"); k != "" {
		// encoding/json would keep the last, another reader the first.
		return observationFile{}, fmt.Errorf(`%s: %q is given twice (keys match in any case); want one {"infected":[ids...]}`, where, k)
	}
	if raw.Infected == nil {
		if keys := keysFound(data); strings.Contains(keys, `"infected"`) {
			return observationFile{}, fmt.Errorf(`%s: "infected" is null; want {"infected":[ids...]}`, where)
		}
		return observationFile{}, fmt.Errorf(`%s: no "infected" field%s; want {"infected":[ids...]}`, where, keysFound(data))
	}
	id, err := observationID(raw.ID)
	if err != nil {
		return observationFile{}, fmt.Errorf(`%s: want {"infected":[ids...]}: %v`, where, err)
	}
	// A null id would decode as "", and be reported as an unknown
	// node "" rather than as the null it is.
	infected := make([]string, len(*raw.Infected))
	for i, v := range *raw.Infected {
		if v == nil {
			return observationFile{}, fmt.Errorf(`%s: "infected"[%d] is null; want node ids as strings`, where, i)
		}
		infected[i] = *v
	}
	o := observationFile{Infected: infected, ID: id, where: where}
	if check != nil {
		// The ids first: an unknown id names its node, an empty list
		// has none to name.
		if err := check(&o); err != nil {
			return observationFile{}, err
		}
	}
	if len(*raw.Infected) == 0 {
		return observationFile{}, fmt.Errorf(`%s: "infected" is empty: no infected node, nothing to localize`, where)
	}
	return o, nil
}
