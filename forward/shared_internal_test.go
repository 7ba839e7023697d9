package forward

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
	"github.com/sourcewatch/sourcewatch/graph"
)

func TestSharedLayout(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		rows, cols, targetRows int
		dxOff, size            int
		ok                     bool
	}{
		{"broadcast target", 8, 10, 1, 8*8*10 + 8*10, 8 * 10 * 17, true},
		{"per-row target", 2, 3, 2, 96, 144, true},
		{"no rows", 0, 3, 1, 0, 0, false},
		{"too large", 1 << 20, 1 << 20, 1, 0, 0, false},
		{"would overflow", 1 << 31, 1 << 31, 1 << 31, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xOff, _, dxOff, size, ok := sharedLayout(tc.rows, tc.cols, tc.targetRows)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Zero(t, xOff)
				require.Equal(t, tc.dxOff, dxOff)
				require.Equal(t, tc.size, size)
			}
		})
	}
}

// doubler is f(x) = 2x, enough to see where the server reads and writes.
type doubler struct{}

func (doubler) Info(context.Context) (Info, error) { return Info{Name: "doubler"}, nil }
func (doubler) Configure(context.Context, *graph.Graph, map[string]string, []byte) error {
	return nil
}
func (doubler) Fit(context.Context, []Pair, FitOptions, func(Progress)) (FitResult, error) {
	return FitResult{}, nil
}
func (doubler) Predict(_ context.Context, x *mat.Dense) (*mat.Dense, error) {
	var y mat.Dense
	y.Scale(2, x)
	return &y, nil
}
func (d doubler) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, _ := d.Predict(ctx, x)
	var dx mat.Dense
	dx.Scale(2, dy)
	return y, &dx, nil
}

// The plugin side of the region: it maps what the host grew (a second
// mapping of the same memory file), answers in it, and refuses batches
// that do not fit the graph or the region.
func TestServerSharedBatch(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	host, err := newHostShared()
	require.NoError(t, err)
	defer host.region.close()
	s := &server{m: doubler{}, n: 3, shared: &sharedRegion{file: host.region.file}}
	defer func() {
		if s.shared.mem != nil {
			_ = unmapShared(s.shared.mem)
		}
	}()
	info, err := s.Info(t.Context(), &forwardpb.InfoRequest{})
	require.NoError(t, err)
	require.True(t, info.GetSharedMemory())

	x := mat.NewDense(2, 3, []float64{0, 0.5, 1, 1, 0.25, 0})
	target := mat.NewDense(1, 3, []float64{1, 1, 0})
	xOff, targetOff, dxOff, size, ok := sharedLayout(2, 3, 1)
	require.True(t, ok)
	mem, err := host.region.grow(size)
	require.NoError(t, err)
	putDense(mem, xOff, x)
	putDense(mem, targetOff, target)
	resp, err := s.SquaredErrorVJP(t.Context(), &forwardpb.SquaredErrorVJPRequest{
		LossOnly: true, Shared: &forwardpb.SharedBatch{Rows: 2, Cols: 3, TargetRows: 1}})
	require.NoError(t, err)
	require.True(t, resp.GetDxShared())
	require.Nil(t, resp.GetDx())
	// y = 2x; loss = ||y - target||^2; dx = 2 * 2 (y - target).
	require.Equal(t, []float64{1 + 0 + 4, 1 + 0.25 + 0}, resp.GetLoss())
	require.Equal(t, []float64{-4, 0, 8, 4, -2, 0}, denseAt(mem, dxOff, 2, 3).RawMatrix().Data)

	for _, tc := range []struct {
		name     string
		sh       *forwardpb.SharedBatch
		want     string
		sentinel error
	}{
		{"wrong columns", &forwardpb.SharedBatch{Rows: 2, Cols: 4, TargetRows: 1}, "4 columns for a 3-node graph", ErrBadMessage},
		{"wrong target rows", &forwardpb.SharedBatch{Rows: 2, Cols: 3, TargetRows: 3}, "3 target rows for 2 rows of x", ErrBadMessage},
		// What the plugin could not map: it says so, and the host resends.
		{"larger than the region", &forwardpb.SharedBatch{Rows: 1000, Cols: 3, TargetRows: 1}, "the region holds", ErrSharedMemory},
		{"absurd", &forwardpb.SharedBatch{Rows: 1 << 31, Cols: 3, TargetRows: 1}, "does not fit the region", ErrBadMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SquaredErrorVJP(t.Context(), &forwardpb.SquaredErrorVJPRequest{Shared: tc.sh})
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, tc.sentinel.Error())
		})
	}

	without := &server{m: doubler{}, n: 3}
	_, err = without.SquaredErrorVJP(t.Context(), &forwardpb.SquaredErrorVJPRequest{
		Shared: &forwardpb.SharedBatch{Rows: 2, Cols: 3, TargetRows: 1}})
	require.ErrorContains(t, err, "this plugin has no shared memory region")
	require.ErrorContains(t, err, ErrSharedMemory.Error())
}
