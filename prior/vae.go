package prior

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/nn"
)

// Errors of Config.Validate and Fit, wrapped with context.
var (
	// ErrConfig means a Config field is out of range.
	ErrConfig = errors.New("prior: invalid config")
	// ErrSourceSet means a source set names a node outside [0, n).
	ErrSourceSet = errors.New("prior: invalid source set")
	// ErrDiverged means the training loss stopped being finite.
	ErrDiverged = errors.New("prior: training diverged")
)

// Config sizes and trains the VAE.
type Config struct {
	// Hidden is the width of the encoder's and decoder's two hidden layers.
	Hidden int
	// Latent is k, the dimension of z.
	Latent int
	// LearningRate is Adam's step size.
	LearningRate float64
	// Epochs bounds the passes over the training sets.
	Epochs int
	// BatchSize is the number of source sets per Adam step.
	BatchSize int
	// Patience stops training after this many epochs without a better
	// validation loss; 0 never stops early.
	Patience int
	// Seed drives initialisation, shuffling and the reparameterisation noise.
	Seed int64
}

// DefaultConfig returns the sizes and schedule sourcewatch trains with:
// hidden 128, latent 32 (smaller than the paper's, measured to fit as well;
// see the package documentation), Adam at the paper's 2e-3, batches of 32,
// at most 300 epochs with patience 15.
func DefaultConfig() Config {
	return Config{Hidden: 128, Latent: 32, LearningRate: 2e-3, Epochs: 300, BatchSize: 32, Patience: 15, Seed: 1}
}

// PaperConfig returns the paper's sizes (hidden 512, latent 256).
func PaperConfig() Config {
	c := DefaultConfig()
	c.Hidden, c.Latent = 512, 256
	return c
}

// maxWidth bounds Hidden and Latent far above any sensible model, so a typo
// fails validation instead of allocating the machine away.
const maxWidth = 1 << 14

// Validate reports the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Hidden < 1 || c.Hidden > maxWidth:
		return fmt.Errorf("hidden = %d, want 1..%d: %w", c.Hidden, maxWidth, ErrConfig)
	case c.Latent < 1 || c.Latent > maxWidth:
		return fmt.Errorf("latent = %d, want 1..%d: %w", c.Latent, maxWidth, ErrConfig)
	case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
		return fmt.Errorf("learning rate = %v, want > 0: %w", c.LearningRate, ErrConfig)
	case c.Epochs < 1:
		return fmt.Errorf("epochs = %d, want >= 1: %w", c.Epochs, ErrConfig)
	case c.BatchSize < 1:
		return fmt.Errorf("batch size = %d, want >= 1: %w", c.BatchSize, ErrConfig)
	case c.Patience < 0:
		return fmt.Errorf("patience = %d, want >= 0: %w", c.Patience, ErrConfig)
	}
	return nil
}

// VAE is the generative prior p(x) = E_z p(x|z) over source indicators of
// an n-node graph; see the package documentation for the model and loss.
// A VAE is not safe for concurrent use.
type VAE struct {
	n   int
	cfg Config
	err error // invalid config, reported by Fit and MarshalBinary

	enc1 *sparseDense // n -> hidden, ReLU, fed index sets
	enc2 *nn.Dense    // hidden -> hidden, ReLU
	head *nn.Dense    // hidden -> 2k: mu, then log-variance
	dec  *nn.MLP      // k -> hidden -> hidden -> n logits

	params []*nn.Param
	rng    *rand.Rand

	// Batch buffers.
	z, dhead, dl *mat.Dense
}

// NewVAE returns an untrained VAE for n nodes. An invalid cfg is reported
// by Fit and MarshalBinary (call cfg.Validate first to fail earlier); n < 1
// panics.
func NewVAE(n int, cfg Config) *VAE {
	if n < 1 {
		panic(fmt.Sprintf("prior: VAE for %d nodes", n))
	}
	v := &VAE{n: n, cfg: cfg}
	if err := cfg.Validate(); err != nil {
		v.err = err
		return v
	}
	v.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	h, k := cfg.Hidden, cfg.Latent
	v.enc1 = newSparseDense(n, h, v.rng)
	v.enc2 = nn.NewDense(h, h, nn.ReLU, v.rng)
	v.head = nn.NewDense(h, 2*k, nn.Identity, v.rng)
	v.dec = nn.NewMLP([]int{k, h, h, n}, nn.ReLU, nn.Identity, v.rng)
	add := func(prefix string, ps []*nn.Param) {
		for _, p := range ps {
			q := *p
			q.Name = prefix + p.Name
			v.params = append(v.params, &q)
		}
	}
	add("enc1.", v.enc1.params)
	add("enc2.", v.enc2.Params())
	add("head.", v.head.Params())
	add("dec.", v.dec.Params())
	return v
}

// Nodes returns n.
func (v *VAE) Nodes() int { return v.n }

// Config returns the VAE's configuration.
func (v *VAE) Config() Config { return v.cfg }

// Progress reports one finished epoch. ValLoss is 0 without validation sets.
type Progress struct {
	Epoch, Epochs      int
	TrainLoss, ValLoss float64
}

// normalize checks that every set names nodes in [0, n) and returns sorted,
// duplicate-free copies (x is an indicator, so a repeated node is one source).
func normalize(split string, sets [][]int, n int) ([][]int, error) {
	out := make([][]int, len(sets))
	for s, set := range sets {
		c := slices.Clone(set)
		for _, i := range c {
			if i < 0 || i >= n {
				return nil, fmt.Errorf("%s set %d: node %d out of range [0, %d): %w", split, s, i, n, ErrSourceSet)
			}
		}
		slices.Sort(c)
		out[s] = slices.Compact(c)
	}
	return out, nil
}

// Fit trains on the training source sets (node indices), stopping early on
// the validation sets' loss and keeping the parameters of the best epoch.
// The validation loss is the training loss (negative ELBO, one noise draw
// per set) with noise fixed for the whole Fit: z = mu would be a biased
// proxy, since decoding the mean latent is not the mean decoding, and it
// misleads early stopping while the posterior is still close to the prior.
// It returns metrics:
//
//	epochs, best_epoch, train_loss    epochs run, best epoch (1-based), last epoch's mean loss
//	val_loss, val_bce, val_kl         at the best epoch, per set
//	val_bce_initial                   the untrained model's validation BCE
//	val_bce_frequency                 BCE of independent per-node frequencies
//	                                  (Laplace-smoothed on train), the baseline
//	                                  a prior with no structure achieves
//
// The val_* metrics are absent without validation sets. progress, if not
// nil, is called after every epoch. On cancellation, or ErrDiverged when a
// batch loss is not finite, Fit restores the best parameters so far and
// returns the error.
func (v *VAE) Fit(ctx context.Context, train, val [][]int, progress func(Progress)) (map[string]float64, error) {
	if v.err != nil {
		return nil, fmt.Errorf("fit vae: %w", v.err)
	}
	if len(train) == 0 {
		return nil, fmt.Errorf("fit vae: no training sets: %w", ErrSourceSet)
	}
	train, err := normalize("training", train, v.n)
	if err != nil {
		return nil, fmt.Errorf("fit vae: %w", err)
	}
	if val, err = normalize("validation", val, v.n); err != nil {
		return nil, fmt.Errorf("fit vae: %w", err)
	}
	metrics := map[string]float64{}
	valEps := validationNoise(len(val), v.cfg.Latent, v.cfg.Seed)
	if len(val) > 0 {
		bce, _ := v.evaluate(val, valEps)
		metrics["val_bce_initial"] = bce
		metrics["val_bce_frequency"] = frequencyBCE(train, val, v.n)
	}

	opt := nn.NewAdam(v.params, v.cfg.LearningRate)
	best := math.Inf(1)
	var bestParams [][]float64
	save := func() {
		if bestParams == nil {
			bestParams = make([][]float64, len(v.params))
		}
		for i, p := range v.params {
			bestParams[i] = append(bestParams[i][:0], p.Value...)
		}
	}
	restore := func() {
		for i, p := range v.params {
			if bestParams != nil {
				copy(p.Value, bestParams[i])
			}
		}
	}
	order := make([]int, len(train))
	for i := range order {
		order[i] = i
	}
	batch := make([][]int, 0, v.cfg.BatchSize)
	var eps *mat.Dense
	bestEpoch, epoch := 0, 0
	for epoch = 1; epoch <= v.cfg.Epochs; epoch++ {
		v.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var sum float64
		for lo := 0; lo < len(order); lo += v.cfg.BatchSize {
			if err := ctx.Err(); err != nil {
				restore()
				return nil, fmt.Errorf("fit vae: epoch %d: %w", epoch, err)
			}
			batch = batch[:0]
			for _, i := range order[lo:min(lo+v.cfg.BatchSize, len(order))] {
				batch = append(batch, train[i])
			}
			eps = nn.Reuse(eps, len(batch), v.cfg.Latent)
			raw := eps.RawMatrix().Data
			for i := range raw {
				raw[i] = v.rng.NormFloat64()
			}
			nn.ZeroGrad(v.params)
			bce, kl := v.loss(batch, eps, true)
			if math.IsNaN(bce+kl) || math.IsInf(bce+kl, 0) {
				restore()
				return nil, fmt.Errorf("fit vae: epoch %d: loss %v (bce %v, kl %v): %w", epoch, bce+kl, bce, kl, ErrDiverged)
			}
			sum += bce + kl
			opt.Step()
		}
		trainLoss := sum / float64(len(train))
		metrics["train_loss"] = trainLoss
		valLoss := 0.0
		if len(val) > 0 {
			bce, kl := v.evaluate(val, valEps)
			valLoss = bce + kl
			if valLoss < best {
				best, bestEpoch = valLoss, epoch
				metrics["val_loss"], metrics["val_bce"], metrics["val_kl"] = valLoss, bce, kl
				save()
			}
		}
		if progress != nil {
			progress(Progress{Epoch: epoch, Epochs: v.cfg.Epochs, TrainLoss: trainLoss, ValLoss: valLoss})
		}
		if len(val) > 0 && v.cfg.Patience > 0 && epoch-bestEpoch >= v.cfg.Patience {
			break
		}
	}
	metrics["epochs"] = float64(min(epoch, v.cfg.Epochs))
	if len(val) > 0 {
		restore()
		metrics["best_epoch"] = float64(bestEpoch)
	}
	return metrics, nil
}

// evaluate returns the mean BCE and KL per set with the noise eps (rows
// aligned with sets; nil means z = mu).
func (v *VAE) evaluate(sets [][]int, eps *mat.Dense) (bce, kl float64) {
	const chunk = 256
	for lo := 0; lo < len(sets); lo += chunk {
		hi := min(lo+chunk, len(sets))
		var e *mat.Dense
		if eps != nil {
			e = eps.Slice(lo, hi, 0, v.cfg.Latent).(*mat.Dense)
		}
		b, k := v.loss(sets[lo:hi], e, false)
		bce += b
		kl += k
	}
	return bce / float64(len(sets)), kl / float64(len(sets))
}

// validationNoise is the noise of the validation loss, fixed for a Fit so
// that epochs are compared on common random numbers.
func validationNoise(sets, k int, seed int64) *mat.Dense {
	if sets == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7a1))
	eps := mat.NewDense(sets, k, nil)
	raw := eps.RawMatrix().Data
	for i := range raw {
		raw[i] = rng.NormFloat64()
	}
	return eps
}

// frequencyBCE is the validation BCE of the independent prior
// p_i = (count_i + 1) / (T + 2) estimated on the training sets.
func frequencyBCE(train, val [][]int, n int) float64 {
	count := make([]float64, n)
	for _, s := range train {
		for _, i := range s {
			count[i]++
		}
	}
	var base float64 // sum_i -log(1 - p_i): every node absent
	logit := make([]float64, n)
	for i, c := range count {
		p := (c + 1) / float64(len(train)+2)
		logit[i] = math.Log(p) - math.Log1p(-p)
		base -= math.Log1p(-p)
	}
	var total float64
	for _, s := range val {
		total += base
		for _, i := range s {
			total -= logit[i]
		}
	}
	return total / float64(len(val))
}

// loss runs the batch through the VAE and returns the summed BCE and KL.
// eps (len(sets) x k) is the reparameterisation noise; nil means z = mu.
// With backward it also accumulates the gradients of (BCE + KL) / B into
// the parameters.
func (v *VAE) loss(sets [][]int, eps *mat.Dense, backward bool) (bce, kl float64) {
	bsz, k := len(sets), v.cfg.Latent
	inv := 1 / float64(bsz)
	out := v.head.Forward(v.enc2.Forward(v.enc1.forward(sets)))
	v.z = nn.Reuse(v.z, bsz, k)
	for r := range bsz {
		o, z := out.RawRowView(r), v.z.RawRowView(r)
		mu, lv := o[:k], o[k:]
		for j := range k {
			z[j] = mu[j]
			if eps != nil {
				z[j] += math.Exp(lv[j]/2) * eps.At(r, j)
			}
			kl -= 0.5 * (1 + lv[j] - mu[j]*mu[j] - math.Exp(lv[j]))
		}
	}
	logits := v.dec.Forward(v.z)
	if backward {
		v.dl = nn.Reuse(v.dl, bsz, v.n)
	}
	for r, set := range sets {
		l := logits.RawRowView(r)
		var g []float64
		if backward {
			g = v.dl.RawRowView(r)
		}
		// softplus(x) = max(x, 0) + log1p(e) and sigmoid(x) share
		// e = exp(-|x|), the one transcendental per node worth saving.
		for i, x := range l {
			e := math.Exp(-math.Abs(x))
			if x > 0 {
				bce += x + math.Log1p(e)
				if g != nil {
					g[i] = inv / (1 + e)
				}
			} else {
				bce += math.Log1p(e)
				if g != nil {
					g[i] = inv * e / (1 + e)
				}
			}
		}
		for _, i := range set {
			bce -= l[i]
			if g != nil {
				g[i] -= inv
			}
		}
	}
	if !backward {
		return bce, kl
	}
	gz := v.dec.Backward(v.dl)
	v.dhead = nn.Reuse(v.dhead, bsz, 2*k)
	for r := range bsz {
		o, g, d := out.RawRowView(r), gz.RawRowView(r), v.dhead.RawRowView(r)
		mu, lv := o[:k], o[k:]
		for j := range k {
			d[j] = g[j] + mu[j]*inv
			d[k+j] = 0.5 * (math.Exp(lv[j]) - 1) * inv
			if eps != nil {
				d[k+j] += g[j] * eps.At(r, j) * 0.5 * math.Exp(lv[j]/2)
			}
		}
	}
	v.enc1.backward(v.enc2.Backward(v.head.Backward(v.dhead)))
	return bce, kl
}

// encode returns mu and the log-variance (len(sets) x k each) of q(z|x).
func (v *VAE) encode(sets [][]int) (mu, lv *mat.Dense) {
	k := v.cfg.Latent
	mu, lv = mat.NewDense(len(sets), k, nil), mat.NewDense(len(sets), k, nil)
	const chunk = 256
	for lo := 0; lo < len(sets); lo += chunk {
		hi := min(lo+chunk, len(sets))
		out := v.head.Forward(v.enc2.Forward(v.enc1.forward(sets[lo:hi])))
		mu.Slice(lo, hi, 0, k).(*mat.Dense).Copy(out.Slice(0, hi-lo, 0, k))
		lv.Slice(lo, hi, 0, k).(*mat.Dense).Copy(out.Slice(0, hi-lo, k, 2*k))
	}
	return mu, lv
}

// Terms precomputes the prior terms of inference (see Terms) from
// maxPrototypes prototypes (DefaultPrototypes if <= 0): z_j is drawn from
// q(z|x_j) for training sets x_j taken in a random order, cycling when
// there are fewer sets than prototypes; z_bar is the mean of mu over all
// training sets. Without training sets the prototypes come from the prior
// N(0, I) and z_bar = 0. rng draws the order and the noise (nil: seeded
// from the config). Sets are not validated here beyond range: indices
// outside [0, n) panic, since Fit has already rejected them.
func (v *VAE) Terms(train [][]int, maxPrototypes int, rng *rand.Rand) *Terms {
	if v.err != nil {
		panic(fmt.Sprintf("prior: Terms of a VAE with an invalid config: %v", v.err))
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(uint64(v.cfg.Seed), 0x7e4a5))
	}
	train, err := normalize("training", train, v.n)
	if err != nil {
		panic(fmt.Sprintf("prior: %v", err))
	}
	protos := maxPrototypes
	if protos <= 0 {
		protos = DefaultPrototypes
	}
	z, zbar := v.latents(train, protos, rng)
	return v.termsAt(z, zbar)
}

// latents draws the prototypes' latents (protos x k) and the mean latent
// (1 x k) for Terms.
func (v *VAE) latents(train [][]int, protos int, rng *rand.Rand) (z, zbar *mat.Dense) {
	k := v.cfg.Latent
	z = mat.NewDense(protos, k, nil)
	zbar = mat.NewDense(1, k, nil)
	if len(train) == 0 {
		raw := z.RawMatrix().Data
		for i := range raw {
			raw[i] = rng.NormFloat64()
		}
		return z, zbar
	}
	mu, lv := v.encode(train)
	for r := range len(train) {
		for j := range k {
			zbar.Set(0, j, zbar.At(0, j)+mu.At(r, j)/float64(len(train)))
		}
	}
	var order []int
	for j := range protos {
		if j%len(train) == 0 {
			order = rng.Perm(len(train))
		}
		s := order[j%len(train)]
		for c := range k {
			z.Set(j, c, mu.At(s, c)+math.Exp(lv.At(s, c)/2)*rng.NormFloat64())
		}
	}
	return z, zbar
}

// termsAt decodes the prototypes z to the decoder's last hidden layer and
// zbar to logits, and copies the output layer, so later training does not
// change the terms.
func (v *VAE) termsAt(z, zbar *mat.Dense) *Terms {
	protos, k := z.Dims()
	last := v.dec.Layers[len(v.dec.Layers)-1]
	hidden := v.dec.Layers[:len(v.dec.Layers)-1]
	h := mat.NewDense(protos, v.cfg.Hidden, nil)
	const chunk = 256
	for lo := 0; lo < protos; lo += chunk {
		hi := min(lo+chunk, protos)
		y := z.Slice(lo, hi, 0, k).(*mat.Dense)
		for _, l := range hidden {
			y = l.Forward(y)
		}
		h.Slice(lo, hi, 0, v.cfg.Hidden).(*mat.Dense).Copy(y)
	}
	bar := slices.Clone(v.dec.Forward(zbar).RawRowView(0))
	return newTerms(h, mat.DenseCopyOf(last.W), slices.Clone(last.B), bar)
}

const vaeMagic, vaeVersion = "SWVA", 1

// MarshalBinary encodes n, the config and the parameters with a format
// version and a CRC-32.
func (v *VAE) MarshalBinary() ([]byte, error) {
	if v.err != nil {
		return nil, fmt.Errorf("marshal vae: %w", v.err)
	}
	w := newWriter(vaeMagic, vaeVersion)
	w.u64(uint64(v.n))
	c := v.cfg
	w.u64(uint64(c.Hidden))
	w.u64(uint64(c.Latent))
	w.f64(c.LearningRate)
	w.u64(uint64(c.Epochs))
	w.u64(uint64(c.BatchSize))
	w.u64(uint64(c.Patience))
	w.i64(c.Seed)
	var buf bytes.Buffer
	if err := nn.WriteParams(&buf, v.params); err != nil {
		return nil, fmt.Errorf("marshal vae: %w", err)
	}
	w.bytes(buf.Bytes())
	return w.finish(), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote, checking magic,
// version, checksum, config and the parameters' names and shapes.
func (v *VAE) UnmarshalBinary(data []byte) error {
	r, err := newReader("vae", data, vaeMagic, vaeVersion)
	if err != nil {
		return err
	}
	n, c, ps := readVAEHeader(r)
	if err := r.done(); err != nil {
		return err
	}
	if err := checkVAEHeader(n, c, ps); err != nil {
		return err
	}
	nv := NewVAE(n, c)
	pr := bytes.NewReader(ps)
	if err := nn.ReadParams(pr, nv.params); err != nil {
		return fmt.Errorf("vae: %w", err)
	}
	if pr.Len() != 0 {
		return fmt.Errorf("vae: parameters: %d trailing bytes: %w", pr.Len(), ErrFormat)
	}
	*v = *nv
	return nil
}

// ReadVAEHeader checks an encoding as UnmarshalBinary does (magic,
// version, checksum, header, the parameters' length) and returns its node
// count and configuration without decoding the parameters: for a reader
// that needs the VAE's sizes but not the network, which at n nodes and
// hidden width h takes about 32·n·h bytes decoded (weights and gradients).
// It does not check that every parameter is finite; UnmarshalBinary does.
func ReadVAEHeader(data []byte) (nodes int, cfg Config, err error) {
	r, err := newReader("vae", data, vaeMagic, vaeVersion)
	if err != nil {
		return 0, Config{}, err
	}
	n, c, ps := readVAEHeader(r)
	if err := r.done(); err != nil {
		return 0, Config{}, err
	}
	if err := checkVAEHeader(n, c, ps); err != nil {
		return 0, Config{}, err
	}
	return n, c, nil
}

// readVAEHeader reads the header and the parameter bytes of an encoding.
func readVAEHeader(r *reader) (n int, c Config, ps []byte) {
	n = r.size("nodes", 1, maxDim)
	c.Hidden = r.size("hidden", 1, maxWidth)
	c.Latent = r.size("latent", 1, maxWidth)
	c.LearningRate = r.f64("learning rate")
	c.Epochs = r.size("epochs", 1, math.MaxInt32)
	c.BatchSize = r.size("batch size", 1, math.MaxInt32)
	c.Patience = r.size("patience", 0, math.MaxInt32)
	c.Seed = r.i64("seed")
	ps = r.bytes("parameters")
	return n, c, ps
}

// checkVAEHeader checks a decoded header against its parameter bytes.
func checkVAEHeader(n int, c Config, ps []byte) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("vae: %w", err)
	}
	// NewVAE allocates (twice, with the gradients) and initialises every
	// parameter, so the stream must be able to hold them before it is
	// called: a header alone cannot ask for gigabytes.
	if count := paramCount(n, c.Hidden, c.Latent); uint64(len(ps)) < 8*count {
		return fmt.Errorf("vae: parameters: %d bytes cannot hold the %d values of %d nodes, hidden %d, latent %d: %w",
			len(ps), count, n, c.Hidden, c.Latent, ErrFormat)
	}
	return nil
}

// paramCount returns the number of parameter values of a VAE for n nodes
// with the given hidden and latent widths (see NewVAE):
//
//	enc1 n·h + h, enc2 h·h + h, head h·2k + 2k,
//	dec  k·h + h, h·h + h, h·n + n.
//
// With n <= maxDim = 2^24 and h, k <= maxWidth = 2^14, as UnmarshalBinary
// checks, the count is below 2^41 and 8 times it does not overflow.
func paramCount(n, h, k int) uint64 {
	un, uh, uk := uint64(n), uint64(h), uint64(k)
	return 2*un*uh + 2*uh*uh + 3*uh*uk + 4*uh + 2*uk + un
}
