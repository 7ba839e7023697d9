package eval

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
)

func TestSplitPartsCannotGrowIntoEachOther(t *testing.T) {
	cs := make([]diffusion.Cascade, 10)
	for i := range cs {
		cs[i].Sources = []int{i}
	}
	train, val, test := Split(cs, 6, 2, 3)
	require.Len(t, train, 6)
	require.Len(t, val, 2)
	require.Len(t, test, 2)
	firstVal, firstTest := val[0].Sources[0], test[0].Sources[0]

	// A method that appends to its own part gets a copy.
	_ = append(train, diffusion.Cascade{Sources: []int{-1}})
	_ = append(val, diffusion.Cascade{Sources: []int{-2}})
	require.Equal(t, firstVal, val[0].Sources[0])
	require.Equal(t, firstTest, test[0].Sources[0])

	seen := map[int]bool{}
	for _, part := range [][]diffusion.Cascade{train, val, test} {
		for _, c := range part {
			require.False(t, seen[c.Sources[0]], "cascade %d in two parts", c.Sources[0])
			seen[c.Sources[0]] = true
		}
	}
	require.Len(t, seen, 10)
}
