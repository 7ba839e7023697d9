package diffusion

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/graph"
)

func TestValidate(t *testing.T) {
	g := loadKarate(t)
	weighted := graph.New(3, []graph.Edge{{From: 0, To: 1, W: 0.5}}, nil, false, true)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		g    *graph.Graph
		want string // "" = valid
	}{
		{"default", func(*Config) {}, g, ""},
		{"empty pattern is uniform", func(c *Config) { c.Pattern = "" }, g, ""},
		{"nil graph", func(*Config) {}, nil, "graph has no nodes"},
		{"empty graph", func(*Config) {}, graph.New(0, nil, nil, false, false), "graph has no nodes"},
		{"unknown model", func(c *Config) { c.Model = "SEIR" }, g, `unknown model "SEIR"`},
		{"beta zero", func(c *Config) { c.Beta = 0 }, g, "beta 0 outside (0, 1]"},
		{"beta NaN", func(c *Config) { c.Beta = math.NaN() }, g, "beta NaN"},
		{"SIR gamma", func(c *Config) { c.Model, c.Gamma = SIR, 1.5 }, g, "gamma 1.5 outside [0, 1]"},
		{"SIR gamma zero ok", func(c *Config) { c.Model, c.Gamma = SIR, 0 }, g, ""},
		{"IC p", func(c *Config) { c.Model, c.P = IC, -0.1 }, g, "p -0.1 outside (0, 1]"},
		{"IC weighted ignores p", func(c *Config) { c.Model, c.P, c.Sources = IC, 0, SourceSpec{Count: 1} }, weighted, ""},
		{"SI ignores p", func(c *Config) { c.P = 7 }, g, ""},
		{"LT threshold", func(c *Config) { c.Model, c.Threshold = LT, 1.2 }, g, "threshold 1.2: want at most 1"},
		{"two source forms", func(c *Config) { c.Sources = SourceSpec{Count: 2, Ratio: 0.1} }, g, "exactly one of count, ratio"},
		{"no source form", func(c *Config) { c.Sources = SourceSpec{} }, g, "exactly one of count, ratio"},
		{"count too big", func(c *Config) { c.Sources = SourceSpec{Count: 35} }, g, "count 35 exceeds the graph's 34 nodes"},
		{"negative count", func(c *Config) { c.Sources = SourceSpec{Count: -1} }, g, "count -1 is negative"},
		{"ratio", func(c *Config) { c.Sources = SourceSpec{Ratio: 1.5} }, g, "ratio 1.5 outside (0, 1]"},
		{"range reversed", func(c *Config) { c.Sources = SourceSpec{Min: 5, Max: 2} }, g, "range 5-2 needs 1 <= min <= max"},
		{"range from zero", func(c *Config) { c.Sources = SourceSpec{Max: 2} }, g, "range 0-2"},
		{"range too big", func(c *Config) { c.Sources = SourceSpec{Min: 1, Max: 40} }, g, "range maximum 40 exceeds"},
		{"pattern", func(c *Config) { c.Pattern = "ring" }, g, `unknown source pattern "ring"`},
		{"observe reversed", func(c *Config) { c.ObserveMin, c.ObserveMax = 0.5, 0.2 }, g, "observe range 0.5-0.2"},
		{"observe zero", func(c *Config) { c.ObserveMin = 0 }, g, "observe range 0-0.5"},
		{"observe above one", func(c *Config) { c.ObserveMax = 1.1 }, g, "observe range"},
		{"max steps", func(c *Config) { c.MaxSteps = 0 }, g, "max steps 0"},
		{"max redraws", func(c *Config) { c.MaxRedraws = 0 }, g, "max redraws 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate(tc.g)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseModelAndPattern(t *testing.T) {
	for in, want := range map[string]Model{"si": SI, "SIR": SIR, " ic ": IC, "Lt": LT} {
		m, err := ParseModel(in)
		require.NoError(t, err)
		require.Equal(t, want, m)
	}
	_, err := ParseModel("SIS")
	require.ErrorContains(t, err, `unknown diffusion model "SIS"`)
	for in, want := range map[string]Pattern{"uniform": Uniform, "DEGREE": Degree, "cluster": Cluster, "": Uniform} {
		p, err := ParsePattern(in)
		require.NoError(t, err)
		require.Equal(t, want, p)
	}
	_, err = ParsePattern("hub")
	require.ErrorIs(t, err, ErrConfig)
}

func TestModelUsesWeights(t *testing.T) {
	for _, tc := range []struct {
		m    Model
		want bool
	}{{SI, false}, {SIR, false}, {IC, true}, {LT, true}} {
		t.Run(string(tc.m), func(t *testing.T) {
			require.Equal(t, tc.want, tc.m.UsesWeights())
		})
	}
}

// A Record holds what the model read and nothing else.
func TestRecord(t *testing.T) {
	plain := loadKarate(t)
	weighted := graph.New(3, []graph.Edge{{From: 0, To: 1, W: 0.5}}, nil, false, true)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		g    *graph.Graph
		want string
	}{
		{"SI", func(*Config) {}, plain,
			`{"model":"SI","beta":0.1,"sources":"ratio 0.1","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
		{"SI on weights it does not read", func(*Config) {}, weighted,
			`{"model":"SI","beta":0.1,"sources":"ratio 0.1","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
		{"SIR", func(c *Config) { c.Model, c.Pattern = SIR, Cluster }, plain,
			`{"model":"SIR","beta":0.1,"gamma":0.05,"sources":"ratio 0.1","pattern":"cluster","observe":[0.2,0.5],"max_steps":100000}`},
		{"IC", func(c *Config) { c.Model, c.P = IC, 0.3 }, plain,
			`{"model":"IC","p":0.3,"sources":"ratio 0.1","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
		{"IC weighted: the weights, not p", func(c *Config) { c.Model, c.P = IC, 0.3 }, weighted,
			`{"model":"IC","arc_weights":"activation probability","sources":"ratio 0.1","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
		{"LT", func(c *Config) { c.Model, c.Sources, c.Pattern = LT, SourceSpec{Min: 2, Max: 4}, "" }, plain,
			`{"model":"LT","threshold":"random","sources":"2-4","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
		{"LT weighted, fixed threshold", func(c *Config) { c.Model, c.Threshold = LT, 0.4 }, weighted,
			`{"model":"LT","threshold":"0.4","arc_weights":"influence","sources":"ratio 0.1","pattern":"uniform","observe":[0.2,0.5],"max_steps":100000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			got, err := json.Marshal(c.Record(tc.g))
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
		})
	}
}
