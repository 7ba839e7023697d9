package diffusion

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func TestJSONLRoundTrip(t *testing.T) {
	g := loadKarate(t)
	for name, cfg := range modelConfigs() {
		t.Run(name, func(t *testing.T) {
			cs, _, err := Simulate(context.Background(), g, cfg, 20, 4)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, WriteJSONL(&buf, g, cs))
			require.Equal(t, 20, strings.Count(buf.String(), "\n"))
			back, err := ReadJSONL(&buf, g, "cascades.jsonl")
			require.NoError(t, err)
			for k := range back {
				require.Equal(t, k+1, back[k].Line, "a read cascade knows its line")
				back[k].Line = 0
			}
			require.Equal(t, cs, back)
		})
	}
}

func TestJSONLUsesTheGraphsIDs(t *testing.T) {
	g := graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, []string{"alice", `b"ob`, "carol"}, false, false)
	c := Cascade{Sources: []int{1}, Infected: []int{0, 1}, Times: []int{2, 0, -1}, Step: 2, N: 3}
	var buf bytes.Buffer
	require.NoError(t, WriteJSONL(&buf, g, []Cascade{c}))
	require.Equal(t, `{"sources":["b\"ob"],"infected":["alice","b\"ob"],"times":{"alice":2,"b\"ob":0}}`+"\n", buf.String())
	back, err := ReadJSONL(&buf, g, "x")
	require.NoError(t, err)
	c.Line = 1
	require.Equal(t, []Cascade{c}, back)

	require.ErrorContains(t, WriteJSONL(&buf, g, []Cascade{{Sources: []int{5}}}), "cascade 0: node index 5 out of range")
}

func TestReadJSONLReportsEveryBadLine(t *testing.T) {
	g := graph.New(3, nil, []string{"a", "b", "c"}, false, false)
	good := `{"sources":["a"],"infected":["a","b"],"id":"incident-7"}` // an extra key is skipped
	in := "\ufeff" + good + "\n" + `{"sources":["x"],"infected":["a"]}` + "\n" + good + "\n" + `{"infected":["a"]}` + "\n"
	_, err := ReadJSONL(strings.NewReader(in), g, "c.jsonl")
	require.EqualError(t, err, "c.jsonl:2: unknown node \"x\" in sources (the graph's ids look like \"a\", \"b\", \"c\")\nc.jsonl:4: missing \"sources\" (its keys: \"infected\")")

	var many strings.Builder
	for range 2 * maxReadErrors {
		many.WriteString("{}\n")
	}
	_, err = ReadJSONL(strings.NewReader(many.String()), g, "c.jsonl")
	require.ErrorContains(t, err, "c.jsonl:10: missing \"sources\"\nc.jsonl: more than 10 bad lines; stopped reading at line 11")
	require.NotContains(t, err.Error(), "c.jsonl:11:")

	cs, err := ReadJSONL(strings.NewReader("\ufeff"+good+"\n"), g, "bom.jsonl")
	require.NoError(t, err, "a byte-order mark is skipped")
	require.Len(t, cs, 1)
}

// A file in another encoding, or with CR alone ending its lines, is
// refused once, saying so, not ten times as the byte JSON trips on;
// text that is not UTF-8, which encoding/json would read as U+FFFD, is
// named; a byte-order mark on a later line (two files joined) is
// skipped; a last line cut short says so.
func TestReadJSONLNamesTheEncoding(t *testing.T) {
	g := graph.New(3, nil, []string{"a", "b", "c"}, false, false)
	good := `{"sources":["a"],"infected":["a","b"]}`
	utf16 := func(bom bool) string {
		var b []byte
		if bom {
			b = append(b, 0xff, 0xfe)
		}
		for _, r := range good + "\r\n" + good + "\r\n" {
			b = append(b, byte(r), 0)
		}
		return string(b)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"utf-16", utf16(true), "c.jsonl:1: UTF-16 text (what Windows tools call Unicode, and PowerShell 5's > writes): JSON lines are UTF-8; convert the file (iconv -f utf-16 -t utf-8)"},
		{"utf-16 without a mark", utf16(false), "c.jsonl:1: UTF-16 text"},
		{"CR line ends", good + "\r" + good + "\r" + good + "\r", "c.jsonl:1: carriage returns inside the line: the file ends its lines with CR alone, as old Mac tools did; convert them to newlines (tr '\\r' '\\n')"},
		{"a raw CR in an id", good + "\n" + `{"sources":["a"],"infected":["a` + "\r" + `b"],"times":{"a":0}}` + "\n" + good + "\n" + `{}` + "\n", "c.jsonl:2: bad JSON: invalid character '\\r' in string literal\nc.jsonl:4: missing"},
		{"latin-1", good + "\n" + `{"sources":["a"],"infected":["Zo` + "\xeb" + `"]}` + "\n", "c.jsonl:2: unknown node \"Zo\ufffd\" (\"Zo\\ufffd\") in infected" + ` (the graph's ids look like "a", "b", "c") (the line is not valid UTF-8, whose bad bytes read as U+FFFD: convert the file, e.g. iconv -f latin1 -t utf-8)`},
		{"NUL bytes", good + "\n\x00\x00\x00\n\x00\n", "c.jsonl:2: NUL bytes: binary data, not JSON lines"},
		{"gzip", "\x1f\x8b\x08\x08\x00\x00\nbinary\x00\n\x00", "c.jsonl:1: gzip-compressed: decompress it first (gunzip -k)"},
		{"zip", "PK\x03\x04\x14\x00\nbinary\x00\n", "c.jsonl:1: a zip archive: unzip it first"},
		{"cut short", good + "\n" + `{"sources":["a"],"infe`, "c.jsonl:2: bad JSON: unexpected end of JSON input (the file's last line, which has no newline: cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(tc.in), g, "c.jsonl")
			require.ErrorContains(t, err, tc.want)
			if !strings.Contains(tc.want, "\n") {
				require.NotContains(t, err.Error(), "\n", "one error, not one per line")
			}
		})
	}
	cs, err := ReadJSONL(strings.NewReader("\ufeff"+good+"\n\ufeff"+good+"\r\n"), g, "c.jsonl")
	require.NoError(t, err, "a byte-order mark where a joined file began")
	require.Len(t, cs, 2)
	cs, err = ReadJSONL(strings.NewReader(`{"sources":["a"],"infected":["a"],"region":"Z`+"\xfc"+`rich"}`+"\n"), g, "c.jsonl")
	require.NoError(t, err, "Latin-1 in a key that is skipped is read as before")
	require.Len(t, cs, 1)
}

func TestReadJSONLWithoutTimes(t *testing.T) {
	g := graph.New(3, nil, nil, false, false)
	cs, err := ReadJSONL(strings.NewReader("\n{\"sources\":[\"2\"],\"infected\":[\"2\",\"0\"]}\n\n"), g, "obs")
	require.NoError(t, err)
	require.Equal(t, []Cascade{{Sources: []int{2}, Infected: []int{0, 2}, N: 3, Line: 2}}, cs, "blank lines count")
	require.Equal(t, []float64{1, 0, 1}, cs[0].Y(nil))
}

func TestReadJSONLDropTimes(t *testing.T) {
	g := graph.New(4, nil, nil, false, false)
	in := `{"sources":["0"],"infected":["0","1"],"times":{"0":0,"1":2},"recovered":{}}
{"sources":["0"],"infected":["1"],"times":{"0":0,"1":1},"recovered":{"0":3}}
`
	cs, err := ReadJSONL(strings.NewReader(in), g, "c.jsonl", DropTimes())
	require.NoError(t, err)
	// A step per node of the graph for each cascade is what a big file
	// cost; what train and eval read is kept.
	require.Equal(t, []Cascade{
		{Sources: []int{0}, Infected: []int{0, 1}, Step: 2, N: 4, Line: 1},
		{Sources: []int{0}, Infected: []int{1}, Recovered: []int{3, -1, -1, -1}, Step: 3, N: 4, Line: 2},
	}, cs)
	full, err := ReadJSONL(strings.NewReader(in), g, "c.jsonl")
	require.NoError(t, err)
	for i := range cs {
		require.Equal(t, full[i].Key(), cs[i].Key(), "the same cascade, for the copies check and the paired intervals")
	}
	require.NotNil(t, full[0].Times, "without the option, Times are kept")

	// Still checked.
	_, err = ReadJSONL(strings.NewReader(`{"sources":["0"],"infected":["0"],"times":{"0":1}}`), g, "c.jsonl", DropTimes())
	require.ErrorContains(t, err, `c.jsonl:1: source "0" has step 1 in "times", want 0`)
}

func TestReadJSONLErrorsNameTheLine(t *testing.T) {
	g := graph.New(3, nil, []string{"a", "b", "c"}, false, false)
	good := `{"sources":["a"],"infected":["a","b"],"times":{"a":0,"b":1}}`
	for _, tc := range []struct {
		name, line, want string
	}{
		{"unknown source", `{"sources":["x"],"infected":[]}`, `c.jsonl:2: unknown node "x" in sources`},
		{"unknown infected", `{"sources":["a"],"infected":["zz"]}`, `c.jsonl:2: unknown node "zz" in infected`},
		{"unknown in times", `{"sources":["a"],"infected":["a"],"times":{"a":0,"q":3}}`, `c.jsonl:2: unknown node "q" in times`},
		{"bad JSON", `{"sources":["a"],`, `c.jsonl:2: bad JSON`},
		{"wrong type", `{"sources":"a","infected":[]}`, `c.jsonl:2: "sources" holds a JSON string where it wants an array of node ids`},
		{"number ids", `{"sources":["a"],"infected":[1,2]}`, `c.jsonl:2: "infected" holds a number: node ids are strings ("7", not 7)`},
		{"fractional step", `{"sources":["a"],"infected":["a"],"times":{"a":0.5}}`, `c.jsonl:2: "times" holds a JSON number 0.5 where it wants`},
		{"not an object", `["a"]`, `c.jsonl:2: found a JSON array, not an object`},
		{"nothing infected", `{"sources":["a"],"infected":[]}`, `c.jsonl:2: "infected" is empty and nothing recovered`},
		{"source without time", `{"sources":["a","b"],"infected":["a"],"times":{"a":0}}`, `c.jsonl:2: source "b" is not in "times"`},
		{"missing sources", `{"infected":["a"]}`, `c.jsonl:2: missing "sources"`},
		{"empty sources", `{"sources":[],"infected":["a"]}`, `c.jsonl:2: "sources" is empty`},
		{"missing infected", `{"sources":["a"]}`, `c.jsonl:2: missing "infected"`},
		{"misspelt infected", `{"sources":["a"],"infected ":["a"],"id":7}`, `c.jsonl:2: missing "infected" (its keys: "id", "infected ", "sources")`},
		{"duplicate", `{"sources":["a","a"],"infected":["a"]}`, `c.jsonl:2: node "a" listed twice in sources`},
		{"key twice", `{"sources":["a"],"infected":["a","b"],"Sources":["b"]}`, `c.jsonl:2: "Sources" is given twice (keys match in any case)`},
		{"negative step", `{"sources":["a"],"infected":["a"],"times":{"a":-2}}`, `c.jsonl:2: node "a" has negative step -2 in times`},
		{"negative recovery", `{"sources":["a"],"infected":["a"],"recovered":{"b":-2}}`, `c.jsonl:2: node "b" has negative step -2 in recovered (train and eval read only which nodes recovered: any step >= 0 does)`},
		{"infected without time", `{"sources":["a"],"infected":["a","c"],"times":{"a":0}}`, `c.jsonl:2: infected node "c" has no time`},
		{"source not at zero", `{"sources":["a"],"infected":["a"],"times":{"a":3}}`, `c.jsonl:2: source "a" has step 3 in "times", want 0`},
		{"a timestamp for a step", `{"sources":["a"],"infected":["a","b"],"times":{"a":1700000000,"b":1700000042}}`, `c.jsonl:2: source "a" has step 1700000000 in "times", want 0 (times are steps counted from the spread's start, every source at 0; train and eval read none, so a recorded file may leave "times" out)`},
		{"some times unknown", `{"sources":["a"],"infected":["a","b"],"times":{"a":0}}`, `c.jsonl:2: infected node "b" has no time (times are steps`},
		{"infected and recovered", `{"sources":["a"],"infected":["a","b"],"recovered":{"b":2}}`, `c.jsonl:2: node "b" is in both "infected" and "recovered"`},
		// A null decoded as "" or 0 read as the unknown node "" or a
		// step 0 that the file never gave.
		{"null id", `{"sources":["a"],"infected":["a",null]}`, `c.jsonl:2: infected[1] is null: node ids are strings`},
		{"null source", `{"sources":[null],"infected":["a"]}`, `c.jsonl:2: sources[0] is null`},
		{"null step", `{"sources":["a"],"infected":["a","b"],"times":{"a":0,"b":null}}`, `c.jsonl:2: node "b" has step null in times: want a whole step (times are steps counted from the spread's start`},
		{"null recovery", `{"sources":["a"],"infected":["a"],"recovered":{"b":null}}`, `c.jsonl:2: node "b" has step null in recovered: want a whole step (train and eval read only which nodes recovered: any step >= 0 does)`},
		{"null infected", `{"sources":["a"],"Infected":null}`, `c.jsonl:2: "Infected" is null: want an array of node ids`},
		{"time of an uninfected node", `{"sources":["a"],"infected":["a"],"times":{"a":0,"c":1}}`, `c.jsonl:2: node "c" has a time in "times" but is neither infected nor recovered`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(good+"\n"+tc.line+"\n"+good+"\n"), g, "c.jsonl")
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			// An unknown id, and only that, is graph.ErrUnknownNode
			// through the line's context and errors.Join.
			require.Equal(t, strings.HasPrefix(tc.name, "unknown"), errors.Is(err, graph.ErrUnknownNode), "%v", err)
		})
	}
}

func TestRepeatedKey(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		names []string
		want  string
	}{
		{`{"node":"1","Node":"2"}`, nil, "Node"},
		{`{"node":"1","state":"infected"}`, nil, ""},
		{`{"meta":1,"meta":2,"sources":[]}`, []string{"sources"}, ""},
		{`{"meta":1,"sources":[],"SOURCES":[]}`, []string{"sources"}, "SOURCES"},
		{`{"sources":["a"],"infected":["a"],"ſources":["b"]}`, []string{"sources"}, "ſources"}, // long s: encoding/json folds it too
		{`["node","node"]`, nil, ""},
		{`{"a":`, nil, ""},
	} {
		require.Equal(t, tc.want, RepeatedKey([]byte(tc.raw), tc.names...), tc.raw)
	}
}
