// Package faulty wraps the icmf model with one injected fault, for the
// host's lifecycle tests: the test plugins nan, hang, crash and short are
// each a main around it. The fault strikes from the Nth Predict or VJP
// call of the process on (param fault_after, default 1); counting starts
// afresh in every process, so a relaunched plugin behaves like a new one.
package faulty

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync/atomic"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

// Fault is what goes wrong.
type Fault string

const (
	NaN   Fault = "nan"   // a NaN in y
	Hang  Fault = "hang"  // never answers, ignoring its context
	Crash Fault = "crash" // the process exits with status 3
	Short Fault = "short" // y has one column too few
)

// Model is icmf with a fault.
type Model struct {
	*icmf.Model
	fault Fault
	after int64
	calls atomic.Int64
}

// New returns a model with the given fault.
func New(f Fault) *Model { return &Model{Model: icmf.New(), fault: f, after: 1} }

func (m *Model) Info(ctx context.Context) (forward.Info, error) {
	in, err := m.Model.Info(ctx)
	in.Name = "faulty-" + string(m.fault)
	in.Params = append(in.Params, forward.Param{Name: "fault_after", Default: "1", Help: "the first Predict/VJP call that fails"})
	return in, err
}

func (m *Model) Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	rest := map[string]string{}
	m.after = 1
	for k, v := range params {
		if k == "fault_after" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("faulty: param fault_after=%q: want a positive integer", v)
			}
			m.after = int64(n)
			continue
		}
		rest[k] = v
	}
	return m.Model.Configure(ctx, g, rest, state)
}

// strike runs the fault if this call is due; it reports whether y must be
// corrupted.
func (m *Model) strike() bool {
	if m.calls.Add(1) < m.after {
		return false
	}
	switch m.fault {
	case Hang:
		select {}
	case Crash:
		os.Exit(3)
	}
	return true
}

func (m *Model) corrupt(y *mat.Dense) *mat.Dense {
	switch m.fault {
	case NaN:
		y.Set(0, 0, math.NaN())
	case Short:
		r, c := y.Dims()
		return mat.DenseCopyOf(y.Slice(0, r, 0, c-1))
	}
	return y
}

func (m *Model) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	bad := m.strike()
	y, err := m.Model.Predict(ctx, x)
	if err != nil || !bad {
		return y, err
	}
	return m.corrupt(y), nil
}

func (m *Model) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	bad := m.strike()
	y, dx, err := m.Model.VJP(ctx, x, dy)
	if err != nil || !bad {
		return y, dx, err
	}
	return m.corrupt(y), dx, nil
}
