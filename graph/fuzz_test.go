package graph

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzRead feeds arbitrary edge lists to Read. Whatever the input, Read
// returns a graph or an error, never panics, and a graph it returns is
// consistent: every id maps back to its index, every arc has its reverse
// in the in-lists, and reading the same bytes again gives the same
// fingerprint. `go test` runs the seeds; `make fuzz` searches further.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"0 1\n1 2\n",
		"a b 0.25\nb c 0.5\n",
		"# comment\n\n10 2 # trailing\n2 007\n",
		"a a\na b\nb a\n",
		"0 1 1.5\n",
		"0 1 0.5\n1 2\n",
		"x\n",
		"1 2 NaN\n",
		"9223372036854775807 1\n-1 0\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, directed bool) {
		g, err := Read(bytes.NewReader(data), "fuzz.edges", Directed(directed))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.edges") {
				t.Fatalf("error does not name the source: %v", err)
			}
			return
		}
		if g.N() == 0 {
			t.Fatal("a graph with no nodes was returned without an error")
		}
		for i, id := range g.IDs() {
			if j, ok := g.Index(id); !ok || j != i {
				t.Fatalf("id %q is node %d but Index gives %d, %v", id, i, j, ok)
			}
		}
		arcs := 0
		for u := range g.N() {
			nbr, w := g.Out(u)
			if len(w) != len(nbr) {
				t.Fatalf("node %d: %d out-arcs but %d weights", u, len(nbr), len(w))
			}
			for k, v := range nbr {
				if !(w[k] >= 0 && w[k] <= 1) || (!g.Weighted() && w[k] != 1) {
					t.Fatalf("node %d: arc to %d has weight %g (weighted %v)", u, v, w[k], g.Weighted())
				}
				if v < 0 || v >= g.N() || v == u {
					t.Fatalf("node %d: arc to %d", u, v)
				}
				in, _ := g.In(v)
				if !slices.Contains(in, u) {
					t.Fatalf("arc %d->%d missing from %d's in-list", u, v, v)
				}
				if !directed {
					back, _ := g.Out(v)
					if !slices.Contains(back, u) {
						t.Fatalf("undirected edge %d-%d has no arc back", u, v)
					}
				}
			}
			arcs += len(nbr)
		}
		if arcs != g.Arcs() {
			t.Fatalf("out-lists hold %d arcs, Arcs() says %d", arcs, g.Arcs())
		}
		again, err := Read(bytes.NewReader(data), "fuzz.edges", Directed(directed))
		if err != nil || again.Fingerprint() != g.Fingerprint() {
			t.Fatalf("reading the same bytes again: %v, fingerprint %s vs %s", err, again.Fingerprint(), g.Fingerprint())
		}
	})
}
