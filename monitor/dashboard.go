package monitor

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

//go:embed dashboard.html
var dashboardHTML string

// dashboardTmpl renders the page at / of the HTTP address. html/template
// escapes every value, node ids and error texts included, which come from
// files and events the daemon does not control.
var dashboardTmpl = template.Must(template.New("dashboard").Funcs(template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"add": func(a, b int) int { return a + b },
	// chance prints an optional chance or sum, "-" when absent.
	"chance": func(format string, p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf(format, *p)
	},
}).Parse(dashboardHTML))

// dashboardSources is how many ranked sources of a graph's last alert the
// page lists.
const dashboardSources = 10

// dashboardData is what the page shows: the status of every graph, the
// readiness problems and the time of rendering.
type dashboardData struct {
	Status    Status
	Problems  []string
	Now       time.Time
	MaxShown  int
	Refresh   int
	Endpoints []string
	// StandingBy is whether this replica stands by, and for nothing else
	// (say, cut off from NATS): the page says so as a state, not a
	// failure.
	StandingBy bool
}

// serveDashboard renders the operator's page: the same facts as /status
// and /readyz, readable in a browser and refreshed every few seconds.
func (d *Daemon) serveDashboard(w http.ResponseWriter, _ *http.Request) {
	data := dashboardData{
		Status:    d.Status(),
		Problems:  d.readiness(),
		Now:       d.now(),
		MaxShown:  dashboardSources,
		Refresh:   5,
		Endpoints: []string{"/status", "/readyz", "/metrics", "/healthz"},
	}
	data.StandingBy = d.standby.Load() != nil && len(data.Problems) == 1
	var buf bytes.Buffer
	if err := dashboardTmpl.Execute(&buf, data); err != nil {
		http.Error(w, "rendering the dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}
