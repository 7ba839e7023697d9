// Command sourcewatch-forward-monstor is the monstor forward-model plugin
// (stacked GCN blocks trained on simulated cascades). sourcewatch launches
// it; run by hand it only explains that.
package main

import (
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/plugins/monstor"
)

func main() {
	forward.Serve(monstor.New())
}
