// Package graph holds the immutable graph every other sourcewatch package
// works on: a compressed sparse row (CSR) adjacency over dense node indices
// 0..n-1, the map between those indices and the graph's own node ids, and a
// content fingerprint that ties trained bundles to the graph they were
// trained on.
//
// An undirected edge {u,v} is stored twice, as u->v and v->u, so Out and In
// are the same lists for an undirected graph. Edge weights are infection
// probabilities (the optional third column of an edge list); a graph loaded
// without weights reports Weighted() == false and every weight reads as 1.
//
// The fingerprint is the SHA-256 of the canonical edge list:
//
//	"directed\n" or "undirected\n", then one line "u\tv\tw\n" per edge,
//	sorted by (u, v) as strings, with u <= v for undirected graphs and w
//	formatted with strconv 'g' -1 (omitted, with its tab, when unweighted),
//	and one line "node\tu\n" per node on no edge (an edge list names such
//	a node only in a self-loop, which is dropped), all lines sorted together,
//
// so it depends on the edges and their ids, not on the order of the file,
// its comments or its whitespace.
package graph
