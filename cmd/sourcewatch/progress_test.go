package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Off the terminal, progress draws nothing and logs one line a minute
// while the work lasts; on it, it draws the bar and logs nothing.
func TestProgressOffTerminalLogsAMinuteApart(t *testing.T) {
	start := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	now := start
	for _, terminal := range []bool{false, true} {
		core, logs := observer.New(zap.InfoLevel)
		var out bytes.Buffer
		a := &app{stderr: &out, terminal: terminal, log: zap.New(core)}
		p := a.progress("eval", 100)
		p.start, p.nowFunc = start, func() time.Time { return now }
		if !terminal {
			p.lastAt = start
		}
		for i, at := range []time.Duration{10 * time.Second, 59 * time.Second, 61 * time.Second, 90 * time.Second, 122 * time.Second} {
			now = start.Add(at)
			p.Set(i+1, "slvae")
		}
		p.Done()
		if terminal {
			require.Empty(t, logs.All())
			require.Contains(t, out.String(), "eval [")
			continue
		}
		require.Empty(t, out.String(), "no bar off the terminal")
		entries := logs.All()
		require.Len(t, entries, 2, "at 61 s and 122 s")
		require.Equal(t, "eval: progress", entries[0].Message)
		require.Equal(t, map[string]any{"done": int64(3), "total": int64(100), "elapsed": 61 * time.Second, "at": "slvae"}, entries[0].ContextMap())
		require.Equal(t, int64(5), entries[1].ContextMap()["done"])
	}
}
