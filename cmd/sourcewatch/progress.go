package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// progress draws a one-line bar on a terminal. Elsewhere (a log file, a
// service, CI) it logs one info line a minute until Done, so an hour of
// eval in the background shows it is alive, and work shorter than a
// minute says nothing. Done is idempotent and must be called.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	on      bool
	log     *zap.Logger // off the terminal: the heartbeat's
	every   time.Duration
	stop    chan struct{} // closed by Done: the heartbeat returns
	stopped chan struct{} // closed by the heartbeat as it returns
	once    sync.Once
	label   string
	total   int
	done    int
	start   time.Time
	lastAt  time.Time
	// advancedAt is when done last changed (start before it did).
	advancedAt time.Time
	drawn      bool
	finished   bool // Done drew the last line
	suffix     string
	nowFunc    func() time.Time
}

// heartbeatEvery is how often progress logs off the terminal.
const heartbeatEvery = time.Minute

func (a *app) progress(label string, total int) *progress {
	return newProgress(a.stderr, a.terminal, a.log, label, total, heartbeatEvery)
}

// newProgress starts a progress of total units. Off the terminal, with a
// logger, it owns a goroutine that logs every `every` until Done.
func newProgress(w io.Writer, terminal bool, log *zap.Logger, label string, total int, every time.Duration) *progress {
	p := &progress{w: w, on: terminal, log: log, every: every,
		label: label, total: total, start: time.Now(), nowFunc: time.Now}
	p.advancedAt = p.start
	if !p.on && p.log != nil {
		p.stop, p.stopped = make(chan struct{}), make(chan struct{})
		go p.heartbeat()
	}
	return p
}

func (p *progress) heartbeat() {
	defer close(p.stopped)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			now := p.nowFunc()
			done, total, note, elapsed, running := p.done, p.total, p.suffix, now.Sub(p.start), now.Sub(p.advancedAt)
			p.mu.Unlock()
			fields := []zap.Field{zap.Int("done", done), zap.Int("total", total), zap.Duration("elapsed", elapsed.Round(time.Second))}
			if done > 0 && done < total {
				// At the pace so far: a guide, as units need not cost
				// alike. Once the unit under way has outlasted it (a slow
				// plugin's fit after quick solves said "eta 1s" for five
				// minutes), how long that unit has run is said instead.
				left := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
				if running > left {
					fields = append(fields, zap.Duration("current_unit", running.Round(time.Second)))
				} else {
					fields = append(fields, zap.Duration("eta", left.Round(time.Second)))
				}
			}
			if note != "" {
				fields = append(fields, zap.String("at", note))
			}
			p.log.Info(p.label+": progress", fields...)
		}
	}
}

// Set records done units (and an optional note) and redraws at most ten
// times a second. Safe for concurrent use.
func (p *progress) Set(done int, note string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if done != p.done {
		p.advancedAt = p.nowFunc()
	}
	p.done, p.suffix = done, note
	if !p.on {
		return // the heartbeat reads it
	}
	now := p.nowFunc()
	if done < p.total && now.Sub(p.lastAt) < 100*time.Millisecond {
		return
	}
	p.lastAt = now
	p.draw(now)
}

// SetTotal changes the number of units, for work whose size its reports
// revise (a plugin's Fit may say 60 epochs after first saying 5).
func (p *progress) SetTotal(total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = total
}

// Add advances by n units.
func (p *progress) Add(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	done := p.done + n
	p.mu.Unlock()
	p.Set(done, p.suffix)
}

func (p *progress) draw(now time.Time) {
	const width = 30
	frac := 0.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	// Counts can come from a plugin's Fit reports, which may say
	// anything (epoch -1 of 5): the bar is kept within its width.
	frac = min(max(frac, 0), 1)
	fill := int(frac * width)
	elapsed := now.Sub(p.start).Round(100 * time.Millisecond)
	fmt.Fprintf(p.w, "\r\033[K%s [%s%s] %d/%d %s %s", p.label,
		strings.Repeat("=", fill), strings.Repeat(" ", width-fill), p.done, p.total, elapsed, p.suffix)
	p.drawn = true
}

// Done finishes the line.
func (p *progress) Done() {
	if p == nil {
		return
	}
	if !p.on {
		if p.stop != nil {
			p.once.Do(func() { close(p.stop) })
			<-p.stopped
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	p.draw(p.nowFunc())
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
