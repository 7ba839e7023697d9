// Command sourcewatch-forward-gat is the gat forward-model plugin (a graph
// attention network trained on simulated cascades). sourcewatch launches
// it; run by hand it only explains that.
package main

import (
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/gat"
)

func main() {
	forward.Serve(gat.New())
}
