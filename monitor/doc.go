// Package monitor is the streaming daemon behind `sourcewatch serve`: it
// ingests node-state events from NATS JetStream into a rolling window per
// graph, periodically localizes the sources of what the window shows, and
// publishes alerts.
//
// # Events
//
// Events arrive on <prefix>.events.<graph> as one JSON object or a JSON
// array of them:
//
//	{"node": "user-123", "state": "infected", "ts": "2026-11-22T10:00:00Z", "id": "optional"}
//
// state is infected, recovered or susceptible; ts is event time (missing:
// the JetStream arrival time, so replays see the same time). Any other key
// makes the event bad_json, as does a missing node (in an array too) and
// a body that is not UTF-8. Every bad
// message or array element is republished to <prefix>.deadletter with the
// header Sourcewatch-Reason (bad_json, unknown_graph, unknown_node,
// bad_state, future_ts, too_old, too_large, too_many_bad) and
// Sourcewatch-Subject (the original subject), and counted in
// sourcewatch_deadletters_total. An array's first 100 bad elements are
// dead-lettered one by one; beyond that the whole message is dead-lettered
// once more, with reason too_many_bad and the count in Sourcewatch-Detail,
// so a huge array of bad elements costs a bounded number of publishes. The
// good elements of an array are applied either way.
//
// # Consumers
//
// Each graph has a durable pull consumer sourcewatch-<graph> filtered on
// its own subject, so a slow graph does not hold up another. Messages on a
// subject no graph is configured for are caught by one more durable
// consumer, sourcewatch-unrouted, on <prefix>.events.> in headers-only mode:
// it sees every message but only its headers, acks routed ones in bulk, and
// fetches the body by stream sequence only for the (rare) unrouted message
// it dead-letters. A graph may therefore not be named unrouted. Acks are
// AckAll: a graph consumer acks the last message it has applied every 64
// messages and whenever nothing more is pending, so an acknowledged event
// has always been applied to the window; a message delivered again after
// it was handled (its AckWait ran out while it waited behind slow dead
// letters) is acknowledged and skipped, by both kinds of consumer. On
// shutdown the consumers drain
// for up to 10 s; a callback still busy then (dead-lettering into an
// unresponsive server) gives up and leaves its message unacknowledged, to
// be applied again, idempotently, by the next run.
//
// Both kinds are made anew at each start: a graph's from its window's
// last sequence, the unrouted one from the later of its predecessor's
// floor and the position stored with the snapshots (key
// unrouted.through, with the events stream's creation time, so a stream
// made anew is read from its start), so a consumer deleted while no
// daemon ran does not send the stream's unknown-graph events to the dead
// letters again. A
// consumer deleted under the daemon (by an operator, or lost by the
// server) is made anew the same way, a graph's at its next interval, the
// unrouted one after the last message it handled, replacing one someone
// else recreated meanwhile; what is delivered twice is dead-lettered
// under the same Nats-Msg-Id, and stored once. Consuming stops by
// itself when the deletion reaches a waiting pull; a deletion while no
// pull waited shows only as pull errors, after which the daemon asks the
// server whether the consumer exists.
//
// # Window
//
// A window keeps, per node, its state and the event time of its last
// change. With window length W and decay tau, at time now
//
//	y_v = 1                       if v is infected and now - t_v <= W (tau = 0)
//	y_v = exp(-(now - t_v)/tau)   if v is infected and now - t_v <= W (tau > 0)
//	y_v = 0                       otherwise (recovered, susceptible, expired)
//
// An event older than the node's last change is stale and does not
// override it. Two events of a node at the same time are ordered by state:
// the later in susceptible -> infected -> recovered wins (infected and
// recovered at one instant is recovered). So the window is a function of
// the set of events, not of their arrival order; applying an event twice
// is a no-op. Recent event ids are remembered too, so a duplicate id is
// dropped even when its content differs.
//
// # Durability
//
// Every snapshot_interval each window is written to the KV bucket
// sourcewatch_state (key window.<graph>) together with the stream sequence
// of the last message it covers. On start the snapshot is restored and the
// graph's consumer is recreated to deliver from the next sequence, so the
// events acknowledged after the snapshot are applied again (idempotently).
// A crash at any moment therefore loses no acknowledged event's effect, as
// long as the events stream still holds the messages after the snapshot.
// A window that has applied no event yet (a graph new to the deployment,
// or added back after its state was dropped) reads the messages stored
// since its window and max_future_skew before the start, less a minute:
// the older ones are too old for the window by their arrival times.
//
// # Inference and alerts
//
// Every interval a graph whose observation differs from the one its last
// inference saw in at least min_changes nodes (infected now and not then,
// or the other way: new infections, recoveries, infections that aged out
// of the window or came back into it) and holds at least min_infected
// infected nodes is queued; after a start or a takeover the first such tick
// infers whatever the window holds; a bounded pool of workers runs at most one inference per graph
// at a time through the graph's Localizer, and the alerts.Tracker decides
// whether the result is published on <prefix>.alerts.<graph>. When the
// window falls below min_infected an open incident is resolved. An
// inference whose source set is empty (no source above the threshold, and
// no floor: see localize.Manifest.NamesInfectedComponents, which names a
// node of every infected component) publishes nothing.
//
// No alert is lost to a failed publish. An alert the tracker makes is
// pending until the alerts stream acknowledges it: the tracker state in KV
// (key tracker), which holds the pending alerts, is saved before the first
// try (write-ahead; while that save fails nothing is published), the
// publish is tried 5 times, and then once more on every tick of the graph,
// once at shutdown, and after a restart or takeover from the saved state.
// While an alert of a graph is pending, the graph makes no new one: it
// neither infers nor resolves until the pending alert is out, so
// subscribers see every seq of an incident, in order, each with the content
// it was made with (a retry whose earlier try did land is dropped by
// JetStream's duplicate window, the id being the same). /status lists a
// graph's pending alerts apart from its last published one. Saves of the
// tracker state are serialized, so KV never goes back to an older state.
//
// A Localizer that reports Healthy() == false (its plugin process died) is
// replaced through the LocalizerFactory — at once when it fails an
// inference, which is then retried, or at the next tick when it dies
// between inferences — at most restarts times between two successful
// inferences.
//
// A reload (Daemon.Reload: SIGHUP, <prefix>.svc.reload) builds a new
// Localizer only for the graphs whose model may have changed: one that is
// healthy, whose last inference did not fail, and that reports itself
// Unchanged for the graph's new settings (for BundleLocalizers, the same
// model keys, bundle file content and plugin binary content) keeps running, plugin process included, with its
// relaunch count and the incident it inferred; the new window, decay and
// other settings apply to it all the same. The others are built, and
// swapped in together once all are; a build that fails closes those
// built and leaves everything as it ran. The reloaded log line lists the
// graphs kept (kept) beside the keys that changed (changed).
//
// Dead letters are at least once: a message redelivered after a crash is
// dead-lettered again, deduplicated by JetStream within the dead-letter
// stream's 24-hour duplicate window (or deadletter.max_age, if shorter;
// its Nats-Msg-Id is derived from the events stream's creation and the
// message's sequence); an event that aged out
// of the window while the daemon was down is dead-lettered as too_old on
// replay, where it would have counted for nothing anyway.
//
// # Service
//
// The NATS micro service "sourcewatch" answers on <prefix>.svc.localize,
// <prefix>.svc.window (the nodes a graph's window holds now),
// <prefix>.svc.status and <prefix>.svc.reload; HTTP serves /healthz,
// /readyz (NATS connected, consumers bound, localizers healthy; with
// ?graph=NAME, that graph's localizer and consumer and the daemon's
// problems that stop every graph, 404 for a graph it does not run), /status,
// /metrics (Prometheus, on a registry of the daemon's own) and, at /, a
// dashboard rendering /status and /readyz for a browser. An error answer
// echoes at most 64 bytes of a caller's graph name or node id, and an
// answer too large for the server's max_payload is replaced by a short 500
// error, so every request gets a reply.
//
// # Replicas
//
// With ha.enabled, replicas sharing a NATS server or cluster run as one
// active and the rest on standby. The active replica holds the key
// "active" of the KV bucket LeaseBucket (its id and a tag of its process,
// id#instance), whose TTL is ha.lease_ttl, and renews it every third of
// that, giving up two thirds after its last renewal; a standby retries
// Create on the key every
// quarter TTL, which succeeds once the key is deleted (the active replica
// stopped, after its final snapshot) or expired (it died). The new active
// replica then starts as after a restart: it restores the windows and the
// alert state from KV and replays the stream from the snapshot, so no
// acknowledged event is lost. A replica that finds its own id in the key
// takes it over once it has watched it go unrenewed for three quarters of
// a TTL (a restart); a live process with the same id keeps it, and the other
// stands by. A replica that cannot renew its lease, or finds another
// process in it, stops at once without writing anything and Run
// returns ErrLeaseLost; RunStandingBy (what serve runs) then stands a new
// daemon by for the lease in the same process. Replicas do not divide the
// graphs among themselves:
// the active one serves them all.
//
// # One deployment per account
//
// The streams (SOURCEWATCH_EVENTS, SOURCEWATCH_DEADLETTER,
// SOURCEWATCH_ALERTS) and buckets have fixed names, so one NATS account
// holds one deployment (its replicas included). A daemon whose
// subjects.prefix differs from the subjects of an existing stream does not
// take the stream over: Run fails with ErrStreamInUse naming the stream,
// its subjects and the prefix.
package monitor
