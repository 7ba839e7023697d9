package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go.uber.org/zap"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

func newPluginCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Work with forward-model plugins",
	}
	cmd.AddCommand(newPluginCheckCmd(a))
	return cmd
}

func newPluginCheckCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check PATH|NAME",
		Short: "Check a forward-model plugin against the plugin contract",
		Long: `check launches a forward-model plugin (a path, or a name looked up as
sourcewatch-forward-NAME in --plugin-dir; a bare name is a path only when a
file of that name is in the working directory) and checks it against the contract:
the handshake, Info (and that a second process reports the same name and
version, as a bundle needs), Configure (and that it refuses an unknown param, a
WARN: train and eval check a new fit's params against Info, but a bundle's
recorded params reach Configure unchecked), Fit on a
small simulated set (and that the
fitted state restores the same model), Predict shape and range, behaviour on
an empty and a full x, determinism, the VJP against finite differences
(every coordinate of dx in two random rows inside [0.1, 0.9] and four at
corners of [0, 1], x all 0 or 1, on graphs of up to 2,048 nodes, 256 at
random on larger ones; see --vjp-coords),
the fused data-term call of inference against Predict and VJP (and whether
its batches pass through the shared memory region), monotonicity on subsets
of source sets, and timing. It prints one line per
check and exits non-zero if any check fails. A WARN is legal behaviour that
inference will suffer from (a learned model that is not monotone).

Without --graph the checks run on a built-in 64-node graph (a ring lattice
with random chords); pass your graph to check the plugin where you will use it.`,
		Example: `  sourcewatch plugin check bin/sourcewatch-forward-deepis --graph configs/demo/karate.edges
  sourcewatch plugin check icmf --param steps=6 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.pluginCheck(cmd, args[0]) },
	}
	f := cmd.Flags()
	f.String("graph", "", "edge list file to check on (default: a built-in 64-node graph)")
	f.Bool("directed", false, "treat each line u v of --graph as an arc u->v")
	f.String("plugin-dir", defaultPluginDir(), "directory searched when the argument is a plugin name"+pluginDirHelp)
	f.StringArray("param", nil, "plugin parameter name=value (repeatable, or name=value,name=value; --forward-param, train's name, is taken too)")
	// train calls the same setting --forward-param; a user who
	// checks a plugin with the parameters of a train command line should
	// not meet a bare "unknown flag".
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "forward-param" {
			name = "param"
		}
		return pflag.NormalizedName(name)
	})
	f.Int("cascades", 60, "simulated SI cascades for the fit check (80% train, 20% validation)")
	f.Int("epochs", 5, "training epochs for the fit check (0 = the plugin's default)")
	f.Int("batch", 8, "rows per Predict and VJP call")
	f.Int("vjp-coords", 0, "coordinates of dx compared with finite differences per row (0 = all up to 2,048 nodes, else 256 at random; -1 = all)")
	f.Duration("call-timeout", 0, "deadline of every plugin call (0 = production's: 10s plus 1µs per row × (nodes + arcs))")
	f.Duration("fit-idle-timeout", 10*time.Minute, "longest wait for a Fit progress report (production's default)")
	f.String("sha256", "", "expected SHA-256 of the plugin binary (hex); refuse to launch on mismatch")
	f.Int64("seed", 1, "random seed of the simulated set and the test inputs")
	f.Bool("json", false, "print the report as JSON")
	return cmd
}

func (a *app) pluginCheck(cmd *cobra.Command, arg string) error {
	ctx := cmd.Context()
	v := a.v
	path := arg
	if !strings.ContainsRune(arg, os.PathSeparator) {
		// A bare name is a file here only if it is one: a directory of the
		// same name (a plugin's source tree, jsmf/ beside its build) is not
		// the plugin, which --plugin-dir then finds.
		if fi, err := os.Stat(arg); err != nil || fi.IsDir() {
			// The binary's name, as ls shows it, names the plugin too.
			name := strings.TrimPrefix(arg, forward.BinaryPrefix)
			var perr error
			if path, perr = forward.PluginPath(v.GetString("plugin_dir"), name); perr != nil {
				return perr
			}
		}
	}
	var (
		g   *graph.Graph
		err error
	)
	if v.GetString("graph") != "" {
		if g, err = loadGraph(v); err != nil {
			return err
		}
	} else {
		g = checkGraph(64, uint64(v.GetInt64("seed")))
	}
	batch := v.GetInt("batch")
	if batch < 1 {
		return fmt.Errorf("--batch: %d is not positive", batch)
	}
	if batch > localize.MaxRestarts {
		// Inference's batches are its restarts; the check's x and dy are
		// batch x nodes each, and --batch 100000000 died allocating 51 GB.
		return fmt.Errorf("--batch: %d, want at most %d (inference batches its restarts, at most %d)", batch, localize.MaxRestarts, localize.MaxRestarts)
	}
	count := v.GetInt("cascades")
	if count < 2 {
		return fmt.Errorf("--cascades: want at least 2, got %d", count)
	}
	if err := checkCallTimeout(v); err != nil {
		return err
	}
	timeout := v.GetDuration("call_timeout")
	idle := v.GetDuration("fit_idle_timeout")
	if idle <= 0 {
		return fmt.Errorf("--fit-idle-timeout: %v is not positive", idle)
	}
	launch := []forward.LaunchOption{forward.WithLogger(a.log.Named("plugin")), forward.WithFitIdleTimeout(idle)}
	if timeout > 0 {
		launch = append(launch, forward.WithCallTimeout(timeout))
	}
	if s := v.GetString("sha256"); s != "" {
		sum, err := hex.DecodeString(s)
		if err != nil || len(sum) != 32 {
			return fmt.Errorf("--sha256 %q: want 64 hex digits", s)
		}
		launch = append(launch, forward.WithChecksum(sum))
	}
	seed := v.GetInt64("seed")
	// The fit set only has to exercise the plugin: on a graph where the
	// default spread cannot reach 20-50% of the nodes (small components,
	// an in-star), it is observed at a lower fraction instead of failing
	// the check for want of flags it does not have.
	var cascades []diffusion.Cascade
	for _, observe := range []float64{0, 0.05, 1 / float64(g.N())} {
		sim := diffusion.DefaultConfig()
		if observe > 0 {
			sim.ObserveMin, sim.ObserveMax = observe, observe
		}
		if cascades, _, err = diffusion.Simulate(ctx, g, sim, count, seed); !errors.Is(err, diffusion.ErrUnreachable) {
			if err == nil && observe > 0 {
				a.log.Info("the default spread cannot reach 20-50% of this graph's nodes: the fit set is observed at a lower infected fraction",
					zap.Float64("observe", observe))
			}
			break
		}
	}
	if err != nil {
		return fmt.Errorf("simulating the fit set: %w", err)
	}
	pairs := toPairs(cascades)
	split := max(1, len(pairs)*4/5)
	params, err := stringMap(v, "param")
	if err != nil {
		return err
	}
	asJSON := v.GetBool("json")
	opts := forward.PluginCheckOptions{
		Launch:    launch,
		Params:    params,
		Fit:       forward.FitOptions{Epochs: v.GetInt("epochs"), Seed: seed, Validation: pairs[split:]},
		Batch:     batch,
		Seed:      uint64(seed),
		VJPCoords: v.GetInt("vjp_coords"),
	}
	// Each line is printed as its check ends, and the fit, which can take
	// minutes for a learned model on a large graph (and up to
	// --fit-idle-timeout between reports from a hung one), shows its
	// epochs: on a terminal as a bar, elsewhere as a line a minute.
	var fitBar *progress
	opts.OnResult = func(c forward.CheckResult) {
		if c.Name == "fit" {
			fitBar.Done()
		}
		if !asJSON {
			fmt.Fprintln(a.stdout, c.String())
		}
		if c.Name == "configure" && c.Status == forward.CheckPass {
			fitBar = a.progress("plugin check: fit", max(v.GetInt("epochs"), 0))
			fitBar.Set(0, fmt.Sprintf("waiting for the plugin's first report (at most --fit-idle-timeout %v)", idle))
		}
	}
	opts.OnFitProgress = func(p forward.Progress) {
		note := fmt.Sprintf("train loss %.4g", p.TrainLoss)
		if !math.IsNaN(p.ValLoss) {
			note += fmt.Sprintf(" val loss %.4g", p.ValLoss)
		}
		fitBar.SetTotal(p.Epochs)
		fitBar.Set(p.Epoch, note)
	}
	if !asJSON {
		fmt.Fprintf(a.stdout, "graph: %s\nplugin %s\n", g, path)
	}
	rep := forward.CheckPlugin(ctx, path, g, pairs[:split], opts)
	fitBar.Done() // a fit that never reported its end
	if asJSON {
		if err := writeCheckJSON(a, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(a.stdout, rep.Verdict())
		printParams(a.stdout, rep.Info)
	}
	if !rep.Passed() {
		// The first failure in full; the rest by name, since one fault
		// (a panic in Predict) fails most checks with the same long text,
		// each printed in the report above.
		var first string
		var also []string
		for _, c := range rep.Results {
			if c.Status != forward.CheckFail {
				continue
			}
			if first == "" {
				first = c.Name + ": " + c.Detail
			} else {
				also = append(also, c.Name)
			}
		}
		if len(also) > 0 {
			first += "; also failed (see above): " + strings.Join(also, ", ")
		}
		return fmt.Errorf("plugin check %s failed: %s", path, first)
	}
	return nil
}

// printParams lists the parameters a plugin says it takes, which no other
// command shows: what train's --forward-param and check's --param set.
func printParams(w io.Writer, in forward.Info) {
	if len(in.Params) == 0 {
		return
	}
	fmt.Fprintf(w, "params of %s %s (train --forward-param name=value, plugin check --param):\n", in.Name, in.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range in.Params {
		fmt.Fprintf(tw, "  %s\tdefault %s\t%s\n", p.Name, p.Default, p.Help)
	}
	_ = tw.Flush()
}

func writeCheckJSON(a *app, rep forward.CheckReport) error {
	type line struct {
		Name       string  `json:"name"`
		Status     string  `json:"status"`
		Detail     string  `json:"detail"`
		DurationMS float64 `json:"duration_ms"`
	}
	out := struct {
		Path    string       `json:"path"`
		Info    forward.Info `json:"info"`
		Passed  bool         `json:"passed"`
		Results []line       `json:"results"`
	}{Path: rep.Path, Info: rep.Info, Passed: rep.Passed()}
	for _, c := range rep.Results {
		out.Results = append(out.Results, line{c.Name, string(c.Status), c.Detail, float64(c.Duration) / float64(time.Millisecond)})
	}
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// checkGraph is a ring lattice (each node tied to its two neighbours on
// either side) with n/4 random chords: connected, small-world enough for
// spreads to reach most of it, and cheap for any plugin.
func checkGraph(n int, seed uint64) *graph.Graph {
	rng := rand.New(rand.NewPCG(seed, 64))
	var edges []graph.Edge
	for u := 0; u < n; u++ {
		edges = append(edges, graph.Edge{From: u, To: (u + 1) % n}, graph.Edge{From: u, To: (u + 2) % n})
	}
	for k := 0; k < n/4; k++ {
		edges = append(edges, graph.Edge{From: rng.IntN(n), To: rng.IntN(n)})
	}
	return graph.New(n, edges, nil, false, false)
}
