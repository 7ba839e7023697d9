package monstor

import (
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn/gnntest"
)

// FuzzConfigureState configures the model (through the shared gnn state
// decoder) with a state blob, as a bundle's forward/state.bin reaches it:
// refused or usable, never a panic.
func FuzzConfigureState(f *testing.F) {
	g := gnntest.RandomGraph(10, 18, false, false, 1)
	for _, a := range []Arch{{Stacks: 1, Hidden: 3}, {Stacks: 2, Hidden: 2}} {
		state, err := spec.EncodeState(spec.NewNetwork(g, a, 1), g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(state)
		f.Add(state[:len(state)-3])
	}
	f.Fuzz(func(t *testing.T, state []byte) {
		m := New()
		if err := m.Configure(t.Context(), g, nil, state); err != nil {
			return
		}
		x := mat.NewDense(1, g.N(), nil)
		x.Set(0, 1, 1)
		if _, err := m.Predict(t.Context(), x); err != nil {
			t.Fatalf("a state Configure took cannot predict: %v", err)
		}
	})
}
