package gat

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
func (m *Model) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.g == nil {
		return forward.FitResult{}, fmt.Errorf("gat: fit: %w", forward.ErrNotConfigured)
	}
	n := m.g.N()
	if len(pairs) == 0 {
		return forward.FitResult{}, fmt.Errorf("gat: fit: no training pairs")
	}
	if err := checkPairs("training", pairs, n); err != nil {
		return forward.FitResult{}, fmt.Errorf("gat: fit: %w", err)
	}
	if err := checkPairs("validation", opts.Validation, n); err != nil {
		return forward.FitResult{}, fmt.Errorf("gat: fit: %w", err)
	}
	epochs, lr, bs, lambda := opts.Epochs, opts.LearningRate, opts.BatchSize, opts.Lambda
	if epochs <= 0 {
		epochs = DefaultEpochs
	}
	if lr <= 0 || math.IsNaN(lr) {
		lr = DefaultLearningRate
	}
	if bs <= 0 {
		bs = DefaultBatchSize
	}
	bs = min(bs, len(pairs))
	if lambda == 0 {
		lambda = DefaultLambda
	}
	lambda = max(lambda, 0)

	net := newNetwork(m.g, m.arch, uint64(opts.Seed))
	net.setOutputBias(backgroundRate(pairs, n))
	adam := nn.NewAdam(net.params, lr)
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x5eed))
	tr := &trainer{net: net, n: n, lambda: lambda}

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
				return forward.FitResult{}, fmt.Errorf("gat: fit: %w", err)
			}
			batch := make([]forward.Pair, 0, bs)
			for _, i := range order[lo:min(lo+bs, len(order))] {
				batch = append(batch, pairs[i])
			}
			tr.fill(batch, rng)
			loss, _ := tr.loss(true)
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return forward.FitResult{}, fmt.Errorf("gat: fit: training loss is %v at epoch %d", loss, epoch)
			}
			adam.Step()
			sum += loss
			batches++
		}
		p := forward.Progress{Epoch: epoch, Epochs: epochs, TrainLoss: sum / float64(batches), ValLoss: math.NaN()}
		if len(opts.Validation) > 0 {
			p.ValLoss = tr.mse(opts.Validation, bs)
			if p.ValLoss < best {
				best, bestEpoch, stale = p.ValLoss, epoch, 0
				snapshot = saveParams(net.params, snapshot)
			} else {
				stale++
			}
		}
		m.log.Debug("gat epoch", zap.Int("epoch", epoch), zap.Float64("train_loss", p.TrainLoss), zap.Float64("val_mse", p.ValLoss))
		if progress != nil {
			progress(p)
		}
		if stale >= m.patience {
			break
		}
	}
	if snapshot != nil {
		for i, p := range net.params {
			copy(p.Value, snapshot[i])
		}
	}
	metrics := map[string]float64{
		"train_mse": tr.mse(pairs, bs),
		"epochs":    float64(epoch),
	}
	if len(opts.Validation) > 0 {
		metrics["val_mse"] = best
		metrics["best_epoch"] = float64(bestEpoch)
	}
	state, err := encodeState(net, m.g)
	if err != nil {
		return forward.FitResult{}, fmt.Errorf("gat: fit: %w", err)
	}
	m.net = net
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

// backgroundRate is the fraction of non-source nodes infected over pairs,
// the best constant guess the output bias starts from.
func backgroundRate(pairs []forward.Pair, n int) float64 {
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

// trainer holds one mini-batch: the source vectors x, their subsets x_sub
// (used when λ > 0) and the observations y, each b x n row-major.
type trainer struct {
	net    *network
	n      int
	lambda float64

	b         int
	x, xs, y  []float64
	cx, cd    *mat.Dense
	chunkRows int // 0: chunkRows(n)
}

// fill loads batch into the trainer, drawing the subsets from rng (which
// may be nil when λ = 0).
func (t *trainer) fill(batch []forward.Pair, rng *rand.Rand) {
	n, b := t.n, len(batch)
	t.b = b
	t.x = grow(t.x, b*n)
	t.xs = grow(t.xs, b*n)
	t.y = grow(t.y, b*n)
	clear(t.x)
	clear(t.xs)
	clear(t.y)
	for i, p := range batch {
		for _, v := range p.Infected {
			t.y[i*n+v] = 1
		}
		for _, v := range p.Sources {
			t.x[i*n+v] = 1
			t.y[i*n+v] = 1
		}
		if t.lambda > 0 && len(p.Sources) > 0 {
			drop := rng.IntN(len(p.Sources)) // always dropped, so x_sub != x
			for j, v := range p.Sources {
				if j == drop || rng.IntN(2) == 0 {
					continue
				}
				t.xs[i*n+v] = 1
			}
		}
	}
}

// loss evaluates the mini-batch loss and its MSE part; with grad it also
// back-propagates into the parameter gradients (zeroed first). Pairs go
// through the network in chunks (each with its subsets) so memory stays
// bounded on large graphs; gradients accumulate over chunks, so the result
// does not depend on the chunking.
func (t *trainer) loss(grad bool) (loss, mse float64) {
	n, b := t.n, t.b
	if grad {
		nn.ZeroGrad(t.net.params)
	}
	per := t.chunkRows
	if per <= 0 {
		per = chunkRows(n)
	}
	if t.lambda > 0 {
		per = max(1, per/2)
	}
	scale := 1 / float64(b*n)
	var pen float64
	for lo := 0; lo < b; lo += per {
		c := min(per, b-lo)
		rows := c
		if t.lambda > 0 {
			rows = 2 * c
		}
		t.cx = reuse(t.cx, rows, n)
		cx := t.cx.RawMatrix().Data
		copy(cx[:c*n], t.x[lo*n:(lo+c)*n])
		if t.lambda > 0 {
			copy(cx[c*n:], t.xs[lo*n:(lo+c)*n])
		}
		f := t.net.forward(t.cx).RawMatrix()
		if grad {
			t.cd = reuse(t.cd, rows, n)
		}
		for i := 0; i < c; i++ {
			fr := f.Data[i*f.Stride : i*f.Stride+n]
			y := t.y[(lo+i)*n : (lo+i+1)*n]
			for v, fv := range fr {
				d := fv - y[v]
				mse += d * d
				g := 2 * d * scale
				if t.lambda > 0 {
					r := max(f.Data[(c+i)*f.Stride+v]-fv, 0)
					pen += r * r
					if grad {
						g -= 2 * t.lambda * r * scale
						t.cd.Set(c+i, v, 2*t.lambda*r*scale)
					}
				}
				if grad {
					t.cd.Set(i, v, g)
				}
			}
		}
		if grad {
			t.net.backward(t.cd)
		}
	}
	mse *= scale
	return mse + t.lambda*pen*scale, mse
}

// mse is the mean over pairs of the per-node squared error of f(x).
func (t *trainer) mse(pairs []forward.Pair, bs int) float64 {
	saved := t.lambda
	t.lambda = 0
	defer func() { t.lambda = saved }()
	var sum float64
	for lo := 0; lo < len(pairs); lo += bs {
		batch := pairs[lo:min(lo+bs, len(pairs))]
		t.fill(batch, nil)
		_, mse := t.loss(false)
		sum += mse * float64(len(batch))
	}
	return sum / float64(len(pairs))
}
