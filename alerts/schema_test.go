package alerts

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// compileSchema compiles a JSON Schema document, checking it against the
// draft's meta-schema, with formats (date-time) asserted.
func compileSchema(t *testing.T, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("schema.json", v))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, data []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(t, err)
	return s.Validate(v)
}

// The schema names every field of Alert and its parts, and requires those
// the JSON always holds (not omitempty), so it cannot fall behind the Go
// type unnoticed.
func TestJSONSchemaMatchesAlert(t *testing.T) {
	var doc map[string]any
	require.NoError(t, json.Unmarshal(JSONSchema(), &doc))
	var check func(path string, typ reflect.Type, node map[string]any)
	check = func(path string, typ reflect.Type, node map[string]any) {
		props, _ := node["properties"].(map[string]any)
		require.NotNil(t, props, path)
		var fields, required []string
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
			if !strings.Contains(opts, "omit") {
				required = append(required, name)
			}
			sub, _ := props[name].(map[string]any)
			require.NotNil(t, sub, "%s.%s is not in the schema", path, name)
			switch ft := f.Type; {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
				check(path+"."+name, ft, sub)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				check(path+"."+name+"[]", ft.Elem(), sub["items"].(map[string]any))
			}
		}
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		require.ElementsMatch(t, fields, keys, "%s: the schema names a field the type lacks", path)
		var req []string
		for _, r := range node["required"].([]any) {
			req = append(req, r.(string))
		}
		require.ElementsMatch(t, required, req, path)
	}
	check("alert", reflect.TypeOf(Alert{}), doc)
	props := doc["properties"].(map[string]any)
	require.Equal(t, Schema, props["schema"].(map[string]any)["const"])
	require.Equal(t, []any{string(Firing), string(Updated), string(Resolved)}, props["status"].(map[string]any)["enum"])
}

// Alerts as the stream stores them (firing, updated, resolved, with and
// without a note) validate against the schema; a wrong status or a
// missing seq do not.
func TestPublishedAlertsValidate(t *testing.T) {
	s := compileSchema(t, JSONSchema())
	_, js := startJS(t)
	ctx := ctxT(t)
	stream, err := EnsureStream(ctx, js, "sw")
	require.NoError(t, err)
	pub := NewPublisher(js, "sw")
	tr := NewTracker(nil)
	// Scores in [0, 1], as a bundle's are (obs's fixtures count down
	// from the number of sources).
	scaled := func(nodes ...string) Observation {
		o := obs("g", nodes...)
		for i := range o.Sources {
			o.Sources[i].Score /= float64(len(nodes))
		}
		return o
	}
	first, ok := tr.Observe(scaled("a", "b"))
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, first))
	o := scaled("c")
	o.Note = "outside the training range"
	chance, expected := 0.25, 2.5
	o.Sources[0].Chance, o.ExpectedSources = &chance, &expected
	next, ok := tr.Observe(o)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, next))
	done, ok := tr.Resolve("g", first.Window, 0)
	require.True(t, ok)
	require.NoError(t, pub.Publish(ctx, done))

	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var statuses []Status
	for range 3 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		require.NoError(t, validate(t, s, m.Data()), "%s", m.Data())
		var a Alert
		require.NoError(t, json.Unmarshal(m.Data(), &a))
		statuses = append(statuses, a.Status)
		if a.Status == Updated {
			require.Equal(t, 0.25, *a.Sources[0].Chance)
			require.Equal(t, 2.5, *a.ExpectedSources)
			overOne := bytes.Replace(m.Data(), []byte(`"chance":0.25`), []byte(`"chance":1.25`), 1)
			require.NotEqual(t, m.Data(), overOne)
			require.Error(t, validate(t, s, overOne), "a chance above 1")
		}
		if a.Status == Resolved {
			bad := bytes.Replace(m.Data(), []byte(`"resolved"`), []byte(`"closed"`), 1)
			require.Error(t, validate(t, s, bad))
			var raw map[string]any
			require.NoError(t, json.Unmarshal(m.Data(), &raw))
			delete(raw, "seq")
			noSeq, _ := json.Marshal(raw)
			require.Error(t, validate(t, s, noSeq))
		}
	}
	require.True(t, slices.Equal([]Status{Firing, Updated, Resolved}, statuses), "%v", statuses)
}

// Decode refuses with the sentinel a caller tests for: ErrInvalid for a
// body that is not an alert object, ErrSchema for another (or no)
// version; never both.
func TestDecodeWrapsItsSentinels(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       error
	}{
		{"v1", `{"schema":"sourcewatch.alert.v1","graph":"g","seq":1}`, nil},
		{"unknown field kept out", `{"schema":"sourcewatch.alert.v1","later":true}`, nil},
		{"v2", `{"schema":"sourcewatch.alert.v2"}`, ErrSchema},
		{"no schema", `{"graph":"g"}`, ErrSchema},
		{"null", `null`, ErrSchema},
		{"array", `[]`, ErrInvalid},
		{"truncated", `{"schema":"sourcewatch.alert.v1"`, ErrInvalid},
		{"wrong type", `{"schema":"sourcewatch.alert.v1","seq":"one"}`, ErrInvalid},
		{"empty", ``, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Decode([]byte(tc.body))
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, Schema, a.Schema)
				return
			}
			require.ErrorIs(t, err, tc.want)
			for _, other := range []error{ErrInvalid, ErrSchema} {
				if other != tc.want {
					require.NotErrorIs(t, err, other)
				}
			}
			require.Equal(t, Alert{}, a)
		})
	}
}
