package eval

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/alerts"
)

// The table pads by terminal columns: a method named by a plugin in
// Chinese keeps every column after it in line (text/tabwriter counted
// runes and pushed its row two columns out a character).
func TestWriteTablePadsByDisplayWidth(t *testing.T) {
	st := Stat{Mean: 0.5, SD: 0.1, N: 12}
	rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 12}, Results: []Result{
		{Method: "slvae[模型]", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
		{Method: "lpsi", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
		{Method: "infected", Control: true, Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st},
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	// The table is the block after the header's blank line.
	_, table, ok := strings.Cut(buf.String(), "\n\n")
	require.True(t, ok)
	table, _, _ = strings.Cut(table, "\n\n")
	lines := strings.Split(table, "\n")
	require.Len(t, lines, 4, table)
	require.Contains(t, lines[1], "slvae[模型]")
	methodEnd := alerts.TextWidth(lines[0][:strings.Index(lines[0], "method")+len("method")])
	for i, l := range lines {
		require.Equal(t, alerts.TextWidth(lines[0]), alerts.TextWidth(l), "%q\n%s", l, table)
		if i > 0 {
			// the method column too: each row's name ends where the
			// header's does
			require.Equal(t, methodEnd, alerts.TextWidth(strings.TrimRight(l[:strings.Index(l, "0.500")], " ")), "%q", l)
		}
	}
}

// The count-told floor's line reads its gap as a cost only where the
// proxy is below the plain floor: on a fast spread a step's overshoot can
// put it above.
func TestFloorAtCountLineReadsTheGap(t *testing.T) {
	st := Stat{Mean: 0.5, SD: 0.1, N: 12}
	for _, tc := range []struct {
		plain, atCount float64
		want, not      string
	}{
		{0.08, 0.06, "its gap below forward_floor_mse estimates what not knowing the observation time costs", "not below"},
		{0.0758, 0.0858, "here it is not below forward_floor_mse", "estimates what not knowing"},
	} {
		rep := &Report{Graph: "g", Settings: Settings{Runs: 1, Test: 12}, ForwardFloorMSE: &tc.plain, ForwardFloorAtCountMSE: &tc.atCount,
			Results: []Result{{Method: "lpsi", Precision: st, Recall: st, F1: st, AUC: st, TopK: st, ErrorDistance: st, SecondsPerCascade: st, FitSeconds: st}}}
		var buf bytes.Buffer
		require.NoError(t, rep.WriteTable(&buf))
		require.Contains(t, buf.String(), tc.want)
		require.NotContains(t, buf.String(), tc.not)
	}
}
