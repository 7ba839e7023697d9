package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

// simKarate is Zachary's karate club, kept in the repository as diffusion
// test data so the command is tested on a real file from a fresh clone.
var simKarate = filepath.Join("..", "..", "diffusion", "testdata", "karate.edges")

// runSimulateCmd runs the real root command with args and returns its
// stdout, stderr and error.
func runSimulateCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr)
	root.SetArgs(append([]string{"simulate"}, args...))
	err := root.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

func readCascades(t *testing.T, g *graph.Graph, text string) []diffusion.Cascade {
	t.Helper()
	cs, err := diffusion.ReadJSONL(strings.NewReader(text), g, "out")
	require.NoError(t, err)
	return cs
}

func TestSimulateCommandWritesCascades(t *testing.T) {
	g, err := graph.Load(simKarate)
	require.NoError(t, err)
	for _, tc := range []struct {
		name       string
		args       []string
		minSources int
		maxSources int
		recovered  bool
	}{
		{"SI default ratio", []string{"--diffusion", "SI"}, 3, 3, false},
		{"SIR few sources", []string{"--diffusion", "sir", "--beta", "0.3", "--gamma", "0.1", "--sources", "1-5"}, 1, 5, true},
		{"IC fixed count", []string{"--diffusion", "IC", "--p", "0.5", "--sources", "2", "--pattern", "degree"}, 2, 2, false},
		{"LT cluster", []string{"--diffusion", "LT", "--source-ratio", "0.2", "--pattern", "cluster"}, 7, 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cascades.jsonl")
			args := append([]string{"--graph", simKarate, "--cascades", "30", "--seed", "5", "--observe", "0.3-0.4", "--out", out}, tc.args...)
			stdout, stderr, err := runSimulateCmd(t, args...)
			require.NoError(t, err)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "simulate: 30 ")
			require.Contains(t, stderr, "redrawn")
			require.Contains(t, stderr, "mean infected fraction")

			data, err := os.ReadFile(out)
			require.NoError(t, err)
			cs := readCascades(t, g, string(data))
			require.Len(t, cs, 30)
			for _, c := range cs {
				require.GreaterOrEqual(t, len(c.Sources), tc.minSources)
				require.LessOrEqual(t, len(c.Sources), tc.maxSources)
				// 0.3-0.4 of 34 nodes: the snapshot holds at least 11.
				require.GreaterOrEqual(t, len(c.Infected), 11)
				require.NotNil(t, c.Times)
				require.Equal(t, tc.recovered, c.Recovered != nil)
			}
		})
	}
}

func TestSimulateCommandIsReproducibleOnStdout(t *testing.T) {
	args := []string{"--graph", simKarate, "--cascades", "40", "--seed", "9", "--diffusion", "SIR", "--beta", "0.2"}
	one, _, err := runSimulateCmd(t, append(args, "--workers", "1")...)
	require.NoError(t, err)
	four, _, err := runSimulateCmd(t, append(args, "--workers", "4", "--out", "-")...)
	require.NoError(t, err)
	require.Equal(t, one, four)
	require.Equal(t, 40, strings.Count(one, "\n"))
	other, _, err := runSimulateCmd(t, append(args, "--seed", "10")...)
	require.NoError(t, err)
	require.NotEqual(t, one, other)
}

func TestSimulateCommandReadsEnvironment(t *testing.T) {
	t.Setenv("SOURCEWATCH_DIFFUSION", "SIR")
	t.Setenv("SOURCEWATCH_CASCADES", "7")
	stdout, stderr, err := runSimulateCmd(t, "--graph", simKarate)
	require.NoError(t, err)
	require.Contains(t, stderr, "simulate: 7 SIR cascades")
	require.Equal(t, 7, strings.Count(stdout, `"recovered":`))
}

func TestSimulateCommandErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no graph", nil, "--graph: an edge list file is required"},
		{"missing graph", []string{"--graph", "nope.edges"}, "--graph: loading graph"},
		{"graph on stdin", []string{"--graph", "-"}, "--graph -: the graph is read from a file, not standard input"},
		{"model", []string{"--diffusion", "SEIR"}, `--diffusion: invalid diffusion config: unknown diffusion model "SEIR"`},
		{"beta", []string{"--beta", "1.5"}, "--beta: 1.5 is not a probability"},
		{"gamma", []string{"--diffusion", "SIR", "--gamma", "-1"}, "--gamma: -1 is not a probability"},
		{"p", []string{"--diffusion", "IC", "--p", "0"}, "--p: 0 is not a probability"},
		{"lt threshold", []string{"--diffusion", "LT", "--lt-threshold", "2"}, "--lt-threshold: 2, want at most 1"},
		{"sources text", []string{"--sources", "many"}, `--sources: want a count N or a range MIN-MAX, got "many"`},
		{"sources zero", []string{"--sources", "0"}, "--sources: count 0 is not positive"},
		{"sources range", []string{"--sources", "5-2"}, "--sources: range 5-2 needs"},
		{"sources too many", []string{"--sources", "40"}, "--sources: 40 sources asked for, and the graph has 34 nodes"},
		{"sources range too many", []string{"--sources", "2-40"}, "--sources: 40 sources asked for, and the graph has 34 nodes"},
		{"ratio", []string{"--source-ratio", "2"}, "--source-ratio: 2 is outside (0, 1]"},
		{"pattern", []string{"--pattern", "ring"}, `--pattern: invalid diffusion config: unknown source pattern "ring"`},
		{"observe text", []string{"--observe", "half"}, `--observe: want a fraction range like 0.2-0.5, got "half"`},
		{"observe range", []string{"--observe", "0.6-0.3"}, "--observe: range 0.6-0.3 needs"},
		{"cascades", []string{"--cascades", "0"}, "--cascades: 0 is not positive"},
		{"cascades too many", []string{"--cascades", "99999999999"}, "--cascades: 99999999999 is over 1000000 a run"},
		{"workers", []string{"--workers", "-2"}, "--workers: -2 is negative"},
		{"max steps", []string{"--max-steps", "0"}, "--max-steps: 0 is not positive"},
		// the parameters to blame by their flags, the target among them
		{"unreachable", []string{"--beta", "0.001", "--max-steps", "2", "--max-redraws", "3", "--observe", "0.9"},
			": --beta too low, --max-steps too low or --observe too high, or the graph's components too small: observation target unreachable"},
		{"unreachable SIR", []string{"--diffusion", "SIR", "--beta", "0.01", "--gamma", "1", "--max-redraws", "3", "--observe", "0.9"},
			"--beta too low, --gamma too high or --observe too high"},
		{"out dir", []string{"--out", filepath.Join(t.TempDir(), "no", "such", "dir", "x.jsonl")}, "--out: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name != "no graph" && tc.name != "missing graph" && tc.name != "graph on stdin" {
				args = append([]string{"--graph", simKarate, "--cascades", "3"}, args...)
			}
			stdout, _, err := runSimulateCmd(t, args...)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "MaxSteps", "flags, not config fields")
			require.Empty(t, stdout)
		})
	}
	dir := t.TempDir()
	_, _, err := runSimulateCmd(t, "--graph", dir)
	require.EqualError(t, err, "--graph "+dir+": is a directory, want an edge list file")

	// the unreachable target is still the diffusion package's error
	_, _, err = runSimulateCmd(t, "--graph", simKarate, "--cascades", "3", "--beta", "0.001", "--max-steps", "2", "--max-redraws", "3", "--observe", "0.9")
	require.ErrorIs(t, err, diffusion.ErrUnreachable)
	var ue *diffusion.UnreachableError
	require.ErrorAs(t, err, &ue)
	require.True(t, strings.HasPrefix(err.Error(), "simulate: cascade "), err.Error())
}

// A weighted graph's weights, or an explicit --p, that the chosen model
// does not use are said once, on the log.
func TestSimulateCommandWarnsOfUnusedWeights(t *testing.T) {
	dir := t.TempDir()
	weighted := filepath.Join(dir, "weighted.edges")
	plain := filepath.Join(dir, "plain.edges")
	var w, p strings.Builder
	for i := range 20 {
		fmt.Fprintf(&w, "%d %d 0.9\n%d %d 0.9\n", i, (i+1)%20, i, (i+5)%20)
		fmt.Fprintf(&p, "%d %d\n%d %d\n", i, (i+1)%20, i, (i+5)%20)
	}
	require.NoError(t, os.WriteFile(weighted, []byte(w.String()), 0o600))
	require.NoError(t, os.WriteFile(plain, []byte(p.String()), 0o600))
	const weightsUnused, pUnused, betaUnused = "the graph's edge weights are not used", "--p is not used", "--beta is not used: IC does not read it"
	for _, tc := range []struct {
		name  string
		graph string
		args  []string
		want  string // "" = no warning
	}{
		{"SI ignores weights", weighted, []string{"--diffusion", "SI"}, weightsUnused},
		{"SIR ignores weights", weighted, []string{"--diffusion", "SIR", "--beta", "0.5", "--gamma", "0.05"}, weightsUnused},
		{"IC weights replace --p", weighted, []string{"--diffusion", "IC", "--p", "0.3"}, pUnused},
		{"IC weights, --p not given", weighted, []string{"--diffusion", "IC"}, ""},
		{"LT uses weights", weighted, []string{"--diffusion", "LT"}, ""},
		{"SI unweighted", plain, []string{"--diffusion", "SI"}, ""},
		{"IC unweighted uses --p", plain, []string{"--diffusion", "IC", "--p", "0.5"}, ""},
		{"SI does not read --p", plain, []string{"--diffusion", "SI", "--p", "0.5"}, pUnused},
		{"IC does not read --beta", plain, []string{"--diffusion", "IC", "--beta", "0.5"}, betaUnused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--graph", tc.graph, "--cascades", "5", "--sources", "2", "--observe", "0.2"}, tc.args...)
			_, stderr, err := runSimulateCmd(t, args...)
			require.NoError(t, err)
			for _, warning := range []string{weightsUnused, pUnused, betaUnused} {
				want := 0
				if warning == tc.want {
					want = 1
				}
				require.Equal(t, want, strings.Count(stderr, warning), stderr)
			}
			require.NotContains(t, stderr, "forward models", "simulate trains none")
		})
	}
}

func TestSimulateCommandPrecedence(t *testing.T) {
	// flags > SOURCEWATCH_* env > config file > defaults.
	cfgPath := filepath.Join(t.TempDir(), "sourcewatch.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("diffusion: IC\np: 0.6\ncascades: 5\nsources: \"2\"\n"), 0o600))
	_, stderr, err := runSimulateCmd(t, "--config", cfgPath, "--graph", simKarate)
	require.NoError(t, err)
	require.Contains(t, stderr, "simulate: 5 IC cascades")
	require.Contains(t, stderr, "mean 2.0 sources")

	t.Setenv("SOURCEWATCH_CASCADES", "6")
	_, stderr, err = runSimulateCmd(t, "--config", cfgPath, "--graph", simKarate)
	require.NoError(t, err)
	require.Contains(t, stderr, "simulate: 6 IC cascades")

	_, stderr, err = runSimulateCmd(t, "--config", cfgPath, "--graph", simKarate, "--cascades", "4", "--diffusion", "LT")
	require.NoError(t, err)
	require.Contains(t, stderr, "simulate: 4 LT cascades")

	// --sources and --source-ratio say one thing two ways: the one given
	// at the stronger layer wins (before, the file's sources beat the
	// flag's ratio), and both at one layer are refused.
	_, stderr, err = runSimulateCmd(t, "--config", cfgPath, "--graph", simKarate, "--source-ratio", "0.1")
	require.NoError(t, err)
	require.Contains(t, stderr, "mean 3.0 sources", "10% of 34 nodes, not the file's 2")
	t.Setenv("SOURCEWATCH_SOURCES", "4")
	_, stderr, err = runSimulateCmd(t, "--config", cfgPath, "--graph", simKarate)
	require.NoError(t, err)
	require.Contains(t, stderr, "mean 4.0 sources")
	_, _, err = runSimulateCmd(t, "--graph", simKarate, "--sources", "2", "--source-ratio", "0.1")
	require.ErrorContains(t, err, "--sources 2 and --source-ratio 0.1 both given: give one")
}

func TestParseFraction(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi float64
		err    string
	}{
		{in: "0.2-0.5", lo: 0.2, hi: 0.5},
		{in: " 0.3 ", lo: 0.3, hi: 0.3},
		{in: "3e-1", lo: 0.3, hi: 0.3},
		{in: "2E-1-5e-1", lo: 0.2, hi: 0.5},
		{in: "1e-1 - 0.4", lo: 0.1, hi: 0.4},
		{in: "0.5-0.2", err: "range 0.5-0.2 needs 0 < MIN <= MAX <= 1"},
		{in: "-0.2", err: "range -0.2--0.2 needs"},
		{in: "a-b", err: `want a fraction range like 0.2-0.5, got "a-b"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			lo, hi, err := parseFraction(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.InDelta(t, tc.lo, lo, 1e-15)
			require.InDelta(t, tc.hi, hi, 1e-15)
		})
	}
}

// Snapshots far past the --observe target (a dense graph, a high beta)
// are warned about; the tables' karate settings are not.
func TestSimulateWarnsOfOvershoot(t *testing.T) {
	var dense strings.Builder
	for i := range 40 {
		for j := i + 1; j < 40; j++ {
			if (i*7+j*3)%5 < 2 {
				fmt.Fprintf(&dense, "%d %d\n", i, j)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "dense.edges")
	require.NoError(t, os.WriteFile(path, []byte(dense.String()), 0o600))
	_, stderr, err := runSimulateCmd(t, "--graph", path, "--beta", "0.5", "--sources", "2", "--cascades", "50")
	require.NoError(t, err)
	require.Contains(t, stderr, "snapshots hold over 60% of the nodes, past the --observe maximum 0.5")
	require.Contains(t, stderr, "a lower --beta observes it earlier")
	// Sources alone past the target: the advice is fewer sources, not a
	// slower spread, which cannot help a snapshot at the start.
	_, stderr, err = runSimulateCmd(t, "--graph", simKarate, "--sources", "15", "--observe", "0.2-0.3", "--cascades", "10")
	require.NoError(t, err)
	require.Contains(t, stderr, "10 of 10 snapshots hold over 40% of the nodes, past the --observe maximum 0.3, 10 of them at the start: the sources alone are that many; fewer --sources")
	require.Contains(t, stderr, "10 of 10 snapshots hold only their sources, taken before the spread had begun")
	require.NotContains(t, stderr, "--beta")
	// The advice is the model's: IC reads --p, LT its threshold.
	_, stderr, err = runSimulateCmd(t, "--graph", path, "--diffusion", "IC", "--p", "0.9", "--sources", "2", "--cascades", "50")
	require.NoError(t, err)
	require.Contains(t, stderr, "a lower --p observes it earlier")
	// With --observe up to 1 only "every node" lies past the target.
	_, stderr, err = runSimulateCmd(t, "--graph", path, "--beta", "1", "--sources", "2", "--cascades", "50", "--observe", "0.5-1")
	require.NoError(t, err)
	require.Contains(t, stderr, "of 50 snapshots hold every node")
	require.NotContains(t, stderr, "110%")
	// With --observe 1 every target is every node: the snapshots hold
	// what was asked for, and the advice is a lower --observe, not a
	// slower spread that overshoots no target.
	_, stderr, err = runSimulateCmd(t, "--graph", simKarate, "--sources", "2", "--cascades", "10", "--observe", "1")
	require.NoError(t, err)
	require.Contains(t, stderr, "10 of 10 snapshots hold every node, as --observe 1 asks on this graph of 34 nodes")
	require.Contains(t, stderr, "a lower --observe observes it earlier")
	require.NotContains(t, stderr, "--beta")
	_, stderr, err = runSimulateCmd(t, "--graph", simKarate, "--cascades", "50")
	require.NoError(t, err)
	require.NotContains(t, stderr, "snapshots hold over")
	require.NotContains(t, stderr, "hold only their sources")
}

// A weighted edge list read undirected whose reciprocal arcs were merged
// is named, with --directed as the likely fix; read directed, it is not.
func TestSimulateWarnsOfMergedWeightedArcs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arcs.edges")
	require.NoError(t, os.WriteFile(path, []byte("0 1 0.5\n1 0 0.9\n1 2 0.3\n2 3 0.4\n3 4 0.2\n4 0 0.6\n"), 0o600))
	const merged = "1 repeated edges of the weighted edge list were merged into one, the first weight kept"
	_, stderr, err := runSimulateCmd(t, "--graph", path, "--diffusion", "IC", "--sources", "1", "--cascades", "2", "--observe", "0.2")
	require.NoError(t, err)
	require.Contains(t, stderr, merged)
	_, stderr, err = runSimulateCmd(t, "--graph", path, "--directed", "--diffusion", "IC", "--sources", "1", "--cascades", "2", "--observe", "0.2")
	require.NoError(t, err)
	require.NotContains(t, stderr, "merged")
	require.NotContains(t, stderr, "listed more than once")
	// Read directed, an arc listed twice with another weight is named.
	require.NoError(t, os.WriteFile(path, []byte("0 1 0.5\n0 1 0.9\n1 2 0.3\n2 3 0.4\n3 4 0.2\n4 0 0.6\n"), 0o600))
	_, stderr, err = runSimulateCmd(t, "--graph", path, "--directed", "--diffusion", "IC", "--sources", "1", "--cascades", "2", "--observe", "0.2")
	require.NoError(t, err)
	require.Contains(t, stderr, "1 repeated arc(s) of the weighted edge list dropped: the first weight of each arc is kept")
	// Read undirected, the same edge listed the same way twice is not
	// a pair of arcs, and --directed would not keep it: it is named as
	// what it is.
	_, stderr, err = runSimulateCmd(t, "--graph", path, "--diffusion", "IC", "--sources", "1", "--cascades", "2", "--observe", "0.2")
	require.NoError(t, err)
	require.Contains(t, stderr, "1 edge(s) of the weighted edge list listed again the same way (u v twice) dropped: the first weight of each is kept")
	require.NotContains(t, stderr, "pass --directed")
}

// An unweighted list read undirected with some edges given both ways and
// the rest one way (a directed graph's arcs) is named with --directed as
// the likely fix; one listing every edge once, or every edge both ways,
// is an undirected list and is not.
func TestSimulateWarnsOfAListThatLooksDirected(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, edges string
		directed    bool
		warns       bool
	}{
		{"some both ways", "0 1\n1 0\n1 2\n2 3\n3 4\n4 0\n", false, true},
		{"read directed", "0 1\n1 0\n1 2\n2 3\n3 4\n4 0\n", true, false},
		{"each once", "0 1\n1 2\n2 3\n3 4\n4 0\n", false, false},
		{"each both ways", "0 1\n1 0\n1 2\n2 1\n2 3\n3 2\n3 4\n4 3\n4 0\n0 4\n", false, false},
		{"one line twice", "0 1\n0 1\n1 2\n2 3\n3 4\n4 0\n", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".edges")
			require.NoError(t, os.WriteFile(path, []byte(tc.edges), 0o600))
			args := []string{"--graph", path, "--sources", "1", "--cascades", "2", "--observe", "0.2"}
			if tc.directed {
				args = append(args, "--directed")
			}
			_, stderr, err := runSimulateCmd(t, args...)
			require.NoError(t, err)
			require.Equal(t, tc.warns, strings.Contains(stderr, "1 of 5 edges are listed both ways (u v and v u), the others one way only"), stderr)
			require.Equal(t, tc.warns, strings.Contains(stderr, "if the file lists arcs (a directed graph), pass --directed"), stderr)
		})
	}
}

// LT reads a node's in-weights as shares of influence: where they sum
// above 1 for many nodes, that is said.
func TestSimulateWarnsOfLTWeightsAboveOne(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		weight string
		warns  bool
	}{{"0.9", true}, {"0.2", false}} {
		path := filepath.Join(dir, "w"+tc.weight+".edges")
		var w strings.Builder
		for i := range 20 { // every node has four in-arcs
			fmt.Fprintf(&w, "%d %d %s\n%d %d %s\n", i, (i+1)%20, tc.weight, i, (i+5)%20, tc.weight)
		}
		require.NoError(t, os.WriteFile(path, []byte(w.String()), 0o600))
		_, stderr, err := runSimulateCmd(t, "--graph", path, "--diffusion", "LT", "--cascades", "5", "--sources", "2", "--observe", "0.2")
		require.NoError(t, err)
		require.Equal(t, tc.warns, strings.Contains(stderr, "20 of 20 nodes have incoming weights summing above 1"), "weight %s: %s", tc.weight, stderr)
	}
}

// An output path naming one of the command's inputs is refused before
// anything is written: simulate, train and eval once overwrote the edge
// list, the recorded cascades or the config with their output.
func TestOutputOverAnInputIsRefused(t *testing.T) {
	dir := t.TempDir()
	edges := filepath.Join(dir, "g.edges")
	src, err := os.ReadFile(simKarate)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(edges, src, 0o644))
	cascades := filepath.Join(dir, "c.jsonl")
	_, _, err = runCmd(t, "", "simulate", "--graph", edges, "--cascades", "20", "--out", cascades)
	require.NoError(t, err)
	recorded, err := os.ReadFile(cascades)
	require.NoError(t, err)
	config := filepath.Join(dir, "sw.yaml")
	require.NoError(t, os.WriteFile(config, []byte("cascades: 20\n"), 0o644))
	// The same file by another path is the same file.
	sameEdges := filepath.Join(dir, ".", "g.edges")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--graph", edges, "--out", sameEdges}, "--out " + sameEdges + ": that is --graph, which this command reads"},
		{[]string{"simulate", "--graph", edges, "--config", config, "--out", config}, "that is --config"},
		{[]string{"train", "--graph", edges, "--cascades-file", cascades, "--out", cascades}, "--out " + cascades + ": that is the recorded cascades"},
		{[]string{"train", "--graph", edges, "--out", edges}, "that is --graph"},
		{[]string{"eval", "--graph", edges, "--cascades", cascades, "--methods", "infected", "--json", edges}, "--json " + edges + ": that is --graph"},
	} {
		_, _, err := runCmd(t, "", tc.args...)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
	got, err := os.ReadFile(edges)
	require.NoError(t, err)
	require.Equal(t, src, got, "the edge list is untouched")
	got, err = os.ReadFile(cascades)
	require.NoError(t, err)
	require.Equal(t, recorded, got, "the recorded cascades are untouched")
	got, err = os.ReadFile(config)
	require.NoError(t, err)
	require.Equal(t, "cascades: 20\n", string(got))
}

// A target that few draws reach: LT's random thresholds are named with
// what replaces them, a target others reached is called rare and the
// redraws are named, and keeping many redrawn cascades is warned of.
func TestSimulateNamesWhatReachesTheTarget(t *testing.T) {
	dir := t.TempDir()
	var grid strings.Builder
	for i := range 30 {
		for j := range 30 {
			v := i*30 + j
			if j+1 < 30 {
				fmt.Fprintf(&grid, "%d %d\n", v, v+1)
			}
			if i+1 < 30 {
				fmt.Fprintf(&grid, "%d %d\n", v, v+30)
			}
		}
	}
	gridPath := filepath.Join(dir, "grid.edges")
	require.NoError(t, os.WriteFile(gridPath, []byte(grid.String()), 0o600))
	_, _, err := runSimulateCmd(t, "--graph", gridPath, "--diffusion", "LT", "--sources", "1-3", "--cascades", "5", "--out", os.DevNull)
	require.ErrorIs(t, err, diffusion.ErrUnreachable)
	require.ErrorContains(t, err, "the random node thresholds (a fixed --lt-threshold below their mean 0.5 spreads further) or --observe too high")
	_, _, err = runSimulateCmd(t, "--graph", gridPath, "--diffusion", "LT", "--lt-threshold", "0.2", "--sources", "1-3", "--cascades", "5", "--out", os.DevNull)
	require.NoError(t, err, "what the error advised works")

	// Out of reach for every draw: a target above the largest component,
	// however many other cascades reached smaller targets of their own;
	// and a fixed threshold of 0 is not a random one.
	var paths strings.Builder
	for k := range 2 {
		for i := range 10 {
			fmt.Fprintf(&paths, "p%d_%d p%d_%d\n", k, i, k, i+1)
		}
	}
	pathsPath := filepath.Join(dir, "two.edges")
	require.NoError(t, os.WriteFile(pathsPath, []byte(paths.String()), 0o600))
	_, _, err = runSimulateCmd(t, "--graph", pathsPath, "--observe", "0.2-0.9", "--sources", "1", "--cascades", "50", "--seed", "4", "--out", os.DevNull)
	require.ErrorIs(t, err, diffusion.ErrUnreachable)
	require.ErrorContains(t, err, "the most infected at once was 11")
	require.NotContains(t, err.Error(), "rare rather than out of reach")
	_, _, err = runSimulateCmd(t, "--graph", pathsPath, "--diffusion", "LT", "--lt-threshold", "0", "--observe", "0.8", "--sources", "1", "--cascades", "5", "--out", os.DevNull)
	require.ErrorIs(t, err, diffusion.ErrUnreachable)
	require.NotContains(t, err.Error(), "random node thresholds")

	var star strings.Builder
	for i := range 60 {
		fmt.Fprintf(&star, "hub leaf%d\n", i)
	}
	starPath := filepath.Join(dir, "star.edges")
	require.NoError(t, os.WriteFile(starPath, []byte(star.String()), 0o600))
	// One worker: with several, which cascade runs out of draws first (and
	// so the target the error names) depends on scheduling; CI saw 23.
	_, _, err = runSimulateCmd(t, "--graph", starPath, "--directed", "--sources", "1-3", "--cascades", "300", "--seed", "3", "--workers", "1", "--out", os.DevNull)
	require.ErrorIs(t, err, diffusion.ErrUnreachable)
	require.ErrorContains(t, err, "other cascades of this run infected at least 21 nodes at once, so it is rare rather than out of reach: a higher --max-redraws draws until one does")
	_, stderr, err := runSimulateCmd(t, "--graph", starPath, "--directed", "--sources", "1-3", "--cascades", "20", "--seed", "3", "--max-redraws", "2000", "--out", os.DevNull)
	require.NoError(t, err)
	require.Contains(t, stderr, "draws were redrawn for 20 cascades, for dying out below their observation targets")
	require.Contains(t, stderr, "no longer follow --pattern uniform")
	for _, model := range []string{"SI", "LT"} {
		// LT's random thresholds die out twice per cascade kept here,
		// which says nothing of where the kept ones start.
		_, stderr, err = runSimulateCmd(t, "--graph", simKarate, "--diffusion", model, "--cascades", "100", "--out", os.DevNull)
		require.NoError(t, err)
		require.NotContains(t, stderr, "redrawn for", model)
	}
}
