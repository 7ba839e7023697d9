// Command sourcewatch-forward-deepis is the deepis forward-model plugin, the
// default forward model of SL-VAE (a learned initial infection probability
// followed by differentiable mean-field propagation). sourcewatch launches
// it; run by hand it only explains that.
package main

import (
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/deepis"
)

func main() {
	forward.Serve(deepis.New())
}
