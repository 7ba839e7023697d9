// Package nn is the small neural toolkit sourcewatch's learned models share:
// a batched dense layer, activations, a multi-layer perceptron, the Adam
// optimiser, parameter (de)serialisation and a finite-difference gradient
// checker.
//
// Batches are row-major gonum matrices with one example per row, so a
// mini-batch through a layer is one matrix product:
//
//	Z = X W + 1 b^T,   Y = act(Z)
//
// with X batch x in, W in x out, b of length out. Backward, given
// G = dL/dY, accumulates
//
//	dZ = G ⊙ act'(Z),   dL/dW += X^T dZ,   dL/db += dZ^T 1
//
// and returns dL/dX = dZ W^T.
//
// Layers own their output and gradient buffers and reuse them from call to
// call: a matrix returned by Forward or Backward is valid until the next
// call of the same method on the same layer. Forward keeps a reference to
// its input for Backward, so the input must not change in between.
//
// Shape errors are programming errors and panic with an "nn:" prefix;
// corrupt parameter streams are input errors and are returned.
package nn
