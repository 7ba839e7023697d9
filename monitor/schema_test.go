package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
)

func compileEventSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	return compileSchema(t, "urn:sourcewatch:schema:event.v1", false)
}

// compileSchema compiles the schema at loc with the daemon's three schemas
// loaded under their $ids, as a client would load them, so a $ref from one
// to another resolves. strict closes every object that names its
// properties (additionalProperties false): a field the Go types marshal
// and the schema does not name then fails validation.
func compileSchema(t *testing.T, loc string, strict bool) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for id, doc := range map[string][]byte{
		"urn:sourcewatch:schema:event.v1":   EventJSONSchema(),
		"urn:sourcewatch:schema:alert.v1":   alerts.JSONSchema(),
		"urn:sourcewatch:schema:service.v1": ServiceJSONSchema(),
	} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		require.NoError(t, err)
		require.Equal(t, id, v.(map[string]any)["$id"])
		if strict {
			closeObjects(v)
		}
		require.NoError(t, c.AddResource(id, v))
	}
	s, err := c.Compile(loc)
	require.NoError(t, err)
	return s
}

func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"]; ok {
			if _, set := v["additionalProperties"]; !set {
				v["additionalProperties"] = false
			}
		}
		for _, sub := range v {
			closeObjects(sub)
		}
	case []any:
		for _, sub := range v {
			closeObjects(sub)
		}
	}
}

// validateJSON validates v's JSON encoding (or v itself, if it is bytes).
func validateJSON(t *testing.T, s *jsonschema.Schema, v any) error {
	t.Helper()
	data, ok := v.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(v)
		require.NoError(t, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(t, err)
	return s.Validate(doc)
}

// accepted reports whether the daemon would apply every element of a
// message body, judged as ingest does apart from the graph and the clock:
// it decodes, names a state, and its ts, if any, is RFC 3339.
func accepted(body string) bool {
	els, _ := decodeMessage(nil, []byte(body))
	for _, el := range els {
		if el.reason != "" {
			return false
		}
		if _, ok := parseState(el.ev.State); !ok {
			return false
		}
		if el.ev.TS != "" {
			if _, err := parseEventTime(el.ev.TS); err != nil {
				return false
			}
		}
	}
	return len(els) > 0
}

// The event schema accepts what the daemon applies and refuses what it
// dead-letters, message by message, so a producer that validates against
// it before publishing sees the daemon's own verdict.
func TestEventSchemaAgreesWithTheDaemon(t *testing.T) {
	s := compileEventSchema(t)
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"node":"12","state":"infected"}`, true},
		{`{"node":"12","state":"recovered","ts":"2026-11-22T10:00:00Z","id":"e-1"}`, true},
		{`{"node":"user-123","state":"susceptible","ts":"2026-11-22T10:00:00.123456789+01:00"}`, true},
		{`[{"node":"1","state":"infected"},{"node":"2","state":"infected"}]`, true},
		{`[]`, false},
		{`{}`, false},
		{`{"state":"infected"}`, false},
		{`{"node":"","state":"infected"}`, false},
		{`{"node":"1"}`, false},
		{`{"node":"1","state":"sick"}`, false},
		{`{"node":1,"state":"infected"}`, false},
		{`{"node":"1","state":"infected","timestamp":"2026-11-22T10:00:00Z"}`, false},
		{`{"node":"1","state":"infected","ts":"yesterday"}`, false},
		{`{"node":"1","state":"infected","ts":""}`, false},
		// A JavaScript producer's failed stamp; it used to apply at
		// arrival time.
		{`{"node":"1","state":"infected","ts":null}`, false},
		{`{"node":"1","state":"infected","id":null}`, true},
		{`{"node":null,"state":"infected"}`, false},
		// RFC 3339 allows these; Go's parser, and so the daemon, does not.
		{`{"node":"1","state":"infected","ts":"2026-11-27t06:06:56.411z"}`, false},
		{`{"node":"1","state":"infected","ts":"2016-12-31T23:59:60Z"}`, false},
		{`{"node":"1","state":"infected","ts":"2026-11-27 06:06:56Z"}`, false},
		{`{"node":"1","state":"infected","ts":"2026-11-27T06:06:56+0100"}`, false},
		{`{"node":"1","state":"infected","ts":"2026-11-27T06:06:56.5-01:30"}`, true},
		// Go takes an offset past 23:59; RFC 3339 does not.
		{`{"node":"1","state":"infected","ts":"2026-11-27T06:06:56+24:00"}`, false},
		{`{"node":"1","state":"infected","ts":"2026-11-27T06:06:56-05:60"}`, false},
		{`{"node":"1","state":"infected","ts":"2026-11-27T06:06:56+23:59"}`, true},
		{`{"node":"1","NODE":"2","state":"infected"}`, false},
		{`[{"node":"1","state":"infected"},{"node":"2","state":"gone"}]`, false},
		// An element without a node is refused as a lone event is.
		{`[{"state":"infected"}]`, false},
		{`[{"node":"","state":"infected"},{"node":"1","state":"infected"}]`, false},
		{`"infected"`, false},
	} {
		t.Run(tc.body, func(t *testing.T) {
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(tc.body)))
			require.NoError(t, err)
			require.Equal(t, tc.ok, s.Validate(v) == nil, "schema")
			require.Equal(t, tc.ok, accepted(tc.body), "daemon")
		})
	}
}

// What the demo's replayer publishes, a simulated cascade's events,
// validates against the event schema.
func TestCascadeEventsValidate(t *testing.T) {
	s := compileEventSchema(t)
	g := pathGraph(t, 6)
	c := diffusion.Cascade{N: 6, Sources: []int{0}, Infected: []int{0, 1, 2}, Times: []int{0, 1, 2, -1, -1, -1}, Step: 2}
	evs := CascadeEvents(g, c, time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), time.Second)
	require.NotEmpty(t, evs)
	body, err := json.Marshal(evs)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, s.Validate(v), "%s", body)
}

// The daemon serves both schemas over HTTP, as the files in the tree.
func TestSchemasServed(t *testing.T) {
	r := start(t, testConfig(t, "p"), preload(t, 3, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	for path, want := range map[string][]byte{
		"/schema/event.v1.json": EventJSONSchema(), "/schema/alert.v1.json": alerts.JSONSchema(), "/schema/service.v1.json": ServiceJSONSchema(),
	} {
		resp, err := http.Get("http://" + r.d.HTTPAddr() + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, "application/schema+json", resp.Header.Get("Content-Type"))
		require.Equal(t, want, body, path)
	}
}

// The localize request schema accepts what the service answers and refuses
// what it answers with a 400, request by request, apart from what only
// the daemon can know (its graphs and their nodes), the one point the
// schema is stricter on (keys in lower case), and the one no JSON Schema
// can express (a key given twice, which the daemon refuses).
func TestLocalizeRequestSchemaAgreesWithTheService(t *testing.T) {
	s := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/localize_request", false)
	r := start(t, testConfig(t, "p"), preload(t, 5, "p"), WithLocalizerFactory((&factoryOf{}).factory))
	for _, tc := range []struct {
		body           string
		schema, daemon bool
	}{
		{`{"graph":"p","infected":["1"]}`, true, true},
		{`{"graph":"p","infected":["1","2","1"],"top":3,"id":"incident-7"}`, true, true},
		{`{"graph":"p","infected":["1"],"top":0}`, true, true},
		{`{"graph":"p","infected":["1"],"top":-1}`, false, false},
		{`{"graph":"p","infected":["1"],"top":1.5}`, false, false},
		{`{"graph":"p","infected":["1"],"top":"5"}`, false, false},
		{`{"graph":"p","infected":[]}`, false, false},
		{`{"graph":"p"}`, false, false},
		{`{"infected":["1"]}`, false, false},
		{`{"graph":"","infected":["1"]}`, false, false},
		{`{"graph":"p","infected":[1]}`, false, false},
		{`{"graph":"p","infected":"1"}`, false, false},
		{`{"graph":"p","infectd":["1"]}`, false, false},
		{`{"graph":"p","infected":["1"],"id":7}`, false, false},
		{`["p"]`, false, false},
		{`{"GRAPH":"p","infected":["1"]}`, false, true},
		{`{"graph":"p","infected":["1"],"top":1e2}`, true, true},
		{`{"graph":"p","infected":["1"],"top":100000000000000000000}`, true, true},
		{`{"graph":"p","infected":["1"],"top":null,"id":null}`, true, true},
		{`{"graph":"p","infected":["1"],"top":2.0}`, true, true},
		{`{"graph":"p","infected":[null]}`, false, false},
		{`{"graph":"p","infected":["1"],"graph":"q"}`, true, false},
	} {
		t.Run(tc.body, func(t *testing.T) {
			require.Equal(t, tc.schema, validateJSON(t, s, []byte(tc.body)) == nil, "schema")
			m, err := r.nc.Request("sourcewatch.svc.localize", []byte(tc.body), 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, tc.daemon, m.Header.Get(micro.ErrorCodeHeader) == "", "daemon: %s", m.Header.Get(micro.ErrorHeader))
		})
	}
}

// The service's replies validate against their schemas, closed to fields
// the schemas do not name: as the service sends them, and as Go values
// with every optional field set, so the schemas cannot fall behind the
// types unnoticed.
func TestServiceRepliesValidate(t *testing.T) {
	localizeReply := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/localize_response", true)
	statusReply := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/status_response", true)
	reloadReply := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/reload_response", true)
	windowReply := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/window_response", true)
	windowRequest := compileSchema(t, "urn:sourcewatch:schema:service.v1#/$defs/window_request", false)

	cfg := testConfig(t, "p")
	f := &factoryOf{script: func(gc GraphConfig) func([]float64) Inference {
		return func(y []float64) Inference {
			inf := infectedAreSources(gc.Bundle)(y)
			inf.Note = "outside the training range"
			// A model that measures each node's chance of being a source.
			inf.Chance = make([]float64, len(y))
			for v := range y {
				inf.Chance[v] = 0.25 * y[v]
			}
			return inf
		}
	}, onMake: func(_ int, l *fakeLocalizer) { l.unverified = true }}
	r := start(t, cfg, preload(t, 5, "p"), WithLocalizerFactory(f.factory),
		WithReload(func(context.Context) (Config, error) { return cfg, nil }))

	m := request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{Graph: "p", Infected: []string{"3"}})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.NoError(t, validateJSON(t, localizeReply, m.Data), "%s", m.Data)
	m = request(t, r.nc, "sourcewatch.svc.localize", LocalizeRequest{ID: "x", Graph: "p", Infected: []string{"3", "4"}, Top: 5})
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.Contains(t, string(m.Data), `"ranked"`)
	require.Contains(t, string(m.Data), `"note"`)
	require.Contains(t, string(m.Data), `"chance":0.25`)
	require.Contains(t, string(m.Data), `"expected_sources":0.5`)
	require.NoError(t, validateJSON(t, localizeReply, m.Data), "%s", m.Data)
	overOne := bytes.Replace(m.Data, []byte(`"chance":0.25`), []byte(`"chance":2`), 1)
	require.Error(t, validateJSON(t, localizeReply, overOne), "a chance above 1")

	// An empty daemon's status (its plugin unverified), then one with an
	// alert and a reload.
	m = request(t, r.nc, "sourcewatch.svc.status", nil)
	require.Contains(t, string(m.Data), `"model":{"bundle":"p.swb","forward":"fake","forward_version":"1","unverified":true}`)
	require.NoError(t, validateJSON(t, statusReply, m.Data), "%s", m.Data)
	r.publish(t, "p", Event{Node: "2", State: StateInfected, TS: time.Now()}, "")
	require.Eventually(t, func() bool { return r.d.Status().Graphs[0].LastAlert != nil }, 10*time.Second, 5*time.Millisecond)
	m = request(t, r.nc, "sourcewatch.svc.reload", nil)
	require.Empty(t, m.Header.Get(micro.ErrorHeader))
	require.NoError(t, validateJSON(t, reloadReply, m.Data), "%s", m.Data)
	m = request(t, r.nc, "sourcewatch.svc.status", nil)
	require.Contains(t, string(m.Data), `"last_alert"`)
	require.Contains(t, string(m.Data), `"last_reload"`)
	require.NoError(t, validateJSON(t, statusReply, m.Data), "%s", m.Data)
	require.NoError(t, validateJSON(t, windowRequest, WindowRequest{Graph: "p"}))
	require.Error(t, validateJSON(t, windowRequest, map[string]string{"graph": "p", "top": "1"}))
	w := request(t, r.nc, "sourcewatch.svc.window", WindowRequest{Graph: "p"})
	require.Empty(t, w.Header.Get(micro.ErrorHeader))
	require.Contains(t, string(w.Data), `"infected":["2"]`)
	require.NoError(t, validateJSON(t, windowReply, w.Data), "%s", w.Data)
	code, body := get(t, "http://"+r.d.HTTPAddr()+"/status")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, validateJSON(t, statusReply, []byte(body)), "%s", body)

	// Every optional field set.
	var st Status
	require.NoError(t, json.Unmarshal(m.Data, &st))
	g := &st.Graphs[0]
	require.True(t, g.Model.Unverified)
	g.Replaying, g.LastError, g.Standby = true, "localizer: plugin exited", true
	g.PendingAlerts = []alerts.Alert{*g.LastAlert, *g.LastAlert}
	st.LastReload = &ReloadStatus{At: time.Now(), OK: false, Error: "graphs[0].bundle: no such file"}
	require.NoError(t, validateJSON(t, statusReply, st))
	// And what the schemas refuse.
	g.Nodes = 0
	require.Error(t, validateJSON(t, statusReply, st))
	require.Error(t, validateJSON(t, localizeReply, LocalizeResponse{Graph: "p", Threshold: 2, Sources: []alerts.Source{}, CredibleSet: []string{}}))
	require.Error(t, validateJSON(t, reloadReply, map[string]any{"reloaded": false}))
	require.Error(t, validateJSON(t, statusReply, map[string]any{"version": "x", "ready": true, "graphs": []any{}, "uptime": 1}), "strict")
	// unverified is there when true, absent otherwise: never false.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &raw))
	model := raw["graphs"].([]any)[0].(map[string]any)["model"].(map[string]any)
	require.Equal(t, true, model["unverified"])
	model["unverified"] = false
	require.Error(t, validateJSON(t, statusReply, raw), "unverified false")
	delete(model, "unverified")
	require.NoError(t, validateJSON(t, statusReply, raw), "unverified absent")
}

// A bad event is reported as an event, not also as a failed array (the
// schema's oneOf used to give both, and ajv printed every branch).
func TestEventSchemaReportsOneForm(t *testing.T) {
	s := compileEventSchema(t)
	err := validateJSON(t, s, []byte(`{"node":"1","state":"sick"}`))
	require.Error(t, err)
	require.Contains(t, err.Error(), "state")
	require.NotContains(t, err.Error(), "array")
	err = validateJSON(t, s, []byte(`[{"node":"1","state":"sick"}]`))
	require.Error(t, err)
	require.Contains(t, err.Error(), "/0/state")
	require.NotContains(t, err.Error(), "want object")
}
