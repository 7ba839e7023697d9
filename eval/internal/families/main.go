// Command families measures sourcewatch on graphs unlike the four of the
// README's tables: it writes eleven synthetic graph families (Barabási-
// Albert with numeric, string and sparse ids, a tree, four components, a
// heavy-tailed core with leaves, a directed graph, a block model,
// Erdős-Rényi, a lattice) from fixed seeds, runs `sourcewatch eval` on
// each in one or two settings, and prints one row per run: SL-VAE's
// ROC-AUC and F1 beside the infected control, the learned baseline
// local-mlp and the best other method, and how far deepis's fit is from
// the floor. A run eval refuses is a row with its reason.
//
//	make build && go run ./eval/internal/families -json families.json
//
// It is a measurement, not a test: nothing was tuned on its graphs, and it
// takes about five minutes on two cores.
//
// With -ceiling it runs instead four graphs of 30-36 nodes under SI with
// uniform sources, small enough for the bayes control (the exact
// posterior of the simulation, the best ROC-AUC any method can expect),
// 3 x 300 cascades each, and prints how much of the most any method can
// lead the infected control by SL-VAE and local-mlp take:
//
//	make build && go run ./eval/internal/families -ceiling -json ceiling.json
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// A run is one eval of one family.
type run struct {
	family, diffusion, pattern string
	seed                       int
}

// runs are the sweep's settings: SI and SIR, uniform and clustered
// sources, seeds 2-10 (seed 1 and 101 are the README's).
var runs = []run{
	{"ba2", "SI", "uniform", 2},
	{"ba3", "SIR", "uniform", 3},
	{"ba2-string-ids", "SI", "uniform", 4},
	{"ba2-sparse-ids", "SIR", "cluster", 5},
	{"tree", "SI", "uniform", 6},
	{"tree", "SI", "cluster", 7},
	{"components4", "SI", "uniform", 8},
	{"components4", "SIR", "cluster", 9},
	{"heavy-tail-leaves", "SI", "uniform", 10},
	{"ba2-directed", "SI", "uniform", 2},
	{"sbm6", "SI", "uniform", 3},
	{"sbm6", "SIR", "cluster", 4},
	{"er6", "SI", "uniform", 5},
	{"er6", "SIR", "uniform", 6},
	{"grid30", "SI", "uniform", 7},
}

// ceilingRuns are the -ceiling settings: the small families, SI with
// uniform sources (what the bayes control sums), seeds 2-5.
var ceilingRuns = []run{
	{"ba2-30", "SI", "uniform", 2},
	{"tree-30", "SI", "uniform", 3},
	{"grid6", "SI", "uniform", 4},
	{"er4-30", "SI", "uniform", 5},
}

// row is what the table and the JSON report of one run.
type row struct {
	Family    string  `json:"family"`
	Nodes     int     `json:"nodes,omitempty"`
	Diffusion string  `json:"diffusion"`
	Pattern   string  `json:"pattern"`
	Seed      int     `json:"seed"`
	Seconds   float64 `json:"seconds"`
	Refused   string  `json:"refused,omitempty"`
	// SL-VAE's ROC-AUC and F1, the infected control's, and the paired
	// ROC-AUC difference with its 95% interval.
	SLVAEAUC    float64 `json:"slvae_auc,omitempty"`
	SLVAEF1     float64 `json:"slvae_f1,omitempty"`
	InfectedAUC float64 `json:"infected_auc,omitempty"`
	LeadAUC     float64 `json:"slvae_minus_infected_auc,omitempty"`
	LeadCI      float64 `json:"slvae_minus_infected_auc_ci95,omitempty"`
	LocalMLPAUC float64 `json:"local_mlp_auc,omitempty"`
	// BayesAUC is the bayes control's ROC-AUC (-ceiling runs), and
	// MLPLeadAUC local-mlp's paired lead over infected.
	BayesAUC   float64 `json:"bayes_auc,omitempty"`
	MLPLeadAUC float64 `json:"local_mlp_minus_infected_auc,omitempty"`
	// Best is the method, control or not, other than SL-VAE and
	// local-mlp, with the highest ROC-AUC; BestF1 the same by F1.
	Best      string  `json:"best_other"`
	BestAUC   float64 `json:"best_other_auc,omitempty"`
	BestF1    string  `json:"best_other_by_f1"`
	BestF1Val float64 `json:"best_other_f1,omitempty"`
	// FitOverFloor is deepis's test error over the simulation's floor,
	// minus 1 (0.05: 5% above the floor).
	FitOverFloor float64 `json:"deepis_over_floor,omitempty"`
}

func main() {
	out := flag.String("out", filepath.Join(os.TempDir(), "sourcewatch-families"), "directory for the graph files and eval reports")
	bin := flag.String("sourcewatch", "bin/sourcewatch", "sourcewatch binary")
	pluginDir := flag.String("plugin-dir", "bin", "forward plugin directory")
	cascades := flag.Int("cascades", 150, "cascades per run")
	only := flag.String("only", "", "run only the families whose name contains this")
	jsonOut := flag.String("json", "", "also write the rows as JSON to this file")
	table := flag.String("table", "", "print the table of an earlier run's JSON rows instead of running")
	ceiling := flag.Bool("ceiling", false, "run the small graphs with the bayes control instead (3 runs of -cascades, default 300 there)")
	flag.Parse()
	set := sweepSet{runs: runs, evalRuns: 1, methods: "all", cascades: *cascades}
	if *ceiling {
		set = sweepSet{runs: ceilingRuns, evalRuns: 3, methods: "all,bayes", cascades: *cascades}
		if !flagSet("cascades") {
			set.cascades = 300
		}
	}
	if *table != "" {
		if err := reprint(*table); err != nil {
			fmt.Fprintln(os.Stderr, "families:", err)
			os.Exit(1)
		}
		return
	}
	if err := sweep(*out, *bin, *pluginDir, *only, *jsonOut, set); err != nil {
		fmt.Fprintln(os.Stderr, "families:", err)
		os.Exit(1)
	}
}

// sweepSet is what one sweep runs: the settings and eval's --runs,
// --methods and --cascades.
type sweepSet struct {
	runs     []run
	evalRuns int
	methods  string
	cascades int
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func sweep(dir, bin, pluginDir, only, jsonOut string, set sweepSet) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	byName := map[string]family{}
	for i, f := range families {
		byName[f.name] = f
		if err := writeFamily(filepath.Join(dir, f.name+".edges"), f, uint64(i+1)); err != nil {
			return err
		}
	}
	progress := isTerminal(os.Stderr)
	var rows []row
	for i, r := range set.runs {
		if only != "" && !strings.Contains(r.family, only) {
			continue
		}
		f := byName[r.family]
		if progress {
			fmt.Fprintf(os.Stderr, "[%d/%d] %s %s %s seed %d ...", i+1, len(set.runs), r.family, r.diffusion, r.pattern, r.seed)
		}
		row, err := evalRun(dir, bin, pluginDir, f, r, set)
		if err != nil {
			return err
		}
		if progress {
			fmt.Fprintf(os.Stderr, " %.0f s\n", row.Seconds)
		}
		rows = append(rows, row)
	}
	printTable(os.Stdout, rows)
	if jsonOut == "" {
		return nil
	}
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonOut, append(data, '\n'), 0o644)
}

// reprint prints the table of the rows in a JSON file sweep wrote.
func reprint(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rows []row
	if err := json.Unmarshal(data, &rows); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	printTable(os.Stdout, rows)
	return nil
}

// writeFamily writes f's edge list, built from seed, to path.
func writeFamily(path string, f family, seed uint64) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(file)
	fmt.Fprintf(w, "# %s: %s (sourcewatch eval/internal/families, seed %d)\n", f.name, f.about, seed)
	for _, e := range f.build(rand.New(rand.NewPCG(seed, 0x5eed))) {
		fmt.Fprintf(w, "%s %s\n", e.u, e.v)
	}
	if err := w.Flush(); err != nil {
		file.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return file.Close()
}

// evalRun runs eval for r and reads its JSON report; a refusal is a row,
// not an error.
func evalRun(dir, bin, pluginDir string, f family, r run, set sweepSet) (row, error) {
	report := filepath.Join(dir, fmt.Sprintf("%s-%s-%s-%d.json", r.family, r.diffusion, r.pattern, r.seed))
	args := []string{"eval", "--graph", filepath.Join(dir, f.name+".edges"), "--diffusion", r.diffusion,
		"--pattern", r.pattern, "--cascades", fmt.Sprint(set.cascades), "--runs", fmt.Sprint(set.evalRuns), "--seed", fmt.Sprint(r.seed),
		"--methods", set.methods, "--plugin-dir", pluginDir, "--json", report, "--log-level", "error"}
	if f.directed {
		args = append(args, "--directed")
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	err := cmd.Run()
	out := row{Family: r.family, Diffusion: r.diffusion, Pattern: r.pattern, Seed: r.seed, Seconds: time.Since(start).Seconds()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		out.Refused = lines[len(lines)-1]
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("running %s: %w", bin, err)
	}
	return out, readReport(report, &out)
}

// evalReport is the part of eval's JSON report the table reads.
type evalReport struct {
	Nodes   int     `json:"nodes"`
	Floor   float64 `json:"forward_floor_mse"`
	Results []struct {
		Method string `json:"method"`
		F1     struct {
			Mean float64 `json:"mean"`
		} `json:"f1"`
		AUC struct {
			Mean float64 `json:"mean"`
		} `json:"auc"`
		Extra  map[string]float64 `json:"extra"`
		Paired *struct {
			AUC struct {
				Mean float64 `json:"mean"`
				CI95 float64 `json:"ci95"`
			} `json:"auc"`
		} `json:"paired"`
	} `json:"results"`
}

func readReport(path string, out *row) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep evalReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	out.Nodes = rep.Nodes
	for _, m := range rep.Results {
		switch m.Method {
		case "slvae":
			out.SLVAEAUC, out.SLVAEF1 = m.AUC.Mean, m.F1.Mean
			if m.Paired != nil {
				out.LeadAUC, out.LeadCI = m.Paired.AUC.Mean, m.Paired.AUC.CI95
			}
			if rep.Floor > 0 {
				out.FitOverFloor = m.Extra["forward_test_mse"]/rep.Floor - 1
			}
		case "local-mlp":
			out.LocalMLPAUC = m.AUC.Mean
			if m.Paired != nil {
				out.MLPLeadAUC = m.Paired.AUC.Mean
			}
		case "bayes":
			// a ceiling, not a rival: never the best other
			out.BayesAUC = m.AUC.Mean
		default:
			if m.Method == "infected" {
				out.InfectedAUC = m.AUC.Mean
			}
			if m.AUC.Mean > out.BestAUC {
				out.Best, out.BestAUC = m.Method, m.AUC.Mean
			}
			if m.F1.Mean > out.BestF1Val {
				out.BestF1, out.BestF1Val = m.Method, m.F1.Mean
			}
		}
	}
	if out.SLVAEAUC == 0 {
		return fmt.Errorf("%s: no slvae row", path)
	}
	return nil
}

func printTable(w io.Writer, rows []row) {
	if slices.ContainsFunc(rows, func(r row) bool { return r.BayesAUC > 0 }) {
		printCeiling(w, rows)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "family\tnodes\tsetting\tseed\tSL-VAE AUC\t- infected\tlocal-mlp AUC\tbest other AUC\tSL-VAE F1\tbest other F1\tdeepis over floor\tseconds")
	var refused []string
	for _, r := range rows {
		setting := r.Diffusion + " " + r.Pattern
		if r.Refused != "" {
			// below the table: a row of fewer cells would end
			// tabwriter's columns
			refused = append(refused, fmt.Sprintf("%s %s seed %d refused: %s", r.Family, setting, r.Seed, r.Refused))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.3f\t%+.3f ± %.3f\t%.3f\t%.3f %s\t%.3f\t%.3f %s\t%+.0f%%\t%.0f\n",
			r.Family, r.Nodes, setting, r.Seed, r.SLVAEAUC, r.LeadAUC, r.LeadCI, r.LocalMLPAUC,
			r.BestAUC, r.Best, r.SLVAEF1, r.BestF1Val, r.BestF1, math.Round(100*r.FitOverFloor)+0, r.Seconds)
	}
	tw.Flush()
	for _, r := range refused {
		fmt.Fprintln(w, r)
	}
	ok := slices.DeleteFunc(slices.Clone(rows), func(r row) bool { return r.Refused != "" })
	above, mlp := 0, 0
	for _, r := range ok {
		if r.LeadAUC > 0 {
			above++
		}
		if r.LocalMLPAUC > r.SLVAEAUC {
			mlp++
		}
	}
	fmt.Fprintf(w, "\n%d runs, %d refused; SL-VAE above infected on %d, local-mlp ranked better on %d\n",
		len(rows), len(rows)-len(ok), above, mlp)
}

// printCeiling prints the -ceiling rows: the bayes control's ROC-AUC,
// the most any method can lead infected by (bayes minus infected, on
// average), and the share of it SL-VAE's and local-mlp's paired leads
// take.
func printCeiling(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "family\tnodes\tsetting\tseed\tbayes AUC\tinfected AUC\tmost lead\tSL-VAE AUC\tSL-VAE lead\tshare\tlocal-mlp AUC\tlocal-mlp lead\tshare\tbest other AUC\tseconds")
	var refused []string
	for _, r := range rows {
		setting := r.Diffusion + " " + r.Pattern
		if r.Refused != "" || r.BayesAUC == 0 {
			why := r.Refused
			if why == "" {
				why = "no bayes row"
			}
			refused = append(refused, fmt.Sprintf("%s %s seed %d: %s", r.Family, setting, r.Seed, why))
			continue
		}
		most := r.BayesAUC - r.InfectedAUC
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.3f\t%.3f\t%+.3f\t%.3f\t%+.3f ± %.3f\t%.0f%%\t%.3f\t%+.3f\t%.0f%%\t%.3f %s\t%.0f\n",
			r.Family, r.Nodes, setting, r.Seed, r.BayesAUC, r.InfectedAUC, most, r.SLVAEAUC, r.LeadAUC, r.LeadCI,
			100*r.LeadAUC/most, r.LocalMLPAUC, r.MLPLeadAUC, 100*r.MLPLeadAUC/most, r.BestAUC, r.Best, r.Seconds)
	}
	tw.Flush()
	for _, r := range refused {
		fmt.Fprintln(w, r)
	}
}

// isTerminal reports whether f is a character device, so progress goes
// to a person and not to a log.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
