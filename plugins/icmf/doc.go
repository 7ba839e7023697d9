// Package icmf is a mean-field Independent Cascade forward model that needs
// no training: with w_uv the infection probability of arc u->v (the edge
// weight on a weighted graph, the parameter p otherwise),
//
//	y^0     = x
//	y^{t+1} = 1 - (1 - x) ⊙ prod_{u->v} (1 - w_uv y^t_u)   (per node v)
//	f(x)    = y^T                                            (T = steps)
//
// The product is kept as the product of the non-zero factors and the
// count of zero ones (w_uv y_u = 1: an arc of probability 1 from a node
// infected for sure), so the vector-Jacobian product, the hand-written
// reverse pass through the T steps, is exact there too: the derivative
// through a zero factor is -w_uv times the others. It shows that a forward plugin need not be learned, and is the
// cheap real plugin of the tests. Built as sourcewatch-forward-icmf.
package icmf
