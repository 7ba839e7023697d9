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

// Info.Validate names every problem a host refuses, and only those.
func TestInfoValidate(t *testing.T) {
	ok := Info{Name: "icmf", Version: "1.0.0", Params: []Param{{Name: "a"}, {Name: "b"}}}
	require.NoError(t, ok.Validate())
	require.NoError(t, Info{Name: "x", Version: "1"}.Validate())
	for _, tc := range []struct {
		name string
		in   Info
		want string
	}{
		{"no name", Info{Version: "1"}, "empty name"},
		{"no version", Info{Name: "x"}, "empty version"},
		{"a param without name", Info{Name: "x", Version: "1", Params: []Param{{Name: "a"}, {}}}, `param name "" empty or repeated`},
		{"a param twice", Info{Name: "x", Version: "1", Params: []Param{{Name: "a"}, {Name: "b"}, {Name: "a"}}}, `param name "a" empty or repeated`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			require.ErrorIs(t, err, ErrBadInfo)
			require.ErrorContains(t, err, tc.want)
		})
	}
	err := Info{}.Validate()
	require.ErrorContains(t, err, "empty name (set Info.Name); empty version")
}

// A metric name is not empty and holds no space or control character,
// wherever it is.
func TestCheckMetricName(t *testing.T) {
	for _, ok := range []string{"mse", "held_out.mse", "é"} {
		require.NoError(t, CheckMetricName(ok), ok)
	}
	for _, bad := range []string{"", " mse", "mse ", "m se", "m\tse", "\x01mse", "mse\n"} {
		require.ErrorContains(t, CheckMetricName(bad), "want a name that is not empty", "%q", bad)
	}
}

// squaredErrors per row, against one target row for all or one per row;
// by hand: y = [[1 2] [3 4]], target [0 1]: 1+1, 9+9; target [[1 1] [0 0]]:
// 0+1, 9+16.
func TestSquaredErrors(t *testing.T) {
	y := mat.NewDense(2, 2, []float64{1, 2, 3, 4})
	require.Equal(t, []float64{2, 18}, squaredErrors(y, mat.NewDense(1, 2, []float64{0, 1})))
	require.Equal(t, []float64{1, 25}, squaredErrors(y, mat.NewDense(2, 2, []float64{1, 1, 0, 0})))
}
