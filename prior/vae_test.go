package prior

import (
	"cmp"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/nn"
)

// gridGraph is a w x h 4-neighbour grid: BFS balls on it are compact
// clusters with a clear spatial structure for the VAE to learn.
func gridGraph(w, h int) *graph.Graph {
	var edges []graph.Edge
	for r := range h {
		for c := range w {
			i := r*w + c
			if c+1 < w {
				edges = append(edges, graph.Edge{From: i, To: i + 1})
			}
			if r+1 < h {
				edges = append(edges, graph.Edge{From: i, To: i + w})
			}
		}
	}
	return graph.New(w*h, edges, nil, false, false)
}

// clusterSets draws count source sets, each the frac*n nodes nearest (by
// hops, ties broken at random) to a uniformly random centre.
func clusterSets(g *graph.Graph, count int, frac float64, rng *rand.Rand) [][]int {
	n := g.N()
	size := max(1, int(math.Round(frac*float64(n))))
	var dist []int
	sets := make([][]int, count)
	for s := range sets {
		dist = g.BFS([]int{rng.IntN(n)}, dist)
		key := make([]float64, n)
		nodes := make([]int, n)
		for i := range nodes {
			nodes[i] = i
			d := float64(dist[i])
			if dist[i] < 0 {
				d = math.Inf(1)
			}
			key[i] = d + rng.Float64()*0.5
		}
		slices.SortFunc(nodes, func(a, b int) int { return cmp.Compare(key[a], key[b]) })
		sets[s] = slices.Clone(nodes[:size])
	}
	return sets
}

// uniformSets draws count sets of frac*n distinct uniformly random nodes.
func uniformSets(n, count int, frac float64, rng *rand.Rand) [][]int {
	size := max(1, int(math.Round(frac*float64(n))))
	sets := make([][]int, count)
	for s := range sets {
		sets[s] = rng.Perm(n)[:size]
	}
	return sets
}

func tinyConfig() Config {
	return Config{Hidden: 6, Latent: 3, LearningRate: 2e-3, Epochs: 5, BatchSize: 4, Patience: 2, Seed: 7}
}

func TestVAELossGradientCheck(t *testing.T) {
	v := NewVAE(9, tinyConfig())
	// Move the biases and log-variances off zero so every term matters.
	rng := rand.New(rand.NewPCG(3, 3))
	for _, p := range v.params {
		for i := range p.Value {
			p.Value[i] += 0.1 * rng.NormFloat64()
		}
	}
	sets := [][]int{{0, 3}, {8}, {1, 2, 4, 5}, {}}
	eps := randDense(rng, len(sets), 3, 1)
	f := func() float64 {
		bce, kl := v.loss(sets, eps, false)
		return (bce + kl) / float64(len(sets))
	}
	nn.ZeroGrad(v.params)
	bce, kl := v.loss(sets, eps, true)
	require.InDelta(t, f(), (bce+kl)/4, 1e-12)
	require.Greater(t, kl, 0.0)
	for _, p := range v.params {
		grad := slices.Clone(p.Grad)
		worst, at := nn.CheckGradient(f, p.Value, grad, 1e-6)
		require.Less(t, worst, 1e-5, "%s[%d]", p.Name, at)
	}
}

func TestVAEZeroNoiseIsMean(t *testing.T) {
	v := NewVAE(9, tinyConfig())
	sets := [][]int{{0, 3}, {8}}
	b1, k1 := v.loss(sets, nil, false)
	b2, k2 := v.loss(sets, mat.NewDense(2, 3, nil), false)
	require.Equal(t, b1, b2)
	require.Equal(t, k1, k2)
}

func TestFitLearnsClusteredSources(t *testing.T) {
	g := gridGraph(10, 8)
	rng := rand.New(rand.NewPCG(11, 0))
	train, val := clusterSets(g, 400, 0.1, rng), clusterSets(g, 100, 0.1, rng)
	cfg := Config{Hidden: 32, Latent: 8, LearningRate: 2e-3, Epochs: 60, BatchSize: 32, Patience: 10, Seed: 1}
	v := NewVAE(g.N(), cfg)
	var calls []Progress
	m, err := v.Fit(context.Background(), train, val, func(p Progress) { calls = append(calls, p) })
	require.NoError(t, err)
	require.Len(t, calls, int(m["epochs"]))
	require.Equal(t, 60, calls[0].Epochs)
	require.Less(t, m["val_bce"], m["val_bce_initial"])
	require.Less(t, m["val_bce"], m["val_bce_frequency"])
	require.Less(t, calls[len(calls)-1].TrainLoss, calls[0].TrainLoss)
	// Fit keeps the best epoch's parameters.
	bce, kl := v.evaluate(val, validationNoise(len(val), cfg.Latent, cfg.Seed))
	require.InDelta(t, m["val_bce"], bce, 1e-9)
	require.InDelta(t, m["val_kl"], kl, 1e-9)
	require.Equal(t, m["val_loss"], calls[int(m["best_epoch"])-1].ValLoss)
	require.InDelta(t, m["val_bce"]+m["val_kl"], m["val_loss"], 1e-12, "the loss is the negative ELBO, BCE + KL")

	// The terms prefer a held-out cluster to a scattered set of the same size.
	terms := v.Terms(train, 256, rand.New(rand.NewPCG(1, 1)))
	require.Equal(t, 256, terms.Prototypes())
	clustered, scattered := clusterSets(g, 20, 0.1, rng), uniformSets(g.N(), 20, 0.1, rng)
	x := mat.NewDense(40, g.N(), nil)
	for r, s := range append(clustered, scattered...) {
		for _, i := range s {
			x.Set(r, i, 1)
		}
	}
	pred, init := terms.Pred(x, nil), terms.Init(x, nil)
	require.Less(t, mean(pred[:20]), mean(pred[20:]))
	require.Less(t, mean(pred[:20]), mean(init[:20]), "the mixture fits clusters better than the mean latent")
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func TestFitEarlyStopping(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 0))
	// Few training sets and many epochs: validation loss stops improving.
	train, val := uniformSets(30, 8, 0.2, rng), uniformSets(30, 20, 0.2, rng)
	cfg := Config{Hidden: 16, Latent: 4, LearningRate: 1e-2, Epochs: 500, BatchSize: 4, Patience: 3, Seed: 2}
	m, err := NewVAE(30, cfg).Fit(context.Background(), train, val, nil)
	require.NoError(t, err)
	require.Less(t, m["epochs"], 500.0)
	require.Equal(t, 3.0, m["epochs"]-m["best_epoch"])
}

func TestFitWithoutValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 0))
	cfg := tinyConfig()
	m, err := NewVAE(12, cfg).Fit(context.Background(), uniformSets(12, 10, 0.2, rng), nil, nil)
	require.NoError(t, err)
	require.Equal(t, float64(cfg.Epochs), m["epochs"])
	require.NotContains(t, m, "val_bce")
	require.NotContains(t, m, "best_epoch")
}

func TestFitCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := tinyConfig()
	cfg.Epochs, cfg.Patience = 100, 0
	calls := 0
	_, err := NewVAE(12, cfg).Fit(ctx, uniformSets(12, 10, 0.2, rng), uniformSets(12, 4, 0.2, rng), func(p Progress) {
		calls++
		if p.Epoch == 2 {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "fit vae: epoch 3")
	require.Equal(t, 2, calls)
}

func TestFitReportsDivergence(t *testing.T) {
	v := NewVAE(12, tinyConfig())
	// A log-variance bias of 800 overflows exp in the KL term.
	for j := range 3 {
		v.head.B[3+j] = 800
	}
	_, err := v.Fit(context.Background(), [][]int{{1, 2}}, nil, nil)
	require.ErrorIs(t, err, ErrDiverged)
	require.ErrorContains(t, err, "fit vae: epoch 1: loss +Inf")
}

func TestFitRejectsBadInput(t *testing.T) {
	bad := tinyConfig()
	bad.Latent = 0
	for _, tc := range []struct {
		name       string
		cfg        Config
		train, val [][]int
		want       error
		msg        string
	}{
		{"config", bad, [][]int{{1}}, nil, ErrConfig, "latent = 0"},
		{"no training sets", tinyConfig(), nil, nil, ErrSourceSet, "no training sets"},
		{"train node", tinyConfig(), [][]int{{1}, {2, 5}}, nil, ErrSourceSet, "training set 1: node 5 out of range [0, 5)"},
		{"val node", tinyConfig(), [][]int{{1}}, [][]int{{-1}}, ErrSourceSet, "validation set 0: node -1 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewVAE(5, tc.cfg).Fit(context.Background(), tc.train, tc.val, nil)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	require.NoError(t, PaperConfig().Validate())
	for _, tc := range []struct {
		name string
		edit func(*Config)
		msg  string
	}{
		{"hidden", func(c *Config) { c.Hidden = 0 }, "hidden = 0"},
		{"latent", func(c *Config) { c.Latent = 1 << 20 }, "latent = 1048576"},
		{"lr", func(c *Config) { c.LearningRate = math.NaN() }, "learning rate = NaN"},
		{"epochs", func(c *Config) { c.Epochs = 0 }, "epochs = 0"},
		{"batch", func(c *Config) { c.BatchSize = -1 }, "batch size = -1"},
		{"patience", func(c *Config) { c.Patience = -1 }, "patience = -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

// TestTermsAtMatchesDecoder checks the VAE's low-rank terms against the
// decoder's full output: D_j = logits(z_j), c_j = sum_i log(1 - d_ji).
func TestTermsAtMatchesDecoder(t *testing.T) {
	v := NewVAE(10, tinyConfig())
	rng := rand.New(rand.NewPCG(9, 9))
	z, zbar := randDense(rng, 7, 3, 1), randDense(rng, 1, 3, 1)
	tm := v.termsAt(z, zbar)
	var D mat.Dense
	D.CloneFrom(v.dec.Forward(z))
	bar := slices.Clone(v.dec.Forward(zbar).RawRowView(0))
	x := randX(4, 3, 10)
	grad := mat.NewDense(3, 10, nil)
	pred, init := tm.Pred(x, grad), tm.Init(x, nil)
	for r := range 3 {
		e := make([]float64, 7)
		for j := range e {
			for i := range 10 {
				l := D.At(j, i)
				e[j] += x.At(r, i)*logSigmoid(l) + (1-x.At(r, i))*logSigmoid(-l)
			}
		}
		require.InDelta(t, -nn.LogSumExp(e), pred[r], 1e-9)
		var li float64
		for i, l := range bar {
			li -= x.At(r, i)*logSigmoid(l) + (1-x.At(r, i))*logSigmoid(-l)
		}
		require.InDelta(t, li, init[r], 1e-9)
	}
	// The terms own their copy of the decoder's output layer.
	last := v.dec.Layers[len(v.dec.Layers)-1]
	last.W.Set(0, 0, last.W.At(0, 0)+1)
	require.Equal(t, pred, tm.Pred(x, nil))
}

func TestTermsSampling(t *testing.T) {
	v := NewVAE(12, tinyConfig())
	train := [][]int{{0, 1}, {5}, {7, 8, 9}}
	a := v.Terms(train, 10, rand.New(rand.NewPCG(1, 2)))
	b := v.Terms(train, 10, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, 10, a.Prototypes(), "cycles through 3 sets")
	require.Equal(t, 12, a.Nodes())
	x := randX(1, 2, 12)
	require.Equal(t, a.Pred(x, nil), b.Pred(x, nil), "same rng, same terms")
	require.Equal(t, DefaultPrototypes, v.Terms(train, 0, nil).Prototypes())
	// The mean latent is the mean of mu.
	mu, _ := v.encode(train)
	zbar := mat.NewDense(1, 3, nil)
	for j := range 3 {
		zbar.Set(0, j, (mu.At(0, j)+mu.At(1, j)+mu.At(2, j))/3)
	}
	want := v.termsAt(mat.NewDense(1, 3, nil), zbar)
	require.InDeltaSlice(t, want.Init(x, nil), a.Init(x, nil), 1e-9)
	// Without training sets the prototypes come from N(0, I).
	require.Equal(t, 5, v.Terms(nil, 5, nil).Prototypes())
}

func TestVAEMarshalRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 0))
	train := uniformSets(15, 12, 0.2, rng)
	v := NewVAE(15, tinyConfig())
	_, err := v.Fit(context.Background(), train, nil, nil)
	require.NoError(t, err)
	data, err := v.MarshalBinary()
	require.NoError(t, err)
	var back VAE
	require.NoError(t, back.UnmarshalBinary(data))
	require.Equal(t, v.Config(), back.Config())
	require.Equal(t, 15, back.Nodes())
	n, cfg, err := ReadVAEHeader(data)
	require.NoError(t, err)
	require.Equal(t, 15, n)
	require.Equal(t, v.Config(), cfg)
	b1, k1 := v.evaluate(train, nil)
	b2, k2 := back.evaluate(train, nil)
	require.Equal(t, b1, b2)
	require.Equal(t, k1, k2)
	x := randX(2, 2, 15)
	require.Equal(t, v.Terms(train, 8, rand.New(rand.NewPCG(1, 1))).Pred(x, nil),
		back.Terms(train, 8, rand.New(rand.NewPCG(1, 1))).Pred(x, nil))

	// A marshalled VAE can keep training.
	_, err = back.Fit(context.Background(), train, nil, nil)
	require.NoError(t, err)

	bad := tinyConfig()
	bad.Hidden = 0
	_, err = NewVAE(3, bad).MarshalBinary()
	require.ErrorIs(t, err, ErrConfig)
}

func TestVAEUnmarshalRejectsBadData(t *testing.T) {
	good, err := NewVAE(6, tinyConfig()).MarshalBinary()
	require.NoError(t, err)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"terms data", func() []byte { d, _ := randTerms(1, 2, 2, 2).MarshalBinary(); return d }(), ErrFormat, "not a vae encoding"},
		{"flipped bit", edit(func(b []byte) []byte { b[len(b)-40] ^= 4; return b }), ErrChecksum, "vae: prior: checksum"},
		{"version", edit(func(b []byte) []byte { b[4] = 2; return reseal(b) }), ErrVersion, "version 2"},
		{"zero latent", edit(func(b []byte) []byte { b[24] = 0; return reseal(b) }), ErrFormat, "latent = 0 out of range"},
		{"bad lr", edit(func(b []byte) []byte {
			copy(b[32:], []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xbf}) // -1.0
			return reseal(b)
		}), ErrConfig, "learning rate = -1"},
		{"wrong nodes", edit(func(b []byte) []byte { b[8] = 7; return reseal(b) }), nn.ErrParamMismatch, "vae:"},
		{"truncated", edit(func(b []byte) []byte { return reseal(b[:len(b)-20]) }), ErrFormat, "truncated at parameters"},
		{"trailing parameter bytes", edit(func(b []byte) []byte {
			// The parameter stream's length is at offset 72 (magic,
			// version, 8 fields); grow the stream by 3 bytes of junk.
			const lenAt = 72
			k := binary.LittleEndian.Uint64(b[lenAt:])
			binary.LittleEndian.PutUint64(b[lenAt:], k+3)
			b = append(b[:len(b)-4], 1, 2, 3, 0, 0, 0, 0)
			return reseal(b)
		}), ErrFormat, "parameters: 3 trailing bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v VAE
			err := v.UnmarshalBinary(tc.data)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.msg)
			// The header reader refuses the same data, but for what only
			// decoding the parameters finds.
			_, _, err = ReadVAEHeader(tc.data)
			switch tc.name {
			case "trailing parameter bytes", "wrong nodes":
				// The stream's own shapes disagree with the header;
				// a bundle compares the node count with its graph.
				require.NoError(t, err)
			default:
				require.ErrorIs(t, err, tc.want)
				require.ErrorContains(t, err, tc.msg)
			}
		})
	}
}

// paramCount is the number of values NewVAE allocates.
func TestVAEParamCount(t *testing.T) {
	for _, tc := range []struct{ n, h, k int }{{1, 1, 1}, {6, 6, 3}, {34, 128, 32}, {7, 3, 11}} {
		cfg := tinyConfig()
		cfg.Hidden, cfg.Latent = tc.h, tc.k
		var got uint64
		for _, p := range NewVAE(tc.n, cfg).params {
			got += uint64(len(p.Value))
		}
		require.Equal(t, got, paramCount(tc.n, tc.h, tc.k), "n=%d hidden=%d latent=%d", tc.n, tc.h, tc.k)
	}
}

// A header asking for a wide network is refused before the network is
// allocated, however the sizes multiply: the parameter stream must hold
// every value. (Refused only by ReadParams, n=1 with widths 4096 took
// 1.3 GB.)
func TestVAEUnmarshalBoundsAllocation(t *testing.T) {
	cfg := tinyConfig()
	cfg.Hidden, cfg.Latent = 16, 4
	good, err := NewVAE(1, cfg).MarshalBinary()
	require.NoError(t, err)
	require.Greater(t, len(good), 4096) // nodes x hidden fits the encoding
	for _, tc := range []struct {
		name    string
		n, h, k uint64
		msg     string
	}{
		{"wide", 1, 4096, 4096, "cannot hold the 83918849 values of 1 nodes, hidden 4096, latent 4096"},
		{"widest", 1 << 24, 1 << 14, 1 << 14, "cannot hold the 551114866688 values of 16777216 nodes, hidden 16384, latent 16384"},
		{"wide hidden", 1, 1 << 14, 1, "hidden 16384, latent 1"},
		{"wide latent", 1, 1, 1 << 14, "hidden 1, latent 16384"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint64(b[8:], tc.n)
			binary.LittleEndian.PutUint64(b[16:], tc.h)
			binary.LittleEndian.PutUint64(b[24:], tc.k)
			reseal(b)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var v VAE
			err := v.UnmarshalBinary(b)
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, ErrFormat)
			require.ErrorContains(t, err, tc.msg)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "bytes allocated")
		})
	}
}

func TestFitIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 0))
	train, val := uniformSets(20, 30, 0.2, rng), uniformSets(20, 10, 0.2, rng)
	cfg := tinyConfig()
	cfg.Epochs = 3
	a, err := NewVAE(20, cfg).Fit(context.Background(), train, val, nil)
	require.NoError(t, err)
	b, err := NewVAE(20, cfg).Fit(context.Background(), train, val, nil)
	require.NoError(t, err)
	require.Equal(t, a, b)
	cfg.Seed++
	c, err := NewVAE(20, cfg).Fit(context.Background(), train, val, nil)
	require.NoError(t, err)
	require.NotEqual(t, a["val_loss"], c["val_loss"])
}

// TestLatentsCycleThroughSets makes q(z|x) a point mass, so each prototype
// latent is the mu of the set it was drawn from.
func TestLatentsCycleThroughSets(t *testing.T) {
	v := NewVAE(12, tinyConfig())
	for j := range 3 {
		v.head.B[3+j] = -80 // log-variance: sigma = e^-40
	}
	train := [][]int{{0, 1}, {5}, {7, 8, 9}, {2}, {3, 4}}
	mu, _ := v.encode(train)
	which := func(z []float64) int {
		for s := range train {
			if floatsEqual(z, mu.RawRowView(s)) {
				return s
			}
		}
		return -1
	}
	for _, tc := range []struct {
		protos int
		counts []int // how often each set may be used: min, max
	}{
		{12, []int{2, 3}}, // cycles: every set twice, two sets a third time
		{3, []int{0, 1}},  // a subset, without repeats
	} {
		z, zbar := v.latents(train, tc.protos, rand.New(rand.NewPCG(4, 4)))
		count := make([]int, len(train))
		for j := range tc.protos {
			s := which(z.RawRowView(j))
			require.NotEqual(t, -1, s, "prototype %d is no set's mu", j)
			count[s]++
		}
		for s, c := range count {
			require.GreaterOrEqual(t, c, tc.counts[0], "set %d", s)
			require.LessOrEqual(t, c, tc.counts[1], "set %d", s)
		}
		for j := range 3 {
			var m float64
			for s := range train {
				m += mu.At(s, j) / 5
			}
			require.InDelta(t, m, zbar.At(0, j), 1e-12)
		}
	}
}

func floatsEqual(a, b []float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}

// The encoder's first layer takes ReLU's derivative at 0 as 0, as nn's
// ReLU does: an empty source set with the initial zero bias sits at z = 0
// exactly, and passes no gradient to the bias.
func TestSparseDenseReLUAtZero(t *testing.T) {
	l := newSparseDense(4, 3, rand.New(rand.NewPCG(41, 41)))
	y := l.forward([][]int{{}, {1, 2}})
	require.Equal(t, []float64{0, 0, 0}, y.RawRowView(0))
	l.backward(mat.NewDense(2, 3, []float64{1, 1, 1, 0, 0, 0}))
	require.Equal(t, []float64{0, 0, 0}, l.gb)
	require.Equal(t, make([]float64, 12), l.gw)
}

// train_loss is the epoch's mean negative ELBO, BCE + KL per set. With the
// decoder's first layer zeroed the logits do not depend on z, so the
// training noise does not matter, and at a learning rate of 1e-12 the one
// epoch leaves the parameters where they were: the metric is then the
// mean of BCE + KL at z = mu, computed by evaluate.
func TestFitTrainLossIsTheNegativeELBO(t *testing.T) {
	cfg := tinyConfig()
	cfg.Epochs, cfg.LearningRate = 1, 1e-12
	v := NewVAE(9, cfg)
	v.dec.Layers[0].W.Zero()
	train := [][]int{{0, 3}, {8}, {1, 2, 4, 5}, {6}, {2, 7}}
	m, err := v.Fit(context.Background(), train, nil, nil)
	require.NoError(t, err)
	bce, kl := v.evaluate(train, nil)
	require.Greater(t, kl, 0.0)
	require.InDelta(t, bce+kl, m["train_loss"], 1e-6)
}

// evaluate and encode take the sets 256 at a time: exactly 256 sets are
// one full chunk, with the means of the sets' own losses and their own
// encodings (computed one by one).
func TestEvaluateOnAFullChunk(t *testing.T) {
	v := NewVAE(11, tinyConfig())
	rng := rand.New(rand.NewPCG(37, 37))
	sets := uniformSets(11, 256, 0.3, rng)
	eps := randDense(rng, 256, 3, 1)
	bce, kl := v.evaluate(sets, eps)
	mu, lv := v.encode(sets)
	var wantB, wantK float64
	for s, set := range sets {
		m1, l1 := v.encode([][]int{set})
		require.InDeltaSlice(t, m1.RawRowView(0), mu.RawRowView(s), 1e-12)
		require.InDeltaSlice(t, l1.RawRowView(0), lv.RawRowView(s), 1e-12)
		b, k := v.loss([][]int{set}, mat.NewDense(1, 3, slices.Clone(eps.RawRowView(s))), false)
		wantB += b / 256
		wantK += k / 256
	}
	require.InDelta(t, wantB, bce, 1e-9)
	require.InDelta(t, wantK, kl, 1e-9)
}

// frequencyBCE by hand: on the training sets {0} and {0, 1} the Laplace-
// smoothed frequencies (count + 1)/(2 + 2) are 3/4, 1/2, 1/4, so the set
// {1} costs -log(1/4 · 1/2 · 3/4) = log(32/3) and {0} costs
// -log(3/4 · 1/2 · 3/4) = log(32/9); the metric is their mean.
func TestFrequencyBCE(t *testing.T) {
	got := frequencyBCE([][]int{{0}, {0, 1}}, [][]int{{1}, {0}}, 3)
	require.InDelta(t, (math.Log(32.0/3)+math.Log(32.0/9))/2, got, 1e-12)
}
