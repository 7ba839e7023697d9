package monitor

import (
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"
)

func TestShippedConfigsLoad(t *testing.T) {
	for _, p := range []string{"../configs/demo.yaml", "../configs/sourcewatch.yaml"} {
		v := viper.New()
		v.SetEnvPrefix("SOURCEWATCH")
		v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
		v.AutomaticEnv()
		v.SetConfigFile(p)
		require.NoError(t, v.ReadInConfig())
		cfg, err := Load(v)
		require.NoError(t, err, p)
		require.NotEmpty(t, cfg.Graphs)
	}
}
