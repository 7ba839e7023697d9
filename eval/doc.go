// Package eval is sourcewatch's honest benchmark: per-cascade metrics, the
// baseline localizers and controls, and the harness behind `sourcewatch eval`.
//
// # Metrics
//
// For one cascade with true source set S (|S| = k), predicted set P and
// per-node scores s:
//
//	precision = |P ∩ S| / |P|          (0 when P is empty, never 1)
//	recall    = |P ∩ S| / |S|
//	F1        = 2 precision recall / (precision + recall)   (0 when both are 0)
//	AUC       = (R_S - k(k+1)/2) / (k (n-k))
//
// where R_S is the sum of the ranks of the true sources when all n nodes are
// ranked by score, tied scores sharing their average rank (Mann-Whitney U).
// AUC is undefined (NaN) when k = 0 or k = n; undefined values are left out
// of the means and counted.
//
// The top-k hit rate is the fraction of S among the k highest scores. Ties
// straddling the k-th place are broken in expectation: if m of the t nodes
// tied at the k-th score are sources and r of those places are inside the
// top k, they contribute r·m/t hits. A method that scores every infected
// node the same therefore gets the hit rate of a random pick among them,
// not a lucky or unlucky one decided by node order.
//
// The error distance is the mean over true sources s of d(P, s), the hop
// count from the nearest predicted source to s with every arc taken both
// ways: on a directed graph, the distance in the spread's footprint,
// ignoring direction (a guess one arc upstream of s is one hop off, as
// one downstream is); on an undirected graph, the plain hop count. When
// no node of P is in s's (weakly connected) component — in particular
// when P is empty — d is replaced by the penalty 1 + ecc(s), where ecc(s)
// is the largest such hop distance from s to any node of its component:
// one more than any guess in the component could cost. Predicting nothing
// is thus always worse than predicting something in s's component, on
// directed graphs too, and the penalty stays finite, so it can be
// averaged. The harness also counts empty predictions.
//
// Aggregates are the mean and the sample standard deviation over all test
// cascades of all runs.
//
// # Methods
//
// A Method is fitted on training and validation cascades and then localizes
// one observation at a time. Every hyper-parameter (alpha, k, a threshold)
// is chosen on the validation cascades only, by the largest mean F1; test
// cascades are never seen before scoring. Methods register themselves by
// name (Register); see the method files for each algorithm and the
// simplifications made:
//
//	lpsi       label propagation, sources = infected local maxima (lpsi.go)
//	netsleuth  Dirichlet-Laplacian eigenvector seeds, k on validation (netsleuth.go)
//	ojc        greedy Jordan cover of the infected subgraph (jordan.go)
//	jordan     Jordan center(s) by eccentricity to the infected set (jordan.go)
//	local-mlp  a per-node classifier (MLP on fixed neighbourhood and
//	           infected-region features) trained on the training cascades:
//	           the learned baseline, in the spirit of the paper's GCNSI
//	           (localmlp.go)
//
// and the controls (controls.go), reference points every table carries:
// infected (the observation itself), degree (infected nodes by degree),
// prior (training source frequency; never reads the observation) and
// random. One control is asked for by name only, since it refuses most
// settings: bayes (bayes.go), the exact posterior marginal P(v in S | y)
// of the SI simulation itself, summed over the subsets of the infected
// nodes, a ceiling on the ROC-AUC any method can expect on small graphs.
// Methods whose answer is a ranking cut at k share one skeleton
// (topk.go) and ChooseK; ChooseThreshold serves score-threshold methods.
//
// netsleuth and ojc need an undirected graph (NeedsUndirected); on a
// directed one Validate names every such method at once, before anything
// is simulated or fitted, and Unsupported lists them so a caller can leave
// them out instead. The other methods run on directed graphs too. The
// SL-VAE methods (slvae.go) find their forward plugin in Config.PluginDir
// unless their own plugin_dir parameter says otherwise.
//
// Everything is sparse: label propagation and eigenvectors use only
// products with the CSR adjacency (NetSleuth solves components of at most
// denseMax nodes densely, never the whole graph), and distances come from
// BFS.
//
// # Harness
//
// Run simulates, splits, fits and scores (see Config), in parallel over
// methods; results do not depend on the number of workers, timings do
// (they are wall-clock while other methods run). The Report prints as a
// table (WriteTable) or JSON (WriteJSON). When a method has a forward
// model (SL-VAE), the report also carries the forward floor
// (diffusion.ForwardFloor on the test sources): the least test error any
// forward model can reach, to read its forward_test_mse against, and the
// same floor given the observed infected count (diffusion.ObservedCounts),
// which tells how much of that error is the unknown observation time.
// Both are reported whenever they were computed, 0 included.
package eval
