package monitor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
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
	require.NotContains(t, buf.String(), "sources expected", "a model without the chance")

	// The chance of each source and the sources expected, where the
	// model measures them.
	c, sum := 0.375, 2.25
	withChance := &alerts.Alert{Graph: "g", Status: alerts.Firing, Infected: 5, ExpectedSources: &sum,
		Sources: []alerts.Source{{Node: "a", Score: 0.5, Probability: 1, Chance: &c}, {Node: "b", Score: 0.25, Probability: 0.5}}}
	buf.Reset()
	require.NoError(t, dashboardTmpl.Execute(&buf, dashboardData{
		Status: Status{Graphs: []GraphStatus{{Name: "g", LastAlert: withChance}}}, Now: time.Now(), MaxShown: dashboardSources,
	}))
	require.Contains(t, buf.String(), "5 infected; 2.2 sources expected;")
	require.Contains(t, buf.String(), `<td class="num">1.000</td><td class="num">0.375</td></tr>`)
	require.Contains(t, buf.String(), `<td class="num">0.500</td><td class="num">-</td></tr>`)
}

// Connections cannot take every file descriptor: at maxHTTPConns a new
// one waits for a slot. Nor can clients that connect and send nothing
// starve a health probe: past newConnGrace the one silent longest is
// closed to make room (before, the probe waited for the server's header
// timeout, 4.5 s with 256 such connections).
func TestHTTPConnectionsAreBounded(t *testing.T) {
	cfg := testConfig(t, "p")
	r := start(t, cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	addr := r.d.HTTPAddr()
	silent := dialAll(t, addr, maxHTTPConns)
	limit := r.d.httpConns.Load()
	require.Eventually(t, func() bool { return limit.openConns() == maxHTTPConns }, 10*time.Second, time.Millisecond)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	reply, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Contains(t, string(reply), "200 OK", "served at the bound")
	require.LessOrEqual(t, limit.openConns(), maxHTTPConns)
	// The one silent longest was closed for it, not the others (which
	// the server's header timeout closes in 5 s anyway).
	require.NoError(t, silent[0].SetReadDeadline(time.Now().Add(time.Second)))
	_, err = silent[0].Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the connection silent longest was closed")
	last := silent[len(silent)-1]
	require.NoError(t, last.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = last.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the newest stays open")
}

// Keep-alive connections between requests do not starve a health probe
// at the bound: the one idle longest is closed to make room, the others
// stay.
func TestIdleHTTPConnectionsMakeRoom(t *testing.T) {
	cfg := testConfig(t, "p")
	r := start(t, cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	addr := r.d.HTTPAddr()
	require.Zero(t, r.d.httpConns.Load().openConns(), "no connection but the test's")
	type kept struct {
		net.Conn
		rd *bufio.Reader
	}
	var idle []kept
	for _, c := range dialAll(t, addr, maxHTTPConns) {
		k := kept{c, bufio.NewReader(c)}
		idle = append(idle, k)
		_, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		resp, err := http.ReadResponse(k.rd, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// The server sends the response before it marks the connection
		// idle: the next one could go idle first.
		want := len(idle)
		require.Eventually(t, func() bool { return r.d.httpConns.Load().idleConns() == want }, 10*time.Second, time.Millisecond)
	}

	probe, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer probe.Close()
	_, err = probe.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, probe.SetReadDeadline(time.Now().Add(10*time.Second)))
	reply, err := io.ReadAll(probe)
	require.NoError(t, err)
	require.Contains(t, string(reply), "200 OK", "served at the bound")

	require.NoError(t, idle[0].SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = idle[0].rd.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection idle longest was closed")
	// The others still answer.
	for _, k := range []kept{idle[1], idle[maxHTTPConns-1]} {
		_, err = k.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		require.NoError(t, k.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(k.rd, nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
}

// A state store that refuses the periodic snapshot (a full disk, no file
// descriptors left: the embedded server does not recover by itself) makes
// the daemon unready, naming it, until a snapshot is written again.
func TestFailedSnapshotIsNotReady(t *testing.T) {
	cfg := testConfig(t, "p")
	cfg.Graphs[0].MinInfected = 1000 // no inference here
	cfg.SnapshotInterval = 50 * time.Millisecond
	r := start(t, cfg, preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	ready := "http://" + r.d.HTTPAddr() + "/readyz"
	code, _ := get(t, ready)
	require.Equal(t, http.StatusOK, code)

	refuseStateWrites(t, r.js)
	r.publish(t, "p", Event{Node: "1", State: StateInfected}, "") // a window to save
	var body string
	require.Eventually(t, func() bool {
		code, body = get(t, ready)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "snapshots: the last write failed")
	}, 10*time.Second, 20*time.Millisecond, body)

	require.NoError(t, r.js.DeleteStream(t.Context(), "KV_"+StateBucket)) // made anew by the next write
	r.publish(t, "p", Event{Node: "2", State: StateInfected}, "")
	require.Eventually(t, func() bool {
		code, body = get(t, ready)
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, body)
}

// A listener waiting for a slot at the bound gives up when it is closed,
// so a stop does not wait for a client to let go.
func TestConnLimitCloseWakesAWaitingAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimit(ln, 1)
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
	}
	first, err := l.Accept()
	require.NoError(t, err)
	defer first.Close()
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept() // the second connection: no slot, none idle
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("accepted past the bound: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, l.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake the waiting Accept")
	}
}

// dialAll opens n connections to addr, closed when the test ends.
func dialAll(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	return conns
}

// With many graphs on different bundles and plugins, /status, svc.status
// and the dashboard say which model each graph runs now, so a reload of
// one graph's bundle shows on that graph alone, before its next alert.
func TestStatusNamesEachGraphsModel(t *testing.T) {
	cfg := testConfig(t, "p", "q")
	next := cfg
	next.Graphs = append([]GraphConfig(nil), cfg.Graphs...)
	next.Graphs[1].Bundle = "q-v2.swb"
	r := start(t, cfg, preload(t, 4, "p", "q"), WithLocalizerFactory((&factoryOf{}).factory),
		WithReload(func(context.Context) (Config, error) { return next, nil }))
	models := func() map[string]string {
		out := map[string]string{}
		for _, g := range r.d.Status().Graphs {
			require.NotNil(t, g.Model, g.Name)
			out[g.Name] = g.Model.Bundle + " " + g.Model.Forward + " " + g.Model.ForwardVersion
		}
		return out
	}
	require.Equal(t, map[string]string{"p": "p.swb fake 1", "q": "q.swb fake 1"}, models())
	require.NoError(t, r.d.Reload(context.Background()))
	require.Equal(t, map[string]string{"p": "p.swb fake 1", "q": "q-v2.swb fake 1"}, models())

	m := request(t, r.nc, "sourcewatch.svc.status", nil)
	require.Contains(t, string(m.Data), `"model":{"bundle":"q-v2.swb","forward":"fake","forward_version":"1"}`)
	_, body := get(t, "http://"+r.d.HTTPAddr()+"/")
	require.Contains(t, body, "<td>q-v2.swb, fake 1</td>")
	require.Contains(t, body, "<td>p.swb, fake 1</td>")
	require.NotContains(t, body, ">unverified<")
}

// A graph whose forward plugin runs with no checksum check is marked so,
// in red, beside its model; a checked one is not.
func TestDashboardMarksAnUnverifiedPlugin(t *testing.T) {
	model := func(unverified bool) *GraphModel {
		return &GraphModel{ModelRef: alerts.ModelRef{Bundle: "b.swb", Forward: "icmf2", ForwardVersion: "1"}, Unverified: unverified}
	}
	var buf bytes.Buffer
	require.NoError(t, dashboardTmpl.Execute(&buf, dashboardData{
		Status: Status{Graphs: []GraphStatus{{Name: "checked", Model: model(false)}, {Name: "unchecked", Model: model(true)}}},
		Now:    time.Now(), MaxShown: dashboardSources,
	}))
	page := buf.String()
	require.Contains(t, page, "<td>b.swb, icmf2 1</td>", "the checked graph, unmarked")
	require.Contains(t, page, `<td>b.swb, icmf2 1 <span class="bad" title="the forward plugin was launched without checksum verification (allow_unverified)">unverified</span></td>`)
	require.Equal(t, 1, strings.Count(page, ">unverified</span>"))
}

// TestDashboardShowsAStandby: a standby replica launches no plugin by
// design, so its page shows each graph's plugin as standing by, not
// "down" in red, and /status says so beside localizer_healthy: false,
// which a consumer of the schema is to read with it.
func TestDashboardShowsAStandby(t *testing.T) {
	_, cfgFor := activeAndConfig(t)
	b := runReplica(t, cfgFor("b"))
	require.Eventually(t, func() bool { return b.d.standby.Load() != nil }, 10*time.Second, 5*time.Millisecond)
	base := "http://" + b.d.HTTPAddr()

	code, body := get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<span class="standby" title="this replica stands by: it launches no plugin until it takes over">standby</span></td>`)
	require.NotContains(t, body, `<span class="bad">down</span>`, "standing by is no failure")
	require.Contains(t, body, `<span class="standby">standby</span>: standby: replica a is active`)
	require.NotContains(t, body, `<span class="bad">not ready</span>`)

	code, body = get(t, base+"/status")
	require.Equal(t, http.StatusOK, code)
	var st Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Graphs, 1)
	require.False(t, st.Graphs[0].LocalizerHealth, "no plugin runs here")
	require.True(t, st.Graphs[0].Standby, "%s", body)
	require.NoError(t, validateJSON(t, compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/status_response", true), []byte(body)), "%s", body)

	// A standby cut off from NATS is a failure again.
	b.d.nc.Close()
	_, body = get(t, base+"/")
	require.Contains(t, body, `<span class="bad">not ready</span>: standby: replica a is active (as last seen); nats: not connected`)
}

// An active daemon's graphs are not marked standing by.
func TestStatusOfAnActiveReplicaIsNoStandby(t *testing.T) {
	a, _ := activeAndConfig(t)
	code, body := get(t, "http://"+a.d.HTTPAddr()+"/status")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `"standby"`)
	_, body = get(t, "http://"+a.d.HTTPAddr()+"/")
	require.Contains(t, body, `<span class="ok">healthy</span>`)
	require.NotContains(t, body, `class="standby"`)
}
