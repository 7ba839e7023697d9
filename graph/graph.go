package graph

import (
	"golang.org/x/text/unicode/norm"

	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrEmpty is returned when a graph would have no nodes.
var ErrEmpty = errors.New("graph has no nodes")

// ErrUnknownNode is wrapped by every error that reports an id a graph
// lacks (UnknownNode, so Lookup and the readers of other packages that
// name nodes by id, as diffusion.ReadJSONL), so that a caller can tell a
// wrong id in its input, which another id fixes, from other failures
// with errors.Is. The message says which id and what the graph's ids look
// like.
var ErrUnknownNode = errors.New("unknown node")

// Edge is one edge between dense node indices. W is the edge's weight
// (infection probability); it is ignored when the graph is unweighted.
type Edge struct {
	From, To int
	W        float64
}

// Stats counts what loading dropped or found.
type Stats struct {
	// Edges is the number of distinct edges kept (an undirected edge counts once).
	Edges int
	// SelfLoops is the number of u-u lines dropped.
	SelfLoops int
	// Duplicates is the number of repeated edges dropped (the first weight wins).
	Duplicates int
	// Reciprocal is, in an undirected graph, how many of the Duplicates
	// repeated an edge the other way round (v u after u v). A file
	// listing some edges both ways and the rest one way is often a
	// directed graph read without Directed.
	Reciprocal int
}

// Graph is an immutable graph in CSR form. The zero value is not usable;
// build one with Load, Read or New.
type Graph struct {
	ids      []string
	index    map[string]int
	directed bool
	weighted bool

	outOff []int
	outTo  []int
	outW   []float64
	inOff  []int
	inFrom []int
	inW    []float64

	stats       Stats
	fingerprint string
}

// New builds a graph on n nodes from edges between dense indices. ids names
// the nodes (len n, distinct); nil names them "0".."n-1". Self-loops and
// duplicate edges are dropped and counted in Stats. New panics if an edge
// index is out of range or ids has the wrong length or repeats an id, since
// those are programming errors; file input goes through Read, which reports
// them as errors.
func New(n int, edges []Edge, ids []string, directed, weighted bool) *Graph {
	if n < 0 {
		panic("graph: negative node count")
	}
	if ids == nil {
		ids = make([]string, n)
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
	} else {
		if len(ids) != n {
			panic(fmt.Sprintf("graph: %d ids for %d nodes", len(ids), n))
		}
		ids = append([]string(nil), ids...)
	}
	index := make(map[string]int, n)
	for i, id := range ids {
		if _, dup := index[id]; dup {
			panic(fmt.Sprintf("graph: duplicate node id %q", id))
		}
		index[id] = i
	}
	g := &Graph{ids: ids, index: index, directed: directed, weighted: weighted}

	type key struct{ a, b int }
	// Whether the edge kept was given as b a (undirected only).
	seen := make(map[key]bool, len(edges))
	kept := make([]Edge, 0, len(edges))
	for _, e := range edges {
		if e.From < 0 || e.From >= n || e.To < 0 || e.To >= n {
			panic(fmt.Sprintf("graph: edge %d-%d out of range for %d nodes", e.From, e.To, n))
		}
		if e.From == e.To {
			g.stats.SelfLoops++
			continue
		}
		k := key{e.From, e.To}
		swapped := !directed && k.a > k.b
		if swapped {
			k.a, k.b = k.b, k.a
		}
		if first, dup := seen[k]; dup {
			g.stats.Duplicates++
			if first != swapped {
				g.stats.Reciprocal++
			}
			continue
		}
		seen[k] = swapped
		if !weighted {
			e.W = 1
		}
		kept = append(kept, e)
	}
	g.stats.Edges = len(kept)

	arcs := kept
	if !directed {
		arcs = make([]Edge, 0, 2*len(kept))
		for _, e := range kept {
			arcs = append(arcs, e, Edge{From: e.To, To: e.From, W: e.W})
		}
	}
	g.outOff, g.outTo, g.outW = buildCSR(n, arcs, false)
	if directed {
		g.inOff, g.inFrom, g.inW = buildCSR(n, arcs, true)
	} else {
		g.inOff, g.inFrom, g.inW = g.outOff, g.outTo, g.outW
	}
	g.fingerprint = fingerprint(ids, kept, directed, weighted)
	return g
}

// buildCSR groups arcs by source (or by target when reverse is set), with
// each row's neighbours sorted by index so iteration order is deterministic.
func buildCSR(n int, arcs []Edge, reverse bool) (off, nbr []int, w []float64) {
	off = make([]int, n+1)
	for _, e := range arcs {
		row := e.From
		if reverse {
			row = e.To
		}
		off[row+1]++
	}
	for i := 0; i < n; i++ {
		off[i+1] += off[i]
	}
	nbr = make([]int, len(arcs))
	w = make([]float64, len(arcs))
	next := append([]int(nil), off[:n]...)
	for _, e := range arcs {
		row, col := e.From, e.To
		if reverse {
			row, col = e.To, e.From
		}
		nbr[next[row]] = col
		w[next[row]] = e.W
		next[row]++
	}
	for i := 0; i < n; i++ {
		sort.Sort(byIndex{nbr[off[i]:off[i+1]], w[off[i]:off[i+1]]})
	}
	return off, nbr, w
}

type byIndex struct {
	nbr []int
	w   []float64
}

func (b byIndex) Len() int           { return len(b.nbr) }
func (b byIndex) Less(i, j int) bool { return b.nbr[i] < b.nbr[j] }
func (b byIndex) Swap(i, j int) {
	b.nbr[i], b.nbr[j] = b.nbr[j], b.nbr[i]
	b.w[i], b.w[j] = b.w[j], b.w[i]
}

func fingerprint(ids []string, edges []Edge, directed, weighted bool) string {
	lines := make([]string, len(edges), len(edges)+1)
	touched := make([]bool, len(ids))
	for i, e := range edges {
		touched[e.From], touched[e.To] = true, true
		a, b := ids[e.From], ids[e.To]
		if !directed && a > b {
			a, b = b, a
		}
		if weighted {
			lines[i] = a + "\t" + b + "\t" + strconv.FormatFloat(e.W, 'g', -1, 64) + "\n"
		} else {
			lines[i] = a + "\t" + b + "\n"
		}
	}
	// A node on no edge (in a file, one named only by a self-loop) counts
	// in n and in the numbering, so it must count in the fingerprint; a
	// graph without one keeps the fingerprint of its edges alone.
	for i, t := range touched {
		if !t {
			lines = append(lines, "node\t"+ids[i]+"\n")
		}
	}
	sort.Strings(lines)
	h := sha256.New()
	if directed {
		h.Write([]byte("directed\n"))
	} else {
		h.Write([]byte("undirected\n"))
	}
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// N returns the number of nodes.
func (g *Graph) N() int { return len(g.ids) }

// Directed reports whether edges have a direction.
func (g *Graph) Directed() bool { return g.directed }

// Weighted reports whether edges carry their own weights.
func (g *Graph) Weighted() bool { return g.weighted }

// Stats reports the kept edge count and what was dropped while building.
func (g *Graph) Stats() Stats { return g.stats }

// Fingerprint returns the hex SHA-256 of the canonical edge list (see the
// package documentation).
func (g *Graph) Fingerprint() string { return g.fingerprint }

// ID returns node i's external id.
func (g *Graph) ID(i int) string { return g.ids[i] }

// IDs returns all external ids in index order. The slice must not be modified.
func (g *Graph) IDs() []string { return g.ids }

// Index returns the dense index of the node with external id, and whether
// such a node exists.
func (g *Graph) Index(id string) (int, bool) {
	i, ok := g.index[id]
	return i, ok
}

// Out returns node i's out-neighbours (sorted by index) and the weights of
// the arcs to them. For an undirected graph these are all neighbours. The
// slices alias the graph and must not be modified.
func (g *Graph) Out(i int) (nbr []int, w []float64) {
	a, b := g.outOff[i], g.outOff[i+1]
	return g.outTo[a:b], g.outW[a:b]
}

// In returns node i's in-neighbours and the weights of the arcs from them.
// For an undirected graph In and Out are equal.
func (g *Graph) In(i int) (nbr []int, w []float64) {
	a, b := g.inOff[i], g.inOff[i+1]
	return g.inFrom[a:b], g.inW[a:b]
}

// Degree returns node i's out-degree (its degree when undirected).
func (g *Graph) Degree(i int) int { return g.outOff[i+1] - g.outOff[i] }

// InDegree returns node i's in-degree.
func (g *Graph) InDegree(i int) int { return g.inOff[i+1] - g.inOff[i] }

// Arcs returns the number of stored arcs: edges for a directed graph, twice
// the edges for an undirected one.
func (g *Graph) Arcs() int { return len(g.outTo) }

// CSR exposes the out-adjacency arrays: row i's arcs are
// to[off[i]:off[i+1]] with weights w[off[i]:off[i+1]]. They alias the graph
// and must not be modified; they exist for hot loops that cannot afford a
// call per node.
func (g *Graph) CSR() (off, to []int, w []float64) { return g.outOff, g.outTo, g.outW }

// InCSR is CSR for the in-adjacency.
func (g *Graph) InCSR() (off, from []int, w []float64) { return g.inOff, g.inFrom, g.inW }

// Edges returns the distinct edges (an undirected edge once, From < To).
func (g *Graph) Edges() []Edge {
	edges := make([]Edge, 0, g.stats.Edges)
	for u := 0; u < g.N(); u++ {
		nbr, w := g.Out(u)
		for k, v := range nbr {
			if !g.directed && v < u {
				continue
			}
			edges = append(edges, Edge{From: u, To: v, W: w[k]})
		}
	}
	return edges
}

// WithoutWeights returns g with its edge weights dropped: the same nodes,
// ids and arcs, every weight 1 and Weighted false, so a fingerprint of its
// own. It returns g itself when g has no weights.
func (g *Graph) WithoutWeights() *Graph {
	if !g.weighted {
		return g
	}
	return New(g.N(), g.Edges(), g.ids, g.directed, false)
}

// Lookup maps external ids to indices, failing on the first unknown id
// with UnknownNode's error (ErrUnknownNode).
func (g *Graph) Lookup(ids []string) ([]int, error) {
	out := make([]int, len(ids))
	for k, id := range ids {
		i, ok := g.index[id]
		if !ok {
			return nil, g.UnknownNode(id, "")
		}
		out[k] = i
	}
	return out, nil
}

// SameText returns g's id that id differs from only invisibly, and how:
// in Unicode normalization (a decomposed "ë", NFD, where g has the
// composed one, NFC, or the other way round), by white space around
// it, or by zero-width characters (a byte-order mark, a zero-width space
// or word joiner, which no id of g holds: Read refuses them). Ids are
// compared byte for byte, so such an id names no node of g; this is for
// the error that says so. ok is false when g has no such id.
func (g *Graph) SameText(id string) (match, how string, ok bool) {
	if visible := strings.Map(dropInvisible, id); visible != id {
		const zw = "without its zero-width characters (a byte-order mark, zero-width space or word joiner)"
		if _, found := g.index[visible]; found {
			return visible, zw, true
		}
		if match, how, ok := g.sameText(visible); ok {
			return match, how + " and " + zw, true
		}
		return "", "", false
	}
	return g.sameText(id)
}

// dropInvisible is strings.Map's mapping that drops the zero-width
// characters invisible reports.
func dropInvisible(r rune) rune {
	if invisible(r) {
		return -1
	}
	return r
}

// sameText is SameText for an id without zero-width characters.
func (g *Graph) sameText(id string) (match, how string, ok bool) {
	trimmed := strings.TrimSpace(id)
	for _, c := range []struct{ id, how string }{
		{norm.NFC.String(id), "composed (NFC)"},
		{norm.NFD.String(id), "decomposed (NFD)"},
		{trimmed, "without the white space around it"},
		{norm.NFC.String(trimmed), "composed (NFC) and without the white space around it"},
		{norm.NFD.String(trimmed), "decomposed (NFD) and without the white space around it"},
	} {
		if c.id == id {
			continue
		}
		if _, found := g.index[c.id]; found {
			return c.id, c.how, true
		}
	}
	// A whole number written as a float ("7.0"): what an integer id
	// column becomes in pandas once it has a gap, and str() then writes.
	if whole, frac, ok := strings.Cut(trimmed, "."); ok && frac != "" && strings.Trim(frac, "0") == "" && isWhole(whole) {
		if _, found := g.index[whole]; found {
			how := `without its ".` + frac + `" (a whole number written as a float, as pandas writes an integer column with a gap)`
			if trimmed != id {
				how = "without the white space around it and " + how
			}
			return whole, how, true
		}
	}
	return "", "", false
}

// isWhole reports whether s is a whole number's digits, perhaps signed.
func isWhole(s string) bool {
	s = strings.TrimPrefix(s, "-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// SameTextHint is what a message about id, an id g lacks, adds where g
// has one of the same text (SameText): id escaped, where that shows what
// %q does not (a decomposed "ë"), and g's id; "" where g has none.
func (g *Graph) SameTextHint(id string) string {
	match, how, ok := g.SameText(id)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s; it has %s, the same text %s: ids are compared byte for byte", escapedID(id), strconv.QuoteToASCII(match), how)
}

// escapedID is " (id escaped to ASCII)" where that differs from %q of id
// (invisible differences: a decomposed "ë", a no-break space), else "".
func escapedID(id string) string {
	if ascii := strconv.QuoteToASCII(id); ascii != strconv.Quote(id) {
		return " (" + ascii + ")"
	}
	return ""
}

// UnknownNode is the error for an id g lacks, found where (" in sources",
// or ""), wrapping ErrUnknownNode: it shows the id escaped too when it
// holds invisible differences (a decomposed "ë", a no-break space), g's id
// of the same text where it has one (SameText), and otherwise what g's ids
// look like, for an id of another naming scheme. Code outside this package
// that finds an unknown id reports it with UnknownNode, so its callers can
// test for ErrUnknownNode.
func (g *Graph) UnknownNode(id, where string) error {
	if match, how, ok := g.SameText(id); ok {
		return fmt.Errorf("%w %q%s%s: the graph has %s, the same text %s; ids are compared byte for byte, so send the graph's", ErrUnknownNode, id, escapedID(id), where, strconv.QuoteToASCII(match), how)
	}
	return fmt.Errorf("%w %q%s%s (the graph's ids look like %s)", ErrUnknownNode, id, escapedID(id), where, g.idsLookLike())
}

// UnknownIDHint is what a message about id, an id g lacks, adds: the
// SameTextHint where g has an id of the same text, and otherwise id
// escaped where that shows more and what g's ids look like, for an id of
// another naming scheme.
func (g *Graph) UnknownIDHint(id string) string {
	if h := g.SameTextHint(id); h != "" {
		return h
	}
	return escapedID(id) + " (the graph's ids look like " + g.idsLookLike() + ")"
}

// idsLookLike quotes g's first three ids.
func (g *Graph) idsLookLike() string {
	var like []string
	for _, x := range g.ids[:min(3, len(g.ids))] {
		like = append(like, strconv.Quote(x))
	}
	return strings.Join(like, ", ")
}

// Names maps indices to external ids.
func (g *Graph) Names(idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = g.ids[i]
	}
	return out
}

// String describes the graph in one line.
func (g *Graph) String() string {
	var b strings.Builder
	kind, what := "undirected", "edges"
	if g.directed {
		// Arcs, as bundle inspect counts them.
		kind, what = "directed", "arcs"
	}
	fmt.Fprintf(&b, "%s graph, %d nodes, %d %s", kind, g.N(), g.stats.Edges, what)
	if g.weighted {
		b.WriteString(", weighted")
	}
	// What the loader dropped, so a messy file does not shrink unseen.
	var dropped []string
	if s := g.stats.SelfLoops; s > 0 {
		dropped = append(dropped, plural(s, "self-loop"))
	}
	if d := g.stats.Duplicates; d > 0 {
		dropped = append(dropped, plural(d, "duplicate "+strings.TrimSuffix(what, "s")))
	}
	if len(dropped) > 0 {
		fmt.Fprintf(&b, " (%s dropped)", strings.Join(dropped, " and "))
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
