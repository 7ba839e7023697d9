package monitor

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeRequests checks the svc.localize and svc.window decoders:
// no panic, every refusal a bad request, and nothing taken from a body
// that is not one JSON object.
func FuzzDecodeRequests(f *testing.F) {
	for _, seed := range []string{
		`{"graph":"g","infected":["1","2"],"top":3,"id":"x"}`,
		`{"graph":"g","infected":["1"],"top":1e2}`,
		`{"graph":"g","infected":[null]}`,
		`{"graph":"g","infected":["1"],"top":-0.5}`,
		`{"graph":"g","infected":["1"],"top":"3"}`,
		`{"graph":"g","GRAPH":"h"}`,
		`{"graph":"g"}}`,
		`{"graph":"g"} {}`,
		`{"graph":"g","infected":["1"],"top":1e400}`,
		``,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeLocalizeRequest(data)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("localize %q: refusal not a bad request: %v", data, err)
			}
		} else {
			if !json.Valid(data) {
				t.Fatalf("localize %q is not JSON, decoded as %+v", data, req)
			}
			if req.Top < 0 {
				t.Fatalf("localize %q: top %d", data, req.Top)
			}
		}
		var w WindowRequest
		if decodeRequest(data, &w, "graph alone") == "" && !json.Valid(data) {
			t.Fatalf("window %q is not JSON, decoded as %+v", data, w)
		}
	})
}
