package forward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
	"github.com/sourcewatch/sourcewatch/graph"
)

// Host-side sentinel errors.
var (
	// ErrChecksum is returned by Launch when the plugin binary's SHA-256 is
	// not the expected one.
	ErrChecksum = errors.New("forward plugin checksum mismatch")
	// ErrVersion is returned by Supervise, and by a call whose plugin had
	// to be relaunched, when the plugin reports another version than
	// WithVersion's: for a plugin a script runs (node server.js) the
	// checksum pins only the wrapper, and the version is the check on
	// the code behind it.
	ErrVersion = errors.New("forward plugin version mismatch")
	// ErrPluginExited is returned by a call whose plugin process has died.
	ErrPluginExited = errors.New("forward plugin exited")
	// ErrCallTimeout is returned by a call the plugin did not answer within
	// its deadline. The plugin is presumed hung.
	ErrCallTimeout = errors.New("forward plugin call timed out")
	// ErrPluginPanic is matched (errors.Is) by a call in which the plugin
	// panicked and forward.Serve caught it: the process lives on, and the
	// error's text says where the panic happened.
	ErrPluginPanic = errors.New("forward plugin panicked")
	// ErrStartTimeout is returned by Launch when the plugin did not print
	// its handshake line within the start timeout (DefaultStartTimeout
	// unless WithStartTimeout): it does slow work before forward.Serve.
	ErrStartTimeout = errors.New("forward plugin start timed out")
)

// execError explains an exec of the plugin's file that the kernel
// refused, which os/exec reports as "fork/exec" of the link in the
// plugin's socket directory that it ran: "no such file or directory" for
// a file that is there means its #! line names an interpreter that is
// not (a CR of Windows line endings ends up in the name), "exec format
// error" a file this machine cannot run at all.
func execError(err error, path string) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" {
		return err
	}
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Errorf("the kernel could not run %s (%w): not a program this machine runs (a binary built for another OS or architecture, or a script without a #! line)", path, pe.Err)
	case errors.Is(err, fs.ErrNotExist):
		line := shebang(path)
		switch {
		case line == "":
			return err
		case strings.HasSuffix(line, "\r"):
			return fmt.Errorf("the kernel could not run %s (%w): its #! line %q ends in a carriage return (Windows line endings), which the kernel takes as part of the interpreter's name: save the script with Unix line endings", path, pe.Err, line)
		default:
			return fmt.Errorf("the kernel could not run %s (%w): the interpreter its #! line names does not exist: %q", path, pe.Err, line)
		}
	}
	return err
}

// shebang is the #! line of the file at path, without its newline, or ""
// when it has none.
func shebang(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	if !strings.HasPrefix(line, "#!") {
		return ""
	}
	return line
}

// exitedBeforeHandshake starts the error of a plugin that ended (or closed
// stdout) before printing its handshake line.
const exitedBeforeHandshake = "the plugin exited before its handshake"

// handshakeError replaces go-plugin's error for a handshake line it could
// not read, whose text goes on to guess at architectures and libraries,
// with the usual cause: a line printed to stdout before Serve, or a
// process that ended (or closed stdout) before printing any, which its
// stderr, quoted by the caller, then explains.
//
// It also rewords go-plugin's version and protocol refusals, which are
// written for go-plugin's own users ("Please report this to the plugin
// author"), in the terms of this contract.
func handshakeError(err error) error {
	const prefix = "Unrecognized remote plugin message: "
	msg := err.Error()
	if m := appVersionRefusal.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("the plugin speaks sourcewatch forward protocol %s and this host speaks %d: rebuild it against this sourcewatch's forward package (a plugin in another language: put %d in the handshake line's second field, see forward/README.md)",
			m[1], ProtocolVersion, ProtocolVersion)
	}
	if m := coreVersionRefusal.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("the plugin speaks go-plugin core protocol %s and this host speaks %d: rebuild it with a current github.com/hashicorp/go-plugin (a plugin in another language: put %d in the handshake line's first field)",
			m[1], plugin.CoreProtocolVersion, plugin.CoreProtocolVersion)
	}
	if m := protocolRefusal.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("the plugin offers protocol %q; sourcewatch plugins speak gRPC only (forward.Serve does; in another language put grpc in the handshake line's fifth field)", m[1])
	}
	i := strings.Index(msg, prefix)
	if i < 0 {
		if hint := tlsHint(msg); hint != "" {
			return fmt.Errorf("%w%s", err, hint)
		}
		return err
	}
	line, rest, _ := strings.Cut(msg[i+len(prefix):], "\n")
	if line == "" && strings.HasPrefix(rest, "Failed to read any lines") {
		return errors.New(exitedBeforeHandshake + ", printing nothing to stdout")
	}
	return fmt.Errorf("the plugin wrote %q to stdout before its handshake line (in Go, before forward.Serve), where the host reads the handshake: write it to stderr", line)
}

// tlsHint says what the host's mutual TLS needs of a plugin whose
// connection failed in a way only a plugin written without go-plugin
// (another language) can cause; "" for other errors.
func tlsHint(msg string) string {
	switch {
	case strings.Contains(msg, "illegal base64 data"):
		return " (the handshake line's sixth field is the plugin's certificate, DER in base64 without padding: Go's base64.RawStdEncoding; see forward/README.md)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"),
		strings.Contains(msg, "x509:"),
		strings.Contains(msg, "tls:"):
		return " (the host connects with mutual TLS: the plugin must serve TLS with a certificate for DNS name localhost usable for server auth, print that certificate as the handshake line's sixth field, and require a client certificate signed by PLUGIN_CLIENT_CERT's; see forward/README.md, In another language)"
	}
	return ""
}

// cookieRefusal starts what a go-plugin plugin prints, and exits on, when
// its magic cookie is not in the environment it was started with.
const cookieRefusal = "This binary is a plugin. These are not meant to be executed directly."

// sizeRefusal is gRPC's "larger than max (N vs. LIMIT)".
var sizeRefusal = regexp.MustCompile(`\((\d+) vs\. (\d+)\)`)

// go-plugin's refusals of a handshake line, as its client words them.
var (
	appVersionRefusal  = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (-?\d+)`)
	coreVersionRefusal = regexp.MustCompile(`incompatible core API version with plugin\. Plugin version: (\S+?),`)
	protocolRefusal    = regexp.MustCompile(`unsupported plugin protocol "([^"]*)"`)
)

// binaryError is a launch that failed on the plugin binary itself (not
// found, a directory, unreadable, another build), as opposed to the
// process or the machine; its message is the wrapped error's.
type binaryError struct{ err error }

func (e *binaryError) Error() string { return e.err.Error() }
func (e *binaryError) Unwrap() error { return e.err }

// BinaryPrefix is the file name prefix of plugin binaries: the plugin named
// "icmf" is the executable sourcewatch-forward-icmf.
const BinaryPrefix = "sourcewatch-forward-"

// PluginPath returns dir/sourcewatch-forward-<name>, or an error that says
// what to pass instead when the name is not a plain name or no such
// executable exists: the name without its prefix, the directory rather
// than the binary, or one of the plugins the directory holds.
func PluginPath(dir, name string) (string, error) {
	if err := CheckPluginName(name); err != nil {
		return "", err
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("forward plugin %q: plugin dir %s is a file: pass the directory that holds %s%s", name, dir, BinaryPrefix, name)
	}
	path := filepath.Join(dir, BinaryPrefix+name)
	if _, err := os.Stat(path); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("forward plugin %q: %w", name, err)
		}
		found := "the plugin dir holds no plugin"
		if _, err := os.Stat(dir); err != nil {
			found = "the plugin dir does not exist"
		} else if names := PluginsIn(dir); len(names) > 0 {
			found = "the plugin dir holds " + strings.Join(names, ", ")
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			found += fmt.Sprintf("; %s there lacks the prefix: a plugin's binary is named %s%s", filepath.Join(dir, name), BinaryPrefix, name)
		}
		return "", fmt.Errorf("forward plugin %q: %s does not exist (%s; a shipped plugin: make build, or, for a bundle trained with an earlier build, copy that build here (make build of the commit it came from rebuilds it bit for bit); a plugin of your own: build it to %s%s in a directory and pass that directory as the plugin dir)", name, path, found, BinaryPrefix, name)
	}
	if err := checkExecutable(path); err != nil {
		return "", fmt.Errorf("forward plugin %q: %w", name, err)
	}
	return path, nil
}

// CheckPluginName refuses a plugin name that is a path, empty, or a
// binary's file name (with BinaryPrefix), saying what to pass instead:
// the name, and the binary's directory as the plugin dir.
func CheckPluginName(name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		hint := ""
		if base := filepath.Base(name); strings.HasPrefix(base, BinaryPrefix) && len(base) > len(BinaryPrefix) {
			hint = fmt.Sprintf(": for the binary %s, pass %q as the name and %s as the plugin dir (--plugin-dir)", name, strings.TrimPrefix(base, BinaryPrefix), filepath.Dir(name))
		}
		return fmt.Errorf("forward plugin name %q: want a plain name such as \"icmf\"%s", name, hint)
	}
	if trimmed := strings.TrimPrefix(name, BinaryPrefix); trimmed != name && trimmed != "" {
		return fmt.Errorf("forward plugin name %q: name the plugin without the binary's prefix %s: %q", name, BinaryPrefix, trimmed)
	}
	return nil
}

// checkExecutable says why path cannot be started as a plugin: a
// directory, or a file nobody may execute (a source file, say).
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// PluginsIn lists the plugins in dir by name: its executable files named
// sourcewatch-forward-<name>, sorted; nil when there are none or dir
// cannot be read.
func PluginsIn(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
		if !ok || name == "" || checkExecutable(filepath.Join(dir, e.Name())) != nil {
			continue
		}
		names = append(names, name)
	}
	return names
}

// FileSHA256 returns the SHA-256 of the file's contents.
func FileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checksum: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("checksum %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// openVerified opens the binary at path and checks the open file's
// SHA-256 (any content when checksum is nil), returning it open.
func openVerified(path string, checksum []byte) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if checksum == nil {
		return f, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("checksum %s: %w", path, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, checksum) {
		f.Close()
		return nil, fmt.Errorf("file has sha256 %s, expected %s: %w",
			hex.EncodeToString(got), hex.EncodeToString(checksum), ErrChecksum)
	}
	return f, nil
}

// CheckBinary reports whether the plugin binary at path is an executable
// file with the given SHA-256 (any content when checksum is nil): the
// check Launch makes before it starts the process, for a caller that
// wants to know before it starts anything else. A mismatch wraps
// ErrChecksum.
func CheckBinary(path string, checksum []byte) error {
	name := filepath.Base(path)
	if err := checkExecutable(path); err != nil {
		return &binaryError{fmt.Errorf("forward plugin %s: %w", name, err)}
	}
	if checksum == nil {
		return nil
	}
	got, err := FileSHA256(path)
	if err != nil {
		return &binaryError{fmt.Errorf("forward plugin %s: %w", name, err)}
	}
	if !bytes.Equal(got, checksum) {
		return &binaryError{fmt.Errorf("forward plugin %s: file has sha256 %s, expected %s: %w",
			path, hex.EncodeToString(got), hex.EncodeToString(checksum), ErrChecksum)}
	}
	return nil
}

// LaunchOption configures Launch.
type LaunchOption func(*launchOptions)

type launchOptions struct {
	log          *zap.Logger
	checksum     []byte
	callTimeout  time.Duration
	fitIdle      time.Duration
	startTimeout time.Duration
	noShared     bool
}

// WithLogger routes go-plugin's messages and the plugin's stderr into log.
// The default discards them.
func WithLogger(log *zap.Logger) LaunchOption {
	return func(o *launchOptions) { o.log = log }
}

// WithoutSharedMemory sends every batch through gRPC, as to a plugin that
// cannot map the shared region: for comparisons, or to rule it out.
func WithoutSharedMemory() LaunchOption {
	return func(o *launchOptions) { o.noShared = true }
}

// WithChecksum makes Launch refuse a binary whose SHA-256 is not sum. On
// Linux Launch executes the very file it hashed; elsewhere sum is also
// handed to go-plugin's SecureConfig, which checks again right before
// executing.
func WithChecksum(sum []byte) LaunchOption {
	return func(o *launchOptions) { o.checksum = append([]byte(nil), sum...) }
}

// WithCallTimeout fixes the deadline of every Info, Configure, Predict and
// VJP call. The default scales with the work: DefaultCallTimeout plus
// 1 µs per element of batch rows × (nodes + arcs).
func WithCallTimeout(d time.Duration) LaunchOption {
	return func(o *launchOptions) { o.callTimeout = d }
}

// WithFitIdleTimeout bounds how long Fit may go without a progress message
// (default 10 minutes); a training run itself may take as long as it needs.
func WithFitIdleTimeout(d time.Duration) LaunchOption {
	return func(o *launchOptions) { o.fitIdle = d }
}

// WithStartTimeout bounds the handshake (default DefaultStartTimeout).
func WithStartTimeout(d time.Duration) LaunchOption {
	return func(o *launchOptions) { o.startTimeout = d }
}

const (
	// DefaultCallTimeout is the fixed part of the default call deadline.
	DefaultCallTimeout = 10 * time.Second
	// DefaultStartTimeout is how long a plugin has from its exec to its
	// handshake line: what it does before forward.Serve.
	DefaultStartTimeout = 30 * time.Second
)

// goPluginStartTimeout is go-plugin's error when no handshake line came
// within its StartTimeout.
const goPluginStartTimeout = "timeout while waiting for plugin to start"

// Process is a running plugin process. It implements Model; every call
// carries a deadline, and the host checks every answer's shape and values,
// so a hung, crashed or misbehaving plugin is an error naming it, never a
// hang or a silent wrong answer. It is safe for concurrent use (the plugin
// serves calls one at a time).
type Process struct {
	path string
	name string // the binary's base name, for errors and logs
	log  *zap.Logger
	opts launchOptions

	client *plugin.Client
	cmd    *exec.Cmd
	// cancelStart cancels cmd's context, which kills the process; Close
	// calls it once the process has ended, to release the context.
	cancelStart context.CancelFunc
	// sockDir holds the plugin's unix socket; Close removes it, so a
	// plugin that was killed (and never removed its socket) leaves nothing
	// behind in a daemon that restarts crashed plugins for months.
	sockDir string
	rpc     forwardpb.ForwardClient
	// shared is the batch region the plugin maps (nil when it does not):
	// the fused calls' x, target and gradient travel there.
	shared *hostShared
	hung   atomic.Bool // a call timed out: Close kills without the grace period
	// noFused: the plugin predates SquaredErrorVJP; use Predict then VJP.
	noFused atomic.Bool

	n, arcs atomic.Int64 // of the configured graph, for deadlines and checks
	close   sync.Once
	// stderr is the end of what the process wrote to its own stderr, for
	// the error that says it exited.
	stderr *stderrTail
	// exitErr is why the process ended, once go-plugin has seen it end.
	exitErr *atomic.Pointer[string]
	// stopping is set when Close begins (see zapHCLog.stopping).
	stopping *atomic.Bool
	// output bounds what the plugin's output writes into the log, all
	// streams together.
	output *outputBudget
}

var _ Model = (*Process)(nil)

// natsEnvPrefix begins the environment variables of serve's nats.* keys.
const natsEnvPrefix = "SOURCEWATCH_NATS_"

// pluginEnv is the plugin's environment: the host's, without the
// variables through which Launch hands the plugin its own socket directory
// and shared region (a host that inherited them, say because a plugin
// started it, must not pass its values on), and without the daemon's NATS
// settings (SOURCEWATCH_NATS_*: a password, a URL with credentials, the
// paths of a creds file, nkey seed or TLS key), which no plugin needs,
// followed by own.
func pluginEnv(host []string, own ...string) []string {
	env := make([]string, 0, len(host)+len(own)+1)
	for _, kv := range host {
		k, _, _ := strings.Cut(kv, "=")
		if k == plugin.EnvUnixSocketDir || k == SharedMemoryEnv || strings.HasPrefix(strings.ToUpper(k), natsEnvPrefix) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, own...)
}

// Launch starts the plugin at path, completes the handshake (protocol
// version, AutoMTLS) and checks it answers Info. ctx bounds the launch
// only; the process lives until Close (or until the host dies: on Linux it
// gets SIGKILL when its parent goes away).
func Launch(ctx context.Context, path string, opts ...LaunchOption) (*Process, error) {
	// A binary this process has just written can still be open for
	// writing in a child forked elsewhere in the process, between its
	// fork and its exec (golang.org/issue/22315): exec then fails with
	// ETXTBSY for the milliseconds until that child has exec'd. A plugin
	// copied into place by the same program, as tests and installers do,
	// would fail its first launch now and then.
	delay := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		p, err := launch(ctx, path, opts...)
		if err == nil || !errors.Is(err, syscall.ETXTBSY) || attempt == textBusyAttempts {
			return p, err
		}
		launchLogger(opts).Debug("forward plugin binary busy being written; starting it again", zap.String("path", path), zap.Duration("in", delay))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// launchLogger is the logger opts set, for Launch's own messages.
func launchLogger(opts []LaunchOption) *zap.Logger {
	o := launchOptions{log: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	return o.log
}

// textBusyAttempts is how often Launch starts a binary that is busy being
// written: 10 ms apart, doubling up to a second, about 3.3 s in all. The
// usual cause, a fork in the same process, lets go within milliseconds;
// the rest is room for a loaded machine.
const textBusyAttempts = 10

func launch(ctx context.Context, path string, opts ...LaunchOption) (*Process, error) {
	o := launchOptions{log: zap.NewNop(), fitIdle: 10 * time.Minute, startTimeout: DefaultStartTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	name := filepath.Base(path)
	if err := CheckBinary(path, o.checksum); err != nil {
		return nil, err
	}
	// The checksum must hold for the file that is executed, not for
	// whatever the path names a moment later: a binary renamed into place
	// between a check by path and the exec would run unchecked (go-plugin's
	// SecureConfig also hashes by path, then starts the path). On Linux the
	// host opens the binary once, hashes that open file and executes it
	// through /proc/self/fd, so what runs is what was hashed.
	var bin *os.File
	var secure *plugin.SecureConfig
	if execByFD {
		f, err := openVerified(path, o.checksum)
		if err != nil {
			return nil, &binaryError{fmt.Errorf("forward plugin %s: %w", path, err)}
		}
		defer f.Close() // the child holds its own copy once started
		bin = f
	} else if o.checksum != nil {
		// go-plugin hashes the file again as it starts it, so a binary
		// swapped between the two reads is refused too, unless it is
		// swapped again between go-plugin's read and its exec.
		secure = &plugin.SecureConfig{Checksum: o.checksum, Hash: sha256.New()}
	}
	sweepOnce.Do(func() {
		if n, err := sweepStaleSocketDirs(os.TempDir(), time.Now()); err != nil {
			o.log.Debug("not sweeping stale plugin socket directories", zap.Error(err))
		} else if n > 0 {
			o.log.Info("removed stale plugin socket directories, left in the temporary directory by sourcewatch processes on this machine killed before they could remove them", zap.Int("count", n), zap.String("dir", os.TempDir()))
		}
	})
	sockDir, err := os.MkdirTemp("", socketDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("forward plugin %s: socket directory: %w", name, err)
	}
	// A cancelled ctx kills the child during the start: go-plugin's
	// handshake ignores contexts and would otherwise wait out the start
	// timeout (Ctrl-C on a plugin that loads for half a minute). The
	// command's own context is cancelled only then, and once the process
	// has ended (Close): a ctx cancelled after the start must not kill it.
	startCtx, cancelStart := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(startCtx, path)
	cmd.Cancel = func() error {
		killProcessGroup(cmd)
		return nil
	}
	cmd.Env = pluginEnv(os.Environ(), plugin.EnvUnixSocketDir+"="+sockDir)
	isolateProcess(cmd)
	var shared *hostShared
	if !o.noShared && sharedSupported {
		if shared, err = newHostShared(); err != nil {
			o.log.Debug("forward plugin batches travel through gRPC", zap.String("plugin", name), zap.Error(err))
		} else {
			// The first of ExtraFiles is the child's descriptor 3.
			cmd.ExtraFiles = []*os.File{shared.region.file}
			cmd.Env = append(cmd.Env, SharedMemoryEnv+"=3")
		}
	}
	if bin != nil {
		// The child's descriptor 2 + its place in ExtraFiles, exec'd as
		// /proc/self/fd/N through a symlink of the binary's name in the
		// plugin's private directory, so the process (ps, top) and its log
		// lines keep that name rather than "N"; argv[0] stays the path. The
		// binary stays open in the plugin, read-only, as a script's
		// interpreter needs to read it.
		cmd.ExtraFiles = append(cmd.ExtraFiles, bin)
		exe := filepath.Join(sockDir, name)
		if err := os.Symlink(fmt.Sprintf("/proc/self/fd/%d", 2+len(cmd.ExtraFiles)), exe); err != nil {
			cancelStart()
			_ = os.RemoveAll(sockDir)
			if shared != nil {
				shared.region.close()
			}
			return nil, fmt.Errorf("forward plugin %s: %w", name, err)
		}
		cmd.Path = exe
	}
	tail := &stderrTail{}
	var exitErr atomic.Pointer[string]
	// One budget for all the process's output: its stdout and stderr
	// after Serve, and its own stderr, which go-plugin logs through the
	// hclog logger's children.
	output := &outputBudget{z: o.log.Named(name)}
	hclogger := newZapHCLog(o.log).(*zapHCLog)
	hclogger.exitErr = &exitErr
	var stopping atomic.Bool
	hclogger.stopping = &stopping
	hclogger.budget = output
	if cmd.Path != path {
		hclogger.exe, hclogger.path = cmd.Path, path
	}
	streams := []*lineLog{
		{z: o.log.Named(name).With(zap.String("stream", "stdout")), budget: output},
		{z: o.log.Named(name).With(zap.String("stream", "stderr")), budget: output},
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{pluginName: &grpcPlugin{}},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		// cmd.Env already holds the host's environment (see pluginEnv);
		// go-plugin would append it after ours, and the last value wins.
		SkipHostEnv:  true,
		StartTimeout: o.startTimeout,
		Logger:       hclogger,
		SyncStdout:   streams[0],
		SyncStderr:   streams[1],
		Stderr:       tail,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))},
	})
	// fail runs after the start has returned, so cmd.Process is settled.
	fail := func(err error) (*Process, error) {
		stopping.Store(true)
		killProcessGroup(cmd)
		client.Kill()
		cancelStart()
		_ = os.RemoveAll(sockDir)
		if shared != nil {
			shared.region.close()
		}
		if err.Error() == goPluginStartTimeout {
			err = fmt.Errorf("%w: no handshake line within %s of its start: call forward.Serve first in main and do slow work (loading weights or data) in Configure, which gets the call deadline; in another language, print the handshake line before importing slow libraries", ErrStartTimeout, o.startTimeout)
		}
		err = execError(err, path)
		err = handshakeError(err)
		if e := exitErr.Load(); e != nil && *e != "signal: killed" && strings.HasPrefix(err.Error(), exitedBeforeHandshake) {
			// client.Kill waited for go-plugin to see the end: how it
			// ended (an exit status, a signal such as a segfault) is all
			// a plugin that printed nothing leaves to go on.
			err = fmt.Errorf("%w (%s)", err, *e)
		}
		s := tail.String()
		if strings.Contains(s, cookieRefusal) {
			err = fmt.Errorf("the plugin refused this host's handshake cookie %s=%s, printing go-plugin's %q: it was built with another HandshakeConfig than sourcewatch's; serve it with forward.Serve (in another language, check for exactly that variable and value, see forward/README.md)",
				Handshake.MagicCookieKey, Handshake.MagicCookieValue, cookieRefusal)
		}
		if s != "" {
			err = fmt.Errorf("%w; its stderr ended: %s", err, s)
		}
		return nil, fmt.Errorf("forward plugin %s: launch: %w", name, err)
	}
	// go-plugin's handshake ignores contexts, so it runs in a goroutine that
	// this function always waits for; a cancelled ctx kills the child
	// through cmd's context (go-plugin holds cmd.Process under its lock
	// during the start), which ends the handshake at once.
	var (
		raw  any
		done = make(chan error, 1)
	)
	go func() {
		cp, err := client.Client()
		if err == nil {
			raw, err = cp.Dispense(pluginName)
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		cancelStart()
		<-done
		return fail(ctx.Err())
	}
	if err != nil {
		return fail(err)
	}
	rpc, ok := raw.(forwardpb.ForwardClient)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, not a forward client", raw))
	}
	p := &Process{path: path, name: name, log: o.log, opts: o, client: client, cmd: cmd, cancelStart: cancelStart, sockDir: sockDir, rpc: rpc, shared: shared, stderr: tail, exitErr: &exitErr, stopping: &stopping, output: output}
	// The first call also sets up the TLS connection, so it gets the start
	// timeout rather than the call timeout.
	var info *forwardpb.InfoResponse
	err = p.callWithin(ctx, "info", max(o.startTimeout, p.deadline(0)), func(ctx context.Context) (err error) {
		info, err = p.rpc.Info(ctx, &forwardpb.InfoRequest{})
		return err
	})
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if shared != nil && !info.GetSharedMemory() {
		// A plugin in another language, or built before the region existed.
		o.log.Debug("forward plugin does not map the shared region; batches travel through gRPC", zap.String("plugin", name))
		p.shared = nil
		shared.region.close()
	}
	o.log.Debug("forward plugin launched", zap.String("path", path))
	return p, nil
}

// Path returns the plugin binary's path.
func (p *Process) Path() string { return p.path }

// Pid returns the plugin's process id (0 if unknown).
func (p *Process) Pid() int {
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Exited reports whether the plugin process has exited.
func (p *Process) Exited() bool { return p.client.Exited() }

// closeGrace bounds go-plugin's Kill (its graceful wait is two seconds)
// before Close kills the plugin's whole process group.
const closeGrace = 5 * time.Second

// Close stops the plugin process and waits for it: gracefully, then by
// force after two seconds, or at once if a call has timed out, since a hung
// plugin will not shut down gracefully; its whole process group too, at
// once when hung, else after closeGrace. It is safe to call more than once.
func (p *Process) Close() error {
	p.close.Do(func() {
		p.stopping.Store(true)
		if p.hung.Load() {
			killProcessGroup(p.cmd)
		}
		// go-plugin's Kill kills the process it started, then waits for its
		// stdout and stderr to close; a plugin run by a wrapper script that
		// did not exec it holds them open, so past the grace its group goes.
		killed := make(chan struct{})
		go func() {
			p.client.Kill()
			close(killed)
		}()
		select {
		case <-killed:
		case <-time.After(closeGrace):
			killProcessGroup(p.cmd)
			<-killed
		}
		// The process has ended: this releases the context and kills
		// nothing.
		p.cancelStart()
		_ = os.RemoveAll(p.sockDir)
		// what the last minute held back, which no later line reports
		p.output.flush()
		if sh := p.shared; sh != nil {
			// The plugin is gone, so a call using the region fails now;
			// wait for it to let go before unmapping under it.
			sh.mu.Lock()
			sh.retired.Store(true)
			sh.region.close()
			sh.mu.Unlock()
		}
	})
	return nil
}

// batchWork is the work of a call on rows vectors of the configured graph.
func (p *Process) batchWork(rows int) int64 {
	return int64(rows) * (p.n.Load() + p.arcs.Load())
}

// deadline is the timeout of a call doing work elements.
func (p *Process) deadline(work int64) time.Duration {
	if p.opts.callTimeout > 0 {
		return p.opts.callTimeout
	}
	return DefaultCallTimeout + time.Duration(work)*time.Microsecond
}

// call runs f under the deadline for work and turns its error into one
// that names the plugin and the operation and wraps the matching sentinel.
func (p *Process) call(ctx context.Context, op string, work int64, f func(context.Context) error) error {
	return p.callWithin(ctx, op, p.deadline(work), f)
}

func (p *Process) callWithin(ctx context.Context, op string, d time.Duration, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := f(cctx)
	if err == nil {
		return nil
	}
	return p.callError(ctx, cctx, op, d, err)
}

func (p *Process) callError(ctx, cctx context.Context, op string, d time.Duration, err error) error {
	prefix := fmt.Sprintf("forward plugin %s: %s", p.name, op)
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", prefix, ctx.Err())
	}
	st, ok := status.FromError(err)
	// The plugin's side of the stream can give up on the propagated
	// deadline a moment before the host's timer fires.
	if errors.Is(cctx.Err(), context.DeadlineExceeded) || (ok && st.Code() == codes.DeadlineExceeded) {
		if dl, has := ctx.Deadline(); has {
			if cdl, _ := cctx.Deadline(); !dl.After(cdl) {
				// The caller's own deadline, shorter than the call's,
				// ran out (its timer a moment behind): the caller's
				// error, and no sign the plugin is hung.
				return fmt.Errorf("%s: %w", prefix, context.DeadlineExceeded)
			}
		}
		p.hung.Store(true)
		return fmt.Errorf("%s: no answer within %v: %w", prefix, d, ErrCallTimeout)
	}
	if !ok {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	if st.Code() == codes.Unavailable || st.Code() == codes.Canceled {
		// The connection drops a moment before go-plugin notices the exit.
		for i := 0; i < 50 && !p.client.Exited(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if p.client.Exited() {
			why := st.Message()
			if e := p.exitErr.Load(); e != nil {
				// go-plugin logs the end before it reports Exited
				why = *e + ": " + why
			}
			if s := p.stderr.String(); s != "" {
				return fmt.Errorf("%s: %w (%s); its stderr ended: %s", prefix, ErrPluginExited, why, s)
			}
			return fmt.Errorf("%s: %w (%s)", prefix, ErrPluginExited, why)
		}
	}
	if st.Code() == codes.Unimplemented {
		return fmt.Errorf("%s: %w: %s", prefix, errUnimplemented, st.Message())
	}
	if st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max") {
		if m := sizeRefusal.FindStringSubmatch(st.Message()); m != nil && m[2] == strconv.Itoa(MaxMessageBytes) {
			// Over the protocol's own bound: no plugin setting helps.
			what := "fewer rows per call, or a smaller graph"
			switch op {
			case "fit":
				// The state blob is Fit's one large answer.
				what = "Fit's state (the model's weights, sent back whole) must be smaller"
			case "configure":
				what = "the state Configure is given (the model's weights) must be smaller, or the graph"
			}
			return fmt.Errorf("%s: %s: %s (the call's message is over the %d MiB the protocol allows: %s)",
				prefix, st.Code(), st.Message(), MaxMessageBytes>>20, what)
		}
		// gRPC libraries other than Go's accept 4 MiB by default.
		return fmt.Errorf("%s: %s: %s (the plugin's gRPC server must accept messages up to %d MiB: set its receive and send limits, see forward/README.md)",
			prefix, st.Code(), st.Message(), MaxMessageBytes>>20)
	}
	for _, s := range []error{ErrSharedMemory, ErrNotConfigured, ErrNotFitted, ErrBadState, ErrBadOutput} {
		if strings.Contains(st.Message(), s.Error()) {
			return fmt.Errorf("%s: %s: %w", prefix, strings.TrimSuffix(st.Message(), ": "+s.Error()), s)
		}
	}
	if st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "plugin panic: ") {
		// A panic Serve caught: its text says where.
		return &panicError{msg: prefix + ": " + st.Message()}
	}
	if st.Code() == codes.Unknown {
		// A plain error the plugin returned: its text says it all.
		return fmt.Errorf("%s: %s", prefix, st.Message())
	}
	return fmt.Errorf("%s: %s: %s%s", prefix, st.Code(), st.Message(), tlsHint(st.Message()))
}

// Info implements Model.
func (p *Process) Info(ctx context.Context) (Info, error) {
	var resp *forwardpb.InfoResponse
	err := p.call(ctx, "info", 0, func(ctx context.Context) (err error) {
		resp, err = p.rpc.Info(ctx, &forwardpb.InfoRequest{})
		return err
	})
	if err != nil {
		return Info{}, err
	}
	return infoFromProto(resp), nil
}

// Configure implements Model.
func (p *Process) Configure(ctx context.Context, g *graph.Graph, params map[string]string, state []byte) error {
	p.n.Store(0)
	req := &forwardpb.ConfigureRequest{Graph: GraphToProto(g), Params: params, State: state}
	work := int64(g.N()+g.Arcs()) + int64(len(state)/8)
	err := p.call(ctx, "configure", work, func(ctx context.Context) error {
		_, err := p.rpc.Configure(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	p.n.Store(int64(g.N()))
	p.arcs.Store(int64(g.Arcs()))
	return nil
}

// Fit implements Model. Instead of one deadline it has an idle timeout
// between progress messages (WithFitIdleTimeout).
func (p *Process) Fit(ctx context.Context, pairs []Pair, opts FitOptions, progress func(Progress)) (FitResult, error) {
	// The protocol carries them as int32: a larger count would wrap
	// (4294967297 epochs to 1, 2147483648 to a negative, read as the
	// plugin's default) and the plugin would fit another run than asked.
	for _, f := range []struct {
		name string
		v    int
	}{{"epochs", opts.Epochs}, {"batch size", opts.BatchSize}} {
		if f.v > math.MaxInt32 || f.v < math.MinInt32 {
			return FitResult{}, fmt.Errorf("forward plugin %s: fit: %s %d outside the protocol's int32 (at most %d)", p.name, f.name, f.v, math.MaxInt32)
		}
	}
	req := &forwardpb.FitRequest{Pairs: PairsToProto(pairs), Options: &forwardpb.FitOptions{
		Epochs: int32(opts.Epochs), LearningRate: opts.LearningRate, BatchSize: int32(opts.BatchSize),
		Lambda: opts.Lambda, Seed: opts.Seed, Validation: PairsToProto(opts.Validation),
	}}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var idle atomic.Bool
	timer := time.AfterFunc(p.opts.fitIdle, func() { idle.Store(true); cancel() })
	defer timer.Stop()
	fail := func(err error) (FitResult, error) {
		if idle.Load() && ctx.Err() == nil {
			p.hung.Store(true)
			return FitResult{}, fmt.Errorf("forward plugin %s: fit: no progress within %v: %w", p.name, p.opts.fitIdle, ErrCallTimeout)
		}
		return FitResult{}, p.callError(ctx, cctx, "fit", p.opts.fitIdle, err)
	}
	stream, err := p.rpc.Fit(cctx, req)
	if err != nil {
		return fail(err)
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return FitResult{}, fmt.Errorf("forward plugin %s: fit: stream ended without a result: %w", p.name, ErrBadOutput)
		}
		if err != nil {
			return fail(err)
		}
		timer.Reset(p.opts.fitIdle)
		switch e := ev.GetEvent().(type) {
		case *forwardpb.FitEvent_Progress:
			if progress != nil {
				progress(Progress{Epoch: int(e.Progress.GetEpoch()), Epochs: int(e.Progress.GetEpochs()),
					TrainLoss: e.Progress.GetTrainLoss(), ValLoss: e.Progress.GetValLoss()})
			}
		case *forwardpb.FitEvent_Result:
			if err := p.fitStreamEnds(stream, timer); err != nil {
				return FitResult{}, err
			}
			return FitResult{State: e.Result.GetState(), Metrics: e.Result.GetMetrics()}, nil
		}
	}
}

// fitResultGrace bounds the wait for a Fit stream to end after its result.
const fitResultGrace = 5 * time.Second

// fitStreamEnds checks that the Fit stream ends after its result, as the
// contract says (exactly one result, last): a second event means the
// plugin's result is not what it meant, an error. A stream left open
// past fitResultGrace (a plugin that never closes it) costs only the
// wait: the result stands.
func (p *Process) fitStreamEnds(stream grpc.ServerStreamingClient[forwardpb.FitEvent], timer *time.Timer) error {
	timer.Reset(fitResultGrace)
	ev, err := stream.Recv()
	if err != nil || ev == nil {
		return nil // io.EOF, or the grace cancelled the stream
	}
	what := "a progress report"
	if ev.GetResult() != nil {
		what = "a second result"
	}
	return fmt.Errorf("forward plugin %s: fit: %s after the result (the stream must end with exactly one result): %w", p.name, what, ErrBadOutput)
}

// checkIn panics on a batch that does not fit the configured graph: that
// is a programming error of the caller, as in gonum.
func (p *Process) checkIn(x, dy *mat.Dense) {
	r, c := x.Dims()
	if n := int(p.n.Load()); n > 0 && c != n {
		panic(fmt.Sprintf("forward: x has %d columns for a %d-node graph", c, n))
	}
	if dy != nil {
		if dr, dc := dy.Dims(); dr != r || dc != c {
			panic(fmt.Sprintf("forward: dy is %dx%d, x is %dx%d", dr, dc, r, c))
		}
	}
}

// checkOut returns an ErrBadOutput error naming the plugin when m is not
// rows x cols or holds NaN or Inf, or, for the predictions y, a value
// outside [0, 1]: inference reads y as infection probabilities, and a
// model that leaves the unit interval would steer it without a word.
func (p *Process) checkOut(op, field string, m *mat.Dense, rows, cols int) error {
	if r, c := m.Dims(); r != rows || c != cols {
		return fmt.Errorf("forward plugin %s: %s: %s is %dx%d, want %dx%d: %w", p.name, op, field, r, c, rows, cols, ErrBadOutput)
	}
	if i, j, bad := checkFinite(m); bad {
		return fmt.Errorf("forward plugin %s: %s: %s[%d][%d] is %v: %w", p.name, op, field, i, j, m.At(i, j), ErrBadOutput)
	}
	if field == "y" {
		if i, j, bad := outOfUnit(m); bad {
			return fmt.Errorf("forward plugin %s: %s: %s[%d][%d] is %v, outside [0, 1] (end the model in a sigmoid or a clamp, see forward/README.md): %w", p.name, op, field, i, j, m.At(i, j), ErrBadOutput)
		}
	}
	return nil
}

// decode unpacks an answer matrix and checks it (checkOut), reporting
// undecodable bytes as bad output.
func (p *Process) decode(op, field string, m *forwardpb.Matrix, rows, cols int) (*mat.Dense, error) {
	d, err := p.unpack(op, field, m)
	if err != nil {
		return nil, err
	}
	return d, p.checkOut(op, field, d, rows, cols)
}

// unpack is decode without the shape and finiteness check.
func (p *Process) unpack(op, field string, m *forwardpb.Matrix) (*mat.Dense, error) {
	d, err := MatrixFromProto(m, field)
	if err != nil {
		return nil, fmt.Errorf("forward plugin %s: %s: %w: %w", p.name, op, err, ErrBadOutput)
	}
	return d, nil
}

// Predict implements Model.
func (p *Process) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	p.checkIn(x, nil)
	r, c := x.Dims()
	var resp *forwardpb.PredictResponse
	err := p.call(ctx, "predict", p.batchWork(r), func(ctx context.Context) (err error) {
		resp, err = p.rpc.Predict(ctx, &forwardpb.PredictRequest{X: MatrixToProto(x)})
		return err
	})
	if err != nil {
		return nil, err
	}
	return p.decode("predict", "y", resp.GetY(), r, c)
}

// VJP implements Model.
func (p *Process) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	p.checkIn(x, dy)
	r, c := x.Dims()
	var resp *forwardpb.VJPResponse
	err := p.call(ctx, "vjp", p.batchWork(r), func(ctx context.Context) (err error) {
		resp, err = p.rpc.VJP(ctx, &forwardpb.VJPRequest{X: MatrixToProto(x), Dy: MatrixToProto(dy)})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	y, err := p.decode("vjp", "y", resp.GetY(), r, c)
	if err != nil {
		return nil, nil, err
	}
	dx, err := p.decode("vjp", "dx", resp.GetDx(), r, c)
	if err != nil {
		return nil, nil, err
	}
	return y, dx, nil
}

// SquaredErrorVJP implements SquaredErrorVJPer in one round trip. A plugin
// built before the call existed answers Unimplemented; the host then
// remembers that and uses Predict followed by VJP.
func (p *Process) SquaredErrorVJP(ctx context.Context, x, target *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	r, c := x.Dims()
	if tr, tc := target.Dims(); (tr != 1 && tr != r) || tc != c {
		panic("forward: SquaredErrorVJP target shape does not match x")
	}
	if p.noFused.Load() {
		return SquaredErrorVJP(ctx, modelOnly{p}, x, target)
	}
	p.checkIn(x, nil)
	resp, dx, err := p.fused(ctx, x, target, false)
	if err != nil {
		if errors.Is(err, errUnimplemented) {
			p.noFused.Store(true)
			return SquaredErrorVJP(ctx, modelOnly{p}, x, target)
		}
		return nil, nil, err
	}
	y, err := p.decode(fusedOp, "y", resp.GetY(), r, c)
	if err != nil {
		return nil, nil, err
	}
	if err := p.checkOut(fusedOp, "dx", dx, r, c); err != nil {
		return nil, nil, err
	}
	return y, dx, nil
}

const fusedOp = "squared-error vjp"

// fused makes the SquaredErrorVJP call and returns its response and dx,
// decoded but not yet checked (the caller checks y or the loss first, then
// dx, so a fault is reported where it first shows). The batches go through
// the shared region when the plugin maps one and no other call is using
// it, and as bytes otherwise.
func (p *Process) fused(ctx context.Context, x, target *mat.Dense, lossOnly bool) (*forwardpb.VJPResponse, *mat.Dense, error) {
	if sh := p.shared; sh != nil && !sh.retired.Load() && sh.mu.TryLock() {
		// Checked again under the lock: a call that failed (and may
		// still be running in the plugin) retires the region before it
		// unlocks, and this call must not write a batch under it.
		if !sh.retired.Load() {
			resp, dx, sent, err := p.fusedShared(ctx, sh, x, target, lossOnly)
			sh.mu.Unlock()
			if sent {
				return resp, dx, err
			}
		} else {
			sh.mu.Unlock()
		}
	}
	r, _ := x.Dims()
	req := &forwardpb.SquaredErrorVJPRequest{X: MatrixToProto(x), Target: MatrixToProto(target), LossOnly: lossOnly}
	var resp *forwardpb.VJPResponse
	err := p.call(ctx, fusedOp, p.batchWork(r), func(ctx context.Context) (err error) {
		resp, err = p.rpc.SquaredErrorVJP(ctx, req)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	dx, err := p.unpack(fusedOp, "dx", resp.GetDx())
	return resp, dx, err
}

// fusedShared is fused through the shared region, whose lock the caller
// holds; sent is false when the batch does not fit there and should
// travel as bytes.
func (p *Process) fusedShared(ctx context.Context, sh *hostShared, x, target *mat.Dense, lossOnly bool) (resp *forwardpb.VJPResponse, dx *mat.Dense, sent bool, err error) {
	r, c := x.Dims()
	tr, _ := target.Dims()
	xOff, targetOff, dxOff, size, ok := sharedLayout(r, c, tr)
	if !ok {
		return nil, nil, false, nil
	}
	mem, err := sh.region.grow(size)
	if err != nil {
		sh.retired.Store(true)
		p.log.Warn("forward plugin batches travel through gRPC from now on", zap.String("plugin", p.name), zap.Error(err))
		return nil, nil, false, nil
	}
	putDense(mem, xOff, x)
	putDense(mem, targetOff, target)
	req := &forwardpb.SquaredErrorVJPRequest{LossOnly: lossOnly, Shared: &forwardpb.SharedBatch{
		Rows: uint32(r), Cols: uint32(c), TargetRows: uint32(tr)}}
	var raw error
	err = p.call(ctx, fusedOp, p.batchWork(r), func(ctx context.Context) (err error) {
		resp, err = p.rpc.SquaredErrorVJP(ctx, req)
		raw = err
		return err
	})
	if err != nil {
		if ctx.Err() != nil || !pluginAnswered(raw) {
			// A call that timed out, was cancelled or lost its connection
			// may still be running in the plugin, reading x or writing
			// dx: no later call may write there. One the plugin answered
			// with an error (unconfigured, a model's error, a panic it
			// caught) has ended, and the region serves the next.
			sh.retired.Store(true)
		}
		if errors.Is(err, ErrSharedMemory) {
			sh.retired.Store(true)
			// The plugin could not map the region and touched nothing in
			// it: this call, and every later one, travels as bytes.
			p.log.Warn("forward plugin batches travel through gRPC from now on", zap.String("plugin", p.name), zap.Error(err))
			return nil, nil, false, nil
		}
		return nil, nil, true, err
	}
	sh.calls.Add(1)
	if !resp.GetDxShared() {
		dx, err = p.unpack(fusedOp, "dx", resp.GetDx())
		return resp, dx, true, err
	}
	return resp, denseAt(mem, dxOff, r, c), true, nil
}

// panicError is a call's plugin panic: its text is the plugin's, and it
// matches ErrPluginPanic.
type panicError struct{ msg string }

func (e *panicError) Error() string        { return e.msg }
func (e *panicError) Is(target error) bool { return target == ErrPluginPanic }

// pluginAnswered reports whether err is an answer the plugin's handler
// returned (forward.Serve's codes for a model's error, a panic it caught,
// a call it lacks, a message over its limit), after which it touches
// nothing of the call's, rather than a timeout, a cancellation or a
// broken connection.
func pluginAnswered(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unknown, codes.InvalidArgument, codes.FailedPrecondition, codes.Unimplemented, codes.ResourceExhausted:
		return true
	case codes.Internal:
		return strings.HasPrefix(st.Message(), "plugin panic: ")
	}
	return false
}

// SharedCalls returns how many fused calls have passed their batches
// through the shared region rather than gRPC: zero for a plugin that does
// not map it or a process launched WithoutSharedMemory.
func (p *Process) SharedCalls() int64 {
	if p.shared == nil {
		return 0
	}
	return p.shared.calls.Load()
}

// SquaredErrorLoss implements SquaredErrorLosser in one round trip that
// brings back the per-row loss instead of f(x). A plugin that predates
// loss_only sends f(x) anyway and the loss is computed here; one that
// predates the fused call is served by Predict then VJP.
func (p *Process) SquaredErrorLoss(ctx context.Context, x, target *mat.Dense) ([]float64, *mat.Dense, error) {
	r, c := x.Dims()
	if tr, tc := target.Dims(); (tr != 1 && tr != r) || tc != c {
		panic("forward: SquaredErrorLoss target shape does not match x")
	}
	if p.noFused.Load() {
		y, dx, err := SquaredErrorVJP(ctx, modelOnly{p}, x, target)
		if err != nil {
			return nil, nil, err
		}
		return squaredErrors(y, target), dx, nil
	}
	p.checkIn(x, nil)
	const op = fusedOp
	resp, dx, err := p.fused(ctx, x, target, true)
	if err != nil {
		if errors.Is(err, errUnimplemented) {
			p.noFused.Store(true)
			return p.SquaredErrorLoss(ctx, x, target)
		}
		return nil, nil, err
	}
	var loss []float64
	if resp.GetY() != nil {
		y, err := p.decode(op, "y", resp.GetY(), r, c)
		if err != nil {
			return nil, nil, err
		}
		loss = squaredErrors(y, target)
	} else {
		loss = resp.GetLoss()
		if len(loss) != r {
			return nil, nil, fmt.Errorf("forward plugin %s: %s: %d loss values for %d rows: %w", p.name, op, len(loss), r, ErrBadOutput)
		}
		for i, l := range loss {
			if math.IsNaN(l) || math.IsInf(l, 0) || l < 0 {
				return nil, nil, fmt.Errorf("forward plugin %s: %s: loss[%d] is %v: %w", p.name, op, i, l, ErrBadOutput)
			}
		}
	}
	if err := p.checkOut(op, "dx", dx, r, c); err != nil {
		return nil, nil, err
	}
	return loss, dx, nil
}

// errUnimplemented marks a call the plugin does not know (an older build).
var errUnimplemented = errors.New("call not implemented by the plugin")

// modelOnly hides a Process's fused method so the generic fallback uses
// Predict and VJP.
type modelOnly struct{ p *Process }

func (m modelOnly) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	return m.p.Predict(ctx, x)
}

func (m modelOnly) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	return m.p.VJP(ctx, x, dy)
}
