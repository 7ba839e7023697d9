package forward

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapHCLog is an hclog.Logger over zap, so go-plugin's own messages and the
// plugin's stderr (which go-plugin parses as hclog JSON lines) land in the
// host's structured log. hclog's Trace maps to zap's Debug.
//
// go-plugin reports its own routine lifecycle ("starting plugin", "plugin
// process exited") at Info on the root logger and the plugin's lines on a
// child named after the binary; the root demotes Info to Debug so a host at
// Info level shows what the plugin says, not the plumbing.
type zapHCLog struct {
	z       *zap.Logger
	name    string
	implied []any
	demote  bool
	// exitErr, on the root go-plugin logs the process's end on, keeps why
	// it ended ("exit status 3", "signal: killed"), which go-plugin tells
	// no one else; a call that finds the process gone quotes it.
	exitErr *atomic.Pointer[string]
	// stopping, on the root, is set once the host itself stops the
	// process (Close, or a failed start): go-plugin's error that it
	// exited ("signal: killed") and its warning that it did not exit
	// gracefully are then the host's doing, not news, and go to Debug
	// (an exit status of the plugin's own is not: a crash in its
	// shutdown).
	// The host's own line says why it stopped it (a call with no answer,
	// a handshake refused).
	stopping *atomic.Bool
	// budget, set on the root, bounds its named children: the loggers
	// go-plugin gives the lines of the process's own stderr, which the
	// plugin may make as many and as long as it likes, not the root's
	// own lifecycle lines.
	budget *outputBudget
	// exe, on the root, is the name go-plugin starts the process by
	// (Launch's symlink to the hashed binary's descriptor), which its
	// lifecycle lines give as "plugin" and "path": they show path, the
	// binary's, instead.
	exe, path string
}

func newZapHCLog(z *zap.Logger) hclog.Logger {
	return &zapHCLog{z: z, demote: true}
}

func fields(args []any) []zap.Field {
	fs := make([]zap.Field, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			fs = append(fs, zap.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		fs = append(fs, zap.Any(key, args[i+1]))
	}
	return fs
}

func zapLevel(l hclog.Level) zapcore.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return zapcore.DebugLevel
	case hclog.Warn:
		return zapcore.WarnLevel
	case hclog.Error:
		return zapcore.ErrorLevel
	default:
		return zapcore.InfoLevel
	}
}

func (l *zapHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	// go-plugin appends the plugin's own stamp to every hclog line it
	// parses (the zero time when the line had none); the host's log
	// stamps each line itself.
	if n := len(args); n >= 2 && args[n-2] == "timestamp" {
		if _, isString := args[n-1].(string); isString {
			args = args[:n-2]
		}
	}
	exit := ""
	if msg == "plugin process exited" {
		for i := 0; i+1 < len(args); i += 2 {
			if k, _ := args[i].(string); k == "error" {
				if e, ok := args[i+1].(string); ok {
					exit = e
					if l.exitErr != nil {
						l.exitErr.Store(&e)
					}
				}
			}
		}
	}
	// Killed (the host's SIGKILL, go-plugin's or the process group's) is
	// the host's doing; an exit status of the plugin's own, or another
	// signal, while Close runs is a crash (in its shutdown) and stays news.
	if l.stopping != nil && l.stopping.Load() && ((msg == "plugin process exited" && exit == "signal: killed") || msg == "plugin failed to exit gracefully") {
		level = hclog.Debug
	}
	if l.exe != "" && slices.Contains(args, any(l.exe)) {
		args = slices.Clone(args)
		for i, a := range args {
			if a == any(l.exe) {
				args[i] = l.path
			}
		}
	}
	if lv, m, a, ok := hclogLine(msg); ok {
		level, msg, args = lv, m, append(args, a...)
	}
	if l.demote && level == hclog.Info {
		level = hclog.Debug
	}
	msg = cutLine(msg) // a line of the plugin's own stderr, which it may make any length
	ce := l.z.Check(zapLevel(level), msg)
	if ce == nil {
		return
	}
	if l.name != "" && l.budget != nil {
		// The plugin's own line: its field values (an hclog JSON line's)
		// are its to make as long, and the lines as many, as it likes.
		size := len(msg)
		args = slices.Clone(args)
		for i, a := range args {
			str, ok := a.(string)
			if !ok {
				// a JSON line's arrays and objects: counted and cut as
				// their JSON, which is how the log writes them anyway
				b, err := json.Marshal(a)
				if err != nil {
					continue
				}
				if len(b) <= pluginLineBytes {
					size += len(b)
					continue
				}
				str = string(b)
			}
			args[i] = cutLine(str)
			size += len(args[i].(string))
		}
		if !l.budget.admit(size) {
			return
		}
	}
	ce.Write(fields(args)...)
}

// cutLine cuts line at pluginLineBytes (not inside a UTF-8 sequence),
// saying how much was cut.
func cutLine(line string) string {
	if cut := len(line) - pluginLineBytes; cut > 0 {
		return strings.ToValidUTF8(line[:pluginLineBytes], "") + fmt.Sprintf(" ... (%d bytes cut)", cut)
	}
	return line
}

func (l *zapHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *zapHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *zapHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *zapHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *zapHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *zapHCLog) IsTrace() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *zapHCLog) IsDebug() bool { return l.z.Core().Enabled(zapcore.DebugLevel) }
func (l *zapHCLog) IsInfo() bool  { return l.z.Core().Enabled(zapcore.InfoLevel) }
func (l *zapHCLog) IsWarn() bool  { return l.z.Core().Enabled(zapcore.WarnLevel) }
func (l *zapHCLog) IsError() bool { return l.z.Core().Enabled(zapcore.ErrorLevel) }

func (l *zapHCLog) ImpliedArgs() []any { return l.implied }

func (l *zapHCLog) With(args ...any) hclog.Logger {
	return &zapHCLog{z: l.z.With(fields(args)...), name: l.name, implied: append(append([]any(nil), l.implied...), args...), demote: l.demote, budget: l.budget}
}

func (l *zapHCLog) Name() string { return l.name }

func (l *zapHCLog) Named(name string) hclog.Logger {
	full := name
	if l.name != "" {
		full = l.name + "." + name
	}
	return &zapHCLog{z: l.z.Named(name), name: full, implied: l.implied, budget: l.budget}
}

// ResetNamed cannot drop zap's accumulated name, so it names a child; the
// name only decorates log lines.
func (l *zapHCLog) ResetNamed(name string) hclog.Logger {
	return &zapHCLog{z: l.z.Named(name), name: name, implied: l.implied, budget: l.budget}
}

// SetLevel is a no-op: the host's zap configuration owns the level.
func (l *zapHCLog) SetLevel(hclog.Level) {}

func (l *zapHCLog) GetLevel() hclog.Level {
	switch {
	case l.IsDebug():
		return hclog.Trace
	case l.IsInfo():
		return hclog.Info
	case l.IsWarn():
		return hclog.Warn
	case l.IsError():
		return hclog.Error
	default:
		return hclog.Off
	}
}

func (l *zapHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *zapHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// lineLog is an io.Writer that logs each complete line at Info. go-plugin
// forwards what a Go plugin writes to os.Stdout and os.Stderr after Serve
// through it (the gRPC stdio stream), so fmt.Fprintln(os.Stderr, ...) in a
// plugin shows up in the host's log.
//
// A plugin's output is not the host's to trust: a line is cut at
// pluginLineBytes, and its budget bounds the bytes a minute.
type lineLog struct {
	mu     sync.Mutex
	z      *zap.Logger
	lines  lineSplitter
	budget *outputBudget // nil: one of its own, reporting to z
}

const (
	pluginLineBytes       = 4 << 10
	pluginOutputPerMinute = 1 << 20
)

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budget == nil {
		l.budget = &outputBudget{z: l.z}
	}
	l.lines.write(p, 64<<10, func(line string) {
		if line = strings.TrimRight(line, "\r"); line != "" {
			if line = cutLine(line); l.budget.admit(len(line)) {
				l.z.Info(line)
			}
		}
	})
	return len(p), nil
}

// outputBudget bounds what one plugin process writes into the host's
// log, over all of its streams: past pluginOutputPerMinute bytes of lines
// in a minute the rest of that minute's are counted, not logged (a plugin
// that printed 20 MB in each Predict wrote 315 MB into the host's log in
// one `plugin check`, and would have at every inference of the daemon),
// and the count is reported at the first line after the minute, or by
// flush when the process ends.
type outputBudget struct {
	mu sync.Mutex
	z  *zap.Logger // where the budget's own warnings go
	// now is the clock of the minutes (nil: time.Now).
	now func() time.Time
	// Within the minute from windowStart: bytes logged, and lines and
	// bytes held back once the budget was spent.
	windowStart          time.Time
	logged               int
	heldLines, heldBytes int
}

// admit reports whether a line of size bytes may be logged now, and
// counts it either way.
func (b *outputBudget) admit(size int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now
	if b.now != nil {
		now = b.now
	}
	if t := now(); t.Sub(b.windowStart) >= time.Minute {
		b.reportHeld()
		b.windowStart, b.logged = t, 0
	}
	if b.logged >= pluginOutputPerMinute {
		b.heldLines++
		b.heldBytes += size
		return false
	}
	b.logged += size
	if b.logged >= pluginOutputPerMinute {
		b.z.Warn(fmt.Sprintf("plugin output over %d KiB within a minute: the rest of the minute's lines are held back and counted at the next line after it or when the process ends", pluginOutputPerMinute>>10))
	}
	return true
}

// reportHeld logs how many lines were held back, if any, and forgets them.
// The caller holds mu.
func (b *outputBudget) reportHeld() {
	if b.heldLines > 0 {
		b.z.Warn("plugin output held back", zap.Int("lines", b.heldLines), zap.Int("bytes", b.heldBytes),
			zap.String("why", fmt.Sprintf("over %d KiB of lines within a minute", pluginOutputPerMinute>>10)))
	}
	b.heldLines, b.heldBytes = 0, 0
}

// flush reports the lines held back when no later line will: the process
// is gone.
func (b *outputBudget) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reportHeld()
}

// lineSplitter cuts a stream of writes into lines.
type lineSplitter struct{ partial []byte }

// write hands each line p completes to emit, without its newline. A
// partial line longer than limit is emitted as it is, so a writer that
// never ends its line does not grow the buffer forever.
func (s *lineSplitter) write(p []byte, limit int, emit func(string)) {
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		emit(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > limit {
		emit(string(s.partial))
		s.partial = s.partial[:0]
	}
}

// stderrTail keeps the last lines a plugin process wrote to its own
// standard error (go-plugin copies them to ClientConfig.Stderr as it logs
// them): what log.Fatal or the runtime printed just before the process
// died, which an exit error then quotes. Lines written through os.Stderr
// after Serve travel the gRPC stdio stream instead, and a process that
// exits at once can lose them; the process's own stderr is a pipe the host
// reads to the end.
//
// A Go panic's trace runs to many lines, of which the first few say what
// and where; from a line "panic: " or "fatal error: " on, the tail keeps
// that line and the ones right after it instead of the last ones.
type stderrTail struct {
	mu    sync.Mutex
	split lineSplitter
	lines []string // at most tailLines, oldest first
	panic bool     // lines starts with a panic's first line
}

const (
	tailLines     = 5
	tailLineBytes = 300
)

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.split.write(p, tailLineBytes, t.add)
	return len(p), nil
}

func (t *stderrTail) add(line string) {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "{") {
		// An hclog JSON line: go-plugin's own chatter below warn is not
		// why a plugin died; a warning or an error keeps its message.
		var entry struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Level != "" {
			switch entry.Level {
			case "trace", "debug", "info":
				return
			}
			line = entry.Message
		}
	}
	if line == "" {
		return
	}
	if len(line) > tailLineBytes {
		line = line[:tailLineBytes] + "..."
	}
	if !t.panic && (strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")) {
		t.panic, t.lines = true, t.lines[:0]
	}
	if t.panic && len(t.lines) == tailLines {
		return // the panic's own lines say more than the trace's end
	}
	if len(t.lines) == tailLines {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, line)
}

// String returns the kept lines joined by " | ", or "".
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if s := strings.TrimSpace(string(t.split.partial)); s != "" && !(t.panic && len(lines) == tailLines) {
		lines = append(slices.Clone(lines), s)
	}
	return strings.Join(lines, " | ")
}

// hclogLine decodes a plugin's stderr line that go-plugin passed on as
// text although it is an hclog JSON line: go-plugin parses @timestamp with
// exactly six fractional digits and gives up on any other (JavaScript's
// toISOString has three), so the line lost its level and message. The
// timestamp is dropped (the host's log stamps its own); ok is false for
// anything but a JSON object with a string @message.
func hclogLine(s string) (level hclog.Level, msg string, args []any, ok bool) {
	if !strings.HasPrefix(s, "{") || !strings.Contains(s, `"@message"`) {
		return 0, "", nil, false
	}
	var raw map[string]any
	if json.Unmarshal([]byte(s), &raw) != nil {
		return 0, "", nil, false
	}
	msg, ok = raw["@message"].(string)
	if !ok {
		return 0, "", nil, false
	}
	level = hclog.Info
	if lv, isString := raw["@level"].(string); isString {
		if level = hclog.LevelFromString(lv); level == hclog.NoLevel {
			level = hclog.Info
		}
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !strings.HasPrefix(k, "@") {
			args = append(args, k, raw[k])
		}
	}
	return level, msg, args, true
}
