package monitor

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/sourcewatch/sourcewatch/graph"
)

const benchEvents = 20000

// benchStream fills a standalone server's events stream with benchEvents
// events for graph "p" (1000 nodes), perMsg events per message.
func benchStream(b *testing.B, perMsg int) (jetstream.JetStream, jetstream.Stream, Config) {
	s := runServer(b)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	cfg := DefaultConfig()
	cfg.Graphs = []GraphConfig{DefaultGraphConfig("p")}
	cfg.Graphs[0].Edges, cfg.Graphs[0].Bundle = "x", "x"
	stream, _, err := ensureJetStream(context.Background(), js, cfg, zap.NewNop())
	require.NoError(b, err)
	now := time.Now()
	batch := make([]Event, 0, perMsg)
	var futures []jetstream.PubAckFuture
	for i := range benchEvents {
		batch = append(batch, Event{Node: strconv.Itoa(i % 1000), State: StateInfected, TS: now.Add(time.Duration(i) * time.Millisecond)})
		if len(batch) < perMsg {
			continue
		}
		var data []byte
		if perMsg == 1 {
			data, err = json.Marshal(batch[0])
		} else {
			data, err = json.Marshal(batch)
		}
		require.NoError(b, err)
		f, err := js.PublishAsync(EventsSubject(DefaultPrefix, "p"), data)
		require.NoError(b, err)
		futures = append(futures, f)
		batch = batch[:0]
	}
	<-js.PublishAsyncComplete()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	return js, stream, cfg
}

// BenchmarkIngest compares the daemon's ingest path (consume, decode,
// check, apply to the window, batched AckAll) with a raw JetStream
// consumer that only acknowledges the same messages the same way, on the
// same stream in the same run. Each iteration runs both, alternating, so
// the machine's load affects them alike. Reported: events/s of each and
// their ratio.
func BenchmarkIngest(b *testing.B) {
	for _, perMsg := range []int{1, 100} {
		b.Run("events_per_msg="+strconv.Itoa(perMsg), func(b *testing.B) {
			js, stream, cfg := benchStream(b, perMsg)
			last := uint64(benchEvents / perMsg)
			g := pathGraph(b, 1000)
			var raw, sw time.Duration
			for i := 0; i < b.N; i++ {
				raw += rawConsume(b, stream, last)
				sw += daemonConsume(b, js, stream, cfg, g, last)
			}
			rawRate := float64(benchEvents*b.N) / raw.Seconds()
			swRate := float64(benchEvents*b.N) / sw.Seconds()
			b.ReportMetric(rawRate, "raw_events/s")
			b.ReportMetric(swRate, "sourcewatch_events/s")
			b.ReportMetric(swRate/rawRate, "ratio")
		})
	}
}

func rawConsume(b *testing.B, stream jetstream.Stream, last uint64) time.Duration {
	ctx := context.Background()
	_ = stream.DeleteConsumer(ctx, "raw")
	start := time.Now()
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckAllPolicy, MaxAckPending: maxAckPending,
		FilterSubject: EventsSubject(DefaultPrefix, "p"),
	})
	require.NoError(b, err)
	done := make(chan struct{})
	var seen atomic.Uint64
	since := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		since++
		if since >= ackEvery || meta.NumPending == 0 {
			_ = m.Ack()
			since = 0
		}
		if seen.Add(1) == last {
			close(done)
		}
	}, jetstream.PullMaxMessages(consumeBatch))
	require.NoError(b, err)
	<-done
	took := time.Since(start)
	cc.Stop()
	return took
}

func daemonConsume(b *testing.B, js jetstream.JetStream, stream jetstream.Stream, cfg Config, g *graph.Graph, last uint64) time.Duration {
	d, err := New(cfg, WithClock(func() time.Time { return time.Now().Add(10 * time.Second) }))
	require.NoError(b, err)
	d.js, d.stream = js, stream
	d.limiter = newLogLimiter(time.Hour, time.Now, zap.NewNop())
	gc := cfg.Graphs[0]
	gc.Window, gc.Decay = time.Hour, 0
	gr := d.newGraphRT(gc, g)
	d.graphs = map[string]*graphRT{"p": gr}
	d.order = []*graphRT{gr}
	// As for the raw consumer, the previous iteration's consumer is
	// deleted outside the timed part.
	_ = stream.DeleteConsumer(context.Background(), consumerName("p"))
	start := time.Now()
	require.NoError(b, d.startConsumers(context.Background()))
	for {
		if _, _, s := gr.win.counts(); s >= last {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	took := time.Since(start)
	d.stopConsumers(false)
	if got := value(b, d.metrics.events.WithLabelValues("p", "deadletter")); got != 0 {
		b.Fatalf("%v dead letters", got)
	}
	return took
}

// applyBench is the ingest path without NATS for a graph "p" of 1,000
// nodes: a daemon for its checks and a window to apply to.
type applyBench struct {
	d          *Daemon
	gr         *graphRT
	now        time.Time
	minT, maxT time.Time
}

func newApplyBench(b *testing.B) *applyBench {
	g := pathGraph(b, 1000)
	c := DefaultConfig()
	c.Graphs = []GraphConfig{DefaultGraphConfig("p")}
	c.Graphs[0].Edges, c.Graphs[0].Bundle = "x", "x"
	d, err := New(c)
	require.NoError(b, err)
	now := time.Now()
	return &applyBench{
		d: d, gr: &graphRT{name: "p", g: g, win: newWindow(g, time.Hour, 0)}, now: now,
		minT: now.Add(-time.Hour), maxT: now.Add(time.Hour),
	}
}

// run decodes, checks and applies each message of msgs in turn, b.N
// messages in all.
func (ab *applyBench) run(b *testing.B, msgs [][]byte) {
	var scratch []decoded
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		els, _ := decodeMessage(scratch, msgs[i%len(msgs)])
		scratch = els
		for k := range els {
			ab.d.check(ab.gr, &els[k], ab.now, ab.minT, ab.maxT)
			ab.gr.win.apply(els[k].node, els[k].state, els[k].ts, els[k].ev.ID)
		}
	}
}

// BenchmarkApplyPath is the per-message work of ingest without NATS:
// decode, check and apply one event.
func BenchmarkApplyPath(b *testing.B) {
	ab := newApplyBench(b)
	msgs := make([][]byte, 1000)
	for i := range msgs {
		msgs[i], _ = json.Marshal(Event{Node: strconv.Itoa(i), State: StateInfected, TS: ab.now.Add(time.Duration(i) * time.Millisecond)})
	}
	ab.run(b, msgs)
}

// BenchmarkApplyPathArray is BenchmarkApplyPath for a message holding an
// array of 100 events; reported per event.
func BenchmarkApplyPathArray(b *testing.B) {
	ab := newApplyBench(b)
	msgs := make([][]byte, 10)
	for i := range msgs {
		evs := make([]Event, 100)
		for k := range evs {
			evs[k] = Event{Node: strconv.Itoa(i*100 + k), State: StateInfected, TS: ab.now.Add(time.Duration(i*100+k) * time.Millisecond)}
		}
		msgs[i], _ = json.Marshal(evs)
	}
	ab.run(b, msgs)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/event")
}
