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
	star := threeStar()
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

// TestForwardFloorObservedCounts checks the floor given the observation
// time against the same star. Held at 2 infected nodes it is 4/27 (above);
// held at 3 every node is infected, so 0. Drawing the target from
// U[0.5, 1] instead needs 2 nodes with probability 1/3 and 3 otherwise, so
// a leaf is infected with probability 1/3·2/3 + 2/3 = 8/9 and the floor is
// (2·8/9·1/9)/3 = 16/243; told the count, the same mixture's floor is
// 1/3·4/27 = 4/81: not knowing the time costs the difference.
func TestForwardFloorObservedCounts(t *testing.T) {
	ctx := context.Background()
	star := threeStar()
	cfg := DefaultConfig()
	cfg.Beta = 0.5
	cfg.ObserveMin, cfg.ObserveMax = 0.5, 1
	sets := [][]int{{0}, {0}, {0}}

	drawn, err := ForwardFloor(ctx, star, cfg, sets, 3000, 5)
	require.NoError(t, err)
	require.InDelta(t, 16.0/243, drawn, 0.008)

	told, err := ForwardFloor(ctx, star, cfg, sets, 3000, 5, ObservedCounts([]int{2, 3, 3}))
	require.NoError(t, err)
	require.InDelta(t, 4.0/81, told, 0.008)

	at2, err := ForwardFloor(ctx, star, cfg, sets, 3000, 5, ObservedCounts([]int{2, 2, 2}))
	require.NoError(t, err)
	require.InDelta(t, 4.0/27, at2, 0.01)

	at3, err := ForwardFloor(ctx, star, cfg, sets, 50, 5, ObservedCounts([]int{3, 3, 3}))
	require.NoError(t, err)
	require.Zero(t, at3)

	again, err := ForwardFloor(ctx, star, cfg, sets, 3000, 5, ObservedCounts([]int{2, 3, 3}), Workers(1))
	require.NoError(t, err)
	require.Equal(t, told, again, "same inputs, same estimate, whatever the workers")
}

// threeStar is centre 0 with leaves 1 and 2.
func threeStar() *graph.Graph {
	return graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 0, To: 2}}, nil, false, false)
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

	_, err = ForwardFloor(ctx, g, cfg, [][]int{{0}, {1}}, 8, 1, ObservedCounts([]int{5}))
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "1 observed counts for 2 source sets")
	_, err = ForwardFloor(ctx, g, cfg, [][]int{{0}, {1}}, 8, 1, ObservedCounts([]int{5, 35}))
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "source set 1: observed count 35 outside 1..34")
	_, err = ForwardFloor(ctx, g, cfg, [][]int{{0}}, 8, 1, ObservedCounts([]int{0}))
	require.ErrorContains(t, err, "observed count 0")

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
