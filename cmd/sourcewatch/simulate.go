package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/monitor"
)

func newSimulateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate cascades on a graph and write them as JSON lines",
		Long: `simulate draws source sets, spreads them with SI, SIR, IC or LT, and writes one
JSON object per cascade, observed once when the infected fraction first reaches
a target drawn from --observe:

  {"sources":["3","17"],"infected":["3","5","17"],"times":{"3":0,"17":0,"5":2}}

times holds every node infected by the snapshot with its infection step; SIR
cascades also carry "recovered". Node ids are the graph file's own.`,
		Example: `  sourcewatch simulate --graph karate.edges --diffusion SI --beta 0.1 --cascades 100 --out cascades.jsonl
  sourcewatch simulate --graph grid.edges --diffusion SIR --beta 0.5 --gamma 0.01 --sources 1-5 --pattern cluster --out -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.simulate(cmd.Context()) },
	}
	addSimulationFlags(cmd)
	f := cmd.Flags()
	f.String("out", "-", `output file; "-" or empty writes to stdout (with --publish, "-" writes nothing)`)
	f.Bool("publish", false, "replay the cascades as live infection events on NATS (see --nats, --graph-name, --speed)")
	f.String("nats", nats.DefaultURL, "NATS server to publish to (with --publish)")
	f.String("graph-name", "", "graph name in the event subject <prefix>.events.<name> (default: the edge file's base name)")
	f.String("prefix", "sourcewatch", "subject prefix (with --publish)")
	f.Float64("speed", 1, "simulation steps per second of wall time (with --publish)")
	return cmd
}

func (a *app) simulate(ctx context.Context) error {
	if err := a.refuseInputAsOutput("--out", a.v.GetString("out")); err != nil {
		return err
	}
	g, err := loadGraph(a.v)
	if err != nil {
		return err
	}
	cfg, err := a.simulationConfig()
	if err != nil {
		return err
	}
	if err := sourcesFit(cfg.Sources, g); err != nil {
		return err
	}
	count, seed, workers, err := simulationRun(a.v)
	if err != nil {
		return err
	}
	if err := cfg.Validate(g); err != nil {
		return err
	}
	if a.v.GetBool("publish") {
		// Before the cascades are drawn (and --out written): a speed no
		// replay can run at is refused in a moment, not after them.
		if err := checkSpeed(a.v.GetFloat64("speed")); err != nil {
			return err
		}
		if err := checkReplaySpan(a.v.GetFloat64("speed"), cfg.MaxSteps); err != nil {
			return err
		}
	}
	a.warnUnusedSettings(g, cfg)

	start := time.Now()
	bar := a.progress("simulate", count)
	cs, rep, err := diffusion.Simulate(ctx, g, cfg, count, seed,
		diffusion.Workers(workers),
		diffusion.OnProgress(func(done, _ int) { bar.Set(done, "") }))
	bar.Done()
	if err != nil {
		return fmt.Errorf("simulate: %w", simulationError(err))
	}
	a.warnOvershoot(g, cfg, cs)
	a.warnRedrawn(cfg, rep.Redrawn, len(cs))
	if out := a.v.GetString("out"); !a.v.GetBool("publish") || (out != "-" && out != "") {
		if err := a.writeCascades(out, g, cs); err != nil {
			return err
		}
	}
	if err := a.publishSimulated(ctx, g, cs); err != nil {
		return err
	}

	var sources, infected float64
	for _, c := range cs {
		sources += float64(len(c.Sources))
		infected += float64(len(c.Infected)) / float64(g.N())
	}
	n := float64(len(cs))
	fmt.Fprintf(a.stderr, "simulate: %d %s cascades on %s (%d nodes), %d redrawn, mean %.1f sources, mean infected fraction %.3f, %s\n",
		rep.Cascades, cfg.Model, a.v.GetString("graph"), g.N(), rep.Redrawn, sources/n, infected/n,
		time.Since(start).Round(time.Microsecond))
	return nil
}

// writeCascades writes JSONL to path, or to stdout for "" and "-". A file is
// closed with its error checked, so a full disk is not reported as success.
func (a *app) writeCascades(path string, g *graph.Graph, cs []diffusion.Cascade) error {
	var w io.Writer = a.stdout
	var f *os.File
	if path != "" && path != "-" {
		var err error
		if f, err = os.Create(path); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		w = f
	}
	err := diffusion.WriteJSONL(w, g, cs)
	if f != nil {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	return nil
}

// publishSimulated replays the cascades onto NATS as live infection
// events when --publish is set: each cascade's infections (and SIR
// recoveries) are published on <prefix>.events.<graph-name> in time order,
// --speed simulation steps per second of wall time, stamped with the time
// they are published. Cascades follow one another.
func (a *app) publishSimulated(ctx context.Context, g *graph.Graph, cs []diffusion.Cascade) error {
	v := a.v
	if !v.GetBool("publish") {
		return nil
	}
	speed := v.GetFloat64("speed")
	if err := checkSpeed(speed); err != nil {
		return err
	}
	name := v.GetString("graph_name")
	if name == "" {
		base := filepath.Base(v.GetString("graph"))
		name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if strings.ContainsAny(name, ".*> \t") {
		return fmt.Errorf("--graph-name: %q is not a single NATS subject token", name)
	}
	if prefix := v.GetString("prefix"); alerts.CheckPrefix(prefix) != nil {
		return fmt.Errorf("--prefix: %q is not a subject prefix the daemon accepts (subjects.prefix: dot-separated tokens, none empty, without whitespace or a wildcard)", prefix)
	}
	url := v.GetString("nats")
	nc, err := nats.Connect(url, nats.Name("sourcewatch simulate"))
	if err != nil {
		return fmt.Errorf("--nats: connecting to %s: %w", monitor.RedactURLs(url), monitor.RedactError(err, url))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("--nats: %w", err)
	}
	if err := a.checkPublishTarget(ctx, nc, v.GetString("prefix"), name, g); err != nil {
		return err
	}
	subject := v.GetString("prefix") + ".events." + name
	step := time.Duration(float64(time.Second) / speed)
	for i, c := range cs {
		events := monitor.CascadeEvents(g, c, time.Now(), step)
		fmt.Fprintf(a.stderr, "publishing cascade %d/%d: %d sources, %d events on %s over ~%s\n",
			i+1, len(cs), len(c.Sources), len(events), subject, (time.Duration(c.Step) * step).Round(time.Second))
		if err := monitor.PublishEvents(ctx, js, subject, events, 1, nil); err != nil {
			return err
		}
	}
	return nil
}

// checkPublishTarget asks the daemon's status endpoint whether it serves
// graph name, with as many nodes as g, before events it would dead-letter
// (unknown_graph, unknown_node) are published: an error if it does not; a
// warning when the graph's fingerprint differs from g's (other ids, or
// other edges: the latter apply) or when no daemon answers (not started
// yet, or only standbys), and the events are published all the same.
func (a *app) checkPublishTarget(ctx context.Context, nc *nats.Conn, prefix, name string, g *graph.Graph) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	subject := prefix + ".svc.status"
	m, err := nc.RequestWithContext(ctx, subject, nil)
	if err == nil && m.Header.Get(micro.ErrorHeader) != "" {
		err = errors.New(m.Header.Get(micro.ErrorHeader))
	}
	var st monitor.Status
	if err == nil {
		err = json.Unmarshal(m.Data, &st)
	}
	if err != nil {
		a.log.Warn("no sourcewatch daemon answered its status request; publishing anyway (a graph it does not serve has its events dead-lettered)",
			zap.String("subject", subject), zap.Error(err))
		return nil
	}
	var names []string
	for _, gs := range st.Graphs {
		if gs.Name == name {
			if gs.Nodes != g.N() {
				return fmt.Errorf("--graph: the daemon's graph %q has %d nodes, %s %d: another edge list, whose ids the daemon lacks it would dead-letter as unknown_node",
					name, gs.Nodes, a.v.GetString("graph"), g.N())
			}
			if gs.Fingerprint != "" && gs.Fingerprint != g.Fingerprint() {
				// Other ids (dead-lettered), or the same ones with other
				// edges or read the other way (applied, but spread on
				// another graph than the daemon's): said, not refused.
				a.log.Warn("--graph differs from the daemon's graph of that name (other ids, other edges, or read the other way: --directed); events of ids the daemon lacks are dead-lettered as unknown_node",
					zap.String("graph", name), zap.String("daemon_fingerprint", gs.Fingerprint), zap.String("fingerprint", g.Fingerprint()))
			}
			return nil
		}
		names = append(names, gs.Name)
	}
	return fmt.Errorf("--graph-name: the daemon serves no graph %q (it serves %s): its events would be dead-lettered as unknown_graph; pass --graph-name with one of those", name, strings.Join(names, ", "))
}

// minSpeed is the slowest replay, one simulation step a day: a step of
// 1/speed seconds must fit a time.Duration (about 292 years), and a
// slower replay stamped its events in the past, where the daemon
// dead-letters them.
const minSpeed = 1.0 / 86400

// checkSpeed refuses a --speed no replay can run at: not positive, below
// one step a day, or infinite (every event of a cascade at one instant).
func checkSpeed(speed float64) error {
	if !(speed >= minSpeed) || math.IsInf(speed, 1) {
		return fmt.Errorf("--speed: want simulation steps per second from %.3g (one a day) up, finite, got %g", minSpeed, speed)
	}
	return nil
}

// checkReplaySpan refuses a replay whose longest cascade, maxSteps steps
// at speed steps a second, would stamp its last events past what a
// time.Duration holds (about 292 years: 106,751 steps at one a day): the
// step count times the step wrapped negative, and those events were
// stamped in the past, where the daemon dead-letters them.
func checkReplaySpan(speed float64, maxSteps int) error {
	if float64(maxSteps)/speed >= float64(math.MaxInt64)/float64(time.Second) {
		return fmt.Errorf("--speed %g with --max-steps %d: a cascade's replay could outrun a time.Duration (about 292 years, %d steps at this speed); raise --speed or lower --max-steps",
			speed, maxSteps, int64(speed*float64(math.MaxInt64)/float64(time.Second)))
	}
	return nil
}
