package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/monitor"
)

func newDemoCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the daemon and replay simulated cascades into it, printing the alerts",
		Long: `demo is what make run starts: the daemon of serve (same --config), plus a
replayer that simulates a cascade on the first configured graph, publishes it
as live infection events, prints the alerts the daemon raises beside the true
sources, waits for the window to clear and the incident to resolve, and starts
the next cascade. Ctrl-C stops everything cleanly.`,
		Example: `  sourcewatch demo --config configs/demo.yaml`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runDemo(cmd, a) },
	}
	f := cmd.Flags()
	f.String("diffusion", "SI", "diffusion model of the replayed cascades")
	d := diffusion.DefaultConfig()
	f.Float64("beta", 0.25, "SI/SIR infection probability per infected contact per step")
	f.Float64("gamma", d.Gamma, "SIR recovery probability per step")
	f.Float64("p", d.P, "IC activation probability per arc (a weighted graph's weights replace it)")
	f.Float64("lt-threshold", d.Threshold, "LT node threshold in [0,1]; negative draws U[0,1] per node per cascade")
	f.String("pattern", "cluster", "source pattern of the replayed cascades")
	f.String("sources", "1-3", "sources per replayed cascade: N or MIN-MAX")
	f.Float64("speed", 2, "simulation steps per second of wall time")
	f.Int64("seed", 0, "seed of the first cascade (0: from the clock)")
	f.Int("cascades", 0, "stop after this many cascades (0: until Ctrl-C)")
	return cmd
}

// demoAlertNote ends the note of every alert the demo publishes, so that
// a reader of the alert subjects can tell them from a deployment's.
const demoAlertNote = "demo: inferred from simulated events, not a real incident"

// demoSharedWarning is logged by a demo run on an external server.
const demoSharedWarning = "the demo publishes simulated events and their alerts (marked in note) on an external NATS server: where a deployment uses it, they mix with its own (one deployment per NATS account: the demo is refused while a daemon serves its prefix there, and it leaves the state of graphs it does not run alone); run the demo on its embedded server (no nats.url) or in an account of its own"

func runDemo(cmd *cobra.Command, a *app) error {
	ctx := cmd.Context()
	cfg, err := loadDaemonConfig(cmd, a.v)
	if err != nil {
		return err
	}
	if len(cfg.Graphs) == 0 {
		return fmt.Errorf("graphs: the demo needs at least one graph")
	}
	gc := cfg.Graphs[0]
	g, err := graph.Load(gc.Edges, graph.Directed(gc.Directed))
	if err != nil {
		return err
	}
	sim := diffusion.DefaultConfig()
	if sim.Model, err = diffusion.ParseModel(a.v.GetString("diffusion")); err != nil {
		return fmt.Errorf("--diffusion: %w", err)
	}
	sim.Beta = a.v.GetFloat64("beta")
	sim.Gamma, sim.P, sim.Threshold = a.v.GetFloat64("gamma"), a.v.GetFloat64("p"), a.v.GetFloat64("lt_threshold")
	if sim.Pattern, err = diffusion.ParsePattern(a.v.GetString("pattern")); err != nil {
		return fmt.Errorf("--pattern: %w", err)
	}
	if sim.Sources, err = parseSources(a.v.GetString("sources")); err != nil {
		return fmt.Errorf("--sources: %w", err)
	}
	if err := sourcesFit(sim.Sources, g); err != nil {
		return err
	}
	if err := sim.Validate(g); err != nil {
		return err
	}
	// Read once, before the daemon runs: a reload reads the config file
	// into the same viper, which is not safe for concurrent use. Checked
	// before the daemon starts too: a speed of 0 would stamp every event
	// centuries in the past, and the daemon would dead-letter them.
	speed, cascades, seed := a.v.GetFloat64("speed"), a.v.GetInt("cascades"), a.v.GetInt64("seed")
	if err := checkSpeed(speed); err != nil {
		return err
	}
	if cascades < 0 {
		return fmt.Errorf("--cascades: want a count >= 0 (0: until Ctrl-C), got %d", cascades)
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}

	opts := []monitor.Option{
		monitor.WithLogger(a.log),
		monitor.WithGraphs(map[string]*graph.Graph{gc.Name: g}),
		monitor.WithLocalizerFactory(monitor.BundleLocalizers(daemonPluginDir(cfg), a.log)),
		monitor.WithPreflight(monitor.BundlePreflight(daemonPluginDir(cfg))),
		monitor.WithCommit(commit),
		monitor.WithReload(configReloader(cmd, a)),
		monitor.WithAlertNote(demoAlertNote),
	}
	if cfg.NATS.URL != "" {
		// On a server a deployment uses, its simulated events and alerts
		// mix with the deployment's, with nothing to tell them apart: the
		// streams are one per NATS account, whatever the prefix. Said
		// before the start, and the deployment's graphs, which the demo's
		// config does not name, keep their incidents and state.
		a.log.Warn(demoSharedWarning, zap.String("nats", monitor.RedactURLs(cfg.NATS.URL)), zap.String("prefix", cfg.Subjects.Prefix))
		opts = append(opts, monitor.WithoutRetiringUnconfigured())
	}
	d, err := monitor.New(cfg, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	runErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr <- d.Run(ctx)
	}()
	// SIGHUP reloads, as under serve (whose daemon this is), rather than
	// ending the demo with no final snapshot.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				a.log.Info("SIGHUP: reloading")
				if err := d.Reload(ctx); err != nil {
					a.log.Error("keeping the running setup", zap.Error(err))
				}
			}
		}
	}()
	select {
	case <-d.Ready():
	case err := <-runErr:
		cancel()
		wg.Wait()
		return err
	}
	url := d.ClientURL()
	if url == "" {
		cancel()
		wg.Wait()
		return fmt.Errorf("nats.listen: the demo needs the embedded server to listen (not -1)")
	}
	copts := []nats.Option{nats.Name("sourcewatch demo")}
	if cfg.NATS.URL != "" { // an external server: the daemon's credentials
		auth, err := monitor.ClientAuth(cfg.NATS)
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		copts = append(copts, auth...)
	}
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("connecting to %s: %w%s", monitor.RedactURLs(url), monitor.RedactError(err, url),
			monitor.CredsValidityHint("nats.creds", cfg.NATS.Creds, err, time.Now()))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	prefix := cfg.Subjects.Prefix
	// The replayer and the alert printer write concurrently: each writes
	// whole messages through one lock.
	out := &lockedWriter{w: a.stdout}
	fmt.Fprintf(out, "sourcewatch demo: graph %q (%d nodes), NATS %s, alerts on %s.alerts.%s, dashboard on http://%s/\n",
		gc.Name, g.N(), monitor.RedactURLs(url), prefix, gc.Name, d.HTTPAddr())
	fmt.Fprintf(out, "watch from another terminal: bin/sourcewatch alerts tail --nats %s --graph %s\n\n", monitor.RedactURLs(url), gc.Name)

	resolved := make(chan struct{}, 1)
	earlierResolved := make(chan struct{}, 1)
	// The daemon's state is durable: an incident a previous, interrupted
	// demo left open is inferred again (the events replayed after its last
	// alert may change its sources) and resolves in this run. Its alerts
	// are noted, but must not let the replayer move on from its own
	// incident.
	earlier := map[string]bool{}
	for _, gs := range d.Status().Graphs {
		if gs.Name == gc.Name && gs.LastAlert != nil && gs.LastAlert.Status != alerts.Resolved {
			earlier[gs.LastAlert.Fingerprint] = true
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen := map[string]bool{}
		err := alerts.Tail(ctx, js, prefix, gc.Name, func(al alerts.Alert) error {
			if earlier[al.Fingerprint] || (al.Status == alerts.Resolved && !seen[al.Fingerprint]) {
				fmt.Fprintf(out, "(an incident left open by an earlier run %s: %s)\n\n", al.Status, al.ID)
				if al.Status == alerts.Resolved {
					select {
					case earlierResolved <- struct{}{}:
					default:
					}
				}
				return nil
			}
			seen[al.Fingerprint] = true
			var buf bytes.Buffer
			if err := alerts.Format(&buf, al); err != nil {
				return err
			}
			buf.WriteByte('\n')
			if _, err := out.Write(buf.Bytes()); err != nil {
				return err
			}
			if al.Status == alerts.Resolved {
				delete(seen, al.Fingerprint) // an incident resolves once; the map would grow for good
				select {
				case resolved <- struct{}{}:
				default:
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			a.log.Warn("demo: alert tail stopped", zap.Error(err))
		}
	}()

	step := time.Duration(float64(time.Second) / speed)
	replayErr := func() error {
		if err := awaitCleanSlate(ctx, out, d, gc, earlierResolved); err != nil {
			return err
		}
		for k := 1; cascades == 0 || k <= cascades; k++ {
			cs, _, err := diffusion.Simulate(ctx, g, sim, 1, seed+int64(k))
			if err != nil {
				return err
			}
			c := cs[0]
			events := monitor.CascadeEvents(g, c, time.Now(), step)
			fmt.Fprintf(out, "--- cascade %d: true sources %s; replaying %d events over %s\n\n",
				k, strings.Join(g.Names(c.Sources), ", "), len(events), (time.Duration(c.Step) * step).Round(100*time.Millisecond))
			if err := monitor.PublishEvents(ctx, js, prefix+".events."+gc.Name, events, 1, nil); err != nil {
				return err
			}
			fmt.Fprintf(out, "--- cascade %d fully replayed (true sources %s); the incident resolves when the %s window clears\n\n",
				k, strings.Join(g.Names(c.Sources), ", "), gc.Window)
			select {
			case <-resolved:
			case <-time.After(gc.Window + 10*gc.Interval):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}()
	cancel()
	wg.Wait()
	err = <-runErr
	if replayErr != nil && !errors.Is(replayErr, context.Canceled) {
		return replayErr
	}
	return err
}

// awaitCleanSlate waits, before the first cascade, until no incident the
// daemon restored from an earlier, interrupted demo is open: otherwise the
// new cascade would merge into it. That takes at most the window plus a few
// scheduler intervals. Once the daemon reports it resolved, it waits a
// little for printed, the alert printer's word that it has shown that
// resolution, so the old incident's last line comes before the first
// cascade's.
func awaitCleanSlate(ctx context.Context, out io.Writer, d *monitor.Daemon, gc monitor.GraphConfig, printed <-chan struct{}) error {
	var (
		infected  int
		replaying bool
	)
	open := func() bool {
		for _, g := range d.Status().Graphs {
			if g.Name == gc.Name && g.LastAlert != nil && g.LastAlert.Status != alerts.Resolved {
				infected, replaying = g.WindowInfected, g.Replaying
				return true
			}
		}
		return false
	}
	if !open() {
		return nil
	}
	// While events queued since the last snapshot (after a crash) are
	// still being applied, the window's count is not yet the incident's.
	if infected < gc.MinInfected && !replaying {
		// The window emptied while no demo ran: the next tick resolves it.
		fmt.Fprintf(out, "--- an incident left open by an earlier run has left the window since; resolving it first\n\n")
	} else {
		fmt.Fprintf(out, "--- an incident left open by an earlier run is still in the window; waiting for it to resolve (up to %s)\n\n", gc.Window)
	}
	deadline := time.After(gc.Window + 5*gc.Interval)
	tick := time.NewTicker(gc.Interval / 4)
	defer tick.Stop()
	for open() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return nil
		case <-tick.C:
		}
	}
	// The daemon's status changes before its alert reaches the printer.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-printed:
	case <-time.After(2*gc.Interval + time.Second):
	}
	return nil
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
