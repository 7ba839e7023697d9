package forward

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestZapHCLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	root := newZapHCLog(zap.New(core))
	root.Info("plugin started", "pid", 7)
	child := root.Named("sourcewatch-forward-x").With("k", "v")
	child.Info("from the plugin", "n", 1, "odd")
	child.Log(hclog.Trace, "trace")
	child.Log(hclog.Off, "never")

	all := logs.All()
	require.Len(t, all, 3)
	require.Equal(t, zapcore.DebugLevel, all[0].Level, "go-plugin's own Info is demoted")
	require.EqualValues(t, 7, all[0].ContextMap()["pid"])
	require.Equal(t, zapcore.InfoLevel, all[1].Level, "the plugin's Info stays Info")
	require.Equal(t, "sourcewatch-forward-x", all[1].LoggerName)
	require.Equal(t, map[string]any{"k": "v", "n": int64(1), "EXTRA_VALUE_AT_END": "odd"}, all[1].ContextMap())
	require.Equal(t, zapcore.DebugLevel, all[2].Level)
	require.Equal(t, "sourcewatch-forward-x", child.Name())
	require.Equal(t, []any{"k", "v"}, child.ImpliedArgs())
	require.Equal(t, hclog.Trace, child.GetLevel())

	quiet, _ := observer.New(zapcore.WarnLevel)
	require.Equal(t, hclog.Warn, newZapHCLog(zap.New(quiet)).GetLevel())
	require.Equal(t, hclog.Off, newZapHCLog(zap.NewNop()).GetLevel())
}

func TestLineLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := &lineLog{z: zap.New(core)}
	for _, chunk := range []string{"first li", "ne\nsecond\r\n", "\n", "third"} {
		n, err := l.Write([]byte(chunk))
		require.NoError(t, err)
		require.Equal(t, len(chunk), n)
	}
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	require.Equal(t, []string{"first line", "second"}, msgs, "blank lines dropped, the unfinished line waits")
}

// A plugin's output cannot flood the host's log: a line is cut short, and
// past the minute's budget lines are counted, not logged, and the count
// is said at the first line after the minute.
func TestLineLogBoundsAPluginsOutput(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	now := time.Unix(1000, 0)
	l := &lineLog{z: zap.New(core), budget: &outputBudget{z: zap.New(core), now: func() time.Time { return now }}}
	_, _ = l.Write([]byte("a" + strings.Repeat("é", 3000) + "\n")) // 6,001 bytes, the cut inside an é
	require.Equal(t, 1, logs.Len())
	line := logs.All()[0].Message
	require.True(t, utf8.ValidString(line))
	require.True(t, strings.HasSuffix(line, " ... (1905 bytes cut)"), line[len(line)-40:])
	require.LessOrEqual(t, len(line), pluginLineBytes+32)

	chunk := strings.Repeat("x", 1000) + "\n"
	for range 2000 { // 2 MB within the minute
		_, _ = l.Write([]byte(chunk))
	}
	logged := logs.FilterMessageSnippet("xxxx").Len()
	require.Less(t, logged, 1100, "about 1 MiB logged")
	require.Greater(t, logged, 1000)
	require.Equal(t, 1, logs.FilterMessageSnippet("lines are held back").Len())

	now = now.Add(time.Minute)
	_, _ = l.Write([]byte("next minute\n"))
	held := logs.FilterMessage("plugin output held back").All()
	require.Len(t, held, 1)
	require.EqualValues(t, 2000-logged, held[0].ContextMap()["lines"])
	require.EqualValues(t, 1000*(2000-logged), held[0].ContextMap()["bytes"])
	require.Equal(t, 1, logs.FilterMessage("next minute").Len())

	// Held back and then quiet (the process closed): flush says so.
	for range 1100 {
		_, _ = l.Write([]byte(chunk))
	}
	l.budget.flush()
	held = logs.FilterMessage("plugin output held back").All()
	require.Len(t, held, 2)
	require.Positive(t, held[1].ContextMap()["lines"])
	l.budget.flush()
	require.Len(t, logs.FilterMessage("plugin output held back").All(), 2, "said once")

	// A line of the plugin's own stderr, through go-plugin's hclog, too.
	newZapHCLog(zap.New(core)).Named("sourcewatch-forward-x").Warn(strings.Repeat("y", 10000))
	require.Equal(t, 1, logs.FilterMessageSnippet(" ... (5904 bytes cut)").Len())
}

// The lines of a plugin's own stderr, which go-plugin logs through the
// hclog logger's named children, share the process's budget with its
// streams, and their field values are cut as lines are; go-plugin's own
// lines on the root are not the plugin's and pass.
func TestPluginStderrSharesTheBudget(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	now := time.Unix(1000, 0)
	budget := &outputBudget{z: zap.New(core), now: func() time.Time { return now }}
	root := newZapHCLog(zap.New(core)).(*zapHCLog)
	root.budget = budget
	stream := &lineLog{z: zap.New(core), budget: budget}
	child := root.Named("sourcewatch-forward-x").With("pid", 7)

	child.Warn("long field", "detail", strings.Repeat("z", 10000))
	got := logs.FilterMessage("long field").All()
	require.Len(t, got, 1)
	require.True(t, strings.HasSuffix(got[0].ContextMap()["detail"].(string), " ... (5904 bytes cut)"))
	require.EqualValues(t, 7, got[0].ContextMap()["pid"])

	child.Warn("long list", "v", []any{strings.Repeat("w", 10000)})
	got = logs.FilterMessage("long list").All()
	require.Len(t, got, 1)
	require.Contains(t, got[0].ContextMap()["v"], " bytes cut)", "a JSON array is cut as its JSON")

	chunk := strings.Repeat("x", 1000)
	for range 600 { // 1.2 MB within the minute, half through each way
		child.Warn(chunk)
		_, _ = stream.Write([]byte(chunk + "\n"))
	}
	logged := logs.FilterMessageSnippet("xxxx").Len()
	require.Less(t, logged, 1100, "about 1 MiB logged, both ways together")
	require.Greater(t, logged, 1000)
	// Below the logger's level a line costs nothing.
	child.Debug("quiet")
	root.Warn("plugin process exited", "error", "exit status 3")
	require.Equal(t, 1, logs.FilterMessage("plugin process exited").Len(), "go-plugin's own line is not the plugin's")
	budget.flush()
	held := logs.FilterMessage("plugin output held back").All()
	require.Len(t, held, 1)
	require.EqualValues(t, 1200-logged, held[0].ContextMap()["lines"])
}

// The tail keeps the last lines of a plugin's own stderr, without
// go-plugin's chatter below warn, each line cut short.
func TestStderrTail(t *testing.T) {
	var tail stderrTail
	require.Empty(t, tail.String())
	_, _ = tail.Write([]byte(`{"@level":"debug","@message":"plugin address","@timestamp":"x"}` + "\n"))
	_, _ = tail.Write([]byte(`{"@level":"error","@message":"model file missing","@timestamp":"x"}` + "\n"))
	require.Equal(t, "model file missing", tail.String())
	for i := 1; i <= 6; i++ {
		_, _ = fmt.Fprintf(&tail, "line %d\n", i)
	}
	_, _ = tail.Write([]byte("fatal: no newl"))
	_, _ = tail.Write([]byte("ine yet"))
	require.Equal(t, "line 2 | line 3 | line 4 | line 5 | line 6 | fatal: no newline yet", tail.String())
	_, _ = tail.Write([]byte("\n" + strings.Repeat("x", 1000) + "\n"))
	got := tail.String()
	require.True(t, strings.HasSuffix(got, strings.Repeat("x", tailLineBytes)+"..."), got)
	require.True(t, strings.HasPrefix(got, "line 4 | "), got)
}

// A panic's first lines are kept rather than the end of its trace.
func TestStderrTailKeepsAPanicsHead(t *testing.T) {
	var tail stderrTail
	_, _ = tail.Write([]byte("starting\npanic: assignment to entry in nil map\n\ngoroutine 7 [running]:\nmymodel.(*Model).fit(...)\n\t/src/mymodel/fit.go:42 +0x1d\ncreated by mymodel.New in goroutine 1\n\t/src/mymodel/model.go:10 +0x5e\nexit\n"))
	require.Equal(t, "panic: assignment to entry in nil map | goroutine 7 [running]: | mymodel.(*Model).fit(...) | /src/mymodel/fit.go:42 +0x1d | created by mymodel.New in goroutine 1", tail.String())
}

// Once the host stops the process, go-plugin's line that it exited is
// the host's doing only when it was killed (the host's SIGKILL, go-plugin's
// or the process group's): one that exits with a status of its own while
// Close runs (a panic in its shutdown, an os.Exit) crashed, and stays an
// error, as does its exit by another signal.
func TestExitWhileStoppingStaysAnErrorUnlessKilled(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := newZapHCLog(zap.New(core)).(*zapHCLog)
	var stopping atomic.Bool
	l.stopping = &stopping
	stopping.Store(true)
	l.Error("plugin process exited", "plugin", "/x", "id", 7, "error", "signal: killed")
	l.Warn("plugin failed to exit gracefully")
	require.Zero(t, logs.Len(), "%v", logs.All())
	l.Error("plugin process exited", "plugin", "/x", "id", 7, "error", "exit status 2")
	l.Error("plugin process exited", "plugin", "/x", "id", 7, "error", "signal: segmentation fault (core dumped)")
	require.Equal(t, 2, logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "%v", logs.All())
}
