package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

// floorMethod is the infected control under a name of the form an SL-VAE
// expansion has ("base[plugin]"), so the harness computes the forward
// floor for it without a plugin process.
type floorMethod struct{ infectedMethod }

func (m *floorMethod) Name() string { return "test-floor[fake]" }

func init() {
	Register("test-floor[fake]", func(Env) (Method, error) { return &floorMethod{}, nil })
}

// The forward floor is reported whenever it was computed, 0 included: on
// two nodes with one source, observed at one infected node, every
// snapshot is its source set, and the floor is exactly 0. Without a
// forward model it is absent.
func TestForwardFloorReportedWhenZero(t *testing.T) {
	g := graph.New(2, []graph.Edge{{From: 0, To: 1}}, nil, false, false)
	for _, tc := range []struct {
		name     string
		methods  []string
		computed bool
	}{
		{"zero floor shown", []string{"test-floor[fake]", "infected"}, true},
		{"no forward model, no floor", []string{"infected"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Cascades, cfg.Runs, cfg.Methods = 5, 1, tc.methods
			cfg.Sim.Sources.Ratio, cfg.Sim.Sources.Count = 0, 1
			cfg.Sim.ObserveMin, cfg.Sim.ObserveMax = 0.5, 0.5
			rep, err := Run(context.Background(), g, cfg)
			require.NoError(t, err)

			var js, table bytes.Buffer
			require.NoError(t, rep.WriteJSON(&js))
			require.NoError(t, rep.WriteTable(&table))
			var doc map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
			if !tc.computed {
				require.Nil(t, rep.ForwardFloorMSE)
				require.Nil(t, rep.ForwardFloorAtCountMSE)
				require.NotContains(t, doc, "forward_floor_mse")
				require.NotContains(t, doc, "forward_floor_at_count_mse")
				require.NotContains(t, table.String(), "forward_floor")
				return
			}
			require.NotNil(t, rep.ForwardFloorMSE)
			require.NotNil(t, rep.ForwardFloorAtCountMSE)
			require.Zero(t, *rep.ForwardFloorMSE)
			require.Zero(t, *rep.ForwardFloorAtCountMSE)
			require.JSONEq(t, "0", string(doc["forward_floor_mse"]))
			require.JSONEq(t, "0", string(doc["forward_floor_at_count_mse"]))
			require.Contains(t, table.String(), "forward_floor_mse = 0: ")
			require.Contains(t, table.String(), "forward_floor_at_count_mse = 0: ")

			var back Report
			require.NoError(t, json.Unmarshal(js.Bytes(), &back))
			require.NotNil(t, back.ForwardFloorMSE, "0 survives a round trip")
		})
	}
}
