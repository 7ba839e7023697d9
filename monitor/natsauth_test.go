package monitor

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// testPKI is a CA and, signed by it, a server certificate for 127.0.0.1
// and a client certificate, written as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	pool                                                 *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
		return path
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sourcewatch test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	leaf := func(serial int64, usage x509.ExtKeyUsage) (certDER, keyDER []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		certDER, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err = x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return certDER, keyDER
	}
	c, k := leaf(2, x509.ExtKeyUsageServerAuth)
	p.serverCert, p.serverKey = write("server.pem", "CERTIFICATE", c), write("server-key.pem", "EC PRIVATE KEY", k)
	c, k = leaf(3, x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = write("client.pem", "CERTIFICATE", c), write("client-key.pem", "EC PRIVATE KEY", k)
	return p
}

// TestDaemonOverTLSWithNKey runs the daemon against a server that wants
// TLS with a client certificate and an nkey user, configured as an
// operator would (nats.tls.*, nats.nkey as files): it connects and
// ingests; without the client certificate it is refused, and /readyz
// says so.
func TestDaemonOverTLSWithNKey(t *testing.T) {
	pki := newTestPKI(t)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))

	serverPair, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	require.NoError(t, err)
	s := runServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
		TLS:   true, TLSVerify: true, TLSTimeout: 5,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pki.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	})

	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.NATS.NKey = seedFile
	cfg.NATS.TLS = TLSConfig{CA: pki.caFile, Cert: pki.clientCert, Key: pki.clientKey}
	stop := readyAndIngesting(t, cfg, nats.RootCAs(pki.caFile), nats.ClientCert(pki.clientCert, pki.clientKey), mustNkey(t, seedFile))
	stop()

	// The server wants a client certificate: without one the daemon is
	// refused, and /readyz names the reason.
	cfg = testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.NATS.NKey = seedFile
	cfg.NATS.TLS = TLSConfig{CA: pki.caFile}
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	_, stop = runInBackground(t, d)
	defer stop()
	body := readyzRefusal(t, d)
	require.Contains(t, body, "nats: waiting for the first connection")
	// TLS 1.3 gives the client the refusal either as the server's alert
	// ("tls: certificate required") or as the connection closed after
	// the handshake ("tls error: ..."); either way a TLS failure.
	require.Regexp(t, `last attempt: [^"]*(tls: certificate required|nats: tls error: )`, body)
	// ... and says what to set, where the TLS error alone may say only
	// "connection closed by remote after TLS handshake: broken pipe".
	require.Contains(t, body, "the server likely wants a client certificate: set nats.tls.cert and nats.tls.key")
	stop()

	// Without nats.tls.ca the server's certificate is not trusted: the
	// refusal says which key to set.
	cfg = testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.NATS.NKey = seedFile
	cfg.NATS.TLS = TLSConfig{Cert: pki.clientCert, Key: pki.clientKey}
	d, err = New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	_, stop = runInBackground(t, d)
	defer stop()
	body = readyzRefusal(t, d)
	require.Contains(t, body, "certificate signed by unknown authority (set nats.tls.ca to the CA that signed the server's certificate)")
}

// readyAndIngesting runs a daemon of cfg (graph p) until the test ends,
// requires it ready, and requires an event published by a client
// connecting with opts (the same credentials) to be applied. stop ends
// the daemon early.
func readyAndIngesting(t *testing.T, cfg Config, opts ...nats.Option) (stop func()) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	_, stop = runInBackground(t, d)
	t.Cleanup(stop) // a second call is harmless
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("daemon never ready")
	}
	nc, err := nats.Connect(cfg.NATS.URL, opts...)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	data, err := json.Marshal(Event{Node: "2", State: StateInfected, TS: time.Now()})
	require.NoError(t, err)
	ack, err := js.Publish(context.Background(), EventsSubject(DefaultPrefix, "p"), data)
	require.NoError(t, err)
	waitSeq(t, d, "p", ack.Sequence)
	return stop
}

func mustNkey(t *testing.T, seedFile string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(seedFile)
	require.NoError(t, err)
	return o
}

// operatorServer runs a server in operator mode (accounts and users as
// JWTs, as NGS or a Synadia-managed cluster issue them) with one account
// that may use JetStream; creds writes a .creds file of a new user of
// that account whose JWT expires at exp (Unix seconds; 0: never).
func operatorServer(t *testing.T) (s *server.Server, creds func(exp int64, notBefore ...int64) string) {
	t.Helper()
	operator, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := operator.PublicKey()
	require.NoError(t, err)
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(operator)
	require.NoError(t, err)
	oclaims, err := jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)

	resolver := &server.MemAccResolver{}
	account := func(jetStream bool) (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		ac := jwt.NewAccountClaims(pub)
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(operator)
		require.NoError(t, err)
		require.NoError(t, resolver.Store(pub, ajwt))
		return kp, pub
	}
	_, sysPub := account(false)
	acct, _ := account(true)
	s = runServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oclaims}, AccountResolver: resolver, SystemAccount: sysPub,
	})
	return s, func(exp int64, notBefore ...int64) string { return writeUserCreds(t, acct, exp, notBefore...) }
}

// TestDaemonWithCredsInOperatorMode runs the daemon against a server in
// operator mode, authenticated by a .creds file (nats.creds): it
// connects, makes its streams and buckets in its account, and ingests.
func TestDaemonWithCredsInOperatorMode(t *testing.T) {
	s, creds := operatorServer(t)
	credsFile := creds(0)

	cfg := testConfig(t, "p")
	cfg.NATS.URL = s.ClientURL()
	cfg.NATS.Creds = credsFile
	readyAndIngesting(t, cfg, nats.UserCredentials(credsFile))
	// Without credentials the server refuses the connection: the creds
	// file is what let the daemon in.
	_, err := nats.Connect(s.ClientURL())
	require.Error(t, err)

	// A creds file without its seed fails the start at once, as a
	// missing one does, instead of a connection retried for ever.
	broken := filepath.Join(t.TempDir(), "broken.creds")
	require.NoError(t, os.WriteFile(broken, []byte("not a creds file\n"), 0o600))
	cfg.NATS.Creds = broken
	_, err = ClientAuth(cfg.NATS)
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "nats.creds: "+broken+": no nkey seed")
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	require.ErrorContains(t, d.Run(t.Context()), "no nkey seed")
}

// A creds file whose user JWT has expired, or is not valid yet, is
// refused by the server as "Authorization Violation" and nothing more;
// /readyz (and the waiting log, from the same text) says which, and when.
func TestExpiredCredsAreNamedWhenRefused(t *testing.T) {
	s, creds := operatorServer(t)
	expired := time.Now().Add(-time.Hour).Truncate(time.Second)
	early := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	// The durations are by when the daemon looked: within a second or so.
	for _, tc := range []struct {
		name, creds, want, ago string
	}{
		{"expired", creds(expired.Unix()), " expired at " + expired.UTC().Format(time.RFC3339) + ", ", `, 1h0m\d+s ago: replace the file`},
		{"not valid yet", creds(0, early.Unix()), " is not valid before " + early.UTC().Format(time.RFC3339) + ", ", `, (2h0m0s|1h59m\d+s) from now: the issuer dated it ahead`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "p")
			cfg.NATS.URL, cfg.NATS.Creds = s.ClientURL(), tc.creds
			d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
			require.NoError(t, err)
			_, stop := runInBackground(t, d)
			defer stop()
			body := readyzRefusal(t, d)
			require.Contains(t, strings.ToLower(body), "authorization violation")
			require.Contains(t, body, "(the user JWT in nats.creds "+cfg.NATS.Creds+tc.want)
			require.Regexp(t, tc.ago, body)
		})
	}
}

// TestDaemonWithUserPassword runs the daemon against a server that wants
// a user and password, given either as nats.user and nats.password or in
// the URL, as operators write them: it connects and ingests. A wrong
// password is refused, and /readyz names the refusal without the secret.
func TestDaemonWithUserPassword(t *testing.T) {
	s := runServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "sw", Password: "s3cret"}},
	})
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")
	for _, tc := range []struct {
		name, url, user, password string
	}{
		{name: "config", url: s.ClientURL(), user: "sw", password: "s3cret"},
		{name: "url", url: "nats://sw:s3cret@" + addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "p")
			cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = tc.url, tc.user, tc.password
			var opts []nats.Option
			if tc.user != "" {
				opts = append(opts, nats.UserInfo(tc.user, tc.password))
			}
			readyAndIngesting(t, cfg, opts...)()
		})
	}

	// Refused (in the URL: TestReadyzSaysWhyNATSRefuses); the secret
	// stays out of /readyz.
	cfg := testConfig(t, "p")
	cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = s.ClientURL(), "sw", "wrong-secret"
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	require.NoError(t, err)
	_, stop := runInBackground(t, d)
	defer stop()
	body := readyzRefusal(t, d)
	require.Contains(t, strings.ToLower(body), "nats: authorization violation")
	require.NotContains(t, body, "wrong-secret")
}

// readyzRefusal waits until d's /readyz answers 503 naming the server's
// refusal of its last connection attempt, and returns that body.
func readyzRefusal(t *testing.T, d *Daemon) string {
	t.Helper()
	var body string
	require.Eventually(t, func() bool {
		if d.HTTPAddr() == "" {
			return false // not listening yet
		}
		var code int
		code, body = get(t, "http://"+d.HTTPAddr()+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "last attempt:")
	}, 15*time.Second, 50*time.Millisecond, "readyz never named the refusal")
	return body
}

// A server that refuses the daemon a publish (here its alerts) says why
// only asynchronously; the daemon's log carries it, naming the subject,
// beside the alert's "not published" warning.
func TestPermissionViolationIsLogged(t *testing.T) {
	s := runServerWith(t, &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "sw", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"sourcewatch.alerts.>"}},
		}}},
	})
	cfg := testConfig(t, "p")
	cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = s.ClientURL(), "sw", "pw"
	cfg.Graphs[0].MinInfected = 1
	core, logs := observer.New(zapcore.WarnLevel)
	d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)))
	require.NoError(t, err)
	_, stop := runInBackground(t, d)
	defer stop()
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("daemon never ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("sw", "pw"))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	publishInfected(t, js, "p", 1, 1)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("error from the NATS server").Len() > 0
	}, 20*time.Second, 10*time.Millisecond, "no log of the server's refusal")
	e := logs.FilterMessage("error from the NATS server").All()[0]
	require.Contains(t, strings.ToLower(e.ContextMap()["error"].(string)), `permissions violation for publish to "sourcewatch.alerts.p"`)
}

// An operator who pastes the secret itself where a file's path belongs
// (an nkey seed as nats.nkey or nats.creds, a PEM key as nats.tls.key)
// gets an error that says so without the secret: before, the error was
// the open's, "open SUAM...: no such file or directory", seed and all,
// printed at start and kept by the journal.
func TestSecretGivenForItsPathStaysOutOfTheError(t *testing.T) {
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	pemKey := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBb0secretsecretsecret\n-----END EC PRIVATE KEY-----\n"
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name, key, secret string
		set               func(*NATSConfig, string)
	}{
		{"nkey", "nats.nkey", string(seed), func(n *NATSConfig, v string) { n.NKey = v }},
		{"nkey with a typo", "nats.nkey", "SUA" + strings.Repeat("B", 55), func(n *NATSConfig, v string) { n.NKey = v }},
		{"creds", "nats.creds", string(seed), func(n *NATSConfig, v string) { n.Creds = v }},
		{"tls key", "nats.tls.key", pemKey, func(n *NATSConfig, v string) { n.TLS.Cert, n.TLS.Key = pki.clientCert, v }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "p")
			cfg.NATS.URL = "nats://127.0.0.1:1"
			tc.set(&cfg.NATS, tc.secret)
			_, err := ClientAuth(cfg.NATS)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.key+" holds what looks like")
			require.NotContains(t, err.Error(), strings.TrimSpace(tc.secret)[:20])

			d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
			require.NoError(t, err)
			err = d.Run(t.Context())
			require.ErrorContains(t, err, tc.key+" holds what looks like")
			require.NotContains(t, err.Error(), strings.TrimSpace(tc.secret)[:20])
		})
	}
	// A path that does not open is still named, as before.
	_, err = ClientAuth(NATSConfig{NKey: "/nonexistent/user.nk"})
	require.ErrorContains(t, err, "/nonexistent/user.nk")
}

// A user the server denies a JetStream API subject the setup needs gets
// no answer to that request, only its timeout: the start's error names
// the refusal (the subject and the permission), where it said only
// "stream SOURCEWATCH_EVENTS: context deadline exceeded".
// With HA, the lease bucket's likewise.
func TestSetupTimeoutNamesThePermissionRefused(t *testing.T) {
	for _, tc := range []struct {
		name, deny string
		ha         bool
	}{
		{"events stream", "SOURCEWATCH_EVENTS", false},
		{"lease bucket", "KV_sourcewatch_lease", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := runServerWith(t, &server.Options{
				Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
				Users: []*server.User{{Username: "sw", Password: "pw", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.*." + tc.deny}},
				}}},
			})
			cfg := testConfig(t, "p")
			cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = s.ClientURL(), "sw", "pw"
			cfg.HA.Enabled = tc.ha
			d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory))
			require.NoError(t, err)
			d.setupFor = 3 * time.Second
			err = d.Run(t.Context()) // the lease's requests time out by jetstream's default, 5 s
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorContains(t, err, "the NATS server refused this user a permission")
			require.ErrorContains(t, err, `Publish to "$JS.API.STREAM.INFO.`+tc.deny+`"`)
		})
	}
}

// leastPrivilege is the permissions README's Security section lists for
// the daemon's NATS user, for prefix (HA's lease bucket included).
func leastPrivilege(prefix string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			prefix + ".alerts.>", prefix + ".deadletter", "$SRV.PING.sourcewatch",
			"$KV.sourcewatch_state.>", "$KV.sourcewatch_lease.>",
			"$JS.API.INFO",
			"$JS.API.STREAM.*.SOURCEWATCH_EVENTS", "$JS.API.STREAM.*.SOURCEWATCH_ALERTS", "$JS.API.STREAM.*.SOURCEWATCH_DEADLETTER",
			"$JS.API.STREAM.*.KV_sourcewatch_state", "$JS.API.STREAM.*.KV_sourcewatch_lease",
			"$JS.API.STREAM.MSG.GET.SOURCEWATCH_EVENTS", "$JS.API.STREAM.MSG.GET.SOURCEWATCH_ALERTS",
			"$JS.API.DIRECT.GET.KV_sourcewatch_state.>", "$JS.API.DIRECT.GET.KV_sourcewatch_lease.>",
			"$JS.API.CONSUMER.*.SOURCEWATCH_EVENTS", "$JS.API.CONSUMER.*.SOURCEWATCH_EVENTS.>",
			"$JS.API.CONSUMER.MSG.NEXT.SOURCEWATCH_EVENTS.*",
			"$JS.API.CONSUMER.*.KV_sourcewatch_state.>", "$JS.API.CONSUMER.*.KV_sourcewatch_lease.>",
			"$JS.ACK.SOURCEWATCH_EVENTS.>", "$JS.FC.>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", prefix + ".svc.>", "$SRV.>"}},
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

// The daemon runs on a user with only the permissions README lists:
// it starts (twice: the second restores what the first snapshotted),
// ingests, dead-letters, alerts and answers its service, and the server
// refuses it nothing. With or without HA.
func TestDaemonWithLeastPrivilegeUser(t *testing.T) {
	for _, ha := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "ha"}[ha], func(t *testing.T) {
			s := runServerWith(t, &server.Options{
				Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
				Users: []*server.User{
					{Username: "sw", Password: "pw", Permissions: leastPrivilege(DefaultPrefix)},
					{Username: "client", Password: "pw"},
					// A producer as README has it: events, and its acks.
					{Username: "producer", Password: "pw", Permissions: &server.Permissions{
						Publish:   &server.SubjectPermission{Allow: []string{DefaultPrefix + ".events.>"}},
						Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
					}},
					// A caller of the service as README has it.
					{Username: "caller", Password: "pw", Permissions: &server.Permissions{
						Publish:   &server.SubjectPermission{Allow: []string{DefaultPrefix + ".svc.>"}},
						Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
					}},
				},
			})
			cfg := testConfig(t, "p")
			cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = s.ClientURL(), "sw", "pw"
			cfg.Graphs[0].MinInfected = 1
			cfg.HA.Enabled = ha
			nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("client", "pw"))
			require.NoError(t, err)
			defer nc.Close()
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			pnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("producer", "pw"))
			require.NoError(t, err)
			defer pnc.Close()
			pjs, err := jetstream.New(pnc)
			require.NoError(t, err)
			cnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("caller", "pw"))
			require.NoError(t, err)
			defer cnc.Close()
			for run := range 2 {
				core, logs := observer.New(zapcore.WarnLevel)
				d, err := New(cfg, preload(t, 4, "p"), WithLocalizerFactory((&factoryOf{}).factory), WithLogger(zap.New(core)))
				require.NoError(t, err)
				_, stop := runInBackground(t, d)
				select {
				case <-d.Ready():
				case <-time.After(30 * time.Second):
					t.Fatalf("run %d: daemon never ready: %v", run, logs.All())
				}
				publishInfected(t, pjs, "p", 3, 3)
				_, err = js.Publish(t.Context(), EventsSubject(DefaultPrefix, "p"), []byte(`{"node":"99","state":"infected"}`))
				require.NoError(t, err)
				_, err = js.Publish(t.Context(), EventsSubject(DefaultPrefix, "nope"), []byte(`{"node":"1","state":"infected"}`))
				require.NoError(t, err)
				if run == 0 { // run 1 continues the incident, which may need no new alert
					require.Eventually(t, func() bool {
						st, err := js.Stream(t.Context(), "SOURCEWATCH_ALERTS")
						return err == nil && st.CachedInfo().State.Msgs > 0
					}, 20*time.Second, 20*time.Millisecond, "no alert")
				}
				seq := lastSeq(t, js)
				waitSeq(t, d, "p", seq-2)
				require.Eventually(t, func() bool {
					st, err := js.Stream(t.Context(), DeadLetterStream)
					return err == nil && st.CachedInfo().State.Msgs >= 2*uint64(run+1)
				}, 20*time.Second, 20*time.Millisecond, "run %d: no dead letters", run)
				if !ha || run == 0 {
					msg, err := cnc.Request(DefaultPrefix+".svc.status", nil, 10*time.Second)
					require.NoError(t, err)
					require.Contains(t, string(msg.Data), `"ready":true`)
				}
				stop()
				require.Empty(t, logs.FilterMessage("error from the NATS server").All(), "run %d", run)
				require.Empty(t, logs.FilterMessageSnippet("snapshot").All(), "run %d", run)
			}
		})
	}
}

// writeUserCreds writes a .creds file (mode 0600) for a new user of the
// account acct signs, whose JWT expires at exp (Unix seconds; 0: never)
// and is valid from notBefore if one is given, and returns its path.
func writeUserCreds(t *testing.T, acct nkeys.KeyPair, exp int64, notBefore ...int64) string {
	t.Helper()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := user.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.Expires = exp
	if len(notBefore) > 0 {
		uc.NotBefore = notBefore[0]
	}
	ujwt, err := uc.Encode(acct)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sourcewatch.creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))
	return path
}
