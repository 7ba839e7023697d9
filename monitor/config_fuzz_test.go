package monitor

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/spf13/viper"
)

// FuzzLoadConfig reads a YAML config as serve does and loads it: a
// refusal wraps ErrConfig (naming the key when it is a KeyError, whose
// line is then looked up), never a panic.
func FuzzLoadConfig(f *testing.F) {
	for _, path := range []string{"../configs/sourcewatch.yaml", "../configs/demo.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"graphs:\n  - name: g\n    edges: e\n    bundle: b\n    window: 1h\n",
		"graphs:\n  - name: g\n    edges: e\n    bundle: b\n    window: 10\n    forward_params: {a: [1]}\n",
		"graphs: [1, 2]\n",
		"graphs:\n  - {name: g, edges: e, bundle: b, restarts: 1.5}\n",
		"nats: 7\n",
		"workers: 1e30\n",
		"ha: {enabled: yes}\n",
		"a: &a [x, x]\nb: &b [*a, *a]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := viper.New()
		v.SetConfigType("yaml")
		if v.ReadConfig(bytes.NewReader(data)) != nil {
			return
		}
		_, err := Load(v)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("refusal not an ErrConfig: %v", err)
		}
		var ke *KeyError
		if errors.As(err, &ke) {
			at := ke.at
			if at == "" {
				at = ke.Key
			}
			_ = yamlKeyLine(data, at)
		}
	})
}
