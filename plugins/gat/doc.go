// Package gat is a graph attention network forward model for sourcewatch:
// it maps source indicators x in [0,1]^n to per-node infection
// probabilities y and implements forward.Model in-process. The binary
// cmd/sourcewatch-forward-gat serves it as a plugin.
//
// Node v's input row is
//
//	h0_v = [x_v, slog(u1_v), ..., slog(uK_v), log(1 + indeg_v)]
//
// with u_k = (A + I) u_{k-1}, u_0 = x (A holds the arc weights, 1 when the
// graph is unweighted, so u_k counts sources within k hops) and
// slog(u) = sign(u) log(1 + |u|). Node v aggregates over S(v) = In(v) ∪ {v},
// since infection travels along arcs u -> v. Two GAT layers follow
// (Veličković et al., 2018), each with a linear skip connection past the
// attention, as in that paper's inductive model:
//
//	[z, z'] = h0 W1 + b1                      (z: heads x dim per node)
//	e_vu = LeakyReLU_0.2(a_dst_k . z_vk + a_src_k . z_uk),  u in S(v)
//	α_vu = softmax_{u in S(v)} e_vu
//	h1_v = ELU(concat_k sum_u α_vu z_uk + z'_v)
//	[t, t'] = h1 W2 + b2                      (two scalars per node)
//	o_v = sum_u β_vu t_u + t'_v               (one head, attention β as above)
//	s_v = sigmoid(o_v)
//	y_v = 1 - (1 - x_v)(1 - s_v)
//
// so sources are always infected. Everything is sparse: a layer costs
// O((n + E) heads dim) per row of the batch, and rows of x (restarts) are
// one batch. VJP is a hand-written backward pass through the same graph.
//
// Fit minimises mean squared error plus the monotonicity penalty
// λ ||max(0, f(x_sub) - f(x))||^2 / (B n) with Adam on mini-batches and
// early stopping on validation MSE; the state blob holds the architecture,
// the graph fingerprint and the weights, and Configure refuses (with
// forward.ErrBadState) a state made for another graph.
package gat
