package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the command is written; it fails loudly rather than
// pretending to work.
func newPluginCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "plugin",
		Short: "plugin (not yet available)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("plugin: not yet available")
		},
	}
}
