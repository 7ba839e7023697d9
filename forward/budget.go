package forward

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// RelaunchBudget allows at most n relaunches within any span of time. One
// budget may be shared: by the supervisors of the processes that serve one
// graph one after the other (each new Supervised would otherwise start
// with a fresh limit), and by a caller that relaunches on its own, so a
// plugin is held to one rate whoever relaunches it. It is safe for
// concurrent use.
type RelaunchBudget struct {
	n    int
	span time.Duration
	now  func() time.Time

	mu    sync.Mutex
	taken []time.Time // within the span, oldest first
}

// NewRelaunchBudget returns a budget of n relaunches within any span,
// read on the clock now (time.Now when nil). n <= 0 allows every
// relaunch.
func NewRelaunchBudget(n int, span time.Duration, now func() time.Time) *RelaunchBudget {
	if now == nil {
		now = time.Now
	}
	return &RelaunchBudget{n: n, span: span, now: now}
}

// RelaunchLimitError is a relaunch a RelaunchBudget refused: Held
// relaunches within Span, and the next one allowed at Next. It matches
// ErrRelaunchLimit.
type RelaunchLimitError struct {
	Held int
	Span time.Duration
	Next time.Time
	// wait is Next as seen from the refusal, for the message.
	wait time.Duration
}

func (e *RelaunchLimitError) Error() string {
	return fmt.Sprintf("%v (%d relaunches within %v; the next is allowed in %v)", ErrRelaunchLimit, e.Held, e.Span, e.wait.Round(time.Second))
}

func (e *RelaunchLimitError) Unwrap() error { return ErrRelaunchLimit }

// Take takes one relaunch from b and returns when it was taken, for
// Refund; or, when the span already holds n, a *RelaunchLimitError.
func (b *RelaunchBudget) Take() (time.Time, error) {
	// Read under the lock: a Take that read the clock first but locked
	// second would put a relaunch behind a later one, and the refusal
	// would name the later one's end of span as the next allowed.
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.n <= 0 {
		return now, nil
	}
	b.taken = slices.DeleteFunc(b.taken, func(t time.Time) bool { return now.Sub(t) >= b.span })
	if len(b.taken) >= b.n {
		next := b.taken[0].Add(b.span)
		return time.Time{}, &RelaunchLimitError{Held: len(b.taken), Span: b.span, Next: next, wait: next.Sub(now)}
	}
	b.taken = append(b.taken, now)
	return now, nil
}

// Refund gives back the relaunch Take took at t, for one that did not
// happen after all (every launch failed).
func (b *RelaunchBudget) Refund(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.taken, t); i >= 0 {
		b.taken = slices.Delete(b.taken, i, i+1)
	}
}
