package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// KeyError is a configuration error at one key. It wraps ErrConfig. Load
// and Validate know the key but not where it was written; LocateKeyError
// adds the file and line, which only the reader of the file knows.
type KeyError struct {
	// Key is the key as the message names it: graphs[1].window.
	Key string
	// Msg says what is wrong with it.
	Msg string
	// File and Line say where the key was written, when known.
	File string
	Line int
	// at is the key whose line locates the error where that is not Key:
	// an unknown key is named by its section, and found by itself.
	at string
	// cause is the error under Msg, where there is one (a file that
	// would not open), so errors.Is finds it as well as ErrConfig.
	cause error
}

func keyError(key, format string, args ...any) *KeyError {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// TopLevelKeyError is the error of a top-level key of a config file that
// nothing reads, whose message names it (a command checks those, since
// its flags share the namespace); LocateKeyError finds it by key.
func TopLevelKeyError(key, msg string) *KeyError { return &KeyError{Msg: msg, at: key} }

func (e *KeyError) Error() string {
	var b strings.Builder
	b.WriteString(ErrConfig.Error())
	b.WriteString(": ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrConfig) hold, and errors.Is of the
// cause under the message where there is one (fs.ErrNotExist).
func (e *KeyError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrConfig, e.cause}
	}
	return []error{ErrConfig}
}

// LocateKeyError returns err with the file and line of its key added
// when err holds a KeyError: file is the config file read (a YAML file
// gets the line of the key; another format, its name only). A key set by
// the environment variable envPrefix_KEY (dots as underscores) is named
// as that variable's, not the file's, since its value came from there.
// Any other error, or one whose file cannot be read, is returned as is.
func LocateKeyError(err error, file, envPrefix string) error {
	var ke *KeyError
	if file == "" || !errors.As(err, &ke) {
		return err
	}
	located := *ke
	at := located.at
	if at == "" {
		at = located.Key
	}
	if envPrefix != "" && !strings.Contains(at, "[") {
		name := envPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(at))
		if _, set := os.LookupEnv(name); set {
			located.File = "$" + name
			return &located
		}
	}
	located.File = file
	switch strings.ToLower(filepath.Ext(file)) {
	case ".yaml", ".yml":
		if data, rerr := os.ReadFile(file); rerr == nil {
			located.Line = yamlKeyLine(data, at)
		}
	}
	return &located
}

// yamlKeyLine is the line of the key at path (dotted, with [i] for a
// sequence item, matched without regard to case as viper reads keys) in
// the YAML document data; the line of the deepest part found when the
// key is absent (a section whose value is wrong), 0 when none is.
func yamlKeyLine(data []byte, path string) int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	node, line := doc.Content[0], 0
	for _, part := range strings.Split(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[i+1 : len(part)-1])
			if err != nil {
				return line
			}
			name, index = part[:i], n
		}
		if node.Kind != yaml.MappingNode {
			return line
		}
		var value *yaml.Node
		for k := 0; k+1 < len(node.Content); k += 2 {
			if strings.EqualFold(node.Content[k].Value, name) {
				line, value = node.Content[k].Line, node.Content[k+1]
				break
			}
		}
		if value == nil {
			return line
		}
		node = value
		if index >= 0 {
			if node.Kind != yaml.SequenceNode || index >= len(node.Content) {
				return line
			}
			node = node.Content[index]
			line = node.Line
		}
	}
	return line
}
