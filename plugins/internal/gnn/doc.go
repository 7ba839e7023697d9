// Package gnn holds what the graph neural network forward models of
// sourcewatch (plugins/gat, plugins/monstor) share: the forward.Model
// plumbing around a network (Configure, Predict, VJP with row chunking),
// the training loop Fit with its monotonicity penalty
//
//	L = mean (f(x) - y)^2 + λ mean max(0, f(x_sub) - f(x))^2
//
// and the versioned state blob
//
//	"sourcewatch-forward-<name>\n" | uint32 LE header length | header JSON | parameters
//
// A model package supplies only its network (a Network), its architecture
// (an Arch) and a Spec naming its parameters and training defaults.
package gnn
