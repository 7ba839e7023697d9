package monitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sourcewatch/sourcewatch/diffusion"
)

func TestCascadeEvents(t *testing.T) {
	g := pathGraph(t, 4)
	c := diffusion.Cascade{
		Sources:   []int{1},
		Infected:  []int{0, 1},
		Times:     []int{2, 0, 3, -1},
		Recovered: []int{-1, 1, -1, -1},
		Step:      2,
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs := CascadeEvents(g, c, t0, time.Second)
	require.Len(t, evs, 3) // node 2's infection at step 3 is after the snapshot
	require.Equal(t, Event{Node: "1", State: "infected", TS: t0, ID: evs[0].ID}, evs[0])
	require.Equal(t, Event{Node: "1", State: "recovered", TS: t0.Add(time.Second), ID: evs[1].ID}, evs[1])
	require.Equal(t, Event{Node: "0", State: "infected", TS: t0.Add(2 * time.Second), ID: evs[2].ID}, evs[2])
	ids := map[string]bool{}
	for _, e := range evs {
		require.NotEmpty(t, e.ID)
		require.False(t, ids[e.ID])
		ids[e.ID] = true
	}
	again := CascadeEvents(g, c, t0, time.Second)
	require.Equal(t, evs, again)

	c.Times = nil
	evs = CascadeEvents(g, c, t0, time.Second)
	require.Len(t, evs, 2)
	require.Equal(t, t0, evs[1].TS)
}

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		reasons []string
	}{
		{"object", `{"node":"1","state":"infected"}`, []string{""}},
		{"array with bad element", `[{"node":"1","state":"infected"}, 7, {"node":"2"}]`, []string{"", ReasonBadJSON, ""}},
		{"garbage", `{"node":`, []string{ReasonBadJSON}},
		{"empty object", `{}`, []string{ReasonBadJSON}},
		{"broken array", `[{"node":"1"},`, []string{ReasonBadJSON}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := decodeMessage([]byte(tc.in))
			var got []string
			for _, d := range ds {
				got = append(got, d.reason)
			}
			require.Equal(t, tc.reasons, got)
		})
	}
}
