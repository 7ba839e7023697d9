package deepis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/nn"
)

// minImprovement is the relative drop of the validation MSE that counts
// as progress for early stopping: most of what the model learns arrives
// in the first few epochs, and smaller gains do not repay an epoch.
const minImprovement = 1e-3

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

// minUninfectedSourceShare is the share of the training pairs' sources
// observed uninfected from which gate=auto gives the net its source gate.
// Under SI it is 0; under SIR it is the recovered sources' share (tens of
// percent). A source or two lost from an otherwise SI-like record should
// not change the model, hence not "any".
const minUninfectedSourceShare = 0.01

// uninfectedSourceShare is the share of the pairs' sources that their
// observation calls uninfected.
func uninfectedSourceShare(pairs []forward.Pair) float64 {
	var sources, uninfected int
	infected := map[int]bool{}
	for _, p := range pairs {
		clear(infected)
		for _, v := range p.Infected {
			infected[v] = true
		}
		for _, s := range p.Sources {
			sources++
			if !infected[s] {
				uninfected++
			}
		}
	}
	if sources == 0 {
		return 0
	}
	return float64(uninfected) / float64(sources)
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
	// No batch is larger than the data; the cap also keeps a huge
	// BatchSize from the wire from sizing the per-batch buffers.
	batch := min(orDefault(opts.BatchSize, DefaultBatchSize), max(len(pairs), 1))
	epochs := opts.Epochs
	if epochs <= 0 {
		epochs = defaultEpochs(len(pairs), batch)
	}
	lr, lambda := opts.LearningRate, opts.Lambda
	if math.IsNaN(lr) || math.IsInf(lr, 0) || math.IsNaN(lambda) || math.IsInf(lambda, 0) {
		return forward.FitResult{}, fmt.Errorf("deepis: fit: learning rate %g and lambda %g: want finite values", lr, lambda)
	}
	if lr <= 0 {
		lr = DefaultLearningRate
	}
	if lambda <= 0 {
		lambda = DefaultLambda
	}
	if progress == nil {
		progress = func(forward.Progress) {}
	}

	a := m.cfg.arch
	a.Gate = m.cfg.gate == gateOn || (m.cfg.gate == gateAuto && uninfectedSourceShare(pairs) >= minUninfectedSourceShare)
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0xdee915))
	nt := newNet(m.g, a, rng)
	adam := nn.NewAdam(nt.params, lr)
	tr := newTrainer(nt, m.workers, m.minCells)
	order := make([]int, len(pairs))
	for i := range order {
		order[i] = i
	}
	subs := make([][]int, batch)

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
			// Subsets are drawn here, in order, so the random stream does
			// not depend on how the batch is split over workers.
			for i := lo; i < hi; i++ {
				subs[i-lo] = dropSome(pairs[order[i]].Sources, rng)
			}
			sse += tr.step(pairs, order[lo:hi], subs[:hi-lo], lambda)
			adam.Step()
		}
		trainMSE := sse / float64(len(pairs)*n)
		val := math.NaN()
		if len(opts.Validation) > 0 {
			val = tr.mse(opts.Validation)
		}
		progress(forward.Progress{Epoch: epoch, Epochs: epochs, TrainLoss: trainMSE, ValLoss: val})
		if len(opts.Validation) == 0 {
			continue
		}
		if val < best*(1-minImprovement) {
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
		"train_mse":  tr.mse(pairs),
		"epochs":     float64(epoch),
		"edge_scale": math.Exp(nt.logScale.Value[0]),
	}
	if nt.Gate {
		metrics["source_gate"] = nt.rho()
	}
	if len(opts.Validation) > 0 {
		metrics["val_mse"] = best
		metrics["best_epoch"] = float64(bestEpoch)
	}
	state, err := encodeState(m.g, nt)
	if err != nil {
		return forward.FitResult{}, err
	}
	m.nt, m.fitted, m.cfg.arch = nt, true, a
	return forward.FitResult{State: state, Metrics: metrics}, nil
}

// defaultEpochs is the epoch budget of a fit given none: DefaultEpochs,
// or more where the pairs are too few for those to make DefaultMinSteps
// Adam steps. The budget is a cap, early stopping on the validation pairs
// ends a fit that stops improving; but with few pairs (a few dozen
// recorded cascades) 20 epochs are a few dozen steps, too few for the
// learned edge scale, moving by Adam's steps on its log, to correct a
// poor p: on a graph of hubs, 90 pairs fitted in 20 epochs ended 60-70%
// above the forward floor, in 60 within 6% of it.
func defaultEpochs(pairs, batch int) int {
	perEpoch := (pairs + batch - 1) / batch
	return max(DefaultEpochs, (DefaultMinSteps+perEpoch-1)/perEpoch)
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

// fitParts is how many parts a training pass splits its pairs into
// (fewer when the work is small), whatever the number of workers: each
// part sums its pairs' gradient in order and the parts are added in
// order, so a fit comes out the same to the last bit on any machine.
// Split by the workers instead, a Jazz bundle's forward state differed
// in its last bits between GOMAXPROCS 1 and 2, and validation's choices
// made on it (delta, n_opt, the ranking) moved the eval tables' Jazz
// SL-VAE row by up to 0.003. Two is the split the tables were measured
// with on this project's 2-core machine, so they reproduce anywhere; it
// caps a fit at two goroutines, where Predict and VJP use up to eight.
const fitParts = 2

// trainer runs training passes of one net in up to fitParts parts, over
// at most workers goroutines. Part p owns worker p's gradients and
// scratch[p]; nothing else is shared but the read-only weights.
type trainer struct {
	nt       *net
	workers  int
	minCells int
	chunk    int // pairs per pass: 2*chunk rows (x and x_sub)
	scratch  []*scratch
}

type scratch struct {
	xs, yt, dy, out []float64
	sse, gScale     float64
}

func newTrainer(nt *net, workers, minCells int) *trainer {
	tr := &trainer{nt: nt, workers: max(1, workers), minCells: max(1, minCells), chunk: max(1, nt.chunkRows()/2)}
	cells := 2 * tr.chunk * nt.n
	for p := 0; p < fitParts; p++ {
		nt.worker(p)
		tr.scratch = append(tr.scratch, &scratch{
			xs: make([]float64, cells), yt: make([]float64, cells/2),
			dy: make([]float64, cells), out: make([]float64, cells),
		})
	}
	return tr
}

// parallel splits items pairs into up to fitParts parts (fewer when the
// work is small) and runs part(p, lo, hi) for each, on a goroutine each
// unless there is one worker. The split never depends on the workers.
func (tr *trainer) parallel(items int, part func(p, lo, hi int)) int {
	parts := max(1, min(fitParts, items, 2*items*tr.nt.n/tr.minCells))
	if tr.workers == 1 {
		for p := 0; p < parts; p++ {
			part(p, p*items/parts, (p+1)*items/parts)
		}
		return parts
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			part(p, p*items/parts, (p+1)*items/parts)
		}(p)
	}
	wg.Wait()
	return parts
}

// step accumulates into the net's gradients the gradient of
//
//	Σ_batch [ Σ_v (f(x)_v - y_v)² + λ Σ_v max(0, f(x_sub)_v - f(x)_v)² ] / (|batch| n)
//
// and returns the batch's summed squared error.
func (tr *trainer) step(pairs []forward.Pair, idx []int, subs [][]int, lambda float64) float64 {
	nt, n := tr.nt, tr.nt.n
	scale := 1 / float64(len(idx)*n)
	for p := range tr.scratch {
		nn.ZeroGrad(nt.workers[p].mlp.Params())
		tr.scratch[p].sse, tr.scratch[p].gScale = 0, 0
		nt.workers[p].gSrc = 0
	}
	nt.logScale.Grad[0] = 0
	if nt.srcLogit != nil {
		nt.srcLogit.Grad[0] = 0
	}
	parts := tr.parallel(len(idx), func(p, lo, hi int) {
		w, sc := nt.workers[p], tr.scratch[p]
		for c := lo; c < hi; c += tr.chunk {
			k := min(hi, c+tr.chunk) - c
			for i := 0; i < k; i++ {
				pr := pairs[idx[c+i]]
				indicator(sc.xs[i*n:(i+1)*n], pr.Sources)
				indicator(sc.xs[(k+i)*n:(k+i+1)*n], subs[c+i])
				indicator(sc.yt[i*n:(i+1)*n], pr.Infected)
			}
			f, dy := sc.out[:2*k*n], sc.dy[:2*k*n]
			nt.forward(w, sc.xs[:2*k*n], 2*k, f)
			for i := 0; i < k*n; i++ {
				d := f[i] - sc.yt[i]
				sc.sse += d * d
				dy[i] = 2 * d * scale
				dy[k*n+i] = 0
				if v := f[k*n+i] - f[i]; v > 0 {
					g := 2 * lambda * v * scale
					dy[i] -= g
					dy[k*n+i] = g
				}
			}
			sc.gScale += nt.backward(w, dy, nil)
		}
	})
	main := nt.mlp.Params()
	var sse float64
	for p := 0; p < parts; p++ {
		sse += tr.scratch[p].sse
		nt.logScale.Grad[0] += tr.scratch[p].gScale
		if nt.srcLogit != nil {
			nt.srcLogit.Grad[0] += nt.workers[p].gSrc
		}
		if p == 0 {
			continue // worker 0 runs on nt.mlp itself
		}
		for k, q := range nt.workers[p].mlp.Params() {
			for i, g := range q.Grad {
				main[k].Grad[i] += g
			}
		}
	}
	return sse
}

// mse is the mean squared error of the net over pairs.
func (tr *trainer) mse(pairs []forward.Pair) float64 {
	nt, n := tr.nt, tr.nt.n
	step := 2 * tr.chunk
	sums := make([]float64, fitParts)
	tr.parallel(len(pairs), func(p, lo, hi int) {
		w, sc := nt.workers[p], tr.scratch[p]
		for c := lo; c < hi; c += step {
			e := min(hi, c+step)
			for i := c; i < e; i++ {
				indicator(sc.xs[(i-c)*n:(i-c+1)*n], pairs[i].Sources)
			}
			f := sc.out[:(e-c)*n]
			nt.forward(w, sc.xs[:(e-c)*n], e-c, f)
			for i := c; i < e; i++ {
				indicator(sc.yt[:n], pairs[i].Infected)
				row := f[(i-c)*n : (i-c+1)*n]
				for v, y := range sc.yt[:n] {
					d := row[v] - y
					sums[p] += d * d
				}
			}
		}
	})
	var sse float64
	for _, s := range sums {
		sse += s
	}
	return sse / float64(len(pairs)*n)
}
