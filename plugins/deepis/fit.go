package deepis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/nn"
)

// checkPairs reports the first pair with a node index outside [0, n).
func checkPairs(pairs []forward.Pair, n int, what string) error {
	for i, p := range pairs {
		for _, s := range p.Sources {
			if s < 0 || s >= n {
				return fmt.Errorf("deepis: %s pair %d: source %d out of range for %d nodes", what, i, s, n)
			}
		}
		for _, v := range p.Infected {
			if v < 0 || v >= n {
				return fmt.Errorf("deepis: %s pair %d: infected node %d out of range for %d nodes", what, i, v, n)
			}
		}
	}
	return nil
}

func indicator(dst []float64, idx []int) {
	clear(dst)
	for _, i := range idx {
		dst[i] = 1
	}
}

// Fit trains a freshly initialised model (seeded by opts.Seed) on pairs
// and leaves it fitted. Zero options take the package defaults.
func (m *Model) Fit(ctx context.Context, pairs []forward.Pair, opts forward.FitOptions, progress func(forward.Progress)) (forward.FitResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nt == nil {
		return forward.FitResult{}, fmt.Errorf("deepis: fit: %w", forward.ErrNotConfigured)
	}
	if len(pairs) == 0 {
		return forward.FitResult{}, fmt.Errorf("deepis: fit: no training pairs")
	}
	n := m.g.N()
	if err := checkPairs(pairs, n, "training"); err != nil {
		return forward.FitResult{}, err
	}
	if err := checkPairs(opts.Validation, n, "validation"); err != nil {
		return forward.FitResult{}, err
	}
	epochs := orDefault(opts.Epochs, DefaultEpochs)
	batch := orDefault(opts.BatchSize, DefaultBatchSize)
	lr, lambda := opts.LearningRate, opts.Lambda
	if lr <= 0 {
		lr = DefaultLearningRate
	}
	if lambda <= 0 {
		lambda = DefaultLambda
	}
	if progress == nil {
		progress = func(forward.Progress) {}
	}

	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0xdee915))
	nt := newNet(m.g, m.cfg.arch, rng)
	adam := nn.NewAdam(nt.params, lr)
	w0 := nt.worker(0)
	chunk := max(1, nt.chunkRows()/2) // pairs per pass: x and x_sub rows
	xs := make([]float64, 2*chunk*n)
	yt := make([]float64, chunk*n)
	dy := make([]float64, 2*chunk*n)
	out := make([]float64, 2*chunk*n)
	order := make([]int, len(pairs))
	for i := range order {
		order[i] = i
	}

	best, bestEpoch, stale := math.Inf(1), 0, 0
	var bestParams [][]float64
	snapshot := func() {
		bestParams = bestParams[:0]
		for _, p := range nt.params {
			bestParams = append(bestParams, append([]float64(nil), p.Value...))
		}
	}
	epoch := 0
	for epoch < epochs {
		epoch++
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var sse float64
		for lo := 0; lo < len(order); lo += batch {
			if err := ctx.Err(); err != nil {
				return forward.FitResult{}, fmt.Errorf("deepis: fit: %w", err)
			}
			hi := min(len(order), lo+batch)
			scale := 1 / float64((hi-lo)*n)
			nn.ZeroGrad(nt.params)
			for c := lo; c < hi; c += chunk {
				e := min(hi, c+chunk)
				k := e - c
				for i := 0; i < k; i++ {
					p := pairs[order[c+i]]
					indicator(xs[i*n:(i+1)*n], p.Sources)
					indicator(xs[(k+i)*n:(k+i+1)*n], dropSome(p.Sources, rng))
					indicator(yt[i*n:(i+1)*n], p.Infected)
				}
				f := out[:2*k*n]
				nt.forward(w0, xs[:2*k*n], 2*k, f)
				for i := 0; i < k*n; i++ {
					d := f[i] - yt[i]
					sse += d * d
					dy[i] = 2 * d * scale
					dy[k*n+i] = 0
					if v := f[k*n+i] - f[i]; v > 0 {
						g := 2 * lambda * v * scale
						dy[i] -= g
						dy[k*n+i] = g
					}
				}
				nt.backward(w0, dy[:2*k*n], nil)
			}
			adam.Step()
		}
		trainMSE := sse / float64(len(pairs)*n)
		val := math.NaN()
		if len(opts.Validation) > 0 {
			val = mse(nt, opts.Validation, xs, out, yt, chunk)
		}
		progress(forward.Progress{Epoch: epoch, Epochs: epochs, TrainLoss: trainMSE, ValLoss: val})
		if len(opts.Validation) == 0 {
			continue
		}
		if val < best*(1-1e-4) {
			best, bestEpoch, stale = val, epoch, 0
			snapshot()
		} else if stale++; stale >= m.cfg.patience {
			break
		}
	}
	if bestParams != nil {
		for i, p := range nt.params {
			copy(p.Value, bestParams[i])
		}
	}
	metrics := map[string]float64{
		"train_mse":  mse(nt, pairs, xs, out, yt, chunk),
		"epochs":     float64(epoch),
		"edge_scale": math.Exp(nt.logScale.Value[0]),
	}
	if len(opts.Validation) > 0 {
		metrics["val_mse"] = best
		metrics["best_epoch"] = float64(bestEpoch)
	}
	state, err := encodeState(m.g, nt)
	if err != nil {
		return forward.FitResult{}, err
	}
	m.nt, m.fitted = nt, true
	return forward.FitResult{State: state, Metrics: metrics}, nil
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// dropSome returns sources with each dropped with probability 1/2, and at
// least one dropped when there are any.
func dropSome(sources []int, rng *rand.Rand) []int {
	if len(sources) == 0 {
		return nil
	}
	keep := make([]int, 0, len(sources))
	for _, s := range sources {
		if rng.IntN(2) == 0 {
			keep = append(keep, s)
		}
	}
	if len(keep) == len(sources) {
		i := rng.IntN(len(keep))
		keep = append(keep[:i], keep[i+1:]...)
	}
	return keep
}

// mse is the mean squared error of nt over pairs, using the scratch
// buffers xs and out (2 chunk rows each) and yt.
func mse(nt *net, pairs []forward.Pair, xs, out, yt []float64, chunk int) float64 {
	n := nt.n
	var sse float64
	step := 2 * chunk
	for lo := 0; lo < len(pairs); lo += step {
		hi := min(len(pairs), lo+step)
		for i := lo; i < hi; i++ {
			indicator(xs[(i-lo)*n:(i-lo+1)*n], pairs[i].Sources)
		}
		f := out[:(hi-lo)*n]
		nt.forward(nt.worker(0), xs[:(hi-lo)*n], hi-lo, f)
		for i := lo; i < hi; i++ {
			indicator(yt[:n], pairs[i].Infected)
			row := f[(i-lo)*n : (i-lo+1)*n]
			for v, y := range yt[:n] {
				d := row[v] - y
				sse += d * d
			}
		}
	}
	return sse / float64(len(pairs)*n)
}
