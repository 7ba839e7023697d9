package localize_test

import (
	"bytes"
	"context"
	"fmt"
	"log"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
	"github.com/sourcewatch/sourcewatch/prior"
)

// ExampleSolve trains a tiny bundle in process with the icmf forward
// model (no plugin process, no files), reads it back as a bundle file
// would be read, and localizes one observation with the options the
// bundle was validated with. A real bundle comes from `sourcewatch train`
// and a real forward model from LaunchForward (see ExampleLaunchForward);
// icmf.Model satisfies Forward in process as the plugin does out of it.
//
// The sources it names depend on floating-point descent, so the example
// prints what does not: one score per node, and the schedule the bundle
// recorded.
func ExampleSolve() {
	ctx := context.Background()
	g, err := graph.Load("../configs/demo/karate.edges")
	if err != nil {
		log.Fatal(err)
	}

	// 40 simulated SI cascades, one source each, as (sources, infected).
	sim := diffusion.DefaultConfig()
	sim.Beta = 0.25
	sim.Sources = diffusion.SourceSpec{Min: 1, Max: 1}
	cs, _, err := diffusion.Simulate(ctx, g, sim, 40, 3, diffusion.Workers(1))
	if err != nil {
		log.Fatal(err)
	}
	pairs := make([]forward.Pair, len(cs))
	for i, c := range cs {
		pairs[i] = forward.Pair{Sources: c.Sources, Infected: c.Infected}
	}

	fm := icmf.New()
	if err := fm.Configure(ctx, g, nil, nil); err != nil {
		log.Fatal(err)
	}
	pc := prior.DefaultConfig()
	pc.Hidden, pc.Latent, pc.Epochs = 16, 4, 3
	// Train's zero Variant is the paper's Full; `sourcewatch train`
	// records DataInit unless told otherwise, so say which.
	solve := localize.DefaultOptions()
	solve.Variant, solve.Restarts = localize.DataInit, 4
	trained, err := localize.Train(ctx, g, fm, pairs[:30], pairs[30:], localize.TrainConfig{
		Forward: localize.ForwardRef{Name: icmf.Name, Version: icmf.Version},
		Prior:   pc, Prototypes: 16, Solve: solve, ValidationSolves: 4, Seed: 5,
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	var file bytes.Buffer
	if err := trained.Write(&file); err != nil {
		log.Fatal(err)
	}
	b, err := localize.ReadBundle(bytes.NewReader(file.Bytes()), int64(file.Len()), localize.WithoutVAE())
	if err != nil {
		log.Fatal(err)
	}

	// The observation: 1 for every node seen infected.
	y := make([]float64, b.Graph.N())
	for _, v := range cs[35].Infected {
		y[v] = 1
	}
	// Start from the bundle's options, not a zero Options: delta was
	// chosen with them.
	opts := b.Options()
	res, err := localize.Solve(ctx, b, fm, y, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(res.Scores), "scores, schedule", opts.Variant)
	fmt.Println("named some sources:", len(res.Sources) > 0)
	// Output:
	// 34 scores, schedule datainit
	// named some sources: true
}

// ExampleLaunchForward is the whole of localizing with a trained bundle:
// load it (`sourcewatch demo` writes this one), launch its forward plugin
// (built by make build into bin/, and checked against the SHA-256 the
// bundle recorded), and Solve. It needs a bundle file and the plugin
// binary, so it is compiled, not run.
func ExampleLaunchForward() {
	ctx := context.Background()
	// nil: the bundle's own copy of its graph. Pass the graph you hold to
	// have it checked against the bundle's (ErrGraphMismatch).
	b, err := localize.LoadBundle("data/demo/karate.swb", nil, localize.WithoutVAE())
	if err != nil {
		log.Fatal(err)
	}
	f, err := localize.LaunchForward(ctx, b, localize.LaunchOptions{PluginDir: "bin"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	infected, err := b.Graph.Lookup([]string{"3", "5", "17"}) // graph.ErrUnknownNode for an id the graph lacks
	if err != nil {
		log.Fatal(err)
	}
	y := make([]float64, b.Graph.N())
	for _, v := range infected {
		y[v] = 1
	}
	opts := b.Options()
	opts.Restarts = 16 // change fields of the bundle's options; see the package doc
	res, err := localize.Solve(ctx, b, f, y, opts)
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range res.Sources {
		fmt.Println(b.Graph.ID(v), res.Scores[v], res.Probability[v])
	}
}
