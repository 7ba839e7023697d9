package forward

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The check's perturbed points per call fit in a message on any graph:
// 158,730 nodes at 512 rows made a 650 MB request the gRPC limit refused.
func TestCheckRowsFitAMessage(t *testing.T) {
	for _, n := range []int{1, 34, 2000, 8192, 158730, 2_000_001} {
		rows := checkRows(n)
		require.GreaterOrEqual(t, rows, 2, "n=%d", n)
		require.LessOrEqual(t, rows, maxCheckRows, "n=%d", n)
		require.Zero(t, rows%2, "n=%d: points come in pairs", n)
		require.LessOrEqual(t, rows*n*8, max(maxCheckBytes, 2*n*8), "n=%d", n)
	}
	require.Equal(t, maxCheckRows, checkRows(34), "small graphs keep the full batch")
}

// gRPC's refusal of a message over the protocol's own limit is told
// apart from a plugin's smaller one.
func TestSizeRefusal(t *testing.T) {
	m := sizeRefusal.FindStringSubmatch("grpc: received message larger than max (650158099 vs. 268435456)")
	require.Equal(t, []string{"(650158099 vs. 268435456)", "650158099", strconv.Itoa(MaxMessageBytes)}, m)
}
