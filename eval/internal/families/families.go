package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// A family is one synthetic graph, unlike the four of the README's
// tables, built from a fixed seed so every machine writes the same file.
type family struct {
	name     string
	about    string
	directed bool
	build    func(rng *rand.Rand) []edge
}

// An edge is one line of an edge list, u v, with the ids as written.
type edge struct{ u, v string }

func itoa(i int) string { return strconv.Itoa(i) }

// families lists the graphs of the sweep. Sizes stay at 300-1,000 nodes
// so one eval of 150 cascades takes seconds, not minutes.
var families = []family{
	{name: "ba2", about: "Barabási-Albert, 500 nodes, m = 2",
		build: func(rng *rand.Rand) []edge { return named(barabasiAlbert(rng, 500, 2, 0), itoa) }},
	{name: "ba3", about: "Barabási-Albert, 800 nodes, m = 3",
		build: func(rng *rand.Rand) []edge { return named(barabasiAlbert(rng, 800, 3, 0), itoa) }},
	{name: "ba2-string-ids", about: "Barabási-Albert, 400 nodes, m = 2, ids like user-01a3",
		build: func(rng *rand.Rand) []edge {
			return named(barabasiAlbert(rng, 400, 2, 0), func(i int) string { return fmt.Sprintf("user-%04x", 7919*i%65536) })
		}},
	{name: "ba2-sparse-ids", about: "Barabási-Albert, 400 nodes, m = 2, random 10-digit ids",
		build: func(rng *rand.Rand) []edge {
			ids := sparseIDs(rng, 400)
			return named(barabasiAlbert(rng, 400, 2, 0), func(i int) string { return ids[i] })
		}},
	{name: "tree", about: "random recursive tree, 600 nodes",
		build: func(rng *rand.Rand) []edge { return named(randomTree(rng, 600), itoa) }},
	{name: "components4", about: "four Barabási-Albert components (m = 2) of 200, 150, 120 and 80 nodes",
		build: func(rng *rand.Rand) []edge {
			var out [][2]int
			offset := 0
			for _, n := range []int{200, 150, 120, 80} {
				out = append(out, barabasiAlbert(rng, n, 2, offset)...)
				offset += n
			}
			return named(out, itoa)
		}},
	{name: "heavy-tail-leaves", about: "Barabási-Albert core of 300 nodes (m = 2) with 300 leaves attached by degree",
		build: func(rng *rand.Rand) []edge {
			return named(withLeaves(rng, barabasiAlbert(rng, 300, 2, 0), 300, 300), itoa)
		}},
	{name: "ba2-directed", about: "Barabási-Albert, 500 nodes, m = 2, each edge an arc old -> new, half also new -> old",
		directed: true,
		build:    func(rng *rand.Rand) []edge { return named(oriented(rng, barabasiAlbert(rng, 500, 2, 0), 0.5), itoa) }},
	{name: "sbm6", about: "stochastic block model, 6 blocks of 100, p_in 0.06, p_out 0.002",
		build: func(rng *rand.Rand) []edge { return named(blocks(rng, 6, 100, 0.06, 0.002), itoa) }},
	{name: "er6", about: "Erdős-Rényi, 600 nodes, mean degree 6",
		build: func(rng *rand.Rand) []edge { return named(blocks(rng, 1, 600, 6.0/599, 0), itoa) }},
	{name: "grid30", about: "30 x 30 lattice",
		build: func(*rand.Rand) []edge { return named(lattice(30), itoa) }},

	// Small enough for the bayes control's exact posterior (at most
	// about 20 infected nodes a snapshot): the -ceiling runs.
	{name: "ba2-30", about: "Barabási-Albert, 30 nodes, m = 2",
		build: func(rng *rand.Rand) []edge { return named(barabasiAlbert(rng, 30, 2, 0), itoa) }},
	{name: "tree-30", about: "random recursive tree, 30 nodes",
		build: func(rng *rand.Rand) []edge { return named(randomTree(rng, 30), itoa) }},
	{name: "grid6", about: "6 x 6 lattice",
		build: func(*rand.Rand) []edge { return named(lattice(6), itoa) }},
	{name: "er4-30", about: "Erdős-Rényi, 30 nodes, mean degree 4",
		build: func(rng *rand.Rand) []edge { return named(blocks(rng, 1, 30, 4.0/29, 0), itoa) }},
}

// named writes index pairs with the ids id(i).
func named(pairs [][2]int, id func(int) string) []edge {
	out := make([]edge, len(pairs))
	for i, p := range pairs {
		out[i] = edge{id(p[0]), id(p[1])}
	}
	return out
}

// barabasiAlbert grows n nodes from a clique of m+1, each new node linked
// to m distinct earlier ones chosen with probability proportional to
// degree; node indices start at offset.
func barabasiAlbert(rng *rand.Rand, n, m, offset int) [][2]int {
	var pairs [][2]int
	var ends []int // every edge's two ends: a degree-weighted urn
	for i := 0; i <= m; i++ {
		for j := 0; j < i; j++ {
			pairs = append(pairs, [2]int{offset + j, offset + i})
			ends = append(ends, j, i)
		}
	}
	for v := m + 1; v < n; v++ {
		chosen := map[int]bool{}
		for len(chosen) < m {
			chosen[ends[rng.IntN(len(ends))]] = true
		}
		for u := 0; u < v; u++ { // in index order, so the file is the same on every run
			if chosen[u] {
				pairs = append(pairs, [2]int{offset + u, offset + v})
				ends = append(ends, u, v)
			}
		}
	}
	return pairs
}

// randomTree links each node i > 0 to a uniformly chosen earlier node.
func randomTree(rng *rand.Rand, n int) [][2]int {
	pairs := make([][2]int, 0, n-1)
	for v := 1; v < n; v++ {
		pairs = append(pairs, [2]int{rng.IntN(v), v})
	}
	return pairs
}

// withLeaves adds leaves nodes, numbered from core, each linked to one
// core node chosen with probability proportional to its core degree.
func withLeaves(rng *rand.Rand, pairs [][2]int, core, leaves int) [][2]int {
	var ends []int
	for _, p := range pairs {
		ends = append(ends, p[0], p[1])
	}
	for l := 0; l < leaves; l++ {
		pairs = append(pairs, [2]int{ends[rng.IntN(len(ends))], core + l})
	}
	return pairs
}

// oriented keeps each pair as the arc first -> second and adds the
// reverse arc with probability back.
func oriented(rng *rand.Rand, pairs [][2]int, back float64) [][2]int {
	out := make([][2]int, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, p)
		if rng.Float64() < back {
			out = append(out, [2]int{p[1], p[0]})
		}
	}
	return out
}

// blocks is a stochastic block model of k blocks of size nodes: a pair
// in one block is linked with probability in, across blocks with out.
func blocks(rng *rand.Rand, k, size int, in, out float64) [][2]int {
	var pairs [][2]int
	n := k * size
	for u := 0; u < n; u++ {
		for v := u + 1; v < n; v++ {
			p := out
			if u/size == v/size {
				p = in
			}
			if rng.Float64() < p {
				pairs = append(pairs, [2]int{u, v})
			}
		}
	}
	return pairs
}

// lattice is the side x side grid with its four-neighbour edges.
func lattice(side int) [][2]int {
	var pairs [][2]int
	for r := 0; r < side; r++ {
		for c := 0; c < side; c++ {
			v := r*side + c
			if c+1 < side {
				pairs = append(pairs, [2]int{v, v + 1})
			}
			if r+1 < side {
				pairs = append(pairs, [2]int{v, v + side})
			}
		}
	}
	return pairs
}

// sparseIDs draws n distinct 10-digit ids.
func sparseIDs(rng *rand.Rand, n int) []string {
	seen := map[int64]bool{}
	ids := make([]string, 0, n)
	for len(ids) < n {
		id := 1_000_000_000 + rng.Int64N(9_000_000_000)
		if !seen[id] {
			seen[id] = true
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	return ids
}
