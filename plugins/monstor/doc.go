// Package monstor is a MONSTOR-style forward model for sourcewatch (Ko et
// al., 2020): stacked GCN blocks, each refining the previous block's
// infection estimate. It implements forward.Model in-process; the binary
// cmd/sourcewatch-forward-monstor serves it as a plugin.
//
// With the normalised propagation matrix Â = D_in^-1/2 (A + I) D_out^-1/2
// (Kipf and Welling's D^-1/2 (A + I) D^-1/2 on an undirected graph;
// infection travels along arcs u -> v, so row v gathers over In(v) ∪ {v}),
// block s = 1..S computes, from p_0 = x,
//
//	h0_v = [x_v, p_{s-1,v}, log(1 + indeg_v)]
//	h1   = LeakyReLU([Â h0, h0] W1 + b1)
//	q_s  = sigmoid(Â h1 w2 + h1 w_self + b2)
//	p_s  = 1 - (1 - x)(1 - q_s)
//
// and y = p_S, so sources are always infected and every block sees two more
// hops than the one before (S = 3 reaches six). Each layer also weighs the
// node's own features apart from the propagated ones (a root weight, as in
// GraphSAGE, which MONSTOR stacks): Â mixes a node with neighbours at
// weight 1/sqrt(d_v d_u), and learning to separate them again is slow. Propagation is sparse,
// O((n + E) width) per row of the batch; rows of x (restarts) are one
// batch. VJP is a hand-written backward pass through the blocks.
//
// Fit minimises mean squared error plus the monotonicity penalty
// λ ||max(0, f(x_sub) - f(x))||^2 / (B n) with Adam on mini-batches and
// early stopping on validation MSE; the state blob holds the architecture,
// the graph fingerprint and the weights, and Configure refuses (with
// forward.ErrBadState) a state made for another graph.
package monstor
