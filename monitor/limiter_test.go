package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLogLimiterReportsWhatItHeldBack(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	now := time.Unix(1000, 0)
	l := newLogLimiter(10*time.Second, func() time.Time { return now }, zap.New(core))
	suppressed := func(e observer.LoggedEntry) int64 { return e.ContextMap()["suppressed"].(int64) }

	for range 4 {
		l.warn("ack.g", "ack failed")
	}
	l.warn("other", "something else")
	require.Equal(t, 2, logs.Len(), "one line per kind within the interval")

	l.flush(false)
	require.Equal(t, 2, logs.Len(), "nothing is reported before the interval has passed")

	now = now.Add(11 * time.Second)
	l.flush(false)
	require.Equal(t, 3, logs.Len())
	last := logs.All()[2]
	require.Equal(t, "ack.g", last.ContextMap()["kind"])
	require.EqualValues(t, 3, suppressed(last))
	require.Contains(t, last.Message, "ack failed")

	l.flush(false)
	require.Equal(t, 3, logs.Len(), "a held-back count is reported once")

	// A line after the flush starts a new interval with nothing held.
	l.warn("ack.g", "ack failed")
	require.Equal(t, 4, logs.Len())
	require.EqualValues(t, 0, suppressed(logs.All()[3]))

	// At shutdown everything held is reported, interval passed or not.
	l.warn("ack.g", "ack failed")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.flushLoop(ctx)
	require.Equal(t, 5, logs.Len())
	require.EqualValues(t, 1, suppressed(logs.All()[4]))
}
