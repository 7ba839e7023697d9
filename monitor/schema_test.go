package monitor

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/diffusion"
)

func compileEventSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(EventJSONSchema()))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("event.json", v))
	s, err := c.Compile("event.json")
	require.NoError(t, err)
	return s
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
			if _, err := time.Parse(time.RFC3339Nano, el.ev.TS); err != nil {
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
		{`{"node":"1","NODE":"2","state":"infected"}`, false},
		{`[{"node":"1","state":"infected"},{"node":"2","state":"gone"}]`, false},
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
	for path, want := range map[string][]byte{"/schema/event.v1.json": EventJSONSchema(), "/schema/alert.v1.json": alerts.JSONSchema()} {
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
