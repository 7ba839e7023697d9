package forward

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// CheckStatus is the outcome of one conformance check.
type CheckStatus string

const (
	CheckPass CheckStatus = "pass"
	// CheckWarn marks behaviour a model may legitimately show but that
	// inference will suffer from, such as a learned model that is not
	// monotone.
	CheckWarn CheckStatus = "warn"
	CheckFail CheckStatus = "fail"
	// CheckSkip marks checks that could not run after an earlier failure.
	CheckSkip CheckStatus = "skip"
)

// CheckResult is one line of a conformance report.
type CheckResult struct {
	Name     string
	Status   CheckStatus
	Detail   string
	Duration time.Duration
}

// CheckReport is the result of CheckPlugin.
type CheckReport struct {
	Path    string
	Info    Info
	Results []CheckResult
}

// Passed reports whether no check failed or was skipped.
func (r CheckReport) Passed() bool {
	for _, c := range r.Results {
		if c.Status == CheckFail || c.Status == CheckSkip {
			return false
		}
	}
	return len(r.Results) > 0
}

// PluginCheckOptions configure CheckPlugin.
type PluginCheckOptions struct {
	// Launch options for the plugin process (logger, call timeout, checksum).
	Launch []LaunchOption
	// Params are passed to Configure.
	Params map[string]string
	// Fit options for the training check; keep the epochs small.
	Fit FitOptions
	// Batch is the number of rows per Predict and VJP call (default 8).
	Batch int
	// Seed makes the random inputs reproducible.
	Seed uint64
	// VJPCoords is the number of coordinates of dx the VJP check compares
	// with finite differences in each of its two rows: 0 checks them all on
	// graphs of up to AllCoordsNodes nodes and 256 at random on larger
	// ones; a negative value or n checks them all.
	VJPCoords int
	// OnResult, when set, hears each check's result as it ends, in the
	// report's order, so a long check (a learned model's fit on a large
	// graph) can be shown line by line.
	OnResult func(CheckResult)
	// OnFitProgress, when set, hears the plugin's Fit progress reports.
	OnFitProgress func(Progress)
}

// UnknownParamProbe is the param name CheckPlugin's configure check
// passes to see that the plugin refuses a param it does not know.
const UnknownParamProbe = "plugin_check_no_such_param"

// AllCoordsNodes is the largest graph on which CheckPlugin compares every
// coordinate of the VJP by default: 2n Predict rows per checked row, a few
// seconds for a learned model at this size.
const AllCoordsNodes = 2048

// CheckCornerRows is how many random corners of [0, 1]^n (x in {0, 1}^n,
// where inference ends) CheckPlugin's VJP check compares besides its two
// rows inside. A gradient wrong only where a node's in-neighbours are all
// sources (a kink at a full neighbourhood) shows at a corner only when
// its draw fills one: on Karate one corner caught such a fault on 4 of
// 10 seeds, the default seed not among them.
const CheckCornerRows = 4

// samePanic shortens a check's error that is a plugin panic at a site an
// earlier check's already quoted in full (a bug in Predict fails every
// check after it, each with the same stack) to its message and the name
// of that check; it records a site it sees first in sites.
func samePanic(msg, check string, sites map[string]string) string {
	i := strings.Index(msg, "plugin panic: ")
	if i < 0 {
		return msg
	}
	at := strings.Index(msg[i:], " (at ")
	if at < 0 {
		return msg
	}
	site := msg[i+at:]
	first, seen := sites[site]
	if !seen {
		sites[site] = check
		return msg
	}
	return fmt.Sprintf("%s (the same place as in %s, above)", msg[:i+at], first)
}

// CheckPlugin launches the plugin at path and checks it against the
// contract on g: the handshake, Info, Configure, Fit on pairs (its state
// must restore the same model through Configure), Predict shape and range,
// VJP against finite differences, the fused data-term call against Predict
// and VJP, monotonicity on subsets of source sets,
// empty and full x, determinism, and timing. It never returns an error:
// every problem is a failing line of the report, so a plugin author sees
// all of them at once.
func CheckPlugin(ctx context.Context, path string, g *graph.Graph, pairs []Pair, o PluginCheckOptions) CheckReport {
	if o.Batch <= 0 {
		o.Batch = 8
	}
	rep := CheckReport{Path: path}
	add := func(c CheckResult) {
		rep.Results = append(rep.Results, c)
		if o.OnResult != nil {
			o.OnResult(c)
		}
	}
	var p *Process
	panics := map[string]string{} // a plugin panic's site -> the check that first hit it
	run := func(name string, f func() (CheckStatus, string, error)) bool {
		if p != nil && p.Exited() {
			add(CheckResult{Name: name, Status: CheckSkip, Detail: "plugin process has exited"})
			return false
		}
		if p != nil && p.hung.Load() {
			add(CheckResult{Name: name, Status: CheckSkip, Detail: "plugin is hung"})
			return false
		}
		start := time.Now()
		st, detail, err := f()
		if err != nil {
			st, detail = CheckFail, samePanic(err.Error(), name, panics)
		}
		add(CheckResult{Name: name, Status: st, Detail: detail, Duration: time.Since(start)})
		return st != CheckFail
	}
	skipRestBecause := func(why string, names ...string) {
		switch {
		case p != nil && p.Exited():
			why = "plugin process has exited"
		case p != nil && p.hung.Load():
			why = "plugin is hung"
		}
		for _, n := range names {
			add(CheckResult{Name: n, Status: CheckSkip, Detail: why})
		}
	}
	skipRest := func(names ...string) { skipRestBecause("an earlier check failed", names...) }
	all := []string{"handshake", "info", "configure", "fit", "predict", "restore state", "defaults", "empty and full x", "determinism", "vjp", "fused call", "monotonicity", "timing"}

	if !run("handshake", func() (CheckStatus, string, error) {
		var err error
		start := time.Now()
		p, err = Launch(ctx, path, o.Launch...)
		if err != nil {
			return CheckFail, "", err
		}
		detail := fmt.Sprintf("protocol %d, gRPC, mTLS", ProtocolVersion)
		lo := launchOptions{startTimeout: DefaultStartTimeout}
		for _, opt := range o.Launch {
			opt(&lo)
		}
		if took := time.Since(start); took > lo.startTimeout/3 {
			// It passes here, and fails on a machine busier or slower
			// by a factor of three.
			return CheckWarn, detail + fmt.Sprintf("; the start took %s, over a third of the %s a plugin has to its handshake line: call forward.Serve first and do slow work (loading weights or data) in Configure",
				took.Round(time.Millisecond), lo.startTimeout), nil
		}
		return CheckPass, detail, nil
	}) {
		skipRest(all[1:]...)
		return rep
	}
	defer p.Close()

	run("info", func() (CheckStatus, string, error) {
		in, err := p.Info(ctx)
		if err != nil {
			return CheckFail, "", err
		}
		rep.Info = in
		if err := in.Validate(); err != nil {
			return CheckFail, strings.TrimPrefix(err.Error(), ErrBadInfo.Error()+": "), nil
		}
		detail := fmt.Sprintf("%s %s, trainable %v, %d params", in.Name, in.Version, in.Trainable, len(in.Params))
		// A bundle records the name and version, and localize, serve and
		// every relaunch start the plugin anew and refuse one that reports
		// others: a version made at start (a time, a random value, a
		// process id) trains, and then no bundle of it ever runs.
		again, err := infoOfNewProcess(ctx, path, o.Launch)
		switch {
		case err != nil:
			return CheckWarn, detail + fmt.Sprintf("; a second process of the plugin, as serve starts one per graph, could not answer Info: %v", err), nil
		case again.Name != in.Name || again.Version != in.Version:
			return CheckFail, detail + fmt.Sprintf("; a second process of the plugin reports %s %s: a bundle records the name and version, and localize, serve and every relaunch refuse a plugin that reports others, so derive them from the model, not from the process (no time, random value or process id)",
				again.Name, again.Version), nil
		}
		if file := filepath.Base(path); strings.HasPrefix(file, BinaryPrefix) && strings.TrimPrefix(file, BinaryPrefix) != in.Name {
			// Legal (a renamed build), but --forward and bundles go by the
			// file's name, so a train with this binary records that.
			return CheckWarn, detail + fmt.Sprintf("; the binary is named for %q (--forward and bundles use that name)", strings.TrimPrefix(file, BinaryPrefix)), nil
		}
		return CheckPass, detail, nil
	})

	if !run("configure", func() (CheckStatus, string, error) {
		if err := p.Configure(ctx, g, o.Params, nil); err != nil {
			return CheckFail, "", err
		}
		// A new fit's params are checked against Info (Info.UnknownParam),
		// but a bundle's recorded ones are not (an older build may have
		// taken others), nor anything a plugin that lists no params is
		// given: there only the plugin itself, refusing a param it does
		// not know and naming it, as the contract asks, catches a typo.
		params := maps.Clone(o.Params)
		if params == nil {
			params = map[string]string{}
		}
		params[UnknownParamProbe] = "1"
		err := p.Configure(ctx, g, params, nil)
		if again := p.Configure(ctx, g, o.Params, nil); again != nil {
			return CheckFail, "", fmt.Errorf("configure again after the unknown param %s: %w", UnknownParamProbe, again)
		}
		switch {
		case err == nil:
			return CheckWarn, g.String() + fmt.Sprintf("; an unknown param (%s=1) is accepted: refuse a param you do not know with an error naming it, or a misspelt --forward-param goes unnoticed", UnknownParamProbe), nil
		case !strings.Contains(err.Error(), UnknownParamProbe):
			return CheckWarn, g.String() + fmt.Sprintf("; the error refusing the unknown param %s=1 does not name it: %v", UnknownParamProbe, err), nil
		}
		return CheckPass, g.String(), nil
	}) {
		skipRest(all[3:]...)
		return rep
	}

	var state []byte
	if !run("fit", func() (CheckStatus, string, error) {
		epochs := 0
		res, err := p.Fit(ctx, pairs, o.Fit, func(pr Progress) {
			epochs++
			if o.OnFitProgress != nil {
				o.OnFitProgress(pr)
			}
		})
		if err != nil {
			return CheckFail, "", err
		}
		state = res.State
		keys := make([]string, 0, len(res.Metrics))
		for k, v := range res.Metrics {
			if err := CheckMetricName(k); err != nil {
				return CheckFail, err.Error(), nil
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return CheckFail, fmt.Sprintf("metric %s is %v", k, v), nil
			}
			keys = append(keys, fmt.Sprintf("%s=%.4g", k, v))
		}
		sort.Strings(keys)
		detail := fmt.Sprintf("%d pairs, %d progress reports, %d-byte state", len(pairs), epochs, len(state))
		if len(keys) > 0 {
			detail += ", " + strings.Join(keys, " ")
		}
		return CheckPass, detail, nil
	}) {
		skipRest(all[4:]...)
		return rep
	}

	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	n := g.N()
	x := mat.NewDense(o.Batch, n, nil)
	for i := 0; i < o.Batch; i++ {
		for j := 0; j < n; j++ {
			x.Set(i, j, rng.Float64())
		}
	}
	run("predict", func() (CheckStatus, string, error) {
		y, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		if i, j, ok := outOfUnit(y); ok {
			return CheckFail, fmt.Sprintf("y[%d][%d] = %v is not in [0,1]", i, j, y.At(i, j)), nil
		}
		return CheckPass, fmt.Sprintf("%dx%d, all in [0,1]", o.Batch, n), nil
	})

	refused := false
	run("restore state", func() (CheckStatus, string, error) {
		y0, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		if err := p.Configure(ctx, g, o.Params, state); err != nil {
			refused = true
			return CheckFail, "", fmt.Errorf("configure with the fitted state: %w", err)
		}
		y1, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		if d := maxAbsDiff(y0, y1); d > 1e-9 {
			return CheckFail, fmt.Sprintf("predictions differ by up to %.3g after Configure with the fitted state: the state Fit returned does not give the model Fit left behind (it leaves out something Fit learned, or Fit did not leave the model in the state it returned); a bundle keeps the state, so localize and serve would run another model than the one train measured", d), nil
		}
		if _, err := p.Predict(ctx, x); err != nil {
			return CheckFail, "", err
		}
		return CheckPass, "Configure(state) reproduces the fitted model", nil
	})

	if refused {
		// A failed Configure leaves the plugin unconfigured; fit it afresh
		// so the checks below still say something about the model.
		if err := p.Configure(ctx, g, o.Params, nil); err != nil {
			skipRestBecause(fmt.Sprintf("the plugin refused its fitted state and then a plain configure: %v", err), all[6:]...)
			return rep
		}
		if _, err := p.Fit(ctx, pairs, o.Fit, nil); err != nil {
			skipRestBecause(fmt.Sprintf("the plugin refused its fitted state and then failed to fit again: %v", err), all[6:]...)
			return rep
		}
	}

	run("defaults", func() (CheckStatus, string, error) {
		// A bundle trained on a model's defaults records no params, so
		// Info's Default is the only record of what they were: it must be
		// what Configure uses when a param is left out.
		if refused {
			return CheckSkip, "the plugin refused its fitted state", nil
		}
		var left []Param
		for _, q := range rep.Info.Params {
			if _, given := o.Params[q.Name]; !given && q.Default != "" {
				left = append(left, q)
			}
		}
		if len(left) == 0 {
			return CheckPass, "no param left to an Info default", nil
		}
		y0, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		var wrong []string
		for _, q := range left {
			params := maps.Clone(o.Params)
			if params == nil {
				params = map[string]string{}
			}
			params[q.Name] = q.Default
			if err := p.Configure(ctx, g, params, state); err != nil {
				wrong = append(wrong, fmt.Sprintf("%s=%s is refused: %v", q.Name, q.Default, err))
				continue
			}
			y1, err := p.Predict(ctx, x)
			switch {
			case err != nil:
				wrong = append(wrong, fmt.Sprintf("with %s=%s Predict fails: %v", q.Name, q.Default, err))
			case maxAbsDiff(y0, y1) > 1e-9:
				wrong = append(wrong, fmt.Sprintf("%s=%s changes predictions by up to %.3g", q.Name, q.Default, maxAbsDiff(y0, y1)))
			}
		}
		if err := p.Configure(ctx, g, o.Params, state); err != nil {
			return CheckFail, "", fmt.Errorf("configure again as before: %w", err)
		}
		if len(wrong) > 0 {
			return CheckWarn, "a param given its Info default explicitly does not act as the param left out (Info's Default must be what Configure uses): " + strings.Join(wrong, "; "), nil
		}
		return CheckPass, fmt.Sprintf("%d param(s) given their Info default act as when left out", len(left)), nil
	})

	run("empty and full x", func() (CheckStatus, string, error) {
		ends := mat.NewDense(2, n, nil)
		for j := 0; j < n; j++ {
			ends.Set(1, j, 1)
		}
		y, err := p.Predict(ctx, ends)
		if err != nil {
			return CheckFail, "", err
		}
		if i, j, ok := outOfUnit(y); ok {
			return CheckFail, fmt.Sprintf("y[%d][%d] = %v is not in [0,1] (row 0 empty x, row 1 full x)", i, j, y.At(i, j)), nil
		}
		empty, full := mat.Sum(y.RowView(0))/float64(n), mat.Sum(y.RowView(1))/float64(n)
		detail := fmt.Sprintf("mean y: %.3g for empty x, %.3g for full x", empty, full)
		if empty > full {
			return CheckWarn, detail + ": more spread from no sources than from all", nil
		}
		return CheckPass, detail, nil
	})

	run("determinism", func() (CheckStatus, string, error) {
		a, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		b, err := p.Predict(ctx, x)
		if err != nil {
			return CheckFail, "", err
		}
		if d := maxAbsDiff(a, b); d != 0 {
			return CheckFail, fmt.Sprintf("the same x gave predictions differing by up to %.3g", d), nil
		}
		// A row's answer must not depend on the other rows of its batch.
		one, err := p.Predict(ctx, mat.NewDense(1, n, slices.Clone(x.RawRowView(o.Batch-1))))
		if err != nil {
			return CheckFail, "", err
		}
		if d := floats(one.RawRowView(0), a.RawRowView(o.Batch-1)); d > 1e-12 {
			return CheckFail, fmt.Sprintf("a row predicted alone differs by %.3g from the same row in a batch", d), nil
		}
		return CheckPass, "repeated and batched calls agree", nil
	})

	run("vjp", func() (CheckStatus, string, error) {
		coords := o.VJPCoords
		switch {
		case coords < 0 || coords > n:
			coords = n
		case coords == 0 && n <= AllCoordsNodes:
			coords = n
		case coords == 0:
			coords = 256
		}
		res, err := CheckVJP(ctx, p, n, rng, VJPCheckOptions{Rows: 2, CornerRows: CheckCornerRows, Coords: coords})
		if err != nil {
			return CheckFail, "", err
		}
		detail := res.Describe(g.ID)
		if coords < n {
			detail = fmt.Sprintf("%s (%d of %d coordinates a row, chosen at random)", detail, coords, n)
			if res.Node < 0 && !res.Pass() {
				// A direction read every node: the coordinates, all of them,
				// find which.
				detail += "; --vjp-coords -1 compares every coordinate and names the node"
			}
		}
		if !res.Pass() {
			return CheckFail, detail, nil
		}
		return CheckPass, detail, nil
	})

	run("fused call", func() (CheckStatus, string, error) {
		// Inference calls SquaredErrorVJP with loss_only on every step, with
		// its batches in the shared region when the plugin maps it, so it
		// must agree with Predict and VJP, the calls checked above.
		target := mat.NewDense(1, n, nil)
		for j := 0; j < n; j++ {
			if rng.Float64() < 0.3 {
				target.Set(0, j, 1)
			}
		}
		before := p.SharedCalls()
		c, err := CheckFused(ctx, p, x, target)
		if err != nil {
			return CheckFail, "", err
		}
		if !c.Pass() {
			return CheckFail, c.String(), nil
		}
		how := "batches as bytes: the plugin does not map the shared region"
		switch {
		case p.noFused.Load():
			how = "not implemented: the host uses Predict then VJP, two round trips a step"
		case p.SharedCalls() > before:
			how = "batches through the shared region"
		}
		return CheckPass, "loss and dx agree with Predict and VJP; " + how, nil
	})

	run("monotonicity", func() (CheckStatus, string, error) {
		// Rows 2k and 2k+1 are a random source set and a random subset.
		k := o.Batch
		sets := mat.NewDense(2*k, n, nil)
		for i := 0; i < k; i++ {
			for j := 0; j < n; j++ {
				if rng.Float64() < 0.1 {
					sets.Set(2*i, j, 1)
					if rng.Float64() < 0.5 {
						sets.Set(2*i+1, j, 1)
					}
				}
			}
		}
		y, err := p.Predict(ctx, sets)
		if err != nil {
			return CheckFail, "", err
		}
		worst, count := 0.0, 0
		for i := 0; i < k; i++ {
			for j := 0; j < n; j++ {
				if v := y.At(2*i+1, j) - y.At(2*i, j); v > 1e-9 {
					count++
					worst = math.Max(worst, v)
				}
			}
		}
		if count > 0 {
			return CheckWarn, fmt.Sprintf("f(subset) > f(set) at %d of %d node values, by up to %.3g", count, k*n, worst), nil
		}
		return CheckPass, fmt.Sprintf("f(subset) <= f(set) on %d pairs of sets", k), nil
	})

	run("timing", func() (CheckStatus, string, error) {
		dy := mat.NewDense(o.Batch, n, nil)
		for i := 0; i < o.Batch; i++ {
			for j := 0; j < n; j++ {
				dy.Set(i, j, rng.NormFloat64())
			}
		}
		const reps = 5
		times := make([]time.Duration, reps)
		for r := range times {
			start := time.Now()
			if _, _, err := p.VJP(ctx, x, dy); err != nil {
				return CheckFail, "", err
			}
			times[r] = time.Since(start)
		}
		slices.Sort(times)
		return CheckPass, fmt.Sprintf("VJP batch %d: median %v, min %v over %d calls", o.Batch, times[reps/2], times[0], reps), nil
	})
	return rep
}

// infoOfNewProcess launches the plugin at path once more and returns its
// Info.
func infoOfNewProcess(ctx context.Context, path string, opts []LaunchOption) (Info, error) {
	q, err := Launch(ctx, path, opts...)
	if err != nil {
		return Info{}, err
	}
	defer q.Close()
	return q.Info(ctx)
}

func outOfUnit(y *mat.Dense) (int, int, bool) {
	r, c := y.Dims()
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			if v := y.At(i, j); !(v >= 0 && v <= 1) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

func maxAbsDiff(a, b *mat.Dense) float64 {
	var d float64
	r, _ := a.Dims()
	for i := 0; i < r; i++ {
		d = math.Max(d, floats(a.RawRowView(i), b.RawRowView(i)))
	}
	return d
}

func floats(a, b []float64) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// String formats the report as aligned lines and a verdict.
func (r CheckReport) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "plugin %s\n", r.Path)
	for _, c := range r.Results {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	b.WriteString(r.Verdict())
	return b.String()
}

// String is the check's line of the report, without its newline.
func (c CheckResult) String() string {
	line := fmt.Sprintf("  %-4s  %-17s %s", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
	if c.Duration > 0 {
		line += fmt.Sprintf(" (%v)", c.Duration.Round(time.Microsecond))
	}
	return line
}

// Verdict is the report's last line, with its newline: PASS, or FAIL and
// the failed checks' names.
func (r CheckReport) Verdict() string {
	var b bytes.Buffer
	if r.Passed() {
		b.WriteString("PASS\n")
	} else {
		var failed []string
		for _, c := range r.Results {
			if c.Status == CheckFail {
				failed = append(failed, c.Name)
			}
		}
		fmt.Fprintf(&b, "FAIL: %s\n", strings.Join(failed, ", "))
	}
	return b.String()
}
