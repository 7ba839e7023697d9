package localize

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A graph config's forward_params override the bundle's recorded params
// key by key: the state was fitted with the others, and an empty map (the
// shipped config's default) changes nothing.
func TestMergeParams(t *testing.T) {
	recorded := map[string]string{"steps": "5", "p": "0.2"}
	for _, tc := range []struct {
		name     string
		override map[string]string
		want     map[string]string
	}{
		{"none", nil, recorded},
		{"empty", map[string]string{}, recorded},
		{"one key", map[string]string{"p": "0.3"}, map[string]string{"steps": "5", "p": "0.3"}},
		{"a new key", map[string]string{"hops": "2"}, map[string]string{"steps": "5", "p": "0.2", "hops": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, mergeParams(recorded, tc.override))
			require.Equal(t, map[string]string{"steps": "5", "p": "0.2"}, recorded)
		})
	}
	require.Equal(t, map[string]string{"p": "0.3"}, mergeParams(nil, map[string]string{"p": "0.3"}))
}
