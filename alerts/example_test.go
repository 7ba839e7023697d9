package alerts_test

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sourcewatch/sourcewatch/alerts"
)

func ExampleCredibleSet() {
	sources := []alerts.Source{
		{Node: "7", Score: 0.72, Probability: 0.30},
		{Node: "12", Score: 0.91, Probability: 0.55},
		{Node: "150", Score: 0.54, Probability: 0.15},
	}
	fmt.Println(alerts.CredibleSet(sources, 0.9))
	fmt.Println(alerts.CredibleSet(sources, 0.5))
	// Output:
	// [12 7 150]
	// [12]
}

func ExampleTracker() {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tr := alerts.NewTracker(func() time.Time { return now })
	obs := func(nodes ...string) alerts.Observation {
		o := alerts.Observation{Graph: "jazz", Infected: 40}
		for _, n := range nodes {
			o.Sources = append(o.Sources, alerts.Source{Node: n, Probability: 1})
		}
		return o
	}
	show := func(a alerts.Alert, publish bool) {
		fmt.Println(a.Status, a.Seq, publish)
	}
	show(tr.Observe(obs("12", "7")))
	show(tr.Observe(obs("7", "12"))) // same set: nothing to publish
	show(tr.Observe(obs("12")))
	show(tr.Resolve("jazz", alerts.Window{}, 2))
	show(tr.Resolve("jazz", alerts.Window{}, 0)) // nothing open
	// Output:
	// firing 1 true
	// firing 1 false
	// updated 2 true
	// resolved 3 true
	//  0 false
}

func ExampleFormat() {
	a := alerts.Alert{
		Schema: alerts.Schema, ID: "5d41402abc4b2a76b9719d911017c592-2", Fingerprint: "5d41402abc4b2a76b9719d911017c592",
		Status: alerts.Updated, Graph: "jazz",
		Window:   alerts.Window{From: time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)},
		Infected: 57,
		Sources: []alerts.Source{
			{Node: "12", Score: 0.91, Probability: 0.55},
			{Node: "7", Score: 0.72, Probability: 0.30},
			{Node: "150", Score: 0.54, Probability: 0.15},
		},
		CredibleSet: []string{"12", "7", "150"},
		Threshold:   0.5,
		Model:       alerts.ModelRef{Bundle: "jazz-si-3f2a", Forward: "si", ForwardVersion: "1.0.0"},
		InferenceMS: 12.5, Seq: 2, ObservedAt: time.Date(2026, 11, 23, 12, 0, 1, 0, time.UTC),
		Note: "8.1% of the nodes infected, outside the 20-62% the bundle's training snapshots held",
	}
	_ = alerts.Format(os.Stdout, a)
	// Output:
	// UPDATED jazz at 2026-11-23T12:00:01Z (seq 2)
	//   id            5d41402abc4b2a76b9719d911017c592-2
	//   window        2026-11-23T11:00:00Z .. 2026-11-23T12:00:00Z
	//   infected      57
	//   credible set  12, 7, 150 (3 of the 3 rows below, marked *)
	//   model         bundle jazz-si-3f2a, forward si 1.0.0
	//   threshold     0.5, inference 12.5 ms
	//   note          8.1% of the nodes infected, outside the 20-62% the bundle's training snapshots held
	//       rank  node  score  probability
	//          1    12   0.91        0.550  *
	//          2     7   0.72        0.300  *
	//          3   150   0.54        0.150  *
}

// A consumer reading the alert stream with its own NATS client decodes
// each message body with Decode, and tells a message it cannot read from
// an alert of a newer schema version with errors.Is.
func ExampleDecode() {
	for _, body := range []string{
		`{"schema":"sourcewatch.alert.v1","id":"5d41402abc4b2a76b9719d911017c592-1","fingerprint":"5d41402abc4b2a76b9719d911017c592","status":"firing","graph":"jazz","infected":57,"sources":[{"node":"12","score":0.83,"probability":0.41}],"seq":1}`,
		`{"schema":"sourcewatch.alert.v2","id":"x-1"}`,
		`{"schema":`,
	} {
		a, err := alerts.Decode([]byte(body))
		switch {
		case errors.Is(err, alerts.ErrSchema):
			fmt.Println("another version:", err)
		case errors.Is(err, alerts.ErrInvalid):
			fmt.Println("not an alert:", err)
		case err != nil:
			fmt.Println("error:", err)
		default:
			fmt.Println(a.Status, a.Graph, a.Seq, a.Sources[0].Node)
		}
	}
	// Output:
	// firing jazz 1 12
	// another version: alerts: unsupported schema: "sourcewatch.alert.v2", this build reads "sourcewatch.alert.v1"
	// not an alert: alerts: invalid alert: unexpected end of JSON input
}
