package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the command is written; it fails loudly rather than
// pretending to work.
func newAlertsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "alerts",
		Short: "alerts (not yet available)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("alerts: not yet available")
		},
	}
}
