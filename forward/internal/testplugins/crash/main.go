// Command crash is a test plugin: icmf with the faulty.Crash fault.
package main

import (
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/internal/testplugins/faulty"
)

func main() { forward.Serve(faulty.New(faulty.Crash)) }
