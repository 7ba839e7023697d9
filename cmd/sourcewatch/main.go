// Command sourcewatch finds where a spread started: it simulates and
// evaluates, trains SL-VAE bundles, localizes sources in observations, and
// runs the streaming monitor. See the README for each command.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sourcewatch/sourcewatch/eval"
)

// commit is the commit this binary was built from, set by make build
// (-ldflags -X main.commit=...); empty in a plain go build. Only the
// sourcewatch binary carries it: a plugin's SHA-256 must depend on its
// source alone.
var commit string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(os.Stdout, os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, eval.ErrInterrupted) {
			// A command cut short by Ctrl-C or SIGTERM fails with whatever
			// call the cancellation reached ("forward vjp: context
			// canceled"); say first that it was stopped.
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintln(os.Stderr, "sourcewatch:", err)
		stop()
		os.Exit(1)
	}
}
