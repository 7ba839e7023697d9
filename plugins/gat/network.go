package gat

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// network is the GAT of a Model, for one graph and architecture. It maps a
// batch of source indicators x (batches x n) to infection probabilities
// (see the package documentation for the formulas) and back-propagates to
// x and to its parameters.
type network struct {
	n    int
	arch Arch
	adj  *gnn.Rows
	// logDeg is the static feature log(1 + in-degree) per node.
	logDeg []float64

	lin1 *nn.Dense
	att1 *attention
	lin2 *nn.Dense
	att2 *attention

	params []*nn.Param

	// Caches of the last forward, reused across calls.
	batches int
	x       []float64   // batches x n
	u       [][]float64 // hop counts u_1..u_hops, each batches x n
	h0      *mat.Dense  // (batches n) x features
	h1      *mat.Dense  // ELU(att1 output)
	s       []float64   // gnn.Sigmoid(o)
	y       *mat.Dense
	dy      []float64
	do      *mat.Dense
	dz2     *mat.Dense
	dh1     *mat.Dense
	dz1     *mat.Dense
	g, gt   []float64
	dx      *mat.Dense
}

// features returns the width of a node's input row: x, the hop features
// and the log-degree.
func (a Arch) features() int { return 1 + a.Hops + 1 }

func newNetwork(g *graph.Graph, arch Arch, seed uint64) *network {
	rng := rand.New(rand.NewPCG(seed, 0x9a7))
	net := &network{n: g.N(), arch: arch, adj: newAdjacency(g)}
	net.logDeg = make([]float64, net.n)
	for v := range net.logDeg {
		net.logDeg[v] = math.Log1p(float64(g.InDegree(v)))
	}
	hd := arch.Heads * arch.HeadDim
	// Each linear map also feeds a skip connection (its second block of
	// columns) that bypasses the attention, as the GAT paper's inductive
	// model does: without it a node's own features reach the output only
	// through its attention weight on itself, about 1/(degree+1) at first.
	net.lin1 = nn.NewDense(arch.features(), 2*hd, nn.Identity, rng)
	att := func() float64 { return rng.NormFloat64() * math.Sqrt(2/float64(arch.HeadDim+1)) }
	net.att1 = newAttention(net.adj, arch.Heads, arch.HeadDim, "layer1", att)
	net.lin2 = nn.NewDense(hd, 2, nn.Identity, rng)
	net.att2 = newAttention(net.adj, 1, 1, "layer2", func() float64 { return rng.NormFloat64() })
	name := func(prefix string, ps []*nn.Param) {
		for _, p := range ps {
			q := *p
			q.Name = prefix + "." + p.Name
			net.params = append(net.params, &q)
		}
	}
	name("layer1", net.lin1.Params())
	net.params = append(net.params, net.att1.params...)
	name("layer2", net.lin2.Params())
	net.params = append(net.params, net.att2.params...)
	return net
}

// Params returns the trainable parameters, in state order.
func (net *network) Params() []*nn.Param { return net.params }

// Arch returns the architecture the network was built with.
func (net *network) Arch() Arch { return net.arch }

// Nodes returns the number of graph nodes, the width of x.
func (net *network) Nodes() int { return net.n }

// CacheFloats is the floats the forward caches and backward buffers of a
// pass hold per node and row, rounded up:
//
//	14 heads head_dim + 4 heads + 3 hops + 27 + ceil(2 (heads + 1) E / n)
//
// with E the adjacency entries (arcs plus the n self-loops). Per node,
// 14 rows of heads head_dim: h1, dh1 and dz1 (4, dz1 is doubled by the
// skip), lin1's z, y and dz (6, as wide as dz1), att1's z, out and dz (3)
// and lin2's dx (1). Per entry and head, both attention layers keep the
// logit before the LeakyReLU and α. The rest are the hop counts, the
// input rows and their gradient (3 hops + 4), att1's per-head
// projections and their gradients (4 heads), and single columns.
// TestCacheFloats measures it.
func (net *network) CacheFloats() int {
	a := net.arch
	edges := 2 * (a.Heads + 1) * net.adj.NNZ()
	return 14*a.Heads*a.HeadDim + 4*a.Heads + 3*a.Hops + 27 + (edges+net.n-1)/net.n
}

// SetOutputBias sets the output bias so an untrained network predicts
// probability p for every non-source node.
func (net *network) SetOutputBias(p float64) {
	p = math.Min(math.Max(p, 1e-3), 1-1e-3)
	net.lin2.B[0] = math.Log(p / (1 - p))
	net.lin2.B[1] = 0
}

// Forward returns y = f(x) for each row of x (batches x n), owned by the
// network until the next forward.
func (net *network) Forward(x *mat.Dense) *mat.Dense {
	batches, c := x.Dims()
	if c != net.n {
		panic(fmt.Sprintf("gat: input has %d columns for %d nodes", c, net.n))
	}
	n, F := net.n, net.arch.features()
	rows := batches * n
	net.batches = batches
	net.x = gnn.Contiguous(net.x, x)
	if len(net.u) != net.arch.Hops {
		net.u = make([][]float64, net.arch.Hops)
	}
	prev := net.x
	for k := range net.u {
		net.u[k] = gnn.Grow(net.u[k], rows)
		net.adj.Propagate(net.u[k], prev, batches)
		prev = net.u[k]
	}
	net.h0 = nn.Reuse(net.h0, rows, F)
	h0 := net.h0.RawMatrix()
	for r := 0; r < rows; r++ {
		row := h0.Data[r*h0.Stride : r*h0.Stride+F]
		row[0] = net.x[r]
		for k, u := range net.u {
			row[1+k] = slog(u[r])
		}
		row[F-1] = net.logDeg[r%n]
	}

	hd := net.arch.Heads * net.arch.HeadDim
	z1 := net.lin1.Forward(net.h0)
	a1 := net.att1.forward(z1.Slice(0, rows, 0, hd).(*mat.Dense), batches)
	net.h1 = nn.Reuse(net.h1, rows, hd)
	h1, ar, sk := net.h1.RawMatrix(), a1.RawMatrix(), z1.RawMatrix()
	for r := 0; r < rows; r++ {
		dst, src := h1.Data[r*h1.Stride:r*h1.Stride+hd], ar.Data[r*ar.Stride:r*ar.Stride+hd]
		skip := sk.Data[r*sk.Stride+hd : r*sk.Stride+2*hd]
		for j, v := range src {
			v += skip[j]
			if v <= 0 {
				v = math.Expm1(v)
			}
			dst[j] = v
		}
	}
	z2 := net.lin2.Forward(net.h1)
	o := net.att2.forward(z2.Slice(0, rows, 0, 1).(*mat.Dense), batches).RawMatrix()
	z2r := z2.RawMatrix()

	net.s = gnn.Grow(net.s, rows)
	net.y = nn.Reuse(net.y, batches, n)
	y := net.y.RawMatrix()
	for b := 0; b < batches; b++ {
		for v := 0; v < n; v++ {
			r := b*n + v
			s := gnn.Sigmoid(o.Data[r*o.Stride] + z2r.Data[r*z2r.Stride+1])
			net.s[r] = s
			xv := net.x[r]
			y.Data[b*y.Stride+v] = 1 - (1-xv)*(1-s)
		}
	}
	return net.y
}

// Backward takes dL/dy for the last forward, adds the parameter gradients
// and returns dL/dx, owned by the network.
func (net *network) Backward(dy *mat.Dense) *mat.Dense {
	n, batches := net.n, net.batches
	if r, c := dy.Dims(); r != batches || c != n {
		panic(fmt.Sprintf("gat: backward got %dx%d, want %dx%d", r, c, batches, n))
	}
	rows := batches * n
	net.dy = gnn.Contiguous(net.dy, dy)
	net.dx = nn.Reuse(net.dx, batches, n)
	dx := net.dx.RawMatrix()
	net.do = nn.Reuse(net.do, rows, 1)
	do := net.do.RawMatrix()
	for r := 0; r < rows; r++ {
		g, xv, s := net.dy[r], net.x[r], net.s[r]
		// y = 1 - (1 - x)(1 - s).
		dx.Data[(r/n)*dx.Stride+r%n] = g * (1 - s)
		do.Data[r*do.Stride] = g * (1 - xv) * s * (1 - s)
	}
	da2 := net.att2.backward(net.do).RawMatrix()
	net.dz2 = nn.Reuse(net.dz2, rows, 2)
	dz2 := net.dz2.RawMatrix()
	for r := 0; r < rows; r++ {
		dz2.Data[r*dz2.Stride] = da2.Data[r*da2.Stride]
		dz2.Data[r*dz2.Stride+1] = do.Data[r*do.Stride] // the skip
	}
	dh1 := net.lin2.Backward(net.dz2)
	hd := net.arch.Heads * net.arch.HeadDim
	net.dh1 = nn.Reuse(net.dh1, rows, hd)
	d, g, a := net.dh1.RawMatrix(), dh1.RawMatrix(), net.h1.RawMatrix()
	for r := 0; r < rows; r++ {
		dr, gr, hr := d.Data[r*d.Stride:r*d.Stride+hd], g.Data[r*g.Stride:r*g.Stride+hd], a.Data[r*a.Stride:r*a.Stride+hd]
		for j := range dr {
			// ELU'(z) = 1 for z > 0, exp(z) = ELU(z) + 1 otherwise.
			if hr[j] > 0 {
				dr[j] = gr[j]
			} else {
				dr[j] = gr[j] * (hr[j] + 1)
			}
		}
	}
	da1 := net.att1.backward(net.dh1).RawMatrix()
	net.dz1 = nn.Reuse(net.dz1, rows, 2*hd)
	dz1, dpre := net.dz1.RawMatrix(), net.dh1.RawMatrix()
	for r := 0; r < rows; r++ {
		copy(dz1.Data[r*dz1.Stride:r*dz1.Stride+hd], da1.Data[r*da1.Stride:r*da1.Stride+hd])
		copy(dz1.Data[r*dz1.Stride+hd:r*dz1.Stride+2*hd], dpre.Data[r*dpre.Stride:r*dpre.Stride+hd])
	}
	dh0 := net.lin1.Backward(net.dz1).RawMatrix()

	// Hop features: u_k = W u_{k-1}, u_0 = x, feature slog(u_k). Walk
	// back from the last hop carrying g = dL/du_k.
	net.g = gnn.Grow(net.g, rows)
	net.gt = gnn.Grow(net.gt, rows)
	clear(net.g)
	for k := net.arch.Hops; k >= 1; k-- {
		u := net.u[k-1]
		for r := 0; r < rows; r++ {
			net.g[r] += dh0.Data[r*dh0.Stride+k] / (1 + math.Abs(u[r]))
		}
		net.adj.PropagateT(net.gt, net.g, batches)
		net.g, net.gt = net.gt, net.g
	}
	for r := 0; r < rows; r++ {
		dx.Data[(r/n)*dx.Stride+r%n] += dh0.Data[r*dh0.Stride] + net.g[r]
	}
	return net.dx
}

// slog is sign(u) log(1 + |u|): log-scaled counts that stay smooth (slope
// 1/(1+|u|)) and defined for the small negative x a finite-difference
// probe or an unclamped caller may pass.
func slog(u float64) float64 {
	if u < 0 {
		return -math.Log1p(-u)
	}
	return math.Log1p(u)
}
