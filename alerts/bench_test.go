package alerts

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func benchSources(n int) []Source {
	ss := make([]Source, n)
	for i := range ss {
		ss[i] = Source{Node: fmt.Sprint(i), Score: float64(n - i), Probability: 1 / float64(i+1)}
	}
	return ss
}

// BenchmarkTrackerObserve is the steady state: an open incident observed
// again with the same 20-node source set.
func BenchmarkTrackerObserve(b *testing.B) {
	tr := NewTracker(nil)
	o := Observation{Graph: "g", Sources: benchSources(20)}
	tr.Observe(o)
	b.ReportAllocs()
	for b.Loop() {
		tr.Observe(o)
	}
}

func BenchmarkCredibleSet(b *testing.B) {
	ss := benchSources(200)
	b.ReportAllocs()
	for b.Loop() {
		CredibleSet(ss, DefaultMass)
	}
}

// BenchmarkPublish is one acknowledged JetStream publish of a 20-source
// alert to an in-process file-backed server.
func BenchmarkPublish(b *testing.B) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := EnsureStream(ctx, js, "sw"); err != nil {
		b.Fatal(err)
	}
	pub := NewPublisher(js, "sw")
	a, _ := NewTracker(nil).Observe(Observation{Graph: "g", Sources: benchSources(20)})
	b.ReportAllocs()
	for b.Loop() {
		a.Seq++ // a fresh id each time, or the stream would deduplicate
		a.ID = ID(a.Fingerprint, a.Seq)
		if err := pub.Publish(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
}
