package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// A score under 1 is never printed as 1.0000, which beside --threshold 1
// reads as a node over the threshold that was left out.
func TestPrintedScoresBelowOneStayBelowOne(t *testing.T) {
	var out bytes.Buffer
	printLocalized(&out, localizeOutput{Infected: 2, Threshold: 1,
		Top: []rankedSource{{Node: "a", Score: 0.99996, Probability: 0.875}, {Node: "b", Score: 1, Probability: 1}}}, false)
	require.Contains(t, out.String(), "no node is over delta")
	require.Contains(t, out.String(), "a                 0.9999        0.875")
	require.Contains(t, out.String(), "b                 1.0000        1.000")
}
