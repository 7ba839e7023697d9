package eval

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
	"github.com/sourcewatch/sourcewatch/forward"
	"github.com/sourcewatch/sourcewatch/forward/forwardtest"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/localize"
)

// TestMain removes the plugin binaries the tests build.
func TestMain(m *testing.M) { forwardtest.Main(m) }

// karateICMF returns the demo's Karate graph, count SI cascades on it
// (beta 0.25, seed 3) with their simulation, and the directory of a built
// icmf plugin: a cheap real setting for SL-VAE's tests.
func karateICMF(t *testing.T, count int) (*graph.Graph, diffusion.Config, []diffusion.Cascade, string) {
	t.Helper()
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	sim := diffusion.DefaultConfig()
	sim.Beta = 0.25
	cs, _, err := diffusion.Simulate(t.Context(), g, sim, count, 3, diffusion.Workers(1))
	require.NoError(t, err)
	return g, sim, cs, filepath.Dir(forwardtest.Build(t, "icmf"))
}

// slvae solves the test cascades with the schedule its bundle chose: where
// validation dropped the prior (prior=auto), without it. A prior weighted
// a thousand times over drowns the data, so validation drops it here.
func TestSLVAESolvesWithTheBundlesSchedule(t *testing.T) {
	g, _, cs, pluginDir := karateICMF(t, 40)
	for _, tc := range []struct {
		prior string
		want  localize.Variant
	}{{"auto", localize.NoPrior}, {"on", localize.DataInit}} {
		t.Run(tc.prior, func(t *testing.T) {
			m, err := newSLVAE(Env{Graph: g, Seed: 5, Diffusion: json.RawMessage(`{"simulated":{"model":"SI"}}`), Params: map[string]string{
				"forward": "icmf", "plugin_dir": pluginDir, "prior_epochs": "3", "prototypes": "32",
				"val_solves": "8", "restarts": "4", "prior_weight_scale": "1000", "prior": tc.prior,
			}}, "slvae", localize.DataInit)
			require.NoError(t, err)
			require.NoError(t, m.Fit(t.Context(), g, cs[:24], cs[24:32]))
			defer m.Close()
			require.Equal(t, tc.want, m.bundle.Manifest.Solve.Variant)
			require.Equal(t, tc.want, m.solve.Variant, "Localize solves as the bundle says")
			require.Equal(t, boolFloat(tc.want == localize.NoPrior), m.extras["prior_off"])
			// The run's provenance reaches the bundle, which reads from it
			// that nothing recovers: the floor is on (ranking infected
			// first, as SI data choose).
			require.JSONEq(t, `{"simulated":{"model":"SI"}}`, string(m.bundle.Manifest.Diffusion))
			require.Equal(t, boolFloat(m.bundle.Manifest.Ranking != localize.RankByScore), m.extras["components_named"])
			_, err = m.Localize(t.Context(), cs[32].Y(nil))
			require.NoError(t, err)
		})
	}
}

// chance=on fits the source chance as train does, on fresh cascades of the
// run's simulation where there is one and on the validation cascades
// where the cascades are recorded, and Diagnose scores it on the test
// cascades; off, the default, leaves it out.
func TestSLVAEChanceDiagnostics(t *testing.T) {
	g, sim, cs, pluginDir := karateICMF(t, 44)
	for _, tc := range []struct {
		name       string
		chance     string
		simulation *diffusion.Config
		fittedOn   string
	}{
		{"fresh cascades", "on", &sim, "chance_fresh_cascades"},
		{"recorded cascades", "on", nil, "chance_validation_cascades"},
		{"off", "off", &sim, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newSLVAE(Env{Graph: g, Seed: 5, Simulation: tc.simulation, Diffusion: json.RawMessage(`{"simulated":{"model":"SI"}}`), Params: map[string]string{
				"forward": "icmf", "plugin_dir": pluginDir, "prior_epochs": "3", "prototypes": "32",
				"val_solves": "6", "restarts": "4", "chance": tc.chance,
			}}, "slvae", localize.DataInit)
			require.NoError(t, err)
			require.NoError(t, m.Fit(t.Context(), g, cs[:24], cs[24:32]))
			defer m.Close()
			test := cs[32:]
			for _, c := range test {
				_, err := m.Localize(t.Context(), c.Y(nil))
				require.NoError(t, err)
			}
			d, err := m.Diagnose(t.Context(), test)
			require.NoError(t, err)
			if tc.fittedOn == "" {
				require.Nil(t, m.bundle.Manifest.SourceChance)
				require.NotContains(t, d, "chance_brier")
				return
			}
			require.NotNil(t, m.bundle.Manifest.SourceChance)
			require.Equal(t, 6.0, d[tc.fittedOn], "as many cascades as the validation solves")
			var want ChanceScore
			for i, c := range test {
				want.Add(m.chances[i], c.Sources)
			}
			require.InDelta(t, want.Brier(), d["chance_brier"], 1e-12)
			require.InDelta(t, want.ECE(), d["chance_ece"], 1e-12)
			for _, k := range []string{"chance_brier", "chance_ece", "probability_brier", "probability_ece"} {
				require.True(t, d[k] >= 0 && d[k] <= 1, "%s = %g", k, d[k])
			}
			var truth float64
			for _, c := range test {
				truth += float64(len(c.Sources))
			}
			require.InDelta(t, truth/float64(len(test)), d["true_sources"], 1e-12)
			require.Greater(t, d["chance_expected_sources"], 0.0)
		})
	}
}

func TestSLVAEChanceParam(t *testing.T) {
	_, err := newSLVAE(Env{Params: map[string]string{"chance": "yes"}}, "slvae", localize.DataInit)
	require.ErrorIs(t, err, ErrBadParam)
	require.ErrorContains(t, err, `slvae.chance="yes": want on or off`)
}

// call_timeout takes a duration, from the method's own param or else from
// Config.CallTimeout, and refuses anything else.
func TestSLVAECallTimeout(t *testing.T) {
	m, err := newSLVAE(Env{Params: map[string]string{"call_timeout": "90s"}}, "slvae", localize.DataInit)
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, m.callTimeout)
	for _, bad := range []string{"soon", "-1s", "10"} {
		_, err := newSLVAE(Env{Params: map[string]string{"call_timeout": bad}}, "slvae", localize.DataInit)
		require.ErrorIs(t, err, ErrBadParam, bad)
		require.ErrorContains(t, err, "slvae.call_timeout=")
	}
	cfg := Config{CallTimeout: time.Minute, Params: map[string]string{"slvae-paper.call_timeout": "2m"}}
	require.Equal(t, "1m0s", cfg.paramsFor("slvae")["call_timeout"])
	require.Equal(t, "2m", cfg.paramsFor("slvae-paper")["call_timeout"], "a method's own param wins")
	require.NotContains(t, cfg.paramsFor("lpsi"), "call_timeout", "only methods with a forward model")
}

// What a faulty plugin's Fit would slip past is refused by eval's SL-VAE
// fit as by train's: a forward.<k> param the plugin's Info does not list,
// before the plugin fits (a lenient plugin, faulty's fault=lenient, would
// ignore it without a word), and a Fit metric name a bundle cannot keep
// (both checks are localize.Train's or shared with train).
func TestSLVAEFitRefusesWhatTrainRefuses(t *testing.T) {
	g, err := graph.Load("../configs/demo/karate.edges")
	require.NoError(t, err)
	cs, _, err := diffusion.Simulate(t.Context(), g, diffusion.DefaultConfig(), 20, 3, diffusion.Workers(1))
	require.NoError(t, err)
	faulty := forwardtest.Build(t, "./forward/internal/testplugins/faulty")
	for _, tc := range []struct {
		name   string
		params map[string]string
		is     error
		want   string
	}{
		{"a param the plugin does not list", map[string]string{"forward.fault": "lenient", "forward.stesp": "3"}, ErrBadParam,
			"bad method parameter slvae.forward.stesp: forward plugin faulty has no such param (its params: steps, p, fault, fault_after)"},
		{"a metric name a bundle cannot keep", map[string]string{"forward.fault": "metricname"}, forward.ErrBadOutput,
			`metric name "val\nmse": want a name that is not empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := map[string]string{
				"forward": "faulty", "plugin_dir": filepath.Dir(faulty),
				"prior_epochs": "2", "prototypes": "8", "val_solves": "4", "restarts": "2", "opt_steps": "5",
			}
			maps.Copy(params, tc.params)
			m, err := newSLVAE(Env{Graph: g, Seed: 5, Params: params}, "slvae", localize.DataInit)
			require.NoError(t, err)
			defer m.Close()
			err = m.Fit(t.Context(), g, cs[:12], cs[12:16])
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
