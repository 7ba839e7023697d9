package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func TestFamiliesLoadWithTheirSizesAndRepeat(t *testing.T) {
	nodes := map[string]int{"ba2": 500, "ba3": 800, "ba2-string-ids": 400, "ba2-sparse-ids": 400,
		"tree": 600, "components4": 550, "heavy-tail-leaves": 600, "ba2-directed": 500,
		"sbm6": 600, "er6": 600, "grid30": 900, "ba2-30": 30, "tree-30": 30, "grid6": 36, "er4-30": 30}
	require.Len(t, families, len(nodes))
	dir := t.TempDir()
	for i, f := range families {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join(dir, f.name+".edges")
			require.NoError(t, writeFamily(path, f, uint64(i+1)))
			first, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, writeFamily(path, f, uint64(i+1)))
			again, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, first, again, "the same seed must write the same file")

			g, err := graph.Load(path, graph.Directed(f.directed))
			require.NoError(t, err)
			// er6 and sbm6 may leave a node without edges, which an edge
			// list cannot name
			require.InDelta(t, nodes[f.name], g.N(), max(1, float64(nodes[f.name])/50))
			require.Equal(t, f.directed, g.Directed())
			_, count := g.Components()
			switch f.name {
			case "components4":
				require.Equal(t, 4, count)
			case "tree", "tree-30":
				require.Equal(t, 1, count)
				require.Len(t, g.Edges(), g.N()-1)
			case "grid30":
				require.Equal(t, 1, count)
				require.Len(t, g.Edges(), 2*30*29)
			}
		})
	}
}
