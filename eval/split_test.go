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

// Split shuffles by its seed (the same seed, the same parts) and refuses
// sizes that do not fit; ntrain + nval may take every cascade.
func TestSplitShufflesAndChecksSizes(t *testing.T) {
	cs := func() []diffusion.Cascade {
		out := make([]diffusion.Cascade, 10)
		for i := range out {
			out[i].Sources = []int{i}
		}
		return out
	}
	firsts := func(parts ...[]diffusion.Cascade) []int {
		var out []int
		for _, p := range parts {
			for _, c := range p {
				out = append(out, c.Sources[0])
			}
		}
		return out
	}
	a := firsts(Split(cs(), 6, 2, 3))
	require.Equal(t, a, firsts(Split(cs(), 6, 2, 3)), "a seed means the same split")
	require.NotEqual(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, a, "shuffled, not cut in the given order")
	require.NotEqual(t, a, firsts(Split(cs(), 6, 2, 4)), "another seed, another split")

	train, val, test := Split(cs(), 0, 0, 3)
	require.Empty(t, train)
	require.Empty(t, val)
	require.Len(t, test, 10)
	train, val, test = Split(cs(), 6, 4, 3)
	require.Len(t, train, 6)
	require.Len(t, val, 4)
	require.Empty(t, test)
	for _, sizes := range [][2]int{{-1, 2}, {2, -1}, {6, 5}, {11, 0}} {
		require.PanicsWithValue(t, "eval: Split sizes do not fit the cascades", func() { Split(cs(), sizes[0], sizes[1], 3) }, "%v", sizes)
	}
}
