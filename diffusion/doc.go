// Package diffusion simulates spreads on a graph.Graph — SI, SIR,
// Independent Cascade and Linear Threshold — from sampled source sets, and
// observes each cascade once, as a binary snapshot taken when the infected
// fraction first reaches a target. Simulations are seeded and reproducible.
package diffusion
