package alerts

import (
	"errors"
	"io"
	"testing"
)

// FuzzDecodeFormat decodes a message of the alert stream as alerts tail
// and the daemon's restart read it, and formats what decodes: a refusal
// is ErrInvalid or ErrSchema, and Format takes any decoded alert.
func FuzzDecodeFormat(f *testing.F) {
	for _, seed := range []string{
		`{"schema":"sourcewatch.alert.v1","id":"a-1","status":"firing","graph":"g","infected":3,"sources":[{"node":"1","score":0.9,"probability":0.5,"floor":true}],"credible_set":["1"],"threshold":0.4,"seq":1,"observed_at":"2026-11-22T10:00:00Z"}`,
		`{"schema":"sourcewatch.alert.v1","sources":[{"node":"\u4e2d\u6587","score":-1e308}],"credible_set":["x","\u0301"],"infected":-5}`,
		`{"schema":"sourcewatch.alert.v0"}`,
		`{"schema":"sourcewatch.alert.v1","sources":null,"window":{"from":"0001-01-01T00:00:00Z"}}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrSchema) {
				t.Fatalf("refusal neither ErrInvalid nor ErrSchema: %v", err)
			}
			return
		}
		if err := Format(io.Discard, a); err != nil {
			t.Fatalf("format: %v", err)
		}
	})
}
