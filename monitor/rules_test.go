package monitor

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// metricFamilies scrapes a daemon's /metrics and returns each family's
// name with the value of its unlabelled sample (0 for a labelled family).
func metricFamilies(t *testing.T, d *Daemon) map[string]float64 {
	t.Helper()
	code, body := get(t, "http://"+d.HTTPAddr()+"/metrics")
	require.Equal(t, 200, code)
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out[strings.Fields(rest)[0]] = 0
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		if _, seen := out[name]; seen {
			v, err := strconv.ParseFloat(val, 64)
			require.NoError(t, err, line)
			out[name] = v
		}
	}
	return out
}

// The shipped Prometheus rules name only metrics the daemon exports, and
// the README's table documents every sourcewatch metric it exports, so
// neither drifts from the code.
func TestAlertRulesAndREADMEMatchTheMetrics(t *testing.T) {
	r := start(t, testConfig(t, "p"), preload(t, 5, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	families := metricFamilies(t, r.d)
	require.Equal(t, 1.0, families["sourcewatch_active"], "started without HA, it does the work")
	require.Equal(t, 1.0, families["sourcewatch_ready"])

	raw, err := os.ReadFile("../configs/prometheus/sourcewatch-rules.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr, For    string
				Labels, Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	require.NotEmpty(t, file.Groups)
	named := regexp.MustCompile(`\bsourcewatch_[a-z_]+`)
	seen := map[string]bool{}
	for _, g := range file.Groups {
		require.NotEmpty(t, g.Rules, g.Name)
		for _, rule := range g.Rules {
			require.NotEmpty(t, rule.Alert)
			require.False(t, seen[rule.Alert], "alert %s named twice", rule.Alert)
			seen[rule.Alert] = true
			require.Contains(t, []string{"critical", "warning", "info"}, rule.Labels["severity"], rule.Alert)
			require.NotEmpty(t, rule.Annotations["summary"], rule.Alert)
			require.NotEmpty(t, rule.Annotations["description"], rule.Alert)
			for _, m := range named.FindAllString(rule.Expr, -1) {
				family := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(m, suffix); ok {
						if _, hist := families[f]; hist {
							family = f
						}
					}
				}
				_, ok := families[family]
				require.True(t, ok, "alert %s: %s is not a metric the daemon exports", rule.Alert, m)
			}
		}
	}

	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for name := range families {
		if strings.HasPrefix(name, "sourcewatch_") {
			require.True(t, strings.Contains(string(readme), "| `"+name+"`"), "README's metrics table lacks %s", name)
		}
	}
}

// With many graphs, the daemon-wide dead-letter ratio hides one graph whose
// producer sends nothing but bad events behind the others' traffic: a rule
// compares each graph's dead letters with its own events.
func TestDeadLetterRuleIsPerGraph(t *testing.T) {
	raw, err := os.ReadFile("../configs/prometheus/sourcewatch-rules.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	found := false
	for _, g := range file.Groups {
		for _, rule := range g.Rules {
			if !strings.Contains(rule.Expr, `sourcewatch_events_total{outcome="deadletter"}`) {
				continue
			}
			found = true
			require.Equal(t, 2, strings.Count(rule.Expr, "by (job, instance, graph)"), "%s: both sides per graph", rule.Alert)
			require.Contains(t, rule.Annotations["summary"], "{{ $labels.graph }}", rule.Alert)
		}
	}
	require.True(t, found, "no rule reads a graph's dead letters")
}
