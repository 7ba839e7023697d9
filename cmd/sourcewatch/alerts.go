package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/monitor"
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
			"Server, credentials and prefix default to serve's: with --config (or the\n" +
			"SOURCEWATCH_* environment) nats.url, nats.listen, nats.creds/nkey/user/password/tls\n" +
			"and subjects.prefix are read; without, " + defaultNATSURL + " (where serve's\n" +
			"embedded server listens) and prefix sourcewatch.",
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
	f.Bool("json", false, "print each alert as one JSON line, as its message carried it (unknown fields kept)")
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

	url, copts, creds, err := tailConnection(cmd, v, a.log)
	if err != nil {
		return err
	}
	copts = append(copts,
		nats.Name("sourcewatch alerts tail"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			// Closing the connection on the way out (Ctrl-C) reports a
			// disconnect too; only a lost connection is worth a warning.
			if c.IsClosed() || cmd.Context().Err() != nil {
				return
			}
			a.log.Warn("disconnected from NATS", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			a.log.Info("reconnected to NATS", zap.String("url", monitor.RedactURLs(nc.ConnectedUrl())))
		}),
		// A subscription the account may not make is refused only
		// asynchronously: said in the log, not printed beside it.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			a.log.Warn("error from the NATS server", zap.Error(err))
		}),
	)
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w%s", monitor.RedactURLs(url), monitor.RedactError(err, url),
			monitor.CredsValidityHint(creds.Key, creds.Path, err, time.Now()))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream on %s: %w", monitor.RedactURLs(url), err)
	}

	prefix, graph, asJSON := tailPrefix(cmd, v), v.GetString("graph"), v.GetBool("json")
	subject := prefix + ".alerts.>"
	if graph != "" {
		subject = alerts.Subject(prefix, graph)
	}
	opts = append(opts,
		alerts.OnReady(func() {
			a.log.Info("tailing alerts (Ctrl-C to stop)", zap.String("subject", subject),
				zap.String("url", monitor.RedactURLs(nc.ConnectedUrl())), zap.String("from", from))
			if graph != "" {
				// After the line saying what is tailed, which it qualifies.
				a.warnUnknownAlertGraph(cmd.Context(), js, prefix, graph)
			}
		}),
		alerts.OnInvalid(func(subject string, seq uint64, err error) {
			a.log.Warn("skipping a message that is not an alert", zap.String("subject", subject),
				zap.Uint64("stream_seq", seq), zap.Error(err))
		}),
		alerts.OnRecreated(func() {
			a.log.Warn("the alert stream was deleted and made anew: following the new one from its first alert (what the old one held after the last alert shown is gone)",
				zap.String("stream", alerts.StreamName))
		}),
	)
	first := true
	var line bytes.Buffer
	return alerts.TailRaw(cmd.Context(), js, prefix, graph, func(al alerts.Alert, data []byte) error {
		if asJSON {
			// The message as published, not re-encoded from Alert: a
			// field a newer build adds to v1 reaches the consumer too.
			// Compacted, so that each alert is one line.
			line.Reset()
			if err := json.Compact(&line, data); err != nil {
				return err
			}
			line.WriteByte('\n')
			_, err := a.stdout.Write(line.Bytes())
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

// warnUnknownAlertGraph warns when the alerts stream holds alerts of
// other graphs but none of graph: a misspelt --graph would otherwise
// wait in silence. Nothing is said when the stream holds none at all (a
// new deployment) or cannot be read (tail reports that itself).
func (a *app) warnUnknownAlertGraph(ctx context.Context, js jetstream.JetStream, prefix, graph string) {
	s, err := js.Stream(ctx, alerts.StreamName)
	if err != nil {
		return
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+".alerts.>"))
	if err != nil || len(info.State.Subjects) == 0 {
		return
	}
	if _, ok := info.State.Subjects[alerts.Subject(prefix, graph)]; ok {
		return
	}
	var names []string
	for subj := range info.State.Subjects {
		names = append(names, strings.TrimPrefix(subj, prefix+".alerts."))
	}
	slices.Sort(names)
	if len(names) > 20 {
		names = append(names[:20], "...")
	}
	a.log.Warn("no alert of this graph is stored, while other graphs have some (misspelt --graph?); waiting for its first",
		zap.String("graph", graph), zap.String("graphs_with_alerts", strings.Join(names, ", ")))
}

// natsSection returns the config's nats.* keys, from the file and from the
// SOURCEWATCH_NATS_* environment, the environment winning. The --nats
// flag (and SOURCEWATCH_NATS, its environment binding) shadows the nested
// keys in v: once it holds a value, v.Sub("nats") is nil and the file's
// credentials would be lost, so the section is read from the file itself.
func natsSection(v *viper.Viper) (*viper.Viper, error) {
	nv := viper.New()
	nv.SetEnvPrefix("SOURCEWATCH_NATS")
	nv.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	nv.AutomaticEnv()
	fv, err := configFile(v)
	if err != nil || fv == nil {
		return nv, err
	}
	path := fv.ConfigFileUsed()
	if section := fv.GetStringMap("nats"); len(section) > 0 {
		if err := nv.MergeConfigMap(section); err != nil {
			return nil, fmt.Errorf("config %q: nats: %w", path, err)
		}
	}
	return nv, nil
}

// tailConnection finds the server and credentials the way serve does, so
// that `alerts tail --config the-serve-config.yaml` reaches its server:
// an explicit --nats, else nats.url (file or SOURCEWATCH_NATS_URL), else
// the embedded server's nats.listen, else the default address. --creds, or
// nats.creds / nkey / user / password / tls from the config, authenticate;
// creds is the creds file used and its key, for CredsValidityHint.
func tailConnection(cmd *cobra.Command, v *viper.Viper, log *zap.Logger) (string, []nats.Option, monitor.SecretFile, error) {
	nv, err := natsSection(v)
	if err != nil {
		return "", nil, monitor.SecretFile{}, err
	}
	url := nv.GetString("url")
	if f := cmd.Flags().Lookup("nats"); f != nil && f.Changed {
		url = f.Value.String()
	}
	if url == "" {
		// SOURCEWATCH_NATS, the flag's own environment binding.
		if u := v.GetString("nats"); u != "" && u != defaultNATSURL {
			url = u
		}
	}
	if url == "" {
		url = defaultNATSURL
		if listen := nv.GetString("listen"); listen != "" {
			host, port, err := net.SplitHostPort(listen)
			switch {
			case listen == "-1" || port == "-1":
				return "", nil, monitor.SecretFile{}, fmt.Errorf("nats.listen %q: serve's embedded server takes no clients; set one or give --nats", listen)
			case err != nil:
				return "", nil, monitor.SecretFile{}, fmt.Errorf("nats.listen %q: want host:port: %w", listen, err)
			case port != "0":
				if host == "" {
					host = "127.0.0.1"
				}
				url = "nats://" + net.JoinHostPort(host, port)
			}
		}
	}
	var opts []nats.Option
	creds := v.GetString("creds")
	if creds == "" {
		creds = nv.GetString("creds")
	}
	for _, f := range []struct{ key, path string }{
		{"creds", creds}, {"nats.nkey", nv.GetString("nkey")}, {"nats.tls.key", nv.GetString("tls.key")},
	} {
		if err := monitor.CheckSecretPath(f.key, f.path); err != nil {
			return "", nil, monitor.SecretFile{}, err
		}
	}
	credsKey := "nats.creds"
	if v.GetString("creds") != "" {
		credsKey = "--creds"
	}
	monitor.WarnReadableSecrets(log, monitor.SecretFile{Key: credsKey, Path: creds},
		monitor.SecretFile{Key: "nats.nkey", Path: nv.GetString("nkey")}, monitor.SecretFile{Key: "nats.tls.key", Path: nv.GetString("tls.key")})
	if creds != "" {
		if err := monitor.CheckCredsFile(creds); err != nil {
			return "", nil, monitor.SecretFile{}, fmt.Errorf("creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(creds))
	}
	if seed := nv.GetString("nkey"); seed != "" {
		o, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			return "", nil, monitor.SecretFile{}, fmt.Errorf("nats.nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if user := nv.GetString("user"); user != "" {
		opts = append(opts, nats.UserInfo(user, nv.GetString("password")))
	}
	if ca := nv.GetString("tls.ca"); ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	if cert, key := nv.GetString("tls.cert"), nv.GetString("tls.key"); cert != "" || key != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	return url, opts, monitor.SecretFile{Key: credsKey, Path: creds}, nil
}

// tailPrefix is --prefix when given, else serve's subjects.prefix (file or
// SOURCEWATCH_SUBJECTS_PREFIX), else the default.
func tailPrefix(cmd *cobra.Command, v *viper.Viper) string {
	if f := cmd.Flags().Lookup("prefix"); f != nil && !f.Changed {
		if p := v.GetString("subjects.prefix"); p != "" {
			return p
		}
	}
	return v.GetString("prefix")
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if t.After(now) {
			// The stream would deliver from then: nothing, new alerts
			// included, until that time comes.
			return time.Time{}, fmt.Errorf("--since %q is in the future (now is %s): no alert would be shown before then, new ones included; leave --since out to follow new alerts",
				s, now.UTC().Format(time.RFC3339))
		}
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a positive duration (90m)", s)
	}
	return now.Add(-d), nil
}
