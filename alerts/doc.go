// Package alerts defines sourcewatch's alert schema and lifecycle, and
// publishes and tails alerts on NATS JetStream.
//
// # Schema
//
// An alert is one JSON object on the subject <prefix>.alerts.<graph>
// (prefix "sourcewatch" by default), kept in the JetStream stream
// SOURCEWATCH_ALERTS so that a late subscriber can replay it. Times are
// RFC 3339 in UTC, with as many fraction digits as needed (none to nine:
// parse them, do not compare them as strings). The window's times are the
// events' own (producers' clocks, up to max_future_skew ahead of the
// daemon's); observed_at is the daemon's.
//
//	{
//	  "schema": "sourcewatch.alert.v1",
//	  "id": "<fingerprint>-<seq>",            unique per published alert
//	  "fingerprint": "<32 hex>",              one per incident
//	  "status": "firing" | "updated" | "resolved",
//	  "graph": "jazz",
//	  "window": {"from": "...Z", "to": "...Z"},
//	  "infected": 57,                          infected nodes in the window
//	  "sources": [{"node": "12", "score": 0.83, "probability": 0.41, "chance": 0.35}, ...],
//	  "credible_set": ["12", "7"],             see CredibleSet, mass 0.9
//	  "threshold": 0.5,                        score cut that chose the sources
//	  "model": {"bundle": "...", "forward": "deepis", "forward_version": "1.1.0"},
//	  "inference_ms": 12.5,
//	  "note": "...",                           only when there is something to say
//	  "expected_sources": 19.4,                sum of every node's chance (with chance)
//	  "sources_omitted": 40,                   only when sources were left out to fit max_payload
//	  "seq": 1,                                per incident: 1 = firing
//	  "observed_at": "...Z"
//	}
//
// Sources are ranked as the model ranked them; they are the source set. The
// credible set is the smallest prefix of the sources ranked by probability
// holding 90% of their total probability. An alert that would not fit the
// server's max_payload keeps its highest-ranked sources and the credible
// set less the nodes it left out (FitSources). A source's probability is
// the share of the inference's restarts that named it, how steady the
// answer is; its chance, where the model measures it, is how often such a
// node was a source on cascades the model solved for that, and
// expected_sources the sum of every node's chance.
//
// # Lifecycle
//
// Per graph there is at most one open incident. The first observation opens
// it and publishes "firing" with seq 1; a later observation whose source set
// (the node ids, order-insensitive) differs publishes "updated" with the next
// seq; an observation with the same set publishes nothing. Resolve publishes
// "resolved" with the next seq and closes the incident; the next observation
// opens a new incident with a new fingerprint.
//
// The fingerprint hashes the graph, the time the incident first fired and the
// graph's incident number (see Fingerprint), so it is stable across the
// incident's updates and its resolve. The id, fingerprint + "-" + seq, is
// also the Nats-Msg-Id, so JetStream drops a republish after a crash (within
// the stream's duplicate window). The Tracker's state is saved with
// MarshalJSON and restored with UnmarshalJSON across restarts.
//
// Every alert Observe or Resolve hands out is also queued as pending
// (Tracker.Pending) until Tracker.Published acknowledges it, and the queue
// is part of the saved state. A publisher that saves the state before
// publishing and acknowledges after the stream's ack, as the monitor does,
// resends an alert whose publish failed, later or after a restart, under
// the same id; so no alert handed out is lost, and no seq is reused for
// other content.
//
// # Stream, publishing and tailing
//
// EnsureStream creates or updates SOURCEWATCH_ALERTS (subjects
// <prefix>.alerts.>, file storage, by default alerts kept 7 days with no
// size cap, 24 h duplicate window; WithMaxAge, WithMaxBytes and
// WithReplicas change the limits, the daemon's alerts.* and
// events.replicas keys). A Publisher sends each alert with the headers Nats-Msg-Id (the
// id), Sourcewatch-Schema and Sourcewatch-Status, and waits for the stream's
// acknowledgement. Tail follows the stream with an ordered consumer, one
// graph or all, from new alerts on (default), FromStart or Since a time;
// `sourcewatch alerts tail` is its command line. With the nats CLI:
//
//	nats sub 'sourcewatch.alerts.>'
//	nats stream get SOURCEWATCH_ALERTS 1   # by sequence; view pages on a terminal
//
// # Versioning
//
// The schema field names the version. Additive changes (a new field) keep
// sourcewatch.alert.v1, so consumers must ignore fields they do not know. Removing, renaming or
// changing the meaning or type of a field bumps the version
// (sourcewatch.alert.v2). Decode, and so Tail and Last, rejects alerts of
// another version (ErrSchema) rather than misreading them.
package alerts
