package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
	"github.com/sourcewatch/sourcewatch/graph"
)

// ErrBadMessage is returned when a protocol message cannot be decoded:
// byte lengths that do not match the declared shape, indices out of range,
// or a graph whose fingerprint does not match its edges.
var ErrBadMessage = errors.New("bad forward protocol message")

// Packed vectors are little-endian because that is what every machine
// sourcewatch runs on uses natively, and the proto documents it for plugins
// in other languages.

// putFloats writes v into dst, which holds at least 8*len(v) bytes.
func putFloats(dst []byte, v []float64) {
	dst = dst[:8*len(v)]
	for i, f := range v {
		binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(f))
	}
}

// getFloats reads len(dst) values from b, which holds at least 8*len(dst)
// bytes.
func getFloats(dst []float64, b []byte) {
	b = b[:8*len(dst)]
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
}

func packIndices(dst []byte, idx []int) []byte {
	for _, i := range idx {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(i))
	}
	return dst
}

// unpackIndices decodes packed uint32 indices and checks each is below n.
func unpackIndices(b []byte, n int, field string) ([]int, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of uint32: %w", field, len(b), ErrBadMessage)
	}
	out := make([]int, len(b)/4)
	for k := range out {
		i := int(binary.LittleEndian.Uint32(b[4*k:]))
		if i >= n {
			return nil, fmt.Errorf("%s: index %d out of range for %d nodes: %w", field, i, n, ErrBadMessage)
		}
		out[k] = i
	}
	return out, nil
}

// MatrixToProto packs m row-major as little-endian float64.
func MatrixToProto(m *mat.Dense) *forwardpb.Matrix {
	r, c := m.Dims()
	raw := m.RawMatrix()
	data := make([]byte, 8*r*c)
	if raw.Stride == c {
		putFloats(data, raw.Data[:r*c])
	} else {
		for i := 0; i < r; i++ {
			putFloats(data[8*i*c:], raw.Data[i*raw.Stride:i*raw.Stride+c])
		}
	}
	return &forwardpb.Matrix{Rows: uint32(r), Cols: uint32(c), Data: data}
}

// MatrixFromProto unpacks a matrix, checking that the byte length matches
// rows*cols*8. field names the message field in errors.
func MatrixFromProto(p *forwardpb.Matrix, field string) (*mat.Dense, error) {
	if p == nil {
		return nil, fmt.Errorf("%s: missing matrix: %w", field, ErrBadMessage)
	}
	r, c := int(p.GetRows()), int(p.GetCols())
	if r == 0 || c == 0 {
		return nil, fmt.Errorf("%s: empty %dx%d matrix: %w", field, r, c, ErrBadMessage)
	}
	// rows and cols are uint32, so their product fits a uint64; 8 times it
	// need not, and an int would wrap to a length that passes.
	if n := len(p.GetData()); n%8 != 0 || uint64(n/8) != uint64(r)*uint64(c) {
		return nil, fmt.Errorf("%s: %dx%d matrix needs %d float64 values, 8 bytes each, got %d bytes: %w", field, r, c, uint64(r)*uint64(c), n, ErrBadMessage)
	}
	data := make([]float64, r*c)
	getFloats(data, p.GetData())
	return mat.NewDense(r, c, data), nil
}

// GraphToProto encodes g's distinct edges, ids and fingerprint.
func GraphToProto(g *graph.Graph) *forwardpb.Graph {
	edges := g.Edges()
	p := &forwardpb.Graph{
		Nodes:       uint32(g.N()),
		Directed:    g.Directed(),
		Weighted:    g.Weighted(),
		Src:         make([]byte, 0, 4*len(edges)),
		Dst:         make([]byte, 0, 4*len(edges)),
		Fingerprint: g.Fingerprint(),
		Ids:         append([]string(nil), g.IDs()...),
	}
	if g.Weighted() {
		p.Weights = make([]byte, 0, 8*len(edges))
	}
	for _, e := range edges {
		p.Src = binary.LittleEndian.AppendUint32(p.Src, uint32(e.From))
		p.Dst = binary.LittleEndian.AppendUint32(p.Dst, uint32(e.To))
		if g.Weighted() {
			p.Weights = binary.LittleEndian.AppendUint64(p.Weights, math.Float64bits(e.W))
		}
	}
	return p
}

// MaxNodesWithoutIDs is the most nodes a Graph message may name without
// sending their ids. GraphToProto always sends them.
const MaxNodesWithoutIDs = 1 << 20

// GraphFromProto rebuilds a graph, validating everything graph.New would
// panic on, and checks the rebuilt fingerprint against the sent one so a
// plugin never serves a different graph than the host thinks.
func GraphFromProto(p *forwardpb.Graph) (*graph.Graph, error) {
	if p == nil {
		return nil, fmt.Errorf("graph: missing: %w", ErrBadMessage)
	}
	n := int(p.GetNodes())
	if n == 0 {
		return nil, fmt.Errorf("graph: no nodes: %w", ErrBadMessage)
	}
	if len(p.GetIds()) == 0 && n > MaxNodesWithoutIDs {
		// Nothing in the message bounds n then, and the graph would
		// allocate every default id: a 10-byte message could exhaust
		// the plugin's memory.
		return nil, fmt.Errorf("graph: %d nodes and no ids; send the ids (above %d nodes they are required): %w", n, MaxNodesWithoutIDs, ErrBadMessage)
	}
	src, err := unpackIndices(p.GetSrc(), n, "graph.src")
	if err != nil {
		return nil, err
	}
	dst, err := unpackIndices(p.GetDst(), n, "graph.dst")
	if err != nil {
		return nil, err
	}
	if len(src) != len(dst) {
		return nil, fmt.Errorf("graph: %d src but %d dst endpoints: %w", len(src), len(dst), ErrBadMessage)
	}
	var w []float64
	if p.GetWeighted() {
		if len(p.GetWeights()) != 8*len(src) {
			return nil, fmt.Errorf("graph.weights: %d edges need %d bytes, got %d: %w", len(src), 8*len(src), len(p.GetWeights()), ErrBadMessage)
		}
		w = make([]float64, len(src))
		getFloats(w, p.GetWeights())
	}
	edges := make([]graph.Edge, len(src))
	for k := range edges {
		edges[k] = graph.Edge{From: src[k], To: dst[k], W: 1}
		if w != nil {
			if !(w[k] >= 0 && w[k] <= 1) {
				return nil, fmt.Errorf("graph.weights: edge %d-%d weight %v not in [0,1]: %w", src[k], dst[k], w[k], ErrBadMessage)
			}
			edges[k].W = w[k]
		}
	}
	var ids []string
	if len(p.GetIds()) > 0 {
		ids = p.GetIds()
		if len(ids) != n {
			return nil, fmt.Errorf("graph.ids: %d ids for %d nodes: %w", len(ids), n, ErrBadMessage)
		}
		seen := make(map[string]struct{}, n)
		for _, id := range ids {
			if _, dup := seen[id]; dup {
				return nil, fmt.Errorf("graph.ids: duplicate id %q: %w", id, ErrBadMessage)
			}
			seen[id] = struct{}{}
		}
	}
	g := graph.New(n, edges, ids, p.GetDirected(), p.GetWeighted())
	if fp := p.GetFingerprint(); fp != "" && fp != g.Fingerprint() {
		return nil, fmt.Errorf("graph: fingerprint %s sent, %s rebuilt: %w", fp, g.Fingerprint(), ErrBadMessage)
	}
	return g, nil
}

// PairsToProto packs index sets.
func PairsToProto(pairs []Pair) []*forwardpb.Pair {
	out := make([]*forwardpb.Pair, len(pairs))
	for k, p := range pairs {
		out[k] = &forwardpb.Pair{
			Sources:  packIndices(make([]byte, 0, 4*len(p.Sources)), p.Sources),
			Infected: packIndices(make([]byte, 0, 4*len(p.Infected)), p.Infected),
		}
	}
	return out
}

// PairsFromProto unpacks index sets, checking each index is below n.
func PairsFromProto(ps []*forwardpb.Pair, n int, field string) ([]Pair, error) {
	out := make([]Pair, len(ps))
	for k, p := range ps {
		var err error
		if out[k].Sources, err = unpackIndices(p.GetSources(), n, fmt.Sprintf("%s[%d].sources", field, k)); err != nil {
			return nil, err
		}
		if out[k].Infected, err = unpackIndices(p.GetInfected(), n, fmt.Sprintf("%s[%d].infected", field, k)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func infoToProto(in Info) *forwardpb.InfoResponse {
	out := &forwardpb.InfoResponse{Name: in.Name, Version: in.Version, Trainable: in.Trainable}
	for _, p := range in.Params {
		out.Params = append(out.Params, &forwardpb.Param{Name: p.Name, DefaultValue: p.Default, Help: p.Help})
	}
	return out
}

func infoFromProto(p *forwardpb.InfoResponse) Info {
	out := Info{Name: p.GetName(), Version: p.GetVersion(), Trainable: p.GetTrainable()}
	for _, q := range p.GetParams() {
		out.Params = append(out.Params, Param{Name: q.GetName(), Default: q.GetDefaultValue(), Help: q.GetHelp()})
	}
	return out
}

// checkFinite reports the first NaN or Inf of m as (row, col, true).
func checkFinite(m *mat.Dense) (int, int, bool) {
	r, c := m.Dims()
	raw := m.RawMatrix()
	for i := 0; i < r; i++ {
		for j, v := range raw.Data[i*raw.Stride : i*raw.Stride+c] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}
