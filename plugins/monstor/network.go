package monstor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// features is the width of a block's input row: x, the previous estimate
// and the log-degree.
const features = 3

// block is one 2-layer GCN stack and the caches of its last forward.
type block struct {
	lin1, lin2 *nn.Dense

	h0, p0, p1 *mat.Dense // input rows, Â h0, Â h1
	q          []float64  // sigmoid output, batches x n
	p          *mat.Dense // this block's estimate, batches x n
	dh1, dh0   *mat.Dense
	do         *mat.Dense
}

// network is the stacked GCN of a Model for one graph and architecture
// (see the package documentation for the formulas).
type network struct {
	n      int
	arch   Arch
	adj    *adjacency
	logDeg []float64
	blocks []*block
	params []*nn.Param

	batches int
	x       []float64
	dp      []float64
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
			lin1: nn.NewDense(features, arch.Hidden, nn.LeakyReLU, rng),
			lin2: nn.NewDense(arch.Hidden, 1, nn.Identity, rng),
		}
		net.blocks = append(net.blocks, b)
		prefix := "stack" + strconv.Itoa(s)
		for i, l := range []*nn.Dense{b.lin1, b.lin2} {
			for _, p := range l.Params() {
				q := *p
				q.Name = fmt.Sprintf("%s.layer%d.%s", prefix, i+1, p.Name)
				net.params = append(net.params, &q)
			}
		}
	}
	return net
}

// setOutputBias sets every block's output bias so an untrained network
// predicts probability p for every non-source node.
func (net *network) setOutputBias(p float64) {
	p = math.Min(math.Max(p, 1e-3), 1-1e-3)
	for _, b := range net.blocks {
		b.lin2.B[0] = math.Log(p / (1 - p))
	}
}

// forward returns y = f(x) for each row of x (batches x n), owned by the
// network until the next forward.
func (net *network) forward(x *mat.Dense) *mat.Dense {
	batches, c := x.Dims()
	if c != net.n {
		panic(fmt.Sprintf("monstor: input has %d columns for %d nodes", c, net.n))
	}
	n, hid := net.n, net.arch.Hidden
	rows := batches * n
	net.batches = batches
	net.x = dense(net.x, x)
	prev := net.x
	for _, b := range net.blocks {
		b.h0 = reuse(b.h0, rows, features)
		h0 := b.h0.RawMatrix()
		for r := 0; r < rows; r++ {
			row := h0.Data[r*h0.Stride : r*h0.Stride+features]
			row[0], row[1], row[2] = net.x[r], prev[r], net.logDeg[r%n]
		}
		b.p0 = reuse(b.p0, rows, features)
		net.adj.propagate(b.p0, b.h0, batches)
		h1 := b.lin1.Forward(b.p0)
		b.p1 = reuse(b.p1, rows, hid)
		net.adj.propagate(b.p1, h1, batches)
		o := b.lin2.Forward(b.p1).RawMatrix()
		b.q = grow(b.q, rows)
		b.p = reuse(b.p, batches, n)
		p := b.p.RawMatrix()
		for r := 0; r < rows; r++ {
			q := sigmoid(o.Data[r*o.Stride])
			b.q[r] = q
			p.Data[(r/n)*p.Stride+r%n] = 1 - (1-net.x[r])*(1-q)
		}
		prev = p.Data // contiguous: b.p is batches x n with stride n
	}
	return net.blocks[len(net.blocks)-1].p
}

// backward takes dL/dy for the last forward, adds the parameter gradients
// and returns dL/dx, owned by the network.
func (net *network) backward(dy *mat.Dense) *mat.Dense {
	n, batches, hid := net.n, net.batches, net.arch.Hidden
	if r, c := dy.Dims(); r != batches || c != n {
		panic(fmt.Sprintf("monstor: backward got %dx%d, want %dx%d", r, c, batches, n))
	}
	rows := batches * n
	net.dp = dense(net.dp, dy)
	net.dx = reuse(net.dx, batches, n)
	dx := net.dx.RawMatrix().Data // contiguous, stride n
	clear(dx)
	for s := len(net.blocks) - 1; s >= 0; s-- {
		b := net.blocks[s]
		b.do = reuse(b.do, rows, 1)
		do := b.do.RawMatrix()
		for r := 0; r < rows; r++ {
			g, xv, q := net.dp[r], net.x[r], b.q[r]
			// p = 1 - (1 - x)(1 - q).
			dx[r] += g * (1 - q)
			do.Data[r*do.Stride] = g * (1 - xv) * q * (1 - q)
		}
		dp1 := b.lin2.Backward(b.do)
		b.dh1 = reuse(b.dh1, rows, hid)
		net.adj.propagateT(b.dh1, dp1, batches)
		dp0 := b.lin1.Backward(b.dh1)
		b.dh0 = reuse(b.dh0, rows, features)
		net.adj.propagateT(b.dh0, dp0, batches)
		dh0 := b.dh0.RawMatrix()
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
