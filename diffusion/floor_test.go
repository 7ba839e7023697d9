package diffusion

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func TestForwardFloor(t *testing.T) {
	ctx := context.Background()
	// A star: centre 0, leaves 1 and 2. With 2 of 3 nodes needed, the
	// snapshot is the first step at which a leaf is infected; with beta
	// 1/2 both, only 1 and only 2 are equally likely, so p = (1, 2/3, 2/3)
	// and the floor is (0 + 2/9 + 2/9) / 3 = 4/27.
	star := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 0, To: 2}}, nil, false, false)
	cfg := DefaultConfig()
	cfg.Beta = 0.5
	cfg.ObserveMin, cfg.ObserveMax = 0.5, 0.5
	floor, err := ForwardFloor(ctx, star, cfg, [][]int{{0}, {0}, {0}, {0}}, 2000, 3)
	require.NoError(t, err)
	require.InDelta(t, 4.0/27, floor, 0.01)

	again, err := ForwardFloor(ctx, star, cfg, [][]int{{0}, {0}, {0}, {0}}, 2000, 3, Workers(1))
	require.NoError(t, err)
	require.Equal(t, floor, again, "same inputs, same estimate, whatever the workers")

	// With beta 1 the spread is deterministic: nothing to be uncertain of.
	cfg.Beta = 1
	floor, err = ForwardFloor(ctx, loadKarate(t), cfg, [][]int{{0, 5}, {33}}, 50, 3)
	require.NoError(t, err)
	require.Zero(t, floor)
}

func TestForwardFloorErrors(t *testing.T) {
	ctx := context.Background()
	g := loadKarate(t)
	cfg := DefaultConfig()
	_, err := ForwardFloor(ctx, g, cfg, [][]int{{0}}, 1, 1)
	require.ErrorIs(t, err, ErrConfig)
	_, err = ForwardFloor(ctx, g, cfg, [][]int{{0}, {34}}, 8, 1)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "node 34")

	// An isolated source can never infect half of the graph.
	lonely := graph.New(4, []graph.Edge{{From: 1, To: 2}, {From: 2, To: 3}}, nil, false, false)
	cfg.ObserveMin, cfg.ObserveMax = 0.5, 0.5
	cfg.MaxRedraws = 3
	_, err = ForwardFloor(ctx, lonely, cfg, [][]int{{0}}, 4, 1)
	require.ErrorIs(t, err, ErrUnreachable)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ForwardFloor(cancelled, g, DefaultConfig(), [][]int{{0}, {1}}, 8, 1)
	require.ErrorIs(t, err, context.Canceled)
}
