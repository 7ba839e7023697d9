package forward_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardpb"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func TestGraphRoundTrip(t *testing.T) {
	for _, g := range []*graph.Graph{
		karate(t),
		graph.New(4, []graph.Edge{{From: 0, To: 1, W: 0.25}, {From: 1, To: 0, W: 0.5}, {From: 3, To: 2, W: 1}}, []string{"a", "b", "c", "d"}, true, true),
	} {
		got, err := forward.GraphFromProto(forward.GraphToProto(g))
		require.NoError(t, err)
		require.Equal(t, g.Fingerprint(), got.Fingerprint())
		require.Equal(t, g.IDs(), got.IDs())
		require.Equal(t, g.Directed(), got.Directed())
		require.Equal(t, g.Weighted(), got.Weighted())
		require.Equal(t, g.Edges(), got.Edges())
	}
}

func TestGraphFromProtoRejects(t *testing.T) {
	base := func() *forwardpb.Graph {
		return forward.GraphToProto(graph.New(3, []graph.Edge{{From: 0, To: 1, W: 0.5}, {From: 1, To: 2, W: 0.5}}, nil, false, true))
	}
	u32 := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		change func(*forwardpb.Graph)
		want   string
	}{
		{"nil", nil, "graph: missing"},
		{"no nodes", func(p *forwardpb.Graph) { p.Nodes = 0 }, "graph: no nodes"},
		{"ragged src", func(p *forwardpb.Graph) { p.Src = p.Src[:7] }, "graph.src: 7 bytes"},
		{"index out of range", func(p *forwardpb.Graph) { p.Dst = u32(1, 3) }, "graph.dst: index 3 out of range for 3 nodes"},
		{"src dst mismatch", func(p *forwardpb.Graph) { p.Dst = u32(1) }, "graph: 2 src but 1 dst"},
		{"short weights", func(p *forwardpb.Graph) { p.Weights = p.Weights[:8] }, "graph.weights: 2 edges need 16 bytes, got 8"},
		{"weight NaN", func(p *forwardpb.Graph) {
			binary.LittleEndian.PutUint64(p.Weights, math.Float64bits(math.NaN()))
		}, "weight NaN not in [0,1]"},
		{"ids count", func(p *forwardpb.Graph) { p.Ids = []string{"a"} }, "graph.ids: 1 ids for 3 nodes"},
		{"duplicate ids", func(p *forwardpb.Graph) { p.Ids = []string{"a", "b", "a"} }, `duplicate id "a"`},
		{"fingerprint", func(p *forwardpb.Graph) { p.Fingerprint = "00" }, "graph: fingerprint 00 sent"},
		// Without ids nothing in the message bounds the node count.
		{"huge n without ids", func(p *forwardpb.Graph) {
			*p = forwardpb.Graph{Nodes: 1<<32 - 1}
		}, "graph: 4294967295 nodes and no ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *forwardpb.Graph
			if tc.change != nil {
				p = base()
				tc.change(p)
			}
			_, err := forward.GraphFromProto(p)
			require.ErrorIs(t, err, forward.ErrBadMessage)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMatrixRoundTrip(t *testing.T) {
	m := mat.NewDense(3, 4, []float64{1, -2, 3.5, math.Inf(1), 0, 1e-300, math.Pi, 7, 8, 9, 10, 11})
	view := m.Slice(1, 3, 1, 4).(*mat.Dense)
	for _, in := range []*mat.Dense{m, view} {
		p := forward.MatrixToProto(in)
		out, err := forward.MatrixFromProto(p, "x")
		require.NoError(t, err)
		require.True(t, mat.Equal(in, out))
	}
	p := forward.MatrixToProto(m)
	p.Data = p.Data[:len(p.Data)-1]
	_, err := forward.MatrixFromProto(p, "dy")
	require.ErrorIs(t, err, forward.ErrBadMessage)
	require.ErrorContains(t, err, "dy: 3x4 matrix needs 12 float64 values, 8 bytes each, got 95 bytes")
	// 8·rows·cols wraps to 0 in 64 bits: an empty payload must not pass.
	_, err = forward.MatrixFromProto(&forwardpb.Matrix{Rows: 1 << 31, Cols: 1 << 30}, "y")
	require.ErrorIs(t, err, forward.ErrBadMessage)
	require.ErrorContains(t, err, "y: 2147483648x1073741824 matrix needs 2305843009213693952 float64 values, 8 bytes each, got 0 bytes")
	_, err = forward.MatrixFromProto(&forwardpb.Matrix{}, "x")
	require.ErrorContains(t, err, "x: empty 0x0 matrix")
	_, err = forward.MatrixFromProto(&forwardpb.Matrix{Rows: 0, Cols: 3}, "x")
	require.ErrorContains(t, err, "x: empty 0x3 matrix")
	_, err = forward.MatrixFromProto(&forwardpb.Matrix{Rows: 2, Cols: 0}, "x")
	require.ErrorContains(t, err, "x: empty 2x0 matrix")
	// one row, one column: matrices like any other
	for _, rc := range [][2]uint32{{1, 3}, {3, 1}, {1, 1}} {
		m, err := forward.MatrixFromProto(&forwardpb.Matrix{Rows: rc[0], Cols: rc[1], Data: make([]byte, 8*rc[0]*rc[1])}, "x")
		require.NoError(t, err, "%v", rc)
		r, c := m.Dims()
		require.Equal(t, [2]int{int(rc[0]), int(rc[1])}, [2]int{r, c})
	}
	_, err = forward.MatrixFromProto(nil, "y")
	require.ErrorContains(t, err, "y: missing matrix")
}

// The wire layout plugins in other languages read: float64 row-major,
// little-endian (1 = 0x3FF0000000000000, 2 = 0x4000..., 3 = 0x4008...,
// 4 = 0x4010..., written out byte by byte here), and indices as
// little-endian uint32. A strided view packs its own elements only.
func TestWireLayoutIsLittleEndian(t *testing.T) {
	one, two, three, four := []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, []byte{0, 0, 0, 0, 0, 0, 0, 0x40},
		[]byte{0, 0, 0, 0, 0, 0, 0x08, 0x40}, []byte{0, 0, 0, 0, 0, 0, 0x10, 0x40}
	var want []byte
	for _, b := range [][]byte{one, two, three, four} {
		want = append(want, b...)
	}
	big := mat.NewDense(3, 3, []float64{9, 9, 9, 9, 1, 2, 9, 3, 4})
	for _, m := range []*mat.Dense{mat.NewDense(2, 2, []float64{1, 2, 3, 4}), big.Slice(1, 3, 1, 3).(*mat.Dense)} {
		p := forward.MatrixToProto(m)
		require.Equal(t, uint32(2), p.GetRows())
		require.Equal(t, uint32(2), p.GetCols())
		require.Equal(t, want, p.GetData())
	}
	back, err := forward.MatrixFromProto(&forwardpb.Matrix{Rows: 1, Cols: 4, Data: want}, "x")
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, 3, 4}, back.RawRowView(0))

	// 1 and 258 = 0x0102
	ps := forward.PairsToProto([]forward.Pair{{Sources: []int{1}, Infected: []int{1, 258}}})
	require.Equal(t, []byte{1, 0, 0, 0}, ps[0].GetSources())
	require.Equal(t, []byte{1, 0, 0, 0, 2, 1, 0, 0}, ps[0].GetInfected())
	got, err := forward.PairsFromProto([]*forwardpb.Pair{{Sources: []byte{2, 1, 0, 0}, Infected: []byte{2, 1, 0, 0, 0, 0, 0, 0}}}, 259, "pairs")
	require.NoError(t, err)
	require.Equal(t, []forward.Pair{{Sources: []int{258}, Infected: []int{258, 0}}}, got)
	_, err = forward.PairsFromProto([]*forwardpb.Pair{{Sources: []byte{2, 1, 0, 0}}}, 258, "pairs")
	require.ErrorIs(t, err, forward.ErrBadMessage, "258 is no node of 258")
}

// A plugin in another language may send a graph of up to
// MaxNodesWithoutIDs nodes without ids: its nodes get the default ids.
func TestGraphFromProtoWithoutIDs(t *testing.T) {
	le := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	g, err := forward.GraphFromProto(&forwardpb.Graph{Nodes: 3, Src: le(0, 1), Dst: le(1, 2)})
	require.NoError(t, err)
	require.Equal(t, 3, g.N())
	require.Equal(t, 2, g.Degree(1))
	require.Equal(t, graph.New(3, []graph.Edge{{From: 0, To: 1}, {From: 1, To: 2}}, nil, false, false).Fingerprint(), g.Fingerprint())
}

func TestPairsRoundTrip(t *testing.T) {
	pairs := []forward.Pair{{Sources: []int{0, 5}, Infected: []int{0, 5, 9}}, {Sources: []int{}, Infected: []int{1}}}
	got, err := forward.PairsFromProto(forward.PairsToProto(pairs), 10, "pairs")
	require.NoError(t, err)
	require.Equal(t, pairs, got)
	_, err = forward.PairsFromProto(forward.PairsToProto(pairs), 9, "pairs")
	require.ErrorContains(t, err, "pairs[0].infected: index 9 out of range for 9 nodes")
}

// The server checks requests against the configured graph before the
// model sees them, so a malformed request from a buggy host is an
// InvalidArgument status, not a panic in the plugin.
func TestServerValidatesRequests(t *testing.T) {
	g := karate(t)
	s := forward.NewServer(icmf.New())
	ctx := t.Context()
	_, err := s.Predict(ctx, &forwardpb.PredictRequest{X: forward.MatrixToProto(mat.NewDense(1, g.N(), nil))})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))

	_, err = s.Configure(ctx, &forwardpb.ConfigureRequest{Graph: forward.GraphToProto(g)})
	require.NoError(t, err)
	_, err = s.Predict(ctx, &forwardpb.PredictRequest{X: forward.MatrixToProto(mat.NewDense(1, 3, nil))})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "x: 3 columns for a 34-node graph")

	x := forward.MatrixToProto(mat.NewDense(2, g.N(), nil))
	dy := forward.MatrixToProto(mat.NewDense(1, g.N(), nil))
	_, err = s.VJP(ctx, &forwardpb.VJPRequest{X: x, Dy: dy})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "dy: 1x34 for x 2x34")

	resp, err := s.VJP(ctx, &forwardpb.VJPRequest{X: x, Dy: forward.MatrixToProto(mat.NewDense(2, g.N(), nil))})
	require.NoError(t, err)
	require.Len(t, resp.GetDx().GetData(), 8*2*g.N())

	bad := proto.Clone(forward.GraphToProto(g)).(*forwardpb.Graph)
	bad.Fingerprint = "ff"
	_, err = s.Configure(ctx, &forwardpb.ConfigureRequest{Graph: bad})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = s.Predict(ctx, &forwardpb.PredictRequest{X: x})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "a failed Configure leaves the server unconfigured")
}

// BenchmarkMatrixCodec packs and unpacks a batch of 8 Power Grid-sized
// vectors, the per-call encoding cost on each side of a VJP round trip.
func BenchmarkMatrixCodec(b *testing.B) {
	m := mat.NewDense(8, 4941, nil)
	for i := range m.RawMatrix().Data {
		m.RawMatrix().Data[i] = float64(i) / 7
	}
	b.SetBytes(8 * 8 * 4941)
	for b.Loop() {
		if _, err := forward.MatrixFromProto(forward.MatrixToProto(m), "x"); err != nil {
			b.Fatal(err)
		}
	}
}

// nilModel answers nil matrices and no error, as a newcomer's model
// might on a path it forgot; which ones, by its fields.
type nilModel struct {
	*icmf.Model
	y, dx bool
}

func (m nilModel) Predict(ctx context.Context, x *mat.Dense) (*mat.Dense, error) {
	y, err := m.Model.Predict(ctx, x)
	if m.y {
		y = nil
	}
	return y, err
}

func (m nilModel) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, dx, err := m.Model.VJP(ctx, x, dy)
	if m.y {
		y = nil
	}
	if m.dx {
		dx = nil
	}
	return y, dx, err
}

// A model that returns a nil matrix and no error is a bad output of the
// model, said so, not a panic in Serve's encoding that points at gonum.
func TestServerRefusesNilOutputs(t *testing.T) {
	g := karate(t)
	ctx := t.Context()
	x := forward.MatrixToProto(mat.NewDense(2, g.N(), nil))
	dy := forward.MatrixToProto(mat.NewDense(2, g.N(), nil))
	target := forward.MatrixToProto(mat.NewDense(1, g.N(), nil))
	for _, tc := range []struct {
		y, dx bool
		want  string
	}{{true, false, "nil y"}, {false, true, "nil dx"}, {true, true, "nil y and dx"}} {
		s := forward.NewServer(nilModel{icmf.New(), tc.y, tc.dx})
		_, err := s.Configure(ctx, &forwardpb.ConfigureRequest{Graph: forward.GraphToProto(g)})
		require.NoError(t, err)
		check := func(call string, err error, want string) {
			t.Helper()
			require.Error(t, err, call)
			require.NotContains(t, err.Error(), "panic", call)
			require.ErrorContains(t, err, "the model returned a "+want+" and no error", call)
			require.ErrorContains(t, err, forward.ErrBadOutput.Error(), call)
		}
		if tc.y {
			_, err = s.Predict(ctx, &forwardpb.PredictRequest{X: x})
			check("predict", err, "nil y")
		}
		_, err = s.VJP(ctx, &forwardpb.VJPRequest{X: x, Dy: dy})
		check("vjp", err, tc.want)
		_, err = s.SquaredErrorVJP(ctx, &forwardpb.SquaredErrorVJPRequest{X: x, Target: target, LossOnly: true})
		want := "nil y"
		if !tc.y {
			want = "nil dx"
		}
		check("squared-error vjp", err, want)
	}
}
