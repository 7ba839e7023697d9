package monitor

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that keeps at most max connections open, so
// HTTP clients cannot take the file descriptors the event store needs.
// A new connection at the bound closes the one idle longest (a
// keep-alive connection between requests) to make room, and only when
// none is idle waits for one to close: a health probe is then not starved for the
// server's whole idle timeout by clients that hold connections open and
// ask nothing (netutil.LimitListener waits in every case). A connection
// closed while its client was about to reuse it is what a keep-alive
// client must expect anyway; Go's and curl's retry the request.
//
// The server reports its connections' states through connState, which
// must be its http.Server.ConnState.
type connLimit struct {
	net.Listener
	max int

	mu   sync.Mutex
	open int
	idle map[*limitedConn]uint64 // when each went idle, as seq counted then
	seq  uint64                  // counts the transitions to idle
	// fresh holds the connections that sent no request yet, with when
	// they were accepted: one silent past newConnGrace is evicted as an
	// idle one is (256 of them held /readyz 4.5 s, until the server's
	// header timeout freed a slot).
	fresh map[*limitedConn]time.Time
	freed chan struct{} // a slot came free; capacity 1
	done  chan struct{} // closed by Close
	once  sync.Once
}

// newConnLimit bounds ln to max connections open at once. Which
// connection has been idle longest is kept by the order connections went
// idle, not by a clock, so an injected clock cannot blur it.
func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{
		Listener: ln, max: max,
		idle:  map[*limitedConn]uint64{},
		fresh: map[*limitedConn]time.Time{},
		freed: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
}

// Accept takes the next connection and then a slot for it (closing the
// longest idle connection, or waiting, at the bound): an idle connection
// is closed only for a client that is there, and one connection at most
// waits beyond the bound.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.acquire(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &limitedConn{Conn: c, l: l}, nil
}

func (l *connLimit) acquire() error {
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return nil
		}
		victim := l.longestIdleLocked()
		if victim == nil {
			victim = l.silentLocked(time.Now())
		}
		if victim != nil {
			delete(l.idle, victim)
			delete(l.fresh, victim)
		}
		l.mu.Unlock()
		if victim != nil {
			// Its Close gives the slot back, for the next turn of the loop
			// (or another acquirer's: then this one evicts again).
			_ = victim.Close()
			continue
		}
		t := time.NewTimer(newConnGrace)
		select {
		case <-l.freed:
		case <-t.C: // a connection may have gone silent past its grace
		case <-l.done:
			t.Stop()
			return net.ErrClosed
		}
		t.Stop()
	}
}

func (l *connLimit) longestIdleLocked() *limitedConn {
	var (
		oldest *limitedConn
		since  uint64
	)
	for c, seq := range l.idle {
		if oldest == nil || seq < since {
			oldest, since = c, seq
		}
	}
	return oldest
}

// newConnGrace is how long a connection may stay open without sending a
// request before a new one at the bound may evict it: a client's request
// follows its connect at once.
const newConnGrace = time.Second

// silentLocked is the connection accepted longest ago that has sent no
// request for newConnGrace, or nil.
func (l *connLimit) silentLocked(now time.Time) *limitedConn {
	var (
		oldest *limitedConn
		since  time.Time
	)
	for c, at := range l.fresh {
		if now.Sub(at) >= newConnGrace && (oldest == nil || at.Before(since)) {
			oldest, since = c, at
		}
	}
	return oldest
}

func (l *connLimit) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// connState tracks which connections are idle; it is the server's
// http.Server.ConnState.
func (l *connLimit) connState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fresh, c)
	switch {
	case state == http.StateNew && !c.isClosed():
		l.fresh[c] = time.Now()
	case state == http.StateIdle && !c.isClosed():
		l.seq++
		l.idle[c] = l.seq
	default:
		delete(l.idle, c)
	}
}

// idleConns counts the connections idle between requests now.
func (l *connLimit) idleConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.idle)
}

// openConns counts the connections open now.
func (l *connLimit) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back once, at its first Close.
type limitedConn struct {
	net.Conn
	l      *connLimit
	mu     sync.Mutex
	closed bool
}

func (c *limitedConn) Close() error {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	c.mu.Unlock()
	err := c.Conn.Close()
	if first {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		delete(c.l.fresh, c)
		c.l.mu.Unlock()
		c.l.release()
	}
	return err
}

func (c *limitedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// maxHTTPConns bounds the HTTP connections open at once; past it a new
// one replaces the one idle longest, or waits for one to close when none
// is idle (see connLimit). Health checks, scrapes and a few dashboards
// need a handful.
const maxHTTPConns = 256
