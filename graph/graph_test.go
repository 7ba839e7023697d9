package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadErrorsNameFileAndLine(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"one field", "0 1\n# c\n2\n", "g.edges:3: want 2 or 3 fields, got 1 (a node without edges is listed as a self-loop, `v v`: the loop is dropped, the node kept)"},
		{"commas", "0 1\n1,2\n", "g.edges:2: want 2 or 3 fields, got 1 (fields are separated by spaces or tabs, not commas or semicolons)"},
		{"four fields", "0 1 0.5 9\n", "g.edges:1: want 2 or 3 fields, got 4 (a node id cannot hold a space"},
		{"comment ate the id", "a #b\n", `g.edges:1: want 2 or 3 fields, got 1 (the line's rest from "#b" on was read as a comment`},
		{"CR line ends", "a b\rb c\rc d\r", "g.edges:1: carriage returns inside the line: the file ends its lines with CR alone"},
		{"CR line ends under a comment", "# my graph\ra b\rb c\r", "g.edges:1: carriage returns inside the line"},
		{"CR line ends after a comment", "a b # first\rb c\rc d\r", "g.edges:1: carriage returns inside the line"},
		{"UTF-16 with CRLF", "\xff\xfea\x00 \x00b\x00\r\x00\n\x00", "g.edges:1: not valid UTF-8: NUL bytes, as UTF-16 text has; node ids are text (convert the file, e.g. iconv -f utf-16 -t utf-8)"},
		{"NULs with a CR, not UTF-16", "a b\n\x00\x00\x00\x07\x00\x00\rzz\n", "g.edges:2: NUL bytes: binary data, not an edge list"},
		{"UTF-16 without a mark, not Latin, with CRLF", "\x00\x4e \x00b\x00\r\x00\n\x00", "g.edges:1: not valid UTF-8: NUL bytes, as UTF-16 text has"},
		{"UTF-16 without a mark, with CRLF", "a\x00 \x00b\x00\r\x00\n\x00", "g.edges:1: not valid UTF-8: NUL bytes, as UTF-16 text has"},
		{"binary junk with a CR", "a b\n\x89\xff\rzz\n", "g.edges:2: not valid UTF-8 text, with carriage returns inside the line"},
		// Latin-1 in a comment of a CR-only file must not let the comment
		// take the rest of the file.
		{"CR line ends with Latin-1 in a comment", "a b # caf\xe9\rb c\rc d\r", "g.edges:1: not valid UTF-8 text, with carriage returns inside the line"},
		{"prose comment", "a b\nc # isolated node\n", "g.edges:2: want 2 or 3 fields, got 1 (a node without edges is listed as a self-loop"},
		{"non-breaking space", "a\u00a0b c\n", `g.edges:1: weight "c" is not a number (the line holds a non-breaking space, U+00A0`},
		{"ids with spaces", "0 1\nuser 1 user 2\n", "g.edges:2: want 2 or 3 fields, got 4 (a node id cannot hold a space: replace spaces inside ids, e.g. with _)"},
		{"one id with a space", "0 1\nuser 17 user-18\n", `g.edges:2: weight "user-18" is not a number (an id with a space in it?`},
		{"not UTF-8", "0 1\n\xff\xfe 3\n", "g.edges:2: not valid UTF-8: node ids are text"},
		{"control character", "0 1\n1 2\x00\n", "g.edges:2: control character U+0000 in the line"},
		{"bad weight", "0 1 x\n", `g.edges:1: weight "x" is not a number`},
		{"weight range", "0 1 1.5\n", "g.edges:1: weight 1.5 outside [0, 1]: a weight is the edge's infection probability (IC and LT spread by it, forward models read it); scale the column into [0, 1], or, for SI and SIR, which spread at one rate on every edge, drop it"},
		{"mixed weights", "0 1 0.5\n1 2\n", "g.edges:2: 2 fields, but line 1 had 3"},
		// The README's way to list an isolated node, in a weighted list.
		{"unweighted self-loop in a weighted list", "0 1 0.5\n7 7\n", "g.edges:2: 2 fields, but line 1 had 3: weight the edges all or none (a self-loop listing a node without edges takes a weight too in a weighted list: `7 7 1`; the loop is dropped, the node kept)"},
		{"one field in a weighted list", "0 1 0.5\n7\n", "g.edges:2: want 2 or 3 fields, got 1 (a node without edges is listed as a self-loop, in a weighted list with a weight too, `v v 1`"},
		{"empty", "# nothing\n\n", "g.edges: graph has no nodes"},
		{"UTF-16", "\xff\xfe0\x00 \x001\x00\n", "g.edges:1: not valid UTF-8: node ids are text (convert the file, e.g. iconv -f utf-16 -t utf-8)"},
		// Not "not valid UTF-8 ... iconv -f latin1": a compressed file.
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\r\x00\nzz\n", "g.edges:1: gzip-compressed: decompress it first (gunzip -k)"},
		{"zip", "PK\x03\x04\x14\x00\x00\n", "g.edges:1: a zip archive: unzip it first, and give the edge list inside"},
		{"quoted ids", "\"New York\" \"Los Angeles\"\n", "g.edges:1: want 2 or 3 fields, got 4 (quotes do not group: a node id cannot hold a space"},
		{"long line", "0 1\n" + strings.Repeat("x", 17<<20) + " y\n", "g.edges:2: line longer than 16 MiB"},
		{"comma and space", "0, 1\n1, 2\n", `g.edges:1: node id "0," ends with ",": fields are separated by spaces or tabs`},
		{"semicolon and space", "a b\nb; c\n", `g.edges:2: node id "b;" ends with ";"`},
		{"late byte-order mark", "# c\n\ufeff0 1\n", `g.edges:2: node id "\ufeff0" holds the invisible character U+FEFF`},
		{"zero-width space", "a b\nb\u200b c\n", `g.edges:2: node id "b\u200b" holds the invisible character U+200B`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.input), "g.edges")
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestReadDropsSelfLoopsAndDuplicates(t *testing.T) {
	g, err := Read(strings.NewReader("a b\nb a\nb b\nb c # trailing comment\n  c   a  \na b\n"), "x")
	require.NoError(t, err)
	require.Equal(t, 3, g.N())
	// b a repeats a b the other way round; the last a b repeats it as is.
	require.Equal(t, Stats{Edges: 3, SelfLoops: 1, Duplicates: 2, Reciprocal: 1}, g.Stats())
	require.Equal(t, []string{"a", "b", "c"}, g.IDs())
	for i := 0; i < 3; i++ {
		require.Equal(t, 2, g.Degree(i))
	}
	require.Equal(t, 6, g.Arcs())
}

// A '#' starts a comment at the start of a line or after a space or tab;
// inside an id it is part of it. Before, "bob#1234" and "bob#9999" were
// both cut to "bob", one node.
func TestHashInsideAnID(t *testing.T) {
	g, err := Read(strings.NewReader("alice bob#1234\nalice bob#9999 # two people\nC# F#\t# languages\n#a b\n"), "x")
	require.NoError(t, err)
	require.Equal(t, []string{"C#", "F#", "alice", "bob#1234", "bob#9999"}, g.IDs())
	require.Equal(t, Stats{Edges: 3}, g.Stats())
}

func TestDirectedKeepsBothArcs(t *testing.T) {
	g, err := Read(strings.NewReader("1 2\n2 1\n2 3\n"), "d", Directed(true))
	require.NoError(t, err)
	require.Equal(t, Stats{Edges: 3}, g.Stats())
	i2, _ := g.Index("2")
	i3, _ := g.Index("3")
	require.Equal(t, 2, g.Degree(i2))
	require.Equal(t, 1, g.InDegree(i2))
	require.Equal(t, 0, g.Degree(i3))
	in, _ := g.In(i3)
	require.Equal(t, []int{i2}, in)
	// Directed reachability follows arcs only.
	d := g.BFS([]int{i3}, nil)
	require.Equal(t, []int{-1, -1, 0}, d)
}

func TestNumericIDsSortNumerically(t *testing.T) {
	g, err := Read(strings.NewReader("10 2\n2 1\n"), "n")
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "10"}, g.IDs())
	// "007" is not a canonical integer, so the ids fall back to string order.
	g, err = Read(strings.NewReader("10 2\n2 007\n"), "n")
	require.NoError(t, err)
	require.Equal(t, []string{"007", "10", "2"}, g.IDs())
}

func TestWeights(t *testing.T) {
	g, err := Read(strings.NewReader("a b 0.25\nb c 0.5\n"), "w")
	require.NoError(t, err)
	require.True(t, g.Weighted())
	b, _ := g.Index("b")
	nbr, w := g.Out(b)
	require.Equal(t, []int{0, 2}, nbr)
	require.Equal(t, []float64{0.25, 0.5}, w)

	u, err := Read(strings.NewReader("a b\n"), "u")
	require.NoError(t, err)
	require.False(t, u.Weighted())
	_, w = u.Out(0)
	require.Equal(t, []float64{1}, w)
}

func TestFingerprintIsCanonical(t *testing.T) {
	a, err := Read(strings.NewReader("# header\n1 2\n2 3\n3 1\n"), "a")
	require.NoError(t, err)
	b, err := Read(strings.NewReader("3   1\n2 1\n\n3 2 # same edges, other order and direction\n1 2\n"), "b")
	require.NoError(t, err)
	require.Equal(t, a.Fingerprint(), b.Fingerprint())
	require.Len(t, a.Fingerprint(), 64)

	c, err := Read(strings.NewReader("1 2\n2 3\n"), "c")
	require.NoError(t, err)
	require.NotEqual(t, a.Fingerprint(), c.Fingerprint())
	d, err := Read(strings.NewReader("1 2\n2 3\n3 1\n"), "d", Directed(true))
	require.NoError(t, err)
	require.NotEqual(t, a.Fingerprint(), d.Fingerprint())
	w, err := Read(strings.NewReader("1 2 1\n2 3 1\n3 1 1\n"), "w")
	require.NoError(t, err)
	require.NotEqual(t, a.Fingerprint(), w.Fingerprint(), "weighted and unweighted graphs must differ")

	// A node on no edge counts: it changes n and, here, the numbering.
	iso, err := Read(strings.NewReader("1 2\n2 3\n3 1\n10 10\n"), "iso")
	require.NoError(t, err)
	require.Equal(t, 4, iso.N())
	require.NotEqual(t, a.Fingerprint(), iso.Fingerprint())
	iso2, err := Read(strings.NewReader("10 10\n3 1\n2 3\n1 2\n"), "iso2")
	require.NoError(t, err)
	require.Equal(t, iso.Fingerprint(), iso2.Fingerprint())
}

func TestBFSAndComponents(t *testing.T) {
	// Path 0-1-2-3, separate edge 4-5, isolated pair 6-7.
	g := New(8, []Edge{{0, 1, 1}, {1, 2, 1}, {2, 3, 1}, {4, 5, 1}, {6, 7, 1}}, nil, false, false)
	require.Equal(t, []int{0, 1, 2, 3, -1, -1, -1, -1}, g.BFS([]int{0}, nil))
	require.Equal(t, []int{1, 0, 1, 2, -1, -1, 1, 0}, g.BFS([]int{1, 7}, make([]int, 8)))
	comp, count := g.Components()
	require.Equal(t, 3, count)
	require.Equal(t, []int{0, 0, 0, 0, 1, 1, 2, 2}, comp)
}

func TestNewPanicsWithPrefix(t *testing.T) {
	require.PanicsWithValue(t, "graph: edge 0-5 out of range for 2 nodes", func() {
		New(2, []Edge{{0, 5, 1}}, nil, false, false)
	})
	// n itself is out of range, at either end.
	require.PanicsWithValue(t, "graph: edge 2-0 out of range for 2 nodes", func() {
		New(2, []Edge{{2, 0, 1}}, nil, false, false)
	})
	require.PanicsWithValue(t, "graph: edge 0-2 out of range for 2 nodes", func() {
		New(2, []Edge{{0, 2, 1}}, nil, false, false)
	})
	require.PanicsWithValue(t, "graph: edge -1-0 out of range for 2 nodes", func() {
		New(2, []Edge{{-1, 0, 1}}, nil, false, false)
	})
}

func TestLookupAndEdges(t *testing.T) {
	g, err := Read(strings.NewReader("x y\ny z\n"), "l")
	require.NoError(t, err)
	idx, err := g.Lookup([]string{"z", "x"})
	require.NoError(t, err)
	require.Equal(t, []string{"z", "x"}, g.Names(idx))
	_, err = g.Lookup([]string{"nope"})
	require.ErrorContains(t, err, `unknown node "nope"`)
	require.Equal(t, []Edge{{0, 1, 1}, {1, 2, 1}}, g.Edges())
	require.Equal(t, "undirected graph, 3 nodes, 2 edges", g.String())
}

// TestKarate loads the karate club edge list shipped for the demo (the
// four shared graphs are checked by the benchmark harness, not here: a
// fresh clone holds only this one).
func TestKarate(t *testing.T) {
	g, err := Load(filepath.Join("..", "configs", "demo", "karate.edges"))
	require.NoError(t, err)
	require.Equal(t, 34, g.N())
	require.Equal(t, 78, g.Stats().Edges)
	require.Equal(t, 156, g.Arcs())
	_, count := g.Components()
	require.Equal(t, 1, count)
}

// A load error names the file as it was given, directory included: two
// directories can each hold a g.edges.
func TestLoadErrorNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "g.edges")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte("a b\nc\n"), 0o600))
	_, err := Load(path)
	require.ErrorContains(t, err, path+":2: want 2 or 3 fields, got 1")
}

func BenchmarkLoadPowerGrid(b *testing.B) {
	path := filepath.Join("..", "..", "shared", "data", "power_grid.edges")
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no %s (the shared data sets, beside the repository): %v", path, err)
	}
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReadHeaderBOMAndDroppedEdges(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{
		{"header", "src dst\n0 1\n1 2\n", `h.edges:1: "src dst" looks like a header, every other node id being a number: comment it out with #`},
		{"header after a comment", "# exported\nfrom to\n0 1\n", `h.edges:2: "from to" looks like a header`},
		{"header with one number", "weight 9\n0 1\n1 2\n", `h.edges:1: "weight 9" looks like a header, every other node id being a number`},
		{"header above text ids", "Source\tTarget\nalice bob\nbob carol\n", `h.edges:1: "Source Target" looks like a header (column names, linked to no other node)`},
		{"weighted header", "src dst weight\n0 1 0.5\n", `h.edges:1: weight "weight" is not a number (a header line? comment it out with #)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.input), "h.edges")
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Not headers: string ids throughout, a first-line id used again, a
	// single edge.
	// Column names linked to the rest are nodes.
	for _, ok := range []string{"a b\nb c\n", "x 0\nx 1\n", "a b\n", "from to\nto v\n"} {
		_, err := Read(strings.NewReader(ok), "h.edges")
		require.NoError(t, err, "%q", ok)
	}

	// A byte-order mark is not part of the first id.
	g, err := Read(strings.NewReader("\ufeff0 1\n1 2\n2 0\n"), "bom.edges")
	require.NoError(t, err)
	require.Equal(t, []string{"0", "1", "2"}, g.IDs())
	g, err = Read(strings.NewReader("\ufeff# comment\n0 1\n"), "bom.edges")
	require.NoError(t, err)
	require.Equal(t, 2, g.N())

	// What the loader dropped is in the graph's description.
	g, err = Read(strings.NewReader("0 1\n1 0\n1 1\n1 2\n"), "d.edges")
	require.NoError(t, err)
	require.Equal(t, "undirected graph, 3 nodes, 2 edges (1 self-loop and 1 duplicate edge dropped)", g.String())
	// Read directed, the lines are arcs, and counted as such.
	g, err = Read(strings.NewReader("0 1\n1 0\n1 0\n1 1\n1 2\n"), "d.edges", Directed(true))
	require.NoError(t, err)
	require.Equal(t, "directed graph, 3 nodes, 3 arcs (1 self-loop and 1 duplicate arc dropped)", g.String())
}

func TestLookupShowsInvisibleDifferences(t *testing.T) {
	g, err := Read(strings.NewReader("Zo\u00eb b\n"), "u.edges")
	require.NoError(t, err)
	_, err = g.Lookup([]string{"Zoe\u0308"})
	require.EqualError(t, err, "unknown node \"Zoe\u0308\" (\"Zoe\\u0308\"): the graph has \"Zo\\u00eb\", the same text composed (NFC); ids are compared byte for byte, so send the graph's")
	_, err = g.Lookup([]string{"x"})
	require.EqualError(t, err, "unknown node \"x\" (the graph's ids look like \"Zoë\", \"b\")")
	_, err = g.Lookup([]string{"c"})
	require.EqualError(t, err, `unknown node "c" (the graph's ids look like "Zoë", "b")`, "plain ids are not escaped")
}

// WithoutWeights keeps the nodes, ids and arcs and drops the weights: it
// is the graph the same list reads without its weight column.
func TestWithoutWeights(t *testing.T) {
	weighted, err := Read(strings.NewReader("a b 0.5\nb c 0.25\nc a 1\n"), "w")
	require.NoError(t, err)
	plain, err := Read(strings.NewReader("a b\nb c\nc a\n"), "p")
	require.NoError(t, err)
	got := weighted.WithoutWeights()
	require.False(t, got.Weighted())
	require.True(t, weighted.Weighted(), "g itself is not changed")
	require.Equal(t, plain.Fingerprint(), got.Fingerprint())
	require.NotEqual(t, weighted.Fingerprint(), got.Fingerprint())
	require.Equal(t, plain.IDs(), got.IDs())
	require.Equal(t, plain.Edges(), got.Edges())
	require.Same(t, plain, plain.WithoutWeights())
}

// An id that differs from one of the graph's only invisibly (Unicode
// normalization, white space around it) is named beside the graph's.
func TestSameText(t *testing.T) {
	g, err := Read(strings.NewReader("Zoe\u0308 b\nsão c\n7 -3\n"), "u.edges")
	require.NoError(t, err)
	for _, tc := range []struct {
		id, match, how string
	}{
		// An integer id column turned float (pandas, where it has a gap).
		{"7.0", "7", `without its ".0" (a whole number written as a float, as pandas writes an integer column with a gap)`},
		{"-3.00 ", "-3", `without the white space around it and without its ".00" (a whole number written as a float, as pandas writes an integer column with a gap)`},
		{"7.5", "", ""},
		{"7.", "", ""},
		{"b.0", "", ""},
		{"Zo\u00eb", "Zoe\u0308", "decomposed (NFD)"},
		{" b\t", "b", "without the white space around it"},
		{"sa\u0303o ", "são", "composed (NFC) and without the white space around it"},
		{"b", "", ""},
		{"B", "", ""},
		{"zoë", "", ""},
		// Zero-width characters, which no id of g can hold (Read refuses
		// them): a byte-order mark a producer's file left, a zero-width
		// space or word joiner.
		{"\ufeffb", "b", "without its zero-width characters (a byte-order mark, zero-width space or word joiner)"},
		{"b\u200b", "b", "without its zero-width characters (a byte-order mark, zero-width space or word joiner)"},
		{"\u2060sa\u0303o ", "são", "composed (NFC) and without the white space around it and without its zero-width characters (a byte-order mark, zero-width space or word joiner)"},
		{"\u200bB", "", ""},
	} {
		match, how, ok := g.SameText(tc.id)
		require.Equal(t, tc.match != "", ok, "%q", tc.id)
		require.Equal(t, tc.match, match, "%q", tc.id)
		require.Equal(t, tc.how, how, "%q", tc.id)
	}
}

// Every report of an id the graph lacks wraps ErrUnknownNode, whatever
// the hint it adds, so a caller can tell a wrong id from other failures;
// the message keeps its "unknown node" lead.
func TestUnknownNodeWrapsErrUnknownNode(t *testing.T) {
	g, err := Read(strings.NewReader("Zo\u00eb b\nb c\n"), "u.edges")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"lookup, plain id", func() error { _, err := g.Lookup([]string{"b", "x"}); return err }, `unknown node "x" (the graph's ids look like`},
		{"lookup, same text", func() error { _, err := g.Lookup([]string{"Zoe\u0308"}); return err }, `the same text composed (NFC)`},
		{"lookup, white space", func() error { _, err := g.Lookup([]string{" b"}); return err }, `the same text without the white space around it`},
		{"lookup, zero-width", func() error { _, err := g.Lookup([]string{"b\u200b"}); return err }, `without its zero-width characters`},
		{"UnknownNode with where", func() error { return g.UnknownNode("q", " in sources") }, `unknown node "q" in sources`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			require.ErrorIs(t, err, ErrUnknownNode)
			require.NotErrorIs(t, err, ErrEmpty)
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "unknown node "), "%v", err)
		})
	}
	_, err = g.Lookup([]string{"c", "b"})
	require.NoError(t, err)
	_, err = Read(strings.NewReader("# nothing\n"), "e.edges")
	require.ErrorIs(t, err, ErrEmpty)
	require.NotErrorIs(t, err, ErrUnknownNode)
}

// The fingerprint is the SHA-256 of the canonical text doc.go spells out,
// which bundles and the events' checks compare: written out here by hand
// from that description, not from the code.
func TestFingerprintIsTheDocumentedHash(t *testing.T) {
	hash := func(text string) string { s := sha256.Sum256([]byte(text)); return hex.EncodeToString(s[:]) }
	for _, tt := range []struct {
		name, edges string
		directed    bool
		canonical   string
	}{
		// u <= v for undirected edges, weights by 'g' -1, the node named
		// only by a self-loop as a node line, all lines sorted together.
		{"undirected weighted", "c b 0.00001\nb a 0.125\nd d 1\n", false,
			"undirected\na\tb\t0.125\nb\tc\t1e-05\nnode\td\n"},
		// Arcs keep their direction; no weight column, no tab before it.
		{"directed", "y x\nx y\nz x\n", true,
			"directed\nx\ty\ny\tx\nz\tx\n"},
		// Sorted as strings: "10" before "9".
		{"numeric ids", "9 10\n", false,
			"undirected\n10\t9\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Read(strings.NewReader(tt.edges), tt.name, Directed(tt.directed))
			require.NoError(t, err)
			require.Equal(t, hash(tt.canonical), g.Fingerprint())
		})
	}
}
