//go:build unix

package monitor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A second daemon on the same data_dir is refused before it touches the
// embedded server's store, naming the holder; once the first stops, the
// data_dir is free again.
func TestDataDirIsLocked(t *testing.T) {
	cfg := testConfig(t, "p")
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))

	// The same config as it would be on disk: the same HTTP port too,
	// which is not what the second daemon is told about.
	same := cfg
	same.HTTP.Addr = r.d.HTTPAddr()
	second, err := New(same, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = second.Run(ctx)
	require.ErrorIs(t, err, ErrDataDirInUse)
	require.ErrorContains(t, err, fmt.Sprintf("held by pid %d", os.Getpid()))
	require.ErrorContains(t, err, cfg.DataDir)

	r.stop(t)
	third := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	third.stop(t)
	_, err = os.Stat(filepath.Join(cfg.DataDir, "LOCK"))
	require.NoError(t, err, "the lock file stays; the lock does not")
}

// A data_dir that cannot be written is said to be that, with what to do,
// not reported as an invalid config.
func TestDataDirNotWritable(t *testing.T) {
	cfg := testConfig(t, "p")
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	cfg.DataDir = filepath.Join(file, "data")
	d, err := New(cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = d.Run(ctx)
	require.ErrorIs(t, err, ErrDataDir)
	require.NotErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, cfg.DataDir)
	require.ErrorContains(t, err, "or set nats.url")

	// The store's own directory, when it cannot be made, is said at once
	// too, not as a server that never got ready 15 s later.
	cfg.DataDir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cfg.DataDir, "nats"), nil, 0o644))
	d, err = New(cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	start := time.Now()
	err = d.Run(ctx)
	require.ErrorIs(t, err, ErrDataDir)
	require.Less(t, time.Since(start), 5*time.Second)
}
