package localize

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/prior"
)

func ringGraph(t testing.TB, n int) *graph.Graph {
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
func testBundle(t testing.TB) *Bundle {
	t.Helper()
	return testBundleOn(t, ringGraph(t, 12))
}

// testBundleOn trains a tiny prior on g, whose first 12 nodes form the
// training source sets.
func testBundleOn(t testing.TB, g *graph.Graph) *Bundle {
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

	// Loaded for inference only: the same terms, no network, and it
	// cannot be written back without one.
	lean, err := LoadBundle(path, nil, WithoutVAE())
	require.NoError(t, err)
	require.Nil(t, lean.VAE)
	require.Equal(t, got.Terms.Pred(x, nil), lean.Terms.Pred(x, nil))
	require.Equal(t, got.Options(), lean.Options())
	var sink bytes.Buffer
	err = lean.Write(&sink)
	require.ErrorIs(t, err, ErrIncompleteBundle)
	require.ErrorContains(t, err, "WithoutVAE")
	require.Zero(t, sink.Len(), "nothing written before the refusal")
	noGraph := *got
	noGraph.Graph = nil
	require.ErrorIs(t, noGraph.Write(io.Discard), ErrIncompleteBundle)

	// The manifest alone, as a daemon's preflight reads it.
	m, err := ReadManifest(path)
	require.NoError(t, err)
	require.Equal(t, got.Manifest.ID, m.ID)
	require.NoError(t, m.CheckGraph(ringGraph(t, 12)))
	require.ErrorIs(t, m.CheckGraph(ringGraph(t, 13)), ErrGraphMismatch)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.swb")
	require.NoError(t, os.WriteFile(cut, raw[:len(raw)-30], 0o644))
	_, err = ReadManifest(cut)
	require.ErrorIs(t, err, ErrBadBundle)
	require.ErrorContains(t, err, "not a bundle archive")
	_, err = ReadManifest(filepath.Join(t.TempDir(), "none.swb"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// The same graph from another source is accepted; another graph is not.
	_, err = LoadBundle(path, ringGraph(t, 12))
	require.NoError(t, err)
	_, err = LoadBundle(path, ringGraph(t, 13))
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.ErrorContains(t, err, path)
	require.NotContains(t, err.Error(), "directed")
	// The same edges read as arcs: the error says which flag is missing.
	var ring strings.Builder
	for _, e := range b.Graph.Edges() {
		fmt.Fprintf(&ring, "%s %s\n", b.Graph.ID(e.From), b.Graph.ID(e.To))
	}
	directed, err := graph.Read(strings.NewReader(ring.String()), "ring.edges", graph.Directed(true))
	require.NoError(t, err)
	_, err = LoadBundle(path, directed)
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.ErrorContains(t, err, "the bundle's graph is undirected, the given one directed: drop --directed")
	// Another graph read directed: no flag would make it fit, so none
	// is advised.
	ring.WriteString("12 0\n")
	other, err := graph.Read(strings.NewReader(ring.String()), "ring13.edges", graph.Directed(true))
	require.NoError(t, err)
	_, err = LoadBundle(path, other)
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.ErrorContains(t, err, "12 nodes), given graph has fingerprint")
	require.ErrorContains(t, err, "another graph, not only read the other way: the node counts differ, and the bundle's graph is undirected, the given one directed")
	require.NotContains(t, err.Error(), "--directed")
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
func rewrite(t testing.TB, data []byte, edit func(name string, body []byte) []byte) []byte {
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
		{"future format", withFormat(t, good, FormatVersion+1), ErrBundleVersion, "format " + itoa(FormatVersion+1)},
		{"format 0", withFormat(t, good, 0), ErrBundleVersion, "format 0"},
		{"source rule count and fraction", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return bytes.Replace(body, []byte(`"prior": {`), []byte(`"source_rule": {"count": 3, "fraction_of_infected": 0.5}, "prior": {`), 1)
			}
			return body
		}), ErrBadBundle, "source_rule: count and fraction_of_infected both set"},
		{"source rule count over nodes", rewrite(t, good, func(name string, body []byte) []byte {
			if name == entryManifest {
				return bytes.Replace(body, []byte(`"prior": {`), []byte(`"source_rule": {"count": 100000}, "prior": {`), 1)
			}
			return body
		}), ErrBadBundle, "source_rule.count: 100000 outside"},
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
			_, err = LoadBundle(path, nil, WithoutVAE())
			require.ErrorIs(t, err, tc.want, "without the VAE")
			require.ErrorContains(t, err, tc.text, "without the VAE")
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

// readBytes decodes a bundle archive held in memory.
func readBytes(data []byte) (*Bundle, error) {
	return ReadBundle(bytes.NewReader(data), int64(len(data)))
}

func encodeBundle(t testing.TB, b *Bundle) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, b.Write(&buf))
	return buf.Bytes()
}

// editManifest rewrites a bundle's manifest.json through edit, as JSON
// fields (the manifest is not checksummed).
func editManifest(t *testing.T, data []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	return rewrite(t, data, func(name string, body []byte) []byte {
		if name != entryManifest {
			return body
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(body, &m))
		edit(m)
		body, err := json.Marshal(m)
		require.NoError(t, err)
		return body
	})
}

// A bundle whose parts disagree on the graph's size (or the prior's) is
// refused when it is read, naming both sizes; it used to load and then
// crash the process in the middle of a Solve.
func TestBundleRefusesInconsistentSizes(t *testing.T) {
	thirteen := testBundleOn(t, ringGraph(t, 13))
	narrow := prior.DefaultConfig()
	narrow.Hidden, narrow.Latent = 5, 3
	for _, tc := range []struct {
		name string
		edit func(b *Bundle)
		text string // empty: the bundle loads
	}{
		{"consistent", func(b *Bundle) {}, ""},
		{"terms for another graph", func(b *Bundle) { b.Terms = thirteen.Terms }, "prior/terms.bin are for 13 nodes, graph.edges has 12"},
		{"vae for another graph", func(b *Bundle) { b.VAE = thirteen.VAE }, "prior/vae.bin is for 13 nodes, graph.edges has 12"},
		{"terms of another width", func(b *Bundle) { b.VAE = prior.NewVAE(12, narrow) }, "prior/terms.bin have hidden size 8, prior/vae.bin has 5"},
		{"manifest records the sizes", func(b *Bundle) { b.Manifest.Prior = PriorRef{Hidden: 8, Latent: 3, Prototypes: 16} }, ""},
		{"manifest records another width", func(b *Bundle) { b.Manifest.Prior = PriorRef{Hidden: 128, Latent: 3, Prototypes: 16} }, "manifest.json: prior.hidden is 128, prior/vae.bin has 8"},
		{"manifest records another latent", func(b *Bundle) { b.Manifest.Prior = PriorRef{Hidden: 8, Latent: 32, Prototypes: 16} }, "manifest.json: prior.latent is 32, prior/vae.bin has 3"},
		{"manifest records other prototypes", func(b *Bundle) { b.Manifest.Prior = PriorRef{Prototypes: 1024} }, "manifest.json: prior.prototypes is 1024, prior/terms.bin have 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBundle(t)
			tc.edit(b)
			got, err := readBytes(encodeBundle(t, b))
			if tc.text == "" {
				require.NoError(t, err)
				require.Equal(t, 12, got.Terms.Nodes())
				return
			}
			require.ErrorIs(t, err, ErrBadBundle)
			require.ErrorContains(t, err, tc.text)
		})
	}
}

// The threshold and solve settings of a manifest are range-checked when
// it is read, naming the field; a zero solve setting is unset (Options
// takes the default).
func TestBundleRefusesBadSettings(t *testing.T) {
	good := encodeBundle(t, testBundle(t))
	set := func(path ...any) []byte {
		return editManifest(t, good, func(m map[string]any) {
			for i := 0; i+1 < len(path); i += 2 {
				key, v := path[i].(string), path[i+1]
				if s, ok := strings.CutPrefix(key, "solve."); ok {
					m["solve"].(map[string]any)[s] = v
				} else if s, ok := strings.CutPrefix(key, "forward."); ok {
					m["forward"].(map[string]any)[s] = v
				} else {
					m[key] = v
				}
			}
		})
	}
	for _, tc := range []struct {
		name string
		data []byte
		text string // empty: the bundle loads
	}{
		{"zero settings", good, ""},
		{"settings Train records", set("threshold", 0.05, "solve.restarts", 8, "solve.init_steps", 20, "solve.opt_steps", 10,
			"solve.learning_rate", 0.05, "solve.prior_weight", 1e-3, "solve.variant", "datainit"), ""},
		{"largest settings", set("threshold", 1, "solve.restarts", MaxRestarts, "solve.init_steps", maxSteps, "solve.opt_steps", maxSteps,
			"solve.learning_rate", MaxLearningRate, "solve.prior_weight", MaxPriorWeight), ""},
		{"prior weight 1e308", set("solve.prior_weight", 1e308), "solve.prior_weight: 1e+308, want a value in [0, 1e+06]"},
		{"learning rate above 1", set("solve.learning_rate", 1e300), "solve.learning_rate: 1e+300, want a value in [0, 1]"},
		{"threshold above 1", set("threshold", 1.5), "manifest.json: threshold: 1.5 outside (0, 1]"},
		{"negative threshold", set("threshold", -3), "threshold: -3 outside (0, 1]"},
		{"zero threshold", set("threshold", 0), "threshold: 0 outside (0, 1]"},
		{"many restarts", set("solve.restarts", 1e8), "manifest.json: solve.restarts: 100000000 outside 0..4096"},
		{"restarts 2^60", set("solve.restarts", json.Number("1152921504606846976")), "solve.restarts: 1152921504606846976 outside 0..4096"},
		{"negative restarts", set("solve.restarts", -1), "solve.restarts: -1 outside 0..4096"},
		{"forward name a path", set("forward.name", "../../bin/sh"), `forward.name: "../../bin/sh", want a plain plugin name`},
		{"no forward name", set("forward.name", ""), `forward.name: "", want a plain plugin name`},
		{"negative init steps", set("solve.init_steps", -1, "solve.opt_steps", 50), "solve.init_steps: -1 outside 0..100000"},
		{"many opt steps", set("solve.opt_steps", 1e9), "solve.opt_steps: 1000000000 outside 0..100000"},
		{"negative learning rate", set("solve.learning_rate", -0.1), "solve.learning_rate: -0.1, want a value in [0, 1]"},
		{"negative prior weight", set("solve.prior_weight", -1), "solve.prior_weight: -1, want a value in [0, 1e+06]"},
		{"infected-first ranking", set("ranking", "infected-first"), ""},
		{"unknown ranking", set("ranking", "degree"), `manifest.json: ranking: "degree", want "infected-first", "infected-then-predicted" or absent`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readBytes(tc.data)
			if tc.text == "" {
				require.NoError(t, err)
				require.NoError(t, b.Options().Validate())
				return
			}
			require.ErrorIs(t, err, ErrBadBundle)
			require.ErrorContains(t, err, tc.text)
		})
	}
	// A field given twice, in another case, would be read as the last.
	twice := rewrite(t, good, func(name string, body []byte) []byte {
		if name == entryManifest {
			require.Contains(t, string(body), `"threshold":`)
			return bytes.Replace(body, []byte(`"threshold":`), []byte(`"THRESHOLD": 0.99, "threshold":`), 1)
		}
		return body
	})
	_, err := readBytes(twice)
	require.ErrorIs(t, err, ErrBadBundle)
	require.ErrorContains(t, err, "manifest.json: threshold is given twice in one object")
	// The edge count shown must be the stored graph's.
	edges := editManifest(t, good, func(m map[string]any) {
		g := m["graph"].(map[string]any)
		g["edges"] = g["edges"].(float64) + 1
	})
	_, err = readBytes(edges)
	require.ErrorIs(t, err, ErrBadBundle)
	require.ErrorContains(t, err, "edges, the manifest says")
	// A map's keys are its own: two metrics differing in case are two.
	metrics := rewrite(t, good, func(name string, body []byte) []byte {
		if name == entryManifest {
			require.Contains(t, string(body), `"metrics": {`)
			return bytes.Replace(body, []byte(`"metrics": {`), []byte(`"metrics": {"MSE": 1, "mse": 2,`), 1)
		}
		return body
	})
	_, err = readBytes(metrics)
	require.NoError(t, err)

	// JSON has no infinities: an overflowing number does not decode.
	_, err = readBytes(set("solve.prior_weight", json.Number("1e400")))
	require.ErrorIs(t, err, ErrBadBundle)
	require.ErrorContains(t, err, "manifest.json")
}

// withFormat rewrites a bundle's format version to format.
func withFormat(t *testing.T, data []byte, format int) []byte {
	t.Helper()
	current := `"format": ` + itoa(FormatVersion)
	return rewrite(t, data, func(name string, body []byte) []byte {
		if name == entryManifest {
			require.Contains(t, string(body), current)
			return bytes.Replace(body, []byte(current), []byte(`"format": `+itoa(format)), 1)
		}
		return body
	})
}

// withEntry copies a bundle archive and adds one raw (already compressed)
// entry with the given header.
func withEntry(t *testing.T, data []byte, h *zip.FileHeader, raw []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		require.NoError(t, zw.Copy(f))
	}
	w, err := zw.CreateRaw(h)
	require.NoError(t, err)
	_, err = w.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return out.Bytes()
}

// Entries of other names are skipped unread, and the format's entries are
// capped (each and together) before they are read: a small archive cannot
// make loading read gigabytes.
func TestBundleEntryLimits(t *testing.T) {
	b := testBundle(t)
	good := encodeBundle(t, b)

	// An unknown entry claiming 3 GiB (its 10 bytes would fail the read at
	// once if it were read).
	junk := withEntry(t, good, &zip.FileHeader{Name: "junk.bin", Method: zip.Store,
		CRC32: 1, CompressedSize64: 10, UncompressedSize64: 3 << 30}, make([]byte, 10))

	// A highly compressible forward state: 4 MiB of zeros.
	big := testBundle(t)
	big.ForwardState = make([]byte, 4<<20)
	bigData := encodeBundle(t, big)
	require.Less(t, len(bigData), 64<<10)

	// A manifest padded past its 1 MiB limit.
	padded := testBundle(t)
	padded.Manifest.Diffusion = json.RawMessage(`{"note": "` + strings.Repeat("a", 2<<20) + `"}`)
	paddedData := encodeBundle(t, padded)
	zr, err := zip.NewReader(bytes.NewReader(paddedData), int64(len(paddedData)))
	require.NoError(t, err)
	require.Equal(t, entryManifest, zr.File[0].Name)
	paddedManifest := zr.File[0].UncompressedSize64
	require.Greater(t, paddedManifest, uint64(2<<20))

	dup := withEntry(t, good, &zip.FileHeader{Name: entryManifest, Method: zip.Store}, nil)

	// The bytes the format's entries hold, from the archive's headers: a
	// bundle of exactly that many is within a limit of that many.
	var held int64
	zg, err := zip.NewReader(bytes.NewReader(good), int64(len(good)))
	require.NoError(t, err)
	for _, f := range zg.File {
		if _, ok := defaultReadLimits().entry[f.Name]; ok {
			held += int64(f.UncompressedSize64)
		}
	}

	limits := func(total int64, entry map[string]int64) readLimits {
		l := defaultReadLimits()
		l.total = total
		for name, max := range entry {
			l.entry[name] = max
		}
		return l
	}
	for _, tc := range []struct {
		name string
		data []byte
		lim  readLimits
		text string // empty: the bundle loads
	}{
		{"within the limits", bigData, defaultReadLimits(), ""},
		{"unknown entry of 3 GiB", junk, defaultReadLimits(), ""},
		{"over the bundle's limit", bigData, limits(1<<20, nil),
			"entry forward/state.bin holds 4194304 bytes, over the"},
		{"over an entry's limit", good, limits(maxBundleBytes, map[string]int64{entryForward: 4}),
			"entry forward/state.bin holds 5 bytes, over its limit of 4"},
		{"at an entry's limit", good, limits(maxBundleBytes, map[string]int64{entryForward: 5}), ""},
		{"at the bundle's limit", good, limits(held, nil), ""},
		{"a byte over the bundle's limit", good, limits(held-1, nil), "bytes, over the"},
		{"manifest over its limit", paddedData, defaultReadLimits(),
			fmt.Sprintf("entry manifest.json holds %d bytes, over its limit of 1048576", paddedManifest)},
		{"duplicate entry", dup, defaultReadLimits(), "entry manifest.json appears twice"},
		{"checksum for an unknown entry", editManifest(t, good, func(m map[string]any) {
			m["checksums"].(map[string]any)["junk.bin"] = strings.Repeat("0", 64)
		}), defaultReadLimits(), "manifest has a checksum for junk.bin, not an entry of the format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readBundle(bytes.NewReader(tc.data), int64(len(tc.data)), tc.lim)
			if tc.text == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrBadBundle)
			require.ErrorContains(t, err, tc.text)
		})
	}
}

// A damaged entry that inflates far beyond what the bundle should hold is
// refused by its checksum as it streams past, before it is held in memory.
func TestBundleRefusesAnInflatedEntryWithoutHoldingIt(t *testing.T) {
	good := encodeBundle(t, testBundle(t))
	const inflated = 256 << 20
	bad := rewrite(t, good, func(name string, body []byte) []byte {
		if name == entryTerms {
			return make([]byte, inflated) // zeros: a few hundred KiB compressed
		}
		return body
	})
	require.Less(t, len(bad), 2<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readBytes(bad)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrBundleChecksum)
	require.ErrorContains(t, err, "entry "+entryTerms+" has sha256")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(inflated/4), "the entry was not read into memory")
}

func TestRepeatedManifestKey(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"threshold": 1, "solve": {"restarts": 1}}`, ""},
		{`{"threshold": 1, "THRESHOLD": 2}`, "THRESHOLD"},
		{`{"solve": {"restarts": 1, "Restarts": 2}}`, "solve.Restarts"},
		// encoding/json folds the long s to s.
		{`{"ſolve": {}, "solve": {}}`, "solve"},
		{`{"a": [[{"x": 1, "X": 2}]]}`, "a[][].X"},
		// A map's keys, and the free-form diffusion record, only exactly.
		{`{"metrics": {"mse": 1, "MSE": 2}}`, ""},
		{`{"checkſums": {"a": "x", "A": "y"}}`, ""},
		{`{"metrics": {"mse": 1, "mse": 2}}`, "metrics.mse"},
		{`{"forward": {"params": {"p": "1", "P": "2"}}}`, ""},
		{`{"diffusion": {"params": [{"A": 1, "a": 2}]}}`, ""},
		{`{"a": {}, "b": [], "c": [{}, {}]}`, ""},
	} {
		require.Equal(t, tc.want, repeatedManifestKey([]byte(tc.json)), tc.json)
	}
}

// A manifest at the size limit with every key in one map loads in
// linear time (the first walker was quadratic: 14 s for 140,000 keys).
func BenchmarkRepeatedManifestKey(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"metrics": {`)
	for i := range 140_000 {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `"m%d": 1`, i)
	}
	buf.WriteString(`}}`)
	for b.Loop() {
		if k := repeatedManifestKey(buf.Bytes()); k != "" {
			b.Fatal(k)
		}
	}
}

// A weighted directed graph differing from the bundle's in its weights,
// its weight column or an arc is refused naming the difference, as the
// direction already was: the fingerprints alone left the user to diff
// the files.
func TestCheckGraphNamesTheDifference(t *testing.T) {
	ring, path, read := directedRingBundle(t, "0.5")

	for _, tc := range []struct{ name, edges, want string }{
		{"a weight", strings.Replace(ring.String(), "3 4 0.5", "3 4 0.25", 1), "arc 3 -> 4 has weight 0.5 in the bundle's graph, 0.25 in the given one"},
		{"no weight column", strings.ReplaceAll(ring.String(), " 0.5", ""), "the bundle's graph is weighted (u v w lines), the given one is not"},
		{"an arc more", ring.String() + "0 6 0.5\n", "arc 0 -> 6 is in the given graph, not in the bundle's"},
		{"an arc less", strings.Replace(ring.String(), "5 6 0.5\n", "5 5 0.5\n", 1), "arc 5 -> 6 is in the bundle's graph, not in the given one"},
		{"a node renamed", strings.Replace(ring.String(), "11 0 0.5\n", "11 x 0.5\nx 0 0.5\n", 1), `node "x" is in the given graph, not in the bundle's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBundle(path, read(tc.edges))
			require.ErrorIs(t, err, ErrGraphMismatch)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// The manifest alone (a daemon's preflight) can only count.
	m, err := ReadManifest(path)
	require.NoError(t, err)
	require.ErrorContains(t, m.CheckGraph(read(ring.String()+"0 6 0.5\n")), "the bundle's graph has 12 arcs, the given one 13")
	require.ErrorContains(t, m.CheckGraph(read(strings.Replace(ring.String(), "3 4 0.5", "3 4 0.25", 1))),
		"the same node and arc counts: other node ids, other arcs, or other weights")
}

// The difference is named where the fingerprint sees one: a weight of -0
// for 0 (the fingerprint writes them apart, == does not), and the
// manifest alone does not claim equal edge counts it has no count for.
func TestCheckGraphNamesASignedZeroAndCountsOnlyWhatItKnows(t *testing.T) {
	ring, path, read := directedRingBundle(t, "0")
	g := read(ring.String())
	_, err := LoadBundle(path, read(strings.Replace(ring.String(), "3 4 0\n", "3 4 -0\n", 1)))
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.ErrorContains(t, err, "arc 3 -> 4 has weight 0 in the bundle's graph, -0 in the given one")

	// An edgeless graph's manifest records 0 edges: a given graph of as
	// many nodes with edges has other edge counts, not the same.
	var isolated strings.Builder
	for i := 0; i < 12; i++ {
		fmt.Fprintf(&isolated, "%d %d 0\n", i, i)
	}
	e := read(isolated.String())
	m := Manifest{ID: "swb-test", Graph: GraphRef{Name: "g", Fingerprint: e.Fingerprint(), Nodes: e.N(), Directed: true}}
	require.NoError(t, m.CheckGraph(e))
	err = m.CheckGraph(g)
	require.ErrorIs(t, err, ErrGraphMismatch)
	require.NotContains(t, err.Error(), "the same node and arc counts")
}

// GraphDifference reads an undirected edge from either end, and names a
// weight, a missing and an extra edge.
func TestGraphDifferenceUndirected(t *testing.T) {
	read := func(text string) *graph.Graph {
		g, err := graph.Read(strings.NewReader(text), "g.edges")
		require.NoError(t, err)
		return g
	}
	want := read("a b 0.5\nb c 0.5\nc d 0.5\n")
	require.Empty(t, GraphDifference(want, read("d c 0.5\nc b 0.5\nb a 0.5\n")), "the same edges written the other way round")
	require.Equal(t, "edge a - b has weight 0.5 in the bundle's graph, 0.25 in the given one", GraphDifference(want, read("b a 0.25\nb c 0.5\nc d 0.5\n")))
	require.Equal(t, "edge b - c is in the bundle's graph, not in the given one", GraphDifference(want, read("a b 0.5\nc d 0.5\nb b 1\n")))
	require.Equal(t, "edge a - d is in the given graph, not in the bundle's", GraphDifference(want, read("a b 0.5\nb c 0.5\nc d 0.5\nd a 0.5\n")))
}

// directedRingBundle writes a test bundle on a directed 12-node ring whose
// arcs weigh w, returning the ring's edge list, the bundle's path, and a
// reader of edge lists as directed graphs.
func directedRingBundle(t *testing.T, w string) (ring *strings.Builder, path string, read func(string) *graph.Graph) {
	t.Helper()
	read = func(text string) *graph.Graph {
		g, err := graph.Read(strings.NewReader(text), "g.edges", graph.Directed(true))
		require.NoError(t, err)
		return g
	}
	ring = &strings.Builder{}
	for i := 0; i < 12; i++ {
		fmt.Fprintf(ring, "%d %d %s\n", i, (i+1)%12, w)
	}
	g := read(ring.String())
	path = filepath.Join(t.TempDir(), "ring.swb")
	b := testBundleOn(t, g)
	b.Manifest.Graph.Directed = true
	require.NoError(t, b.WriteFile(path))
	_, err := LoadBundle(path, g)
	require.NoError(t, err)
	return ring, path, read
}

// LoadBundleSHA256 loads as LoadBundle does and gives the SHA-256 of the
// file it read; it refuses what LoadBundle refuses.
func TestLoadBundleSHA256(t *testing.T) {
	b := testBundle(t)
	path := filepath.Join(t.TempDir(), "ring.swb")
	require.NoError(t, b.WriteFile(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	want := sha256.Sum256(raw)
	got, sum, err := LoadBundleSHA256(path, b.Graph, WithoutVAE())
	require.NoError(t, err)
	require.Equal(t, want[:], sum)
	require.Equal(t, b.Manifest.ID, got.Manifest.ID)
	require.Nil(t, got.VAE)
	require.Same(t, b.Graph, got.Graph)

	cut := filepath.Join(t.TempDir(), "cut.swb")
	require.NoError(t, os.WriteFile(cut, raw[:len(raw)-30], 0o644))
	_, sum, err = LoadBundleSHA256(cut, nil)
	require.ErrorIs(t, err, ErrBadBundle)
	require.Nil(t, sum)
	_, _, err = LoadBundleSHA256(filepath.Join(t.TempDir(), "none.swb"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}
