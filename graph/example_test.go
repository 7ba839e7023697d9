package graph_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sourcewatch/sourcewatch/graph"
)

// Read takes an edge list from any reader (Load opens a file): one edge
// "u v" or "u v w" per line, '#' comments, ids of any text. The name is
// what errors call the input. Ids map to dense indices with Lookup, and
// an id the graph lacks is ErrUnknownNode.
func ExampleRead() {
	edges := `# a small contact network
alice bob
bob carol
carol alice
carol dave
dave dave
`
	g, err := graph.Read(strings.NewReader(edges), "contacts.edges")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g)
	idx, err := g.Lookup([]string{"carol"})
	if err != nil {
		fmt.Println(err)
		return
	}
	nbr, _ := g.Out(idx[0])
	fmt.Println("carol's neighbours:", g.Names(nbr))

	_, err = g.Lookup([]string{"eve"})
	fmt.Println(errors.Is(err, graph.ErrUnknownNode), err)
	// Output:
	// undirected graph, 4 nodes, 4 edges (1 self-loop dropped)
	// carol's neighbours: [alice bob dave]
	// true unknown node "eve" (the graph's ids look like "alice", "bob", "carol")
}
