package deepis

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
)

// FuzzConfigureState configures the model with a state blob, as a
// bundle's forward/state.bin reaches it: refused or usable, never a panic
// or an allocation the graph does not call for.
func FuzzConfigureState(f *testing.F) {
	g := randomGraph(10, 8, false, false, 3)
	for _, params := range []map[string]string{{"hidden": "4", "hops": "1"}, {"hidden": "3", "gate": "on", "layers": "1"}} {
		m := New()
		if err := m.Configure(f.Context(), g, params, nil); err != nil {
			f.Fatal(err)
		}
		state, err := encodeState(g, m.nt)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(state)
		f.Add(state[:len(state)-5])
		f.Add(state[:60])
	}
	f.Fuzz(func(t *testing.T, state []byte) {
		m := New(Workers(1))
		if err := m.Configure(t.Context(), g, nil, state); err != nil {
			return
		}
		x := mat.NewDense(1, g.N(), nil)
		x.Set(0, 0, 1)
		if _, err := m.Predict(t.Context(), x); err != nil {
			t.Fatalf("a state Configure took cannot predict: %v", err)
		}
	})
}

// A state whose header asks for a network larger than its bytes can hold
// is refused before the network is built: 112 bytes used to allocate
// 1.8 GB (hidden 4096, 8 layers) before the parameter stream was found
// truncated.
func TestStateHeaderCannotOutgrowItsBytes(t *testing.T) {
	g := randomGraph(10, 8, false, false, 3)
	var b bytes.Buffer
	b.WriteString(stateMagic)
	u32 := func(v int) { b.Write(binary.LittleEndian.AppendUint32(nil, uint32(v))) }
	u32(stateVersion)
	fp := g.Fingerprint()
	u32(len(fp))
	b.WriteString(fp)
	for _, v := range []int{g.N(), 16, 64, 4096, 8} {
		u32(v)
	}
	b.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.5)))
	u32(0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := New().Configure(t.Context(), g, nil, b.Bytes())
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, forward.ErrBadState)
	require.ErrorContains(t, err, "bytes of parameters for an architecture")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "bytes allocated refusing a 112-byte state")

	// The count is exact: it is what newNet's parameters hold.
	for _, a := range []arch{{Hops: 2, Hidden: 5, Layers: 2, P: 0.5}, {Hops: 0, Hidden: 3, Layers: 0, P: 1, Gate: true}, {Hops: 16, Hidden: 7, Layers: 8, P: 0.1}} {
		nt := newNet(g, a, rand.New(rand.NewPCG(1, 0)))
		n := 0
		for _, p := range nt.params {
			n += len(p.Value)
		}
		require.Equal(t, n, paramFloats(a), "%+v", a)
	}
}
