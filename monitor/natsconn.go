package monitor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// Names of what the daemon creates in JetStream.
const (
	EventsStream     = "SOURCEWATCH_EVENTS"
	DeadLetterStream = "SOURCEWATCH_DEADLETTER"
	StateBucket      = "sourcewatch_state"
	// HeaderReason and HeaderSubject are set on every dead letter.
	HeaderReason  = "Sourcewatch-Reason"
	HeaderSubject = "Sourcewatch-Subject"
	// HeaderDetail says what exactly was wrong, for people.
	HeaderDetail = "Sourcewatch-Detail"
	// HeaderIndex is the element's index when it came from an array.
	HeaderIndex = "Sourcewatch-Index"
	// HeaderTruncated is the original body's length in bytes when the
	// dead letter carries only its start: the body with the headers would
	// exceed the server's max_payload (an event just under it, itself).
	HeaderTruncated = "Sourcewatch-Truncated"
	// deadLetterDuplicates is the dead-letter stream's Nats-Msg-Id window:
	// an event is redelivered, and dead-lettered again, when a restart
	// replays the stream from the window's last snapshot, however long the
	// daemon was down; a day, as the alert stream's.
	deadLetterDuplicates = 24 * time.Hour
)

// EventsSubject is where events for graph are published.
func EventsSubject(prefix, graph string) string { return prefix + ".events." + graph }

// DeadLetterSubject is where rejected events go.
func DeadLetterSubject(prefix string) string { return prefix + ".deadletter" }

// ErrNATS is wrapped by failures to reach or set up NATS.
var ErrNATS = errors.New("nats")

// ErrStreamInUse is returned by Run when one of the daemon's streams
// exists with the subjects of another prefix: another deployment uses the
// NATS account, and updating the stream would take its events away.
var ErrStreamInUse = errors.New("stream in use by another deployment")

// ErrAnotherDaemon is returned by Run, without ha.enabled, when a running
// sourcewatch daemon already serves the same subjects.prefix on the NATS
// account: the two would take each other's consumers and open two
// incidents of one graph, one of which would never resolve.
var ErrAnotherDaemon = errors.New("another sourcewatch daemon serves this prefix")

// ErrDataDirInUse is returned by Run when another daemon holds the
// data_dir its embedded server would store in.
var ErrDataDirInUse = errors.New("data_dir in use by another sourcewatch daemon")

// ErrDataDir is returned by Run when the data_dir its embedded server
// would store in cannot be created or written (a read-only mount, say).
var ErrDataDir = errors.New("data_dir not writable")

// dataDirAdvice ends an ErrDataDir error.
const dataDirAdvice = " (the embedded NATS server stores there: point data_dir at a writable directory, or set nats.url to use a server of your own)"

// startEmbedded runs an in-process nats-server with JetStream in
// <data_dir>/nats, logging to log (nil: nowhere).
func startEmbedded(cfg Config, log server.Logger) (*server.Server, error) {
	l, err := parseListen(cfg.NATS.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: nats.listen: %w", ErrConfig, err)
	}
	opts := &server.Options{
		ServerName: "sourcewatch",
		MaxPayload: embeddedMaxPayload(cfg.MaxEventBytes),
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
		DontListen: l.off,
		Host:       l.host,
		Port:       l.port,
	}
	if !l.off && l.port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if l.off {
		opts.Port = server.RANDOM_PORT // unused, but 0 would mean 4222 in checks
	}
	if !l.off && l.port != 0 {
		// The server would only time out on a port in use: say so now.
		probe, err := net.Listen("tcp", net.JoinHostPort(l.host, strconv.Itoa(l.port)))
		if err != nil {
			return nil, fmt.Errorf("%w: embedded server on %s: %w (another server on it? set nats.listen, or SOURCEWATCH_NATS_LISTEN)", ErrNATS, cfg.NATS.Listen, err)
		}
		_ = probe.Close()
	}
	// JetStream that cannot write its store fails inside the server, which
	// then never gets ready: say so before starting it.
	if err := writableDir(opts.StoreDir); err != nil {
		return nil, fmt.Errorf("%w: %q: %w%s", ErrDataDir, cfg.DataDir, err, dataDirAdvice)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded server: %w", ErrNATS, err)
	}
	if log != nil {
		s.SetLogger(log, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("%w: embedded server on %s not ready (port in use? set nats.listen)", ErrNATS, cfg.NATS.Listen)
	}
	return s, nil
}

// writableDir makes dir if need be and checks a file can be made in it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".writable-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// embeddedMaxPayload is the embedded server's max_payload for a daemon
// that dead-letters messages over maxEvent bytes: twice that, so a message
// somewhat over the limit reaches the daemon and is dead-lettered as
// too_large, saying why, instead of being refused at publish (nats-server's
// default, 1 MiB, equals the default max_event_bytes); at least that
// default and at most the server's hard limit, 64 MiB.
func embeddedMaxPayload(maxEvent int) int32 {
	const floor, ceiling = 1 << 20, 64 << 20
	return int32(min(max(2*int64(maxEvent), floor), ceiling))
}

// CheckCredsFile reports a creds file without an nkey seed, as nats.go
// would at every connection attempt.
func CheckCredsFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer clear(data) // it holds the seed
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return fmt.Errorf("%s: no nkey seed (a .creds file holds a user JWT and its seed): %w", path, err)
	}
	kp.Wipe()
	return nil
}

// CheckSecretPath refuses a key (nats.creds, nats.nkey, nats.tls.key) that
// should name a file but holds the secret itself, an nkey seed or a PEM
// private key pasted in: the file would not open, and the error that says
// so ("open SUAM...: no such file or directory") would put the secret in
// the log and the journal. The value is left out of the error.
func CheckSecretPath(key, path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	what := ""
	switch v := strings.TrimSpace(path); {
	case looksLikeSeed(v):
		what = "an nkey seed"
	case strings.Contains(v, "PRIVATE KEY") || strings.Contains(v, "NKEY SEED") || strings.Contains(v, "-----BEGIN"):
		what = "a key or credentials in PEM form"
	default:
		return nil // a path that does not open: named by whoever opens it
	}
	return fmt.Errorf("%w: %s holds what looks like %s itself, not the path of a file holding it (its value is left out of this message): write it to a file readable by the daemon's user alone (mode 0600) and give that file's path", ErrConfig, key, what)
}

// looksLikeSeed reports v as an nkey seed: 58 base32 characters starting
// with S, whether or not its checksum holds (a seed with a typo is a
// secret still).
func looksLikeSeed(v string) bool {
	if len(v) != 58 || v[0] != 'S' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// ClientAuth is the credentials and TLS of n (creds file, nkey seed,
// user and password, CA and client certificate) as connection options,
// for another client of the daemon's server, such as demo's own.
func ClientAuth(n NATSConfig) ([]nats.Option, error) {
	for _, f := range []struct{ key, path string }{
		{"nats.creds", n.Creds}, {"nats.nkey", n.NKey}, {"nats.tls.key", n.TLS.Key},
	} {
		if err := CheckSecretPath(f.key, f.path); err != nil {
			return nil, err
		}
	}
	var opts []nats.Option
	if n.Creds != "" {
		// nats.go reads the file at every attempt and retries a bad one
		// forever, as if the server were down: read it once now.
		if err := CheckCredsFile(n.Creds); err != nil {
			return nil, fmt.Errorf("%w: nats.creds: %w", ErrConfig, err)
		}
		opts = append(opts, nats.UserCredentials(n.Creds))
	}
	if n.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(n.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: nats.nkey: %w", ErrConfig, err)
		}
		opts = append(opts, o)
	}
	if n.User != "" {
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	}
	if n.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(n.TLS.CA))
	}
	if n.TLS.Cert != "" {
		opts = append(opts, nats.ClientCert(n.TLS.Cert, n.TLS.Key))
	}
	return opts, nil
}

// tlsHint is what a failed connection's TLS error means for the config
// n, when the error alone does not say: a server that wants a client
// certificate closes the connection after the handshake ("tls error:
// connection closed by remote after TLS handshake: ... broken pipe"),
// and one whose certificate no configured CA signed fails verification.
func tlsHint(n NATSConfig, err error) string {
	msg := err.Error()
	switch {
	case n.TLS.Cert == "" && (strings.Contains(msg, "certificate required") || strings.Contains(msg, "closed by remote after TLS handshake")):
		return " (the server likely wants a client certificate: set nats.tls.cert and nats.tls.key)"
	case strings.Contains(msg, "certificate signed by unknown authority") && n.TLS.CA == "":
		return " (set nats.tls.ca to the CA that signed the server's certificate)"
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return " (nats.tls.ca " + n.TLS.CA + " holds no CA that signed the server's certificate)"
	}
	return ""
}

// connect opens the daemon's connection: in-process to the embedded server
// s, or to cfg.NATS.URL with credentials, reconnecting forever.
//
// onConnErr sees every failed attempt to (re)connect, such as a server
// refusing the credentials, which nats.go otherwise only retries; onAsyncErr
// every error the server sends outside a request, such as a permissions
// violation on a publish, which otherwise surfaces only as the publish's
// timeout (nats.go would print it to stderr, outside the log).
func connect(cfg Config, s *server.Server, log *zap.Logger, onChange func(), onConnErr, onAsyncErr func(error)) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("sourcewatch"),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			// Exponential backoff to 10 s with jitter, so a restarted
			// cluster is not hit by every replica at once.
			d := 100 * time.Millisecond << min(attempts, 7)
			d = min(d, 10*time.Second)
			return d/2 + rand.N(d/2+1)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			// A nil error is our own close or drain.
			if err != nil {
				log.Warn("nats disconnected", zap.Error(err))
			}
			onChange()
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", zap.String("url", RedactURLs(c.ConnectedUrl())))
			onChange()
		}),
		nats.ClosedHandler(func(*nats.Conn) { onChange() }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				onConnErr(err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if err != nil {
				onAsyncErr(err)
			}
		}),
	}
	url := cfg.NATS.URL
	if s != nil {
		opts = append(opts, nats.InProcessServer(s))
		url = s.ClientURL()
	} else {
		auth, err := ClientAuth(cfg.NATS)
		if err != nil {
			return nil, err
		}
		WarnReadableSecrets(log, NATSSecretFiles(cfg.NATS)...)
		// A daemon started before its cluster keeps trying instead of
		// exiting, as it would after a later disconnect.
		opts = append(append(opts, auth...), nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s: %w", ErrNATS, RedactURLs(url), redactedError{err, url})
	}
	return nc, nil
}

// ensureJetStream creates, or updates to the configured limits, the events
// and dead-letter streams and the state bucket. The stream names are
// fixed, so one NATS account holds one deployment: a stream that exists
// with another prefix's subjects fails the start instead of being
// updated, the alert stream (which alerts.EnsureStream updates) included.
//
// Changing the events stream's limits is logged: the stream is shared by
// every replica, and the last one started sets them.
// eventsStreamConfig is the events stream as cfg asks for it.
func eventsStreamConfig(cfg Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "sourcewatch node-state events",
		Subjects:    []string{cfg.Subjects.Prefix + ".events.>"},
		Storage:     jetstream.FileStorage,
		Duplicates:  duplicateWindow,
		MaxAge:      max(cfg.Events.MaxAge, 0),
		MaxBytes:    unlimitedIfNotPositive(cfg.Events.MaxBytes),
		MaxMsgs:     unlimitedIfNotPositive(cfg.Events.MaxMsgs),
		Replicas:    max(cfg.Events.Replicas, 1),
	}
}

func ensureJetStream(ctx context.Context, js jetstream.JetStream, cfg Config, log *zap.Logger) (jetstream.Stream, jetstream.KeyValue, error) {
	p := cfg.Subjects.Prefix
	for _, want := range []struct {
		name    string
		subject string
	}{
		{EventsStream, p + ".events.>"},
		{DeadLetterStream, DeadLetterSubject(p)},
		{alerts.StreamName, alerts.StreamConfig(p).Subjects[0]},
	} {
		if err := checkStreamSubjects(ctx, js, want.name, want.subject, p); err != nil {
			return nil, nil, err
		}
	}
	stream, err := updateStream(ctx, js, eventsStreamConfig(cfg), "events", log)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: stream %s: %w", ErrNATS, EventsStream, err)
	}
	if _, err := updateStream(ctx, js, deadLetterStreamConfig(cfg), "dead-letter", log); err != nil {
		hint := ""
		if strings.Contains(err.Error(), "insufficient storage") {
			hint = fmt.Sprintf(" (the stream reserves deadletter.max_bytes, %d, on a server or account that limits JetStream storage: lower it, or give JetStream more)", cfg.DeadLetters.MaxBytes)
		}
		return nil, nil, fmt.Errorf("%w: stream %s: %w%s", ErrNATS, DeadLetterStream, err, hint)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, stateBucketConfig(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: kv %s: %w", ErrNATS, StateBucket, err)
	}
	return stream, kv, nil
}

// stateBucketConfig is the state bucket as cfg sets it.
func stateBucketConfig(cfg Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      StateBucket,
		Description: "sourcewatch window snapshots and alert state",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Events.Replicas, 1),
	}
}

// deadLetterStreamConfig is the dead-letter stream as cfg sets it.
func deadLetterStreamConfig(cfg Config) jetstream.StreamConfig {
	dl := jetstream.StreamConfig{
		Name:        DeadLetterStream,
		Description: "sourcewatch rejected events, with the reason in a header",
		Subjects:    []string{DeadLetterSubject(cfg.Subjects.Prefix)},
		Storage:     jetstream.FileStorage,
		Duplicates:  deadLetterDuplicates,
		MaxAge:      max(cfg.DeadLetters.MaxAge, 0),
		MaxBytes:    unlimitedIfNotPositive(cfg.DeadLetters.MaxBytes),
		Replicas:    max(cfg.Events.Replicas, 1),
	}
	if dl.MaxAge > 0 && dl.Duplicates > dl.MaxAge {
		// JetStream refuses a duplicate window longer than the stream
		// keeps messages.
		dl.Duplicates = dl.MaxAge
	}
	return dl
}

// unlimitedIfNotPositive is a stream limit from a config value, where zero
// or negative means none (JetStream's -1).
func unlimitedIfNotPositive(n int64) int64 {
	if n > 0 {
		return n
	}
	return -1
}

// ensureAlertStream creates, or updates to the configured limits, the
// alert stream; a change is logged, as the events stream's is.
func ensureAlertStream(ctx context.Context, js jetstream.JetStream, cfg Config, log *zap.Logger) error {
	want := alerts.StreamConfig(cfg.Subjects.Prefix,
		alerts.WithMaxAge(cfg.Alerts.MaxAge),
		alerts.WithMaxBytes(cfg.Alerts.MaxBytes),
		alerts.WithReplicas(cfg.Events.Replicas))
	if _, err := updateStream(ctx, js, want, "alert", log); err != nil {
		return fmt.Errorf("alerts: ensuring stream %s: %w", alerts.StreamName, err)
	}
	return nil
}

// updateStream creates the stream, or updates it to want, and logs what
// the update changed in an existing stream's settings as the server holds
// them (so an operator's `nats stream edit` undone at a start is said,
// whatever setting it was), naming the stream by what (events, alert).
func updateStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, what string, log *zap.Logger) (jetstream.Stream, error) {
	var before *jetstream.StreamConfig
	if old, err := js.Stream(ctx, want.Name); err == nil {
		c := old.CachedInfo().Config
		before = &c
	}
	s, err := createOrUpdateStream(ctx, js, want)
	if err != nil || before == nil {
		return s, err
	}
	if changed := streamChanges(*before, s.CachedInfo().Config); len(changed) > 0 {
		log.Warn("changing the "+what+" stream's settings to this config's (every replica shares the stream: the last one started sets them)",
			append([]zap.Field{zap.String("stream", want.Name)}, changed...)...)
	}
	return s, nil
}

// jsStoreFailed is the server's refusal of a stream whose store it
// cannot make, which it answers for a moment after the deletion of a
// stream of that name, while it still removes the old one's files.
const jsStoreFailed jetstream.ErrorCode = 10049

// storeRetryFor bounds how long a create waits out that refusal.
const storeRetryFor = 5 * time.Second

// createOrUpdateStream is js.CreateOrUpdateStream, trying again for up to
// storeRetryFor while the server refuses the store of a stream just
// deleted (an operator's `nats stream rm` followed by a restart), which
// would otherwise fail the start with "error creating store for stream".
func createOrUpdateStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	return waitOutStoreRefusal(ctx, func() (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, want) })
}

// waitOutStoreRefusal calls create until it succeeds or fails otherwise
// than by the refusal of a just-deleted stream's store, for up to
// storeRetryFor.
func waitOutStoreRefusal(ctx context.Context, create func() (jetstream.Stream, error)) (jetstream.Stream, error) {
	deadline := time.Now().Add(storeRetryFor)
	for {
		s, err := create()
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != jsStoreFailed || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// streamChanges lists the settings that differ between two stream
// configs, each as "old -> new".
func streamChanges(a, b jetstream.StreamConfig) []zap.Field {
	var out []zap.Field
	diff := func(name string, x, y any) {
		if x != y {
			out = append(out, zap.String(name, fmt.Sprintf("%v -> %v", x, y)))
		}
	}
	diff("max_age", a.MaxAge, b.MaxAge)
	diff("max_bytes", a.MaxBytes, b.MaxBytes)
	diff("max_msgs", a.MaxMsgs, b.MaxMsgs)
	diff("max_msgs_per_subject", a.MaxMsgsPerSubject, b.MaxMsgsPerSubject)
	diff("max_msg_size", a.MaxMsgSize, b.MaxMsgSize)
	diff("max_consumers", a.MaxConsumers, b.MaxConsumers)
	diff("discard", a.Discard, b.Discard)
	diff("discard_new_per_subject", a.DiscardNewPerSubject, b.DiscardNewPerSubject)
	diff("replicas", a.Replicas, b.Replicas)
	diff("duplicates", a.Duplicates, b.Duplicates)
	diff("deny_delete", a.DenyDelete, b.DenyDelete)
	diff("deny_purge", a.DenyPurge, b.DenyPurge)
	diff("allow_rollup", a.AllowRollup, b.AllowRollup)
	diff("allow_direct", a.AllowDirect, b.AllowDirect)
	diff("compression", a.Compression, b.Compression)
	diff("no_ack", a.NoAck, b.NoAck)
	diff("description", a.Description, b.Description)
	return out
}

// checkStreamSubjects fails when stream exists with subjects other than
// the one subject this deployment's prefix gives it.
func checkStreamSubjects(ctx context.Context, js jetstream.JetStream, stream, subject, prefix string) error {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: stream %s: %w", ErrNATS, stream, err)
	}
	have := s.CachedInfo().Config.Subjects
	if len(have) == 1 && have[0] == subject {
		return nil
	}
	return fmt.Errorf("%w: stream %s has subjects %q, but subjects.prefix %q needs %q; one deployment per NATS account is supported (to change the prefix, delete the stream or edit its subjects)",
		ErrStreamInUse, stream, have, prefix, []string{subject})
}

// RedactURLs is urls, a comma-separated list of NATS URLs such as
// nats.url, with any user, password or token replaced by "***": for logs,
// errors, /readyz and anything else a person or a log shipper reads. It
// does not parse the URLs (a password may hold what no parser accepts):
// whatever precedes the last '@' of an element, after its scheme, is
// userinfo.
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndex(p, "@"); at >= 0 {
			scheme := ""
			if k := strings.Index(p[:at], "://"); k >= 0 {
				scheme = p[:k+3]
			}
			p = scheme + "***" + p[at:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// RedactError returns err with the credentials of urls (comma-separated,
// as a NATS URL list) left out of its text; errors.Is and As still see
// err. For a command's own connection error.
func RedactError(err error, urls string) error {
	if err == nil {
		return nil
	}
	return redactedError{err, urls}
}

// redactedError is err with the credentials of urls left out of its
// text; errors.Is and As still see err.
type redactedError struct {
	err  error
	urls string
}

func (e redactedError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, `parse "`) && strings.Contains(e.urls, "@") {
		// The parser's message quotes pieces of the userinfo too.
		return "not a URL that parses (the details would show its credentials); percent-encode what the user or password holds of : / ? # [ ] @ % (# as %23, / as %2F, @ as %40), or set nats.user and nats.password instead"
	}
	for _, p := range strings.Split(e.urls, ",") {
		if p = strings.TrimSpace(p); p != "" {
			msg = strings.ReplaceAll(msg, p, RedactURLs(p))
		}
	}
	return msg
}

func (e redactedError) Unwrap() error { return e.err }

// asyncErrKind groups the server's asynchronous errors for the log
// limiter, so one kind (a permissions violation repeated every tick)
// does not hold back another.
func asyncErrKind(err error) string {
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		return "permission"
	case errors.Is(err, nats.ErrSlowConsumer):
		return "slow_consumer"
	default:
		return "other"
	}
}

// embeddedLog is the embedded server's logger: its warnings and errors go
// to the daemon's log, each kind at most once per interval (a full disk
// fails every write the same way, and the daemon's own lines only say
// "context deadline exceeded"); its notices go to debug.
type embeddedLog struct {
	z     *zap.Logger
	limit *logLimiter

	mu    sync.Mutex
	kinds map[string]bool
}

// maxEmbeddedKinds bounds the kinds of server line the limiter keeps: the
// rest share one, so no client can grow the daemon's memory by the lines
// it provokes.
const maxEmbeddedKinds = 64

// maxKindLen bounds the part of a server line's format that tells kinds
// apart.
const maxKindLen = 80

// kind is the rate limiter's key for a line of format. nats-server bakes
// what a client sent into the format: its address and id ("127.0.0.1:42884
// - cid:87 - Client parser ERROR ..."), and its bytes, quoted ("proto=
// 'GARBAGE'"). So the kind is the format up to its first quote, at most
// maxKindLen bytes, with digits blanked; past maxEmbeddedKinds kinds the
// rest of a level share one.
func (l *embeddedLog) kind(level, format string) string {
	if i := strings.IndexAny(format, `'"`); i >= 0 {
		format = format[:i]
	}
	if len(format) > maxKindLen {
		format = format[:maxKindLen]
	}
	var b strings.Builder
	digits := false
	for _, r := range format {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	k := "nats-server " + level + ": " + b.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.kinds[k] {
		if len(l.kinds) >= maxEmbeddedKinds {
			return "nats-server " + level + ": other"
		}
		if l.kinds == nil {
			l.kinds = map[string]bool{}
		}
		l.kinds[k] = true
	}
	return k
}

func (l *embeddedLog) Noticef(format string, v ...any) { l.z.Debug(fmt.Sprintf(format, v...)) }
func (l *embeddedLog) Debugf(format string, v ...any)  { l.z.Debug(fmt.Sprintf(format, v...)) }
func (l *embeddedLog) Tracef(format string, v ...any)  { l.z.Debug(fmt.Sprintf(format, v...)) }
func (l *embeddedLog) Warnf(format string, v ...any) {
	l.limit.logAt(zapcore.WarnLevel, l.kind("warn", format), "embedded nats-server: "+fmt.Sprintf(format, v...))
}
func (l *embeddedLog) Errorf(format string, v ...any) {
	l.limit.logAt(zapcore.ErrorLevel, l.kind("error", format), "embedded nats-server: "+fmt.Sprintf(format, v...))
}
func (l *embeddedLog) Fatalf(format string, v ...any) {
	l.z.Error("embedded nats-server: " + fmt.Sprintf(format, v...))
}
