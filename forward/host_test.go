package forward_test

import (
	"context"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func TestMain(m *testing.M) {
	if os.Getenv(orphanEnv) != "" {
		orphanHost()
		return
	}
	if spec := os.Getenv(swapperEnv); spec != "" {
		swapForever(spec)
		return
	}
	forwardtest.Main(m)
}

func karate(t testing.TB) *graph.Graph {
	t.Helper()
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	return g
}

func launch(t *testing.T, name string, opts ...forward.LaunchOption) *forward.Process {
	t.Helper()
	p, err := forward.Launch(t.Context(), forwardtest.Build(t, name), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func batch(n, rows int, seed uint64) (x, dy *mat.Dense) {
	rng := rand.New(rand.NewPCG(seed, 1))
	x, dy = mat.NewDense(rows, n, nil), mat.NewDense(rows, n, nil)
	for i := 0; i < rows; i++ {
		for j := 0; j < n; j++ {
			x.Set(i, j, rng.Float64())
			dy.Set(i, j, rng.NormFloat64())
		}
	}
	return x, dy
}

func TestRoundTripEqualsInProcess(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, "icmf")
	in := icmf.New()
	params := map[string]string{"steps": "3"}
	require.NoError(t, p.Configure(t.Context(), g, params, nil))
	require.NoError(t, in.Configure(t.Context(), g, params, nil))
	x, _ := batch(g.N(), 5, 1)
	yp, err := p.Predict(t.Context(), x)
	require.NoError(t, err)
	yi, err := in.Predict(t.Context(), x)
	require.NoError(t, err)
	require.Equal(t, yi.RawMatrix().Data, yp.RawMatrix().Data)

	// A strided view travels as its logical rows.
	view := x.Slice(1, 3, 0, g.N()).(*mat.Dense)
	yv, err := p.Predict(t.Context(), view)
	require.NoError(t, err)
	require.Equal(t, yi.RawRowView(1), yv.RawRowView(0))
	require.Equal(t, yi.RawRowView(2), yv.RawRowView(1))

	var prog []forward.Progress
	pairs := []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1}}}
	fp, err := p.Fit(t.Context(), pairs, forward.FitOptions{}, func(pr forward.Progress) { prog = append(prog, pr) })
	require.NoError(t, err)
	fi, err := in.Fit(t.Context(), pairs, forward.FitOptions{}, nil)
	require.NoError(t, err)
	require.Equal(t, fi.Metrics, fp.Metrics)
	require.Len(t, prog, 1)
	require.True(t, math.IsNaN(prog[0].ValLoss), "NaN survives the wire")
	forwardtest.CheckVJP(t, p, g)
}

func TestSentinelsCrossTheWire(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, "icmf")
	x, _ := batch(g.N(), 1, 2)
	_, err := p.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-icmf: predict")

	err = p.Configure(t.Context(), g, nil, []byte("junk"))
	require.ErrorIs(t, err, forward.ErrBadState)
	err = p.Configure(t.Context(), g, map[string]string{"bogus": "1"}, nil)
	require.ErrorContains(t, err, `unknown param "bogus"`)
	_, err = p.Fit(t.Context(), nil, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrNotConfigured)
}

// Fit's counts travel as int32: one beyond is refused by name, not
// wrapped into another run (4294967297 epochs became 1).
func TestFitRefusesCountsBeyondTheProtocol(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, "icmf")
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	pairs := []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1}}}
	_, err := p.Fit(t.Context(), pairs, forward.FitOptions{Epochs: 1<<32 + 1}, nil)
	require.ErrorContains(t, err, "fit: epochs 4294967297 outside the protocol's int32 (at most 2147483647)")
	_, err = p.Fit(t.Context(), pairs, forward.FitOptions{BatchSize: 1 << 31}, nil)
	require.ErrorContains(t, err, "fit: batch size 2147483648 outside the protocol's int32")
	_, err = p.Fit(t.Context(), pairs, forward.FitOptions{Epochs: 2}, nil)
	require.NoError(t, err)
}

func TestChecksum(t *testing.T) {
	t.Parallel()
	path := forwardtest.Build(t, "icmf")
	sum, err := forward.FileSHA256(path)
	require.NoError(t, err)

	p, err := forward.Launch(t.Context(), path, forward.WithChecksum(sum))
	require.NoError(t, err)
	require.NoError(t, p.Close())

	wrong := append([]byte(nil), sum...)
	wrong[0] ^= 0xff
	_, err = forward.Launch(t.Context(), path, forward.WithChecksum(wrong))
	require.ErrorIs(t, err, forward.ErrChecksum)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, hex.EncodeToString(sum))
	require.ErrorContains(t, err, hex.EncodeToString(wrong))
}

// A binary still open for writing (here by the test itself; in a
// program that copied it into place, by a child forked meanwhile) cannot
// be executed. Launch tries again until the writer lets go.
func TestLaunchWaitsForABinaryBeingWritten(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(forwardtest.Build(t, "icmf"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), forward.BinaryPrefix+"icmf")
	w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = w.Write(src)
	require.NoError(t, err)

	core, logs := observer.New(zapcore.DebugLevel)
	done := make(chan error, 1)
	go func() {
		p, err := forward.Launch(t.Context(), path, forward.WithLogger(zap.New(core)))
		if err == nil {
			err = p.Close()
		}
		done <- err
	}()
	// The writer lets go only once a start has failed for it.
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("busy being written").Len() > 0
	}, 10*time.Second, time.Millisecond, "the first start was not retried")
	require.NoError(t, w.Close())
	require.NoError(t, <-done)
}

// faulty is the test plugin with injectable faults.
const faulty = "./forward/internal/testplugins/faulty"

func TestBadOutput(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, faulty)
	x, dy := batch(g.N(), 2, 3)
	target, _ := batch(g.N(), 1, 5)
	for _, tc := range []struct{ fault, predict, vjp, loss string }{
		{"nan", "predict: y[0][0] is NaN", "vjp: y[0][0] is NaN", "squared-error vjp: loss[0] is NaN"},
		{"inf", "predict: y[0][0] is +Inf", "vjp: dx[0][0] is +Inf", "squared-error vjp: loss[0] is +Inf"},
		{"short", "predict: y is 2x33, want 2x34", "vjp: y is 2x33, want 2x34", "predict returned 2x33 for 2x34"},
		{"range", "predict: y[0][0] is 1.5, outside [0, 1] (end the model in a sigmoid or a clamp, see forward/README.md)", "vjp: y[0][0] is 1.5, outside [0, 1]", ""},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": tc.fault}, nil))
			_, err := p.Predict(t.Context(), x)
			require.ErrorIs(t, err, forward.ErrBadOutput)
			require.ErrorContains(t, err, "forward plugin sourcewatch-forward-faulty: "+tc.predict)
			_, _, err = p.VJP(t.Context(), x, dy)
			require.ErrorIs(t, err, forward.ErrBadOutput)
			require.ErrorContains(t, err, tc.vjp)
			_, _, err = p.SquaredErrorLoss(t.Context(), x, target)
			if tc.loss == "" {
				// The fused call returns no y to check.
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, forward.ErrBadOutput)
			require.ErrorContains(t, err, tc.loss)
		})
	}
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "none"}, nil))
	_, err := p.Predict(t.Context(), x)
	require.NoError(t, err, "the same plugin without a fault is fine")
}

func TestHangingPluginHitsDeadline(t *testing.T) {
	t.Parallel()
	g := karate(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := launch(t, faulty, forward.WithCallTimeout(time.Second), forward.WithLogger(zap.New(core)))
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "hang"}, nil))
	x, dy := batch(g.N(), 1, 4)
	_, _, err := p.VJP(t.Context(), x, dy)
	require.ErrorIs(t, err, forward.ErrCallTimeout)
	require.ErrorContains(t, err, "no answer within 1s")
	require.False(t, errors.Is(err, context.DeadlineExceeded), "the caller's context did not expire")

	// The caller's own cancellation is reported as such, not as a hang.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = p.Predict(ctx, x)
	require.ErrorIs(t, err, context.Canceled)

	pid := p.Pid()
	require.NoError(t, p.Close())
	require.True(t, p.Exited())
	requireGone(t, pid)
	// Killed by this host, which says why: go-plugin's "exited ...
	// signal: killed" read as if something else had killed it.
	require.Zero(t, logs.FilterMessage("plugin process exited").Len(), "%v", logs.All())
}

func TestCrashingPluginReturnsError(t *testing.T) {
	t.Parallel()
	g := karate(t)
	core, logs := observer.New(zapcore.InfoLevel)
	p := launch(t, faulty, forward.WithLogger(zap.New(core)))
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "crash", "fault_after": "2"}, nil))
	x, dy := batch(g.N(), 1, 5)
	_, _, err := p.VJP(t.Context(), x, dy)
	require.NoError(t, err, "the first call is fine")
	_, err = p.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrPluginExited)
	// How it ended, which go-plugin only logs, is in the error.
	require.ErrorContains(t, err, "forward plugin exited (exit status 3: ")
	require.True(t, p.Exited())
	_, _, err = p.VJP(t.Context(), x, dy)
	require.ErrorIs(t, err, forward.ErrPluginExited)
	require.NoError(t, p.Close())
	// A crash is news: go-plugin's line stays above Debug.
	require.Equal(t, 1, logs.FilterMessage("plugin process exited").Len(), "%v", logs.All())
}

// A plugin that dies with log.Fatal is reported with what it wrote to its
// stderr last; a panic in a model says where it happened and leaves the
// process up.
func TestPluginFailuresSayWhy(t *testing.T) {
	t.Parallel()
	g := karate(t)
	x, _ := batch(g.N(), 1, 5)

	p := launch(t, faulty)
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "fatal"}, nil))
	_, err := p.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrPluginExited)
	require.NotErrorIs(t, err, forward.ErrPluginPanic)
	require.ErrorContains(t, err, "its stderr ended: ")
	require.ErrorContains(t, err, "faulty: fatal as asked, at call 1")

	p = launch(t, faulty)
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "panic"}, nil))
	_, err = p.Predict(t.Context(), x)
	require.ErrorContains(t, err, "plugin panic: runtime error: index out of range [4] with length 3 (at ")
	require.ErrorIs(t, err, forward.ErrPluginPanic)
	require.Regexp(t, `faulty/main\.go:\d+ \(main\.outOfRange\), called from .*faulty/main\.go:\d+ \(main\.\(\*model\)\.strike\)`, err.Error())
	require.False(t, p.Exited(), "a panic is an answer")
	require.NoError(t, p.Close())
}

func TestCloseLeavesNoProcess(t *testing.T) {
	t.Parallel()
	p := launch(t, "icmf")
	pid := p.Pid()
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, 0), "plugin runs")
	require.False(t, p.Exited())
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "second close is harmless")
	require.True(t, p.Exited())
	requireGone(t, pid)
	_, err := p.Info(t.Context())
	require.Error(t, err)
}

// A plugin killed outright cannot remove its unix socket; closing it in the
// host does, so a daemon restarting crashed plugins for months leaves no
// sockets behind.
func TestKilledPluginLeavesNoSocket(t *testing.T) {
	bin := forwardtest.Build(t, "icmf")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, err := forward.Launch(t.Context(), bin)
	require.NoError(t, err)
	sockets := func() []string {
		dirs, err := filepath.Glob(filepath.Join(tmp, "sourcewatch-plugin-*", "plugin*"))
		require.NoError(t, err)
		return dirs
	}
	require.Len(t, sockets(), 1, "the plugin's socket is in a directory of its own")
	require.NoError(t, syscall.Kill(p.Pid(), syscall.SIGKILL))
	require.Eventually(t, p.Exited, 5*time.Second, 10*time.Millisecond)
	require.Len(t, sockets(), 1, "a killed plugin leaves its socket")
	require.NoError(t, p.Close())
	left, err := filepath.Glob(filepath.Join(tmp, "sourcewatch-plugin-*"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// A SIGTERM meant for the host's whole process group (a service manager
// stopping it) does not kill the plugin under the host: the host stops it.
func TestPluginIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	p := launch(t, "icmf")
	pid := p.Pid()
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	time.Sleep(200 * time.Millisecond)
	require.False(t, p.Exited())
	_, err := p.Info(t.Context())
	require.NoError(t, err)
	require.NoError(t, p.Close())
	requireGone(t, pid)
}

// requireGone checks that pid no longer exists (go-plugin reaps its child,
// so there is not even a zombie left).
func requireGone(t *testing.T, pid int) {
	t.Helper()
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "plugin process %d still exists", pid)
}

func TestPluginLogsReachZap(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	p := launch(t, "icmf", forward.WithLogger(zap.New(core)))
	require.NoError(t, p.Close())
	found, exited := false, false
	for _, e := range logs.All() {
		switch e.Message {
		case "plugin address":
			found = true
			require.Equal(t, "sourcewatch-forward-icmf", e.LoggerName)
			require.NotContains(t, e.ContextMap(), "timestamp", "go-plugin's copy of the plugin's stamp is dropped")
		case "plugin process exited":
			exited = true
			require.Equal(t, p.Path(), e.ContextMap()["plugin"], "named by the binary's path, not the name it was executed by")
			require.Equal(t, zapcore.DebugLevel, e.Level, "go-plugin's routine lifecycle is demoted to debug")
		}
	}
	require.True(t, found, "the plugin's own hclog line was not routed: %v", logs.All())
	require.True(t, exited)

	// What a Go plugin prints to os.Stderr after Serve travels go-plugin's
	// stdio stream and is logged line by line.
	core, logs = observer.New(zapcore.InfoLevel)
	p = launch(t, faulty, forward.WithLogger(zap.New(core)))
	require.NoError(t, p.Configure(t.Context(), karate(t), map[string]string{"fault": "nan", "fault_after": "7"}, nil))
	require.Eventually(t, func() bool {
		for _, e := range logs.All() {
			if e.Message == "faulty: fault nan from call 7" && e.LoggerName == "sourcewatch-forward-faulty" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "plugin stderr line not logged: %v", logs.All())
	require.NoError(t, p.Close())
}

func TestLaunchErrors(t *testing.T) {
	_, err := forward.Launch(t.Context(), filepath.Join(t.TempDir(), "nope"))
	require.ErrorContains(t, err, "forward plugin nope")

	// A binary that is not a plugin fails the handshake instead of hanging.
	notPlugin := filepath.Join(t.TempDir(), "sourcewatch-forward-sh")
	require.NoError(t, os.WriteFile(notPlugin, []byte("#!/bin/sh\necho hello\n"), 0o755))
	_, err = forward.Launch(t.Context(), notPlugin)
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-sh: launch")
	require.ErrorContains(t, err, `launch: the plugin wrote "hello" to stdout before its handshake line (in Go, before forward.Serve)`)
	require.NotContains(t, err.Error(), "This usually means", "go-plugin's guesses at architectures are replaced")

	// One that dies before the handshake is quoted.
	dies := filepath.Join(t.TempDir(), "sourcewatch-forward-dies")
	require.NoError(t, os.WriteFile(dies, []byte("#!/bin/sh\necho 'cannot open model.bin' >&2\nexit 2\n"), 0o755))
	core, logs := observer.New(zapcore.InfoLevel)
	_, err = forward.Launch(t.Context(), dies, forward.WithLogger(zap.New(core)))
	require.ErrorContains(t, err, "launch: the plugin exited before its handshake, printing nothing to stdout (exit status 2); its stderr ended: cannot open model.bin")
	require.NotContains(t, err.Error(), "wrote", "it wrote nothing to stdout")
	// The error says it all; go-plugin's complaint that the process this
	// host then stopped did not exit gracefully only confused.
	require.Zero(t, logs.FilterMessage("plugin failed to exit gracefully").Len(), "%v", logs.All())

	// One that dies printing nothing at all is told apart by how it
	// ended: here a crash, as a native library's segfault would end it.
	silent := filepath.Join(t.TempDir(), "sourcewatch-forward-silent")
	require.NoError(t, os.WriteFile(silent, []byte("#!/bin/sh\nexec kill -SEGV $$\n"), 0o755))
	_, err = forward.Launch(t.Context(), silent)
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-silent: launch: the plugin exited before its handshake, printing nothing to stdout (signal: segmentation fault)")

	// Files the kernel will not run say why, not only "no such file or
	// directory" about the link in the plugin's socket directory.
	for _, tc := range []struct{ name, content, want string }{
		{"crlf", "#!/bin/sh\r\nexec sleep 30\r\n", `its #! line "#!/bin/sh\r" ends in a carriage return (Windows line endings)`},
		{"nointerp", "#!/nonexistent/python3\nprint(1)\n", `the interpreter its #! line names does not exist: "#!/nonexistent/python3"`},
		{"noshebang", "echo hello\n", "not a program this machine runs"},
	} {
		bad := filepath.Join(t.TempDir(), "sourcewatch-forward-"+tc.name)
		require.NoError(t, os.WriteFile(bad, []byte(tc.content), 0o755))
		_, err = forward.Launch(t.Context(), bad)
		require.ErrorContains(t, err, "forward plugin sourcewatch-forward-"+tc.name+": launch: the kernel could not run "+bad, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}

	// Handshake lines go-plugin refuses are explained in this contract's
	// terms, not go-plugin's ("Please report this to the plugin author").
	for _, tc := range []struct{ line, want string }{
		{"1|7|tcp|127.0.0.1:1|grpc", "the plugin speaks sourcewatch forward protocol 7 and this host speaks 1: rebuild it"},
		{"3|1|tcp|127.0.0.1:1|grpc", "the plugin speaks go-plugin core protocol 3 and this host speaks 1: rebuild it"},
		{"1|1|tcp|127.0.0.1:1|netrpc", `the plugin offers protocol "netrpc"; sourcewatch plugins speak gRPC only`},
	} {
		old := filepath.Join(t.TempDir(), "sourcewatch-forward-old")
		require.NoError(t, os.WriteFile(old, []byte("#!/bin/sh\necho '"+tc.line+"'\nexec sleep 30\n"), 0o755))
		_, err = forward.Launch(t.Context(), old)
		require.ErrorContains(t, err, "forward plugin sourcewatch-forward-old: launch: "+tc.want, tc.line)
		require.NotContains(t, err.Error(), "report this", tc.line)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = forward.Launch(ctx, forwardtest.Build(t, "icmf"))
	require.ErrorIs(t, err, context.Canceled)
}

// A plugin that is not found is an error that says what to pass instead.
func TestPluginPath(t *testing.T) {
	path := forwardtest.Build(t, "icmf")
	got, err := forward.PluginPath(filepath.Dir(path), "icmf")
	require.NoError(t, err)
	require.Equal(t, path, got)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sourcewatch-forward-x"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sourcewatch-forward-ok"), nil, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine"), nil, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sourcewatch-forward-src"), 0o755))
	for _, tc := range []struct {
		dir, name string
		want      []string
	}{
		{filepath.Dir(path), "missing", []string{"sourcewatch-forward-missing does not exist", "the plugin dir holds ", "icmf", "make build"}},
		{filepath.Join(dir, "nowhere"), "icmf", []string{"does not exist (the plugin dir does not exist", "make build"}},
		{dir, "mine", []string{"holds ok;", "mine there lacks the prefix: a plugin's binary is named sourcewatch-forward-mine"}},
		{filepath.Dir(path), "../icmf", []string{"want a plain name"}},
		{filepath.Dir(path), "sourcewatch-forward-icmf", []string{`without the binary's prefix sourcewatch-forward-: "icmf"`}},
		{".", path, []string{`want a plain name such as "icmf": for the binary ` + path + `, pass "icmf" as the name and ` + filepath.Dir(path) + " as the plugin dir"}},
		{path, "icmf", []string{"plugin dir " + path + " is a file: pass the directory that holds sourcewatch-forward-icmf"}},
		{dir, "x", []string{"is not an executable file"}},
		{dir, "src", []string{"is a directory"}},
	} {
		_, err := forward.PluginPath(tc.dir, tc.name)
		require.Error(t, err, tc.name)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, "dir %s, name %s", tc.dir, tc.name)
		}
	}
	require.Equal(t, []string{"ok"}, forward.PluginsIn(dir))
	require.Nil(t, forward.PluginsIn(filepath.Join(dir, "nowhere")))
}

// orphanEnv switches the test binary into a host that launches a plugin,
// prints its pid and waits to be killed, for TestPluginDiesWithHost.
const orphanEnv = "SOURCEWATCH_TEST_ORPHAN_HOST"

func orphanHost() {
	p, err := forward.Launch(context.Background(), os.Getenv(orphanEnv))
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(strconv.Itoa(p.Pid()) + "\n")
	select {}
}

// alive reports whether pid exists and is not a zombie waiting for init.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A go-plugin plugin built for another application refuses the host's
// magic cookie; the error says so in this contract's terms.
func TestLaunchOtherApplicationsPlugin(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sourcewatch-forward-othercookie")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), path))
	_, err := forward.Launch(t.Context(), path)
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-othercookie: launch: the plugin refused this host's handshake cookie SOURCEWATCH_FORWARD_PLUGIN=b1f3e0a4c7d2.forward.v1")
	require.ErrorContains(t, err, "serve it with forward.Serve")
	require.ErrorContains(t, err, "its stderr ended: This binary is a plugin.")
}

// A plugin written without go-plugin, following forward/README.md's
// instructions for other languages, is launched and used like any other.
func TestForeignPlugin(t *testing.T) {
	t.Parallel()
	g := karate(t)
	path := filepath.Join(t.TempDir(), "sourcewatch-forward-foreign")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), path))
	core, logs := observer.New(zapcore.InfoLevel)
	p, err := forward.Launch(t.Context(), path, forward.WithLogger(zap.New(core)))
	require.NoError(t, err)
	defer p.Close()
	// Its hclog line keeps level, message and fields although its
	// timestamp has milliseconds, not the six digits go-plugin parses.
	require.Eventually(t, func() bool { return logs.FilterMessage("foreign: serving").Len() == 1 }, 10*time.Second, 10*time.Millisecond, "%v", logs.All())
	line := logs.FilterMessage("foreign: serving").All()[0]
	require.Equal(t, zapcore.WarnLevel, line.Level)
	require.Equal(t, "foreign", line.ContextMap()["impl"])
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"steps": "3"}, nil))
	in := icmf.New()
	require.NoError(t, in.Configure(t.Context(), g, map[string]string{"steps": "3"}, nil))
	x, dy := batch(g.N(), 4, 9)
	y, dx, err := p.VJP(t.Context(), x, dy)
	require.NoError(t, err)
	wy, wdx, err := in.VJP(t.Context(), x, dy)
	require.NoError(t, err)
	require.Equal(t, wy.RawMatrix().Data, y.RawMatrix().Data)
	require.Equal(t, wdx.RawMatrix().Data, dx.RawMatrix().Data)
	// It predates SquaredErrorVJP: the host falls back to Predict + VJP.
	requireFusedMatches(t, p, in, x)
	require.Zero(t, p.SharedCalls(), "it did not claim the shared region")
	pid := p.Pid()
	require.NoError(t, p.Close())
	requireGone(t, pid)

	// Started as ...-foreign-fused it has SquaredErrorVJP but predates its
	// loss_only flag: it sends y, and the host computes the loss itself.
	fused := filepath.Join(t.TempDir(), "sourcewatch-forward-foreign-fused")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), fused))
	pf, err := forward.Launch(t.Context(), fused)
	require.NoError(t, err)
	defer pf.Close()
	require.NoError(t, pf.Configure(t.Context(), g, map[string]string{"steps": "3"}, nil))
	requireFusedMatches(t, pf, in, x)
	require.Zero(t, pf.SharedCalls())
}

// A Fit stream must end with exactly one result: a plugin that sends a
// second one is refused, where the host used to take the first. A plugin
// that behaves still fits.
func TestFitResultMustBeLast(t *testing.T) {
	t.Parallel()
	g := karate(t)
	pairs := []forward.Pair{{Sources: []int{0}, Infected: []int{0, 1}}, {Sources: []int{2}, Infected: []int{2, 3}}}
	two := filepath.Join(t.TempDir(), "sourcewatch-forward-foreign-tworesults")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), two))
	p, err := forward.Launch(t.Context(), two)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	_, err = p.Fit(t.Context(), pairs, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrBadOutput)
	require.ErrorContains(t, err, "fit: a second result after the result (the stream must end with exactly one result)")

	ok := launch(t, "icmf")
	require.NoError(t, ok.Configure(t.Context(), g, nil, nil))
	_, err = ok.Fit(t.Context(), pairs, forward.FitOptions{}, nil)
	require.NoError(t, err)
}

// A plugin whose gRPC server keeps a 4 MiB message limit (other
// languages' default) fails a bigger batch with an error that says whose
// limit it is and what it must be.
func TestSmallMessageLimitIsNamed(t *testing.T) {
	t.Parallel()
	g := karate(t)
	small := filepath.Join(t.TempDir(), "sourcewatch-forward-foreign-smallmsg")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), small))
	p, err := forward.Launch(t.Context(), small, forward.WithoutSharedMemory())
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	_, err = p.Predict(t.Context(), mat.NewDense(100, g.N(), nil))
	require.NoError(t, err, "a small batch passes")
	rows := (5<<20)/(8*g.N()) + 1
	_, err = p.Predict(t.Context(), mat.NewDense(rows, g.N(), nil))
	require.ErrorContains(t, err, "the plugin's gRPC server must accept messages up to 256 MiB")
}

// A plugin in another language that skips the mutual TLS step fails its
// launch with an error that says what the host's TLS needs.
func TestPlaintextPluginIsToldAboutMTLS(t *testing.T) {
	t.Parallel()
	plain := filepath.Join(t.TempDir(), "sourcewatch-forward-foreign-plaintext")
	require.NoError(t, os.Symlink(forwardtest.Build(t, faulty), plain))
	_, err := forward.Launch(t.Context(), plain, forward.WithStartTimeout(20*time.Second))
	require.ErrorContains(t, err, "the host connects with mutual TLS")
	require.ErrorContains(t, err, "sixth field")
	require.Contains(t, forward.TLSHint("illegal base64 data at input byte 682"), "base64 without padding")
	require.Empty(t, forward.TLSHint("connection refused"))
}

func TestFitIdleTimeout(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, faulty, forward.WithFitIdleTimeout(time.Second))
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "hang"}, nil))
	_, err := p.Fit(t.Context(), []forward.Pair{{Sources: []int{0}, Infected: []int{0}}}, forward.FitOptions{}, nil)
	require.ErrorIs(t, err, forward.ErrCallTimeout)
	require.ErrorContains(t, err, "fit: no progress within 1s")
	pid := p.Pid()
	require.NoError(t, p.Close())
	requireGone(t, pid)
}

// requireFusedMatches checks p's one-call SquaredErrorVJP against Predict
// and VJP of the in-process model, with a broadcast and a per-row target.
func requireFusedMatches(t *testing.T, p *forward.Process, in forward.Model, x *mat.Dense) {
	t.Helper()
	r, n := x.Dims()
	for _, rows := range []int{1, r} {
		target, _ := batch(n, rows, 17)
		y, dx, err := p.SquaredErrorVJP(t.Context(), x, target)
		require.NoError(t, err)
		wy, err := in.Predict(t.Context(), x)
		require.NoError(t, err)
		dy := mat.NewDense(r, n, nil)
		for i := 0; i < r; i++ {
			for v := 0; v < n; v++ {
				dy.Set(i, v, 2*(wy.At(i, v)-target.At(min(i, rows-1), v)))
			}
		}
		_, wdx, err := in.VJP(t.Context(), x, dy)
		require.NoError(t, err)
		require.InDeltaSlice(t, wy.RawMatrix().Data, y.RawMatrix().Data, 1e-12)
		require.InDeltaSlice(t, wdx.RawMatrix().Data, dx.RawMatrix().Data, 1e-12)

		// The lean form of the same call: the loss per row instead of y.
		loss, ldx, err := p.SquaredErrorLoss(t.Context(), x, target)
		require.NoError(t, err)
		require.Len(t, loss, r)
		for i := 0; i < r; i++ {
			var want float64
			for v := 0; v < n; v++ {
				d := wy.At(i, v) - target.At(min(i, rows-1), v)
				want += d * d
			}
			require.InDelta(t, want, loss[i], 1e-9, "row %d", i)
		}
		require.InDeltaSlice(t, wdx.RawMatrix().Data, ldx.RawMatrix().Data, 1e-12)
	}
}

func TestSquaredErrorVJPOneCall(t *testing.T) {
	t.Parallel()
	g := karate(t)
	p := launch(t, "icmf")
	require.NoError(t, p.Configure(t.Context(), g, nil, nil))
	in := icmf.New()
	require.NoError(t, in.Configure(t.Context(), g, nil, nil))
	x, _ := batch(g.N(), 5, 3)
	requireFusedMatches(t, p, in, x)
}

// BenchmarkInfoRoundTrip times the smallest call to a real plugin process
// (Info: empty request, a few hundred bytes back): the floor of every
// Predict or VJP round trip, whatever the model computes.
func BenchmarkInfoRoundTrip(b *testing.B) {
	p, err := forward.Launch(b.Context(), forwardtest.Build(b, "icmf"))
	require.NoError(b, err)
	defer func() { _ = p.Close() }()
	for b.Loop() {
		if _, err := p.Info(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// A plugin binary run by hand says whose plugin it is and how it is used,
// and exits non-zero.
func TestPluginRunByHand(t *testing.T) {
	t.Parallel()
	path := forwardtest.Build(t, "icmf")
	cmd := exec.CommandContext(t.Context(), path)
	cmd.Env = []string{} // no magic cookie
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	require.Contains(t, string(out), "sourcewatch-forward-icmf is a sourcewatch forward-model plugin: sourcewatch starts it (train --forward icmf, plugin check icmf, serve)")
}

// wrapper writes a shell script that runs cmd without exec, as plugin
// authors often do to set an environment variable, so the plugin is the
// script's child and holds the pipes go-plugin reads.
func wrapper(t *testing.T, cmd string) (path, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "sourcewatch-forward-wrapped")
	pidFile = filepath.Join(dir, "child.pid")
	script := "#!/bin/sh\n" + cmd + " &\necho $! > " + pidFile + "\nwait\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, pidFile
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return pid
}

// A wrapper script whose child never completes the handshake: the failed
// launch takes the child down too rather than waiting for it to close the
// pipes it inherited (before, Launch blocked until the child exited).
func TestWrapperScriptChildIsKilledOnFailedStart(t *testing.T) {
	t.Parallel()
	path, pidFile := wrapper(t, "sleep 300")
	_, err := forward.Launch(t.Context(), path, forward.WithStartTimeout(500*time.Millisecond))
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-wrapped: launch")
	require.ErrorIs(t, err, forward.ErrStartTimeout)
	require.ErrorContains(t, err, "no handshake line within 500ms of its start: call forward.Serve first in main")
	pid := readPid(t, pidFile)
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond,
		"the wrapper's child %d outlived the failed launch", pid)
}

// A launch cancelled while the plugin is still starting (Ctrl-C on a
// plugin that loads for long) ends then, not at the start timeout, and
// takes the plugin's process group down with it.
func TestCancelledStartKillsThePlugin(t *testing.T) {
	t.Parallel()
	path, pidFile := wrapper(t, "sleep 300")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := forward.Launch(ctx, path, forward.WithStartTimeout(time.Hour))
		done <- err
	}()
	pid := readPid(t, pidFile) // the plugin is up, its handshake not
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Launch still waiting a minute after its context was cancelled")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "forward plugin sourcewatch-forward-wrapped: launch")
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond,
		"the wrapper's child %d outlived the cancelled launch", pid)
}

// A hung plugin behind a wrapper script is killed with the script on Close.
func TestWrapperScriptChildIsKilledWhenHung(t *testing.T) {
	t.Parallel()
	g := karate(t)
	path, pidFile := wrapper(t, forwardtest.Build(t, faulty))
	p, err := forward.Launch(t.Context(), path, forward.WithCallTimeout(time.Second))
	require.NoError(t, err)
	child := readPid(t, pidFile)
	require.NotEqual(t, child, p.Pid(), "the plugin runs under the script")
	require.NoError(t, p.Configure(t.Context(), g, map[string]string{"fault": "hang"}, nil))
	x, _ := batch(g.N(), 1, 4)
	_, err = p.Predict(t.Context(), x)
	require.ErrorIs(t, err, forward.ErrCallTimeout)
	require.NoError(t, p.Close())
	require.Eventually(t, func() bool { return !alive(child) }, 10*time.Second, 20*time.Millisecond,
		"the hung plugin %d outlived Close", child)
}

// A healthy plugin behind a wrapper script shuts down on Close.
func TestWrapperScriptPluginCloses(t *testing.T) {
	t.Parallel()
	path, pidFile := wrapper(t, forwardtest.Build(t, "icmf"))
	p, err := forward.Launch(t.Context(), path)
	require.NoError(t, err)
	child := readPid(t, pidFile)
	require.True(t, alive(child))
	require.NoError(t, p.Close())
	require.Eventually(t, func() bool { return !alive(child) }, 10*time.Second, 20*time.Millisecond)
}

// A wrapper script that leaves a helper behind, holding the pipes after the
// plugin itself shut down: Close kills the group after its grace instead
// of waiting for the helper (before, it waited as long as the helper ran).
func TestWrapperScriptHelperIsKilledOnClose(t *testing.T) {
	t.Parallel()
	helperPid := filepath.Join(t.TempDir(), "helper.pid")
	path, pidFile := wrapper(t, "sleep 300 & echo $! > "+helperPid+"\n"+forwardtest.Build(t, "icmf"))
	p, err := forward.Launch(t.Context(), path)
	require.NoError(t, err)
	child, helper := readPid(t, pidFile), readPid(t, helperPid)
	require.NoError(t, p.Close())
	require.Eventually(t, func() bool { return !alive(child) && !alive(helper) }, 10*time.Second, 20*time.Millisecond)
}
