package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// app is what every command shares: its own viper (never the global one),
// the logger, and where output goes.
type app struct {
	v        *viper.Viper
	log      *zap.Logger
	stdout   io.Writer
	stderr   io.Writer
	terminal bool // stderr is a terminal: show progress bars, console logs
	// flags are the command's flags by config key, for settingLayer.
	flags map[string]*pflag.Flag
	// logLevel and logFormat are the logger's settings as setup read
	// them: a reload does not rebuild the logger.
	logLevel, logFormat string
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{v: viper.New(), stdout: stdout, stderr: stderr, log: zap.NewNop()}
	if f, ok := stderr.(*os.File); ok {
		a.terminal = term.IsTerminal(int(f.Fd()))
	}
	return a.rootCmd()
}

// rootCmd is the sourcewatch command with its subcommands, run by a.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "sourcewatch",
		Short:         "Find where a spread started: SL-VAE source localization on live NATS event streams",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.setup(cmd)
		},
		PersistentPostRun: func(*cobra.Command, []string) { _ = a.log.Sync() },
	}
	root.SetOut(a.stdout) // help and usage go where the command's output goes
	root.SetErr(a.stderr)
	// What an operator checks before an upgrade: which bundle formats this
	// build reads, and which plugins it can talk to.
	root.Version = monitor.Version
	built := ""
	if commit != "" {
		built = "commit " + commit + "; "
	}
	root.SetVersionTemplate(fmt.Sprintf("sourcewatch {{.Version}} (%s%s; bundle format %d, reads %d-%d; forward plugin protocol %d; alert schema %s)\n",
		built, runtime.Version(), localize.FormatVersion, localize.MinFormatVersion, localize.FormatVersion, forward.ProtocolVersion, alerts.Schema))
	root.PersistentFlags().String("config", "", "config file (YAML); flags > SOURCEWATCH_* env > config file > defaults")
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().String("log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), console, json")
	root.AddCommand(
		newSimulateCmd(a),
		newEvalCmd(a),
		newTrainCmd(a),
		newLocalizeCmd(a),
		newBundleCmd(a),
		newServeCmd(a),
		newPluginCmd(a),
		newAlertsCmd(a),
		newDemoCmd(a),
	)
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			failOnUnknownSubcommand(c)
		}
	}
	return root
}

// failOnUnknownSubcommand makes a group of commands (bundle, plugin,
// alerts) refuse an unknown subcommand: cobra would print the group's help
// and exit 0, so `sourcewatch bundle inspct x.swb || retrain` would skip
// the retrain.
func failOnUnknownSubcommand(group *cobra.Command) {
	group.SuggestionsMinimumDistance = 2
	group.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		} else {
			names := []string{}
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			msg += " (commands: " + strings.Join(names, ", ") + ")"
		}
		return errors.New(msg)
	}
	group.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}

// setup binds the command's flags into viper, reads the config file and
// SOURCEWATCH_* environment, and builds the logger. Nested config keys use
// dots in the file and underscores in the environment: nats.url is
// SOURCEWATCH_NATS_URL; flag names use dashes and map to the same key with
// underscores (--log-level is log_level, SOURCEWATCH_LOG_LEVEL).
func (a *app) setup(cmd *cobra.Command) error {
	v := a.v
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	var bindErr error
	a.flags = map[string]*pflag.Flag{}
	bind := func(f *pflag.Flag) {
		a.flags[flagKey(f.Name)] = f
		if err := v.BindPFlag(flagKey(f.Name), f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return bindErr
	}
	if path := v.GetString("config"); path != "" {
		if err := readConfigFile(v, path); err != nil {
			return err
		}
	}
	level, format, err := a.logSettings()
	if err != nil {
		return err
	}
	log, err := newLogger(a.stderr, level, format, a.terminal)
	if err != nil {
		return err
	}
	a.log, a.logLevel, a.logFormat = log, level, format
	checkEnvironment(cmd.Root(), os.Environ(), log)
	if err := checkFlagKeys(cmd, v, log); err != nil {
		return err
	}
	return a.checkValueTypes(cmd)
}

// checkValueTypes refuses a value from SOURCEWATCH_* or the config file
// that the flag it stands for would refuse on the command line: viper
// reads "abc" as the number 0, 2.7 as 2 and "maybe" as false, so
// SOURCEWATCH_SEED=abc or seed: abc ran on seed 0 without a word, and
// beta: high failed as "--beta: 0 is not a probability". The daemon's
// commands read their config through monitor's own checks and are left
// to them.
func (a *app) checkValueTypes(cmd *cobra.Command) error {
	if daemonConfigCommands[cmd.Name()] {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(a.flags)) {
		f := a.flags[key]
		if f.Changed || !a.v.IsSet(key) {
			continue
		}
		raw := a.v.Get(key)
		if _, list := raw.([]any); list {
			continue // refused or read as a list by checkFlagKeys
		}
		if _, section := raw.(map[string]any); section {
			continue
		}
		text := fmt.Sprint(raw)
		var err error
		switch f.Value.Type() {
		case "int", "int64":
			_, err = strconv.ParseInt(text, 0, 64)
		case "uint64":
			_, err = strconv.ParseUint(text, 0, 64)
		case "float64":
			_, err = strconv.ParseFloat(text, 64)
		case "bool":
			_, err = strconv.ParseBool(text)
		default:
			continue // strings, durations and the commands' own types check themselves
		}
		if err == nil {
			continue
		}
		from := fmt.Sprintf("config file %s: key %q", a.v.ConfigFileUsed(), key)
		env := envPrefix + "_" + strings.ToUpper(key)
		if _, ok := os.LookupEnv(env); ok {
			from = env
		}
		want := map[string]string{"int": "a whole number", "int64": "a whole number", "uint64": "a whole number >= 0", "float64": "a number", "bool": "true or false"}[f.Value.Type()]
		return fmt.Errorf("%s: %q is not %s, as --%s wants (%s)", from, text, want, f.Name, f.Usage)
	}
	return nil
}

// refuseInputAsOutput returns an error when out, the value of flag, is a
// file the command reads (the graph, the recorded cascades, the config
// file): writing it would destroy it, an edge list turned into a bundle.
func (a *app) refuseInputAsOutput(flag, out string) error {
	if out == "" || out == "-" {
		return nil
	}
	oi, err := os.Stat(out)
	if err != nil {
		return nil // not there yet: nothing to destroy
	}
	for _, in := range []struct{ what, path string }{
		{"--graph", a.v.GetString("graph")},
		{"the recorded cascades", recordedFile(a.v)},
		{"--config", a.v.ConfigFileUsed()},
	} {
		if in.path == "" {
			continue
		}
		if ii, err := os.Stat(in.path); err == nil && os.SameFile(oi, ii) {
			return fmt.Errorf("%s %s: that is %s, which this command reads; writing it would destroy it", flag, out, in.what)
		}
	}
	return nil
}

// Where a setting comes from, in viper's order of precedence.
const (
	fromDefault = iota
	fromConfigFile
	fromEnvironment
	fromFlag
)

// settingLayer returns where the value of key comes from, for two
// settings that say the same thing two ways (--sources, --source-ratio):
// the one given at the stronger layer wins, and two given at the same
// layer are a conflict.
func (a *app) settingLayer(key string) int {
	switch {
	case a.flags[key] != nil && a.flags[key].Changed:
		return fromFlag
	case os.Getenv(envPrefix+"_"+strings.ToUpper(key)) != "":
		return fromEnvironment
	case a.v.InConfig(key):
		return fromConfigFile
	}
	return fromDefault
}

// daemonConfigCommands read a daemon config file (configs/sourcewatch.yaml):
// serve and demo check its keys themselves (loadDaemonConfig); alerts tail
// reads its nats and subjects sections, so only a dashed spelling of one
// of its own flags is refused there; the daemon's keys pass silently, and
// a key neither reads, or a misspelt one inside a section, is warned of.
// envPrefix starts the environment variable of every config key.
const envPrefix = "SOURCEWATCH"

var daemonConfigCommands = map[string]bool{"serve": true, "demo": true}

// sharesDaemonConfig are the commands that read a daemon config besides
// their own flags.
var sharesDaemonConfig = map[string]bool{"tail": true}

// checkFlagKeys checks the config file of a command that reads only its
// flags from it (simulate, train, eval, ...), since viper would ignore a
// wrong key and run with the default: a key spelt with dashes
// (source-ratio for source_ratio) is an error naming the key meant, as are
// the flag-only keys (config, help) and a section where the flag takes one
// value (serve's nats: read as simulate's --nats URL); any other key the
// command does not read is named in one warning (a file may be shared by
// several commands).
func checkFlagKeys(cmd *cobra.Command, v *viper.Viper, log *zap.Logger) error {
	if daemonConfigCommands[cmd.Name()] {
		return nil
	}
	fv, err := configFile(v)
	if fv == nil || err != nil {
		return err
	}
	known := map[string]*pflag.Flag{}
	add := func(f *pflag.Flag) { known[flagKey(f.Name)] = f }
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	file := fv.ConfigFileUsed()
	shares := sharesDaemonConfig[cmd.Name()]
	daemonKeys := map[string]bool{}
	if shares {
		for _, k := range monitor.Keys() {
			daemonKeys[k] = true
		}
		// A misspelt key inside a section it reads (subjects.prefx) would
		// leave the command on the default, as a misspelt top-level key.
		if err := monitor.UnknownKeys(fv); err != nil {
			err = monitor.LocateKeyError(err, file, "")
			log.Warn("a key of the daemon config is not read (misspelt?)", zap.String("config", file), zap.Error(err))
		}
	}
	var ignored []string
	for _, k := range topLevelKeys(fv) {
		f := known[k]
		_, section := fv.Get(k).(map[string]any)
		_, list := fv.Get(k).([]any)
		switch {
		case k != flagKey(k) && known[flagKey(k)] != nil:
			return fmt.Errorf("%s: key %q: config keys use underscores; did you mean %s?", file, k, flagKey(k))
		case shares && (daemonKeys[k] || f != nil):
			// a daemon key, or one of its own: read as the command reads it
		case flagOnlyKeys[k] != "":
			return fmt.Errorf("%s: key %q: %s", file, k, flagOnlyKeys[k])
		case f != nil && section && f.Value.Type() != "stringArray" && f.Value.Type() != "stringSlice":
			return fmt.Errorf("%s: key %q is a section, but %s reads it as --%s, a %s (%s)",
				file, k, cmd.CommandPath(), f.Name, f.Value.Type(), f.Usage)
		case f != nil && list && f.Value.Type() != "stringArray" && f.Value.Type() != "stringSlice":
			// Read as one value, a YAML list is "" or 0: sources: [2] ran
			// on the default source ratio, seed: [5] on seed 0.
			return fmt.Errorf("%s: key %q is a list, but %s reads it as --%s, one %s (%s): give it one value",
				file, k, cmd.CommandPath(), f.Name, f.Value.Type(), f.Usage)
		case f == nil:
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		fields := []zap.Field{zap.String("config", file), zap.Strings("keys", ignored)}
		// A key one edit or two from one the command reads is most
		// likely that key misspelt, which leaves the command on its
		// default; the others may belong to another command sharing the
		// file.
		var own []string
		for k := range known {
			own = append(own, k)
		}
		var meant []string
		for _, k := range ignored {
			if near := monitor.NearestKey(k, own); near != "" {
				meant = append(meant, k+" -> "+near)
			}
		}
		if len(meant) > 0 {
			fields = append(fields, zap.Strings("did_you_mean", meant))
		}
		log.Warn("config keys that "+cmd.CommandPath()+" does not read are ignored", fields...)
	}
	return nil
}

// logSettings returns log_level and log_format as the flags, environment
// and config file set them, or the error of a bad one, naming where it was
// set.
func (a *app) logSettings() (level, format string, err error) {
	for _, key := range []string{"log_level", "log_format"} {
		// GetString reads a list or a map as "", the default, without a
		// word.
		switch a.v.Get(key).(type) {
		case []any:
			return "", "", a.settingError(key, "want a string, got a list")
		case map[string]any:
			return "", "", a.settingError(key, "want a string, got a map")
		}
	}
	level, format = a.v.GetString("log_level"), a.v.GetString("log_format")
	if _, err := newLogger(io.Discard, level, format, a.terminal); err != nil {
		var se *settingErr
		if errors.As(err, &se) {
			return "", "", a.settingError(se.key, se.msg)
		}
		return "", "", err
	}
	return level, format, nil
}

// settingErr is a bad value of a setting read before the logger exists
// (log_level, log_format), which setup places where it was set.
type settingErr struct{ key, msg string }

func (e *settingErr) Error() string { return e.key + ": " + e.msg }

// settingError is msg about key's value, naming where that value came
// from as the daemon's config errors do: the flag, the SOURCEWATCH_*
// variable, or the config file and line.
func (a *app) settingError(key, msg string) error {
	if f := a.flags[key]; f != nil && f.Changed {
		return fmt.Errorf("--%s: %s", f.Name, msg)
	}
	if name := envPrefix + "_" + strings.ToUpper(key); os.Getenv(name) != "" {
		return &monitor.KeyError{Key: key, Msg: msg, File: "$" + name}
	}
	if file := a.v.ConfigFileUsed(); file != "" && a.v.InConfig(key) {
		return monitor.LocateKeyError(&monitor.KeyError{Key: key, Msg: msg}, file, "")
	}
	return &settingErr{key: key, msg: msg}
}

func newLogger(w io.Writer, level, format string, terminal bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, &settingErr{key: "log_level", msg: fmt.Sprintf("unrecognized level %q (want debug, info, warn or error)", level)}
	}
	var enc zapcore.Encoder
	switch format {
	case "auto", "":
		if terminal {
			format = "console"
		} else {
			format = "json"
		}
	}
	switch format {
	case "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		if !terminal {
			cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(cfg)
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	default:
		return nil, &settingErr{key: "log_format", msg: `want auto, console or json, got "` + format + `"`}
	}
	// Locked: the daemon logs from many goroutines, and a writer that is
	// not a file (a test's buffer, a pipe wrapper) is not safe for that.
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// stringMap reads a repeatable name=value flag (a StringArray) from viper
// like every other flag: the flag when given, else SOURCEWATCH_<KEY> as
// "name=value,name2=value2" (a value may hold commas, see
// joinCommaValues), else the config file's map of the key (dashes
// as underscores), else the flag's default.
func stringMap(v *viper.Viper, flag string) (map[string]string, error) {
	key := strings.ReplaceAll(flag, "-", "_")
	out := map[string]string{}
	// pairs reads "name=value[,name=value...]" strings: the flag, given
	// any number of times, or the environment.
	pairs := func(list []string) error {
		for _, raw := range list {
			s := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(raw), "["), "]")
			for _, kv := range joinCommaValues(strings.Split(s, ",")) {
				if strings.TrimSpace(kv) == "" {
					continue
				}
				k, val, ok := strings.Cut(kv, "=")
				k = strings.TrimSpace(k)
				if !ok || k == "" {
					return fmt.Errorf("--%s: want name=value[,name=value...], got %q", flag, raw)
				}
				if _, dup := out[k]; dup {
					// The last would win without a word, hiding the other.
					return fmt.Errorf("--%s: %s given twice", flag, k)
				}
				out[k] = strings.TrimSpace(val)
			}
		}
		return nil
	}
	switch raw := v.Get(key).(type) {
	case nil:
	case map[string]any:
		for k, val := range raw {
			out[k] = fmt.Sprint(val)
		}
	case map[string]string:
		maps.Copy(out, raw)
	case []string:
		if err := pairs(raw); err != nil {
			return nil, err
		}
	case []any:
		list := make([]string, len(raw))
		for i, e := range raw {
			list[i] = fmt.Sprint(e)
		}
		if err := pairs(list); err != nil {
			return nil, err
		}
	case string:
		if err := pairs([]string{raw}); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%s: want a map of name: value, got %T", key, raw)
	}
	for k, val := range out {
		if val == "" {
			// Plugins differ on what an empty value means; leaving the
			// key out means the plugin's default for all of them.
			return nil, fmt.Errorf("--%s: %s has an empty value (leave it out for the plugin's default)", flag, k)
		}
	}
	return out, nil
}

// joinCommaValues joins each piece of a list split at commas that holds
// no "=" to the piece before it, so "layers=64,32,steps=3" is the two
// pairs layers=64,32 and steps=3: a plugin's list-valued param can be
// given on one flag. A value cannot hold a comma followed by "name=";
// a leading piece with no "=" stays on its own, for the caller's error.
func joinCommaValues(pieces []string) []string {
	out := make([]string, 0, len(pieces))
	for _, p := range pieces {
		if n := len(out); n > 0 && !strings.Contains(p, "=") && strings.TrimSpace(p) != "" && strings.Contains(out[n-1], "=") {
			out[n-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}

// configFile reads v's config file on its own, without the environment
// and flags viper layers over it (nil when there is no file): what the
// file itself says, for checks of its keys and for sections a flag
// shadows in v.
// topLevelKeys returns the file's top-level keys, sorted, including those
// with no value (`source-ratio:`), which AllSettings leaves out: an
// empty dashed key is as much a misspelling as a full one.
func topLevelKeys(fv *viper.Viper) []string {
	keys := map[string]bool{}
	for _, k := range fv.AllKeys() {
		top, _, _ := strings.Cut(k, ".")
		keys[top] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

func configFile(v *viper.Viper) (*viper.Viper, error) {
	path := v.ConfigFileUsed()
	if path == "" {
		return nil, nil
	}
	fv := viper.New()
	if err := readConfigFile(fv, path); err != nil {
		return nil, err
	}
	return fv, nil
}

// maxConfigBytes bounds a config file: a daemon's is a few kilobytes.
const maxConfigBytes = 16 << 20

// readConfigFile reads the config file at path into v. It must be a
// regular file of at most maxConfigBytes: a path to /dev/zero or a FIFO
// would otherwise be read forever, before the signal handling that could
// stop it. A name without an extension viper knows (sourcewatch.conf, or
// none) is read as YAML, the format of configs/sourcewatch.yaml.
func readConfigFile(v *viper.Viper, path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("reading config %q: %w", path, err)
	case !fi.Mode().IsRegular():
		what := "not a regular file"
		switch t := fi.Mode().Type(); {
		case t&os.ModeDir != 0:
			what = "a directory"
		case t&os.ModeNamedPipe != 0:
			what = "a named pipe"
		case t&os.ModeDevice != 0:
			what = "a device"
		case t&os.ModeSocket != 0:
			what = "a socket"
		}
		return fmt.Errorf("reading config %q: %s, not a config file", path, what)
	case fi.Size() > maxConfigBytes:
		return fmt.Errorf("reading config %q: %d bytes, more than a config file holds (at most %d)", path, fi.Size(), maxConfigBytes)
	}
	v.SetConfigFile(path)
	if ext := strings.TrimPrefix(filepath.Ext(path), "."); !slices.Contains(viper.SupportedExts, ext) {
		v.SetConfigType("yaml")
	}
	if err := v.ReadInConfig(); err != nil {
		var parse viper.ConfigParseError
		if errors.As(err, &parse) && parse.Unwrap() != nil {
			// viper's own text ("While parsing config: yaml: ...") would
			// say "reading config" twice over.
			perr := parse.Unwrap()
			if strings.Contains(perr.Error(), "unknown anchor") {
				// yaml quotes the alias's name: an unquoted value starting
				// with *, as a password may, would be printed.
				return fmt.Errorf("parsing config %q: yaml: an unquoted value starts with * (a YAML alias) and names no anchor: put it in quotes (the value is left out of this message: it may be a password)", path)
			}
			return fmt.Errorf("parsing config %q: %w", path, perr)
		}
		return fmt.Errorf("reading config %q: %w", path, err)
	}
	return nil
}

// envReplacesSection refuses a SOURCEWATCH_* variable in environ that
// names a config section (SOURCEWATCH_NATS, SOURCEWATCH_HTTP): viper reads
// it as the section's whole value, a string in place of the file's keys,
// so the file's nats.url gave way to the embedded server's defaults.
func envReplacesSection(environ []string) error {
	for _, key := range monitor.SectionKeys() {
		env := envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
		for _, kv := range environ {
			k, val, _ := strings.Cut(kv, "=")
			if val == "" {
				continue // viper reads an empty variable as unset
			}
			if k == env && key == "graphs" {
				return fmt.Errorf("%w: environment variable %s would replace the graphs list, which comes from the config file only: unset it", monitor.ErrConfig, env)
			} else if k == env {
				also := ""
				if key == "nats" {
					also = " (it is also the --nats flag of simulate and alerts, which serve does not have)"
				}
				return fmt.Errorf("%w: environment variable %s names the config section %s, not a key%s: it would replace the whole section; set its keys one by one (%s_<KEY>, such as %s) or unset it",
					monitor.ErrConfig, env, key, also, env, exampleKeyEnv(key))
			}
		}
	}
	return nil
}

// exampleKeyEnv is the variable of one key of section, for the advice.
func exampleKeyEnv(section string) string {
	for _, k := range monitor.ScalarKeys() {
		if strings.HasPrefix(k, section+".") {
			return envPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(k))
		}
	}
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(section, ".", "_")) + "_<KEY>"
}

// checkEnvironment warns of each SOURCEWATCH_* variable in environ that no
// setting reads: viper looks up only the names of keys it knows, so a
// misspelt SOURCEWATCH_NATS_LISTN, or SOURCEWATCH_GRAPHS_0_WINDOW (the
// graphs list comes from the file only), would be ignored without a word.
// A variable is known when it names a flag of any command, a daemon config
// key, or the plugin handshake's own variables: one environment often
// serves several commands.
func checkEnvironment(root *cobra.Command, environ []string, log *zap.Logger) {
	known := map[string]bool{
		forward.Handshake.MagicCookieKey: true,
		forward.SharedMemoryEnv:          true,
	}
	name := func(key string) string {
		return envPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
	}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { known[name(flagKey(f.Name))] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
	for _, k := range monitor.ScalarKeys() {
		known[name(k)] = true
	}
	sections := map[string]string{}
	for _, key := range monitor.SectionKeys() {
		sections[name(key)] = key
	}
	for _, kv := range environ {
		k, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, envPrefix+"_") || known[k] {
			continue
		}
		if key, ok := sections[k]; ok {
			if val == "" {
				continue // unset, as viper reads it
			}
			log.Warn("environment variable names a config section, not a key: serve refuses it (it would replace the whole section)",
				zap.String("variable", k), zap.String("section", key))
			continue
		}
		if k == name("graphs") || strings.HasPrefix(k, name("graphs")+"_") {
			log.Warn("environment variable ignored: the graphs list comes from the config file only", zap.String("variable", k))
			continue
		}
		log.Warn("environment variable ignored: it names no config key or flag (misspelt?)", zap.String("variable", k))
	}
}
