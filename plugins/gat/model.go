package gat

import (
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// Name and Version identify the model in Info and in its state blobs.
const (
	Name    = "gat"
	Version = "1.0.0"
)

// Arch is the architecture of the network; it is stored in the state blob.
type Arch struct {
	// Heads and HeadDim shape the first attention layer (the paper: 8 x 8).
	Heads   int `json:"heads"`
	HeadDim int `json:"head_dim"`
	// Hops is the number of multi-hop source-count features.
	Hops int `json:"hops"`
}

// DefaultArch is the paper's setup: 8 heads of 8 dimensions, plus 2 hops
// of source-count features.
func DefaultArch() Arch { return Arch{Heads: 8, HeadDim: 8, Hops: 2} }

// Validate reports an architecture that cannot be built.
func (a Arch) Validate() error {
	switch {
	case a.Heads < 1 || a.Heads > 64:
		return fmt.Errorf("heads %d: want 1..64", a.Heads)
	case a.HeadDim < 1 || a.HeadDim > 256:
		return fmt.Errorf("head_dim %d: want 1..256", a.HeadDim)
	case a.Hops < 0 || a.Hops > 16:
		return fmt.Errorf("hops %d: want 0..16", a.Hops)
	}
	return nil
}

// Training defaults used where FitOptions leaves a zero value.
const (
	DefaultEpochs       = 60
	DefaultLearningRate = 5e-3
	DefaultBatchSize    = 16
	DefaultLambda       = 1.0
	DefaultPatience     = 8
)

var params = []forward.Param{
	{Name: "heads", Default: "8", Help: "attention heads of the first layer"},
	{Name: "head_dim", Default: "8", Help: "dimensions per head of the first layer"},
	{Name: "hops", Default: "2", Help: "multi-hop source-count input features log(1 + ((A+I)^k x)_v), k = 1..hops"},
	{Name: "patience", Default: strconv.Itoa(DefaultPatience), Help: "epochs without validation improvement before Fit stops early"},
}

// stateVersion is bumped whenever the layout or the meaning of a
// parameter changes. 2: skip connections.
const stateVersion = 2

// spec ties the network to the shared model, training and state code.
var spec = &gnn.Spec[Arch, *network]{
	Name: Name, Version: Version, StateVersion: stateVersion, Params: params,
	ArchFields: func(a *Arch) map[string]*int {
		return map[string]*int{"heads": &a.Heads, "head_dim": &a.HeadDim, "hops": &a.Hops}
	},
	DefaultArch: DefaultArch, NewNetwork: newNetwork,
	Defaults: gnn.Defaults{Epochs: DefaultEpochs, LearningRate: DefaultLearningRate, BatchSize: DefaultBatchSize, Lambda: DefaultLambda, Patience: DefaultPatience},
}

// Model is the GAT forward model. Info, Configure, Fit, Predict and VJP
// are gnn.Model's (see there for the training loss); it implements
// forward.Model in-process and is safe for concurrent use (calls are
// serialised).
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
