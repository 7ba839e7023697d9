package main

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Off the terminal, progress draws nothing and logs on its own clock,
// whether or not the work reports, until Done; on it, it draws the bar
// and logs nothing.
func TestProgressOffTerminalLogsOnItsOwnClock(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var out bytes.Buffer
	p := newProgress(&out, false, zap.New(core), "eval", 100, 20*time.Millisecond)
	p.Set(3, "slvae")
	// The lines logged after the Set: the heartbeat runs from
	// newProgress, so a tick 20 ms in can come before the Set on a loaded
	// machine, and the first line then has nothing done.
	afterSet := func() []observer.LoggedEntry {
		return slices.DeleteFunc(logs.All(), func(e observer.LoggedEntry) bool { return e.ContextMap()["done"] != int64(3) })
	}
	require.Eventually(t, func() bool { return len(afterSet()) >= 2 }, 5*time.Second, 5*time.Millisecond,
		"a line each period with no Set in between")
	p.Done()
	p.Done() // idempotent, as train calls it
	n := logs.Len()
	time.Sleep(60 * time.Millisecond)
	require.Equal(t, n, logs.Len(), "nothing after Done")
	require.Empty(t, out.String(), "no bar off the terminal")
	e := afterSet()[0]
	require.Equal(t, "eval: progress", e.Message)
	require.Equal(t, int64(3), e.ContextMap()["done"])
	require.Equal(t, "slvae", e.ContextMap()["at"])
	require.Contains(t, e.ContextMap(), "eta", "3 of 100 done: the rest at the pace so far")

	// 99 of 100 done after 10 s, and the last unit has run 990 s: no eta
	// of a tenth of a second, but how long the unit under way has run.
	core, logs = observer.New(zap.InfoLevel)
	p = newProgress(&out, false, zap.New(core), "eval", 100, 20*time.Millisecond)
	p.mu.Lock()
	t0 := p.start
	at := t0.Add(10 * time.Second)
	p.nowFunc = func() time.Time { return at }
	p.mu.Unlock()
	p.Set(99, "fit slvae[gat]")
	p.mu.Lock()
	at = t0.Add(1000 * time.Second)
	p.mu.Unlock()
	n = logs.Len()
	require.Eventually(t, func() bool { return logs.Len() >= n+2 }, 5*time.Second, 5*time.Millisecond)
	p.Done()
	last := logs.All()[logs.Len()-1].ContextMap()
	require.NotContains(t, last, "eta")
	require.Equal(t, 990*time.Second, last["current_unit"])

	// No note, no empty "at"; nothing done yet, no guess at the rest.
	core, logs = observer.New(zap.InfoLevel)
	p = newProgress(&out, false, zap.New(core), "train", 10, 20*time.Millisecond)
	require.Eventually(t, func() bool { return logs.Len() >= 1 }, 5*time.Second, 5*time.Millisecond)
	p.Done()
	require.NotContains(t, logs.All()[0].ContextMap(), "at")
	require.NotContains(t, logs.All()[0].ContextMap(), "eta")

	core, logs = observer.New(zap.InfoLevel)
	out.Reset()
	p = newProgress(&out, true, zap.New(core), "eval", 100, 20*time.Millisecond)
	p.Set(3, "slvae")
	time.Sleep(60 * time.Millisecond)
	p.Done()
	require.Zero(t, logs.Len())
	require.Contains(t, out.String(), "eval [")

	// A revised total is drawn, not done/old-total.
	out.Reset()
	p = newProgress(&out, true, nil, "train forward", 5, time.Minute)
	p.SetTotal(60)
	p.Set(60, "")
	p.Done()
	require.Contains(t, out.String(), " 60/60 ")
	require.NotContains(t, out.String(), "/5 ")
}

// A plugin's Fit reports feed the bar as they are: a negative epoch, or
// a total revised below zero, draws an empty bar instead of panicking in
// strings.Repeat (train and plugin check on a terminal died of it).
func TestProgressBarTakesNegativeCounts(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, true, nil, "train forward", 5, time.Minute)
	require.NotPanics(t, func() {
		p.Set(-1, "")
		p.SetTotal(-3)
		p.Set(2, "")
		p.SetTotal(4)
		p.Set(-7, "")
		p.Done()
	})
	require.Contains(t, out.String(), "train forward [                              ] -7/4")
}
