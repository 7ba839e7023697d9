// Package icmf is a mean-field Independent Cascade forward model that needs
// no training: with w_uv the infection probability of arc u->v (the edge
// weight on a weighted graph, the parameter p otherwise),
//
//	y^0     = x
//	y^{t+1} = 1 - (1 - x) ⊙ prod_{u->v} (1 - w_uv y^t_u)   (per node v)
//	f(x)    = y^T                                            (T = steps)
//
// The product is computed in log space as exp(sum_u log1p(-w_uv y_u)), and
// the vector-Jacobian product is the hand-written reverse pass through the
// T steps. It shows that a forward plugin need not be learned, and is the
// cheap real plugin of the tests. Built as sourcewatch-forward-icmf.
package icmf
