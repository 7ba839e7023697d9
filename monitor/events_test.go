package monitor

import (
	"encoding/json"
	"math/rand/v2"
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

// Under SIR, events at one step come in node order, a node's infection
// before its recovery, and a recovery at the snapshot step is in;
// expected order written out by hand.
func TestCascadeEventsOrderUnderSIR(t *testing.T) {
	g := pathGraph(t, 5)
	c := diffusion.Cascade{
		Times:     []int{1, 0, 1, 2, -1},
		Recovered: []int{2, 1, -1, 2, 3},
		Step:      2,
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	for _, e := range CascadeEvents(g, c, t0, time.Minute) {
		got = append(got, e.TS.Sub(t0).String()+" "+e.Node+" "+e.State)
	}
	require.Equal(t, []string{
		"0s 1 infected",
		"1m0s 0 infected", "1m0s 1 recovered", "1m0s 2 infected",
		"2m0s 0 recovered", "2m0s 3 infected", "2m0s 3 recovered",
	}, got, "node 4 recovers after the snapshot")
}

// parseEventTime takes RFC 3339 and refuses offsets past 23:59, which Go
// would take.
func TestParseEventTime(t *testing.T) {
	for _, tc := range []struct {
		ts string
		ok bool
	}{
		{"2026-11-22T23:59:59Z", true},
		{"2026-11-22T23:59:59.999Z", true},
		{"2026-11-22T10:00:00+23:59", true},
		{"2026-11-22T10:00:00-00:00", true},
		{"2026-11-22T10:00:00+24:00", false},
		{"2026-11-22T10:00:00-05:60", false},
		{"2026-11-22 10:00:00Z", false},
	} {
		_, err := parseEventTime(tc.ts)
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.ts, err)
	}
	_, err := parseEventTime("2026-11-22T10:00:00+24:00")
	require.ErrorIs(t, err, errOffsetRange)
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
		// A misspelt key is refused, not ignored: the event would apply
		// at arrival time.
		{"unknown key", `{"node":"11","state":"infected","timestamp":"2026-11-26T09:00:00Z"}`, []string{ReasonBadJSON}},
		{"unknown key in an array", `[{"node":"1","state":"infected"},{"node":"2","state":"infected","extra":1}]`, []string{"", ReasonBadJSON}},
		{"no node", `{"state":"infected","ts":"2026-11-26T09:00:00Z"}`, []string{ReasonBadJSON}},
		{"keys match in any case, as encoding/json's", `{"Node":"12","State":"infected"}`, []string{""}},
		{"two values", `{"node":"1","state":"infected"} {"node":"2"}`, []string{ReasonBadJSON}},
		{"a number", `7`, []string{ReasonBadJSON}},
		{"a number node", `{"node":7,"state":"infected"}`, []string{ReasonBadJSON}},
		{"empty array", ` [ ] `, []string{ReasonBadJSON}},
		{"empty ts", `{"node":"1","state":"infected","ts":""}`, []string{ReasonBadJSON}},
		{"empty ts, spaced and in another case", `{"node":"1","state":"infected", "TS" : ""}`, []string{ReasonBadJSON}},
		{"byte-order mark", "\ufeff{\"node\":\"1\",\"state\":\"infected\"}", []string{""}},
		// A JavaScript producer's failed stamp.
		{"null ts", `{"node":"1","state":"infected","ts":null}`, []string{ReasonBadJSON}},
		{"null id is none", `{"node":"1","state":"infected","id":null}`, []string{""}},
		// Parsers differ on which of two values they keep; the event is
		// ambiguous, so it is refused (it was read as node 2).
		{"a key twice", `{"node":"1","state":"infected","node":"2"}`, []string{ReasonBadJSON}},
		{"a key twice in two cases", `[{"node":"1","NODE":"2","state":"infected"}]`, []string{ReasonBadJSON}},
		{"empty message", ``, []string{ReasonBadJSON}},
		{"only spaces", " \n ", []string{ReasonBadJSON}},
		{"not json", `not json`, []string{ReasonBadJSON}},
		{"empty array, no spaces", `[]`, []string{ReasonBadJSON}},
		{"only an opening bracket", `[`, []string{ReasonBadJSON}},
		{"an array cut after an element", `[7`, []string{ReasonBadJSON}},
		{"not UTF-8 at byte 0", "\xff{\"node\":\"1\",\"state\":\"infected\"}", []string{ReasonBadJSON}},
	}
	details := map[string]string{
		"unknown key":             `json: unknown field "timestamp" (an event has node, state, ts and id)`,
		"unknown key in an array": `json: unknown field "extra" (an event has node, state, ts and id)`,
		"no node":                 `no "node": an event names the node it is about`,
		"empty object":            "an empty event: an event needs node and state",
		"a number":                "not an event: a JSON number, want an object (or an array of them)",
		"empty message":           "an empty message: want an event object (or an array of them)",
		"only spaces":             "an empty message: want an event object (or an array of them)",
		"not json":                "not valid JSON at byte 2: invalid character 'o' in literal null (expecting 'u')",
		"broken array":            "the JSON ends early (cut off?): unexpected end of JSON input",
		"garbage":                 "the JSON ends early (cut off?): unexpected EOF",
		"a number node":           `"node" is a JSON number, want a string`,
		"empty array":             "an empty array: a batch holds at least one event",
		"empty array, no spaces":  "an empty array: a batch holds at least one event",
		// not an empty array: one that ends early
		"only an opening bracket":       "the JSON ends early (cut off?): unexpected end of JSON input",
		"an array cut after an element": "the JSON ends early (cut off?): unexpected end of JSON input",
		"not UTF-8 at byte 0":           "not valid UTF-8 at byte 0 (0xff): JSON text is UTF-8; was it written in Latin-1, or another encoding?",
		"empty ts":                      `"ts" is empty: give an RFC 3339 time, or leave "ts" out for the arrival time`,
		"null ts":                       `"ts" is null: give an RFC 3339 time, or leave "ts" out for the arrival time`,
		"a key twice":                   `"node" is given twice (keys match in any case): an event names each of node, state, ts and id once`,
		"a key twice in two cases":      `"NODE" is given twice (keys match in any case): an event names each of node, state, ts and id once`,
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds, _ := decodeMessage(nil, []byte(tc.in))
			var got []string
			for _, d := range ds {
				got = append(got, d.reason)
				if d.reason != "" && details[tc.name] != "" {
					require.Equal(t, details[tc.name], d.detail)
				}
			}
			require.Equal(t, tc.reasons, got)
		})
	}
}

// TestFastDecodeAgreesWithEncodingJSON mutates event texts at random:
// whenever the fast decoder accepts one, encoding/json must accept it too
// and decode the same event.
func TestFastDecodeAgreesWithEncodingJSON(t *testing.T) {
	seeds := []string{
		`{"node":"user-1","state":"infected","ts":"2026-11-22T10:00:00Z","id":"a"}`,
		` { "node" : "7" , "state":"recovered" } `,
		`{"state":"susceptible","node":"x","node":"y"}`,
		`{}`,
		`{"node":"\u00e9","state":"infected"}`,
		`{"Node":"1","state":"infected"}`,
		`{"node":1,"state":"infected"}`,
		`{"node":"1","state":"infected","extra":"z"}`,
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte(`{}":, \a1nodestaeidtsé\\` + "\n\x01")
	accepted := 0
	for _, s := range seeds {
		for k := range 3000 {
			b := []byte(s)
			if k > 0 {
				for range 1 + rng.IntN(3) {
					switch p := rng.IntN(len(b) + 1); rng.IntN(3) {
					case 0:
						if p < len(b) {
							b = append(b[:p], b[p+1:]...)
						}
					case 1:
						b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
					default:
						if p < len(b) {
							b[p] = alphabet[rng.IntN(len(alphabet))]
						}
					}
				}
			}
			fast, ok := fastDecode(b)
			if !ok {
				continue
			}
			accepted++
			var want wireEvent
			require.NoError(t, json.Unmarshal(b, &want), "fast accepted %q", b)
			require.Equal(t, want, fast, "input %q", b)
		}
	}
	require.Greater(t, accepted, 1000, "the fast path should take most well-formed inputs")

	// Arrays of them, mutated at random too.
	accepted = 0
	for k := range 5000 {
		b := []byte("[" + seeds[k%3] + "," + seeds[(k+1)%3] + "]")
		if k%10 == 0 {
			b = []byte(" [ ] ")
		}
		for range rng.IntN(3) {
			p := rng.IntN(len(b))
			b[p] = alphabet[rng.IntN(len(alphabet))]
		}
		els, ok := fastArray(nil, b)
		if !ok {
			continue
		}
		accepted++
		fast := make([]wireEvent, len(els))
		for k, el := range els {
			fast[k] = el.ev
			var one wireEvent
			require.NoError(t, json.Unmarshal(el.raw, &one), "element %d's raw %q", k, el.raw)
			require.Equal(t, one, el.ev)
		}
		var want []wireEvent
		require.NoError(t, json.Unmarshal(b, &want), "fast accepted %q", b)
		require.Equal(t, want, fast, "input %q", b)
	}
	require.Greater(t, accepted, 500)
	_, ok := fastDecode([]byte(seeds[0]))
	require.True(t, ok)
}

// tsHint names the slip of a ts that is no RFC 3339 time, and takes any
// string, a date alone (10 bytes) included.
func TestTSHint(t *testing.T) {
	for ts, want := range map[string]string{
		"2026-11-22T10:00:00":  " (no offset: end it in Z for UTC, or give the zone's, e.g. +02:00)",
		"2026-11-22 10:00:00Z": " (an upper-case T between date and time)",
		"2026-11-22t10:00:00z": " (an upper-case T between date and time)",
		"2026-11-22T10:00:00z": " (an upper-case Z)",
		"2026-11-22":           "",
		"2026-11-22 ":          "",
		"":                     "",
	} {
		require.Equal(t, want, tsHint(ts), "%q", ts)
	}
}
