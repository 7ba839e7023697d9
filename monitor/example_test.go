package monitor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sourcewatch/sourcewatch/alerts"
	"github.com/sourcewatch/sourcewatch/graph"
	"github.com/sourcewatch/sourcewatch/monitor"
)

// infectedAreSources is a stand-in Localizer: it names every node the
// observation calls infected. A real one runs a bundle
// (BundleLocalizers); the daemon needs only Localize and Close.
type infectedAreSources struct{}

func (infectedAreSources) Localize(_ context.Context, y []float64) (monitor.Inference, error) {
	inf := monitor.Inference{Scores: make([]float64, len(y)), Probability: make([]float64, len(y)), Threshold: 0.5}
	for v, yv := range y {
		if yv > 0 {
			inf.Scores[v], inf.Probability[v] = 1, 1
			inf.Sources = append(inf.Sources, v)
		}
	}
	return inf, nil
}

func (infectedAreSources) Close() error { return nil }

// A Daemon runs in process with the embedded NATS server (state under a
// temporary data_dir), a graph the caller already loaded and a Localizer
// of the caller's own. One event in, one alert out; cancelling Run's
// context shuts it down cleanly, and Run returns nil.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "sourcewatch-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	g, err := graph.Read(strings.NewReader("a b\nb c\nc d\n"), "path.edges")
	if err != nil {
		log.Fatal(err)
	}

	cfg := monitor.DefaultConfig()
	cfg.DataDir = dir
	cfg.NATS.Listen = "127.0.0.1:0" // the embedded server, on a free port
	cfg.HTTP.Addr = ""              // no HTTP endpoints
	// No edges or bundle: WithGraphs gives the graph, and the factory
	// below reads no bundle.
	gc := monitor.DefaultGraphConfig("path")
	gc.Interval = 20 * time.Millisecond
	cfg.Graphs = []monitor.GraphConfig{gc}

	d, err := monitor.New(cfg,
		monitor.WithGraphs(map[string]*graph.Graph{"path": g}),
		monitor.WithLocalizerFactory(func(context.Context, monitor.GraphConfig, *graph.Graph) (monitor.Localizer, error) {
			return infectedAreSources{}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		log.Fatal(err)
	}

	nc, err := nats.Connect(d.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	event := fmt.Sprintf(`{"node":"c","state":"infected","ts":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := js.Publish(ctx, "sourcewatch.events.path", []byte(event)); err != nil {
		log.Fatal(err)
	}

	tailCtx, stopTail := context.WithTimeout(ctx, 10*time.Second)
	err = alerts.Tail(tailCtx, js, "sourcewatch", "path", func(a alerts.Alert) error {
		var nodes []string
		for _, src := range a.Sources {
			nodes = append(nodes, src.Node)
		}
		fmt.Println(a.Status, a.Graph, nodes)
		stopTail()
		return nil
	}, alerts.FromStart())
	if err != nil {
		log.Fatal(err)
	}

	// The service, with the package's request and answer types: a refused
	// request has no body, only the error headers.
	for _, req := range []monitor.LocalizeRequest{
		{Graph: "path", Infected: []string{"a", "b"}, Top: 3},
		{Graph: "path", Infected: []string{"e"}},
	} {
		body, err := json.Marshal(req)
		if err != nil {
			log.Fatal(err)
		}
		msg, err := nc.Request("sourcewatch.svc.localize", body, 2*time.Minute+5*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			fmt.Println("refused:", code, msg.Header.Get("Nats-Service-Error"))
			continue
		}
		var res monitor.LocalizeResponse
		if err := json.Unmarshal(msg.Data, &res); err != nil {
			log.Fatal(err)
		}
		fmt.Println("localized:", res.CredibleSet, len(res.Ranked), "ranked")
	}

	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// firing path [c]
	// localized: [a b] 3 ranked
	// refused: 400 unknown node: graph "path" has no node "e" (the graph's ids look like "a", "b", "c")
	// stopped: <nil>
}

// A producer publishes each event through JetStream, with Nats-Msg-Id
// set to the event's id, and retries until the events stream acknowledges
// it: a publish while the server is down (the embedded one is, while the
// daemon restarts) is otherwise lost, and a retry within the stream's
// 2-minute duplicate window is stored once (later ones the daemon drops by
// the event's id). Compiled only: it needs a daemon running.
func ExampleEvent() {
	nc, err := nats.Connect("nats://127.0.0.1:4222",
		nats.RetryOnFailedConnect(true), // wait for a server not up yet
		nats.MaxReconnects(-1))          // and through the daemon's restarts
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// "host-17 went down": ts is when it happened, by a clock kept in
	// sync (leave it zero for the arrival time); id is unique per event.
	ev := monitor.Event{Node: "host-17", State: monitor.StateInfected, TS: time.Now().UTC(), ID: "host-17-down-1"}
	data, err := json.Marshal(ev) // {"node":"host-17","state":"infected","ts":"...","id":"host-17-down-1"}
	if err != nil {
		log.Fatal(err)
	}
	msg := nats.NewMsg(monitor.EventsSubject("sourcewatch", "karate"))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = js.PublishMsg(pctx, msg)
		cancel()
		if err == nil || errors.Is(err, nats.ErrMaxPayload) {
			break // stored (a bad event is then dead-lettered, with the reason), or never will be
		}
		time.Sleep(backoff) // no server, no stream yet, or a timeout: the same message again
	}
	if err != nil {
		log.Fatal(err)
	}
}
