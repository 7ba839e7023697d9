package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

// obsGraph is the graph the observation tests look ids up in.
func obsGraph() *graph.Graph {
	return graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}}, []string{"a", "b", "c", "d"}, false, false)
}

// readObsBytes reads data as stdin; the bad lines' errors are joined to
// what failed the whole input.
func readObsBytes(g *graph.Graph, data []byte) ([]observationFile, error) {
	obs, bad, err := readObsLines(g, data)
	return obs, errors.Join(append(bad, err)...)
}

func readObsLines(g *graph.Graph, data []byte) ([]observationFile, []error, error) {
	return readObservations("-", bytes.NewReader(data), func(o *observationFile) error {
		var err error
		if o.nodes, err = g.Lookup(o.Infected); err != nil {
			return fmt.Errorf("%s: %w", o.where, err)
		}
		return nil
	})
}

// An observation that is not one JSON object per line is refused, naming
// the line: a stray bracket after the object is not skipped unread, and a
// null node id is named as null, not as an unknown node "".
func TestReadObservationsRefusesMalformed(t *testing.T) {
	g := obsGraph()
	for _, tc := range []struct{ in, want string }{
		{`{"infected":["a"]}}`, `<stdin>:1: want one {"infected":[ids...]} object per line, found more after it`},
		{`{"infected":["a"]}]`, `<stdin>:1: want one {"infected":[ids...]} object per line, found more after it`},
		{"{\"infected\":[\"a\"]}\n{\"infected\":[\"b\"]}]]\n", `<stdin>:2: want one {"infected":[ids...]} object per line`},
		{`{"infected":["a"]} {"infected":["b"]}`, `<stdin>:1: want one {"infected":[ids...]} object per line`},
		{`{"infected":[null]}`, `<stdin>:1: "infected"[0] is null; want node ids as strings`},
		{`{"infected":["a",null]}`, `<stdin>:1: "infected"[1] is null`},
		{`{"infected":[0]}`, `<stdin>:1: want {"infected":[ids...]}: "infected" holds a number: node ids are strings`},
		// Over many lines, one object: no one line to name.
		{"{\n  \"infected\": [0]\n}\n", `<stdin>: want {"infected":[ids...]}: "infected" holds a number`},
	} {
		_, err := readObsBytes(g, []byte(tc.in))
		require.ErrorContains(t, err, tc.want, "input %q", tc.in)
	}
	obs, err := readObsBytes(g, []byte("{\"infected\":[\"a\",\"b\"]}  \n\n{\"infected\":[\"c\"],\"id\":7}\n"))
	require.NoError(t, err)
	require.Len(t, obs, 2)
	require.Equal(t, "7", obs[1].ID)
}

// A bad line of a JSONL file loses only itself: the good ones are read,
// numbered as the observations they are (blank lines not counted), and
// each bad one is named with its line; a single bad object, or a file
// whose one line is bad, fails the whole input as before.
func TestReadObservationsKeepsTheGoodLines(t *testing.T) {
	g := obsGraph()
	obs, bad, err := readObsLines(g, []byte("{\"infected\":[\"a\"]}\n{\"infected\":[\"z\"]}\n\n{\"infected\":[\"b\"],\"id\":\"x\"}\n{\"infected\":[]}\n"))
	require.NoError(t, err)
	require.Len(t, obs, 2)
	require.Equal(t, []int{1, 3}, []int{obs[0].n, obs[1].n})
	require.Equal(t, "x", obs[1].ID)
	require.Len(t, bad, 2)
	require.ErrorContains(t, bad[0], `<stdin>:2: unknown node "z"`)
	require.ErrorContains(t, bad[1], `<stdin>:5: "infected" is empty`)
	for _, in := range []string{`{"infected":["z"]}`, "not json\n", "\n{\"infected\":[]}\n\n"} {
		obs, bad, err = readObsLines(g, []byte(in))
		require.Error(t, err, "input %q", in)
		require.Empty(t, obs)
		require.Empty(t, bad)
	}
}

// A file in another encoding, or with CR alone ending its lines, is
// refused saying so, not as the byte JSON trips on ('ÿ' for UTF-16's
// byte-order mark); a byte-order mark on a later line (two files
// joined) and a last line cut short are read and named as such.
func TestReadObservationsNamesTheEncoding(t *testing.T) {
	g := obsGraph()
	utf16 := []byte{0xff, 0xfe}
	for _, r := range "{\"infected\":[\"a\"]}\r\n{\"infected\":[\"b\"]}\r\n" {
		utf16 = append(utf16, byte(r), 0)
	}
	for _, tc := range []struct{ in, want string }{
		{string(utf16), "<stdin>:1: UTF-16 text"},
		{"{\"infected\":[\"a\"]}\r{\"infected\":[\"b\"]}\r", "<stdin>:1: carriage returns inside the line: the file ends its lines with CR alone"},
		{"{\"infected\":[\"Zo\xebe\"]}\n", "<stdin>:1: unknown node \"Zo\ufffde\" (\"Zo\\ufffde\")" + ` (the graph's ids look like "a", "b", "c") (the line is not valid UTF-8, whose bad bytes read as U+FFFD: convert the file, e.g. iconv -f latin1 -t utf-8)`},
		{"{\"infected\":[\"a\"]}\n{\"infected\":[\"Zo\xebe\"]}\n", "<stdin>:2: unknown node \"Zo\ufffde\" (\"Zo\\ufffde\") (the graph's ids look like \"a\", \"b\", \"c\") (the line is not valid UTF-8"},
		{"{\"infected\":[\"a\"]}\n{\"infected\":[\"b\",", "<stdin>:2: want {\"infected\":[ids...]}: unexpected EOF: the line ends inside the object (cut short"},
	} {
		_, err := readObsBytes(g, []byte(tc.in))
		require.ErrorContains(t, err, tc.want, "input %q", tc.in)
	}
	obs, err := readObsBytes(g, []byte("\ufeff{\"infected\":[\"a\"]}\n\ufeff{\"infected\":[\"b\"]}\n"))
	require.NoError(t, err, "a byte-order mark on a joined file's first line")
	require.Len(t, obs, 2)
	obs, err = readObsBytes(g, []byte("{\"infected\":[\"a\"],\"region\":\"Z\xfcrich\"}\n"))
	require.NoError(t, err, "Latin-1 in a key that is skipped is read as before")
	require.Len(t, obs, 1)
}

func FuzzReadObservations(f *testing.F) {
	for _, seed := range []string{
		`{"infected":["a","b"]}`,
		"{\"infected\":[\"a\"],\"id\":\"x\"}\n{\"infected\":[\"d\"],\"id\":3}\n",
		"\ufeff{\n \"infected\": [\"c\"]\n}\n",
		`{"sources":["a"],"infected":["a","b"],"times":{"a":0,"b":1}}`,
		`{"infected":["a"]}}`,
		`{"infected":[null]}`,
		`{"infected":["a"],"INFECTED":["b"]}`,
		`{"infected":[],"id":null}`,
		`[{"infected":["a"]}]`,
		"{\"infected\":[\"a\"]}\nnot json\n",
	} {
		f.Add([]byte(seed))
	}
	g := obsGraph()
	f.Fuzz(func(t *testing.T, data []byte) {
		obs, bad, err := readObsLines(g, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "<stdin>") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		for _, e := range bad {
			if !strings.HasPrefix(e.Error(), "<stdin>:") {
				t.Fatalf("a bad line's error does not name the input and line: %v", e)
			}
		}
		if len(obs) == 0 && len(bad) < 2 {
			t.Fatalf("no observation and no error for %q", data)
		}
		// What was read is JSON: the whole input, or each line of it.
		body := bytes.TrimPrefix(data, []byte("\ufeff"))
		if len(bad) == 0 && !json.Valid(body) {
			for _, line := range bytes.Split(body, []byte("\n")) {
				if line = bytes.TrimSpace(line); len(line) > 0 && !json.Valid(line) {
					t.Fatalf("line %q is not JSON, yet %q was read as %d observations", line, data, len(obs))
				}
			}
		}
		// Numbered in order, a bad line taking its number too.
		for k, o := range obs {
			if o.n < k+1 || o.n > k+1+len(bad) || (k > 0 && o.n <= obs[k-1].n) {
				t.Fatalf("observation %d of %q numbered %d", k, data, o.n)
			}
		}
		for k, o := range obs {
			if len(o.Infected) == 0 || len(o.nodes) != len(o.Infected) {
				t.Fatalf("observation %d of %q: %d ids, %d nodes", k, data, len(o.Infected), len(o.nodes))
			}
		}
	})
}
