package diffusion

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sourcewatch/sourcewatch/graph"
)

// FuzzReadJSONL feeds arbitrary cascade files to ReadJSONL on a small
// graph. It never panics; an error names the input and line; cascades it
// returns hold only node indices of the graph, sorted and distinct, and
// write back to a file that reads to the same cascades.
func FuzzReadJSONL(f *testing.F) {
	g := graph.New(4, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}, {From: 2, To: 3}}, []string{"a", "b", "c", "d"}, false, false)
	for _, seed := range []string{
		`{"sources":["a"],"infected":["a","b"],"times":{"a":0,"b":1}}`,
		`{"sources":["a"],"infected":["b"],"times":{"b":2},"recovered":{"a":1}}` + "\n\n" + `{"sources":["d"],"infected":["d"]}`,
		`{"sources":[],"infected":[]}`,
		`{"sources":["a","a"],"infected":["a"]}`,
		`{"sources":["x"],"infected":[]}`,
		`{"sources":["a"],"infected":["a"],"times":{"a":-1}}`,
		`{"sources":["a"],"infected":["b"],"times":{"a":3}}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, err := ReadJSONL(bytes.NewReader(data), g, "fuzz.jsonl")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.jsonl:") {
				t.Fatalf("error does not name the input and line: %v", err)
			}
			return
		}
		for k, c := range cs {
			if c.N != g.N() || len(c.Sources) == 0 {
				t.Fatalf("cascade %d: N %d, %d sources", k, c.N, len(c.Sources))
			}
			for _, set := range [][]int{c.Sources, c.Infected} {
				if !slices.IsSorted(set) || len(slices.Compact(slices.Clone(set))) != len(set) {
					t.Fatalf("cascade %d: set %v not sorted and distinct", k, set)
				}
				for _, v := range set {
					if v < 0 || v >= g.N() {
						t.Fatalf("cascade %d: node index %d", k, v)
					}
				}
			}
		}
		var buf bytes.Buffer
		if err := WriteJSONL(&buf, g, cs); err != nil {
			t.Fatalf("writing back what was read: %v", err)
		}
		back, err := ReadJSONL(&buf, g, "again")
		if err != nil {
			t.Fatalf("reading back what was written: %v\n%s", err, buf.Bytes())
		}
		if len(back) != len(cs) {
			t.Fatalf("%d cascades read back, want %d", len(back), len(cs))
		}
		for k := range cs {
			if !slices.Equal(back[k].Sources, cs[k].Sources) || !slices.Equal(back[k].Infected, cs[k].Infected) ||
				!slices.Equal(back[k].Times, cs[k].Times) || !slices.Equal(back[k].Recovered, cs[k].Recovered) {
				t.Fatalf("cascade %d changed in a round trip: %+v -> %+v", k, cs[k], back[k])
			}
		}
	})
}
