package gnn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"go.uber.org/zap"
	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/nn"
)

// Fit trains a fresh network (initialised from opts.Seed) on pairs by Adam
// on mini-batches, minimising
//
//	L = mean (f(x) - y)^2 + λ mean max(0, f(x_sub) - f(x))^2
//
// where x_sub drops a random non-empty subset of x's sources (each with
// probability 1/2), so a smaller source set never predicts more infection.
// λ < 0 turns the penalty off. With opts.Validation it keeps the weights of
// the epoch with the lowest validation MSE and stops after patience epochs
// without improvement. progress, if not nil, is called after every epoch,
// with the model locked: it must not call back into the model.
func (m *Model[A, N]) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, name := m.spec.Defaults, m.spec.Name
	if m.g == nil {
		return forward.FitResult{}, fmt.Errorf("%s: fit: %w", name, forward.ErrNotConfigured)
	}
	n := m.g.N()
	if len(pairs) == 0 {
		return forward.FitResult{}, fmt.Errorf("%s: fit: no training pairs", name)
	}
	if err := checkPairs("training", pairs, n); err != nil {
		return forward.FitResult{}, fmt.Errorf("%s: fit: %w", name, err)
	}
	if err := checkPairs("validation", opts.Validation, n); err != nil {
		return forward.FitResult{}, fmt.Errorf("%s: fit: %w", name, err)
	}
	epochs, lr, bs, lambda := opts.Epochs, opts.LearningRate, opts.BatchSize, opts.Lambda
	if math.IsInf(lr, 0) || math.IsInf(lambda, 0) || math.IsNaN(lambda) {
		// Go's max(NaN, 0) is NaN: the loss would turn NaN and the error
		// would blame the model, not the option.
		return forward.FitResult{}, fmt.Errorf("%s: fit: learning rate %g and lambda %g: want finite values", name, lr, lambda)
	}
	if epochs <= 0 {
		epochs = s.Epochs
	}
	if lr <= 0 || math.IsNaN(lr) {
		lr = s.LearningRate
	}
	if bs <= 0 {
		bs = s.BatchSize
	}
	bs = min(bs, len(pairs))
	if lambda == 0 {
		lambda = s.Lambda
	}
	lambda = max(lambda, 0)

	net := m.spec.NewNetwork(m.g, m.arch, uint64(opts.Seed))
	net.SetOutputBias(BackgroundRate(pairs, n))
	adam := nn.NewAdam(net.Params(), lr)
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x5eed))
	tr := &Trainer[A, N]{Net: net, Lambda: lambda}

	order := make([]int, len(pairs))
	for i := range order {
		order[i] = i
	}
	best, bestEpoch, stale := math.Inf(1), 0, 0
	var snapshot [][]float64
	epoch := 0
	for epoch < epochs {
		epoch++
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var sum float64
		batches := 0
		for lo := 0; lo < len(order); lo += bs {
			if err := ctx.Err(); err != nil {
				return forward.FitResult{}, fmt.Errorf("%s: fit: %w", name, err)
			}
			batch := make([]forward.Pair, 0, bs)
			for _, i := range order[lo:min(lo+bs, len(order))] {
				batch = append(batch, pairs[i])
			}
			tr.Fill(batch, rng)
			loss, _ := tr.Loss(true)
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return forward.FitResult{}, fmt.Errorf("%s: fit: training loss is %v at epoch %d", name, loss, epoch)
			}
			adam.Step()
			sum += loss
			batches++
		}
		p := forward.Progress{Epoch: epoch, Epochs: epochs, TrainLoss: sum / float64(batches), ValLoss: math.NaN()}
		if len(opts.Validation) > 0 {
			p.ValLoss = tr.MSE(opts.Validation, bs)
			if p.ValLoss < best {
				best, bestEpoch, stale = p.ValLoss, epoch, 0
				snapshot = saveParams(net.Params(), snapshot)
			} else {
				stale++
			}
		}
		m.log.Debug(name+" epoch", zap.Int("epoch", epoch), zap.Float64("train_loss", p.TrainLoss), zap.Float64("val_mse", p.ValLoss))
		if progress != nil {
			progress(p)
		}
		if stale >= m.patience {
			break
		}
	}
	if snapshot != nil {
		for i, p := range net.Params() {
			copy(p.Value, snapshot[i])
		}
	}
	metrics := map[string]float64{
		"train_mse": tr.MSE(pairs, bs),
		"epochs":    float64(epoch),
	}
	if len(opts.Validation) > 0 {
		metrics["val_mse"] = best
		metrics["best_epoch"] = float64(bestEpoch)
	}
	state, err := m.spec.EncodeState(net, m.g)
	if err != nil {
		return forward.FitResult{}, fmt.Errorf("%s: fit: %w", name, err)
	}
	m.net, m.fitted = net, true
	return forward.FitResult{State: state, Metrics: metrics}, nil
}

// checkPairs reports a node index out of range, naming the pair.
func checkPairs(what string, pairs []forward.Pair, n int) error {
	for i, p := range pairs {
		for _, v := range p.Sources {
			if v < 0 || v >= n {
				return fmt.Errorf("%s pair %d: source node index %d out of range [0,%d)", what, i, v, n)
			}
		}
		for _, v := range p.Infected {
			if v < 0 || v >= n {
				return fmt.Errorf("%s pair %d: infected node index %d out of range [0,%d)", what, i, v, n)
			}
		}
	}
	return nil
}

// BackgroundRate is the fraction of non-source nodes infected over pairs,
// the best constant guess the output bias starts from.
func BackgroundRate(pairs []forward.Pair, n int) float64 {
	var inf, tot float64
	mark := make([]bool, n)
	for _, p := range pairs {
		for _, v := range p.Sources {
			mark[v] = true
		}
		for _, v := range p.Infected {
			if !mark[v] {
				inf++
			}
		}
		tot += float64(n - len(p.Sources))
		for _, v := range p.Sources {
			mark[v] = false
		}
	}
	if tot == 0 {
		return 0.5
	}
	return inf / tot
}

func saveParams(ps []*nn.Param, dst [][]float64) [][]float64 {
	if dst == nil {
		dst = make([][]float64, len(ps))
	}
	for i, p := range ps {
		dst[i] = append(dst[i][:0], p.Value...)
	}
	return dst
}

// Trainer evaluates the training loss of Net on one mini-batch: the
// source vectors X, their subsets XS (used when Lambda > 0) and the
// observations y, each b x n row-major.
type Trainer[A Arch, N Network[A]] struct {
	Net    N
	Lambda float64
	// ChunkRows is the number of rows per forward pass; 0 means
	// ChunkRows(n, Net.CacheFloats()).
	ChunkRows int

	b      int
	X, XS  []float64
	y      []float64
	cx, cd *mat.Dense
}

// Fill loads batch into the trainer, drawing the subsets from rng (which
// may be nil when λ = 0).
func (t *Trainer[A, N]) Fill(batch []forward.Pair, rng *rand.Rand) {
	n, b := t.Net.Nodes(), len(batch)
	t.b = b
	t.X = Grow(t.X, b*n)
	t.XS = Grow(t.XS, b*n)
	t.y = Grow(t.y, b*n)
	clear(t.X)
	clear(t.XS)
	clear(t.y)
	for i, p := range batch {
		for _, v := range p.Infected {
			t.y[i*n+v] = 1
		}
		for _, v := range p.Sources {
			t.X[i*n+v] = 1
			t.y[i*n+v] = 1
		}
		if t.Lambda > 0 && len(p.Sources) > 0 {
			drop := rng.IntN(len(p.Sources)) // always dropped, so x_sub != x
			for j, v := range p.Sources {
				if j == drop || rng.IntN(2) == 0 {
					continue
				}
				t.XS[i*n+v] = 1
			}
		}
	}
}

// Loss evaluates the mini-batch loss and its MSE part; with grad it also
// back-propagates into the parameter gradients (zeroed first). Pairs go
// through the network in chunks (each with its subsets) so memory stays
// bounded on large graphs; gradients accumulate over chunks, so the result
// does not depend on the chunking.
func (t *Trainer[A, N]) Loss(grad bool) (loss, mse float64) {
	n, b := t.Net.Nodes(), t.b
	if grad {
		nn.ZeroGrad(t.Net.Params())
	}
	per := t.ChunkRows
	if per <= 0 {
		per = ChunkRows(n, t.Net.CacheFloats())
	}
	if t.Lambda > 0 {
		per = max(1, per/2)
	}
	scale := 1 / float64(b*n)
	var pen float64
	for lo := 0; lo < b; lo += per {
		c := min(per, b-lo)
		rows := c
		if t.Lambda > 0 {
			rows = 2 * c
		}
		t.cx = nn.Reuse(t.cx, rows, n)
		cx := t.cx.RawMatrix().Data
		copy(cx[:c*n], t.X[lo*n:(lo+c)*n])
		if t.Lambda > 0 {
			copy(cx[c*n:], t.XS[lo*n:(lo+c)*n])
		}
		f := t.Net.Forward(t.cx).RawMatrix()
		if grad {
			t.cd = nn.Reuse(t.cd, rows, n)
		}
		for i := 0; i < c; i++ {
			fr := f.Data[i*f.Stride : i*f.Stride+n]
			y := t.y[(lo+i)*n : (lo+i+1)*n]
			for v, fv := range fr {
				d := fv - y[v]
				mse += d * d
				g := 2 * d * scale
				if t.Lambda > 0 {
					r := max(f.Data[(c+i)*f.Stride+v]-fv, 0)
					pen += r * r
					if grad {
						g -= 2 * t.Lambda * r * scale
						t.cd.Set(c+i, v, 2*t.Lambda*r*scale)
					}
				}
				if grad {
					t.cd.Set(i, v, g)
				}
			}
		}
		if grad {
			t.Net.Backward(t.cd)
		}
	}
	mse *= scale
	return mse + t.Lambda*pen*scale, mse
}

// MSE is the mean over pairs of the per-node squared error of f(x).
func (t *Trainer[A, N]) MSE(pairs []forward.Pair, bs int) float64 {
	saved := t.Lambda
	t.Lambda = 0
	defer func() { t.Lambda = saved }()
	var sum float64
	for lo := 0; lo < len(pairs); lo += bs {
		batch := pairs[lo:min(lo+bs, len(pairs))]
		t.Fill(batch, nil)
		_, mse := t.Loss(false)
		sum += mse * float64(len(batch))
	}
	return sum / float64(len(pairs))
}
