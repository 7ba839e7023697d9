package localize

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/prior"
)

// FormatVersion is the bundle format this package writes. It is bumped
// whenever an entry changes meaning; newer bundles, and ones older than
// MinFormatVersion, are refused rather than misread. Format 2 added the
// manifest's source_rule, which a reader of format 1 would ignore and
// so report another source set than the one validation chose; format 3
// added ranking, which a reader of format 2 would ignore and so rank
// (and, under a count rule, cut) otherwise. A ranking value added since
// (infected-then-predicted) needs no new format: a format 3 reader that
// predates it refuses the manifest, naming the field. Format 4 added
// lone_infected_first, which a reader of format 3 would ignore; format 5
// added calibration, which a reader of format 4 would ignore; format 6
// added forward.ignore_weights, which a reader of format 5 would ignore
// and so configure the forward model on weights it was not fitted on;
// format 7 added source_chance, which a reader of format 6 would ignore
// and so answer without the chances.
const FormatVersion = 7

// MinFormatVersion is the oldest format this package reads: format 1
// bundles read as format 7 ones with the threshold rule and the descent's
// ranking, format 2 ones with the descent's ranking, formats 1-3 without
// lifting the lone infected nodes, formats 1-4 without a calibration,
// formats 1-5 with the forward model on the graph's weights, as they were
// fitted, and formats 1-6 without a source chance.
const MinFormatVersion = 1

// Sentinel errors of bundle loading.
var (
	// ErrBadBundle is returned for a bundle file that cannot be read: not a
	// bundle, an entry missing, an entry that does not decode.
	ErrBadBundle = errors.New("bad bundle")
	// ErrBundleVersion is returned for a bundle of another format version.
	ErrBundleVersion = errors.New("unsupported bundle format version")
	// ErrBundleChecksum is returned when an entry's SHA-256 does not match
	// the manifest: the file was damaged or edited.
	ErrBundleChecksum = errors.New("bundle checksum mismatch")
	// ErrGraphMismatch is returned when a bundle is loaded for a graph other
	// than the one it was trained on.
	ErrGraphMismatch = errors.New("bundle trained on another graph")
	// ErrIncompleteBundle is returned by Write for a bundle that lacks a
	// part the file holds: its VAE (loaded WithoutVAE), its prior terms or
	// its graph.
	ErrIncompleteBundle = errors.New("bundle incomplete")
)

// Entry names inside the bundle archive.
const (
	entryManifest = "manifest.json"
	entryVAE      = "prior/vae.bin"
	entryTerms    = "prior/terms.bin"
	entryForward  = "forward/state.bin"
	entryGraph    = "graph.edges"
)

// Manifest describes a bundle: what it was trained on and with, and how
// well it did. It is the first entry of the archive, as readable JSON.
type Manifest struct {
	Format    int       `json:"format"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Graph     GraphRef  `json:"graph"`
	// Diffusion is the simulation configuration the training cascades came
	// from, or a note that they were read from a file.
	Diffusion json.RawMessage `json:"diffusion,omitempty"`
	Forward   ForwardRef      `json:"forward"`
	Prior     PriorRef        `json:"prior"`
	// Threshold is delta, chosen on the validation split.
	Threshold float64 `json:"threshold"`
	// SourceRule is how the source set is cut from the scores, chosen on
	// the validation split with delta; the zero rule is the threshold.
	SourceRule SourceRule `json:"source_rule,omitzero"`
	// Ranking is how the observed-uninfected nodes rank against the
	// infected ones, chosen on the validation split before delta.
	Ranking Ranking `json:"ranking,omitempty"`
	// LoneInfectedFirst ranks the lone infected nodes (see LoneInfected)
	// above every other node, after Ranking; chosen on the validation
	// split after it (see ChooseLoneFirst).
	LoneInfectedFirst bool `json:"lone_infected_first,omitempty"`
	// Calibration, when set, replaces the infected nodes' scores by the
	// validation probability that such a node is a source, given its
	// score and its infected component's size, after Ranking (see
	// Calibration); chosen on the validation split instead of
	// LoneInfectedFirst (see ChooseCalibration).
	Calibration *Calibration `json:"calibration,omitempty"`
	// SourceChance, when set, maps each node's final score to the chance
	// that it is a source, measured once every choice above was made
	// (see SourceChance); absent from bundles of format 6 and older.
	SourceChance *SourceChance `json:"source_chance,omitempty"`
	// Solve holds the inference settings used when delta was chosen; a
	// caller that changes them should choose delta again.
	Solve SolveRef `json:"solve"`
	// Metrics are training and validation metrics ("forward_val_mse",
	// "prior_val_bce", "val_f1", ...).
	Metrics map[string]float64 `json:"metrics"`
	// Checksums maps each other entry to its hex SHA-256.
	Checksums map[string]string `json:"checksums"`
}

// GraphRef identifies the graph a bundle belongs to.
type GraphRef struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
	Nodes       int    `json:"nodes"`
	Edges       int    `json:"edges"`
	Directed    bool   `json:"directed"`
}

// ForwardRef identifies the forward model a bundle's state belongs to.
type ForwardRef struct {
	Name    string            `json:"name"`
	Version string            `json:"version"`
	SHA256  string            `json:"sha256,omitempty"`
	Params  map[string]string `json:"params,omitempty"`
	// IgnoreWeights records that the forward model was fitted, and so is
	// configured, on the graph without its edge weights: its training
	// cascades spread along every arc alike (SI, SIR), and a forward model
	// reads a weighted graph's weights as infection probabilities.
	IgnoreWeights bool `json:"ignore_weights,omitempty"`
}

// ForwardGraph is the graph a forward model of this reference is
// configured on: g, or g without its weights when IgnoreWeights.
func (r ForwardRef) ForwardGraph(g *graph.Graph) *graph.Graph {
	if r.IgnoreWeights {
		return g.WithoutWeights()
	}
	return g
}

// PriorRef records the prior's sizes.
type PriorRef struct {
	Hidden     int `json:"hidden"`
	Latent     int `json:"latent"`
	Prototypes int `json:"prototypes"`
}

// SolveRef records the inference settings delta was chosen with.
type SolveRef struct {
	Restarts     int     `json:"restarts"`
	InitSteps    int     `json:"init_steps"`
	OptSteps     int     `json:"opt_steps"`
	LearningRate float64 `json:"learning_rate"`
	PriorWeight  float64 `json:"prior_weight"`
	// Variant is the inference schedule (Full or DataInit); bundles made
	// before it was recorded use Full.
	Variant Variant `json:"variant,omitempty"`
}

// Bundle is a trained SL-VAE model for one graph: the prior, the forward
// model's state and the threshold.
type Bundle struct {
	Manifest Manifest
	// VAE is the trained prior network; kept so a bundle can be inspected
	// or its prototypes re-drawn. Nil when loaded WithoutVAE.
	VAE *prior.VAE
	// Terms are the precomputed prior terms inference uses.
	Terms *prior.Terms
	// ForwardState is the opaque blob the forward plugin's Fit returned.
	ForwardState []byte
	// Graph is the graph the bundle was trained on, stored in the bundle
	// as an edge list so that a bundle alone is enough to localize.
	Graph *graph.Graph

	// The VAE's sizes, read from its header when it was loaded
	// WithoutVAE.
	vaeNodes  int
	vaeConfig prior.Config
}

// Prior returns the prior terms in the form Solve needs.
func (b *Bundle) Prior() Prior { return b.Terms }

// Options returns DefaultOptions adjusted to the settings delta was
// chosen with.
func (b *Bundle) Options() Options {
	o := DefaultOptions()
	s := b.Manifest.Solve
	if s.Restarts > 0 {
		o.Restarts = s.Restarts
	}
	if s.InitSteps > 0 || s.OptSteps > 0 {
		o.InitSteps, o.OptSteps = s.InitSteps, s.OptSteps
	}
	if s.LearningRate > 0 {
		o.LearningRate = s.LearningRate
	}
	if s.PriorWeight > 0 {
		o.PriorWeight = s.PriorWeight
	}
	if s.Variant != "" {
		o.Variant = s.Variant
	}
	return o
}

// CheckGraph reports whether g is the graph the bundle was trained on,
// and when it is not, what differs, from the bundle's own copy of its
// graph: the weight column, a node, an edge or a weight.
func (b *Bundle) CheckGraph(g *graph.Graph) error {
	return b.Manifest.checkGraph(g, func() string {
		if b.Graph == nil || b.Graph.Directed() != g.Directed() {
			return ""
		}
		return GraphDifference(b.Graph, g)
	})
}

// CheckGraph reports whether g is the graph the bundle of m was trained on
// (ErrGraphMismatch when not, saying when --directed is the difference,
// and otherwise when the edge counts differ).
func (man Manifest) CheckGraph(g *graph.Graph) error { return man.checkGraph(g, nil) }

// checkGraph is CheckGraph; detail, when not nil and the direction
// matches, says what differs where the manifest alone cannot.
func (man Manifest) checkGraph(g *graph.Graph, detail func() string) error {
	m := man.Graph
	if fp := g.Fingerprint(); fp != m.Fingerprint || g.N() != m.Nodes {
		hint := ""
		switch {
		case g.Directed() != m.Directed && g.N() == m.Nodes:
			// The usual cause: the same edge file read the other way
			// (which keeps its nodes).
			hint = "; the bundle's graph is undirected, the given one directed: drop --directed (in a config file, directed: false for the graph)"
			if m.Directed {
				hint = "; the bundle's graph is directed, the given one undirected: pass --directed (in a config file, directed: true for the graph)"
			}
		case g.Directed() != m.Directed:
			// Another edge file: the flag alone would not make it fit.
			hint = fmt.Sprintf("; another graph, not only read the other way: the node counts differ, and the bundle's graph is %s, the given one %s", directedness(m.Directed), directedness(g.Directed()))
		case detail != nil:
			if d := detail(); d != "" {
				hint = "; " + d
			}
		}
		if hint == "" && g.Directed() == m.Directed {
			what := "edges"
			if m.Directed {
				what = "arcs"
			}
			switch e := g.Stats().Edges; {
			case m.Edges > 0 && e != m.Edges:
				hint = fmt.Sprintf("; the bundle's graph has %d %s, the given one %d", m.Edges, what, e)
			case g.N() == m.Nodes && e == m.Edges:
				// Not where the manifest records no edges (an edgeless
				// graph) and the given graph has some.
				hint = fmt.Sprintf("; the same node and %s counts: other node ids, other %s, or other weights (a weight changed, or the weight column added or dropped)", strings.TrimSuffix(what, "s"), what)
			}
		}
		return fmt.Errorf("%w: bundle %s is for graph %q (fingerprint %.12s, %d nodes), given graph has fingerprint %.12s and %d nodes%s",
			ErrGraphMismatch, man.ID, m.Name, m.Fingerprint, m.Nodes, fp, g.N(), hint)
	}
	return nil
}

func directedness(directed bool) string {
	if directed {
		return "directed"
	}
	return "undirected"
}

// GraphDifference says how got differs from want, two graphs read the
// same way (both directed or both not), naming the first difference
// found: the weight column, a node of one missing from the other, an
// edge of one missing from the other, or an edge's weight. "" when it
// finds none (the graphs are the same).
func GraphDifference(want, got *graph.Graph) string {
	what, sep := "edge", " - "
	if want.Directed() {
		what, sep = "arc", " -> "
	}
	switch {
	case want.Weighted() && !got.Weighted():
		return "the bundle's graph is weighted (u v w lines), the given one is not: use the edge file the bundle was trained on, with its weight column"
	case !want.Weighted() && got.Weighted():
		return "the bundle's graph is unweighted (u v lines), the given one has a weight column: use the edge file the bundle was trained on, without it"
	}
	for _, id := range want.IDs() {
		if _, ok := got.Index(id); !ok {
			return fmt.Sprintf("node %q is in the bundle's graph, not in the given one", id)
		}
	}
	for _, id := range got.IDs() {
		if _, ok := want.Index(id); !ok {
			return fmt.Sprintf("node %q is in the given graph, not in the bundle's", id)
		}
	}
	// Node by node over the out-lists, in O(nodes) memory: a map of every
	// edge by its ids took gigabytes on the largest graphs a bundle holds,
	// and this runs in the daemon's start on a mismatch.
	toGot := make([]int, want.N())
	for u, id := range want.IDs() {
		toGot[u], _ = got.Index(id)
	}
	at := make([]int, got.N()) // position+1 in got's out-list of the node at hand; 0 for none
	var matched []bool
	weight := func(w []float64, k int) float64 {
		if w == nil {
			return 1
		}
		return w[k]
	}
	for u := range want.N() {
		gu := toGot[u]
		gotNbr, gotW := got.Out(gu)
		for k, v := range gotNbr {
			at[v] = k + 1
		}
		if cap(matched) < len(gotNbr) {
			matched = make([]bool, len(gotNbr))
		}
		matched = matched[:len(gotNbr)]
		clear(matched)
		wantNbr, wantW := want.Out(u)
		diff := ""
		for k, v := range wantNbr {
			gv := toGot[v]
			pos := at[gv] - 1
			switch {
			case pos < 0:
				diff = fmt.Sprintf("%s %s%s%s is in the bundle's graph, not in the given one", what, want.ID(u), sep, want.ID(v))
			case math.Float64bits(weight(wantW, k)) != math.Float64bits(weight(gotW, pos)):
				// Bits, not ==: the fingerprint writes -0 apart from 0.
				diff = fmt.Sprintf("%s %s%s%s has weight %s in the bundle's graph, %s in the given one", what, want.ID(u), sep, want.ID(v),
					strconv.FormatFloat(weight(wantW, k), 'g', -1, 64), strconv.FormatFloat(weight(gotW, pos), 'g', -1, 64))
			default:
				matched[pos] = true
				continue
			}
			break
		}
		if diff == "" {
			for k, ok := range matched {
				if !ok {
					diff = fmt.Sprintf("%s %s%s%s is in the given graph, not in the bundle's", what, want.ID(u), sep, got.ID(gotNbr[k]))
					break
				}
			}
		}
		for _, v := range gotNbr {
			at[v] = 0
		}
		if diff != "" {
			return diff
		}
	}
	return ""
}

// newBundleID returns a random identifier such as "swb-3f9a1c2b7d4e".
func newBundleID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "swb-" + hex.EncodeToString(b[:])
}

// Write writes the bundle as a zip archive: manifest.json first, then the
// prior and forward entries. It fills in the manifest's checksums and
// drops its undefined (NaN or infinite) metrics.
func (b *Bundle) Write(w io.Writer) error {
	switch {
	case b.VAE == nil:
		return fmt.Errorf("writing bundle: no VAE (a bundle loaded WithoutVAE cannot be written back; load it without that option): %w", ErrIncompleteBundle)
	case b.Terms == nil:
		return fmt.Errorf("writing bundle: no prior terms: %w", ErrIncompleteBundle)
	case b.Graph == nil:
		return fmt.Errorf("writing bundle: no graph: %w", ErrIncompleteBundle)
	}
	vae, err := b.VAE.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encoding prior: %w", err)
	}
	terms, err := b.Terms.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encoding prior terms: %w", err)
	}
	var edges bytes.Buffer
	if err := writeEdges(&edges, b.Graph); err != nil {
		return fmt.Errorf("encoding graph: %w", err)
	}
	entries := map[string][]byte{entryVAE: vae, entryTerms: terms, entryForward: b.ForwardState, entryGraph: edges.Bytes()}
	// A metric undefined on these cascades (a ROC-AUC where every node was
	// a source, say) is NaN, which JSON cannot hold: it is left out, and
	// readers print a missing metric as n/a.
	for k, v := range b.Manifest.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(b.Manifest.Metrics, k)
		}
	}
	b.Manifest.Format = FormatVersion
	b.Manifest.Checksums = make(map[string]string, len(entries))
	for name, data := range entries {
		b.Manifest.Checksums[name] = sha256Hex(data)
	}
	manifest, err := json.MarshalIndent(b.Manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	zw := zip.NewWriter(w)
	names := []string{entryManifest, entryGraph, entryVAE, entryTerms, entryForward}
	entries[entryManifest] = manifest
	for _, name := range names {
		f, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: b.Manifest.CreatedAt})
		if err != nil {
			return fmt.Errorf("writing bundle entry %s: %w", name, err)
		}
		if _, err := f.Write(entries[name]); err != nil {
			return fmt.Errorf("writing bundle entry %s: %w", name, err)
		}
	}
	return zw.Close()
}

// WriteFile writes the bundle to path atomically (a temporary file renamed
// into place), so a crash never leaves half a bundle behind.
func (b *Bundle) WriteFile(path string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".bundle-*")
	if err != nil {
		return fmt.Errorf("writing bundle %q: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := b.Write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("writing bundle %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing bundle %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing bundle %q: %w", path, err)
	}
	return nil
}

// LoadBundle reads the bundle at path and checks its format version and
// entry checksums. When g is not nil, it must be the graph the bundle was
// trained on (same fingerprint) and becomes the bundle's Graph; when g is
// nil the bundle's own copy of the graph is used.
func LoadBundle(path string, g *graph.Graph, opts ...LoadOption) (*Bundle, error) {
	return loadBundle(path, g, nil, opts...)
}

// LoadBundleSHA256 is LoadBundle that also returns the SHA-256 of the
// file it loaded. The file is hashed through the descriptor it is read
// from, so a file replaced at path meanwhile (renamed over it, as
// WriteFile does) cannot pair one file's bundle with another's sum; a
// daemon compares the sum with the file's later to tell whether the
// bundle it runs is still the one at path.
func LoadBundleSHA256(path string, g *graph.Graph, opts ...LoadOption) (*Bundle, []byte, error) {
	h := sha256.New()
	b, err := loadBundle(path, g, h, opts...)
	if err != nil {
		return nil, nil, err
	}
	return b, h.Sum(nil), nil
}

// loadBundle is LoadBundle, writing the whole file to sum first when sum
// is not nil.
func loadBundle(path string, g *graph.Graph, sum hash.Hash, opts ...LoadOption) (*Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading bundle %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("loading bundle %q: %w", path, err)
	}
	if sum != nil {
		// The size read below, not to EOF: the bytes hashed are the
		// archive ReadBundle reads.
		if _, err := io.Copy(sum, io.NewSectionReader(f, 0, fi.Size())); err != nil {
			return nil, fmt.Errorf("loading bundle %q: hashing: %w", path, err)
		}
	}
	// The archive is read in place: entries ReadBundle skips are never
	// read at all.
	b, err := ReadBundle(f, fi.Size(), opts...)
	if err != nil {
		return nil, fmt.Errorf("loading bundle %q: %w", path, err)
	}
	if g != nil {
		if err := b.CheckGraph(g); err != nil {
			return nil, fmt.Errorf("loading bundle %q: %w", path, err)
		}
		b.Graph = g
	}
	return b, nil
}

// Limits of bundle loading. An entry's size is what it holds decompressed.
// A prior for an n-node graph takes about 8·n·(3·hidden) bytes (VAE and
// terms, about 15 MB at 5,000 nodes and the default hidden 128, 60 MB at
// the paper's 512) and a forward state a few MB there, so a bundle over
// maxBundleBytes is not one Train made for any graph sourcewatch localizes
// on; refusing it keeps a hostile archive (a zip bomb) from exhausting
// memory.
const (
	// maxBundleBytes caps the entries of a bundle together.
	maxBundleBytes = 1 << 30
	// maxManifestBytes caps manifest.json, a few KB of JSON.
	maxManifestBytes = 1 << 20
	// maxGraphBytes caps graph.edges, an edge list (about 20 bytes an
	// edge: 13 million edges).
	maxGraphBytes = 256 << 20
)

// Limits of a bundle's solve settings: far above any Train records (R = 8,
// 20 + 50 steps), low enough that a hostile manifest cannot make Solve
// allocate R·n-sized buffers or step for hours. MaxRestarts bounds a
// caller's restarts too.
const (
	MaxRestarts = 4096
	maxSteps    = 100000
)

// readLimits bounds the bytes ReadBundle reads: each entry of the format
// (others are skipped) and their total.
type readLimits struct {
	total int64
	entry map[string]int64
}

func defaultReadLimits() readLimits {
	return readLimits{total: maxBundleBytes, entry: map[string]int64{
		entryManifest: maxManifestBytes,
		entryGraph:    maxGraphBytes,
		entryVAE:      maxBundleBytes,
		entryTerms:    maxBundleBytes,
		entryForward:  maxBundleBytes,
	}}
}

// ReadBundle decodes a bundle archive and verifies its format version and
// checksums, that its settings are in range and that its parts agree on
// the graph's size. It does not check the graph; see CheckGraph.
//
// Entries other than those of the format are skipped unread. An entry
// holding more than the format allows (1 GiB for the bundle, 1 MiB for
// the manifest, 256 MiB for the graph) is refused before it is read.
func ReadBundle(r io.ReaderAt, size int64, opts ...LoadOption) (*Bundle, error) {
	return readBundle(r, size, defaultReadLimits(), opts...)
}

// LoadOption configures LoadBundle and ReadBundle.
type LoadOption func(*loadOptions)

type loadOptions struct{ withoutVAE bool }

// WithoutVAE leaves Bundle.VAE nil: inference reads the prior terms, not
// the network they were computed from, which decoded (weights and their
// gradient buffers) is the larger part of a loaded bundle, about 32·n·h
// bytes for n nodes and hidden width h (200 MB of 310 at 50,000 nodes).
// The VAE entry's checksum and header are still checked. Such a bundle
// cannot be written back: Write returns ErrIncompleteBundle.
func WithoutVAE() LoadOption { return func(o *loadOptions) { o.withoutVAE = true } }

func readBundle(r io.ReaderAt, size int64, lim readLimits, opts ...LoadOption) (*Bundle, error) {
	var lo loadOptions
	for _, opt := range opts {
		opt(&lo)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: not a bundle archive: %w", ErrBadBundle, err)
	}
	// The entries of the format, each once; the manifest is read first, so
	// that its checksums refuse a damaged entry while it streams past,
	// before it is held in memory (a corrupt header can declare hundreds
	// of MiB).
	var files []*zip.File
	var manifest *zip.File
	seen := map[string]bool{}
	for _, f := range zr.File {
		if _, ok := lim.entry[f.Name]; !ok {
			continue
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("%w: entry %s appears twice", ErrBadBundle, f.Name)
		}
		seen[f.Name] = true
		if f.Name == entryManifest {
			manifest = f
		} else {
			files = append(files, f)
		}
	}
	if manifest == nil {
		return nil, fmt.Errorf("%w: no %s", ErrBadBundle, entryManifest)
	}
	raw := make(map[string][]byte, len(lim.entry))
	var total int64
	// limitOf checks f's declared size and returns what it may hold.
	limitOf := func(f *zip.File) (int64, error) {
		limit := lim.entry[f.Name]
		if f.UncompressedSize64 > uint64(limit) {
			return 0, fmt.Errorf("%w: entry %s holds %d bytes, over its limit of %d", ErrBadBundle, f.Name, f.UncompressedSize64, limit)
		}
		if f.UncompressedSize64 > uint64(lim.total-total) {
			return 0, fmt.Errorf("%w: entry %s holds %d bytes, over the %d left of the bundle's limit of %d",
				ErrBadBundle, f.Name, f.UncompressedSize64, lim.total-total, lim.total)
		}
		return min(limit, lim.total-total), nil
	}
	// stream copies f, up to limit bytes, to w.
	stream := func(f *zip.File, limit int64, w io.Writer) (int64, error) {
		rc, err := f.Open()
		if err != nil {
			return 0, fmt.Errorf("%w: entry %s: %w", ErrBadBundle, f.Name, err)
		}
		defer rc.Close()
		// archive/zip stops at the declared size; the limit holds
		// whatever the header says.
		n, err := io.Copy(w, io.LimitReader(rc, limit+1))
		if err != nil {
			// archive/zip checks each entry's CRC-32 on read.
			return n, fmt.Errorf("%w: entry %s: %w", ErrBundleChecksum, f.Name, err)
		}
		if n > limit {
			return n, fmt.Errorf("%w: entry %s holds more than its limit of %d bytes", ErrBadBundle, f.Name, limit)
		}
		return n, nil
	}
	read := func(f *zip.File) error {
		limit, err := limitOf(f)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		buf.Grow(int(f.UncompressedSize64))
		n, err := stream(f, limit, &buf)
		if err != nil {
			return err
		}
		total += n
		raw[f.Name] = buf.Bytes()
		return nil
	}
	if err := read(manifest); err != nil {
		return nil, err
	}
	mdata := raw[entryManifest]
	m, err := decodeManifest(mdata)
	if err != nil {
		return nil, err
	}
	// Every entry is checked against the manifest before it is held, so
	// every entry must have a checksum there.
	checked := []string{entryGraph, entryVAE, entryTerms, entryForward}
	for name := range m.Checksums {
		if !slices.Contains(checked, name) {
			return nil, fmt.Errorf("%w: manifest has a checksum for %s, not an entry of the format", ErrBadBundle, name)
		}
	}
	for _, name := range checked {
		if _, ok := m.Checksums[name]; !ok {
			return nil, fmt.Errorf("%w: manifest has no checksum for %s", ErrBadBundle, name)
		}
	}
	for _, f := range files {
		if want, ok := m.Checksums[f.Name]; ok {
			limit, err := limitOf(f)
			if err != nil {
				return nil, err
			}
			h := sha256.New()
			if _, err := stream(f, limit, h); err != nil {
				return nil, err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != want {
				return nil, fmt.Errorf("%w: entry %s has sha256 %s, manifest says %s", ErrBundleChecksum, f.Name, got, want)
			}
		}
		if err := read(f); err != nil {
			return nil, err
		}
	}
	for _, name := range checked {
		data, ok := raw[name]
		if !ok {
			return nil, fmt.Errorf("%w: entry %s missing", ErrBadBundle, name)
		}
		if got, want := sha256Hex(data), m.Checksums[name]; got != want {
			return nil, fmt.Errorf("%w: entry %s has sha256 %s, manifest says %s", ErrBundleChecksum, name, got, want)
		}
	}
	b := &Bundle{Manifest: m, Terms: new(prior.Terms), ForwardState: raw[entryForward]}
	if lo.withoutVAE {
		b.vaeNodes, b.vaeConfig, err = prior.ReadVAEHeader(raw[entryVAE])
	} else {
		b.VAE = new(prior.VAE)
		err = b.VAE.UnmarshalBinary(raw[entryVAE])
		b.vaeNodes, b.vaeConfig = b.VAE.Nodes(), b.VAE.Config()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadBundle, entryVAE, err)
	}
	if err := b.Terms.UnmarshalBinary(raw[entryTerms]); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadBundle, entryTerms, err)
	}
	g, err := graph.Read(bytes.NewReader(raw[entryGraph]), entryGraph, graph.Directed(m.Graph.Directed))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	if g.Fingerprint() != m.Graph.Fingerprint || g.N() != m.Graph.Nodes {
		return nil, fmt.Errorf("%w: stored graph (%d nodes, fingerprint %.12s) does not match the manifest (%d nodes, %.12s)",
			ErrBadBundle, g.N(), g.Fingerprint(), m.Graph.Nodes, m.Graph.Fingerprint)
	}
	// Zero in bundles that did not record it.
	if e := len(g.Edges()); m.Graph.Edges != 0 && m.Graph.Edges != e {
		return nil, fmt.Errorf("%w: stored graph has %d edges, the manifest says %d", ErrBadBundle, e, m.Graph.Edges)
	}
	b.Graph = g
	if err := b.checkSizes(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBundle, err)
	}
	return b, nil
}

// check reports the first of the manifest's threshold and solve settings
// out of range, naming its JSON field. A zero solve setting is unset (see
// Options).
func (m *Manifest) check() error {
	s := m.Solve
	switch {
	case !(m.Threshold > 0 && m.Threshold <= 1):
		return fmt.Errorf("threshold: %g outside (0, 1]", m.Threshold)
	case s.Restarts < 0 || s.Restarts > MaxRestarts:
		return fmt.Errorf("solve.restarts: %d outside 0..%d", s.Restarts, MaxRestarts)
	case s.InitSteps < 0 || s.InitSteps > maxSteps:
		return fmt.Errorf("solve.init_steps: %d outside 0..%d", s.InitSteps, maxSteps)
	case s.OptSteps < 0 || s.OptSteps > maxSteps:
		return fmt.Errorf("solve.opt_steps: %d outside 0..%d", s.OptSteps, maxSteps)
	case !(s.LearningRate >= 0 && s.LearningRate <= MaxLearningRate):
		return fmt.Errorf("solve.learning_rate: %g, want a value in [0, %g]", s.LearningRate, float64(MaxLearningRate))
	case !(s.PriorWeight >= 0 && s.PriorWeight <= MaxPriorWeight):
		return fmt.Errorf("solve.prior_weight: %g, want a value in [0, %g]", s.PriorWeight, float64(MaxPriorWeight))
	}
	if err := (Options{Variant: s.Variant}).Validate(); err != nil {
		return fmt.Errorf("solve.%w", err)
	}
	// The name becomes a file name in the plugin directory: a path would
	// reach outside it.
	if f := m.Forward.Name; f == "" || f == "." || f == ".." || strings.ContainsAny(f, `/\`) {
		return fmt.Errorf("forward.name: %q, want a plain plugin name such as \"deepis\"", f)
	}
	if err := m.Ranking.check(); err != nil {
		return err
	}
	if c := m.Calibration; c != nil {
		switch {
		case m.Ranking == RankByScore:
			return fmt.Errorf("calibration: set with the descent's ranking, want ranking %q or %q", InfectedFirst, InfectedThenPredicted)
		case m.LoneInfectedFirst:
			return fmt.Errorf("calibration: set with lone_infected_first, which it replaces")
		}
		if err := c.check(); err != nil {
			return err
		}
	}
	if sc := m.SourceChance; sc != nil {
		if m.Format < 7 {
			return fmt.Errorf("source_chance: in a format %d manifest, which predates it (format 7)", m.Format)
		}
		if err := sc.check(); err != nil {
			return err
		}
	}
	return m.SourceRule.check(m.Graph.Nodes)
}

// decodeManifest decodes manifest.json and checks its format version and
// settings.
func decodeManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrBadBundle, entryManifest, err)
	}
	if k := repeatedManifestKey(data); k != "" {
		return Manifest{}, fmt.Errorf("%w: %s: %s is given twice in one object (a field's name matches in any case): encoding/json keeps the last, another reader the first", ErrBadBundle, entryManifest, k)
	}
	if m.Format < MinFormatVersion || m.Format > FormatVersion {
		return Manifest{}, fmt.Errorf("%w: file has format %d, this sourcewatch reads %d to %d", ErrBundleVersion, m.Format, MinFormatVersion, FormatVersion)
	}
	if err := m.check(); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrBadBundle, entryManifest, err)
	}
	return m, nil
}

// repeatedManifestKey returns the path of the first key of raw given
// twice in one object, or "". A struct's fields match in any case (as
// encoding/json reads them, folding simply: "ſ" is "s"); the keys of the
// manifest's maps (metrics, checksums, params) and of the free-form
// diffusion record only exactly.
func repeatedManifestKey(raw []byte) string {
	type frame struct {
		object, exact, wantKey bool
		path, key              string // this container's path; the current key
		seen                   map[string]bool
	}
	join := func(path, key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if top != nil && top.object && top.wantKey {
			if t == json.Delim('}') {
				stack = stack[:len(stack)-1]
				valueDone()
				continue
			}
			key, _ := t.(string)
			folded := key
			if !top.exact {
				folded = strings.ToLower(strings.ToUpper(key))
			}
			if top.seen[folded] {
				return join(top.path, key)
			}
			top.seen[folded] = true
			top.key, top.wantKey = key, false
			continue
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			f := &frame{object: t == json.Delim('{'), wantKey: true, seen: map[string]bool{}}
			switch {
			case top == nil:
			case top.object:
				f.path, f.exact = join(top.path, top.key), top.exact
				switch strings.ToLower(strings.ToUpper(top.key)) {
				case "metrics", "checksums", "params", "diffusion":
					f.exact = true
				}
			default:
				f.path, f.exact = top.path+"[]", top.exact
			}
			stack = append(stack, f)
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// ReadManifest reads only the manifest of the bundle at path: a check of
// a bundle file (it is one, of a format this sourcewatch reads, its
// archive's directory intact) that costs a few KB where LoadBundle reads
// every entry. It does not verify the entries; LoadBundle does.
func ReadManifest(path string) (Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("loading bundle %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Manifest{}, fmt.Errorf("loading bundle %q: %w", path, err)
	}
	zr, err := zip.NewReader(f, fi.Size())
	if err != nil {
		return Manifest{}, fmt.Errorf("loading bundle %q: %w: not a bundle archive: %w", path, ErrBadBundle, err)
	}
	for _, e := range zr.File {
		if e.Name != entryManifest {
			continue
		}
		if e.UncompressedSize64 > maxManifestBytes {
			return Manifest{}, fmt.Errorf("loading bundle %q: %w: entry %s holds %d bytes, over its limit of %d", path, ErrBadBundle, e.Name, e.UncompressedSize64, maxManifestBytes)
		}
		rc, err := e.Open()
		if err != nil {
			return Manifest{}, fmt.Errorf("loading bundle %q: %w: entry %s: %w", path, ErrBadBundle, e.Name, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes))
		rc.Close()
		if err != nil {
			return Manifest{}, fmt.Errorf("loading bundle %q: %w: entry %s: %w", path, ErrBundleChecksum, e.Name, err)
		}
		m, err := decodeManifest(data)
		if err != nil {
			return Manifest{}, fmt.Errorf("loading bundle %q: %w", path, err)
		}
		return m, nil
	}
	return Manifest{}, fmt.Errorf("loading bundle %q: %w: no %s", path, ErrBadBundle, entryManifest)
}

// checkSizes reports parts of the bundle that disagree on the graph's size
// or the prior's: Solve sizes x by the graph and multiplies it by the
// terms, so a mismatch would fail there, in the middle of a solve.
func (b *Bundle) checkSizes() error {
	n := b.Graph.N()
	vnodes, vc := b.vaeNodes, b.vaeConfig
	if b.VAE != nil {
		vnodes, vc = b.VAE.Nodes(), b.VAE.Config()
	}
	switch {
	case vnodes != n:
		return fmt.Errorf("%s is for %d nodes, %s has %d", entryVAE, vnodes, entryGraph, n)
	case b.Terms.Nodes() != n:
		return fmt.Errorf("%s are for %d nodes, %s has %d", entryTerms, b.Terms.Nodes(), entryGraph, n)
	case b.Terms.Hidden() != vc.Hidden:
		return fmt.Errorf("%s have hidden size %d, %s has %d", entryTerms, b.Terms.Hidden(), entryVAE, vc.Hidden)
	}
	// Sizes the manifest records (bundles Train wrote do) must be the ones
	// of the entries, or inspect would show others than the ones used.
	p := b.Manifest.Prior
	switch {
	case p.Hidden != 0 && p.Hidden != vc.Hidden:
		return fmt.Errorf("%s: prior.hidden is %d, %s has %d", entryManifest, p.Hidden, entryVAE, vc.Hidden)
	case p.Latent != 0 && p.Latent != vc.Latent:
		return fmt.Errorf("%s: prior.latent is %d, %s has %d", entryManifest, p.Latent, entryVAE, vc.Latent)
	case p.Prototypes != 0 && p.Prototypes != b.Terms.Prototypes():
		return fmt.Errorf("%s: prior.prototypes is %d, %s have %d", entryManifest, p.Prototypes, entryTerms, b.Terms.Prototypes())
	}
	return nil
}

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// writeEdges writes g as an edge list graph.Read reads back to the same
// fingerprint: node ids, and the weight column when g is weighted.
func writeEdges(w io.Writer, g *graph.Graph) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# %d nodes, written by sourcewatch\n", g.N())
	// A node on no edge is written as a self-loop, the one line that
	// names it: the loader keeps the node and drops the loop.
	onEdge := make([]bool, g.N())
	for _, e := range g.Edges() {
		onEdge[e.From], onEdge[e.To] = true, true
	}
	for v, ok := range onEdge {
		if ok {
			continue
		}
		if g.Weighted() {
			fmt.Fprintf(bw, "%s %s 0\n", g.ID(v), g.ID(v))
		} else {
			fmt.Fprintf(bw, "%s %s\n", g.ID(v), g.ID(v))
		}
	}
	for _, e := range g.Edges() {
		if g.Weighted() {
			fmt.Fprintf(bw, "%s %s %s\n", g.ID(e.From), g.ID(e.To), strconv.FormatFloat(e.W, 'g', -1, 64))
		} else {
			fmt.Fprintf(bw, "%s %s\n", g.ID(e.From), g.ID(e.To))
		}
	}
	return bw.Flush()
}
