// Package gnntest holds the test fixtures the gnn forward models share:
// small random graphs, SI cascades to train on, and the finite-difference
// check of the training loss gradient (gnn.Trainer).
package gnntest
