package monitor

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	helperEnv = "SOURCEWATCH_MONITOR_HELPER"
	helperURL = "SOURCEWATCH_MONITOR_HELPER_URL"
	helperDir = "SOURCEWATCH_MONITOR_HELPER_DIR"
)

// killConfig is the daemon configuration shared by the killed process and
// its successor.
func killConfig(t *testing.T, url, dir string) Config {
	cfg := testConfig(t, "p")
	cfg.DataDir = dir
	cfg.NATS.URL = url
	cfg.HTTP.Addr = ""
	cfg.SnapshotInterval = 300 * time.Millisecond
	cfg.Graphs[0].MinInfected = 1 << 20
	return cfg
}

var killClock = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

// TestKill9Helper is the daemon process TestKill9LosesNoAcknowledgedEvent
// kills; it does nothing in a normal test run.
func TestKill9Helper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	cfg := killConfig(t, os.Getenv(helperURL), os.Getenv(helperDir))
	f := &factoryOf{}
	d, err := New(cfg, preload(t, 30, "p"), WithLocalizerFactory(f.factory), WithClock(func() time.Time { return killClock }))
	require.NoError(t, err)
	_ = d.Run(context.Background()) // until SIGKILL
}

// TestKill9LosesNoAcknowledgedEvent runs the daemon in a child process,
// lets it apply and acknowledge events (snapshotting on its own schedule),
// kills it with SIGKILL and checks that a new daemon ends with the window
// of an uninterrupted run.
func TestKill9LosesNoAcknowledgedEvent(t *testing.T) {
	const n = 30
	s := runServer(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Helper$", "-test.count=1")
	// The child's own temporary directories go under ours: SIGKILL leaves
	// it no chance to remove them.
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperURL+"="+s.ClientURL(), helperDir+"="+dir, "TMPDIR="+t.TempDir())
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	// A client of our own, as producers are.
	cfg := killConfig(t, s.ClientURL(), dir)
	r := &running{}
	var err error
	r.nc, r.js = connectJS(t, s.ClientURL())
	evs := randomEvents(rand.New(rand.NewPCG(3, 4)), n, 300, killClock.Add(-10*time.Minute))

	// Wait for the child's consumer, then feed it in two halves with a
	// snapshot in between.
	require.Eventually(t, func() bool {
		_, err := r.js.Consumer(context.Background(), EventsStream, consumerName("p"))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "child daemon never bound its consumer")
	for _, e := range evs[:150] {
		r.publish(t, "p", e, "")
	}
	mid := lastSeq(t, r.js)
	kv, err := r.js.KeyValue(context.Background(), StateBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		data, err := getBlob(context.Background(), kv, "window.p")
		if err != nil {
			return false
		}
		var snap snapshot
		return json.Unmarshal(data, &snap) == nil && snap.Seq >= mid
	}, 20*time.Second, 10*time.Millisecond, "child never snapshotted")
	for i := 150; i < len(evs); i += 10 {
		r.publish(t, "p", evs[i:i+10], "")
	}
	last := lastSeq(t, r.js)
	cons, err := r.js.Consumer(context.Background(), EventsStream, consumerName("p"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.AckFloor.Stream == last
	}, 20*time.Second, 5*time.Millisecond, "child never acknowledged everything")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed = true
	_ = cmd.Wait()

	data, err := getBlob(context.Background(), kv, "window.p")
	require.NoError(t, err)
	var snap snapshot
	require.NoError(t, json.Unmarshal(data, &snap))
	t.Logf("killed with snapshot at seq %d of %d acknowledged", snap.Seq, last)

	f := &factoryOf{}
	r2 := start(t, cfg, preload(t, n, "p"), WithLocalizerFactory(f.factory), WithClock(func() time.Time { return killClock }))
	waitSeq(t, r2.d, "p", last)
	ref := reference(t, n, evs)
	require.True(t, sameWindow(ref, r2.d.graphs["p"].win), "window after kill -9 and replay differs from an uninterrupted run")
}
