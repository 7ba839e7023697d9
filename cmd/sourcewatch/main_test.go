package main

import (
	"testing"

	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
)

// TestMain removes the plugin binaries the tests build.
func TestMain(m *testing.M) { forwardtest.Main(m) }
