// Package deepis is sourcewatch's default forward model, in the style of
// DeepIS (Xia et al., 2021) as used by SL-VAE: a learned per-node initial
// infection probability followed by a few differentiable steps of
// mean-field Independent Cascade propagation.
//
// Let P0 be the fixed edge infection-probability matrix (the graph's edge
// weights when it is weighted, else the parameter p on every edge; p
// defaults to 1/mean in-degree, so one infected node infects about one
// neighbour per step). For a source vector x in [0,1]^n:
//
//	features    φ_v = [x_v, (P0^T x)_v, ((P0^T)^2 x)_v, ..., ((P0^T)^H x)_v, log(1 + indeg_v)]
//	initial     q_v = MLP(φ_v)                      (shared MLP, sigmoid output)
//	seed        y⁰_v = 1 - (1 - x_v)(1 - q_v)        (so f(x) >= x)
//	propagate   yᵗ_v = 1 - (1 - yᵗ⁻¹_v) · Π_{u->v} (1 - P_uv yᵗ⁻¹_u),   t = 1..T
//	output      f(x) = y^T
//
// with H = hops and T = steps. The propagation matrix P = min(1, s P0)
// carries one learned scale s = exp(a) (a starts at 0), so training can
// correct the assumed infection probability. Each factor 1 - P_uv y_u is
// clamped below at 1e-12; the product is formed directly, which equals
// exp(Σ log(1 - P_uv y_u)) and cannot overflow, and at worst underflows to
// 0 exactly where y saturates at 1.
//
// Fit minimises, over mini-batches of (x, y) pairs,
//
//	mean (f(x) - y)² + λ mean max(0, f(x_sub) - f(x))²
//
// where x_sub drops each source of x with probability 1/2 (at least one),
// the monotonicity penalty of SL-VAE; Adam; early stopping on the
// validation pairs. VJP back-propagates by hand through the propagation
// steps, the MLP and the feature hops.
//
// A batch is held node-major (cell v·rows + b), so the restarts of one node
// are contiguous and every pass over the arcs is a gather of short blocks;
// with one P for every arc (an unweighted graph) the backward passes gather
// over out-arcs too (see kernel.go).
//
// The state blob is versioned and holds the architecture, the graph's
// fingerprint and the parameters (nn.WriteParams), so a state made for
// another graph is rejected with forward.ErrBadState.
package deepis
