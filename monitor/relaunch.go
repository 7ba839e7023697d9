package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/forward"
)

// relaunch replaces gr's Localizer by a fresh one from the factory (a new
// plugin process), at most restarts times in a row: the count is reset
// by an inference that works, a reload, and a tick that finds the plugin
// up unless it last died inside an inference (diedInCall).
func (d *Daemon) relaunch(ctx context.Context, gr *graphRT) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	gc := gr.gc.Load()
	if n := gr.relaunches.Load(); n >= int64(gc.Restarts) {
		return fmt.Errorf("graph %q: localizer failed after %d relaunches (restarts: %d)", gr.name, n, gc.Restarts)
	}
	// Each relaunch builds a new localizer, and one that lives to the
	// next tick resets the restarts count: so this is what holds a
	// plugin that dies a moment after each start to the documented rate
	// (seen: 18 a minute). A localizer's supervisor relaunching within
	// an inference takes from the same budget (seen: 7 a minute when
	// each had its own).
	budget := gr.budget
	if b, ok := gr.loc.Load().localizer().(relaunchBudgeter); ok && b.relaunchBudget() != nil {
		budget = b.relaunchBudget()
	}
	if _, err := budget.Take(); err != nil {
		var limit *forward.RelaunchLimitError
		if !errors.As(err, &limit) {
			return fmt.Errorf("graph %q: %w", gr.name, err)
		}
		msg := relaunchLimitWords(limit)
		gr.relaunchErr.Store(&msg)
		return fmt.Errorf("graph %q: %w: %s", gr.name, errRelaunchRate, msg)
	}
	gr.relaunches.Add(1)
	var (
		l   Localizer
		err error
	)
	if r, ok := gr.loc.Load().localizer().(relauncher); ok {
		// The model loaded at start or reload: a bundle file replaced
		// since is applied by a reload, not by a plugin's death.
		l, err = r.Relaunch(ctx)
	} else {
		l, err = d.factory(ctx, *gc, gr.g)
	}
	if err != nil {
		msg := err.Error()
		gr.relaunchErr.Store(&msg)
		return fmt.Errorf("graph %q: relaunch: %w", gr.name, err)
	}
	gr.relaunchErr.Store(nil)
	old := gr.loc.Swap(&locHolder{l: l})
	if err := old.close(); err != nil {
		d.log.Debug("closing failed localizer", zap.String("graph", gr.name), zap.Error(err))
	}
	d.PluginRestarted(gr.name)
	d.log.Warn("localizer relaunched", zap.String("graph", gr.name), zap.Int64("relaunch", gr.relaunches.Load()))
	return nil
}

// relaunchesPerMinute bounds a graph's relaunches, the daemon's and its
// localizers' supervisors' together.
const relaunchesPerMinute = 5

// relaunchBudgeter is a Localizer whose plugin's supervisor takes its
// relaunches from a budget the daemon's relaunches of the graph share.
type relaunchBudgeter interface {
	relaunchBudget() *forward.RelaunchBudget
}

// spanWords says a relaunch span as /readyz has: "a minute" for the
// daemon's.
func spanWords(d time.Duration) string {
	if d == time.Minute {
		return "a minute"
	}
	return d.String()
}

// relaunchLimitWords says a relaunch the graph's budget refused, as
// /readyz has it.
func relaunchLimitWords(limit *forward.RelaunchLimitError) string {
	return fmt.Sprintf("forward plugin relaunched %d times within %v; the next relaunch from %s", limit.Held, spanWords(limit.Span), limit.Next.UTC().Format(time.RFC3339))
}

// notRelaunchedWords says why the daemon does not relaunch gr's dead
// plugin at its ticks, "" when it does: its restarts are used up (or
// none are allowed). The reason is otherwise only in the log.
func notRelaunchedWords(gr *graphRT) string {
	restarts := gr.gc.Load().Restarts
	switch n := gr.relaunches.Load(); {
	case restarts == 0:
		return "not relaunched (restarts: 0)"
	case n >= int64(restarts):
		times := "times"
		if n == 1 {
			times = "time"
		}
		return fmt.Sprintf("its relaunches are used up (relaunched %d %s in a row, restarts: %d); the next inference or localize request tries once more", n, times, restarts)
	}
	return ""
}

// errRelaunchRate is a relaunch refused for relaunchesPerMinute.
var errRelaunchRate = errors.New("forward plugin relaunched too often")
