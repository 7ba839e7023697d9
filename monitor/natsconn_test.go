package monitor

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// TestStreamOfAnotherPrefixFailsStart: a stream of the daemon's that
// another deployment created under another prefix fails the start, with
// the stream, its subjects and the configured prefix named, and is left
// as it was.
func TestStreamOfAnotherPrefixFailsStart(t *testing.T) {
	tests := []struct {
		stream, subject string
	}{
		{EventsStream, "other.events.>"},
		{DeadLetterStream, "other.deadletter"},
		{alerts.StreamName, "other.alerts.>"},
	}
	for _, tc := range tests {
		t.Run(tc.stream, func(t *testing.T) {
			s := runServer(t)
			_, js := connectJS(t, s.ClientURL())
			ctx := context.Background()
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: tc.stream, Subjects: []string{tc.subject}})
			require.NoError(t, err)

			cfg := testConfig(t, "p")
			cfg.NATS.URL = s.ClientURL()
			d, err := New(cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
			require.NoError(t, err)
			runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			err = d.Run(runCtx)
			require.ErrorIs(t, err, ErrStreamInUse)
			for _, want := range []string{tc.stream, tc.subject, `subjects.prefix "` + DefaultPrefix + `"`} {
				require.ErrorContains(t, err, want)
			}

			st, err := js.Stream(ctx, tc.stream)
			require.NoError(t, err)
			require.Equal(t, []string{tc.subject}, st.CachedInfo().Config.Subjects, "the other deployment's stream is untouched")
			_, err = js.Stream(ctx, EventsStream)
			if tc.stream != EventsStream {
				require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "nothing was created before the check")
			}
		})
	}
}

func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:pass@a:4222, tls://token@b:4222", "nats://***@a:4222,tls://***@b:4222"},
		{"nats://us%zzer:pa@ss@a:4222", "nats://***@a:4222"},
		{"user:s3cret@127.0.0.1:14222", "***@127.0.0.1:14222"},
		{"nats://user:pa/s3cret@127.0.0.1:14222", "nats://***@127.0.0.1:14222"},
	} {
		require.Equal(t, tc.want, RedactURLs(tc.in), tc.in)
	}
	// A URL nats cannot parse is refused without its password.
	cfg := Config{NATS: NATSConfig{URL: "nats://user:pa/s3cret@127.0.0.1:14222"}}
	_, err := connect(cfg, nil, zap.NewNop(), func() {}, func(error) {}, func(error) {})
	require.ErrorIs(t, err, ErrNATS)
	require.NotContains(t, err.Error(), "s3cret")
	require.NotContains(t, err.Error(), ":pa")
	require.Contains(t, err.Error(), "nats://***@127.0.0.1:14222")
	require.Contains(t, err.Error(), "percent-encode", "says how to write such a password")
}

// The embedded server lets a message somewhat over max_event_bytes through,
// so the daemon dead-letters it as too_large instead of the server
// refusing it at publish.
func TestEmbeddedMaxPayload(t *testing.T) {
	for _, tc := range []struct {
		maxEvent int
		want     int32
	}{
		{DefaultMaxEventBytes, 2 * DefaultMaxEventBytes},
		{2000, 1 << 20},
		{10 << 20, 20 << 20},
		{100 << 20, 64 << 20},
	} {
		require.Equal(t, tc.want, embeddedMaxPayload(tc.maxEvent), "max_event_bytes %d", tc.maxEvent)
	}
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:0"
	s, err := startEmbedded(cfg, nil)
	require.NoError(t, err)
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	require.Greater(t, nc.MaxPayload(), int64(cfg.MaxEventBytes), "the default max_event_bytes can be exceeded, and so dead-lettered")
}

// A replica whose config changes the shared events stream's limits says
// so; one that keeps them says nothing.
func TestEnsureJetStreamLogsLimitChanges(t *testing.T) {
	s := runServer(t)
	_, js := connectJS(t, s.ClientURL())
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	cfg := testConfig(t, "p")
	cfg.Events.MaxAge = 24 * time.Hour
	_, _, err := ensureJetStream(context.Background(), js, cfg, log)
	require.NoError(t, err)
	_, _, err = ensureJetStream(context.Background(), js, cfg, log)
	require.NoError(t, err)
	require.Zero(t, logs.Len(), "created, then kept")
	cfg.Events.MaxAge = 10 * time.Minute
	_, _, err = ensureJetStream(context.Background(), js, cfg, log)
	require.NoError(t, err)
	require.Equal(t, 1, logs.Len())
	require.Equal(t, "24h0m0s -> 10m0s", logs.All()[0].ContextMap()["max_age"])

	// An operator's edit of a setting the config does not name is undone
	// at the next start, and said too.
	require.NoError(t, ensureAlertStream(context.Background(), js, cfg, log))
	st, err := js.Stream(context.Background(), alerts.StreamName)
	require.NoError(t, err)
	edited := st.CachedInfo().Config
	edited.MaxMsgs, edited.Discard = 17, jetstream.DiscardNew
	_, err = js.UpdateStream(context.Background(), edited)
	require.NoError(t, err)
	require.NoError(t, ensureAlertStream(context.Background(), js, cfg, log))
	undone := logs.FilterMessageSnippet("changing the alert stream's settings").All()
	require.Len(t, undone, 1)
	require.Equal(t, "17 -> -1", undone[0].ContextMap()["max_msgs"])
	require.Equal(t, "DiscardNew -> DiscardOld", undone[0].ContextMap()["discard"])
}

// The alert stream takes alerts.max_age, alerts.max_bytes and
// events.replicas from the config the daemon starts with (before, it was
// fixed at 7 days, uncapped, one replica whatever events.replicas said),
// and a later start with other limits updates it, keeping its alerts.
func TestAlertStreamLimitsFromConfig(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Alerts = AlertsConfig{MaxAge: 48 * time.Hour, MaxBytes: 8 << 20}
	r := start(t, cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	s, err := r.js.Stream(context.Background(), alerts.StreamName)
	require.NoError(t, err)
	c := s.CachedInfo().Config
	require.Equal(t, 48*time.Hour, c.MaxAge)
	require.Equal(t, int64(8<<20), c.MaxBytes)
	require.Equal(t, 1, c.Replicas)

	core, logs := observer.New(zap.WarnLevel)
	cfg.Alerts = AlertsConfig{MaxAge: time.Hour}
	require.NoError(t, ensureAlertStream(context.Background(), r.js, cfg, zap.New(core)))
	s, err = r.js.Stream(context.Background(), alerts.StreamName)
	require.NoError(t, err)
	c = s.CachedInfo().Config
	require.Equal(t, time.Hour, c.MaxAge)
	require.Equal(t, time.Hour, c.Duplicates, "the duplicate window fits inside max_age")
	require.Equal(t, int64(-1), c.MaxBytes)
	require.Equal(t, 1, logs.Len())
	require.Equal(t, "48h0m0s -> 1h0m0s", logs.All()[0].ContextMap()["max_age"])
	require.Equal(t, "8388608 -> -1", logs.All()[0].ContextMap()["max_bytes"])
}

// An embedded server's port already in use fails the start at once,
// saying so, rather than after the server's 15 s readiness wait.
func TestEmbeddedPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfg := testConfig(t, "p")
	cfg.NATS.Listen = busy.Addr().String()
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	err = d.Run(ctx)
	require.ErrorIs(t, err, ErrNATS)
	require.ErrorContains(t, err, "embedded server on "+busy.Addr().String())
	require.ErrorContains(t, err, "another server on it? set nats.listen")
	require.Less(t, time.Since(began), 5*time.Second)
}

// The embedded server's own lines reach the daemon's log: its notices at
// debug, its warnings and errors at their level, each kind once per
// interval (a full disk fails every write alike, and only the server
// says why).
func TestEmbeddedServerLogs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	z := zap.New(core)
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:0"
	limiter := newLogLimiter(time.Hour, time.Now, z)
	s, err := startEmbedded(cfg, &embeddedLog{z: z, limit: limiter})
	require.NoError(t, err)
	defer s.Shutdown()
	require.NotZero(t, logs.FilterMessageSnippet("Starting nats-server").FilterLevelExact(zapcore.DebugLevel).Len())

	l := &embeddedLog{z: z, limit: limiter}
	for range 3 {
		l.Errorf("JetStream failed to store a msg on stream '%s > %s': %v", "$G", "KV_sourcewatch_state", "write /data/nats/jetstream/1.blk: no space left on device")
	}
	errs := logs.FilterMessageSnippet("embedded nats-server: JetStream failed to store a msg").All()
	require.Len(t, errs, 1, "held back after the first")
	require.Equal(t, zapcore.ErrorLevel, errs[0].Level)
	require.Contains(t, errs[0].Message, "no space left on device")
	l.Warnf("Plaintext passwords detected")
	require.Equal(t, 1, logs.FilterMessage("embedded nats-server: Plaintext passwords detected").FilterLevelExact(zapcore.WarnLevel).Len())

	// A client's address and id are in the server's format: garbage from
	// 100 clients is one kind, logged once, not 100 lines and 100 kinds.
	for i := range 100 {
		l.Errorf(fmt.Sprintf("127.0.0.1:%d - cid:%d - Client parser ERROR, state=%%d, i=%%d: proto='%%q'", 40000+i, i), 0, 0, "GARBAGE")
	}
	require.Equal(t, 1, logs.FilterMessageSnippet("Client parser ERROR").Len())
	// Nor do clients' own bytes, quoted into the format, make kinds of
	// their own: 80 different garbage lines cannot crowd out a real error.
	var errorf func(string, ...any) = l.Errorf
	for i := range 80 {
		errorf(fmt.Sprintf("127.0.0.1:%d - cid:%d - Client parser ERROR, state=%%d, i=%%d: proto='\"X%c%c\\r\"'", 41000+i, 200+i, 'A'+i/26, 'A'+i%26), 0, 0)
	}
	require.Equal(t, 1, logs.FilterMessageSnippet("Client parser ERROR").Len())
	l.Errorf("Filestore [%s] Critical write error: %v", "KV_sourcewatch_state", "no space left on device")
	require.Equal(t, 1, logs.FilterMessageSnippet("Critical write error").Len(), "a real error still has a kind of its own")
	// Past the cap, new kinds share one: the limiter's maps stay bounded.
	// (through a func value: each call is another format, as the server's)
	var warnf func(string, ...any) = l.Warnf
	for i := range 3 * maxEmbeddedKinds {
		warnf(strings.Repeat("x", i+1) + " odd line")
	}
	require.LessOrEqual(t, len(limiter.last), maxEmbeddedKinds+2)
	// Held-back errors are reported at error level.
	limiter.flush(true)
	held := logs.FilterMessageSnippet("Client parser ERROR").All()
	require.Len(t, held, 2)
	require.Equal(t, zapcore.ErrorLevel, held[1].Level)
	require.EqualValues(t, 99+80, held[1].ContextMap()["suppressed"])
}

// The dead-letter stream takes deadletter.max_age and max_bytes; on a
// server whose JetStream storage is smaller than the default cap it
// reserves, the start's error says which key to lower (it was fixed at
// 256 MiB, so a small account could not run the daemon at all).
func TestDeadLetterStreamLimits(t *testing.T) {
	s := runServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxStore: 64 << 20, NoLog: true, NoSigs: true})
	_, js := connectJS(t, s.ClientURL())
	cfg := testConfig(t, "p")
	_, _, err := ensureJetStream(context.Background(), js, cfg, zap.NewNop())
	require.ErrorContains(t, err, "insufficient storage")
	require.ErrorContains(t, err, "the stream reserves deadletter.max_bytes, 268435456")

	cfg.DeadLetters = DeadLetterConfig{MaxAge: 48 * time.Hour, MaxBytes: 8 << 20}
	_, _, err = ensureJetStream(context.Background(), js, cfg, zap.NewNop())
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), DeadLetterStream)
	require.NoError(t, err)
	c := st.CachedInfo().Config
	require.Equal(t, 48*time.Hour, c.MaxAge)
	require.Equal(t, int64(8<<20), c.MaxBytes)

	// Shorter than the 24 h duplicate window, which follows it down (the
	// start failed), and a change is logged, as for the other streams.
	core, logs := observer.New(zap.WarnLevel)
	cfg.DeadLetters.MaxAge = time.Hour
	_, _, err = ensureJetStream(context.Background(), js, cfg, zap.New(core))
	require.NoError(t, err)
	st, err = js.Stream(context.Background(), DeadLetterStream)
	require.NoError(t, err)
	c = st.CachedInfo().Config
	require.Equal(t, time.Hour, c.MaxAge)
	require.Equal(t, time.Hour, c.Duplicates)
	changed := logs.FilterMessageSnippet("changing the dead-letter stream's settings").All()
	require.Len(t, changed, 1)
	require.Equal(t, "48h0m0s -> 1h0m0s", changed[0].ContextMap()["max_age"])
}

// Without HA a second daemon on the same server and prefix is refused
// before it touches anything, naming the running one; once that one is
// stopped, the next starts.
func TestSecondDaemonOnAPrefixIsRefused(t *testing.T) {
	s := runServer(t)
	first := testConfig(t, "p")
	first.NATS.URL = s.ClientURL()
	opts := []Option{preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory)}
	r1 := start(t, first, opts...)

	second := testConfig(t, "p")
	second.NATS.URL = s.ClientURL()
	second.Events.MaxAge, second.Alerts.MaxAge = time.Hour, time.Hour
	d, err := New(second, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = d.Run(ctx)
	require.ErrorIs(t, err, ErrAnotherDaemon)
	require.ErrorContains(t, err, `serves prefix "sourcewatch" on this NATS account: stop it, give this one another subjects.prefix, or run both as replicas with ha.enabled`)
	require.Empty(t, r1.d.readiness(), "the first is untouched")
	for _, name := range []string{EventsStream, alerts.StreamName} {
		st, err := r1.js.Stream(ctx, name)
		require.NoError(t, err)
		require.NotEqual(t, time.Hour, st.CachedInfo().Config.MaxAge, "%s: the refused daemon wrote nothing", name)
	}

	// An HA replica is refused beside a daemon without HA, as that one
	// is beside an active replica: they would publish the same incidents.
	replica := testConfig(t, "p")
	replica.NATS.URL = s.ClientURL()
	replica.HA = HAConfig{Enabled: true, Replica: "a", LeaseTTL: time.Second}
	d, err = New(replica, opts...)
	require.NoError(t, err)
	err = d.Run(ctx)
	require.ErrorIs(t, err, ErrAnotherDaemon)
	require.ErrorContains(t, err, `a daemon without ha.enabled (service id `)
	require.ErrorContains(t, err, `serves prefix "sourcewatch" on this NATS account, and an HA replica beside it would publish the same incidents: stop it, or run it as a replica with ha.enabled too`)
	require.Empty(t, r1.d.readiness(), "the first is untouched")

	r1.stop(t)
	r2 := start(t, second, opts...)
	r2.stop(t)
}

// The server refuses, now and then, a stream made right after the
// deletion of one of the same name (error creating store for stream):
// createOrUpdateStream waits that out, so a start right after an
// operator's `nats stream rm` does not fail. Without the retry, about
// one cycle in two hundred failed here.
func TestCreateOrUpdateStreamRightAfterDeletion(t *testing.T) {
	_, js := connectJS(t, runServer(t).ClientURL())
	cfg := jetstream.StreamConfig{Name: "X", Subjects: []string{"x.>"}, Storage: jetstream.FileStorage}
	for i := range 400 {
		_, err := createOrUpdateStream(t.Context(), js, cfg)
		require.NoError(t, err, "cycle %d", i)
		require.NoError(t, js.DeleteStream(t.Context(), "X"))
	}
}
