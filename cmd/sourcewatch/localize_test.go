package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/forward"
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

// A count cut's lowest score is printed to three significant digits: a
// cut of 0.0003 read "down to 0.000".
func TestPrintedCountCut(t *testing.T) {
	for _, tc := range []struct {
		at   float64
		want string
	}{{0.0003, "(down to 0.0003)"}, {0.22375, "(down to 0.224)"}, {0, "(down to 0)"}, {1, "(down to 1)"},
		// Below 1 never reads 1, as the table's 0.9999 does not.
		{0.9996, "(down to 0.9996)"}, {0.99996, "(down to 0.9999)"}} {
		var out bytes.Buffer
		printLocalized(&out, localizeOutput{Infected: 3, Threshold: tc.at, SourceRule: "the 7 highest scores"}, false)
		require.Contains(t, out.String(), "the 7 highest scores "+tc.want)
	}
}

// Nodes the floor names below the cut are said to be, with the bundle's
// floor on the summary line.
func TestPrintedFloorNodes(t *testing.T) {
	src := []rankedSource{{Node: "a", Score: 0.9, Probability: 1}, {Node: "b", Score: 0.2, Probability: 0.5}, {Node: "c", Score: 0.1, Probability: 0.25}}
	for _, tc := range []struct {
		floor int
		want  string
	}{
		{0, ""},
		{1, "rank 3 is named below the cut: a lone infected node is a source, and every infected component holds one\n"},
		{2, "ranks 2-3 are named below the cut: a lone infected node is a source, and every infected component holds one\n"},
	} {
		var out bytes.Buffer
		printLocalized(&out, localizeOutput{Infected: 5, Threshold: 0.5, ComponentsNamed: true, FloorNamed: tc.floor, Sources: src}, false)
		require.Contains(t, out.String(), "; every lone infected node and infected component named; 3 suspected source(s)")
		if tc.want == "" {
			require.NotContains(t, out.String(), "below the cut")
		} else {
			require.Contains(t, out.String(), tc.want)
		}
	}
}

// localize's table pads node ids by terminal columns: with ids in Chinese
// (two columns a character) beside ASCII ones, the score column starts at
// the same column on every row. %-16s counted runes and pushed the wide
// rows out.
func TestLocalizeTableAlignsWideIDs(t *testing.T) {
	data, err := os.ReadFile("../../configs/demo/karate.edges")
	require.NoError(t, err)
	const long = "a-node-id-longer-than-sixteen-33"
	wide := func(id string) string {
		if id == "33" {
			return long // wider than the column's 16: the column widens
		}
		if n, err := strconv.Atoi(id); err == nil && n%2 == 0 {
			return "成员" + id
		}
		return id
	}
	var b strings.Builder
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			b.WriteString(wide(f[0]) + " " + wide(f[1]) + "\n")
		}
	}
	edges := filepath.Join(t.TempDir(), "karate-zh.edges")
	require.NoError(t, os.WriteFile(edges, []byte(b.String()), 0o600))
	_, bundle, pluginDir := trainSmall(t, "--graph", edges)
	out, _, err := runCmd(t, `{"infected":["成员0","1","成员2","3","7","13","成员8","9","`+long+`"]}`, "localize", "--bundle", bundle,
		"--plugin-dir", pluginDir, "--top", "40", "--threshold", "1", "--log-level", "warn")
	require.NoError(t, err)
	var rows []string
	for line := range strings.Lines(out) {
		// rank, node, score, probability, chance
		if f := strings.Fields(line); len(f) == 5 && f[0] != "rank" {
			rows = append(rows, strings.TrimRight(line, "\n"))
		}
	}
	require.GreaterOrEqual(t, len(rows), 4, out)
	sawWide, sawLong := false, false
	for _, r := range rows {
		sawWide = sawWide || strings.Contains(r, "成员")
		sawLong = sawLong || strings.Contains(r, long)
		require.Equal(t, alerts.TextWidth(rows[0]), alerts.TextWidth(r), "%q\n%s", r, out)
	}
	require.True(t, sawWide, out)
	require.True(t, sawLong, out)
}

// A negative size is refused, and the error says what 0 asks of that
// flag: the default for most, none listed for --top.
func TestLocalizeRefusesNegativeSizes(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{
		{"--top", "--top: -1, want >= 0 (0: list no top-scored nodes)"},
		{"--restarts", "--restarts: -1, want >= 0 (0: the bundle's)"},
	} {
		_, _, err := runCmd(t, `{"infected":["1"]}`, "localize", "--bundle", filepath.Join(t.TempDir(), "none.swb"), tc.flag, "-1")
		require.EqualError(t, err, tc.want)
	}
}

// An argument to localize or train is refused, naming the flag meant:
// `localize --bundle b.swb obs.json` ignored obs.json and read stdin (a
// wait for input on a terminal), and `train my.edges` ignored it.
func TestLocalizeAndTrainRefuseArguments(t *testing.T) {
	_, _, err := runCmd(t, `{"infected":["1"]}`, "localize", "--bundle", filepath.Join(t.TempDir(), "none.swb"), "obs.json")
	require.EqualError(t, err, `localize takes no arguments, got "obs.json": give the observation file as --observation obs.json (stdin without it)`)
	_, _, err = runCmd(t, "", "train", "--graph", "../../configs/demo/karate.edges", "--out", filepath.Join(t.TempDir(), "k.swb"), "my.edges")
	require.EqualError(t, err, `train takes no arguments, got "my.edges": the edge list is --graph, recorded cascades --cascades-file, the bundle --out`)
}

// With --top 0 and no node over delta, localize says that nothing is
// listed, not "the top-scored nodes are:" above a table of no rows.
func TestPrintedNothingOverDeltaWithTopZero(t *testing.T) {
	var out bytes.Buffer
	printLocalized(&out, localizeOutput{Infected: 1, Threshold: 0.9}, false)
	require.Contains(t, out.String(), "no node is over delta (--top 0: no top-scored nodes listed)\n")
	require.NotContains(t, out.String(), "the top-scored nodes are")
	require.NotContains(t, out.String(), "rank")
}

// --call-timeout reaches the plugin host of train, localize and eval (a
// model that loads for longer than the default deadline in Configure
// could not run anywhere but plugin check): 1ns times out the first call,
// and a generous one answers as the default does.
func TestCallTimeoutReachesThePlugin(t *testing.T) {
	_, bundle, pluginDir := trainSmall(t, "--val-solves", "4", "--opt-steps", "10", "--call-timeout", "1m")
	obs := `{"infected":["0","1","2"]}`
	out, _, err := runCmd(t, obs, "localize", "--bundle", bundle, "--plugin-dir", pluginDir, "--call-timeout", "1m", "--log-level", "warn")
	require.NoError(t, err)
	require.Contains(t, out, "3 infected")
	for _, args := range [][]string{
		{"localize", "--bundle", bundle, "--plugin-dir", pluginDir},
		{"train", "--graph", "../../configs/demo/karate.edges", "--cascades", "40", "--forward", "icmf", "--plugin-dir", pluginDir,
			"--out", filepath.Join(t.TempDir(), "k.swb")},
		{"eval", "--graph", "../../configs/demo/karate.edges", "--cascades", "40", "--runs", "1", "--methods", "slvae,infected",
			"--method-param", "slvae.forward=icmf", "--plugin-dir", pluginDir},
	} {
		t.Run(args[0], func(t *testing.T) {
			_, _, err := runCmd(t, obs, append(args, "--call-timeout", "1ns", "--log-level", "error")...)
			require.ErrorIs(t, err, forward.ErrCallTimeout)
			require.ErrorContains(t, err, "no answer within 1ns")
			_, _, err = runCmd(t, obs, append(args, "--call-timeout", "-1s")...)
			require.EqualError(t, err, "--call-timeout: -1s is negative (0 = the production deadline)")
		})
	}
}
