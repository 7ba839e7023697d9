package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// fakeClock advances 1 ms per reading, so timings are deterministic.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// nanMethod returns a NaN score: the harness must reject it.
type nanMethod struct{ n int }

var nanClosed, extrasClosed atomic.Int32

func (m *nanMethod) Close() error { nanClosed.Add(1); return nil }

func (m *nanMethod) Name() string { return "test-nan" }
func (m *nanMethod) Fit(_ context.Context, g *graph.Graph, _, _ []diffusion.Cascade) error {
	m.n = g.N()
	return nil
}
func (m *nanMethod) Localize(context.Context, []float64) (Prediction, error) {
	s := make([]float64, m.n)
	s[m.n-1] = math.NaN()
	return Prediction{Scores: s}, nil
}

// extrasMethod is the infected control plus an extra number per run.
type extrasMethod struct {
	infectedMethod
	env Env
}

func (m *extrasMethod) Close() error { extrasClosed.Add(1); return nil }

func (m *extrasMethod) Name() string { return "test-extras" }
func (m *extrasMethod) Fit(ctx context.Context, g *graph.Graph, tr, va []diffusion.Cascade) error {
	m.env.Progress("fitted")
	return m.infectedMethod.Fit(ctx, g, tr, va)
}
func (m *extrasMethod) Extras() map[string]float64 { return map[string]float64{"train_size": 3} }

func init() {
	Register("test-nan", func(Env) (Method, error) { return &nanMethod{}, nil })
	Register("test-extras", func(env Env) (Method, error) { return &extrasMethod{env: env}, nil })
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Cascades, cfg.Runs, cfg.Seed = 40, 2, 11
	cfg.Methods = append([]string(nil), builtin...)
	return cfg
}

func TestConfigValidate(t *testing.T) {
	g := randomGraph(50, 50, 1)
	require.NoError(t, testConfig().Validate(g))
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"runs", func(c *Config) { c.Runs = 0 }, "runs 0"},
		{"too many runs", func(c *Config) { c.Runs = 2_000_000_000 }, "runs 2000000000: want at most 10000"},
		{"paired with", func(c *Config) { c.PairedWith = "magic" }, `paired with "magic": not among the methods`},
		{"fractions", func(c *Config) { c.TrainFrac, c.ValFrac = 0.7, 0.3 }, "train fraction"},
		{"empty split", func(c *Config) { c.Cascades = 3 }, "cascades 3"},
		{"no methods", func(c *Config) { c.Methods = nil }, "methods: none"},
		{"unknown method", func(c *Config) { c.Methods = []string{"lpsi", "magic"} }, `unknown method "magic"`},
		{"duplicate", func(c *Config) { c.Methods = []string{"lpsi", "lpsi"} }, "twice"},
		{"param form", func(c *Config) { c.Params = map[string]string{"alpha": "1"} }, "want method.key=value"},
		{"param without key", func(c *Config) { c.Params = map[string]string{"lpsi.": "1"} }, "want method.key=value"},
		{"empty validation", func(c *Config) { c.Cascades, c.ValFrac = 10, 0.04 }, "cascades 10"},
		{"recorded count", func(c *Config) {
			c.Recorded = []diffusion.Cascade{{N: 50, Sources: []int{1}, Infected: []int{1}}}
		}, "cascades 40: 1 recorded cascades given"},
		{"param method", func(c *Config) { c.Methods = []string{"jordan"}; c.Params = map[string]string{"lpsi.alpha": "1"} }, "not being evaluated"},
		{"simulation", func(c *Config) { c.Sim.Beta = 2 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.edit(&cfg)
			err := cfg.Validate(g)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// the edges that are allowed: MaxRuns runs, one cascade in each part
	// (by hand: round(0.34·3) = round(0.33·3) = 1, leaving 1)
	for _, edit := range []func(*Config){
		func(c *Config) { c.Runs = MaxRuns },
		func(c *Config) { c.Cascades, c.TrainFrac, c.ValFrac = 3, 0.34, 0.33 },
	} {
		cfg := testConfig()
		edit(&cfg)
		require.NoError(t, cfg.Validate(g))
	}
}

func TestRun(t *testing.T) {
	g := randomGraph(80, 100, 2)
	cfg := testConfig()
	cfg.Methods = append(cfg.Methods, "test-extras")
	cfg.Params = map[string]string{"ojc.max_k": "10"}
	var stages []string
	var last = map[string][2]int{}
	run := func(workers int) *Report {
		cfg.Workers = workers
		clk := &fakeClock{}
		rep, err := Run(context.Background(), g, cfg, WithClock(clk.now), WithGraphName("rand.edges"),
			OnProgress(func(stage string, done, total int) {
				stages = append(stages, stage)
				require.LessOrEqual(t, done, total)
				last[stage] = [2]int{done, total}
			}))
		require.NoError(t, err)
		return rep
	}
	closed := extrasClosed.Load()
	rep := run(1)
	// once per run, and once after Validate built it to check its params
	require.Equal(t, closed+3, extrasClosed.Load(), "closed once per method built")
	require.Contains(t, stages, "test-extras: fitted")
	require.Equal(t, [2]int{80, 80}, last["simulate"])
	require.Equal(t, [2]int{18, 18}, last["methods"])
	require.Equal(t, "rand.edges", rep.Graph)
	require.Equal(t, 80, rep.Nodes)
	require.Equal(t, Settings{Cascades: 40, Runs: 2, Seed: 11, Train: 24, Validation: 8, Test: 8,
		Sources: "ratio 0.1", Pattern: "uniform", Beta: ptr(0.1), // SI reads beta alone
		Observe: [2]float64{0.2, 0.5}, ObservedInfected: rep.Settings.ObservedInfected,
		Methods: cfg.Methods, Params: cfg.Params, Redrawn: rep.Settings.Redrawn}, rep.Settings)
	// Every test snapshot is at or above its target of at least 20%.
	require.Equal(t, 16, rep.Settings.ObservedInfected.N)
	require.GreaterOrEqual(t, rep.Settings.ObservedInfected.Mean, 0.2)
	require.LessOrEqual(t, rep.Settings.ObservedInfected.Mean, 1.0)
	require.Positive(t, rep.Settings.ObservedInfected.SD)
	require.Len(t, rep.Results, len(cfg.Methods))
	byName := map[string]Result{}
	for i, res := range rep.Results {
		require.Equal(t, cfg.Methods[i], res.Method)
		require.Equal(t, 16, res.F1.N, res.Method)
		require.Equal(t, 2, res.FitSeconds.N)
		// the fake clock reads twice per localize: 1 ms apart
		require.InDelta(t, 1e-3, res.SecondsPerCascade.Mean, 1e-12)
		byName[res.Method] = res
	}
	require.True(t, byName["random"].Control)
	require.False(t, byName["lpsi"].Control)
	require.Equal(t, map[string]float64{"train_size": 3}, byName["test-extras"].Extra)
	// infected predicts every infected node: recall 1 under SI
	require.InDelta(t, 1, byName["infected"].Recall.Mean, 1e-12)
	require.Zero(t, byName["infected"].EmptyPredictions)
	// the observation alone separates sources from the uninfected
	require.Greater(t, byName["infected"].AUC.Mean, 0.7)
	require.InDelta(t, 0.5, byName["random"].AUC.Mean, 0.12)

	// results do not depend on the number of workers (timings do: the
	// methods share the clock)
	untimed := func(r *Report) *Report {
		c := *r
		c.Results = append([]Result(nil), r.Results...)
		for i := range c.Results {
			c.Results[i].FitSeconds, c.Results[i].SecondsPerCascade = Stat{}, Stat{}
		}
		return &c
	}
	require.Equal(t, untimed(rep), untimed(run(4)))

	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	table := buf.String()
	for _, m := range cfg.Methods {
		require.Contains(t, table, m)
	}
	require.Contains(t, table, "random *")
	require.Contains(t, table, "test-extras: train_size = 3")
	require.Contains(t, table, "rand.edges: 80 nodes")
	require.Contains(t, table, fmt.Sprintf("test snapshots held %.3f", rep.Settings.ObservedInfected.Mean))

	buf.Reset()
	require.NoError(t, rep.WriteJSON(&buf))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	for _, k := range []string{"graph", "nodes", "diffusion", "settings", "results"} {
		require.Contains(t, doc, k)
	}
	row := doc["results"].([]any)[0].(map[string]any)
	require.Equal(t, "lpsi", row["method"])
	for _, k := range []string{"precision", "recall", "f1", "auc", "topk", "error_distance", "seconds_per_cascade"} {
		st := row[k].(map[string]any)
		require.Contains(t, st, "mean", k)
		require.Contains(t, st, "sd", k)
	}
	var back Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, rep.Results[0].AUC, back.Results[0].AUC)
}

func TestRunErrors(t *testing.T) {
	g := randomGraph(60, 60, 3)
	cfg := testConfig()
	cfg.Methods = []string{"infected", "test-nan"}
	closed := nanClosed.Load()
	rep, err := Run(context.Background(), g, cfg)
	require.ErrorIs(t, err, ErrMethodFailed)
	require.ErrorIs(t, err, ErrBadPrediction)
	require.ErrorContains(t, err, "eval: a method failed: in run 1: test-nan")
	require.Equal(t, closed+2, nanClosed.Load(), "closed after Validate's check and after failing, and not run again")
	// The others go on: the report holds them, every run, and says what
	// failed.
	require.NotNil(t, rep)
	require.Len(t, rep.Results, 1)
	require.Equal(t, "infected", rep.Results[0].Method)
	require.Equal(t, cfg.Runs, rep.Settings.Runs)
	_, _, ntest := cfg.split()
	require.Equal(t, cfg.Runs*ntest, rep.Results[0].AUC.N)
	require.Len(t, rep.Failed, 1)
	require.Equal(t, "test-nan", rep.Failed[0].Method)
	require.Equal(t, 1, rep.Failed[0].Run)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "FAILED in run 1, left out: test-nan: ")
	require.Equal(t, 1, strings.Count(table.String(), "test-nan:"), "named once")
	// Every method failing leaves no report.
	cfg.Methods = []string{"test-nan"}
	rep, err = Run(context.Background(), g, cfg)
	require.ErrorIs(t, err, ErrMethodFailed)
	require.Nil(t, rep)

	// A method's unknown parameter fails before any cascade is simulated.
	bad := testConfig()
	bad.Methods = []string{"lpsi", "infected"}
	bad.Params = map[string]string{"lpsi.beta": "1"}
	simulated := false
	_, err = Run(context.Background(), g, bad, OnProgress(func(stage string, _, _ int) { simulated = simulated || stage == "simulate" }))
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "lpsi.beta")
	require.False(t, simulated, "refused before simulating")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg.Methods = []string{"infected"}
	_, err = Run(ctx, g, cfg)
	require.ErrorIs(t, err, context.Canceled)

	cfg.Params = map[string]string{"infected.x": "1"}
	_, err = Run(context.Background(), g, cfg)
	require.ErrorIs(t, err, ErrBadParam)
	require.True(t, strings.Contains(err.Error(), "infected.x"))
}

// The infected control's AUC follows from counting: sources (all infected
// under SI) beat every uninfected node and tie with every other infected
// node, so AUC = ((n - I) + (I - S)/2) / (n - S).
func TestInfectedAUCIdentity(t *testing.T) {
	g := randomGraph(100, 120, 4)
	cs, _, err := diffusion.Simulate(context.Background(), g, diffusion.DefaultConfig(), 10, 5)
	require.NoError(t, err)
	m := newMethod(t, "infected", g, nil)
	require.NoError(t, m.Fit(context.Background(), g, nil, nil))
	for _, c := range cs {
		p, err := m.Localize(context.Background(), yOf(100, c.Infected...))
		require.NoError(t, err)
		n, i, s := 100.0, float64(len(c.Infected)), float64(len(c.Sources))
		require.InDelta(t, ((n-i)+(i-s)/2)/(n-s), Score(g, c.Sources, p).AUC, 1e-12)
	}
}

// A method's lead over the reference (infected by default) is paired
// cascade by cascade across runs: its mean and 95% interval come from the
// differences, cascades where either AUC is undefined are left out, and
// controls get none.
func TestPairedLeadOverInfected(t *testing.T) {
	g := randomGraph(30, 30, 5)
	cfg := testConfig()
	cfg.Methods = []string{"lpsi", "infected", "random"}
	casc := func(f1, auc float64) cascadeResult { return cascadeResult{m: Metrics{F1: f1, AUC: auc}} }
	nan := math.NaN()
	results := [][]methodRun{
		{ // run 1
			{cascades: []cascadeResult{casc(0.5, 0.9), casc(0.4, 0.8)}},
			{cascades: []cascadeResult{casc(0.3, 0.7), casc(0.3, 0.75)}},
			{cascades: []cascadeResult{casc(0.1, 0.5), casc(0.1, 0.5)}},
		},
		{ // run 2
			{cascades: []cascadeResult{casc(0.6, nan), casc(0.2, 0.6)}},
			{cascades: []cascadeResult{casc(0.4, 0.8), casc(0.3, 0.65)}},
			{cascades: []cascadeResult{casc(0.1, 0.5), casc(0.1, 0.5)}},
		},
	}
	rep := buildReport(g, cfg, "g", 0, results)
	lead := rep.Results[0].Paired
	require.NotNil(t, lead)
	require.Equal(t, "infected", lead.Reference)
	// F1 differences 0.2, 0.1, 0.2, -0.1; AUC 0.2, 0.05, (undefined), -0.05
	require.Equal(t, 4, lead.F1.N)
	require.InDelta(t, 0.1, lead.F1.Mean, 1e-12)
	sd := math.Sqrt((0.01 + 0 + 0.01 + 0.04) / 3)
	// Student's t, 3 degrees of freedom: 3.1824 (1.96 is for many).
	require.InDelta(t, 3.182446305284263*sd/2, lead.F1.CI95, 1e-9)
	require.Equal(t, 3, lead.AUC.N)
	require.InDelta(t, 0.2/3, lead.AUC.Mean, 1e-12)
	// Each run's own mean difference, for the spread between fits.
	require.InDeltaSlice(t, []float64{0.15, 0.05}, lead.F1.ByRun, 1e-12)
	require.InDeltaSlice(t, []float64{0.125, -0.05}, lead.AUC.ByRun, 1e-12)
	require.Nil(t, rep.Results[1].Paired, "infected is a control")
	require.Nil(t, rep.Results[2].Paired, "random is a control")

	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "lpsi - infected: F1 +0.100 ± ")
	require.Contains(t, buf.String(), "AUC +0.067 ± ")
	require.Contains(t, buf.String(), "paired over 4 test cascades, 3 for AUC; AUC by run +0.125 -0.050)")
	require.Contains(t, buf.String(), "beats infected and prior (not run here: prior).", "the footnote says which of its controls did not run")
	buf.Reset()
	require.NoError(t, rep.WriteJSON(&buf))
	var back Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, lead, back.Results[0].Paired)

	cfg.Methods = []string{"lpsi", "random"}
	rep = buildReport(g, cfg, "g", 0, [][]methodRun{{results[0][0], results[0][2]}})
	require.Nil(t, rep.Results[0].Paired, "no infected run, no comparison")

	// Against another method, here jordan: the runs below hand lpsi's
	// slot infected's numbers and jordan's slot lpsi's.
	cfg.Methods, cfg.PairedWith = []string{"lpsi", "jordan"}, "jordan"
	rep = buildReport(g, cfg, "g", 0, [][]methodRun{{results[0][1], results[0][0]}, {results[1][1], results[1][0]}})
	require.Nil(t, rep.Results[1].Paired, "the reference is not compared with itself")
	require.Equal(t, "jordan", rep.Results[0].Paired.Reference)
	require.InDelta(t, -0.1, rep.Results[0].Paired.F1.Mean, 1e-12)
	// A method whose AUC interval lies below its reference's is said to
	// rank worse, in words; one whose interval reaches 0 is not.
	buf.Reset()
	worse := *rep
	worse.Results = append([]Result(nil), rep.Results...)
	d := *worse.Results[0].Paired
	d.AUC = Difference{Mean: -0.04, CI95: 0.01, N: 4}
	worse.Results[0].Paired = &d
	require.NoError(t, worse.WriteTable(&buf))
	require.Contains(t, buf.String(), "(95% CI, paired over 4 test cascades); ranks worse than jordan here")
	buf.Reset()
	d.AUC = Difference{Mean: -0.04, CI95: 0.05, N: 4}
	require.NoError(t, worse.WriteTable(&buf))
	require.NotContains(t, buf.String(), "ranks worse")
	// Nor one whose difference rounds to -0.000, however narrow.
	buf.Reset()
	d.AUC = Difference{Mean: -2.5e-5, CI95: 3e-17, N: 4}
	require.NoError(t, worse.WriteTable(&buf))
	require.Contains(t, buf.String(), "AUC -0.000 ± 0.000")
	require.NotContains(t, buf.String(), "ranks worse")
	// No cascade defining the AUC (a graph of one node): said, not NaN.
	buf.Reset()
	d.AUC = Difference{Mean: math.NaN(), CI95: math.NaN()}
	require.NoError(t, worse.WriteTable(&buf))
	require.Contains(t, buf.String(), "AUC undefined (95% CI")
	require.NotContains(t, buf.String(), "NaN")
}

// An undefined mean or interval travels as JSON null and comes back NaN.
func TestUndefinedNumbersAreNull(t *testing.T) {
	nan := math.NaN()
	raw, err := json.Marshal(struct {
		S Stat
		D Difference
	}{Stat{Mean: nan, SD: nan, Undefined: 3}, Difference{Mean: nan, CI95: math.Inf(1), N: 0}})
	require.NoError(t, err)
	require.JSONEq(t, `{"S":{"mean":null,"sd":null,"n":0,"undefined":3},"D":{"mean":null,"ci95":null,"n":0}}`, string(raw))
	var back struct {
		S Stat
		D Difference
	}
	require.NoError(t, json.Unmarshal(raw, &back))
	require.True(t, math.IsNaN(back.S.Mean) && math.IsNaN(back.S.SD) && math.IsNaN(back.D.Mean) && math.IsNaN(back.D.CI95))
	require.Equal(t, 3, back.S.Undefined)

	// -Inf too (an SD can be any of them)
	raw, err = json.Marshal(Stat{Mean: math.Inf(-1), SD: 1, N: 2})
	require.NoError(t, err)
	require.JSONEq(t, `{"mean":null,"sd":1,"n":2}`, string(raw))

	// a value of the wrong type is an error, not a zero
	require.Error(t, json.Unmarshal([]byte(`{"mean":"x"}`), &back.S))
	require.Error(t, json.Unmarshal([]byte(`{"mean":"x"}`), &back.D))
}

// A renamed method keeps the seed of the name its published numbers were
// measured under; every other method is salted by its own name, so two
// methods never share a seed by accident.
func TestMethodSalt(t *testing.T) {
	require.Equal(t, nameSalt("slvae-datainit"), methodSalt("slvae"))
	require.Equal(t, nameSalt("slvae"), methodSalt("slvae-paper"))
	require.Equal(t, nameSalt("slvae-noprior"), methodSalt("slvae-noprior"))
	salts := map[uint64]string{}
	for _, name := range append(DefaultMethods(), "slvae-paper", "slvae-a", "slvae-b", "slvae-noprior") {
		s := methodSalt(name)
		require.NotContains(t, salts, s, "%s and %s", name, salts[s])
		salts[s] = name
	}
}

// blockingMethod fits only when its context ends: a method still running
// when an evaluation is interrupted.
type blockingMethod struct{ infectedMethod }

func (m *blockingMethod) Name() string { return "test-blocking" }
func (m *blockingMethod) Fit(ctx context.Context, _ *graph.Graph, _, _ []diffusion.Cascade) error {
	<-ctx.Done()
	return fmt.Errorf("test-blocking: fitting: %w", ctx.Err())
}

// secondRunBlocks is a method that fits at once the first time and then
// blocks as blockingMethod does.
type secondRunBlocks struct{ blockingMethod }

var secondRunFits atomic.Int32

func (m *secondRunBlocks) Name() string { return "test-second-run-blocks" }
func (m *secondRunBlocks) Fit(ctx context.Context, g *graph.Graph, tr, va []diffusion.Cascade) error {
	if secondRunFits.Add(1) == 1 {
		return m.infectedMethod.Fit(ctx, g, tr, va)
	}
	return m.blockingMethod.Fit(ctx, g, tr, va)
}

func init() {
	Register("test-blocking", func(Env) (Method, error) { return &blockingMethod{}, nil })
	Register("test-second-run-blocks", func(Env) (Method, error) { return &secondRunBlocks{}, nil })
}

// An interrupted evaluation returns the methods that finished every run
// it started, marked partial, with ErrInterrupted; nothing finished, no
// report.
func TestRunInterruptedKeepsWhatFinished(t *testing.T) {
	g := randomGraph(60, 90, 3)
	cfg := testConfig()
	cfg.Runs, cfg.Workers = 2, 3
	cfg.Methods = []string{"infected", "test-blocking", "lpsi"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rep, err := Run(ctx, g, cfg, OnProgress(func(stage string, done, _ int) {
		if stage == "methods" && done == 2 { // infected and lpsi, run 1
			cancel()
		}
	}))
	require.ErrorIs(t, err, ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, rep)
	require.Equal(t, &Partial{RunsPlanned: 2, LeftOut: []string{"test-blocking"}}, rep.Partial)
	require.Equal(t, 1, rep.Settings.Runs)
	require.Equal(t, cfg.Methods, rep.Settings.Methods, "settings say what was asked")
	require.Len(t, rep.Results, 2)
	require.Equal(t, "infected", rep.Results[0].Method)
	require.Equal(t, "lpsi", rep.Results[1].Method)
	_, _, ntest := cfg.split()
	require.Equal(t, ntest, rep.Results[1].AUC.N, "one run's test cascades")
	require.NotNil(t, rep.Results[1].Paired, "lpsi is paired with infected on the same cascades")
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "INTERRUPTED in run 1 of 2: the methods that finished it; left out, unfinished: test-blocking")

	// Interrupted in the second run, the report holds the first, with
	// every method: a run that not all methods finished is left out
	// rather than a method that finished every run before it.
	secondRunFits.Store(0)
	cfg.Methods = []string{"infected", "test-second-run-blocks", "lpsi"}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	rep, err = Run(ctx, g, cfg, OnProgress(func(stage string, done, _ int) {
		if stage == "methods" && done == 5 { // run 1 all three, run 2 infected and lpsi
			cancel()
		}
	}))
	require.ErrorIs(t, err, ErrInterrupted)
	require.Equal(t, &Partial{RunsPlanned: 2}, rep.Partial)
	require.Equal(t, 1, rep.Settings.Runs)
	table.Reset()
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "INTERRUPTED: the first 1 of 2 runs, every method")
	require.Len(t, rep.Results, 3)
	require.Equal(t, ntest, rep.Results[0].AUC.N)

	cfg.Methods = []string{"test-blocking"}
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	rep, err = Run(ctx, g, cfg)
	require.ErrorIs(t, err, ErrInterrupted)
	require.Nil(t, rep)

	// A method that failed before the interruption is reported as
	// failed, not as unfinished, and does not count as one the
	// interrupted run waited for.
	secondRunFits.Store(0)
	cfg.Methods = []string{"infected", "test-nan", "test-second-run-blocks"}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	rep, err = Run(ctx, g, cfg, OnProgress(func(stage string, done, _ int) {
		if stage == "methods" && done == 3 { // run 1 infected and the blocker, run 2 infected
			cancel()
		}
	}))
	require.ErrorIs(t, err, ErrInterrupted)
	require.NotNil(t, rep)
	require.Equal(t, &Partial{RunsPlanned: 2}, rep.Partial, "nothing unfinished among the methods that had not failed")
	require.Len(t, rep.Failed, 1)
	require.Equal(t, "test-nan", rep.Failed[0].Method)
	require.Len(t, rep.Results, 2)
}

// The harness names a method once in its errors, whether or not the
// method named itself, and keeps the cause reachable.
func TestMethodErrorNamesTheMethodOnce(t *testing.T) {
	cause := context.DeadlineExceeded
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("slvae: forward plugin %q: %w", "deepis", cause), `slvae: fit: forward plugin "deepis": context deadline exceeded`},
		{fmt.Errorf("plugin %q: %w", "deepis", cause), `slvae: fit: plugin "deepis": context deadline exceeded`},
		{fmt.Errorf("slvaex: %w", cause), `slvae: fit: slvaex: context deadline exceeded`},
	} {
		err := methodError{"slvae", "fit", tc.err}
		require.EqualError(t, err, tc.want)
		require.ErrorIs(t, err, cause)
	}
	require.EqualError(t, methodError{"lpsi", "", errors.New("lpsi: bad")}, "lpsi: bad")
}

// Recorded cascades replace the simulation: each run splits the same
// cascades anew, and the report says where they came from.
func TestRunOnRecordedCascades(t *testing.T) {
	g := randomGraph(80, 100, 2)
	sim := testConfig()
	cs, _, err := diffusion.Simulate(context.Background(), g, sim.Sim, 50, 9)
	require.NoError(t, err)

	cfg := testConfig()
	cfg.Methods = []string{"lpsi", "infected"}
	cfg.Cascades = 7 // ignored: the recorded cascades' number is used
	cfg.Recorded, cfg.RecordedFrom = cs, "incidents.jsonl"
	before := slices.Clone(cs)
	rep, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Equal(t, "recorded", rep.Diffusion)
	require.Equal(t, "incidents.jsonl", rep.Settings.Recorded)
	require.Equal(t, 50, rep.Settings.Cascades)
	require.Nil(t, rep.Settings.Beta, "nothing simulated, no simulation settings")
	require.Equal(t, cfg.Runs*rep.Settings.Test, rep.Results[0].F1.N)
	require.Nil(t, rep.ForwardFloorMSE)
	// The runs split the same cascades differently: the second run's test
	// cascades are not the first's repeated, or the two runs' mean would
	// be the first's alone.
	cfg.Runs = 1
	alone, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.NotEqual(t, alone.Results[1].F1.Mean, rep.Results[1].F1.Mean, "infected's F1 over two runs' test cascades")
	require.Equal(t, before, cs, "the caller's cascades are left in their order")
	cfg.Runs = 2

	// The runs' test splits overlap: the paired intervals count each
	// distinct cascade once, and the table says how many there were.
	distinct := map[string]bool{}
	for _, c := range cs {
		distinct[c.Key()] = true
	}
	require.Len(t, distinct, 50, "no copies in this file")
	require.Less(t, rep.Settings.DistinctTest, cfg.Runs*rep.Settings.Test, "two runs of 10 test cascades out of 50 overlap (seeded)")
	require.Equal(t, rep.Settings.DistinctTest, rep.Results[0].Paired.F1.N)
	require.Zero(t, rep.Settings.Repeats)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "cascades recorded in incidents.jsonl")
	require.Contains(t, buf.String(), fmt.Sprintf(", %d of them distinct (recorded cascades: a run can test one another run tested, and a file can hold copies; the paired intervals count each once)", rep.Settings.DistinctTest))

	// A file holding copies is called out in the report itself.
	cfg.Recorded = append(slices.Clone(cs), cs[:5]...)
	copied, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Equal(t, 5, copied.Settings.Repeats)
	buf.Reset()
	require.NoError(t, copied.WriteTable(&buf))
	require.Contains(t, buf.String(), "WARNING: 5 of the 55 recorded cascades repeat an earlier one's sources and infected nodes")

	// Without the reference method the header still counts them.
	cfg.Recorded, cfg.Methods = cs, []string{"lpsi"}
	unpaired, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Equal(t, rep.Settings.DistinctTest, unpaired.Settings.DistinctTest)
	require.Nil(t, unpaired.Results[0].Paired)

	// Cascades over another graph are refused.
	cfg.Recorded = slices.Clone(cs)
	cfg.Recorded[3] = diffusion.Cascade{N: 5, Sources: []int{0}, Infected: []int{0}}
	_, err = Run(context.Background(), g, cfg)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "recorded cascade 4 is over 5 nodes, the graph has 80")
}

// A forward model whose VJP failed train's spot check is called out, with
// or without a floor.
func TestReportCallsOutABrokenVJP(t *testing.T) {
	rep := &Report{Graph: "g", Results: []Result{
		{Method: "slvae[mine]", Extra: map[string]float64{localize.VJPCheckMetric: 4200}},
		{Method: "slvae[fused]", Extra: map[string]float64{localize.FusedCheckMetric: 2e9}},
		{Method: "slvae"},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "slvae[mine]: the forward model's VJP disagrees with finite differences of its own Predict (4.2e+03 times the tolerance")
	require.Equal(t, 1, strings.Count(buf.String(), "VJP disagrees"))
	require.Contains(t, buf.String(), "slvae[fused]: the forward model's fused data-term call disagrees with its own Predict and VJP (2e+09 times the tolerance")
	require.Equal(t, 1, strings.Count(buf.String(), "fused data-term call disagrees"))
}

// A forward model far above the floor is called out with what to try.
func TestReportCallsOutAPoorForwardFit(t *testing.T) {
	floor := 0.2
	rep := &Report{Graph: "g", ForwardFloorMSE: &floor, Results: []Result{
		{Method: "slvae[gat]", Extra: map[string]float64{"forward_test_mse": 0.3, "forward_epochs": 60, "forward_best_epoch": 41}},
		{Method: "slvae[deepis]", Extra: map[string]float64{"forward_test_mse": 0.4, "forward_epochs": 20, "forward_best_epoch": 20}},
		{Method: "slvae", Extra: map[string]float64{"forward_test_mse": 0.22}},
		{Method: "slvae-noprior", Extra: map[string]float64{"forward_test_mse": 0.3}},
		{Method: "lpsi"},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	out := buf.String()
	require.Contains(t, out, "slvae[gat]: forward_test_mse is 50% above the floor: the forward model fits this graph poorly; "+
		"its validation error stopped improving at epoch 41 of 60, so more epochs will not help: train on more cascades, "+
		"and compare forward models (as this run does, gat, deepis: their rows above); judge by the ranking, not the forward error\n",
		"a run that compares plugins is pointed at its own rows")
	require.Contains(t, out, "slvae[deepis]: forward_test_mse is 100% above the floor: the forward model fits this graph poorly; "+
		"its fit was still improving at its last epoch (20), but more epochs (--method-param slvae[deepis].epochs=N) can lower the forward error by saturating the model",
		"each method is named with its own epochs")
	require.Contains(t, out, "slvae-noprior: forward_test_mse is 50% above the floor: the forward model fits this graph poorly; "+
		"set the forward model's parameters, or compare forward models", "a model that reports no epochs is not trained")
	require.NotContains(t, out, "slvae: forward_test_mse is", "10% above the floor is a fit")

	rep.Results = rep.Results[1:2]
	buf.Reset()
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "and compare forward models (--forward deepis,gat,monstor)", "one plugin: how to compare")
}

// A wrong or flat gradient's advice names the plugin and the directory
// the method ran it from, so it can be run as printed.
func TestReportNamesThePluginToCheck(t *testing.T) {
	rep := &Report{Graph: "g",
		Settings: Settings{PluginDir: "/opt/plugins", Params: map[string]string{"slvae-noprior.plugin_dir": "/srv/p", "slvae-a.forward": "gat", "slvae[hop1].plugin_dir": "/home/me"}},
		Results: []Result{
			{Method: "slvae[icmf]", Extra: map[string]float64{localize.VJPCheckMetric: 40}},
			{Method: "slvae-noprior", Extra: map[string]float64{localize.VJPFlatMetric: 1}},
			{Method: "slvae-a", Extra: map[string]float64{localize.VJPCheckMetric: 3}},
			{Method: "slvae[hop1]", Extra: map[string]float64{localize.VJPCheckMetric: 2}},
		}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	out := buf.String()
	require.Contains(t, out, "slvae[icmf]: the forward model's VJP disagrees")
	require.Contains(t, out, "run sourcewatch plugin check icmf --plugin-dir /opt/plugins\n")
	require.Contains(t, out, "run sourcewatch plugin check deepis --plugin-dir /srv/p\n")
	require.Contains(t, out, "run sourcewatch plugin check gat --plugin-dir /opt/plugins\n")
	require.Contains(t, out, "run sourcewatch plugin check hop1 --plugin-dir /home/me\n", "an expansion's own plugin_dir")
	rep.Settings = Settings{}
	buf.Reset()
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "run sourcewatch plugin check icmf --plugin-dir bin\n")
}

// A method ranking at about chance is said to, even where it beats the
// infected control (below chance itself under SIR).
func TestReportCallsOutChance(t *testing.T) {
	rep := &Report{Graph: "g", Results: []Result{
		{Method: "slvae", AUC: Stat{Mean: 0.522, N: 60}},
		{Method: "lpsi", AUC: Stat{Mean: 0.71, N: 60}},
		{Method: "infected", Control: true, AUC: Stat{Mean: 0.44, N: 60}},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	out := buf.String()
	require.Contains(t, out, "slvae: ROC-AUC 0.522, about chance (a random ranking scores 0.5): it does not localize here, whatever it beats\n")
	require.NotContains(t, out, "lpsi: ROC-AUC")
	require.NotContains(t, out, "infected: ROC-AUC", "a control is a reference point")
}

// One cascade gives a difference but no interval, and no verdict; a unit
// tested in several runs (a recorded cascade) counts once.
func TestPairedDifferenceUnits(t *testing.T) {
	one := pairedDifference([]float64{0.2}, []float64{0.5}, nil)
	require.Equal(t, 1, one.N)
	require.InDelta(t, -0.3, one.Mean, 1e-12)
	require.True(t, math.IsNaN(one.CI95))
	require.Equal(t, "-0.300 (one cascade, no interval)", one.String())

	// Units a, b, a, c: a's two differences (0.1, 0.3) average to 0.2.
	d := pairedDifference([]float64{0.6, 0.5, 0.8, 0.4}, []float64{0.5, 0.5, 0.5, 0.1}, []string{"a", "b", "a", "c"})
	require.Equal(t, 3, d.N)
	require.InDelta(t, (0.2+0+0.3)/3, d.Mean, 1e-12)
	sd := math.Sqrt((math.Pow(0.2-d.Mean, 2) + math.Pow(0-d.Mean, 2) + math.Pow(0.3-d.Mean, 2)) / 2)
	require.InDelta(t, 4.302652729911275*sd/math.Sqrt(3), d.CI95, 1e-9, "t with 2 degrees of freedom")

	// An undefined value leaves out its pair, not its unit: a's one
	// defined difference 0.1 and c's 0.3, mean 0.2 over 2 units.
	d = pairedDifference([]float64{0.6, math.NaN(), 0.4}, []float64{0.5, 0.5, 0.1}, []string{"a", "a", "c"})
	require.Equal(t, 2, d.N)
	require.InDelta(t, 0.2, d.Mean, 1e-12)

	rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 1}, Results: []Result{
		{Method: "jordan", AUC: Stat{Mean: 0.5, N: 1}, Paired: &Paired{Reference: "infected", F1: one, AUC: one}},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	require.Contains(t, buf.String(), "jordan - infected: F1 -0.300 (one cascade, no interval), AUC -0.300 (one cascade, no interval)")
	require.NotContains(t, buf.String(), "ranks worse than", "no verdict from one cascade")
	require.Contains(t, buf.String(), "WARNING: 1 test cascade per run: too few")
}

func ptr(v float64) *float64 { return &v }

// provenance is the Env.Diffusion the test-provenance method was built
// with last.
var provenance atomic.Value

func init() {
	Register("test-provenance", func(env Env) (Method, error) {
		provenance.Store(string(env.Diffusion))
		return &infectedMethod{}, nil
	})
}

// Run tells each method where its cascades come from, as train records it
// in a bundle: the simulation's settings, or that they were recorded.
func TestRunGivesMethodsTheProvenance(t *testing.T) {
	g := randomGraph(50, 50, 1)
	cfg := testConfig()
	cfg.Runs, cfg.Methods = 1, []string{"test-provenance"}
	_, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	var got struct {
		Simulated struct {
			Model string `json:"model"`
		} `json:"simulated"`
	}
	require.NoError(t, json.Unmarshal([]byte(provenance.Load().(string)), &got))
	require.Equal(t, "SI", got.Simulated.Model)

	cs, _, err := diffusion.Simulate(context.Background(), g, cfg.Sim, 40, 3, diffusion.Workers(1))
	require.NoError(t, err)
	cfg.Recorded = cs
	_, err = Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.JSONEq(t, `{"recorded": true}`, provenance.Load().(string))
}

// A method run with chance=on gets a line on its source chance, saying
// which cascades it was fitted on.
func TestReportSaysHowTheChanceFared(t *testing.T) {
	rep := &Report{Graph: "g", Results: []Result{
		{Method: "slvae", Extra: map[string]float64{"chance_brier": 0.0682, "chance_ece": 0.0256, "probability_brier": 0.1504,
			"probability_ece": 0.1462, "chance_expected_sources": 2.945, "true_sources": 3, "chance_fresh_cascades": 32}},
		{Method: "slvae[icmf]", Extra: map[string]float64{"chance_brier": 0.1, "chance_ece": 0.05, "probability_brier": 0.2,
			"probability_ece": 0.1, "chance_expected_sources": 2, "true_sources": 3, "chance_validation_cascades": 20}},
		{Method: "slvae-noprior", Extra: map[string]float64{"forward_test_mse": 0.2}},
		{Method: "local-mlp", Extra: map[string]float64{"chance_brier": 0.07, "chance_ece": 0.01, "chance_expected_sources": 3.1, "true_sources": 3}},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	out := buf.String()
	require.Contains(t, out, "slvae: each node's chance of being a source, fitted on 32 fresh cascades: Brier 0.068, ECE 0.026 (the restarts' agreement read as a chance: 0.150, 0.146); 2.9 sources expected a test cascade, 3.0 true\n")
	require.Contains(t, out, "slvae[icmf]: each node's chance of being a source, fitted on the 20 validation cascades (recorded cascades leave none fresh): Brier 0.100")
	require.Contains(t, out, "local-mlp: its probabilities read as a chance: Brier 0.070, ECE 0.010; 3.1 sources expected a test cascade, 3.0 true\n",
		"a learned probability, with no agreement to set beside it")
	require.NotContains(t, out, "slvae-noprior: each node's chance")
}

// spyMethod is the infected control recording what Run shows it: the
// sources of the cascades it is fitted on, and the infected nodes of
// each observation it localizes.
type spyMethod struct {
	infectedMethod
	rec *spyRecord
}

type spyRecord struct {
	mu                 sync.Mutex
	train, val, tested []int
}

var spyParts spyRecord

func (m *spyMethod) Name() string { return "test-spy-parts" }

func (m *spyMethod) Fit(ctx context.Context, g *graph.Graph, tr, va []diffusion.Cascade) error {
	m.rec.mu.Lock()
	defer m.rec.mu.Unlock()
	for _, c := range tr {
		m.rec.train = append(m.rec.train, c.Sources...)
	}
	for _, c := range va {
		m.rec.val = append(m.rec.val, c.Sources...)
	}
	return m.infectedMethod.Fit(ctx, g, tr, va)
}

func (m *spyMethod) Localize(ctx context.Context, y []float64) (Prediction, error) {
	m.rec.mu.Lock()
	m.rec.tested = append(m.rec.tested, infectedOf(y)...)
	m.rec.mu.Unlock()
	return m.infectedMethod.Localize(ctx, y)
}

func init() {
	Register("test-spy-parts", func(Env) (Method, error) { return &spyMethod{rec: &spyParts}, nil })
}

// TestRunFitsOnTrainAndValidationOnly: the cascades a method is fitted on
// (training and validation, 60% and 20%) and those it is tested on (the
// rest) are the run's cascades, each in one part. Recorded cascade i
// infects node i alone, so what a method was shown names the cascade.
func TestRunFitsOnTrainAndValidationOnly(t *testing.T) {
	const n = 20
	g := path(n)
	var cs []diffusion.Cascade
	for i := range n {
		cs = append(cs, diffusion.Cascade{N: n, Sources: []int{i}, Infected: []int{i}})
	}
	cfg := testConfig()
	cfg.Runs, cfg.Methods = 1, []string{"test-spy-parts"}
	cfg.Recorded, cfg.Cascades = cs, n
	spyParts = spyRecord{}
	rep, err := Run(context.Background(), g, cfg)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Settings.Test)
	require.Len(t, spyParts.train, 12)
	require.Len(t, spyParts.val, 4)
	require.Len(t, spyParts.tested, 4)
	seen := map[int]string{}
	for part, nodes := range map[string][]int{"train": spyParts.train, "val": spyParts.val, "test": spyParts.tested} {
		for _, v := range nodes {
			require.Empty(t, seen[v], "cascade %d in %s and %s", v, seen[v], part)
			seen[v] = part
		}
	}
	require.Len(t, seen, n)
}

// A malformed prediction is refused before it is scored.
func TestCheckPrediction(t *testing.T) {
	require.NoError(t, checkPrediction(3, Prediction{Scores: []float64{0, 1, 2}, Sources: []int{0, 2}}))
	for _, tc := range []struct {
		name string
		p    Prediction
	}{
		{"too few scores", Prediction{Scores: []float64{0, 1}}},
		{"NaN score", Prediction{Scores: []float64{0, math.NaN(), 2}}},
		{"+Inf score", Prediction{Scores: []float64{0, math.Inf(1), 2}}},
		{"-Inf score", Prediction{Scores: []float64{0, math.Inf(-1), 2}}},
		{"negative source", Prediction{Scores: []float64{0, 1, 2}, Sources: []int{-1}}},
		{"source n", Prediction{Scores: []float64{0, 1, 2}, Sources: []int{3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, checkPrediction(3, tc.p), ErrBadPrediction)
		})
	}
}

// The report's settings carry the parameters the simulation's model reads,
// and no others.
func TestReportSettingsNameTheModelsParameters(t *testing.T) {
	plain := path(4)
	weighted := graph.New(3, []graph.Edge{{From: 0, To: 1, W: 0.5}, {From: 1, To: 2, W: 0.25}}, nil, false, true)
	for _, tc := range []struct {
		model                 diffusion.Model
		g                     *graph.Graph
		beta, gamma, p, theta bool
	}{
		{diffusion.SI, plain, true, false, false, false},
		{diffusion.SIR, plain, true, true, false, false},
		{diffusion.IC, plain, false, false, true, false},
		{diffusion.IC, weighted, false, false, false, false},
		{diffusion.LT, plain, false, false, false, true},
	} {
		t.Run(string(tc.model), func(t *testing.T) {
			cfg := testConfig()
			cfg.Methods = nil
			cfg.Sim.Model, cfg.Sim.Pattern = tc.model, ""
			cfg.Sim.Beta, cfg.Sim.Gamma, cfg.Sim.P, cfg.Sim.Threshold = 0.1, 0.2, 0.3, 0.4
			s := buildReport(tc.g, cfg, "g", 0, nil).Settings
			require.Equal(t, "uniform", s.Pattern, "the empty pattern is uniform")
			for _, f := range []struct {
				name string
				want bool
				got  *float64
				v    float64
			}{{"beta", tc.beta, s.Beta, 0.1}, {"gamma", tc.gamma, s.Gamma, 0.2}, {"p", tc.p, s.P, 0.3}, {"threshold", tc.theta, s.Threshold, 0.4}} {
				if !f.want {
					require.Nil(t, f.got, f.name)
					continue
				}
				require.NotNil(t, f.got, f.name)
				require.InDelta(t, f.v, *f.got, 0, f.name)
			}
		})
	}
	// recorded cascades, even one: no simulation settings, and a name
	cfg := testConfig()
	cfg.Methods, cfg.Recorded = nil, []diffusion.Cascade{{N: 4, Sources: []int{1}, Infected: []int{1}}}
	rep := buildReport(plain, cfg, "g", 0, nil)
	require.Equal(t, "recorded", rep.Diffusion)
	require.Equal(t, "recorded cascades", rep.Settings.Recorded)
	require.Nil(t, rep.Settings.Beta)
	require.Empty(t, rep.Settings.Pattern)
}

// mix is SplitMix64: mix(seed, salt) is the generator's output after
// salt + 1 steps from seed. Expected values are the published reference
// outputs (seed 0: 0xe220a8397b1dcdaf; seed 1234567: 6457827717110365317,
// 3203168211198807973), so a seed names the same split and fits as in
// the numbers published before.
func TestMixIsSplitMix64(t *testing.T) {
	require.Equal(t, int64(-0x1ddf57c684e23251), mix(0, 0)) // 0xe220a8397b1dcdaf
	require.Equal(t, int64(6457827717110365317), mix(1234567, 0))
	require.Equal(t, int64(3203168211198807973), mix(1234567, 1))
}
