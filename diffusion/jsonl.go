package diffusion

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sourcewatch/sourcewatch/graph"
)

// WriteJSONL writes one JSON object per cascade, naming nodes by g's ids:
//
//	{"sources":["3","17"],"infected":["3","5","17"],"times":{"3":0,"17":0,"5":2}}
//
// times maps every node infected by the snapshot (recovered ones included)
// to its infection step; for SIR a "recovered" object maps recovered nodes
// to their recovery step. Nodes appear in index order.
func WriteJSONL(w io.Writer, g *graph.Graph, cs []Cascade) error {
	n := g.N()
	enc := make([][]byte, n) // JSON-quoted ids, built on first use
	quote := func(v int) ([]byte, error) {
		if v < 0 || v >= n {
			return nil, fmt.Errorf("node index %d out of range for %d nodes", v, n)
		}
		if enc[v] == nil {
			b, err := json.Marshal(g.ID(v))
			if err != nil {
				return nil, err
			}
			enc[v] = b
		}
		return enc[v], nil
	}
	bw := bufio.NewWriter(w)
	var line []byte
	list := func(key string, idx []int) error {
		line = append(line, '"')
		line = append(line, key...)
		line = append(line, `":[`...)
		for k, v := range idx {
			if k > 0 {
				line = append(line, ',')
			}
			q, err := quote(v)
			if err != nil {
				return err
			}
			line = append(line, q...)
		}
		line = append(line, ']')
		return nil
	}
	steps := func(key string, at []int) error {
		if len(at) != n {
			return fmt.Errorf("%s has %d entries for %d nodes", key, len(at), n)
		}
		line = append(line, `,"`...)
		line = append(line, key...)
		line = append(line, `":{`...)
		first := true
		for v, t := range at {
			if t < 0 {
				continue
			}
			if !first {
				line = append(line, ',')
			}
			first = false
			q, _ := quote(v)
			line = append(line, q...)
			line = append(line, ':')
			line = strconv.AppendInt(line, int64(t), 10)
		}
		line = append(line, '}')
		return nil
	}
	for i, c := range cs {
		line = append(line[:0], '{')
		err := list("sources", c.Sources)
		if err == nil {
			line = append(line, ',')
			err = list("infected", c.Infected)
		}
		if err == nil && c.Times != nil {
			err = steps("times", c.Times)
		}
		if err == nil && c.Recovered != nil {
			err = steps("recovered", c.Recovered)
		}
		if err != nil {
			return fmt.Errorf("writing cascade %d: %w", i, err)
		}
		line = append(line, '}', '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("writing cascades: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing cascades: %w", err)
	}
	return nil
}

// jsonCascade is one line as decoded. Pointers, so that a JSON null,
// which encoding/json would decode as "" or 0, is told apart: a null id
// is not the unknown node "", nor a null step step 0.
type jsonCascade struct {
	Sources   *[]*string      `json:"sources"`
	Infected  *[]*string      `json:"infected"`
	Times     map[string]*int `json:"times"`
	Recovered map[string]*int `json:"recovered"`
}

// RepeatedKey returns the first key of raw, one JSON object, that
// appears again in any case ("node" after "Node"), or "". Only the keys
// among names count when names are given. encoding/json keeps the last
// of them, matching in any case, and another language's reader may keep
// the first, so a reader that means one value refuses the object.
func RepeatedKey(raw []byte, names ...string) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	// EqualFold, not ToLower: encoding/json matches "ſources" (long s)
	// to sources too.
	var seen []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		key, _ := t.(string)
		same := func(k string) bool { return strings.EqualFold(k, key) }
		if slices.ContainsFunc(seen, same) {
			return key
		}
		if len(names) == 0 || slices.ContainsFunc(names, same) {
			seen = append(seen, key)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// Key identifies c's observation and truth: its sources, infected and
// recovered nodes. Two cascades with one key are copies as far as any
// localizer can tell (times aside).
func (c Cascade) Key() string {
	var b strings.Builder
	for i, part := range [][]int{c.Sources, c.Infected} {
		if i > 0 {
			b.WriteByte('|')
		}
		for _, v := range part {
			b.WriteString(strconv.Itoa(v))
			b.WriteByte(',')
		}
	}
	b.WriteByte('|')
	for v, step := range c.Recovered {
		if step >= 0 {
			b.WriteString(strconv.Itoa(v))
			b.WriteByte(',')
		}
	}
	return b.String()
}

// Repeats returns the indices of the cascades of cs whose Key is that of
// an earlier one: in recorded data, copies that a split can put on both
// sides, flattering every held-out number.
func Repeats(cs []Cascade) []int {
	seen := make(map[string]bool, len(cs))
	var out []int
	for i, c := range cs {
		if k := c.Key(); seen[k] {
			out = append(out, i)
		} else {
			seen[k] = true
		}
	}
	return out
}

// maxReadErrors is how many bad lines ReadJSONL reports before it stops
// reading: enough to fix a file in one go, not a screenful per line of a
// file in the wrong format.
const maxReadErrors = 10

// ReadOption changes what ReadJSONL keeps of each cascade.
type ReadOption func(*readOptions)

type readOptions struct{ dropTimes bool }

// DropTimes makes ReadJSONL check each line's "times" and "recovered" as
// ever but keep only what says which nodes recovered: Times is nil, and
// so is Recovered unless a node recovered. Both hold a step for every
// node of the graph, so a file of many cascades with times cost far more
// memory than its size for readers, as train and eval, that read only
// the sources, the snapshot and which nodes recovered.
func DropTimes() ReadOption { return func(o *readOptions) { o.dropTimes = true } }

// ReadJSONL reads cascades written by WriteJSONL, or recorded elsewhere
// in the same format (blank lines, a byte-order mark and keys other than
// those WriteJSONL writes are skipped, so a line may carry its own "id").
// Errors name the input and line: `name:3: unknown node "x" in infected`;
// every bad line is reported, up to maxReadErrors of them. A cascade
// without "times" has nil Times; Step is the largest step it records.
func ReadJSONL(r io.Reader, g *graph.Graph, name string, opts ...ReadOption) ([]Cascade, error) {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	n := g.N()
	br := bufio.NewReader(r)
	var out []Cascade
	var bad []error
	for lineNo := 1; ; lineNo++ {
		text, readErr := br.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, lineNo, readErr)
		}
		// A byte-order mark on any line: the first, or that of a file
		// joined to the one before (cat a.jsonl b.jsonl), which,
		// outside every JSON value, cannot change one.
		text = bytes.TrimPrefix(text, []byte("\ufeff"))
		if text = bytes.TrimSpace(text); len(text) > 0 {
			msg, stop := TextProblem(text, lineNo == 1)
			if stop {
				// Every line would fail alike: one error says it.
				return nil, errors.Join(append(bad, fmt.Errorf("%s:%d: %s", name, lineNo, msg))...)
			}
			c, err := parseCascade(text, g, n)
			switch {
			case err != nil && msg != "":
				// Text that is not UTF-8: encoding/json reads each bad
				// byte as U+FFFD, so an id holding one is unknown, and
				// the error alone would not say why. In a key the
				// reader skips it is harmless, and read as before.
				err = fmt.Errorf("%w (%s)", err, msg)
			case err != nil && readErr != nil && strings.HasSuffix(err.Error(), "unexpected end of JSON input"):
				err = fmt.Errorf("%w (the file's last line, which has no newline: cut short by an interrupted write or copy?)", err)
			}
			switch {
			case err != nil && len(bad) == maxReadErrors:
				bad = append(bad, fmt.Errorf("%s: more than %d bad lines; stopped reading at line %d", name, maxReadErrors, lineNo))
				return nil, errors.Join(bad...)
			case err != nil:
				bad = append(bad, fmt.Errorf("%s:%d: %w", name, lineNo, err))
			default:
				c.Line = lineNo
				if o.dropTimes {
					c = c.withoutTimes()
				}
				out = append(out, c)
			}
		}
		if readErr != nil {
			if len(bad) > 0 {
				return nil, errors.Join(bad...)
			}
			return out, nil
		}
	}
}

// TextProblem says what is wrong with text, one line of a JSONL file
// (the first when first), where it is not UTF-8 JSON text for a reason a
// JSON error would not name plainly, or returns "". stop reports that
// the file is not JSON lines at all (compressed, binary, UTF-16, lines
// ended with CR alone), so a reader should say it once and stop; without
// stop (text that is not UTF-8), msg is for the error the line meets, if
// it meets one: a bad byte in a key the reader skips is harmless.
func TextProblem(text []byte, first bool) (msg string, stop bool) {
	switch {
	case first && bytes.HasPrefix(text, []byte("\x1f\x8b")):
		return "gzip-compressed: decompress it first (gunzip -k)", true
	case first && bytes.HasPrefix(text, []byte("PK\x03\x04")):
		return "a zip archive: unzip it first, and give the JSON lines file inside", true
	case first && (bytes.HasPrefix(text, []byte("\xff\xfe")) || bytes.HasPrefix(text, []byte("\xfe\xff"))) || looksUTF16(text):
		return "UTF-16 text (what Windows tools call Unicode, and PowerShell 5's > writes): JSON lines are UTF-8; convert the file (iconv -f utf-16 -t utf-8)", true
	case bytes.IndexByte(text, 0) >= 0:
		return "NUL bytes: binary data, not JSON lines", true
	case crLines(text):
		return "carriage returns inside the line: the file ends its lines with CR alone, as old Mac tools did; convert them to newlines (tr '\\r' '\\n')", true
	case !utf8.Valid(text):
		return "the line is not valid UTF-8, whose bad bytes read as U+FFFD: convert the file, e.g. iconv -f latin1 -t utf-8", false
	}
	return "", false
}

// crLines reports whether text is lines ended with CR alone: two JSON
// objects or more, each starting a CR-separated part, where a CR inside
// one object (a raw one in a string) is not.
func crLines(text []byte) bool {
	if bytes.IndexByte(text, '\r') < 0 || json.Valid(text) {
		return false
	}
	objects := 0
	for part := range bytes.SplitSeq(text, []byte("\r")) {
		if bytes.HasPrefix(bytes.TrimSpace(part), []byte("{")) {
			objects++
		}
	}
	return objects > 1
}

// looksUTF16 reports whether text reads as UTF-16: NUL bytes in every
// other place (the high bytes of ASCII characters) and nowhere else.
func looksUTF16(text []byte) bool {
	var nul [2]int
	for i, b := range text {
		if b == 0 {
			nul[i%2]++
		}
	}
	half := len(text) / 2
	return half > 0 && (nul[0] == 0) != (nul[1] == 0) && max(nul[0], nul[1]) >= half*3/4
}

// withoutTimes is c without its per-node steps, for DropTimes.
func (c Cascade) withoutTimes() Cascade {
	c.Times = nil
	if c.Recovered == nil {
		return c
	}
	if !slices.ContainsFunc(c.Recovered, func(t int) bool { return t >= 0 }) {
		c.Recovered = nil
	}
	return c
}

func parseCascade(text []byte, g *graph.Graph, n int) (Cascade, error) {
	var jc jsonCascade
	if err := json.Unmarshal(text, &jc); err != nil {
		// encoding/json names Go types; say it in the file's terms.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			switch field := typeErr.Field; {
			case field == "":
				return Cascade{}, fmt.Errorf("found a JSON %s, not an object", typeErr.Value)
			case typeErr.Value == "number" && (field == "sources" || field == "infected"):
				return Cascade{}, fmt.Errorf(`%q holds a number: node ids are strings ("7", not 7)`, field)
			case field == "sources" || field == "infected":
				return Cascade{}, fmt.Errorf("%q holds a JSON %s where it wants an array of node ids", field, typeErr.Value)
			default:
				// times and recovered, or a step inside them.
				return Cascade{}, fmt.Errorf(`%q holds a JSON %s where it wants {"node id": step, ...} with whole steps`, field, typeErr.Value)
			}
		}
		return Cascade{}, fmt.Errorf("bad JSON: %w", err)
	}
	if k := RepeatedKey(text, "sources", "infected", "times", "recovered"); k != "" {
		return Cascade{}, fmt.Errorf("%q is given twice (keys match in any case): a cascade names each of sources, infected, times and recovered once", k)
	}
	if jc.Sources == nil {
		return Cascade{}, missing(text, "sources")
	}
	if len(*jc.Sources) == 0 {
		// Every simulated cascade has one; a recorded cascade without
		// its sources can neither train nor score a localizer.
		return Cascade{}, errors.New(`"sources" is empty: a cascade needs at least one source`)
	}
	if jc.Infected == nil {
		return Cascade{}, missing(text, "infected")
	}
	c := Cascade{N: n}
	var err error
	if c.Sources, err = indices(g, "sources", *jc.Sources); err != nil {
		return Cascade{}, err
	}
	if c.Infected, err = indices(g, "infected", *jc.Infected); err != nil {
		return Cascade{}, err
	}
	if c.Times, c.Step, err = stepMap(g, "times", jc.Times, c.Step); err != nil {
		return Cascade{}, err
	}
	if c.Recovered, c.Step, err = stepMap(g, "recovered", jc.Recovered, c.Step); err != nil {
		return Cascade{}, err
	}
	if len(c.Infected) == 0 && len(jc.Recovered) == 0 {
		// localize refuses such an observation; a model trained on it
		// learns that sources need not spread at all.
		return Cascade{}, errors.New(`"infected" is empty and nothing recovered: the snapshot shows no spread`)
	}
	if c.Recovered != nil {
		for _, v := range c.Infected {
			if c.Recovered[v] >= 0 {
				return Cascade{}, fmt.Errorf(`node %q is in both "infected" and "recovered" (a recovered node is not infected at the snapshot)`, g.ID(v))
			}
		}
	}
	if c.Times != nil {
		for _, v := range c.Infected {
			if c.Times[v] < 0 {
				return Cascade{}, fmt.Errorf("infected node %q has no time%s", g.ID(v), timesOptional)
			}
		}
		for v, t := range c.Times {
			_, infected := slices.BinarySearch(c.Infected, v)
			if t >= 0 && !infected && (c.Recovered == nil || c.Recovered[v] < 0) {
				return Cascade{}, fmt.Errorf(`node %q has a time in "times" but is neither infected nor recovered`, g.ID(v))
			}
		}
		for _, v := range c.Sources {
			switch t := c.Times[v]; {
			case t < 0:
				return Cascade{}, fmt.Errorf(`source %q is not in "times" (a source is infected at step 0)`, g.ID(v))
			case t != 0:
				return Cascade{}, fmt.Errorf(`source %q has step %d in "times", want 0%s`, g.ID(v), t, timesOptional)
			}
		}
	}
	return c, nil
}

// missing is the error for a required key that decoded as nothing:
// absent, or given as null.
func missing(text []byte, key string) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(text, &m) != nil || len(m) == 0 {
		return fmt.Errorf("missing %q", key)
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		if strings.EqualFold(k, key) && string(m[k]) == "null" {
			return fmt.Errorf(`%q is null: want an array of node ids`, k)
		}
	}
	// The keys found, so that a misspelt one ("infected " or "infect")
	// is plain to see.
	for i, k := range keys {
		keys[i] = strconv.Quote(k)
	}
	return fmt.Errorf("missing %q (its keys: %s)", key, strings.Join(keys, ", "))
}

// timesOptional ends the errors a recorded file's own clock meets in
// "times" (a timestamp where a step goes, a time known for some nodes
// only): what train and eval read needs none.
const timesOptional = ` (times are steps counted from the spread's start, every source at 0; train and eval read none, so a recorded file may leave "times" out)`

func indices(g *graph.Graph, key string, ids []*string) ([]int, error) {
	idx := make([]int, len(ids))
	for k, p := range ids {
		if p == nil {
			return nil, fmt.Errorf(`%s[%d] is null: node ids are strings`, key, k)
		}
		id := *p
		v, ok := g.Index(id)
		if !ok {
			return nil, g.UnknownNode(id, " in "+key)
		}
		idx[k] = v
	}
	slices.Sort(idx)
	for k := 1; k < len(idx); k++ {
		if idx[k] == idx[k-1] {
			return nil, fmt.Errorf("node %q listed twice in %s", g.ID(idx[k]), key)
		}
	}
	return idx, nil
}

func stepMap(g *graph.Graph, key string, m map[string]*int, step int) ([]int, int, error) {
	if m == nil {
		return nil, step, nil
	}
	at := make([]int, g.N())
	for i := range at {
		at[i] = -1
	}
	// Sorted, so a file with several bad entries always reports the same one.
	ids := slices.Sorted(maps.Keys(m))
	for _, id := range ids {
		v, ok := g.Index(id)
		if !ok {
			return nil, 0, g.UnknownNode(id, " in "+key)
		}
		why := timesOptional
		if key == "recovered" {
			why = " (train and eval read only which nodes recovered: any step >= 0 does)"
		}
		if m[id] == nil {
			return nil, 0, fmt.Errorf("node %q has step null in %s: want a whole step%s", id, key, why)
		}
		t := *m[id]
		if t < 0 {
			// A recovery logged before the first infection report (a
			// clock's skew) is the likely one in a recorded file.
			return nil, 0, fmt.Errorf("node %q has negative step %d in %s%s", id, t, key, why)
		}
		at[v] = t
		step = max(step, t)
	}
	return at, step, nil
}
