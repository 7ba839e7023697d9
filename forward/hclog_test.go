package forward

import (
	"testing"

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
