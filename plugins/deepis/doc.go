// Package deepis is sourcewatch's default forward model, in the style of
// DeepIS (Xia et al., 2021) as used by SL-VAE: a learned per-node initial
// infection probability followed by a few differentiable steps of
// mean-field Independent Cascade propagation.
//
// Let P0 be the fixed edge infection-probability matrix (the graph's edge
// weights when it is weighted, else the parameter p on every edge; p
// defaults to 1/mean in-degree, so one infected node infects about one
// neighbour per step, at most 0.5: at P = 1 a graph with fewer arcs than
// nodes saturates and nothing learns). For a source vector x in [0,1]^n:
//
//	features    φ_v = [x_v, (P0^T x)_v, ((P0^T)^2 x)_v, ..., ((P0^T)^H x)_v, log(1 + indeg_v)]
//	initial     q_v = MLP(φ_v)                      (shared MLP, sigmoid output)
//	seed        y⁰_v = 1 - (1 - x_v)(1 - q_v)        (so y⁰ >= x)
//	propagate   yᵗ_v = 1 - (1 - yᵗ⁻¹_v) · Π_{u->v} (1 - P_uv yᵗ⁻¹_u),   t = 1..T
//	output      f(x) = y^T, or with the source gate f(x)_v = y^T_v (1 - ρ x_v)
//
// with H = hops and T = steps. Without the gate f(x) >= x: a source is
// always observed infected, as under SI. Under SIR a source that has
// recovered is 0 in the observation, which such a model cannot express
// (each such training pair costs squared error 1 at the source, and the
// descent of inference can never name a recovered source). The gate ρ =
// sigmoid(b), b learned from -4 (ρ = 0.018), is the chance that a source
// is observed uninfected. The param gate=auto (the default) gives the net
// the gate when at least 1% of the training pairs' sources are observed
// uninfected, so SI data fit exactly as without it: a gate fitted on SI
// pairs shuts, yet its pull on x at the sources (-ρ y^T in the gradient)
// held inference's descent short of the truth on clustered sources. The
// propagation matrix P = min(1, s P0)
// carries one learned scale s = exp(a) (a starts at 0), so training can
// correct the assumed infection probability. Each factor 1 - P_uv y_u is
// clamped below at 1e-12 (reached only where P_uv = 1 and y_u = 1: the
// gradient there is the one-sided one from inside [0, 1], as if unclamped,
// which is what inference, moving x inward from a corner, sees); the
// product is formed directly, which equals
// exp(Σ log(1 - P_uv y_u)) and cannot overflow, and at worst underflows to
// 0 exactly where y saturates at 1.
//
// Fit minimises, over mini-batches of (x, y) pairs,
//
//	mean (f(x) - y)² + λ mean max(0, f(x_sub) - f(x))²
//
// where x_sub drops each source of x with probability 1/2 (at least one),
// the monotonicity penalty of SL-VAE; Adam; early stopping on the
// validation pairs, within 20 epochs by default, or as many as make 120
// Adam steps where the pairs are few. VJP back-propagates by hand through the propagation
// steps, the MLP and the feature hops.
//
// A batch is held node-major (cell v·rows + b), so the restarts of one node
// are contiguous and every pass over the arcs is a gather of short blocks;
// with one P for every arc (an unweighted graph) the backward passes gather
// over out-arcs too (see kernel.go).
//
// The state blob is versioned and holds the architecture, the graph's
// fingerprint and the parameters (nn.WriteParams), so a state made for
// another graph is rejected with forward.ErrBadState. Version 2 added the
// gate's flag; a version 1 state reads as a net without the gate.
package deepis
