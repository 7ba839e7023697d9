package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// ErrConfig is wrapped by every configuration validation error.
var ErrConfig = errors.New("invalid config")

// Config is the daemon's configuration. Zero values of optional fields
// are filled by Load and DefaultConfig; Validate checks the result.
type Config struct {
	NATS     NATSConfig    `mapstructure:"nats"`
	Subjects SubjectConfig `mapstructure:"subjects"`
	Graphs   []GraphConfig `mapstructure:"graphs"`
	// PluginDir holds the forward plugin binaries; "" leaves the choice to
	// the program that runs the daemon (sourcewatch serve: the directory
	// of its own binary when the plugins are there, else bin).
	PluginDir string `mapstructure:"plugin_dir"`
	// Workers bounds concurrent inferences across all graphs.
	Workers int        `mapstructure:"workers"`
	HTTP    HTTPConfig `mapstructure:"http"`
	// DataDir holds the embedded server's JetStream store (DataDir/nats).
	DataDir string `mapstructure:"data_dir"`
	// SnapshotInterval is how often windows are written to KV.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// MaxEventBytes is the largest message accepted (too_large beyond).
	MaxEventBytes int `mapstructure:"max_event_bytes"`
	// MaxFutureSkew is how far in the future an event time may be
	// (future_ts beyond).
	MaxFutureSkew time.Duration    `mapstructure:"max_future_skew"`
	Events        EventsConfig     `mapstructure:"events"`
	Alerts        AlertsConfig     `mapstructure:"alerts"`
	DeadLetters   DeadLetterConfig `mapstructure:"deadletter"`
	HA            HAConfig         `mapstructure:"ha"`
}

// HAConfig runs replicas of the daemon as one active and the rest on
// standby, through a lease in a JetStream KV bucket (LeaseBucket) on a
// shared NATS server or cluster: the active replica consumes, infers and
// alerts; a standby waits, and takes over from the KV snapshot when the
// active one stops (at once) or dies (after LeaseTTL).
type HAConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// Replica is this replica's id, unique among replicas (default
	// host-pid). A stable id lets a restarted replica reclaim its own
	// lease at once.
	Replica string `mapstructure:"replica"`
	// LeaseTTL is how long a dead active replica's lease lasts.
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
}

// NATSConfig says where NATS is. An empty URL starts an embedded server.
type NATSConfig struct {
	URL      string    `mapstructure:"url"`
	Creds    string    `mapstructure:"creds"`
	NKey     string    `mapstructure:"nkey"` // file holding an nkey seed
	User     string    `mapstructure:"user"`
	Password string    `mapstructure:"password"`
	TLS      TLSConfig `mapstructure:"tls"`
	// Listen is the embedded server's client address, host:port. "-1" or
	// port -1 means no listener (in-process clients only); port 0 picks a
	// free port.
	Listen string `mapstructure:"listen"`
}

// TLSConfig holds PEM file paths for a TLS connection to NATS.
type TLSConfig struct {
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
	CA   string `mapstructure:"ca"`
}

// SubjectConfig holds the subject prefix: events on <prefix>.events.<graph>,
// alerts on <prefix>.alerts.<graph>, dead letters on <prefix>.deadletter.
type SubjectConfig struct {
	Prefix string `mapstructure:"prefix"`
}

// HTTPConfig is the health and metrics listener.
type HTTPConfig struct {
	// Addr is host:port; empty disables HTTP.
	Addr string `mapstructure:"addr"`
	// Pprof serves Go's profiles under /debug/pprof/ (heap, goroutines,
	// CPU), for an operator chasing memory or CPU in a long run. Off by
	// default: a profile can be costly and shows internals, so enable it
	// only on an address others cannot reach.
	Pprof bool `mapstructure:"pprof"`
}

// EventsConfig limits the SOURCEWATCH_EVENTS stream. Zero or negative
// means unlimited. The stream must keep events at least as long as one
// snapshot interval, or a restart cannot replay them.
type EventsConfig struct {
	MaxAge   time.Duration `mapstructure:"max_age"`
	MaxBytes int64         `mapstructure:"max_bytes"`
	MaxMsgs  int64         `mapstructure:"max_msgs"`
	Replicas int           `mapstructure:"replicas"`
}

// AlertsConfig limits the SOURCEWATCH_ALERTS stream, which keeps
// published alerts for late subscribers and `alerts tail --since`. Zero or
// negative means unlimited; the stream's replicas are events.replicas.
type AlertsConfig struct {
	MaxAge   time.Duration `mapstructure:"max_age"`
	MaxBytes int64         `mapstructure:"max_bytes"`
}

// DeadLetterConfig limits the SOURCEWATCH_DEADLETTER stream, which keeps
// refused events with their reasons. Zero or negative means unlimited; its
// replicas are events.replicas. On a server or account that limits
// JetStream storage the stream reserves max_bytes at creation, so a small
// account needs a smaller cap (the default is 256 MiB).
type DeadLetterConfig struct {
	MaxAge   time.Duration `mapstructure:"max_age"`
	MaxBytes int64         `mapstructure:"max_bytes"`
}

// Defaults of the dead-letter stream's limits.
const (
	DefaultDeadLetterMaxAge   = 7 * 24 * time.Hour
	DefaultDeadLetterMaxBytes = 256 << 20
)

// MinAlertsMaxBytes is the least alerts.max_bytes: a cap below one message
// of NATS's default max_payload could refuse the largest alert.
const MinAlertsMaxBytes = 1 << 20

// GraphConfig is one monitored graph. The localize adapter reads the
// bundle and forward fields; the monitor reads the rest.
type GraphConfig struct {
	// Name is the graph's subject token: events on <prefix>.events.<Name>.
	Name     string `mapstructure:"name"`
	Edges    string `mapstructure:"edges"`
	Directed bool   `mapstructure:"directed"`
	Bundle   string `mapstructure:"bundle"`
	// Forward overrides the plugin name recorded in the bundle.
	Forward         string            `mapstructure:"forward"`
	ForwardParams   map[string]string `mapstructure:"forward_params"`
	ForwardChecksum string            `mapstructure:"forward_checksum"` // hex SHA-256 of the plugin binary
	AllowUnverified bool              `mapstructure:"allow_unverified"`
	// CallTimeout is the deadline of every call to the graph's forward
	// plugin, Configure included; 0 is the host's default, 10 s plus 1 µs
	// per row × (nodes + arcs) (forward.WithCallTimeout).
	CallTimeout time.Duration `mapstructure:"call_timeout"`
	// Window is how long an infection counts.
	Window time.Duration `mapstructure:"window"`
	// Decay, when > 0, weighs an infection of age a by exp(-a/Decay).
	Decay time.Duration `mapstructure:"decay"`
	// Interval is how often the graph is considered for inference.
	Interval time.Duration `mapstructure:"interval"`
	// MinChanges is how many nodes whose place in the observation's
	// infected set changed since the last inference (new infections,
	// recoveries, infections that aged out or came back) trigger a new
	// one.
	MinChanges int `mapstructure:"min_changes"`
	// MinInfected is the fewest infected nodes worth localizing; below it
	// an open incident resolves.
	MinInfected int `mapstructure:"min_infected"`
	// Restarts bounds how often the forward plugin is relaunched.
	Restarts int `mapstructure:"restarts"`
}

// Defaults for keys the configuration leaves out.
const (
	DefaultPrefix           = "sourcewatch"
	DefaultListen           = "127.0.0.1:4222"
	DefaultHTTPAddr         = "127.0.0.1:7070"
	DefaultPluginDir        = ""
	DefaultDataDir          = "data"
	DefaultWindow           = time.Hour
	DefaultInterval         = 10 * time.Second
	DefaultSnapshotInterval = 30 * time.Second
	DefaultMaxEventBytes    = 1_000_000 // below nats-server's default max_payload, 1 MiB, so too_large can happen
	DefaultMaxFutureSkew    = time.Minute
	MaxFutureSkewLimit      = 365 * 24 * time.Hour
	DefaultEventsMaxAge     = 24 * time.Hour
	DefaultMinChanges       = 1
	DefaultMinInfected      = 1
	DefaultRestarts         = 3
	DefaultWorkers          = 2
	DefaultLeaseTTL         = 10 * time.Second
)

// MaxWorkers bounds workers.
const MaxWorkers = 1024

// MinInterval is the least interval and snapshot_interval: below it the
// tickers would spin a core and do nothing useful. Intervals below a
// second are allowed (tests use them) but logged at start, as a likely
// typo of 1m for 1ms.
const MinInterval = 5 * time.Millisecond

// duplicateWindow is the events stream's Nats-Msg-Id deduplication window.
const duplicateWindow = 2 * time.Minute

// DefaultConfig is a configuration with every default and no graphs.
func DefaultConfig() Config {
	return Config{
		NATS:             NATSConfig{Listen: DefaultListen},
		Subjects:         SubjectConfig{Prefix: DefaultPrefix},
		PluginDir:        DefaultPluginDir,
		Workers:          DefaultWorkers,
		HTTP:             HTTPConfig{Addr: DefaultHTTPAddr},
		DataDir:          DefaultDataDir,
		SnapshotInterval: DefaultSnapshotInterval,
		MaxEventBytes:    DefaultMaxEventBytes,
		MaxFutureSkew:    DefaultMaxFutureSkew,
		Events:           EventsConfig{MaxAge: DefaultEventsMaxAge, Replicas: 1},
		Alerts:           AlertsConfig{MaxAge: alerts.StreamMaxAge},
		DeadLetters:      DeadLetterConfig{MaxAge: DefaultDeadLetterMaxAge, MaxBytes: DefaultDeadLetterMaxBytes},
		HA:               HAConfig{LeaseTTL: DefaultLeaseTTL},
	}
}

// DefaultGraphConfig is a graph configuration with every default.
func DefaultGraphConfig(name string) GraphConfig {
	return GraphConfig{
		Name:        name,
		Window:      DefaultWindow,
		Interval:    DefaultInterval,
		MinChanges:  DefaultMinChanges,
		MinInfected: DefaultMinInfected,
		Restarts:    DefaultRestarts,
	}
}

// scalarDefaults are registered with viper so SOURCEWATCH_* environment
// variables reach Unmarshal for every scalar key, not only those present
// in the file.
func scalarDefaults() map[string]any {
	d := DefaultConfig()
	return map[string]any{
		"nats.url":             "",
		"nats.creds":           "",
		"nats.nkey":            "",
		"nats.user":            "",
		"nats.password":        "",
		"nats.tls.cert":        "",
		"nats.tls.key":         "",
		"nats.tls.ca":          "",
		"nats.listen":          d.NATS.Listen,
		"subjects.prefix":      d.Subjects.Prefix,
		"plugin_dir":           d.PluginDir,
		"workers":              d.Workers,
		"http.addr":            d.HTTP.Addr,
		"http.pprof":           d.HTTP.Pprof,
		"data_dir":             d.DataDir,
		"snapshot_interval":    d.SnapshotInterval,
		"max_event_bytes":      d.MaxEventBytes,
		"max_future_skew":      d.MaxFutureSkew,
		"events.max_age":       d.Events.MaxAge,
		"events.max_bytes":     d.Events.MaxBytes,
		"events.max_msgs":      d.Events.MaxMsgs,
		"events.replicas":      d.Events.Replicas,
		"alerts.max_age":       d.Alerts.MaxAge,
		"alerts.max_bytes":     d.Alerts.MaxBytes,
		"deadletter.max_age":   d.DeadLetters.MaxAge,
		"deadletter.max_bytes": d.DeadLetters.MaxBytes,
		"ha.enabled":           false,
		"ha.replica":           "",
		"ha.lease_ttl":         d.HA.LeaseTTL,
	}
}

// ScalarKeys returns every scalar key of the daemon config outside the
// graphs list, dotted (nats.url, events.max_age), sorted: the keys a
// SOURCEWATCH_* environment variable can set.
func ScalarKeys() []string {
	keys := make([]string, 0, len(scalarDefaults()))
	for k := range scalarDefaults() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SectionKeys returns the dotted paths of the config's sections (nats,
// nats.tls, graphs, ...): keys whose value is a map or a list. Set through
// the environment, such a key (SOURCEWATCH_NATS) would replace the file's
// whole section by a string; sections are set key by key.
func SectionKeys() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("mapstructure")
			if tag == "" {
				continue
			}
			switch f.Type.Kind() {
			case reflect.Struct:
				out = append(out, prefix+tag)
				walk(prefix+tag+".", f.Type)
			case reflect.Slice, reflect.Map:
				out = append(out, prefix+tag)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	sort.Strings(out)
	return out
}

// Load builds a validated Config from v (a file already read, plus
// SOURCEWATCH_* environment when v has AutomaticEnv with "." and "-"
// replaced by "_": nats.url is SOURCEWATCH_NATS_URL). Keys a graph entry
// leaves out take DefaultGraphConfig's values; keys present with a bad
// value are reported by Validate, naming the key.
func Load(v *viper.Viper) (Config, error) {
	for k, val := range scalarDefaults() {
		v.SetDefault(k, val)
	}
	// Checked before Unmarshal, whose own error for a bad duration names
	// neither the value nor the form wanted.
	if err := checkDurations(reflect.TypeOf(Config{}), "", v.Get); err != nil {
		return Config{}, err
	}
	if err := checkForwardParams(v.Get("graphs")); err != nil {
		return Config{}, err
	}
	var cfg Config
	// viper's default decode hooks turn "10s" into a time.Duration.
	if err := v.Unmarshal(&cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := UnknownKeys(v); err != nil {
		return Config{}, err
	}
	raw, _ := v.Get("graphs").([]any)
	for i := range cfg.Graphs {
		var keys map[string]any
		if i < len(raw) {
			keys, _ = raw[i].(map[string]any)
		}
		cfg.Graphs[i].fillDefaults(keys)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// UnknownKeys reports the first key of a config section (nats, http, ha,
// the graph entries, ...) that no field of Config reads: a misspelt key
// such as graphs[0].intervall or a dashed min-infected would otherwise be
// ignored without a word and its default used. Top-level scalar keys are
// not checked, since the command's flags share that namespace. Load calls
// it; a command that only borrows sections of a daemon config (alerts
// tail) can call it to warn.
func UnknownKeys(v *viper.Viper) error {
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("mapstructure")
		if key == "" {
			continue
		}
		if err := checkKeys(v.Get(key), f.Type, key); err != nil {
			return err
		}
	}
	return nil
}

// StartOnlyChanges lists the daemon-wide keys (every key outside graphs,
// by its dotted path: events.max_age, http.addr) whose values differ
// between running and file. They are read at start only, so a reload
// that finds them changed keeps the running values; the list says what a
// restart would change.
func StartOnlyChanges(running, file Config) []string {
	var out []string
	var walk func(prefix string, a, b reflect.Value)
	walk = func(prefix string, a, b reflect.Value) {
		for i := 0; i < a.NumField(); i++ {
			f := a.Type().Field(i)
			tag := f.Tag.Get("mapstructure")
			if tag == "" || prefix+tag == "graphs" {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(prefix+tag+".", a.Field(i), b.Field(i))
				continue
			}
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				out = append(out, prefix+tag)
			}
		}
	}
	walk("", reflect.ValueOf(running), reflect.ValueOf(file))
	return out
}

// Keys returns the top-level config keys the daemon reads (nats, graphs,
// data_dir, ...). A command checks a config file's top-level keys against
// them and its own flags, which share that namespace.
func Keys() []string {
	t := reflect.TypeOf(Config{})
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" {
			keys = append(keys, tag)
		}
	}
	return keys
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkDurations reports the first time.Duration field of struct type t
// whose value is not a duration, as "graphs[0].window: "60 seconds" is
// not a duration (want e.g. 90s, 5m, 1h)". get returns a field's raw value
// by its key relative to t (dotted for nested sections); name is t's own
// key path, "" at the top.
func checkDurations(t reflect.Type, name string, get func(key string) any) error {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("mapstructure")
		if key == "" {
			continue
		}
		path := key
		if name != "" {
			path = name + "." + key
		}
		switch {
		case f.Type == durationType:
			if err := checkDuration(path, get(key)); err != nil {
				return err
			}
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			if err := checkWhole(path, get(key)); err != nil {
				return err
			}
		case f.Type.Kind() == reflect.Bool:
			if err := checkBool(path, get(key)); err != nil {
				return err
			}
		case f.Type.Kind() == reflect.String:
			switch raw := get(key); raw.(type) {
			case []any, map[string]any:
				return keyError(path, "want a string, got %s", kindOf(raw))
			}
		case f.Type.Kind() == reflect.Struct:
			switch raw := get(key); raw.(type) {
			case nil, map[string]any:
			default:
				return keyError(path, "want a section of keys (%s), got %s", strings.Join(fieldKeys(f.Type), ", "), kindOf(raw))
			}
			sub := func(k string) any { return get(key + "." + k) }
			if err := checkDurations(f.Type, path, sub); err != nil {
				return err
			}
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			raw := get(key)
			items, ok := raw.([]any)
			if !ok && raw != nil {
				// The decoder would take a map for a list of one item.
				return keyError(path, "want a list of %s (each item - name: ...), got %s", key, kindOf(raw))
			}
			for j, item := range items {
				m, ok := item.(map[string]any)
				if !ok {
					return keyError(fmt.Sprintf("%s[%d]", path, j), "want a graph's keys (name, edges, bundle, ...), got %s", kindOf(item))
				}
				sub := func(k string) any { return lookup(m, k) }
				if err := checkDurations(f.Type.Elem(), fmt.Sprintf("%s[%d]", path, j), sub); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fieldKeys lists the keys of section type t, in their order.
func fieldKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// checkWhole refuses a number an integer key would take wrongly: Unmarshal
// truncates 1.5 to 1 and wraps 1e20 around to a negative value.
func checkWhole(key string, raw any) error {
	var x float64
	switch v := raw.(type) {
	case []any, map[string]any:
		return keyError(key, "want a whole number, got %s", kindOf(raw))
	case float64:
		x = v
	case float32:
		x = float64(v)
	case string:
		if _, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64); err == nil {
			return nil // as the decoder reads it: 42, 0x10, 1_000
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return keyError(key, "%q is not a whole number", v)
		}
		x = f
	default:
		return nil
	}
	switch {
	case x != math.Trunc(x):
		return keyError(key, "%v is not a whole number", raw)
	case math.Abs(x) >= 1<<62:
		return keyError(key, "%v is out of range", raw)
	}
	return nil
}

// checkBool refuses what Unmarshal's weak typing would read as a bool
// though nobody means one by it: "T", "f", 2 (and "yes", which it refuses
// itself without naming the key). A bool key turns a check off
// (allow_unverified) or HA on, so only true and false, in any case, and 1
// and 0, as environments often set flags, are taken, as strings too.
func checkBool(key string, raw any) error {
	switch v := raw.(type) {
	case nil, bool:
		return nil
	case int, int64, uint64, float64:
		if x := reflect.ValueOf(v).Convert(reflect.TypeOf(float64(0))).Float(); x == 0 || x == 1 {
			return nil
		}
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "false", "1", "0":
			return nil
		}
	}
	return keyError(key, "%v is not true or false", raw)
}

// durationSyntax is what time.ParseDuration reads, whatever the size: a
// string of it that does not parse is out of range.
var durationSyntax = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// checkForwardParams refuses a graph's forward_params that is not a map
// of plain values (a list or map given for a param), naming the key: the
// decode's own error has no place in the file.
func checkForwardParams(graphs any) error {
	list, _ := graphs.([]any)
	for i, item := range list {
		entry, _ := item.(map[string]any)
		for k, raw := range entry {
			if !strings.EqualFold(k, "forward_params") || raw == nil {
				continue
			}
			key := fmt.Sprintf("graphs[%d].%s", i, k)
			params, ok := raw.(map[string]any)
			if !ok {
				return keyError(key, "want a map of param names to values, got %s", kindOf(raw))
			}
			for name, val := range params {
				switch val.(type) {
				case string, bool, int, int64, uint64, float64:
				default:
					return keyError(key+"."+name, "want a plain value (a string, number or true/false), got %s", kindOf(val))
				}
			}
		}
	}
	return nil
}

// kindOf names what a YAML value is, for errors.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%v", v)
}

// checkDuration judges one duration value as Unmarshal would take it: a
// string time.ParseDuration accepts, or a zero. A bare number other than
// 0 is refused: it would be read as nanoseconds.
func checkDuration(key string, raw any) error {
	const want = "want e.g. 90s, 5m, 1h"
	switch x := raw.(type) {
	case nil, time.Duration:
		return nil
	case string:
		if _, err := time.ParseDuration(x); err != nil {
			if durationSyntax.MatchString(x) {
				return keyError(key, "%q is longer than a duration can be (at most %v, about 292 years)", x, time.Duration(math.MaxInt64))
			}
			return keyError(key, "%q is not a duration (%s)", x, want)
		}
		return nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		if reflect.ValueOf(x).IsZero() {
			return nil
		}
		return keyError(key, "%v is not a duration (%s; a number needs a unit)", x, want)
	default:
		return keyError(key, "%v is not a duration (%s)", x, want)
	}
}

// lookup returns the value at a dotted key in m, matching keys without
// regard to case as Unmarshal does.
func lookup(m map[string]any, key string) any {
	first, rest, nested := strings.Cut(key, ".")
	for k, val := range m {
		if !strings.EqualFold(k, first) {
			continue
		}
		if !nested {
			return val
		}
		sub, _ := val.(map[string]any)
		return lookup(sub, rest)
	}
	return nil
}

// checkKeys walks raw along t (structs and slices of them; maps and
// scalars are the field's own business).
func checkKeys(raw any, t reflect.Type, path string) error {
	switch {
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		items, _ := raw.([]any)
		for i, item := range items {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && t != durationType:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil // absent, or a value Unmarshal already judged
		}
		fields := make(map[string]reflect.Type, t.NumField())
		var known []string
		for i := 0; i < t.NumField(); i++ {
			if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" {
				fields[tag] = t.Field(i).Type
				known = append(known, tag)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[strings.ToLower(k)]
			if !ok {
				var e *KeyError
				if u := strings.ReplaceAll(strings.ToLower(k), "-", "_"); fields[u] != nil {
					e = keyError(path, "unknown key %q: config keys use underscores; did you mean %s?", k, u)
				} else if near := NearestKey(strings.ToLower(k), known); near != "" {
					e = keyError(path, "unknown key %q; did you mean %s? (known: %s)", k, near, strings.Join(known, ", "))
				} else {
					e = keyError(path, "unknown key %q (known: %s)", k, strings.Join(known, ", "))
				}
				e.at = path + "." + k
				return e
			}
			if err := checkKeys(m[k], ft, path+"."+strings.ToLower(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// NearestKey returns the one key of keys within two edits of k (one for
// a key of four letters or fewer, where two edits reach too many, and
// fewer than k has letters), or ""
// where none is, or more than one is as near: the key a misspelt one
// (cascdes, wrkers) was most likely meant as.
func NearestKey(k string, keys []string) string {
	limit := 2
	if len(k) <= 4 {
		limit = 1
	}
	best, bestD, ties := "", limit+1, 0
	for _, c := range keys {
		switch d := editDistance(k, c); {
		case d < bestD:
			best, bestD, ties = c, d, 0
		case d == bestD:
			ties++
		}
	}
	if ties > 0 || bestD > limit || bestD >= len(k) {
		// A guess that shares nothing with k (q for p) is no guess.
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes
// (config keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fillDefaults sets the keys absent from the raw map, so an explicit zero
// stays zero and Validate can reject it by name.
func (g *GraphConfig) fillDefaults(keys map[string]any) {
	d := DefaultGraphConfig(g.Name)
	has := func(k string) bool {
		for key := range keys {
			if strings.EqualFold(key, k) {
				return true
			}
		}
		return false
	}
	if !has("window") {
		g.Window = d.Window
	}
	if !has("interval") {
		g.Interval = d.Interval
	}
	if !has("min_changes") {
		g.MinChanges = d.MinChanges
	}
	if !has("min_infected") {
		g.MinInfected = d.MinInfected
	}
	if !has("restarts") {
		g.Restarts = d.Restarts
	}
}

var graphName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// MaxGraphName is the longest graph name: JetStream takes consumer names
// of at most 255 characters, and a graph's is "sourcewatch-" + its name.
const MaxGraphName = 255 - len("sourcewatch-")

// Validate reports the first problem found, naming its key as in
// "graphs[1].window: must be > 0". It checks a configuration as serve
// runs it, where every graph names its edge file and its bundle; New
// waives the edge file of a graph given WithGraphs, and the bundle when a
// custom localizer factory is set (the daemon itself reads neither).
func (c Config) Validate() error { return c.validate(nil, true) }

// validate is Validate with a graph's edges optional when given(name)
// and its bundle optional unless needBundle.
func (c Config) validate(given func(graph string) bool, needBundle bool) error {
	bad := func(key, format string, args ...any) error { return keyError(key, format, args...) }
	if c.NATS.URL == "" {
		if _, err := parseListen(c.NATS.Listen); err != nil {
			return bad("nats.listen", "%v", err)
		}
	}
	if (c.NATS.TLS.Cert == "") != (c.NATS.TLS.Key == "") {
		return bad("nats.tls", "cert and key go together")
	}
	if c.NATS.Password != "" && c.NATS.User == "" {
		return bad("nats.password", "set without nats.user")
	}
	if alerts.CheckPrefix(c.Subjects.Prefix) != nil {
		return bad("subjects.prefix", "want a subject prefix such as %q, got %q", DefaultPrefix, c.Subjects.Prefix)
	}
	if c.Workers <= 0 {
		return bad("workers", "must be > 0, got %d", c.Workers)
	}
	if c.Workers > MaxWorkers {
		// Each is a goroutine and a graph has at most one job at a time, so
		// past the graph count more do nothing; a typo of a few zeros would
		// otherwise start millions.
		return bad("workers", "at most %d (more than the graphs do nothing: a graph runs one inference at a time), got %d", MaxWorkers, c.Workers)
	}
	if c.HTTP.Addr != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
			return bad("http.addr", "%v", err)
		}
	}
	if c.DataDir == "" {
		return bad("data_dir", "must be set")
	}
	if c.SnapshotInterval < MinInterval {
		return bad("snapshot_interval", "must be >= %v, got %v", MinInterval, c.SnapshotInterval)
	}
	if c.MaxEventBytes <= 0 {
		return bad("max_event_bytes", "must be > 0, got %d", c.MaxEventBytes)
	}
	if c.MaxFutureSkew < 0 || c.MaxFutureSkew > MaxFutureSkewLimit {
		// Past the limit an event time far enough ahead to pass would wrap
		// around the years UnixNano holds, and be read as long past.
		return bad("max_future_skew", "must be in 0..%v (a year), got %v", MaxFutureSkewLimit, c.MaxFutureSkew)
	}
	if c.Events.MaxAge > 0 && c.Events.MaxAge < duplicateWindow {
		return bad("events.max_age", "%v is shorter than the %v duplicate window", c.Events.MaxAge, duplicateWindow)
	}
	if c.Events.MaxAge > 0 && c.Events.MaxAge < c.SnapshotInterval {
		return bad("events.max_age", "%v is shorter than snapshot_interval %v: a restart could not replay", c.Events.MaxAge, c.SnapshotInterval)
	}
	if c.Alerts.MaxBytes > 0 && c.Alerts.MaxBytes < MinAlertsMaxBytes {
		return bad("alerts.max_bytes", "%d is below %d (1 MiB): the stream could refuse an alert of NATS's default max_payload; use 0 for no cap", c.Alerts.MaxBytes, MinAlertsMaxBytes)
	}
	// JetStream refuses a max_age under 100 ms only at start, in its own
	// terms.
	for key, age := range map[string]time.Duration{"alerts.max_age": c.Alerts.MaxAge, "deadletter.max_age": c.DeadLetters.MaxAge} {
		if age > 0 && age < time.Second {
			return bad(key, "%v: want 0 (no limit) or at least 1s", age)
		}
	}
	if c.DeadLetters.MaxBytes > 0 && c.DeadLetters.MaxBytes < MinAlertsMaxBytes {
		return bad("deadletter.max_bytes", "%d is below %d (1 MiB): the stream could refuse a dead letter of NATS's default max_payload; use 0 for no cap", c.DeadLetters.MaxBytes, MinAlertsMaxBytes)
	}
	if c.HA.Enabled && c.NATS.URL == "" {
		return bad("ha.enabled", "replicas must share a NATS server or cluster: set nats.url")
	}
	if c.HA.Enabled && c.HA.LeaseTTL < time.Second {
		return bad("ha.lease_ttl", "must be >= 1s, got %v", c.HA.LeaseTTL)
	}
	if c.Events.Replicas < 0 || c.Events.Replicas > 5 {
		return bad("events.replicas", "must be in 0..5, got %d", c.Events.Replicas)
	}
	if len(c.Graphs) == 0 {
		return bad("graphs", "at least one graph is needed")
	}
	seen := map[string]int{}
	for i, g := range c.Graphs {
		key := func(k string) string { return fmt.Sprintf("graphs[%d].%s", i, k) }
		switch {
		case g.Name == "":
			return bad(key("name"), "must be set")
		case !graphName.MatchString(g.Name):
			return bad(key("name"), "%q: want letters, digits, '_' or '-' (it is a subject token)", g.Name)
		case len(g.Name) > MaxGraphName:
			// Refused here rather than by the server at start, after NATS is up.
			return bad(key("name"), "%d characters: at most %d (its consumer, %s, takes a name of at most 255)", len(g.Name), MaxGraphName, consumerName("<name>"))
		case consumerName(g.Name) == unroutedConsumer:
			// Its consumer would be the catch-all one, which startUnrouted
			// would then reconfigure to headers only on every subject.
			return bad(key("name"), "%q is reserved: its consumer name %s is the one for events on unconfigured subjects", g.Name, unroutedConsumer)
		}
		if j, dup := seen[g.Name]; dup {
			return bad(key("name"), "%q already used by graphs[%d]", g.Name, j)
		}
		seen[g.Name] = i
		if g.Edges == "" && (given == nil || !given(g.Name)) {
			return bad(key("edges"), "must be set")
		}
		if g.Bundle == "" && needBundle {
			return bad(key("bundle"), "must be set")
		}
		if g.ForwardChecksum != "" {
			if len(g.ForwardChecksum) != 64 || strings.Trim(strings.ToLower(g.ForwardChecksum), "0123456789abcdef") != "" {
				return bad(key("forward_checksum"), "want 64 hex digits (SHA-256)")
			}
		}
		if g.CallTimeout < 0 {
			return bad(key("call_timeout"), "must be >= 0 (0: the default, 10s plus 1µs per row × (nodes + arcs)), got %v", g.CallTimeout)
		}
		if g.Window <= 0 {
			return bad(key("window"), "must be > 0, got %v", g.Window)
		}
		if g.Decay < 0 {
			return bad(key("decay"), "must be >= 0, got %v", g.Decay)
		}
		if g.Interval < MinInterval {
			return bad(key("interval"), "must be >= %v, got %v (1m is a minute, 1ms a millisecond)", MinInterval, g.Interval)
		}
		if g.MinChanges < 0 {
			return bad(key("min_changes"), "must be >= 0, got %d", g.MinChanges)
		}
		if g.MinInfected < 1 {
			return bad(key("min_infected"), "must be >= 1, got %d", g.MinInfected)
		}
		if g.Restarts < 0 {
			return bad(key("restarts"), "must be >= 0, got %d", g.Restarts)
		}
	}
	return nil
}

// listenAddr is a parsed nats.listen: off means no listener.
type listenAddr struct {
	host string
	port int
	off  bool
}

func parseListen(s string) (listenAddr, error) {
	if s == "" {
		s = DefaultListen
	}
	if s == "-1" {
		return listenAddr{off: true}, nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return listenAddr{}, fmt.Errorf("want host:port or -1, got %q", s)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return listenAddr{}, fmt.Errorf("bad port in %q", s)
	}
	if port == -1 {
		return listenAddr{off: true}, nil
	}
	return listenAddr{host: host, port: port}, nil
}

// relativePathHint is what to add to err, a failure to open path, when
// path is relative and does not exist: where it was looked for, since a
// daemon started by a service manager runs elsewhere than the shell that
// wrote its config.
func relativePathHint(path string, err error) string {
	if filepath.IsAbs(path) || !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	wd, werr := os.Getwd()
	if werr != nil {
		return ""
	}
	return fmt.Sprintf(" (a relative path is read from the working directory, %s; use an absolute path or start the daemon there)", wd)
}

// MissingFiles returns an error for each graph's edge list or bundle that
// cannot be opened, keyed graphs[i].edges or graphs[i].bundle, so the
// reader of the config file can add the line that names it
// (LocateKeyError) before the start or a reload gets to the file. A file
// that opens but holds something wrong is the start's to refuse.
func (c Config) MissingFiles() []*KeyError {
	var errs []*KeyError
	check := func(key, path string) {
		if path == "" {
			return
		}
		f, err := os.Open(path)
		if err != nil {
			e := keyError(key, "%v%s", err, relativePathHint(path, err))
			e.cause = err
			errs = append(errs, e)
			return
		}
		f.Close()
	}
	for i, g := range c.Graphs {
		check(fmt.Sprintf("graphs[%d].edges", i), g.Edges)
		check(fmt.Sprintf("graphs[%d].bundle", i), g.Bundle)
	}
	return errs
}
