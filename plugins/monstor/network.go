package monstor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// features is the width of a block's input row: x, the previous estimate
// and the log-degree.
const features = 3

// block is one 2-layer GCN stack and the caches of its last forward. The
// output layer is Â (h1 w2) + h1 w_self + b2, which propagates one column
// instead of hidden ones.
type block struct {
	lin1 *nn.Dense
	w2   []float64 // hidden, through Â
	ws   []float64 // hidden, the node's own term
	b2   []float64 // 1
	gw2  []float64
	gws  []float64
	gb2  []float64

	h0, p0  *mat.Dense // input rows, [Â h0, h0]
	h1      *mat.Dense // lin1's output (owned by lin1)
	t, o    []float64  // h1 w2 and Â t + h1 ws, batches x n
	q       []float64  // sigmoid output, batches x n
	p       *mat.Dense // this block's estimate, batches x n
	do      []float64  // dL/do
	dh1     *mat.Dense
	scratch []float64
	dh0     *mat.Dense
}

// network is the stacked GCN of a Model for one graph and architecture
// (see the package documentation for the formulas).
type network struct {
	n      int
	arch   Arch
	adj    *gnn.Rows
	logDeg []float64
	blocks []*block
	params []*nn.Param

	batches int
	x       []float64
	dp      []float64
	dt      []float64
	dx      *mat.Dense
}

func newNetwork(g *graph.Graph, arch Arch, seed uint64) *network {
	rng := rand.New(rand.NewPCG(seed, 0x6c2))
	net := &network{n: g.N(), arch: arch, adj: newAdjacency(g)}
	net.logDeg = make([]float64, net.n)
	for v := range net.logDeg {
		net.logDeg[v] = math.Log1p(float64(g.InDegree(v)))
	}
	for s := 0; s < arch.Stacks; s++ {
		b := &block{
			lin1: nn.NewDense(2*features, arch.Hidden, nn.LeakyReLU, rng),
			w2:   make([]float64, arch.Hidden),
			ws:   make([]float64, arch.Hidden),
			gws:  make([]float64, arch.Hidden),
			b2:   make([]float64, 1),
			gw2:  make([]float64, arch.Hidden),
			gb2:  make([]float64, 1),
		}
		// Glorot scaling, as nn.NewDense uses for a linear layer.
		scale := math.Sqrt(2 / float64(arch.Hidden+1))
		for i := range b.w2 {
			b.w2[i] = rng.NormFloat64() * scale
			b.ws[i] = rng.NormFloat64() * scale
		}
		net.blocks = append(net.blocks, b)
		prefix := "stack" + strconv.Itoa(s)
		for _, p := range b.lin1.Params() {
			q := *p
			q.Name = prefix + ".layer1." + p.Name
			net.params = append(net.params, &q)
		}
		net.params = append(net.params,
			&nn.Param{Name: prefix + ".layer2.W", Value: b.w2, Grad: b.gw2, Rows: arch.Hidden, Cols: 1},
			&nn.Param{Name: prefix + ".layer2.Wself", Value: b.ws, Grad: b.gws, Rows: arch.Hidden, Cols: 1},
			&nn.Param{Name: prefix + ".layer2.b", Value: b.b2, Grad: b.gb2, Rows: 1, Cols: 1})
	}
	return net
}

// Params returns the trainable parameters, in state order.
func (net *network) Params() []*nn.Param { return net.params }

// Arch returns the architecture the network was built with.
func (net *network) Arch() Arch { return net.arch }

// Nodes returns the number of graph nodes, the width of x.
func (net *network) Nodes() int { return net.n }

// CacheFloats is the floats the forward caches and backward buffers of a
// pass hold per node and row:
//
//	stacks (4 hidden + 24) + 4
//
// Per block, lin1's z, y and dz and the block's dh1 are hidden wide; the
// input rows h0 and [Â h0, h0], lin1's dx and dh0 (3 + 6 + 6 + 3) and six
// scalars (t, o, q, p, do and the propagation scratch) make the 24; x, dp,
// dt and dx the 4. TestCacheFloats measures it.
func (net *network) CacheFloats() int {
	return net.arch.Stacks*(4*net.arch.Hidden+24) + 4
}

// SetOutputBias sets every block's output bias so an untrained network
// predicts probability p for every non-source node.
func (net *network) SetOutputBias(p float64) {
	p = math.Min(math.Max(p, 1e-3), 1-1e-3)
	for _, b := range net.blocks {
		b.b2[0] = math.Log(p / (1 - p))
	}
}

// Forward returns y = f(x) for each row of x (batches x n), owned by the
// network until the next forward.
func (net *network) Forward(x *mat.Dense) *mat.Dense {
	batches, c := x.Dims()
	if c != net.n {
		panic(fmt.Sprintf("monstor: input has %d columns for %d nodes", c, net.n))
	}
	n, hid := net.n, net.arch.Hidden
	rows := batches * n
	net.batches = batches
	net.x = gnn.Contiguous(net.x, x)
	prev := net.x
	for _, b := range net.blocks {
		b.h0 = nn.Reuse(b.h0, rows, features)
		h0 := b.h0.RawMatrix()
		for r := 0; r < rows; r++ {
			row := h0.Data[r*h0.Stride : r*h0.Stride+features]
			row[0], row[1], row[2] = net.x[r], prev[r], net.logDeg[r%n]
		}
		b.p0 = nn.Reuse(b.p0, rows, 2*features)
		net.adj.PropagateDense(b.p0.Slice(0, rows, 0, features).(*mat.Dense), b.h0, batches)
		p0 := b.p0.RawMatrix()
		for r := 0; r < rows; r++ {
			copy(p0.Data[r*p0.Stride+features:r*p0.Stride+2*features], h0.Data[r*h0.Stride:r*h0.Stride+features])
		}
		b.h1 = b.lin1.Forward(b.p0)
		h1 := b.h1.RawMatrix()
		b.t = gnn.Grow(b.t, rows)
		b.o = gnn.Grow(b.o, rows)
		for r := 0; r < rows; r++ {
			var t, self float64
			hr := h1.Data[r*h1.Stride : r*h1.Stride+hid]
			for j, w := range hr {
				t += w * b.w2[j]
				self += w * b.ws[j]
			}
			b.t[r], b.o[r] = t, self
		}
		net.adj.Propagate(b.tmp(rows), b.t, batches)
		for r, v := range b.scratch[:rows] {
			b.o[r] += v
		}
		b.q = gnn.Grow(b.q, rows)
		b.p = nn.Reuse(b.p, batches, n)
		p := b.p.RawMatrix()
		for r := 0; r < rows; r++ {
			q := gnn.Sigmoid(b.o[r] + b.b2[0])
			b.q[r] = q
			p.Data[(r/n)*p.Stride+r%n] = 1 - (1-net.x[r])*(1-q)
		}
		prev = p.Data // contiguous: b.p is batches x n with stride n
	}
	return net.blocks[len(net.blocks)-1].p
}

// Backward takes dL/dy for the last forward, adds the parameter gradients
// and returns dL/dx, owned by the network.
func (net *network) Backward(dy *mat.Dense) *mat.Dense {
	n, batches, hid := net.n, net.batches, net.arch.Hidden
	if r, c := dy.Dims(); r != batches || c != n {
		panic(fmt.Sprintf("monstor: backward got %dx%d, want %dx%d", r, c, batches, n))
	}
	rows := batches * n
	net.dp = gnn.Contiguous(net.dp, dy)
	net.dx = nn.Reuse(net.dx, batches, n)
	dx := net.dx.RawMatrix().Data // contiguous, stride n
	clear(dx)
	for s := len(net.blocks) - 1; s >= 0; s-- {
		b := net.blocks[s]
		b.do = gnn.Grow(b.do, rows)
		for r := 0; r < rows; r++ {
			g, xv, q := net.dp[r], net.x[r], b.q[r]
			// p = 1 - (1 - x)(1 - q).
			dx[r] += g * (1 - q)
			do := g * (1 - xv) * q * (1 - q)
			b.gb2[0] += do
			b.do[r] = do
		}
		// o = Â t + h1 w_self + b2 with t = h1 w2, so dL/dt = Â^T dL/do.
		net.dt = gnn.Grow(net.dt, rows)
		net.adj.PropagateT(net.dt, b.do, batches)
		b.dh1 = nn.Reuse(b.dh1, rows, hid)
		dh1, h1 := b.dh1.RawMatrix(), b.h1.RawMatrix()
		for r := 0; r < rows; r++ {
			dt := net.dt[r]
			hr, dr := h1.Data[r*h1.Stride:r*h1.Stride+hid], dh1.Data[r*dh1.Stride:r*dh1.Stride+hid]
			do := b.do[r]
			for j, w := range b.w2 {
				b.gw2[j] += dt * hr[j]
				b.gws[j] += do * hr[j]
				dr[j] = dt*w + do*b.ws[j]
			}
		}
		dp0 := b.lin1.Backward(b.dh1)
		b.dh0 = nn.Reuse(b.dh0, rows, features)
		net.adj.PropagateDenseT(b.dh0, dp0.Slice(0, rows, 0, features).(*mat.Dense), batches)
		dh0, dself := b.dh0.RawMatrix(), dp0.RawMatrix()
		for r := 0; r < rows; r++ {
			for j := 0; j < features; j++ {
				dh0.Data[r*dh0.Stride+j] += dself.Data[r*dself.Stride+features+j]
			}
		}
		for r := 0; r < rows; r++ {
			dx[r] += dh0.Data[r*dh0.Stride]
			net.dp[r] = dh0.Data[r*dh0.Stride+1] // dL/d(previous estimate)
		}
	}
	// The first block's previous estimate is x itself.
	for r := 0; r < rows; r++ {
		dx[r] += net.dp[r]
	}
	return net.dx
}

// tmp returns the block's scratch vector with length n.
func (b *block) tmp(n int) []float64 {
	b.scratch = gnn.Grow(b.scratch, n)
	return b.scratch
}
