// Command sourcewatch-forward-icmf is the icmf forward-model plugin (mean-
// field Independent Cascade, no training). sourcewatch launches it; run by
// hand it only explains that.
package main

import (
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/icmf"
)

func main() {
	forward.Serve(icmf.New())
}
