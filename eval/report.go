package eval

import (
	"encoding/json"
	"fmt"
	"gonum.org/v1/gonum/stat/distuv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/localize"
)

// Report is a benchmark's outcome. Its JSON form (snake_case, stable) is
// what `sourcewatch eval --json` writes.
type Report struct {
	// Graph names the graph (its file), Nodes and Edges size it (Edges
	// counts arcs where Directed) and Fingerprint identifies its content.
	Graph       string   `json:"graph"`
	Nodes       int      `json:"nodes"`
	Edges       int      `json:"edges"`
	Directed    bool     `json:"directed,omitempty"`
	Fingerprint string   `json:"fingerprint"`
	Diffusion   string   `json:"diffusion"`
	Settings    Settings `json:"settings"`
	Results     []Result `json:"results"`
	// ForwardFloorMSE, when a method with a forward model ran, is the
	// smallest test error per node any forward model can reach on these
	// cascades (diffusion.ForwardFloor over up to FloorSourceSets test
	// source sets, FloorDraws observations each, mean over runs): set
	// beside a forward model's forward_test_mse it says how much a better
	// forward model could still gain. Nil when no such method ran; 0 is
	// a value (every observation is determined by its sources), the one
	// against which a forward model's error says the most.
	ForwardFloorMSE *float64 `json:"forward_floor_mse,omitempty"`
	// ForwardFloorAtCountMSE is the same floor with each source set
	// observed at its test cascade's infected count instead of at a drawn
	// target (diffusion.ObservedCounts): the least error of a forward
	// model that is also told when the snapshot was taken. Its gap to
	// ForwardFloorMSE is the part of the floor that the observation time
	// accounts for. Nil exactly when ForwardFloorMSE is.
	ForwardFloorAtCountMSE *float64 `json:"forward_floor_at_count_mse,omitempty"`
	// Partial is set when the evaluation was interrupted (Run returned
	// ErrInterrupted): Settings.Runs then counts the runs the report
	// holds, and Results the methods that finished all of them.
	Partial *Partial `json:"partial,omitempty"`
	// Failed lists the methods that failed (Run returned
	// ErrMethodFailed), left out of Results.
	Failed []FailedMethod `json:"failed,omitempty"`
	// Notes say what the rows mean where a reader could misread them
	// (see Note); absent when there is nothing to say, so a reader of
	// an older report finds it as it was.
	Notes []Note `json:"notes,omitempty"`
}

// FailedMethod is a method that failed, the first run it failed in, and
// why. It was not run again.
type FailedMethod struct {
	Method string `json:"method"`
	Run    int    `json:"run"`
	Error  string `json:"error"`
	err    error
}

// Settings records how the benchmark was run.
type Settings struct {
	Cascades int   `json:"cascades"`
	Runs     int   `json:"runs"`
	Seed     int64 `json:"seed"`
	// Train, Validation and Test are the per-run split sizes.
	Train      int `json:"train"`
	Validation int `json:"validation"`
	Test       int `json:"test"`
	// Recorded names the recorded cascades the runs split instead of
	// simulating (Config.RecordedFrom); the simulation's settings below
	// are then empty.
	Recorded string `json:"recorded,omitempty"`
	Sources  string `json:"sources,omitempty"`
	Pattern  string `json:"pattern,omitempty"`
	// Beta, Gamma, P and Threshold are the simulation's parameters that
	// its diffusion model reads (nil the others: SI reads beta, SIR beta
	// and gamma, IC p, unless a weighted graph's weights replace it, LT
	// threshold); Threshold is LT's node threshold, negative for
	// theta_v ~ U[0,1] per node.
	Beta      *float64 `json:"beta,omitempty"`
	Gamma     *float64 `json:"gamma,omitempty"`
	P         *float64 `json:"p,omitempty"`
	Threshold *float64 `json:"threshold,omitempty"`
	// Observe is left out for recorded cascades, which no target chose:
	// [0, 0] would read as snapshots taken before anything spread.
	Observe [2]float64        `json:"observe,omitzero"`
	Methods []string          `json:"methods"`
	Params  map[string]string `json:"params,omitempty"`
	// DistinctTest, for recorded cascades, counts the distinct test
	// cascades over all runs (each run splits the same file anew, and
	// a file can hold copies): the unit of the paired intervals.
	DistinctTest int `json:"distinct_test,omitempty"`
	// Repeats, for recorded cascades, counts those that repeat an
	// earlier one's sources and infected nodes (diffusion.Repeats).
	Repeats int `json:"repeats,omitempty"`
	// PluginDir is where methods with a forward model found their
	// plugin unless Params gave one its own plugin_dir ("": bin).
	PluginDir string `json:"plugin_dir,omitempty"`
	// Redrawn counts simulated draws discarded because they died out
	// below their observation target.
	Redrawn int `json:"redrawn"`
	// ObservedInfected is the infected fraction the test snapshots held
	// (over all runs). A snapshot is the first step at or above its drawn
	// target, and one step overshoots where it infects many nodes (a
	// dense graph), so this can sit well above Observe.
	ObservedInfected Stat `json:"observed_infected"`
}

// Result is one method's row: each metric over all test cascades of all
// runs, the localize time per cascade and the fit time per run.
type Result struct {
	Method            string `json:"method"`
	Control           bool   `json:"control"`
	Precision         Stat   `json:"precision"`
	Recall            Stat   `json:"recall"`
	F1                Stat   `json:"f1"`
	AUC               Stat   `json:"auc"`
	TopK              Stat   `json:"topk"`
	ErrorDistance     Stat   `json:"error_distance"`
	SecondsPerCascade Stat   `json:"seconds_per_cascade"`
	FitSeconds        Stat   `json:"fit_seconds"`
	// EmptyPredictions counts test cascades where the method named no
	// source (scored with precision 0 and the error-distance penalty).
	EmptyPredictions int `json:"empty_predictions"`
	// Extra holds a method's own numbers (Extraser), averaged over runs.
	Extra map[string]float64 `json:"extra,omitempty"`
	// Paired compares a method with the reference method (Config.PairedWith,
	// by default the infected control) on the same test cascades; absent
	// for the controls, for the reference itself, and when the reference
	// did not run.
	Paired *Paired `json:"paired,omitempty"`
}

// Paired is a method's lead over a reference method, cascade by cascade
// on the same test cascades: the mean difference and its 95% confidence
// interval, which say whether a lead of 0.05 is a lead or noise.
type Paired struct {
	Reference string     `json:"reference"`
	F1        Difference `json:"f1"`
	AUC       Difference `json:"auc"`
}

// Difference is the mean over n paired cascades of method minus reference,
// with the half-width of its 95% confidence interval, t·sd/√n, t the
// 0.975 quantile of Student's t with n - 1 degrees of freedom (NaN for
// n < 2: one cascade gives no interval). Cascades where either value is
// undefined are left out. Recorded cascades count once each however many
// runs tested them (their differences averaged), so n is then the
// distinct cascades.
//
// ByRun is the mean difference within each run (with two runs or more):
// the interval is over the test cascades drawn, given each run's fitted
// models, and leaves out how much a new draw of training data and a new
// fit move the lead, which the runs' spread shows.
type Difference struct {
	Mean  float64   `json:"mean"`
	CI95  float64   `json:"ci95"`
	N     int       `json:"n"`
	ByRun []float64 `json:"by_run,omitempty"`
}

// String is "+0.057 ± 0.012", "+0.057 (one cascade, no interval)", or
// "undefined" where no cascade defined the difference (AUC on a graph of
// one node).
func (d Difference) String() string {
	switch {
	case d.N == 0 || math.IsNaN(d.Mean):
		return "undefined"
	case math.IsNaN(d.CI95):
		return fmt.Sprintf("%+.3f (one cascade, no interval)", d.Mean)
	}
	return fmt.Sprintf("%+.3f ± %.3f", d.Mean, d.CI95)
}

// pairedDifference summarises a[i] - b[i] over the i where both are
// defined, the differences of one unit (units[i]; nil: each i its own)
// first averaged into one.
func pairedDifference(a, b []float64, units []string) Difference {
	var (
		sum   = map[string]float64{}
		count = map[string]int{}
		order []string
	)
	for i := range a {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			continue
		}
		unit := strconv.Itoa(i)
		if i < len(units) {
			unit = units[i]
		}
		if count[unit] == 0 {
			order = append(order, unit)
		}
		sum[unit] += a[i] - b[i]
		count[unit]++
	}
	d := make([]float64, len(order))
	for k, unit := range order {
		d[k] = sum[unit] / float64(count[unit])
	}
	st := Summarize(d)
	switch st.N {
	case 0:
		return Difference{Mean: math.NaN(), CI95: math.NaN()}
	case 1:
		return Difference{Mean: st.Mean, CI95: math.NaN(), N: 1}
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(st.N - 1)}.Quantile(0.975)
	return Difference{Mean: st.Mean, CI95: t * st.SD / math.Sqrt(float64(st.N)), N: st.N}
}

// MarshalJSON writes an undefined mean or interval as null.
func (d Difference) MarshalJSON() ([]byte, error) {
	var byRun []any
	for _, v := range d.ByRun {
		byRun = append(byRun, jsonNumber(v))
	}
	return json.Marshal(struct {
		Mean  any   `json:"mean"`
		CI95  any   `json:"ci95"`
		N     int   `json:"n"`
		ByRun []any `json:"by_run,omitempty"`
	}{jsonNumber(d.Mean), jsonNumber(d.CI95), d.N, byRun})
}

// UnmarshalJSON reads null back as NaN.
func (d *Difference) UnmarshalJSON(b []byte) error {
	var raw struct {
		Mean, CI95 *float64
		N          int
		ByRun      []*float64 `json:"by_run"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*d = Difference{Mean: orNaN(raw.Mean), CI95: orNaN(raw.CI95), N: raw.N}
	for _, v := range raw.ByRun {
		d.ByRun = append(d.ByRun, orNaN(v))
	}
	return nil
}

// MarshalJSON writes an undefined (NaN) mean or sd as null, which
// encoding/json cannot do for a float64.
func (s Stat) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Mean      any `json:"mean"`
		SD        any `json:"sd"`
		N         int `json:"n"`
		Undefined int `json:"undefined,omitempty"`
	}{jsonNumber(s.Mean), jsonNumber(s.SD), s.N, s.Undefined})
}

// UnmarshalJSON reads null back as NaN.
func (s *Stat) UnmarshalJSON(b []byte) error {
	var raw struct {
		Mean, SD  *float64
		N         int
		Undefined int
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Stat{Mean: orNaN(raw.Mean), SD: orNaN(raw.SD), N: raw.N, Undefined: raw.Undefined}
	return nil
}

// jsonNumber is v for encoding/json, or nil (null) for NaN and ±Inf, which
// it cannot write.
func jsonNumber(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

// orNaN is *p, or NaN for a JSON null.
func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Partial describes an interrupted evaluation's report.
type Partial struct {
	// RunsPlanned is the number of runs asked for.
	RunsPlanned int `json:"runs_planned"`
	// LeftOut are the methods that had not finished every run the
	// report holds, in the order asked for.
	LeftOut []string `json:"left_out,omitempty"`
}

// WriteTable writes the report as an aligned text table, one row per
// method, each cell "mean ± sd" over test cascades (fit time: over runs);
// controls are marked with "*". "empty" counts test cascades where the
// method named no source.
// An interrupted report says so under its heading. The notes (see Note)
// follow the paired comparisons.
func (r *Report) WriteTable(w io.Writer) error {
	s := r.Settings
	name := r.Graph
	if name == "" {
		name = "graph"
	}
	var b strings.Builder
	edges := "edges"
	if r.Directed {
		edges = "arcs (directed)"
	}
	held := ""
	if s.ObservedInfected.N > 0 {
		held = fmt.Sprintf(" (test snapshots held %.3f ± %.3f)", s.ObservedInfected.Mean, s.ObservedInfected.SD)
	}
	if s.Recorded != "" {
		fmt.Fprintf(&b, "%s: %d nodes, %d %s; cascades recorded in %s%s\n", name, r.Nodes, r.Edges, edges, s.Recorded, held)
	} else {
		var params []string
		for _, p := range []struct {
			name string
			v    *float64
		}{{"beta", s.Beta}, {"gamma", s.Gamma}, {"p", s.P}, {"threshold", s.Threshold}} {
			if p.v != nil {
				params = append(params, fmt.Sprintf("%s %g", p.name, *p.v))
			}
		}
		model := r.Diffusion
		if len(params) > 0 {
			model += " (" + strings.Join(params, ", ") + ")"
		}
		fmt.Fprintf(&b, "%s: %d nodes, %d %s; %s, sources %s (%s), observed at %g-%g infected%s\n",
			name, r.Nodes, r.Edges, edges, model, s.Sources, s.Pattern, s.Observe[0], s.Observe[1], held)
	}
	runs := "runs"
	if s.Runs == 1 {
		runs = "run"
	}
	distinct := ""
	if s.DistinctTest > 0 && s.DistinctTest < s.Runs*s.Test {
		distinct = fmt.Sprintf(", %d of them distinct (recorded cascades: a run can test one another run tested, and a file can hold copies; the paired intervals count each once)", s.DistinctTest)
	}
	fmt.Fprintf(&b, "%d %s x %d cascades (train %d / validation %d / test %d), seed %d; mean ± sd over %s%s\n",
		s.Runs, runs, s.Cascades, s.Train, s.Validation, s.Test, s.Seed, testCascades(s.Runs*s.Test), distinct)
	if s.Repeats > 0 {
		fmt.Fprintf(&b, "WARNING: %d of the %d recorded cascades repeat an earlier one's sources and infected nodes: a copy in the training split and one in the test split flatter every method's numbers (the paired intervals count each once); drop the copies unless the history really repeats (small outbreaks on a small graph can, by chance)\n",
			s.Repeats, s.Cascades)
	}
	if s.Test < 10 {
		fmt.Fprintf(&b, "WARNING: %s per run: too few for the numbers below to say much, or for an interval at all with one\n", testCascades(s.Test))
	}
	if p := r.Partial; p != nil {
		if len(p.LeftOut) > 0 {
			// Run keeps a cut-short run only when it is the first.
			fmt.Fprintf(&b, "INTERRUPTED in run 1 of %d: the methods that finished it; left out, unfinished: %s\n",
				p.RunsPlanned, strings.Join(p.LeftOut, ", "))
		} else {
			every := "every method"
			if len(r.Failed) > 0 {
				every += " that had not failed"
			}
			fmt.Fprintf(&b, "INTERRUPTED: the first %d of %d runs, %s\n", s.Runs, p.RunsPlanned, every)
		}
	}
	for _, f := range r.Failed {
		// The error names the method (methodError).
		fmt.Fprintf(&b, "FAILED in run %d, left out: %s\n", f.Run, f.Error)
	}
	b.WriteString("\n")
	// Padded by terminal columns, not runes as text/tabwriter pads: a
	// method named by a plugin in Chinese or Japanese (slvae[模型]) keeps
	// the columns after it in line. Of ASCII text the table is what
	// tabwriter wrote.
	rows := [][]string{{"method", "precision", "recall", "F1", "AUC", "top-k", "error dist", "ms/cascade", "fit s/run", "empty"}}
	controls := false
	ran := map[string]bool{}
	for _, res := range r.Results {
		label := res.Method
		ran[res.Method] = true
		if res.Control {
			label += " *"
			controls = true
		}
		ms := Stat{Mean: res.SecondsPerCascade.Mean * 1e3, SD: res.SecondsPerCascade.SD * 1e3, N: res.SecondsPerCascade.N}
		rows = append(rows, []string{label,
			cell(res.Precision, 3), cell(res.Recall, 3), cell(res.F1, 3), cell(res.AUC, 3),
			cell(res.TopK, 3), cell(res.ErrorDistance, 2), cell(ms, 2), cell(res.FitSeconds, 2), strconv.Itoa(res.EmptyPredictions)})
	}
	if err := alerts.WriteRightAligned(&b, "  ", rows); err != nil {
		return err
	}
	if controls {
		b.WriteString("\n* control: a reference point, not a localizer; a method localizes only where it beats infected and prior")
		var missing []string
		for _, c := range []string{"infected", "prior"} {
			if !ran[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(&b, " (not run here: %s)", strings.Join(missing, ", "))
		}
		b.WriteString(".\n")
	}
	for _, res := range r.Results {
		// Under SIR the infected control can rank below chance, so a
		// method beating it can still be guessing.
		if !res.Control && res.AUC.N > 0 && res.AUC.Mean < localize.ChanceAUC {
			fmt.Fprintf(&b, "%s: ROC-AUC %.3f, about chance (a random ranking scores 0.5): it does not localize here, whatever it beats\n", res.Method, res.AUC.Mean)
		}
	}
	for _, res := range r.Results {
		if v := res.Paired; v != nil {
			over := testCascades(v.F1.N)
			if v.AUC.N != v.F1.N {
				over += fmt.Sprintf(", %d for AUC", v.AUC.N)
			}
			verdict := ""
			// Below 0.0005 the difference rounds to -0.000 in the line:
			// a tie on a graph where both rank alike (a star of 20,000
			// nodes: -2.5e-5 ± 3e-17), not a method ranking worse.
			if v.AUC.Mean+v.AUC.CI95 < 0 && v.AUC.Mean <= -0.0005 {
				// Said in words: a reader scanning the table for a winner
				// should not miss a method ranking worse than its reference.
				verdict = fmt.Sprintf("; ranks worse than %s here", v.Reference)
			}
			if len(v.AUC.ByRun) > 1 {
				// The interval holds each run's fit fixed; the runs show
				// what a new draw and fit move.
				over += "; AUC by run"
				for _, d := range v.AUC.ByRun {
					over += fmt.Sprintf(" %+.3f", d)
				}
			}
			fmt.Fprintf(&b, "%s - %s: F1 %s, AUC %s (95%% CI, paired over %s)%s\n",
				res.Method, v.Reference, v.F1.String(), v.AUC.String(), over, verdict)
		}
	}
	for _, n := range r.notes() {
		b.WriteString(n.Text + "\n")
	}
	for _, res := range r.Results {
		if res.AUC.Undefined > 0 {
			fmt.Fprintf(&b, "%s: AUC undefined on %d cascades (all or no nodes are sources), left out.\n", res.Method, res.AUC.Undefined)
		}
		for _, k := range sortedKeys(res.Extra) {
			fmt.Fprintf(&b, "%s: %s = %.4g\n", res.Method, k, res.Extra[k])
		}
	}
	if r.ForwardFloorMSE != nil {
		fmt.Fprintf(&b, "forward_floor_mse = %.4g: the variance of y given the sources, the least forward_test_mse any forward model can reach here (%d draws from each of up to %d test source sets per run)\n",
			*r.ForwardFloorMSE, FloorDraws, FloorSourceSets)
	}
	if r.ForwardFloorAtCountMSE != nil {
		gap := "its gap below forward_floor_mse estimates what not knowing the observation time costs"
		if r.ForwardFloorMSE != nil && *r.ForwardFloorAtCountMSE >= *r.ForwardFloorMSE {
			// Overshooting steps (large on a fast spread) can leave the
			// proxy above the plain floor: then it estimates nothing.
			gap = "here it is not below forward_floor_mse, so the proxy's overshoot hides what knowing the count would gain"
		}
		fmt.Fprintf(&b, "forward_floor_at_count_mse = %.4g: the same floor with each test source set observed at the first step with at least its cascade's infected count, a proxy for a forward model also told the count (a step can overshoot it, so this is not the exact-count floor); %s\n",
			*r.ForwardFloorAtCountMSE, gap)
	}
	for _, res := range r.Results {
		if e, ok := res.Extra[localize.VJPCheckMetric]; ok && e > 1 {
			fmt.Fprintf(&b, "%s: the forward model's VJP disagrees with finite differences of its own Predict (%.3g times the tolerance, mean over runs): the descent follows a wrong gradient, so these numbers are not SL-VAE's; run sourcewatch plugin check %s --plugin-dir %s\n",
				res.Method, e, r.pluginOf(res.Method), r.pluginDirOf(res.Method))
		} else if f, ok := res.Extra[localize.FusedCheckMetric]; ok && f > 1 {
			fmt.Fprintf(&b, "%s: the forward model's fused data-term call disagrees with its own Predict and VJP (%.3g times the tolerance, mean over runs): the descent follows a wrong gradient, so these numbers are not SL-VAE's; run sourcewatch plugin check %s --plugin-dir %s\n",
				res.Method, f, r.pluginOf(res.Method), r.pluginDirOf(res.Method))
		} else if res.Extra[localize.VJPFlatMetric] > 0 {
			fmt.Fprintf(&b, "%s: the forward model's gradient was 0 at every coordinate of train's spot check in at least one run (outputs saturated at 0 or 1?): the descent has nothing to follow there, so these numbers are not SL-VAE's; run sourcewatch plugin check %s --plugin-dir %s\n",
				res.Method, r.pluginOf(res.Method), r.pluginDirOf(res.Method))
		}
	}
	for _, res := range r.Results {
		if line, ok := chanceLine(res); ok {
			b.WriteString(line + "\n")
		}
	}
	if r.ForwardFloorMSE != nil && *r.ForwardFloorMSE > 0 {
		for _, res := range r.Results {
			mse, ok := res.Extra["forward_test_mse"]
			if !ok || !localize.PoorFit(mse, *r.ForwardFloorMSE) {
				continue
			}
			// The tables' settings fit within 0-13% of the floor (Power
			// Grid clusters aside); far above it, the descent has a wrong
			// map of the spread and SL-VAE's ranking can suffer with it.
			// The epochs are given to the method by its own name, or every
			// expansion would get them.
			try := localize.PoorFitAdvice(r.compareForwards(),
				"--method-param "+res.Method+".epochs=N",
				res.Extra["forward_epochs"], res.Extra["forward_best_epoch"])
			fmt.Fprintf(&b, "%s: forward_test_mse is %.0f%% above the floor: the forward model fits this graph poorly; %s\n",
				res.Method, 100*(mse / *r.ForwardFloorMSE - 1), try)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// chanceLine says, for a method run with chance=on, how its source chance
// fared on the test cascades against the restarts' agreement read as one,
// and for local-mlp how its probabilities fared read as chances.
func chanceLine(res Result) (string, bool) {
	brier, ok := res.Extra["chance_brier"]
	if !ok {
		return "", false
	}
	what, beside := "its probabilities read as a chance", ""
	if k, ok := res.Extra["chance_fresh_cascades"]; ok {
		what = fmt.Sprintf("each node's chance of being a source, fitted on %.0f fresh cascades", k)
	} else if k, ok := res.Extra["chance_validation_cascades"]; ok {
		what = fmt.Sprintf("each node's chance of being a source, fitted on the %.0f validation cascades (recorded cascades leave none fresh)", k)
	}
	if pb, ok := res.Extra["probability_brier"]; ok {
		beside = fmt.Sprintf(" (the restarts' agreement read as a chance: %.3f, %.3f)", pb, res.Extra["probability_ece"])
	}
	return fmt.Sprintf("%s: %s: Brier %.3f, ECE %.3f%s; %.1f sources expected a test cascade, %.1f true",
		res.Method, what, brier, res.Extra["chance_ece"], beside,
		res.Extra["chance_expected_sources"], res.Extra["true_sources"]), true
}

func cell(s Stat, prec int) string {
	if math.IsNaN(s.Mean) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f ± %.*f", prec, s.Mean, prec, s.SD)
}

// testCascades is "n test cascades", singular for one.
func testCascades(n int) string {
	if n == 1 {
		return "1 test cascade"
	}
	return fmt.Sprintf("%d test cascades", n)
}

// pluginOf is the forward plugin method (a row's name) ran: the one in
// its name's brackets, its forward param, or SL-VAE's default, deepis.
func (r *Report) pluginOf(method string) string {
	base, rest, bracketed := strings.Cut(method, "[")
	if bracketed {
		return strings.TrimSuffix(rest, "]")
	}
	if name, ok := r.Settings.Params[base+".forward"]; ok {
		return name
	}
	return DefaultForward
}

// compareForwards is how the poor-fit advice asks to compare forward
// models: by --forward, or, where this run already compares several, by
// their rows.
func (r *Report) compareForwards() string {
	var used []string
	for _, res := range r.Results {
		if _, ok := res.Extra["forward_test_mse"]; ok {
			if p := r.pluginOf(res.Method); !slices.Contains(used, p) {
				used = append(used, p)
			}
		}
	}
	if len(used) > 1 {
		return "as this run does, " + strings.Join(used, ", ") + ": their rows above"
	}
	return "--forward deepis,gat,monstor"
}

// pluginDirOf is the directory method (a row's name, "slvae[icmf]" for
// the method slvae given another plugin) found its forward plugin in.
func (r *Report) pluginDirOf(method string) string {
	// An expansion of --forward runs under its own name (slvae[icmf]);
	// a method given its plugin by a param, under the base name.
	base, _, _ := strings.Cut(method, "[")
	for _, name := range []string{method, base} {
		if dir, ok := r.Settings.Params[name+".plugin_dir"]; ok {
			return dir
		}
	}
	if r.Settings.PluginDir != "" {
		return r.Settings.PluginDir
	}
	return "bin"
}
