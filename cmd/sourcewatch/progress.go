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
// service, CI) it logs one info line a minute while the work lasts, so
// an hour of eval in the background shows it is alive, and work shorter
// than a minute says nothing.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	on      bool
	log     *zap.Logger // off the terminal: the heartbeat's
	every   time.Duration
	label   string
	total   int
	done    int
	start   time.Time
	lastAt  time.Time
	drawn   bool
	suffix  string
	nowFunc func() time.Time
}

// heartbeatEvery is how often progress logs off the terminal.
const heartbeatEvery = time.Minute

func (a *app) progress(label string, total int) *progress {
	p := &progress{w: a.stderr, on: a.terminal, log: a.log, every: heartbeatEvery,
		label: label, total: total, start: time.Now(), nowFunc: time.Now}
	if !p.on {
		p.lastAt = p.start // the first heartbeat a minute in
	}
	return p
}

// Set records done units (and an optional note) and redraws at most ten
// times a second. Safe for concurrent use.
func (p *progress) Set(done int, note string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.suffix = done, note
	now := p.nowFunc()
	if !p.on {
		if p.log != nil && now.Sub(p.lastAt) >= p.every {
			p.lastAt = now
			p.log.Info(p.label+": progress", zap.Int("done", done), zap.Int("total", p.total),
				zap.Duration("elapsed", now.Sub(p.start).Round(time.Second)), zap.String("at", note))
		}
		return
	}
	if done < p.total && now.Sub(p.lastAt) < 100*time.Millisecond {
		return
	}
	p.lastAt = now
	p.draw(now)
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
	if frac > 1 {
		frac = 1
	}
	fill := int(frac * width)
	elapsed := now.Sub(p.start).Round(100 * time.Millisecond)
	fmt.Fprintf(p.w, "\r\033[K%s [%s%s] %d/%d %s %s", p.label,
		strings.Repeat("=", fill), strings.Repeat(" ", width-fill), p.done, p.total, elapsed, p.suffix)
	p.drawn = true
}

// Done finishes the line.
func (p *progress) Done() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(p.nowFunc())
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
