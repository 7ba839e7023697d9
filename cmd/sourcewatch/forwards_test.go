package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/eval"
)

func TestExpandForwards(t *testing.T) {
	cfg := eval.Config{
		Methods: []string{"slvae", "lpsi", "slvae-b"},
		Params:  map[string]string{"slvae.epochs": "3", "lpsi.alpha": "0.5", "slvae.plugin_dir": "/X", "slvae[icmf].plugin_dir": "/Y"},
	}
	require.NoError(t, expandForwards(&cfg, "icmf, gat"))
	require.Equal(t, []string{"slvae[icmf]", "slvae[gat]", "lpsi", "slvae-b[icmf]", "slvae-b[gat]"}, cfg.Methods)
	require.Equal(t, map[string]string{
		"slvae[icmf].epochs": "3", "slvae[gat].epochs": "3", "lpsi.alpha": "0.5",
		"slvae[icmf].plugin_dir": "/Y", "slvae[gat].plugin_dir": "/X", // an expansion's own param wins
	}, cfg.Params)
	for _, m := range cfg.Methods {
		_, err := eval.Lookup(m)
		require.NoError(t, err, m)
	}

	none := eval.Config{Methods: []string{"lpsi"}}
	require.ErrorContains(t, expandForwards(&none, "gat"), "no SL-VAE method")
	bad := eval.Config{Methods: []string{"slvae"}}
	require.ErrorContains(t, expandForwards(&bad, "a.b"), "forward plugin name")
	same := eval.Config{Methods: []string{"slvae"}}
	require.NoError(t, expandForwards(&same, ""))
	require.Equal(t, []string{"slvae"}, same.Methods)

	// A plugin given by --method-param names the row as --forward does.
	own := eval.Config{
		Methods: []string{"slvae", "slvae-noprior", "infected"},
		Params:  map[string]string{"slvae.forward": "hop1", "slvae.plugin_dir": "/tmp/mine", "infected.x": "1"},
	}
	require.NoError(t, expandForwards(&own, ""))
	require.Equal(t, []string{"slvae[hop1]", "slvae-noprior", "infected"}, own.Methods)
	require.Equal(t, map[string]string{"slvae[hop1].forward": "hop1", "slvae[hop1].plugin_dir": "/tmp/mine", "infected.x": "1"}, own.Params)
	badOwn := eval.Config{Methods: []string{"slvae"}, Params: map[string]string{"slvae.forward": "../x"}}
	require.ErrorContains(t, expandForwards(&badOwn, ""), "--method-param slvae.forward")
}
