package forward

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// A message over the protocol's limit is explained by what the call
// sends: a batch's rows, or the state Fit returns and Configure takes.
func TestSizeRefusalSaysWhatToShrink(t *testing.T) {
	refused := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (300000000 vs. 268435456)")
	for _, tc := range []struct{ op, want string }{
		{"vjp", "fewer rows per call, or a smaller graph"},
		{"fit", "Fit's state (the model's weights, sent back whole) must be smaller"},
		{"configure", "the state Configure is given (the model's weights) must be smaller"},
	} {
		p := &Process{name: "sourcewatch-forward-big"}
		err := p.callError(t.Context(), t.Context(), tc.op, time.Minute, refused)
		require.ErrorContains(t, err, "forward plugin sourcewatch-forward-big: "+tc.op+": ResourceExhausted")
		require.ErrorContains(t, err, "over the 256 MiB the protocol allows: "+tc.want)
	}
}
