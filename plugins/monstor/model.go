package monstor

import (
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// Name and Version identify the model in Info and in its state blobs.
const (
	Name    = "monstor"
	Version = "1.0.0"
)

// Arch is the architecture of the network; it is stored in the state blob.
type Arch struct {
	// Stacks is the number of stacked 2-layer GCN blocks (the paper: 3).
	Stacks int `json:"stacks"`
	// Hidden is the width of each block's hidden layer.
	Hidden int `json:"hidden"`
}

// DefaultArch is the paper's setup, 3 stacks, with 32 hidden units.
func DefaultArch() Arch { return Arch{Stacks: 3, Hidden: 32} }

// Validate reports an architecture that cannot be built.
func (a Arch) Validate() error {
	switch {
	case a.Stacks < 1 || a.Stacks > 16:
		return fmt.Errorf("stacks %d: want 1..16", a.Stacks)
	case a.Hidden < 1 || a.Hidden > 1024:
		return fmt.Errorf("hidden %d: want 1..1024", a.Hidden)
	}
	return nil
}

// Training defaults used where FitOptions leaves a zero value.
const (
	DefaultEpochs       = 60
	DefaultLearningRate = 1e-2
	DefaultBatchSize    = 16
	DefaultLambda       = 1.0
	DefaultPatience     = 8
)

var params = []forward.Param{
	{Name: "stacks", Default: "3", Help: "stacked 2-layer GCN blocks, each refining the previous one's estimate"},
	{Name: "hidden", Default: "32", Help: "hidden units of each block"},
	{Name: "patience", Default: strconv.Itoa(DefaultPatience), Help: "epochs without validation improvement before Fit stops early"},
}

// stateVersion is bumped whenever the layout or the meaning of a
// parameter changes. 2: root weights.
const stateVersion = 2

// spec ties the network to the shared model, training and state code.
var spec = &gnn.Spec[Arch, *network]{
	Name: Name, Version: Version, StateVersion: stateVersion, Params: params,
	ArchFields:  func(a *Arch) map[string]*int { return map[string]*int{"stacks": &a.Stacks, "hidden": &a.Hidden} },
	DefaultArch: DefaultArch, NewNetwork: newNetwork,
	Defaults: gnn.Defaults{Epochs: DefaultEpochs, LearningRate: DefaultLearningRate, BatchSize: DefaultBatchSize, Lambda: DefaultLambda, Patience: DefaultPatience},
}

// Model is the MONSTOR-style stacked GCN forward model. Info, Configure,
// Fit, Predict and VJP are gnn.Model's (see there for the training loss);
// it implements forward.Model in-process and is safe for concurrent use
// (calls are serialised).
type Model struct {
	*gnn.Model[Arch, *network]
}

var _ forward.Model = (*Model)(nil)

// Option configures a Model.
type Option func(*Model)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(m *Model) { m.SetLogger(l) } }

// New returns an unconfigured Model.
func New(opts ...Option) *Model {
	m := &Model{gnn.NewModel(spec)}
	for _, o := range opts {
		o(m)
	}
	return m
}
