package forward

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/stretchr/testify/require"
)

// Info crosses the wire whole: a plugin's params reach the host, which
// checks a fit's params against them (UnknownParam).
func TestInfoCrossesTheWireWhole(t *testing.T) {
	in := Info{Name: "icmf", Version: "1.2.0", Trainable: true, Params: []Param{
		{Name: "epochs", Default: "30", Help: "passes over the pairs"},
		{Name: "lr", Default: "0.01", Help: "step size"},
	}}
	require.Equal(t, in, infoFromProto(infoToProto(in)))
	require.Equal(t, Info{Name: "x"}, infoFromProto(infoToProto(Info{Name: "x"})))
}

// checkFinite finds the first NaN, +Inf or -Inf in row-major order.
func TestCheckFinite(t *testing.T) {
	_, _, bad := checkFinite(mat.NewDense(2, 2, []float64{0, 1, -1e308, 1e308}))
	require.False(t, bad)
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		i, j, bad := checkFinite(mat.NewDense(2, 3, []float64{0, 1, 2, 3, v, v}))
		require.True(t, bad, "%v", v)
		require.Equal(t, [2]int{1, 1}, [2]int{i, j}, "%v", v)
		i, j, bad = checkFinite(mat.NewDense(2, 3, []float64{0, 1, v, 3, 4, 5}))
		require.True(t, bad, "%v", v)
		require.Equal(t, [2]int{0, 2}, [2]int{i, j}, "%v", v)
	}
}
