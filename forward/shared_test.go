package forward_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
)

// The shared region is a transport: a fused call through it answers
// exactly what the same call answers as bytes, for a batch that outgrows
// the region and with both target shapes.
func TestSharedMemoryMatchesBytes(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	g := karate(t)
	shared := launch(t, "icmf")
	viaBytes := launch(t, "icmf", forward.WithoutSharedMemory())
	for _, p := range []*forward.Process{shared, viaBytes} {
		require.NoError(t, p.Configure(t.Context(), g, map[string]string{"steps": "3"}, nil))
	}
	calls := 0
	for _, rows := range []int{2, 40} {
		x, _ := batch(g.N(), rows, uint64(rows))
		for _, targetRows := range []int{1, rows} {
			target, _ := batch(g.N(), targetRows, 7)
			loss, dx, err := shared.SquaredErrorLoss(t.Context(), x, target)
			require.NoError(t, err)
			wantLoss, wantDx, err := viaBytes.SquaredErrorLoss(t.Context(), x, target)
			require.NoError(t, err)
			require.Equal(t, wantLoss, loss)
			require.Equal(t, wantDx.RawMatrix().Data, dx.RawMatrix().Data)

			y, dx, err := shared.SquaredErrorVJP(t.Context(), x, target)
			require.NoError(t, err)
			wantY, wantDx, err := viaBytes.SquaredErrorVJP(t.Context(), x, target)
			require.NoError(t, err)
			require.Equal(t, wantY.RawMatrix().Data, y.RawMatrix().Data)
			require.Equal(t, wantDx.RawMatrix().Data, dx.RawMatrix().Data)
			calls += 2
		}
	}
	require.EqualValues(t, calls, shared.SharedCalls(), "every call went through the region")
	require.Zero(t, viaBytes.SharedCalls())
}

// Concurrent calls on one process share one region: one call uses it and
// the others send bytes, and every caller gets its own answer.
func TestSharedMemoryConcurrentCalls(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, "icmf")
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	const callers = 6
	var (
		want [callers]*mat.Dense
		got  [callers]*mat.Dense
		errs [callers]error
		xs   [callers]*mat.Dense
	)
	target, _ := batch(g.N(), 1, 99)
	for i := range xs {
		xs[i], _ = batch(g.N(), 8, uint64(100+i))
		_, want[i], errs[i] = p.SquaredErrorLoss(t.Context(), xs[i], target)
		require.NoError(t, errs[i])
	}
	var wg sync.WaitGroup
	for i := range xs {
		wg.Go(func() {
			for range 20 {
				_, got[i], errs[i] = p.SquaredErrorLoss(t.Context(), xs[i], target)
				if errs[i] != nil || !mat.Equal(got[i], want[i]) {
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range xs {
		require.NoError(t, errs[i])
		require.Equal(t, want[i].RawMatrix().Data, got[i].RawMatrix().Data, "caller %d", i)
	}
}

// sharedICMF launches icmf configured on karate and makes one fused call
// through the shared region, returning the process, the graph, the batch
// and that call's answer.
func sharedICMF(t *testing.T) (p *forward.Process, g *graph.Graph, x, target *mat.Dense, loss []float64, dx *mat.Dense) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	g = karate(t)
	p = launch(t, "icmf")
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	x, _ = batch(g.N(), 3, 1)
	target, _ = batch(g.N(), 1, 2)
	loss, dx, err := p.SquaredErrorLoss(t.Context(), x, target)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.SharedCalls())
	return p, g, x, target, loss, dx
}

// A call through the region that the plugin answered with an error has
// ended, and the region serves the next call.
func TestSharedMemoryKeptAfterAnAnsweredError(t *testing.T) {
	t.Parallel()
	p, g, x, target, want, wantDx := sharedICMF(t)

	// A failed Configure leaves the plugin unconfigured: the next call fails.
	require.Error(t, p.Configure(t.Context(), g, map[string]string{"steps": "-1"}, nil))
	_, _, err := p.SquaredErrorLoss(t.Context(), x, target)
	require.ErrorIs(t, err, forward.ErrNotConfigured)

	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	loss, dx, err := p.SquaredErrorLoss(t.Context(), x, target)
	require.NoError(t, err)
	require.Equal(t, want, loss)
	require.Equal(t, wantDx.RawMatrix().Data, dx.RawMatrix().Data)
	require.EqualValues(t, 2, p.SharedCalls(), "the region serves the call after the refused one")
	require.False(t, forward.SharedRetired(p))
}

// After a call through the region is cancelled, the process stops using
// it: the plugin may still be reading or writing it.
func TestSharedMemoryRetiredAfterACancelledCall(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	g := karate(t)
	p := launch(t, faulty)
	// A fused call of this plugin is a Predict and a VJP: the second
	// fused call hangs, ignoring its context.
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "hang", "fault_after": "3"}, nil))
	x, _ := batch(g.N(), 3, 1)
	target, _ := batch(g.N(), 1, 2)
	_, _, err := p.SquaredErrorLoss(t.Context(), x, target)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.SharedCalls())
	require.False(t, forward.SharedRetired(p))

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, _, err = p.SquaredErrorLoss(ctx, x, target)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, forward.SharedRetired(p), "the region the hung call holds is not used again")
}

// Not parallel: it counts the test process's memory files, which the
// parallel tests' plugins would add to.
func TestSharedMemoryClosedWithProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	memfds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		n := 0
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil &&
				strings.Contains(target, "sourcewatch-forward-batches") {
				n++
			}
		}
		return n
	}
	before := memfds()
	g := karate(t)
	for range 3 {
		p := launch(t, "icmf")
		require.NoError(t, p.Configure(t.Context(), g, nil, nil))
		x, _ := batch(g.N(), 2, 3)
		_, _, err := p.SquaredErrorLoss(t.Context(), x, x.Slice(0, 1, 0, g.N()).(*mat.Dense))
		require.NoError(t, err)
		require.Equal(t, before+1, memfds(), "one region per running plugin")
		require.NoError(t, p.Close())
		require.Equal(t, before, memfds(), "Close releases the region")
	}
}

// Close while calls are using the region: every caller gets
// ErrPluginExited. (Close also waits for the call holding the region
// before unmapping it; the window in which that matters, between the
// answer and the copy of dx, is too short for a test to hit reliably.)
func TestSharedMemoryCloseDuringCalls(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p, err := forward.Launch(t.Context(), forwardtest.Build(t, "icmf"))
	require.NoError(t, err)
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	x, _ := batch(g.N(), 8, 5)
	target, _ := batch(g.N(), 1, 6)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			for {
				if _, _, err := p.SquaredErrorLoss(t.Context(), x, target); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	for p.SharedCalls() < 20 {
		runtime.Gosched()
	}
	require.NoError(t, p.Close())
	wg.Wait()
	for _, err := range errs {
		require.ErrorIs(t, err, forward.ErrPluginExited)
	}
}

// A host that itself inherited the variables through which Launch hands a
// plugin its socket directory and region (say, because a plugin started
// it) does not pass its own values on: go-plugin would append the host's
// environment after Launch's, and the last value wins.
func TestLaunchEnvironmentWinsOverTheHosts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the shared region needs Linux's memfd")
	}
	t.Setenv(forward.SharedMemoryEnv, "9")
	t.Setenv("PLUGIN_UNIX_SOCKET_DIR", filepath.Join(t.TempDir(), "missing"))
	g := karate(t)
	p := launch(t, "icmf")
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	x, _ := batch(g.N(), 2, 1)
	target, _ := batch(g.N(), 1, 2)
	_, _, err := p.SquaredErrorLoss(t.Context(), x, target)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.SharedCalls(), "the plugin mapped the region Launch gave it")
}

// A plugin that cannot map the region for a call has touched nothing in
// it: the host sends that same call as bytes, so the caller gets its
// answer, not an error, and every later call travels as bytes.
func TestSharedMemoryUnusableFallsBackToBytes(t *testing.T) {
	t.Parallel()
	p, _, x, target, want, wantDx := sharedICMF(t)

	forward.ForgeNextSharedBatch(p)
	for range 2 {
		loss, dx, err := p.SquaredErrorLoss(t.Context(), x, target)
		require.NoError(t, err)
		require.Equal(t, want, loss)
		require.Equal(t, wantDx.RawMatrix().Data, dx.RawMatrix().Data)
	}
	require.EqualValues(t, 1, p.SharedCalls(), "the refused call and the next went as bytes")
}
