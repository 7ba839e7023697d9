package monitor

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logLimiter logs a kind of problem at most once per interval, with the
// number of occurrences it held back. What it held back after the last
// line of a kind is reported by flush, so a burst that stops is not
// under-counted until the problem comes back.
type logLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	now      func() time.Time
	log      *zap.Logger
	last     map[string]time.Time
	held     map[string]int
	msg      map[string]string
	level    map[string]zapcore.Level // of kinds logged above warn
}

func newLogLimiter(interval time.Duration, now func() time.Time, log *zap.Logger) *logLimiter {
	return &logLimiter{interval: interval, now: now, log: log, last: map[string]time.Time{}, held: map[string]int{}, msg: map[string]string{}}
}

// httpErrorLog is the HTTP server's ErrorLog output: each line a
// rate-limited warning.
type httpErrorLog struct{ l *logLimiter }

func (w httpErrorLog) Write(p []byte) (int, error) {
	w.l.warn("http.server", "http server error", zap.String("error", strings.TrimSpace(string(p))))
	return len(p), nil
}

func (l *logLimiter) warn(kind, msg string, fields ...zap.Field) {
	l.logAt(zapcore.WarnLevel, kind, msg, fields...)
}

// logAt is warn at another level.
func (l *logLimiter) logAt(level zapcore.Level, kind, msg string, fields ...zap.Field) {
	l.mu.Lock()
	now := l.now()
	if level != zapcore.WarnLevel {
		if l.level == nil {
			l.level = map[string]zapcore.Level{}
		}
		l.level[kind] = level
	}
	if now.Sub(l.last[kind]) < l.interval {
		l.held[kind]++
		l.msg[kind] = msg
		l.mu.Unlock()
		return
	}
	held := l.held[kind]
	l.last[kind], l.held[kind] = now, 0
	l.mu.Unlock()
	l.log.Log(level, msg, append(fields, zap.String("kind", kind), zap.Int("suppressed", held))...)
}

// mark starts kind's interval now, as a line logged outside the limiter
// (the first of a problem, at a higher level) would have.
func (l *logLimiter) mark(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last[kind] = l.now()
}

// ended forgets a kind of problem that has stopped and returns how many of
// its lines were held back since its last one, so that the caller's line
// saying it stopped can count them, and no later flush reports the
// problem as if it went on.
func (l *logLimiter) ended(kind string) (held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held = l.held[kind]
	delete(l.last, kind)
	delete(l.held, kind)
	delete(l.msg, kind)
	delete(l.level, kind)
	return held
}

// flush logs, for each kind whose interval has passed since its last
// line (every kind when all is set, as at shutdown), how many lines it
// held back since then.
func (l *logLimiter) flush(all bool) {
	l.mu.Lock()
	now := l.now()
	type report struct {
		kind, msg string
		held      int
		level     zapcore.Level
	}
	var out []report
	for kind, n := range l.held {
		if n == 0 || (!all && now.Sub(l.last[kind]) < l.interval) {
			continue
		}
		level, ok := l.level[kind]
		if !ok {
			level = zapcore.WarnLevel
		}
		out = append(out, report{kind, l.msg[kind], n, level})
		l.held[kind] = 0
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].kind < out[j].kind })
	for _, r := range out {
		l.log.Log(r.level, r.msg+" (held back since the last line of its kind)", zap.String("kind", r.kind), zap.Int("suppressed", r.held))
	}
}

// flushLoop reports held-back log lines once their interval has passed.
func (l *logLimiter) flushLoop(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush(true)
			return
		case <-t.C:
			l.flush(false)
		}
	}
}
