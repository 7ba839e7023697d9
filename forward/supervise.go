package forward

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
)

// ErrClosed is returned by calls on a closed Supervised.
var ErrClosed = errors.New("forward plugin supervisor closed")

// ErrRelaunchLimit is returned, wrapped, by a call that needed a relaunch
// when the plugin was already relaunched as often as WithRelaunchLimit
// allows within its span: a plugin that fails again and again fails the
// calls at once instead of costing each one a call timeout.
var ErrRelaunchLimit = errors.New("forward plugin relaunched too often")

// SuperviseOption configures Supervise.
type SuperviseOption func(*superviseOptions)

type superviseOptions struct {
	launch      []LaunchOption
	log         *zap.Logger
	minBackoff  time.Duration
	maxBackoff  time.Duration
	maxAttempts int
	// maxRelaunches within relaunchSpan (0 for no limit), or budget,
	// shared, when set.
	maxRelaunches int
	relaunchSpan  time.Duration
	budget        *RelaunchBudget
	onRestart     func(cause error)
	version       string
	sleep         func(ctx context.Context, d time.Duration) error
	now           func() time.Time
}

// WithLaunchOptions are passed to every Launch, the first and the relaunches
// (so a checksum is checked again before every relaunch).
func WithLaunchOptions(opts ...LaunchOption) SuperviseOption {
	return func(o *superviseOptions) { o.launch = append(o.launch, opts...) }
}

// WithSupervisorLogger logs relaunches (default: none).
func WithSupervisorLogger(log *zap.Logger) SuperviseOption {
	return func(o *superviseOptions) { o.log = log }
}

// WithBackoff sets the relaunch delay: min after the first failure,
// doubling with every consecutive failure up to max (defaults 100 ms, 30 s).
// A successful call resets it.
func WithBackoff(min, max time.Duration) SuperviseOption {
	return func(o *superviseOptions) { o.minBackoff, o.maxBackoff = min, max }
}

// WithRelaunchAttempts bounds the launches tried for one failure before the
// call gives up (default 5); the next call tries again.
func WithRelaunchAttempts(n int) SuperviseOption {
	return func(o *superviseOptions) { o.maxAttempts = n }
}

// WithRelaunchLimit allows at most n relaunches within any span of the
// given length (default 5 a minute; n <= 0: no limit). Beyond it a call
// that needs a relaunch fails with ErrRelaunchLimit until the oldest
// relaunch leaves the span. A successful call resets the backoff, not
// this count: a plugin that hangs every few calls would otherwise cost
// each of those calls a call timeout, without end.
func WithRelaunchLimit(n int, span time.Duration) SuperviseOption {
	return func(o *superviseOptions) { o.maxRelaunches, o.relaunchSpan = n, span }
}

// WithRelaunchBudget takes the relaunches from b, which others may share,
// instead of a limit of this supervisor's own (WithRelaunchLimit): a
// caller that supervises one plugin after another for the same work, or
// relaunches it itself too, holds them all to one rate. Only relaunches
// that succeed are taken from it.
func WithRelaunchBudget(b *RelaunchBudget) SuperviseOption {
	return func(o *superviseOptions) { o.budget = b }
}

// WithClock replaces time.Now for the relaunch limit of the supervisor's
// own (a budget given by WithRelaunchBudget reads its own clock), for tests.
func WithClock(now func() time.Time) SuperviseOption {
	return func(o *superviseOptions) { o.now = now }
}

// WithOnRestart is called with the cause after every successful relaunch,
// for a restart counter metric.
func WithOnRestart(f func(cause error)) SuperviseOption {
	return func(o *superviseOptions) { o.onRestart = f }
}

// WithVersion requires every process, the first and each relaunched one,
// to report version v from Info (v == "": no check). A process that
// reports another is closed and the launch fails with ErrVersion, like a
// binary whose checksum changed: a relaunch must not swap in other code
// behind the model the caller checked.
func WithVersion(v string) SuperviseOption {
	return func(o *superviseOptions) { o.version = v }
}

// WithSleep replaces the backoff wait, for tests. It must return early with
// ctx's error when ctx ends.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) SuperviseOption {
	return func(o *superviseOptions) { o.sleep = sleep }
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Supervised is a Model backed by a plugin process that is relaunched when
// it crashes or misses a call deadline: the hung or dead process is killed,
// a new one is launched after a capped exponential backoff, re-Configured
// with the remembered graph, params and state (the state of the last
// successful Fit, if any), and the interrupted call is retried once. Calls
// are safe for concurrent use; a relaunch happens once however many calls
// saw the failure.
type Supervised struct {
	path string
	o    superviseOptions

	lock chan struct{} // a mutex that waiters can abandon with their ctx

	// Guarded by lock.
	proc       *Process
	closed     bool
	configured bool
	g          *graph.Graph
	params     map[string]string
	state      []byte

	failures atomic.Int64 // consecutive, for the backoff
	// brokenBinary is set when the last launch failed on the binary itself
	// (see permanentLaunchError): the next relaunch tries at once, once.
	brokenBinary bool // guarded by lock
	healthy      atomic.Bool
	restarts     atomic.Int64
	// live is proc, for Healthy to read without the lock.
	live atomic.Pointer[Process]
	// closing ends when Close is called, cutting short a relaunch's
	// backoff and launch, which hold the lock Close needs.
	closing     context.Context
	stopClosing context.CancelFunc
}

var _ Model = (*Supervised)(nil)

// Supervise launches the plugin at path and supervises it.
func Supervise(ctx context.Context, path string, opts ...SuperviseOption) (*Supervised, error) {
	o := superviseOptions{log: zap.NewNop(), minBackoff: 100 * time.Millisecond, maxBackoff: 30 * time.Second, maxAttempts: 5,
		maxRelaunches: 5, relaunchSpan: time.Minute, sleep: sleepCtx, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if o.budget == nil {
		o.budget = NewRelaunchBudget(o.maxRelaunches, o.relaunchSpan, o.now)
	}
	p, err := launchVersion(ctx, path, o)
	if err != nil {
		return nil, err
	}
	s := &Supervised{path: path, o: o, lock: make(chan struct{}, 1), proc: p}
	s.closing, s.stopClosing = context.WithCancel(context.WithoutCancel(ctx))
	s.live.Store(p)
	s.healthy.Store(true)
	return s, nil
}

func (s *Supervised) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Supervised) release() { <-s.lock }

// Healthy reports whether the plugin process is up: false once it has
// exited (even between calls, when no call has seen it yet) or a call
// failed, until a relaunch succeeds, and after Close.
func (s *Supervised) Healthy() bool {
	p := s.live.Load()
	return s.healthy.Load() && p != nil && !p.Exited()
}

// Restarts returns the number of successful relaunches.
func (s *Supervised) Restarts() int64 { return s.restarts.Load() }

// Path returns the plugin binary's path.
func (s *Supervised) Path() string { return s.path }

// Close stops the plugin process; later calls return ErrClosed. A
// relaunch in progress is cut short first.
func (s *Supervised) Close() error {
	s.stopClosing()
	s.lock <- struct{}{}
	defer s.release()
	s.closed = true
	s.healthy.Store(false)
	if s.proc != nil {
		err := s.proc.Close()
		s.proc = nil
		s.live.Store(nil)
		return err
	}
	return nil
}

// current returns the live process, relaunching one if there is none.
func (s *Supervised) current(ctx context.Context) (*Process, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	if s.closed {
		return nil, ErrClosed
	}
	if s.proc != nil && !s.proc.Exited() {
		return s.proc, nil
	}
	cause := fmt.Errorf("%s: %w", s.path, ErrPluginExited)
	if s.proc != nil {
		if tail := s.proc.stderr.String(); tail != "" {
			cause = fmt.Errorf("%w; its stderr ended: %s", cause, tail)
		}
	}
	return s.relaunch(ctx, cause)
}

// replace kills failed (unless another caller already replaced it) and
// returns a relaunched process.
func (s *Supervised) replace(ctx context.Context, failed *Process, cause error) (*Process, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	if s.closed {
		return nil, ErrClosed
	}
	if s.proc != failed && s.proc != nil && !s.proc.Exited() {
		return s.proc, nil
	}
	return s.relaunch(ctx, cause)
}

// relaunch replaces s.proc. The caller holds the lock. Close cuts it
// short.
func (s *Supervised) relaunch(ctx context.Context, cause error) (*Process, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	s.healthy.Store(false)
	if s.proc != nil {
		_ = s.proc.Close()
		s.proc = nil
		s.live.Store(nil)
	}
	taken, err := s.o.budget.Take()
	if err != nil {
		return nil, fmt.Errorf("%w, needed now for: %w", err, cause)
	}
	relaunched := false
	defer func() {
		if !relaunched {
			s.o.budget.Refund(taken)
		}
	}()
	var last error
	for attempt := 0; attempt < max(1, s.o.maxAttempts); attempt++ {
		// A binary found broken last time is tried again at once: waiting
		// cannot fix it, and a call should learn of it in no time, while
		// the one who replaced it wants the fix to take at the next call.
		if !s.brokenBinary {
			d := s.o.minBackoff << min(s.failures.Add(1)-1, 30)
			if d > s.o.maxBackoff || d <= 0 {
				d = s.o.maxBackoff
			}
			s.o.log.Warn("relaunching forward plugin", zap.String("path", s.path), zap.Duration("backoff", d), zap.Int("attempt", attempt+1), zap.NamedError("cause", cause), zap.NamedError("last", last))
			if err := s.o.sleep(ctx, d); err != nil {
				return nil, s.closedOr(err)
			}
		}
		p, err := launchVersion(ctx, s.path, s.o)
		if err == nil && s.configured {
			if err = p.Configure(ctx, s.g, s.params, s.state); err != nil {
				_ = p.Close()
			}
		}
		if err != nil {
			last = err
			if ctx.Err() != nil {
				return nil, s.closedOr(ctx.Err())
			}
			if permanentLaunchError(err) {
				s.brokenBinary = true
				what := "; tried again at the next call"
				switch {
				case errors.Is(err, ErrChecksum):
					what = "; the file is now another build than the one this process was started with: put that build back, " +
						"or retrain the bundle with this one (or pin its SHA-256) and reload; tried again at the next call"
				case errors.Is(err, ErrVersion):
					what = "; the code behind it changed since this process was started: put that version back, " +
						"or retrain the bundle with this one and reload; tried again at the next call"
				}
				// The caller's error already says why it stopped (cause).
				return nil, fmt.Errorf("forward plugin %s: cannot relaunch it, the binary itself is refused: %w%s", s.path, err, what)
			}
			s.brokenBinary = false
			continue
		}
		s.brokenBinary = false
		s.proc = p
		s.live.Store(p)
		s.healthy.Store(true)
		s.restarts.Add(1)
		relaunched = true
		if s.o.onRestart != nil {
			s.o.onRestart(cause)
		}
		return p, nil
	}
	return nil, fmt.Errorf("forward plugin %s: relaunch after %v failed %d times, last: %w", s.path, cause, max(1, s.o.maxAttempts), last)
}

// closedOr is ErrClosed when Close cut a relaunch short, else err.
func (s *Supervised) closedOr(err error) error {
	if s.closing.Err() != nil {
		return ErrClosed
	}
	return err
}

// launchVersion launches the plugin at path and, with WithVersion, checks
// the version it reports. A mismatch is a binaryError: no wait fixes it.
func launchVersion(ctx context.Context, path string, o superviseOptions) (*Process, error) {
	p, err := Launch(ctx, path, o.launch...)
	if err != nil || o.version == "" {
		return p, err
	}
	info, err := p.Info(ctx)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if info.Version != o.version {
		_ = p.Close()
		return nil, &binaryError{fmt.Errorf("%w: %s reports version %q, want %q", ErrVersion, path, info.Version, o.version)}
	}
	return p, nil
}

// permanentLaunchError reports whether a launch failed on the binary
// itself (another build, removed, not a file), which no wait fixes.
func permanentLaunchError(err error) bool {
	var be *binaryError
	return errors.As(err, &be)
}

// restartable reports whether err means the process is dead or hung, as
// opposed to an answer (an error of the model, bad output, the caller's
// context).
func restartable(err error) bool {
	return errors.Is(err, ErrPluginExited) || errors.Is(err, ErrCallTimeout)
}

// do runs f on the live process and, if the process died or hung, once
// more on a relaunched one.
func (s *Supervised) do(ctx context.Context, f func(*Process) error) error {
	p, err := s.current(ctx)
	if err != nil {
		return err
	}
	err = f(p)
	if err == nil || !restartable(err) || ctx.Err() != nil {
		s.succeeded(err)
		return err
	}
	p2, rerr := s.replace(ctx, p, err)
	if rerr != nil {
		return fmt.Errorf("%w (and relaunching: %w)", err, rerr)
	}
	err = f(p2)
	if err != nil && restartable(err) {
		// Leave the next call to relaunch; it will back off further.
		s.healthy.Store(false)
		_ = p2.Close()
	}
	s.succeeded(err)
	return err
}

func (s *Supervised) succeeded(err error) {
	if err == nil {
		s.failures.Store(0)
	}
}

// Info implements Model.
func (s *Supervised) Info(ctx context.Context) (in Info, err error) {
	err = s.do(ctx, func(p *Process) error { in, err = p.Info(ctx); return err })
	return in, err
}

// Configure implements Model; the graph, params and state are remembered
// for relaunches.
func (s *Supervised) Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	var done *Process
	err := s.do(ctx, func(p *Process) error { done = p; return p.Configure(ctx, g, params, state) })
	if err != nil {
		return err
	}
	return s.remember(ctx, done, g, maps.Clone(params), append([]byte(nil), state...))
}

// Fit implements Model; the fitted state replaces the remembered one.
func (s *Supervised) Fit(ctx context.Context, pairs []Pair, opts FitOptions, progress func(Progress)) (res FitResult, err error) {
	var done *Process
	err = s.do(ctx, func(p *Process) error { done = p; res, err = p.Fit(ctx, pairs, opts, progress); return err })
	if err != nil {
		return res, err
	}
	if err := s.acquire(context.WithoutCancel(ctx)); err != nil {
		return res, err
	}
	g, params := s.g, s.params
	s.release()
	return res, s.remember(ctx, done, g, params, append([]byte(nil), res.State...))
}

// remember records the configuration done now has, for relaunches. A
// process relaunched meanwhile (by a call that crashed beside this one)
// was configured with the previous one; it is brought up to date here,
// under the lock relaunches hold, so the live process and the record never
// disagree. The lock is taken whatever ctx says: done already has the
// configuration, and the record must follow it.
func (s *Supervised) remember(ctx context.Context, done *Process, g *graph.Graph, params map[string]string, state []byte) error {
	_ = s.acquire(context.WithoutCancel(ctx))
	defer s.release()
	s.configured, s.g, s.params, s.state = true, g, params, state
	if cur := s.proc; cur != nil && cur != done && !cur.Exited() {
		// Not cut short by a caller who gave up (failing here closes a
		// healthy process and spends a relaunch), but by Close; the
		// plugin call's own timeout bounds it.
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(s.closing, cancel)()
		if err := cur.Configure(cctx, g, params, state); err != nil {
			// The next call finds it dead and relaunches it with the
			// record.
			_ = cur.Close()
			return fmt.Errorf("configuring the relaunched forward plugin %s: %w", s.path, err)
		}
	}
	return nil
}

// Predict implements Model.
func (s *Supervised) Predict(ctx context.Context, x *mat.Dense) (y *mat.Dense, err error) {
	err = s.do(ctx, func(p *Process) error { y, err = p.Predict(ctx, x); return err })
	return y, err
}

// VJP implements Model.
func (s *Supervised) VJP(ctx context.Context, x, dy *mat.Dense) (y, dx *mat.Dense, err error) {
	err = s.do(ctx, func(p *Process) error { y, dx, err = p.VJP(ctx, x, dy); return err })
	return y, dx, err
}

// Pid returns the process id of the current plugin process, or 0 when
// there is none (closed, or between a failure and its relaunch).
func (s *Supervised) Pid() int {
	s.lock <- struct{}{}
	defer s.release()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// SquaredErrorLoss implements SquaredErrorLosser through the current process.
func (s *Supervised) SquaredErrorLoss(ctx context.Context, x, target *mat.Dense) (loss []float64, dx *mat.Dense, err error) {
	err = s.do(ctx, func(p *Process) error { loss, dx, err = p.SquaredErrorLoss(ctx, x, target); return err })
	return loss, dx, err
}

// SquaredErrorVJP implements SquaredErrorVJPer through the current process.
func (s *Supervised) SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (y, dx *mat.Dense, err error) {
	err = s.do(ctx, func(p *Process) error { y, dx, err = p.SquaredErrorVJP(ctx, x, target); return err })
	return y, dx, err
}
