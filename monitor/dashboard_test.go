package monitor

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// TestDashboard serves the page of a running daemon before and after an
// alert: it names the graph, its readiness and, once there is one, the
// alert's status and ranked sources.
func TestDashboard(t *testing.T) {
	now := time.Now()
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 2
	f := &factoryOf{}
	r := start(t, cfg, preload(t, 6, "p"), WithLocalizerFactory(f.factory))
	sink := subscribeAlerts(t, r.nc, "p")
	base := "http://" + r.d.HTTPAddr()

	code, body := get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<a href="#g-p">p</a>`)
	require.Contains(t, body, `<span class="ok">ready</span>`)
	require.Contains(t, body, `<span class="muted">none</span>`, "no alert yet")

	for node := 3; node <= 4; node++ {
		r.publish(t, "p", Event{Node: strconv.Itoa(node), State: StateInfected, TS: now}, "")
	}
	require.Equal(t, alerts.Firing, sink.wait(t, 1)[0].Status)
	require.Eventually(t, func() bool {
		_, body = get(t, base+"/")
		return bytes.Contains([]byte(body), []byte(`<h2 id="g-p">p: <span class="firing">firing</span>`))
	}, 10*time.Second, 10*time.Millisecond, body)
	require.Contains(t, body, "2 infected")
	require.Contains(t, body, `<tr><td class="num">1</td><td>3</td>`, "the top-ranked source")

	// A failed reload and a replay show.
	r.d.lastReload.Store(&ReloadStatus{At: now, Error: "reload failed: graphs[0]: name, edges and directed need a restart"})
	r.d.graphs["p"].replayFrom.Store(time.Now().UnixNano()) // not past replayLimit
	r.d.graphs["p"].replayTo.Store(1 << 40)
	_, body = get(t, base+"/")
	require.Contains(t, body, `<span class="bad">last reload failed</span>`)
	require.Contains(t, body, "name, edges and directed need a restart")
	require.Contains(t, body, `<span class="bad">replaying</span>`)
	r.d.graphs["p"].replayTo.Store(0)

	code, _ = get(t, base+"/nothing-here")
	require.Equal(t, http.StatusNotFound, code, "only / itself is the dashboard")
}

// TestDashboardEscapes renders values that come from outside the daemon
// (node ids from edge files and events, error texts): they appear as text,
// never as markup.
func TestDashboardEscapes(t *testing.T) {
	evil := `<script>alert(1)</script>`
	a := &alerts.Alert{Graph: "g", Status: alerts.Firing, Sources: []alerts.Source{{Node: evil, Score: 1, Probability: 1}}, CredibleSet: []string{evil}}
	var buf bytes.Buffer
	require.NoError(t, dashboardTmpl.Execute(&buf, dashboardData{
		Status:   Status{Graphs: []GraphStatus{{Name: "g", LastError: evil, LastAlert: a}}},
		Problems: []string{evil},
		Now:      time.Now(),
		MaxShown: dashboardSources,
	}))
	require.NotContains(t, buf.String(), evil)
	require.Contains(t, buf.String(), "&lt;script&gt;alert(1)&lt;/script&gt;")

	// A long ranking is cut at dashboardSources rows.
	for i := range 2 * dashboardSources {
		a.Sources = append(a.Sources, alerts.Source{Node: "n" + strconv.Itoa(i)})
	}
	buf.Reset()
	require.NoError(t, dashboardTmpl.Execute(&buf, dashboardData{
		Status: Status{Graphs: []GraphStatus{{Name: "g", LastAlert: a}}}, Now: time.Now(), MaxShown: dashboardSources,
	}))
	require.Equal(t, dashboardSources, bytes.Count(buf.Bytes(), []byte("<tr><td class=\"num\">")), "one row per shown source")
}
