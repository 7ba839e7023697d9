// Package diffusion simulates spreads on a graph.Graph — SI, SIR,
// Independent Cascade and Linear Threshold — from sampled source sets, and
// observes each cascade once, as a binary snapshot taken when the infected
// fraction first reaches a target. Simulations are seeded and reproducible.
//
// Time is discrete; the sources are infected at step 0 and spread along
// out-arcs (every arc both ways on an undirected graph). In step t:
//
//   - SI: a susceptible node with k infected in-neighbours is infected with
//     probability 1 - (1-beta)^k.
//   - SIR: as SI, counting only infectious in-neighbours; then every node
//     infectious at the start of the step recovers with probability gamma.
//     Recovered nodes are 0 in the observation.
//   - IC: each node infected in step t-1 gets one chance per out-arc,
//     succeeding with probability p (the arc weight on a weighted graph).
//   - LT: node v turns once sum_{u infected} b_uv >= theta_v, with
//     b_uv = 1/in-degree(v) (the arc weight on a weighted graph) and theta_v
//     ~ U[0,1] per node per cascade, or fixed; only nodes with an infected
//     in-neighbour are candidates.
//
// Nodes infected in step t spread from step t+1. Sources are placed
// uniformly, proportionally to degree, or as a BFS ball around a random
// centre (Pattern). Simulate derives each cascade's random stream from
// (seed, cascade index), so its output does not depend on the number of
// workers.
package diffusion
