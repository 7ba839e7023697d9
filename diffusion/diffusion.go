package diffusion

// This file fixes the package's public types; the simulators live beside it.

// Model names a diffusion process.
type Model string

// The diffusion processes sourcewatch simulates.
const (
	SI  Model = "SI"
	SIR Model = "SIR"
	IC  Model = "IC"
	LT  Model = "LT"
)

// Pattern names how sources are drawn.
type Pattern string

// Source patterns. Uniform is the default; Degree and Cluster give a learned
// prior over sources something to learn.
const (
	Uniform Pattern = "uniform"
	Degree  Pattern = "degree"
	Cluster Pattern = "cluster"
)

// Cascade is one simulated (or recorded) spread, observed once.
type Cascade struct {
	// Sources are the indices of the seed nodes, sorted.
	Sources []int
	// Infected are the indices of the nodes infected at the snapshot
	// (y_v = 1), sorted. Recovered nodes are not infected.
	Infected []int
	// Times holds, per node, the step at which it became infected (0 for
	// sources), or -1 if it was not infected by the snapshot. Nil when the
	// cascade was read without times.
	Times []int
	// Recovered holds, per node, the step at which it recovered, or -1;
	// nil unless the model has recovery (SIR).
	Recovered []int
	// Step is the step at which the snapshot was taken.
	Step int
	// N is the number of nodes of the graph the cascade lives on; X and Y
	// return vectors of this length.
	N int
	// Line is the line of the file ReadJSONL read the cascade from, so a
	// warning about it can name it; 0 for a simulated cascade.
	Line int
}
