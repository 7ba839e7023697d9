package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
)

const defaultNATSURL = "nats://127.0.0.1:4222"

func newAlertsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "Work with the alerts the monitor publishes",
		Long: "Alerts are JSON objects (schema " + alerts.Schema + ") on <prefix>.alerts.<graph>,\n" +
			"kept in the JetStream stream " + alerts.StreamName + ".",
	}
	cmd.AddCommand(newAlertsTailCmd(a))
	return cmd
}

func newAlertsTailCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print alerts as they arrive, until Ctrl-C",
		Long: "Print alerts as they arrive (readably, or one JSON object per line with --json)\n" +
			"until interrupted. By default only new alerts are shown; --from-start replays\n" +
			"what the stream holds (a week by default), --since from a time or duration ago.\n\n" +
			"The server is --nats, else nats.url from the config file or SOURCEWATCH_NATS_URL,\n" +
			"else " + defaultNATSURL + " (where serve's embedded server listens).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.alertsTail(cmd)
		},
	}
	f := cmd.Flags()
	f.String("graph", "", "only this graph's alerts (default: every graph)")
	f.String("nats", defaultNATSURL, "NATS server URL(s), comma-separated")
	f.String("creds", "", "NATS credentials file")
	f.String("prefix", "sourcewatch", "subject prefix")
	f.Bool("json", false, "print each alert as one JSON line")
	f.Bool("from-start", false, "replay every alert the stream holds first")
	f.String("since", "", "replay alerts since an RFC 3339 time or a duration ago (e.g. 1h)")
	return cmd
}

func (a *app) alertsTail(cmd *cobra.Command) error {
	v := a.v
	var opts []alerts.TailOption
	from := "new alerts"
	fromStart, since := v.GetBool("from_start"), v.GetString("since")
	switch {
	case fromStart && since != "":
		return errors.New("--from-start and --since: give one")
	case fromStart:
		opts, from = append(opts, alerts.FromStart()), "all stored alerts"
	case since != "":
		t, err := parseSince(since, time.Now())
		if err != nil {
			return err
		}
		opts, from = append(opts, alerts.Since(t)), "alerts since "+t.UTC().Format(time.RFC3339)
	}

	url := natsURL(cmd, v)
	copts := []nats.Option{
		nats.Name("sourcewatch alerts tail"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			a.log.Warn("disconnected from NATS", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			a.log.Info("reconnected to NATS", zap.String("url", nc.ConnectedUrlRedacted()))
		}),
	}
	if creds := v.GetString("creds"); creds != "" {
		copts = append(copts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream on %s: %w", url, err)
	}

	prefix, graph, asJSON := v.GetString("prefix"), v.GetString("graph"), v.GetBool("json")
	subject := prefix + ".alerts.>"
	if graph != "" {
		subject = alerts.Subject(prefix, graph)
	}
	opts = append(opts,
		alerts.OnReady(func() {
			a.log.Info("tailing alerts (Ctrl-C to stop)", zap.String("subject", subject),
				zap.String("url", nc.ConnectedUrlRedacted()), zap.String("from", from))
		}),
		alerts.OnInvalid(func(subject string, seq uint64, err error) {
			a.log.Warn("skipping a message that is not an alert", zap.String("subject", subject),
				zap.Uint64("stream_seq", seq), zap.Error(err))
		}),
	)
	first := true
	return alerts.Tail(cmd.Context(), js, prefix, graph, func(al alerts.Alert) error {
		if asJSON {
			b, err := json.Marshal(al)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", b)
			return err
		}
		if !first {
			if _, err := fmt.Fprintln(a.stdout); err != nil {
				return err
			}
		}
		first = false
		return alerts.Format(a.stdout, al)
	}, opts...)
}

// natsURL resolves the server: an explicit --nats, else the config file's
// nats.url (as serve reads it; the --nats flag shadows that nested key in
// viper, hence Sub), else SOURCEWATCH_NATS_URL, else SOURCEWATCH_NATS or
// the flag's default.
func natsURL(cmd *cobra.Command, v *viper.Viper) string {
	if f := cmd.Flags().Lookup("nats"); f != nil && f.Changed {
		return f.Value.String()
	}
	if sub := v.Sub("nats"); sub != nil {
		if u := sub.GetString("url"); u != "" {
			return u
		}
	}
	if u := os.Getenv("SOURCEWATCH_NATS_URL"); u != "" {
		return u
	}
	if u := v.GetString("nats"); u != "" {
		return u
	}
	return defaultNATSURL
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a positive duration (90m)", s)
	}
	return now.Add(-d), nil
}
