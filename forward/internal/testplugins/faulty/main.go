// Command faulty is a test plugin for the host's lifecycle tests and for
// `sourcewatch plugin check`: the icmf model with one fault injected,
// chosen by the param fault:
//
//	none   behave (the default)
//	nan    a NaN in y
//	range  1.5 in y (finite, outside [0, 1])
//	grad   dx of the last node doubled (a gradient wrong at one node)
//	corner dx negated where x is 0 (a gradient wrong only at the corners
//	       of [0, 1]^n, where inference ends)
//	full   dx_v doubled where x_v is 0 and every in-neighbour's x is 1 (a
//	       gradient wrong only at corners that fill a node's
//	       in-neighbourhood, as a kink at a full neighbourhood gives)
//	inf    +Inf in dx
//	short  y has one column too few
//	hang   never answer, ignoring the call's context
//	crash  exit the process with status 3
//	fatal  log.Fatalf, which writes its reason to the process's stderr
//	panic  index a slice out of range (Serve turns it into an error)
//	state  Fit returns a state that Configure refuses (a plugin that cannot
//	       read back its own state)
//	flat   y = 1 and dx = 0 everywhere (a consistent, saturated model)
//	nanmetric  Fit reports its val_mse and train_mse as NaN
//	valsum Fit reports its val_mse summed over the nodes, not averaged
//	forget Fit learns a halving of y that the state it returns leaves
//	       out (Configure with that state gives another model)
//	fused  the fused data-term call's dx negated (Predict and VJP right:
//	       a model whose own SquaredErrorVJP is wrong)
//	metricname  Fit reports a metric whose name holds a newline
//	lenient  Configure drops params it does not know instead of refusing
//	       them (a misspelt --forward-param goes unnoticed)
//
// The fault strikes from the Nth Predict or VJP call (or Fit, for hang,
// crash and fatal) of the process on
// (param fault_after, default 1). Counting starts afresh in every process,
// so a relaunched plugin behaves like a new one.
//
// Started under the name sourcewatch-forward-misdefault its Info gives
// steps another default than the one Configure uses.
//
// Started under the name sourcewatch-forward-unstable its Info version
// holds its process id, so every process of it reports another.
//
// Started under the name sourcewatch-forward-othercookie it is a go-plugin
// plugin of another application, with another magic cookie.
//
// Started under the name sourcewatch-forward-foreign it is instead a
// fault-free plugin that does not use go-plugin (see foreign.go).
package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-plugin"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func main() {
	if name := filepath.Base(os.Args[0]); strings.HasPrefix(name, "sourcewatch-forward-foreign") {
		if err := serveForeign(strings.TrimPrefix(name, "sourcewatch-forward-foreign")); err != nil {
			fmt.Fprintln(os.Stderr, "foreign:", err)
			os.Exit(1)
		}
		return
	}
	if filepath.Base(os.Args[0]) == "sourcewatch-forward-othercookie" {
		// A go-plugin plugin of another application: it refuses a host
		// that does not set its own magic cookie.
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig: plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "OTHERAPP_PLUGIN", MagicCookieValue: "otherapp.v7"},
			GRPCServer:      plugin.DefaultGRPCServer,
		})
		return
	}
	forward.Serve(&model{Model: icmf.New()})
}

type model struct {
	*icmf.Model
	fault string
	after int64
	calls atomic.Int64
	// halved is what fault forget's Fit learns and its state omits.
	halved bool
	nodes  int
	// in lists each node's in-neighbours, for fault full.
	in [][]int
}

func (m *model) Info(ctx context.Context) (forward.Info, error) {
	in, err := m.Model.Info(ctx)
	in.Name = "faulty"
	// A file <binary>.version beside it overrides the version: a test's
	// stand-in for the code behind an unchanged binary changing, as a
	// script's does behind its wrapper.
	if exe, xerr := os.Executable(); xerr == nil {
		if v, rerr := os.ReadFile(exe + ".version"); rerr == nil {
			in.Version = strings.TrimSpace(string(v))
		}
	}
	if filepath.Base(os.Args[0]) == "sourcewatch-forward-unstable" {
		// A version made at start, which no relaunch reproduces.
		in.Version = fmt.Sprintf("%s+pid%d", in.Version, os.Getpid())
	}
	if filepath.Base(os.Args[0]) == "sourcewatch-forward-misdefault" {
		// Info's default for steps is not the one Configure uses.
		for i := range in.Params {
			if in.Params[i].Name == "steps" {
				in.Params[i].Default = strconv.Itoa(icmf.DefaultSteps + 1)
			}
		}
	}
	in.Params = append(in.Params,
		forward.Param{Name: "fault", Default: "none", Help: "none, nan, range, grad, corner, full, inf, short, hang, crash, fatal, panic, state, flat, nanmetric, metricname, valsum, forget, fused or lenient"},
		forward.Param{Name: "fault_after", Default: "1", Help: "the first Predict/VJP call that fails"})
	return in, err
}

func (m *model) Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	rest := map[string]string{}
	m.fault, m.after, m.halved = "none", 1, false
	for k, v := range params {
		switch k {
		case "fault":
			switch v {
			case "none", "nan", "range", "grad", "inf", "short", "hang", "crash", "fatal", "panic", "corner", "full", "state", "flat", "nanmetric", "metricname", "valsum", "forget", "fused", "lenient":
				m.fault = v
			default:
				return fmt.Errorf("faulty: param fault=%q: want none, nan, range, grad, corner, full, inf, short, hang, crash, fatal, panic, state, flat, nanmetric, metricname, valsum, forget, fused or lenient", v)
			}
		case "fault_after":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("faulty: param fault_after=%q: want a positive integer", v)
			}
			m.after = int64(n)
		default:
			rest[k] = v
		}
	}
	if m.fault != "none" {
		// Through go-plugin's stdio stream into the host's log.
		fmt.Fprintf(os.Stderr, "faulty: fault %s from call %d\n", m.fault, m.after)
	}
	if m.fault == "lenient" {
		for k := range rest {
			if k != "steps" && k != "p" {
				delete(rest, k)
			}
		}
	}
	m.nodes = g.N()
	m.in = make([][]int, g.N())
	for v := range m.in {
		m.in[v], _ = g.In(v)
	}
	return m.Model.Configure(ctx, g, rest, state)
}

// strike runs the fault if this call is due; it reports whether the answer
// must be corrupted.
func (m *model) strike() bool {
	if m.fault == "none" || m.calls.Add(1) < m.after {
		return false
	}
	switch m.fault {
	case "hang":
		select {}
	case "crash":
		os.Exit(3)
	case "fatal":
		log.Fatalf("faulty: fatal as asked, at call %d", m.calls.Load())
	case "panic":
		_ = outOfRange(m.calls.Load())
	}
	return true
}

// outOfRange panics with an index out of range, as a model's bug would.
func outOfRange(i int64) int64 {
	s := []int64{1, 2, 3}
	return s[i+3]
}

func (m *model) corrupt(y, dx *mat.Dense) (*mat.Dense, *mat.Dense) {
	switch m.fault {
	case "nan":
		y.Set(0, 0, math.NaN())
	case "range":
		y.Set(0, 0, 1.5)
	case "grad":
		if dx != nil {
			r, c := dx.Dims()
			for i := 0; i < r; i++ {
				dx.Set(i, c-1, 2*dx.At(i, c-1))
			}
		}
	case "inf":
		if dx != nil {
			dx.Set(0, 0, math.Inf(1))
		} else {
			y.Set(0, 0, math.Inf(1))
		}
	case "flat":
		y.Apply(func(int, int, float64) float64 { return 1 }, y)
		if dx != nil {
			dx.Zero()
		}
	case "short":
		r, c := y.Dims()
		y = mat.DenseCopyOf(y.Slice(0, r, 0, c-1))
	}
	return y, dx
}

// Fit hangs or crashes like the other calls (it counts as one) and
// otherwise trains icmf.
func (m *model) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	if m.fault == "hang" || m.fault == "crash" || m.fault == "fatal" {
		m.strike()
	}
	res, err := m.Model.Fit(ctx, pairs, opts, progress)
	if err == nil && m.fault == "state" {
		res.State = []byte("unreadable")
	}
	if err == nil && m.fault == "nanmetric" {
		res.Metrics["val_mse"] = math.NaN()
		res.Metrics["train_mse"] = math.NaN()
	}
	if err == nil && m.fault == "metricname" {
		res.Metrics["val\nmse"] = res.Metrics["val_mse"]
	}
	if err == nil && m.fault == "valsum" {
		y, perr := m.Model.Predict(ctx, pairMatrix(opts.Validation, m.nodes, func(p forward.Pair) []int { return p.Sources }))
		if perr != nil {
			return res, perr
		}
		target := pairMatrix(opts.Validation, m.nodes, func(p forward.Pair) []int { return p.Infected })
		var sum float64
		for i := range opts.Validation {
			for v, f := range y.RawRowView(i) {
				sum += (f - target.At(i, v)) * (f - target.At(i, v))
			}
		}
		res.Metrics["val_mse"] = sum / float64(len(opts.Validation))
	}
	if err == nil && m.fault == "forget" {
		m.halved = true
	}
	return res, err
}

func (m *model) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	bad := m.strike()
	y, err := m.Model.Predict(ctx, x)
	if err == nil && m.halved {
		y.Scale(0.5, y)
	}
	if err != nil || !bad {
		return y, err
	}
	y, _ = m.corrupt(y, nil)
	return y, nil
}

func (m *model) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	bad := m.strike()
	y, dx, err := m.Model.VJP(ctx, x, dy)
	if err == nil && m.halved {
		y.Scale(0.5, y)
		dx.Scale(0.5, dx)
	}
	if err != nil || !bad {
		return y, dx, err
	}
	if m.fault == "corner" {
		r, c := x.Dims()
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				if x.At(i, j) == 0 {
					dx.Set(i, j, -dx.At(i, j))
				}
			}
		}
	}
	if m.fault == "full" {
		r, c := x.Dims()
		for i := 0; i < r; i++ {
			for v := 0; v < c; v++ {
				full := x.At(i, v) == 0 && len(m.in[v]) > 0
				for _, u := range m.in[v] {
					full = full && x.At(i, u) == 1
				}
				if full {
					dx.Set(i, v, 2*dx.At(i, v))
				}
			}
		}
	}
	y, dx = m.corrupt(y, dx)
	return y, dx, nil
}

// predictVJP hides model's SquaredErrorVJP, so that the generic one calls
// its Predict and VJP.
type predictVJP struct{ m *model }

func (p predictVJP) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	return p.m.Predict(ctx, x)
}

func (p predictVJP) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	return p.m.VJP(ctx, x, dy)
}

// SquaredErrorVJP is the model's own fused call: Predict then VJP, with
// every fault of theirs, and dx negated under fault fused.
func (m *model) SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, dx, err := forward.SquaredErrorVJP(ctx, predictVJP{m}, x, target)
	if err == nil && m.fault == "fused" && m.calls.Load() >= m.after {
		dx.Scale(-1, dx)
	}
	return y, dx, err
}

// pairMatrix is one row per pair, 1 at the nodes set picks.
func pairMatrix(ps []forward.Pair, n int, set func(forward.Pair) []int) *mat.Dense {
	x := mat.NewDense(len(ps), n, nil)
	for i, p := range ps {
		for _, v := range set(p) {
			x.Set(i, v, 1)
		}
	}
	return x
}
