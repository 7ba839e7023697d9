// Package gnntest holds the test fixtures the gnn forward models share:
// small random graphs, SI cascades to train on, the finite-difference
// check of the training loss gradient (gnn.Trainer) and the measure of
// what a network's buffers hold per node and row (RowFloats), which each
// model's CacheFloats is checked against, and the Suite of tests every
// such model must pass, each model's test file giving its own
// architectures and parameters.
package gnntest
