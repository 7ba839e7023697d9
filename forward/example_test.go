package forward_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

// A forward-model plugin is a binary named sourcewatch-forward-<name>
// whose main hands its Model to Serve; sourcewatch launches it from its
// plugin directory (make build puts the shipped ones in bin/). This is
// the whole of cmd/sourcewatch-forward-icmf. Serve does not return until
// the host stops the plugin, so the example is compiled, not run.
func ExampleServe() {
	forward.Serve(icmf.New())
}

// wrongVJP is a model whose VJP is off by a factor of 2: its Predict is
// right, so it runs, and inference would descend along the wrong
// gradient without an error anywhere.
type wrongVJP struct{ *icmf.Model }

func (m wrongVJP) VJP(ctx context.Context, x, dy *mat.Dense) (*mat.Dense, *mat.Dense, error) {
	y, dx, err := m.Model.VJP(ctx, x, dy)
	if err == nil {
		dx.Scale(2, dx)
	}
	return y, dx, err
}

// CheckVJP compares a model's VJP with finite differences of its own
// Predict, in process here; `sourcewatch plugin check` runs the same
// check through a plugin process. Write a model's VJP by hand, then
// check it this way before training with it.
func ExampleCheckVJP() {
	ctx := context.Background()
	g, err := graph.Read(strings.NewReader("a b\nb c\nc d\nd a\na c\n"), "square.edges")
	if err != nil {
		log.Fatal(err)
	}
	m := icmf.New()
	if err := m.Configure(ctx, g, map[string]string{"p": "0.3"}, nil); err != nil {
		log.Fatal(err)
	}
	for _, model := range []forward.Model{m, wrongVJP{m}} {
		rng := rand.New(rand.NewPCG(1, 2)) // the points and directions checked
		check, err := forward.CheckVJP(ctx, model, g.N(), rng, forward.VJPCheckOptions{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("pass:", check.Pass(), "coordinates checked:", check.Checked)
	}
	// Output:
	// pass: true coordinates checked: 12
	// pass: false coordinates checked: 12
}
