package monitor

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeMessage drives an event message body, whatever it holds,
// through decodeMessage: it never panics, every element is an event or
// carries a reason, and whatever the fast path accepts encoding/json
// decodes to the same events. `go test` runs the seeds; `make fuzz`
// searches further.
func FuzzDecodeMessage(f *testing.F) {
	for _, seed := range []string{
		`{"node":"1","state":"infected","ts":"2026-11-22T10:00:00Z","id":"a"}`,
		`[{"node":"1","state":"infected"},{"node":"2","state":"recovered","id":"b"}]`,
		`[{"node":"1","state":"infected"},7,{"node":"\u0032","state":"infected"}]`,
		`{"NODE":"1","state":"infected"}`,
		`{"node":"1","node":"2"}`,
		` [ ] `,
		`{}`,
		`null`,
		`"x"`,
		`[`,
		// A stray bracket after the object is bad JSON, not an event.
		`{"node":"1","state":"infected"}}`,
		`{"node":"1", "state":"infected"}]`,
		// Not UTF-8 (Latin-1 "Zoë"): bad_json, not the node "Zo\ufffd".
		"{\"node\":\"Zo\xeb\",\"state\":\"infected\"}",
		"[{\"node\":\"1\",\"state\":\"infected\"},{\"node\":\"Zo\xeb\",\"state\":\"infected\"}]",
		// An array element without a node is bad_json, as a lone event.
		`[{"state":"infected"}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		els, _ := decodeMessage(nil, data)
		if len(els) == 0 && json.Valid(data) {
			var arr []json.RawMessage
			if json.Unmarshal(data, &arr) != nil || len(arr) > 0 {
				t.Fatalf("no element and no bad_json for %q", data)
			}
		}
		// A body that is not JSON is dead-lettered whole: no element of
		// it is applied as an event.
		if !json.Valid(bytes.TrimPrefix(data, []byte("\ufeff"))) {
			for k, el := range els {
				if el.reason == "" {
					t.Fatalf("element %d of %q, not JSON, taken as the event %+v", k, data, el.ev)
				}
			}
		}
		for k, el := range els {
			if el.reason == "" && el.ev == (wireEvent{}) {
				t.Fatalf("element %d of %q: neither an event nor a reason", k, data)
			}
			if el.reason == "" && el.ev.Node == "" {
				t.Fatalf("element %d of %q: an event without a node, not bad_json", k, data)
			}
			if el.reason == "" && !utf8.Valid(el.raw) {
				t.Fatalf("element %d of %q: not UTF-8, taken as the event %+v", k, data, el.ev)
			}
			if el.reason != "" && el.detail == "" {
				t.Fatalf("element %d of %q: reason %s without detail", k, data, el.reason)
			}
		}
		if ev, ok := fastDecode(data); ok {
			var want wireEvent
			if err := json.Unmarshal(data, &want); err != nil || want != ev {
				t.Fatalf("fast path took %q as %+v; encoding/json: %+v, %v", data, ev, want, err)
			}
		}
		if arr, ok := fastArray(nil, data); ok {
			var want []wireEvent
			if err := json.Unmarshal(data, &want); err != nil || len(want) != len(arr) {
				t.Fatalf("fast path took %q as %d events; encoding/json: %d, %v", data, len(arr), len(want), err)
			}
			for k := range arr {
				if arr[k].ev != want[k] {
					t.Fatalf("element %d of %q: fast %+v, encoding/json %+v", k, data, arr[k].ev, want[k])
				}
			}
		}
	})
}
