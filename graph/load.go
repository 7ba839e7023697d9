package graph

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Option configures Load and Read.
type Option func(*loadOptions)

type loadOptions struct {
	directed bool
}

// Directed makes every line u v an arc u->v instead of an undirected edge.
func Directed(directed bool) Option {
	return func(o *loadOptions) { o.directed = directed }
}

// commentLooksLikeID reports whether cut, the comment cut from a line,
// reads as a node id that lost its place ("#b"), not as prose ("# b").
func commentLooksLikeID(cut string) bool {
	rest, ok := strings.CutPrefix(strings.TrimSpace(cut), "#")
	return ok && rest != "" && !strings.ContainsAny(rest[:1], " \t#")
}

// Load reads an edge list file (see Read).
func Load(path string, opts ...Option) (*Graph, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading graph: %w", err)
	}
	defer f.Close()
	return Read(f, path, opts...) // the path as given: two dirs can hold a g.edges
}

// Read parses a whitespace-separated edge list: one edge "u v" or "u v w"
// per line, '#' at the start of a line or after a space or tab starting a
// comment, blank lines ignored. Node ids are arbitrary strings without
// whitespace (a '#' inside one, as in C#, is part of it); an id ending in
// a comma or semicolon, or holding a byte-order mark or zero-width space,
// is refused as the mark of a file in another format. w, when present, is the edge's infection probability
// and must be in [0, 1]; either every edge has a weight or none does.
// Errors name the source and line, as "name:17: want 2 or 3 fields, got 1".
//
// Nodes are numbered in id order: numerically when every id is a
// non-negative integer, lexicographically otherwise, so the numbering does
// not depend on the order of the file.
func Read(r io.Reader, name string, opts ...Option) (*Graph, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	type rawEdge struct {
		a, b string
		w    float64
	}
	var (
		raw       []rawEdge
		seen      = map[string]struct{}{}
		order     []string
		weighted  = -1 // unknown until the first edge
		firstLine int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			// A byte-order mark (editors and spreadsheet exports on
			// Windows write one) would otherwise become part of the
			// first node's id.
			text = strings.TrimPrefix(text, "\ufeff")
			// Compressed or archived: not "not valid UTF-8 ... latin1".
			if strings.HasPrefix(text, "\x1f\x8b") {
				return nil, fmt.Errorf("%s:1: gzip-compressed: decompress it first (gunzip -k)", name)
			}
			if strings.HasPrefix(text, "PK\x03\x04") {
				return nil, fmt.Errorf("%s:1: a zip archive: unzip it first, and give the edge list inside", name)
			}
		}
		if strings.Contains(strings.TrimRight(text, "\r"), "\r") {
			// Checked before the comment is cut: a comment on the first
			// line would take every later line with it. Binary junk that
			// happens to hold a CR is called what it is.
			if strings.ContainsRune(text, 0) {
				if looksUTF16(text) {
					// UTF-16 (what Windows tools call Unicode) ends its
					// lines with "\r\x00\n", which leaves a CR inside.
					return nil, fmt.Errorf("%s:%d: not valid UTF-8: NUL bytes, as UTF-16 text has; node ids are text (convert the file, e.g. iconv -f utf-16 -t utf-8)", name, line)
				}
				return nil, fmt.Errorf("%s:%d: NUL bytes: binary data, not an edge list", name, line)
			}
			if !utf8.ValidString(text) {
				return nil, fmt.Errorf("%s:%d: not valid UTF-8 text, with carriage returns inside the line: binary data, or an old Mac file in another encoding (convert it, e.g. iconv -f macintosh -t utf-8 | tr '\\r' '\\n')", name, line)
			}
			return nil, fmt.Errorf("%s:%d: carriage returns inside the line: the file ends its lines with CR alone, as old Mac tools did; convert them to newlines (tr '\\r' '\\n')", name, line)
		}
		withComment := text
		text = stripComment(text)
		// Node ids travel as JSON and protobuf strings (cascade files,
		// events, the plugin protocol), which must be UTF-8: an id that is
		// not would load here and fail far away, or turn into U+FFFD and
		// merge with another.
		if !utf8.ValidString(text) {
			from := "latin1"
			if line == 1 && (strings.HasPrefix(text, "\xff\xfe") || strings.HasPrefix(text, "\xfe\xff")) {
				// UTF-16's byte-order mark: what Windows tools call Unicode.
				from = "utf-16"
			}
			return nil, fmt.Errorf("%s:%d: not valid UTF-8: node ids are text (convert the file, e.g. iconv -f %s -t utf-8)", name, line, from)
		}
		if i := strings.IndexFunc(text, func(r rune) bool { return unicode.IsControl(r) && r != '\t' && r != '\r' && r != '\v' && r != '\f' }); i >= 0 {
			return nil, fmt.Errorf("%s:%d: control character %U in the line: node ids are printable text", name, line, []rune(text[i:])[0])
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 && len(fields) != 3 {
			hint := ""
			switch {
			case strings.ContainsRune(text, '\u00a0'):
				hint = " (the line holds a non-breaking space, U+00A0, which separates fields as a space does: replace it)"
			case len(fields) == 1 && commentLooksLikeID(strings.TrimPrefix(withComment, text)):
				hint = fmt.Sprintf(" (the line's rest from %q on was read as a comment: a # after a space or tab starts one)", strings.TrimSpace(strings.TrimPrefix(withComment, text)))
			case strings.ContainsAny(text, ",;"):
				hint = " (fields are separated by spaces or tabs, not commas or semicolons)"
			case strings.ContainsAny(text, `"'`):
				hint = " (quotes do not group: a node id cannot hold a space; replace spaces inside ids, e.g. with _)"
			case len(fields) == 1 && weighted == 1:
				hint = " (a node without edges is listed as a self-loop, in a weighted list with a weight too, `v v 1`: the loop is dropped, the node kept)"
			case len(fields) == 1:
				hint = " (a node without edges is listed as a self-loop, `v v`: the loop is dropped, the node kept)"
			default:
				hint = " (a node id cannot hold a space: replace spaces inside ids, e.g. with _)"
			}
			return nil, fmt.Errorf("%s:%d: want 2 or 3 fields, got %d%s", name, line, len(fields), hint)
		}
		for _, id := range fields[:2] {
			if strings.HasSuffix(id, ",") || strings.HasSuffix(id, ";") {
				return nil, fmt.Errorf("%s:%d: node id %q ends with %q: fields are separated by spaces or tabs, not commas or semicolons", name, line, id, id[len(id)-1:])
			}
			if i := strings.IndexFunc(id, invisible); i >= 0 {
				return nil, fmt.Errorf("%s:%d: node id %q holds the invisible character %U (a byte-order mark or zero-width space, as joining two exported files leaves): remove it, or the id is another node", name, line, id, []rune(id[i:])[0])
			}
		}
		e := rawEdge{a: fields[0], b: fields[1], w: 1}
		hasW := 0
		if len(fields) == 3 {
			hasW = 1
			w, err := strconv.ParseFloat(fields[2], 64)
			if err != nil {
				hint := " (an id with a space in it? a node id cannot hold one: replace spaces inside ids, e.g. with _)"
				switch {
				case strings.ContainsRune(text, '\u00a0'):
					hint = " (the line holds a non-breaking space, U+00A0, which separates fields as a space does: replace it)"
				case len(raw) == 0:
					hint = " (a header line? comment it out with #)"
				}
				return nil, fmt.Errorf("%s:%d: weight %q is not a number%s", name, line, fields[2], hint)
			}
			if math.IsNaN(w) || w < 0 || w > 1 {
				return nil, fmt.Errorf("%s:%d: weight %s outside [0, 1]: a weight is the edge's infection probability (IC and LT spread by it, forward models read it); scale the column into [0, 1], or, for SI and SIR, which spread at one rate on every edge, drop it", name, line, fields[2])
			}
			e.w = w
		}
		if weighted == -1 {
			weighted, firstLine = hasW, line
		} else if weighted != hasW {
			hint := ""
			if e.a == e.b && weighted == 1 {
				// The way to list a node without edges: in a weighted
				// list it takes a weight too, which nothing reads.
				hint = fmt.Sprintf(" (a self-loop listing a node without edges takes a weight too in a weighted list: `%s %s 1`; the loop is dropped, the node kept)", e.a, e.b)
			}
			return nil, fmt.Errorf("%s:%d: %d fields, but line %d had %d: weight the edges all or none%s", name, line, len(fields), firstLine, 2+weighted, hint)
		}
		for _, id := range [2]string{e.a, e.b} {
			if _, ok := seen[id]; !ok {
				seen[id] = struct{}{}
				order = append(order, id)
			}
		}
		raw = append(raw, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than 16 MiB: not an edge list, or one without line breaks", name, line+1)
		}
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if len(raw) > 1 {
		rest := make([][2]string, len(raw)-1)
		for k, e := range raw[1:] {
			rest[k] = [2]string{e.a, e.b}
		}
		if err := checkHeader(name, firstLine, raw[0].a, raw[0].b, rest); err != nil {
			return nil, err
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrEmpty)
	}
	sortIDs(order)
	index := make(map[string]int, len(order))
	for i, id := range order {
		index[id] = i
	}
	edges := make([]Edge, len(raw))
	for k, e := range raw {
		edges[k] = Edge{From: index[e.a], To: index[e.b], W: e.w}
	}
	return New(len(order), edges, order, o.directed, weighted == 1), nil
}

// sortIDs orders ids numerically when all are non-negative integers that
// fit an int64, lexicographically otherwise.
func sortIDs(ids []string) {
	nums := make([]int64, len(ids))
	numeric := true
	for i, id := range ids {
		v, err := strconv.ParseInt(id, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != id {
			numeric = false
			break
		}
		nums[i] = v
	}
	if !numeric {
		sort.Strings(ids)
		return
	}
	sort.Sort(byNum{ids, nums})
}

type byNum struct {
	ids  []string
	nums []int64
}

func (b byNum) Len() int           { return len(b.ids) }
func (b byNum) Less(i, j int) bool { return b.nums[i] < b.nums[j] }
func (b byNum) Swap(i, j int) {
	b.ids[i], b.ids[j] = b.ids[j], b.ids[i]
	b.nums[i], b.nums[j] = b.nums[j], b.nums[i]
}

// checkHeader refuses a first edge line that reads like a column header:
// ids that are not numbers, appearing nowhere else, in a file whose every
// other id is a non-negative integer ("src dst" above "0 1"). Read as an
// edge it would add two nodes and turn the numeric id order into a
// lexicographic one without a word.
func checkHeader(name string, line int, a, b string, rest [][2]string) error {
	numeric := func(id string) bool {
		v, err := strconv.ParseInt(id, 10, 64)
		return err == nil && v >= 0 && strconv.FormatInt(v, 10) == id
	}
	if numeric(a) && numeric(b) {
		return nil
	}
	allNumeric, elsewhere := true, false
	for _, e := range rest {
		for _, id := range e {
			elsewhere = elsewhere || id == a || id == b
			allNumeric = allNumeric && numeric(id)
		}
	}
	switch {
	case elsewhere:
		return nil
	case allNumeric:
		return fmt.Errorf("%s:%d: %q looks like a header, every other node id being a number: comment it out with #", name, line, a+" "+b)
	case headerWords[strings.ToLower(a)] && headerWords[strings.ToLower(b)]:
		// Above text ids the numbers cannot tell; a pair of column
		// names linked to nothing else can.
		return fmt.Errorf("%s:%d: %q looks like a header (column names, linked to no other node): comment it out with #", name, line, a+" "+b)
	}
	return nil
}

// headerWords are the column names edge-list exports use.
var headerWords = map[string]bool{
	"source": true, "target": true, "from": true, "to": true, "src": true, "dst": true,
	"u": true, "v": true, "node1": true, "node2": true, "id1": true, "id2": true,
	"head": true, "tail": true, "sender": true, "receiver": true,
}

// stripComment cuts text at the first '#' that starts the line or follows
// a space or tab; one inside a token belongs to a node id.
func stripComment(text string) string {
	for i := 0; i < len(text); i++ {
		if text[i] == '#' && (i == 0 || text[i-1] == ' ' || text[i-1] == '\t') {
			return text[:i]
		}
	}
	return text
}

// invisible reports the characters that cannot be seen in an id yet make
// it another node's: U+FEFF (a byte-order mark past the first line),
// U+200B (zero-width space) and U+2060 (word joiner). Zero-width joiners,
// which some scripts and emoji need, are allowed.
func invisible(r rune) bool { return r == '\ufeff' || r == '\u200b' || r == '\u2060' }

// looksUTF16 reports whether s reads as UTF-16 text: a byte-order mark,
// or NUL bytes in every other place (the high bytes of ASCII characters)
// and nowhere else.
func looksUTF16(s string) bool {
	// A CRLF line of UTF-16 split at its "\n" ends in "\r\x00" (little
	// endian; big endian's line starts with the "\x00" left over).
	if strings.HasPrefix(s, "\xff\xfe") || strings.HasPrefix(s, "\xfe\xff") || strings.HasSuffix(s, "\r\x00") {
		return true
	}
	var nul [2]int
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			nul[i%2]++
		}
	}
	half := len(s) / 2
	return half > 0 && (nul[0] == 0) != (nul[1] == 0) && max(nul[0], nul[1]) >= half*3/4
}
