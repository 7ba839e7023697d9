package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCtxMutexWaiterGivesUp(t *testing.T) {
	var m ctxMutex
	require.NoError(t, m.lock(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.lock(ctx), context.DeadlineExceeded, "held: the waiter gives up at its deadline")
	m.unlock()
	require.NoError(t, m.lock(t.Context()), "released: the next one takes it")
	m.unlock()
}
