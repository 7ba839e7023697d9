package diffusion_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/graph"
)

func ExampleSimulate() {
	g, err := graph.Load("testdata/karate.edges")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := diffusion.DefaultConfig()
	cfg.Model, cfg.Beta, cfg.Gamma = diffusion.SIR, 0.3, 0.1
	cfg.Sources = diffusion.SourceSpec{Min: 1, Max: 3}
	cs, rep, err := diffusion.Simulate(context.Background(), g, cfg, 100, 42)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Cascades, "cascades")
	for _, c := range cs {
		if k := len(c.Infected); k < 7 || k > 34 {
			fmt.Println("snapshot outside 20-100%:", k)
		}
	}
	// The first cascade as training pair (x, y) and as a JSON line.
	x, y := cs[0].X(nil), cs[0].Y(nil)
	fmt.Println(len(x), len(y))
	_ = diffusion.WriteJSONL(os.Stdout, g, cs[:0])
	// Output:
	// 100 cascades
	// 34 34
}
