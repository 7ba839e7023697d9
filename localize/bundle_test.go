package localize

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/prior"
)

func ringGraph(t *testing.T, n int) *graph.Graph {
	t.Helper()
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteString(strings.Join([]string{itoa(i), itoa((i + 1) % n)}, " "))
		sb.WriteByte('\n')
	}
	g, err := graph.Read(strings.NewReader(sb.String()), "ring.edges")
	require.NoError(t, err)
	return g
}

func itoa(i int) string { return strconv.Itoa(i) }

// testBundle trains a tiny prior on a ring graph.
func testBundle(t *testing.T) *Bundle {
	t.Helper()
	return testBundleOn(t, ringGraph(t, 12))
}

// testBundleOn trains a tiny prior on g, whose first 12 nodes form the
// training source sets.
func testBundleOn(t *testing.T, g *graph.Graph) *Bundle {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var train [][]int
	for i := 0; i < 40; i++ {
		c := rng.IntN(12)
		train = append(train, []int{c, (c + 1) % 12})
	}
	cfg := prior.DefaultConfig()
	cfg.Hidden, cfg.Latent, cfg.Epochs = 8, 3, 3
	vae := prior.NewVAE(g.N(), cfg)
	_, err := vae.Fit(t.Context(), train[:30], train[30:], nil)
	require.NoError(t, err)
	terms := vae.Terms(train, 16, rng)
	return &Bundle{
		Manifest: Manifest{
			ID: "swb-test", CreatedAt: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC),
			Graph:     GraphRef{Name: "ring", Fingerprint: g.Fingerprint(), Nodes: g.N(), Edges: len(g.Edges())},
			Forward:   ForwardRef{Name: "icmf", Version: "1", SHA256: strings.Repeat("ab", 32)},
			Threshold: 0.4,
			Metrics:   map[string]float64{"val_f1": 0.5},
		},
		VAE: vae, Terms: terms, ForwardState: []byte("state"), Graph: g,
	}
}

func TestBundleRoundTrip(t *testing.T) {
	b := testBundle(t)
	path := filepath.Join(t.TempDir(), "ring.swb")
	require.NoError(t, b.WriteFile(path))
	got, err := LoadBundle(path, nil)
	require.NoError(t, err)
	require.Equal(t, b.Manifest.ID, got.Manifest.ID)
	require.Equal(t, b.Manifest.Threshold, got.Manifest.Threshold)
	require.Equal(t, b.ForwardState, got.ForwardState)
	require.Equal(t, b.Graph.Fingerprint(), got.Graph.Fingerprint())
	// The prior terms decode to the same function.
	x := mat.NewDense(2, 12, nil)
	x.Set(0, 3, 1)
	x.Set(1, 7, 0.5)
	g1, g2 := mat.NewDense(2, 12, nil), mat.NewDense(2, 12, nil)
	require.InDeltaSlice(t, b.Terms.Pred(x, g1), got.Terms.Pred(x, g2), 1e-12)
	require.InDeltaSlice(t, g1.RawMatrix().Data, g2.RawMatrix().Data, 1e-12)

	// The same graph from another source is accepted; another graph is not.
	_, err = LoadBundle(path, ringGraph(t, 12))
	require.NoError(t, err)
	_, err = LoadBundle(path, ringGraph(t, 13))
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.ErrorContains(t, err, path)
}

// A node on no edge (named in the file only by a self-loop) is part of
// the graph: the bundle keeps it, and a graph without it is refused
// although its edges are the same.
func TestBundleKeepsNodesOnNoEdge(t *testing.T) {
	for _, tc := range []struct{ name, weight, loop string }{
		{"unweighted", "", "12 12"},
		{"weighted", " 0.5", "12 12 0.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ring strings.Builder
			for i := 0; i < 12; i++ {
				ring.WriteString(itoa(i) + " " + itoa((i+1)%12) + tc.weight + "\n")
			}
			g, err := graph.Read(strings.NewReader(ring.String()+tc.loop+"\n"), "ring-isolated.edges")
			require.NoError(t, err)
			edgesOnly, err := graph.Read(strings.NewReader(ring.String()), "ring.edges")
			require.NoError(t, err)
			require.Equal(t, 13, g.N())
			require.NotEqual(t, edgesOnly.Fingerprint(), g.Fingerprint())

			path := filepath.Join(t.TempDir(), "ring.swb")
			require.NoError(t, testBundleOn(t, g).WriteFile(path))
			got, err := LoadBundle(path, g)
			require.NoError(t, err)
			require.Equal(t, 13, got.Graph.N())
			require.Equal(t, g.Fingerprint(), got.Graph.Fingerprint())
			_, err = LoadBundle(path, edgesOnly)
			require.ErrorIs(t, err, ErrGraphMismatch)
		})
	}
}

// rewrite copies a bundle archive, passing each entry through edit.
func rewrite(t *testing.T, data []byte, edit func(name string, body []byte) []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		rc, err := f.Open()
		require.NoError(t, err)
		body, err := io.ReadAll(rc)
		require.NoError(t, err)
		body = edit(f.Name, body)
		if body == nil {
			continue
		}
		w, err := zw.Create(f.Name)
		require.NoError(t, err)
		_, err = w.Write(body)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return out.Bytes()
}

func TestBundleRefusesDamage(t *testing.T) {
	b := testBundle(t)
	var buf bytes.Buffer
	require.NoError(t, b.Write(&buf))
	good := buf.Bytes()
	for _, tc := range []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"not a zip", []byte("hello"), ErrBadBundle, "not a bundle"},
		{"truncated", good[:len(good)/2], ErrBadBundle, ""},
		{"edited forward state", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryForward {
				return []byte("tampered")
			}
			return body
		}), ErrBundleChecksum, entryForward},
		{"edited prior", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryTerms {
				body = append([]byte(nil), body...)
				body[len(body)-1] ^= 1
			}
			return body
		}), ErrBundleChecksum, entryTerms},
		{"missing entry", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryVAE {
				return nil
			}
			return body
		}), ErrBadBundle, entryVAE},
		{"future format", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return bytes.Replace(body, []byte(`"format": 1`), []byte(`"format": 2`), 1)
			}
			return body
		}), ErrBundleVersion, "format 2"},
		{"unknown schedule", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return bytes.Replace(body, []byte(`"prior_weight":`), []byte(`"variant": "fast", "prior_weight":`), 1)
			}
			return body
		}), ErrBadBundle, `solve.variant: want full, a, b, noprior or datainit, got "fast"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.swb")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			_, err := LoadBundle(path, nil)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.text)
		})
	}
}

func TestSolveWithBundlePrior(t *testing.T) {
	b := testBundle(t)
	p, f, _ := testProblem(12, 2, 4)
	res, err := Solve(t.Context(), b, f, p.Y, DefaultOptions())
	require.NoError(t, err)
	require.Len(t, res.Scores, 12)
	require.Equal(t, b.Manifest.Threshold, res.Threshold)
	res2, err := Solve(t.Context(), b, f, p.Y, Options{Threshold: 0.9})
	require.NoError(t, err)
	require.Equal(t, 0.9, res2.Threshold)
	require.Equal(t, res.Scores, res2.Scores)
}

// A manifest without a recorded schedule (bundles from before it was
// recorded) solves with the paper's; a recorded one is used.
func TestBundleOptionsVariant(t *testing.T) {
	var b Bundle
	require.Equal(t, Full, b.Options().Variant)
	b.Manifest.Solve.Variant = DataInit
	require.Equal(t, DataInit, b.Options().Variant)

	var m Manifest
	require.NoError(t, json.Unmarshal([]byte(`{"solve":{"restarts":8,"init_steps":20,"opt_steps":25}}`), &m))
	require.Empty(t, m.Solve.Variant)
	require.NoError(t, json.Unmarshal([]byte(`{"solve":{"variant":"datainit"}}`), &m))
	require.Equal(t, DataInit, m.Solve.Variant)
}
