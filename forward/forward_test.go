package forward_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/forward"
)

func TestInfoUnknownParam(t *testing.T) {
	in := forward.Info{Name: "m", Version: "1", Params: []forward.Param{{Name: "steps"}, {Name: "p"}}}
	for _, tc := range []struct {
		name   string
		info   forward.Info
		params map[string]string
		want   string
	}{
		{"every one listed", in, map[string]string{"steps": "3", "p": "0.1"}, ""},
		{"none given", in, nil, ""},
		{"the first unknown in sorted order", in, map[string]string{"zeta": "1", "stesp": "3", "p": "1"}, "stesp"},
		{"a plugin that lists no params is not checked", forward.Info{Name: "m", Version: "1"}, map[string]string{"anything": "1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := tc.info.UnknownParam(tc.params)
			require.Equal(t, tc.want, got)
			if len(tc.info.Params) > 0 {
				require.Equal(t, []string{"steps", "p"}, known)
			}
		})
	}
}
