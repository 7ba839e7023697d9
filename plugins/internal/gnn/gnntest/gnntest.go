package gnntest

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
	"github.com/sourcewatch/sourcewatch/plugins/internal/gnn"
)

// RandomGraph is an Erdős–Rényi-like graph on n nodes with about m edges,
// plus a ring so no node is isolated.
func RandomGraph(n, m int, directed, weighted bool, seed uint64) *graph.Graph {
	rng := rand.New(rand.NewPCG(seed, 1))
	var edges []graph.Edge
	for v := 0; v < n; v++ {
		edges = append(edges, graph.Edge{From: v, To: (v + 1) % n, W: 0.2 + 0.6*rng.Float64()})
	}
	for len(edges) < m {
		a, b := rng.IntN(n), rng.IntN(n)
		edges = append(edges, graph.Edge{From: a, To: b, W: 0.2 + 0.6*rng.Float64()})
	}
	return graph.New(n, edges, nil, directed, weighted)
}

// SimulateSI runs a discrete-time SI cascade per pair: k random sources,
// each step every infected node infects each out-neighbour with
// probability beta, observed when the infected fraction first reaches a
// target drawn from [0.2, 0.5].
func SimulateSI(g *graph.Graph, count, k int, beta float64, seed uint64) []forward.Pair {
	rng := rand.New(rand.NewPCG(seed, 2))
	n := g.N()
	pairs := make([]forward.Pair, count)
	for c := range pairs {
		inf := make([]bool, n)
		src := rng.Perm(n)[:k]
		var set []int
		for _, s := range src {
			inf[s] = true
			set = append(set, s)
		}
		target := int(math.Ceil((0.2 + 0.3*rng.Float64()) * float64(n)))
		for step := 0; len(set) < target && step < 100; step++ {
			var next []int
			for _, u := range set {
				nbr, _ := g.Out(u)
				for _, v := range nbr {
					if !inf[v] && rng.Float64() < beta {
						inf[v] = true
						next = append(next, v)
					}
				}
			}
			set = append(set, next...)
		}
		pairs[c] = forward.Pair{Sources: append([]int(nil), src...), Infected: set}
	}
	return pairs
}

// Jitter adds 0.1 N(0,1) noise to every parameter so none sits at a
// special value such as a zero bias.
func Jitter(params []*nn.Param, rng *rand.Rand) {
	for _, p := range params {
		for i := range p.Value {
			p.Value[i] += 0.1 * rng.NormFloat64()
		}
	}
}

// Indicator returns the 0/1 vector of the union of sets.
func Indicator(n int, sets ...[]int) []float64 {
	y := make([]float64, n)
	for _, s := range sets {
		for _, v := range s {
			y[v] = 1
		}
	}
	return y
}

// RandomMatrix is an r x c matrix of entries uniform in [lo, hi).
func RandomMatrix(r, c int, lo, hi float64, rng *rand.Rand) *mat.Dense {
	d := make([]float64, r*c)
	for i := range d {
		d[i] = lo + (hi-lo)*rng.Float64()
	}
	return mat.NewDense(r, c, d)
}

// LoadShared loads the shared data set name, from a model package's
// directory.
func LoadShared(b *testing.B, name string) *graph.Graph {
	path := filepath.Join("..", "..", "..", "shared", "data", name+".edges")
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no %s (the shared data sets, beside the repository): %v", path, err)
	}
	g, err := graph.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// CheckLossGradient compares the gradient of the training loss (penalty
// on, λ = 2) of net on pairs with central differences, for every
// parameter entry. The weights are jittered first.
func CheckLossGradient[A gnn.Arch, N gnn.Network[A]](t *testing.T, net N, pairs []forward.Pair, rng *rand.Rand) {
	t.Helper()
	Jitter(net.Params(), rng)
	tr := &gnn.Trainer[A, N]{Net: net, Lambda: 2}
	tr.Fill(pairs, rng)
	// Arbitrary second rows instead of subsets, so the hinge of the
	// penalty is active at many nodes whatever the initial weights.
	for i := range tr.XS {
		tr.XS[i] = rng.Float64()
	}
	// Two pairs per chunk, so the check covers gradient accumulation.
	tr.ChunkRows = 4
	loss, mse := tr.Loss(true)
	require.Greater(t, loss, mse, "the monotonicity penalty should be active for this check to cover it")
	// Entries are judged against the largest gradient of all parameters:
	// some can be exactly zero (in a GAT, a_dst . z_v shifts a whole
	// softmax row while every logit of the row is on one side of the
	// LeakyReLU), and their central differences are round-off only.
	const eps = 1e-6
	var scale float64
	type entry struct{ num, grad float64 }
	got := map[string][]entry{}
	for _, p := range net.Params() {
		for i := range p.Value {
			v := p.Value[i]
			p.Value[i] = v + eps
			lp, _ := tr.Loss(false)
			p.Value[i] = v - eps
			lm, _ := tr.Loss(false)
			p.Value[i] = v
			e := entry{(lp - lm) / (2 * eps), p.Grad[i]}
			got[p.Name] = append(got[p.Name], e)
			scale = math.Max(scale, math.Max(math.Abs(e.num), math.Abs(e.grad)))
		}
	}
	require.Greater(t, scale, 0.0)
	for name, es := range got {
		for i, e := range es {
			den := math.Max(math.Max(math.Abs(e.num), math.Abs(e.grad)), 1e-4*scale)
			require.Less(t, math.Abs(e.num-e.grad)/den, 1e-4, "param %s entry %d: numeric %g analytic %g", name, i, e.num, e.grad)
		}
	}
}

// RowFloats measures the floats a network's buffers hold per node and row
// of a pass: it runs Forward and Backward on two networks from newNet, one
// on b rows and one on 2b, and divides the difference of what every
// float64 slice reachable from them holds (each backing array counted
// once, by capacity) by b n. What does not grow with the rows (weights,
// gradients, the graph) cancels; b = GOMAXPROCS, so both passes run as
// many workers and per-worker scratch cancels too.
func RowFloats[A gnn.Arch, N gnn.Network[A]](t *testing.T, newNet func() N) float64 {
	t.Helper()
	b := runtime.GOMAXPROCS(0)
	held := func(rows int) int {
		net := newNet()
		n := net.Nodes()
		rng := rand.New(rand.NewPCG(uint64(rows), 7))
		net.Forward(RandomMatrix(rows, n, 0, 1, rng))
		net.Backward(RandomMatrix(rows, n, -1, 1, rng))
		return heldFloats(reflect.ValueOf(net))
	}
	small, large := held(b), held(2*b)
	return float64(large-small) / float64(b*newNet().Nodes())
}

// heldFloats sums the capacities of the distinct float64 backing arrays
// reachable from v, unexported fields included.
func heldFloats(v reflect.Value) int {
	arrays := map[uintptr]int{}
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			walk(v.Elem())
		case reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				walk(v.Field(i))
			}
		case reflect.Slice:
			if v.IsNil() || v.Cap() == 0 {
				return
			}
			if v.Type().Elem().Kind() == reflect.Float64 {
				p := v.Pointer()
				arrays[p] = max(arrays[p], v.Cap())
				return
			}
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Array:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		}
	}
	walk(v)
	var sum int
	for _, c := range arrays {
		sum += c
	}
	return sum
}

// CheckCacheFloats requires the CacheFloats of newNet's networks to bound
// what a pass holds per node and row (RowFloats), and to be tight within
// one float (it may only round up), so a buffer added or dropped without
// the formula fails.
func CheckCacheFloats[A gnn.Arch, N gnn.Network[A]](t *testing.T, newNet func() N) {
	t.Helper()
	held, got := RowFloats[A](t, newNet), newNet().CacheFloats()
	require.LessOrEqual(t, held, float64(got))
	require.Less(t, float64(got), held+1)
}

// CheckWidening requires the networks build makes from archs, ever wider
// architectures, each to hold more floats per node and row than the one
// before, to take no more rows per pass (gnn.ChunkRows), at least one,
// and to keep a pass of more than one row within gnn.PassFloats.
func CheckWidening[A gnn.Arch, N gnn.Network[A]](t *testing.T, archs []A, build func(A) N) {
	t.Helper()
	prevFloats, prevRows := 0, math.MaxInt
	for _, a := range archs {
		net := build(a)
		n, floats := net.Nodes(), net.CacheFloats()
		rows := gnn.ChunkRows(n, floats)
		t.Logf("%+v: %d floats per node and row, %d rows per pass", a, floats, rows)
		require.Greater(t, floats, prevFloats, "%+v", a)
		require.LessOrEqual(t, rows, prevRows, "%+v", a)
		require.GreaterOrEqual(t, rows, 1)
		if rows > 1 {
			require.LessOrEqual(t, rows*n*floats, gnn.PassFloats, "%+v", a)
		}
		prevFloats, prevRows = floats, rows
	}
}

// CheckDefaultChunk requires net, a default architecture on a graph of
// Power Grid's size, to take between one and three times the rows per
// pass of the earlier fixed bound of 2^14 node-rows: not fewer, which
// would cost speed, nor many more, which would cost memory.
func CheckDefaultChunk[A gnn.Arch, N gnn.Network[A]](t *testing.T, net N) {
	t.Helper()
	before := (1 << 14) / net.Nodes()
	rows := gnn.ChunkRows(net.Nodes(), net.CacheFloats())
	t.Logf("%d rows per pass, %d before", rows, before)
	require.GreaterOrEqual(t, rows, before)
	require.LessOrEqual(t, rows, 3*before)
}

// CheckRefusesTooWide requires a model from newModel to refuse, at
// Configure on a graph of Power Grid's size, the architecture widest
// (whose single row exceeds gnn.MaxRowFloats there) with an error
// containing want, and to accept both the default architecture there and
// widest on a small graph.
func CheckRefusesTooWide(t *testing.T, newModel func() forward.Model, widest map[string]string, want string) {
	t.Helper()
	large := RandomGraph(4941, 6594, false, false, 97)
	err := newModel().Configure(t.Context(), large, widest, nil)
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, "use a narrower architecture")
	require.NoError(t, newModel().Configure(t.Context(), large, nil, nil))
	require.NoError(t, newModel().Configure(t.Context(), RandomGraph(60, 120, false, false, 97), widest, nil))
}

// CheckOutputBias holds SetOutputBias to its promise on networks from
// newNet whose output weights zeroOutputs has cleared, so the output is
// the bias alone: every node of an all-zero x is predicted p exactly, and
// p is held within [1e-3, 1 - 1e-3].
func CheckOutputBias[A gnn.Arch, N gnn.Network[A]](t *testing.T, newNet func() N, zeroOutputs func(N)) {
	t.Helper()
	for _, tc := range []struct{ p, want float64 }{{0.2, 0.2}, {0.9, 0.9}, {0, 1e-3}, {1, 1 - 1e-3}} {
		net := newNet()
		zeroOutputs(net)
		net.SetOutputBias(tc.p)
		y := net.Forward(mat.NewDense(1, net.Nodes(), nil))
		for j := range net.Nodes() {
			require.InDelta(t, tc.want, y.At(0, j), 1e-12, "p %g node %d", tc.p, j)
		}
	}
}
