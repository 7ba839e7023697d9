package monstor

import (
	"testing"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

func TestMain(m *testing.M) { forwardtest.Main(m) }

// The real plugin binary must compute exactly what the package does.
func TestThroughPluginProcess(t *testing.T) {
	suite.CheckThroughPluginProcess(t, map[string]string{"hidden": "16"})
}

// BenchmarkVJP times one VJP of a batch of 8 (the default restarts),
// in-process and through the plugin process, on the shared graphs.
func BenchmarkVJP(b *testing.B) { suite.BenchmarkVJP(b) }

// The shipped plugin passes the contract's conformance checks (what
// `sourcewatch plugin check` runs).
func TestConformance(t *testing.T) { suite.CheckConformance(t) }
