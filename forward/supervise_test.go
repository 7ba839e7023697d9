package forward_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

// sleeps records backoff waits instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return nil
}

func supervise(t *testing.T, path string, opts ...forward.SuperviseOption) *forward.Supervised {
	t.Helper()
	s, err := forward.Supervise(t.Context(), path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// recoverableFaults are the faulty plugin's faults a supervisor recovers
// from, with the launch options that let it notice them.
var recoverableFaults = []struct {
	fault string
	opts  []forward.LaunchOption
}{
	{"crash", nil},
	{"hang", []forward.LaunchOption{forward.WithCallTimeout(2 * time.Second)}},
}

func TestSupervisedRecovers(t *testing.T) {
	t.Parallel()
	g := karate(t)
	// steps=2 is not the default, so a relaunch that forgot the params
	// would answer differently.
	params := map[string]string{"steps": "2", "p": "0.3"}
	in := icmf.New()
	require.NoError(t, in.Configure(t.Context(), g, params, nil))
	x, dy := batch(g.N(), 3, 7)
	wantY, wantDX, err := in.VJP(t.Context(), x, dy)
	require.NoError(t, err)

	for _, tc := range recoverableFaults {
		t.Run(tc.fault, func(t *testing.T) {
			var causes []error
			var rec sleeps
			s := supervise(t, forwardtest.Build(t, faulty),
				forward.WithLaunchOptions(tc.opts...),
				forward.WithSleep(rec.sleep),
				forward.WithOnRestart(func(err error) { causes = append(causes, err) }))
			cfg := map[string]string{"fault": tc.fault, "fault_after": "2"}
			for k, v := range params {
				cfg[k] = v
			}
			require.NoError(t, s.Configure(t.Context(), g, cfg, nil))
			// The second call of every process fails, which is every call
			// after the first; every call succeeds.
			for call := 1; call <= 4; call++ {
				y, dx, err := s.VJP(t.Context(), x, dy)
				require.NoError(t, err, "call %d", call)
				require.Equal(t, wantY.RawMatrix().Data, y.RawMatrix().Data)
				require.Equal(t, wantDX.RawMatrix().Data, dx.RawMatrix().Data)
				require.True(t, s.Healthy())
			}
			require.EqualValues(t, 3, s.Restarts())
			require.Len(t, causes, 3)
			if tc.fault == "crash" {
				require.ErrorIs(t, causes[0], forward.ErrPluginExited)
			} else {
				require.ErrorIs(t, causes[0], forward.ErrCallTimeout)
			}
			// A success in between resets the backoff.
			require.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, rec.d)
			require.NoError(t, s.Close())
			require.False(t, s.Healthy())
			_, err := s.Predict(t.Context(), x)
			require.ErrorIs(t, err, forward.ErrClosed)
		})
	}
}

func TestSupervisedBacksOffAndGivesUpPerCall(t *testing.T) {
	t.Parallel()
	g := karate(t)
	var rec sleeps
	s := supervise(t, forwardtest.Build(t, faulty),
		forward.WithBackoff(time.Millisecond, 4*time.Millisecond), forward.WithSleep(rec.sleep),
		forward.WithRelaunchLimit(0, 0)) // the backoff alone; TestSupervisedRelaunchLimit has the limit
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
	x, _ := batch(g.N(), 1, 8)
	for call := 0; call < 3; call++ {
		_, err := s.Predict(t.Context(), x)
		require.ErrorIs(t, err, forward.ErrPluginExited, "the retry crashes too")
		require.False(t, s.Healthy())
	}
	// Call 1 relaunches once; calls 2 and 3 relaunch before the call and
	// again for the retry.
	require.Equal(t, []time.Duration{1, 2, 4, 4, 4}, scale(rec.d, time.Millisecond))
	require.EqualValues(t, 5, s.Restarts())
	info, err := s.Info(t.Context())
	require.NoError(t, err, "Info does not strike; the relaunched plugin answers")
	require.Equal(t, "faulty", info.Name)
	require.True(t, s.Healthy())
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

// faultyCopy copies the faulty plugin into a directory of the test's own,
// returning its path, its bytes and its SHA-256.
func faultyCopy(t *testing.T) (path string, src, sum []byte) {
	t.Helper()
	src, err := os.ReadFile(forwardtest.Build(t, faulty))
	require.NoError(t, err)
	path = filepath.Join(t.TempDir(), "sourcewatch-forward-faulty")
	require.NoError(t, os.WriteFile(path, src, 0o755))
	sum, err = forward.FileSHA256(path)
	require.NoError(t, err)
	return path, src, sum
}

// A binary replaced on disk after launch is refused at relaunch, at once
// and without waiting on later calls, and a restored one is taken at the
// next call.
func TestSupervisedRelaunchChecksChecksum(t *testing.T) {
	t.Parallel()
	g := karate(t)
	path, src, sum := faultyCopy(t)
	var rec sleeps
	s := supervise(t, path, forward.WithLaunchOptions(forward.WithChecksum(sum)),
		forward.WithRelaunchAttempts(3), forward.WithSleep(rec.sleep))
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
	replace := func(data []byte) {
		// The running binary cannot be written, but it can be replaced.
		require.NoError(t, os.WriteFile(path+".new", data, 0o755))
		require.NoError(t, os.Rename(path+".new", path))
	}
	replace(append(src, 0))
	x := mat.NewDense(1, g.N(), nil)
	_, err := s.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrPluginExited)
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, "cannot relaunch it, the binary itself is refused")
	require.Equal(t, 1, strings.Count(err.Error(), "forward plugin exited"), "why it stopped, once: %v", err)
	require.ErrorContains(t, err, "put that build back, or retrain the bundle with this one", "a checksum says what to do")
	require.Len(t, rec.d, 1, "one launch: another wait cannot fix the binary")
	require.False(t, s.Healthy())
	require.Zero(t, s.Restarts())

	// The next call needs a relaunch too, and fails at once.
	_, err = s.Info(t.Context())
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.Len(t, rec.d, 1, "no wait before trying a binary found broken")

	// Put back, the binary is launched at the next call, without a wait.
	replace(src)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, "faulty", info.Name)
	require.Len(t, rec.d, 1)
	require.EqualValues(t, 1, s.Restarts())
	require.True(t, s.Healthy())
}

// With WithVersion, a process reporting another version is refused at
// the first launch and at a relaunch: a relaunch must not swap in other
// code behind the model. The binary stays the same, as a script plugin's
// wrapper does while the script changes (the faulty plugin reads its
// version from a file beside it).
func TestSupervisedRelaunchChecksVersion(t *testing.T) {
	t.Parallel()
	g := karate(t)
	path, _, sum := faultyCopy(t)
	setVersion := func(v string) { require.NoError(t, os.WriteFile(path+".version", []byte(v), 0o644)) }
	setVersion("1.0.0-a")

	_, err := forward.Supervise(t.Context(), path, forward.WithVersion("1.0.0-b"))
	require.ErrorIs(t, err, forward.ErrVersion)
	require.ErrorContains(t, err, `reports version "1.0.0-a", want "1.0.0-b"`)

	var rec sleeps
	s := supervise(t, path, forward.WithVersion("1.0.0-a"), forward.WithLaunchOptions(forward.WithChecksum(sum)),
		forward.WithRelaunchAttempts(3), forward.WithSleep(rec.sleep))
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
	setVersion("1.0.0-b")
	_, err = s.Predict(t.Context(), mat.NewDense(1, g.N(), nil))
	require.ErrorIs(t, err, forward.ErrPluginExited)
	require.ErrorIs(t, err, forward.ErrVersion)
	require.ErrorContains(t, err, "the code behind it changed since this process was started")
	require.Len(t, rec.d, 1, "one launch: another wait cannot fix it")
	require.Zero(t, s.Restarts())
	require.False(t, s.Healthy())

	setVersion("1.0.0-a")
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, "1.0.0-a", info.Version)
	require.EqualValues(t, 1, s.Restarts())
	require.True(t, s.Healthy())
}

// Concurrent callers that see the same crash share one relaunch and all
// get their answers.
func TestSupervisedConcurrentCallers(t *testing.T) {
	t.Parallel()
	g := karate(t)
	s := supervise(t, forwardtest.Build(t, faulty), forward.WithSleep((&sleeps{}).sleep))
	// 3 callers x 2 calls: the first process crashes on its 5th call,
	// taking the calls in flight with it and sometimes the answer to its
	// 4th, which can still be unsent when the 5th call exits the process;
	// the second process (configured alike) gets at most the 4 calls left
	// and never reaches its own 5th. (With 4 callers x 2 calls, a lost
	// 4th answer made it crash too, now and then.)
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash", "fault_after": "5"}, nil))
	x, dy := batch(g.N(), 2, 10)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for w := range errs {
		wg.Go(func() {
			for range 2 {
				if _, _, err := s.VJP(t.Context(), x, dy); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, s.Restarts(), "callers failing together share one relaunch")
	require.True(t, s.Healthy())
}

// The fused call of inference recovers too, through a new plugin and its
// new shared region: the faulty plugin answers it with Predict then VJP,
// two counted calls, so with fault_after=3 every fused call but the first
// of a process crashes or hangs it.
func TestSupervisedRecoversFusedCall(t *testing.T) {
	t.Parallel()
	g := karate(t)
	in := icmf.New()
	require.NoError(t, in.Configure(t.Context(), g, nil, nil))
	x, _ := batch(g.N(), 4, 9)
	target, _ := batch(g.N(), 1, 10)
	wantLoss, wantDX, err := forward.SquaredErrorLoss(t.Context(), in, x, target)
	require.NoError(t, err)
	for _, tc := range recoverableFaults {
		t.Run(tc.fault, func(t *testing.T) {
			var rec sleeps
			s := supervise(t, forwardtest.Build(t, faulty), forward.WithLaunchOptions(tc.opts...), forward.WithSleep(rec.sleep))
			require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": tc.fault, "fault_after": "3"}, nil))
			for call := 1; call <= 3; call++ {
				loss, dx, err := s.SquaredErrorLoss(t.Context(), x, target)
				require.NoError(t, err, "call %d", call)
				require.InDeltaSlice(t, wantLoss, loss, 1e-12)
				require.Equal(t, wantDX.RawMatrix().Data, dx.RawMatrix().Data)
			}
			require.EqualValues(t, 2, s.Restarts())
		})
	}
}

// A plugin process that dies between calls is unhealthy at once, before
// any call sees it (a daemon reads Healthy for /readyz and to relaunch
// ahead of the next inference), and the next call brings it back.
func TestSupervisedHealthSeesAnExitBetweenCalls(t *testing.T) {
	t.Parallel()
	g := karate(t)
	s := supervise(t, forwardtest.Build(t, "icmf"), forward.WithSleep((&sleeps{}).sleep))
	require.NoError(t, s.Configure(t.Context(), g, nil, nil))
	require.True(t, s.Healthy())
	proc, err := os.FindProcess(s.Pid())
	require.NoError(t, err)
	require.NoError(t, proc.Kill())
	require.Eventually(t, func() bool { return !s.Healthy() }, 10*time.Second, 5*time.Millisecond)
	_, err = s.Predict(t.Context(), mat.NewDense(1, g.N(), nil))
	require.NoError(t, err)
	require.True(t, s.Healthy())
	require.EqualValues(t, 1, s.Restarts())
}

// A plugin that keeps failing is relaunched at most as often as the limit
// allows within its span; beyond it calls fail at once, naming the limit,
// until the oldest relaunch leaves the span.
func TestSupervisedRelaunchLimit(t *testing.T) {
	t.Parallel()
	g := karate(t)
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	s := supervise(t, forwardtest.Build(t, faulty),
		forward.WithRelaunchLimit(3, time.Minute), forward.WithSleep((&sleeps{}).sleep),
		forward.WithClock(func() time.Time { return now }))
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
	x, _ := batch(g.N(), 1, 8)
	// Call 1 relaunches once for its retry, call 2 twice (before the call
	// and for the retry): three relaunches, each crashing again.
	for call := 1; call <= 2; call++ {
		_, err := s.Predict(t.Context(), x)
		require.ErrorIs(t, err, forward.ErrPluginExited, "call %d", call)
		require.NotErrorIs(t, err, forward.ErrRelaunchLimit, "call %d", call)
	}
	require.EqualValues(t, 3, s.Restarts())
	_, err := s.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrRelaunchLimit)
	require.ErrorContains(t, err, "3 relaunches within 1m0s; the next is allowed in 1m0s")
	require.ErrorIs(t, err, forward.ErrPluginExited, "and says why a relaunch was needed")
	require.EqualValues(t, 3, s.Restarts(), "no relaunch past the limit")
	require.False(t, s.Healthy())

	now = now.Add(59 * time.Second)
	_, err = s.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrRelaunchLimit, "still within the span of the first")
	now = now.Add(2 * time.Second)
	info, err := s.Info(t.Context())
	require.NoError(t, err, "the first relaunch has left the span: relaunched, and Info does not crash")
	require.Equal(t, "faulty", info.Name)
	require.EqualValues(t, 4, s.Restarts())
}

// Close cuts a relaunch short: it does not wait out the backoff, and the
// call that needed the relaunch learns that the supervisor closed.
func TestSupervisedCloseInterruptsRelaunch(t *testing.T) {
	t.Parallel()
	g := karate(t)
	sleeping := make(chan struct{})
	s := supervise(t, forwardtest.Build(t, faulty), forward.WithSleep(func(ctx context.Context, _ time.Duration) error {
		close(sleeping)
		<-ctx.Done() // a backoff far longer than the test
		return ctx.Err()
	}))
	require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
	called := make(chan error, 1)
	go func() {
		_, err := s.Predict(t.Context(), mat.NewDense(1, g.N(), nil))
		called <- err
	}()
	<-sleeping
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the relaunch's backoff")
	}
	require.ErrorIs(t, <-called, forward.ErrClosed)
	require.False(t, s.Healthy())
}

// Supervisors given one RelaunchBudget share its limit: the relaunches of
// one count against the other, where each had a limit of its own (a
// daemon that replaces a failing graph's supervisor by a new one got a
// fresh limit with each).
func TestSupervisedShareARelaunchBudget(t *testing.T) {
	t.Parallel()
	g := karate(t)
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	budget := forward.NewRelaunchBudget(2, time.Minute, func() time.Time { return now })
	bin := forwardtest.Build(t, faulty)
	var sups []*forward.Supervised
	for range 2 {
		s := supervise(t, bin, forward.WithRelaunchBudget(budget), forward.WithSleep((&sleeps{}).sleep))
		require.NoError(t, s.Configure(t.Context(), g, map[string]string{"fault": "crash"}, nil))
		sups = append(sups, s)
	}
	x, _ := batch(g.N(), 1, 8)
	for i, s := range sups { // one relaunch each, for the retry
		_, err := s.Predict(t.Context(), x)
		require.ErrorIs(t, err, forward.ErrPluginExited, "supervisor %d", i)
		require.NotErrorIs(t, err, forward.ErrRelaunchLimit, "supervisor %d", i)
	}
	for i, s := range sups {
		_, err := s.Predict(t.Context(), x)
		require.ErrorIs(t, err, forward.ErrRelaunchLimit, "supervisor %d", i)
		var limit *forward.RelaunchLimitError
		require.ErrorAs(t, err, &limit)
		require.Equal(t, 2, limit.Held)
		require.Equal(t, now.Add(time.Minute), limit.Next)
	}
	require.EqualValues(t, 2, sups[0].Restarts()+sups[1].Restarts())
}

func TestRelaunchBudget(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	b := forward.NewRelaunchBudget(2, time.Minute, func() time.Time { return now })
	first, err := b.Take()
	require.NoError(t, err)
	now = now.Add(10 * time.Second)
	second, err := b.Take()
	require.NoError(t, err)
	_, err = b.Take()
	require.ErrorIs(t, err, forward.ErrRelaunchLimit)
	require.ErrorContains(t, err, "2 relaunches within 1m0s; the next is allowed in 50s")

	b.Refund(second) // that relaunch did not happen
	again, err := b.Take()
	require.NoError(t, err, "a refunded relaunch frees its place")
	_, err = b.Take()
	require.ErrorIs(t, err, forward.ErrRelaunchLimit)

	now = first.Add(time.Minute)
	_, err = b.Take()
	require.NoError(t, err, "the first has left the span")
	_, err = b.Take()
	require.ErrorIs(t, err, forward.ErrRelaunchLimit, "the refund's replacement, %v, is still within it", again)

	unlimited := forward.NewRelaunchBudget(0, time.Minute, nil)
	for range 100 {
		_, err := unlimited.Take()
		require.NoError(t, err)
	}
}

// Two relaunches taken at once keep the budget's order: one read its
// clock first, but took the lock after the other, and the budget, holding
// it after the later one, said the next relaunch was allowed only once
// the later one had left the span.
func TestRelaunchBudgetConcurrentTakesKeepTheOldestFirst(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	var (
		mu    sync.Mutex
		calls int
	)
	entered, release := make(chan struct{}), make(chan struct{})
	clock := func() time.Time {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1: // the first Take reads the clock, then is held up
			close(entered)
			<-release
			return base
		case 2:
			return base.Add(10 * time.Second)
		default:
			return base.Add(20 * time.Second)
		}
	}
	b := forward.NewRelaunchBudget(2, time.Minute, clock)
	first := make(chan error, 1)
	go func() {
		_, err := b.Take()
		first <- err
	}()
	<-entered
	second := make(chan error, 1)
	go func() {
		_, err := b.Take()
		second <- err
	}()
	secondDone := false
	select {
	case err := <-second:
		require.NoError(t, err)
		secondDone = true
	case <-time.After(200 * time.Millisecond): // waiting for the first's lock
	}
	close(release)
	require.NoError(t, <-first)
	if !secondDone {
		require.NoError(t, <-second)
	}
	_, err := b.Take()
	var limit *forward.RelaunchLimitError
	require.ErrorAs(t, err, &limit)
	require.Equal(t, base.Add(time.Minute), limit.Next, "the oldest relaunch leaves the span first")
}
