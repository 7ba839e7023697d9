package alerts

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Schema is the value of every alert's "schema" field. See the package
// documentation for the versioning rule.
const Schema = "sourcewatch.alert.v1"

// DefaultMass is the probability mass the monitor's credible set holds.
const DefaultMass = 0.9

// Status is where an incident is in its lifecycle.
type Status string

// The lifecycle: an incident fires once, is updated each time its source set
// changes, and resolves once.
const (
	Firing   Status = "firing"
	Updated  Status = "updated"
	Resolved Status = "resolved"
)

// Source is one ranked suspect.
type Source struct {
	Node string `json:"node"`
	// Score is the model's ranking score, in [0, 1] as the schema has it;
	// an alert's sources are ordered by it, best first.
	Score float64 `json:"score"`
	// Probability is the share of the inference's restarts that named the
	// node: how steady the answer is, not how often such an answer is
	// right (see Chance).
	Probability float64 `json:"probability"`
	// Chance is the node's chance of being a source, as the model
	// measured it on cascades of its own: of the nodes there with a score
	// like its own (and observed as it was, infected or not), the
	// fraction that were sources. Absent when the model does not measure
	// it (a bundle of format 6 or older).
	Chance *float64 `json:"chance,omitempty"`
	// Floor marks a source the model named below the threshold because
	// the observation demands it: a lone infected node (no infected
	// in-neighbour), a source where nothing recovers and every infection
	// is observed, or the first-ranked node of an infected component the
	// threshold left without a source, each of which holds one.
	Floor bool `json:"floor,omitempty"`
}

// Window is the observation window an alert was computed from.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// ModelRef names what produced an alert's sources.
type ModelRef struct {
	Bundle         string `json:"bundle"`
	Forward        string `json:"forward"`
	ForwardVersion string `json:"forward_version"`
}

// Alert is one published message on <prefix>.alerts.<graph>.
type Alert struct {
	Schema      string   `json:"schema"`
	ID          string   `json:"id"`
	Fingerprint string   `json:"fingerprint"`
	Status      Status   `json:"status"`
	Graph       string   `json:"graph"`
	Window      Window   `json:"window"`
	Infected    int      `json:"infected"`
	Sources     []Source `json:"sources"`
	CredibleSet []string `json:"credible_set"`
	Threshold   float64  `json:"threshold"`
	Model       ModelRef `json:"model"`
	InferenceMS float64  `json:"inference_ms"`
	// Note says what the alert's reader should know about the answer,
	// such as an observation far smaller than the model was trained on;
	// absent when there is nothing to say.
	Note string `json:"note,omitempty"`
	// ExpectedSources is the sum over every node of the graph of its
	// Chance: how many sources the model expects this observation to
	// have, against the len(Sources) it names. Absent with Chance.
	ExpectedSources *float64 `json:"expected_sources,omitempty"`
	// SourcesOmitted is how many of the source set's lowest-ranked nodes
	// were left out of Sources (and so of CredibleSet) for the alert to
	// fit the largest message the server takes (Observation.MaxBytes);
	// absent when none was.
	SourcesOmitted int       `json:"sources_omitted,omitempty"`
	Seq            uint64    `json:"seq"`
	ObservedAt     time.Time `json:"observed_at"`
}

// Observation is one inference result for a graph, as the monitor hands it
// to the Tracker. Sources is the ranked source set: its node ids are what
// decides whether an open incident changed.
type Observation struct {
	Graph       string
	Window      Window
	Infected    int
	Sources     []Source
	Threshold   float64
	Model       ModelRef
	InferenceMS float64
	Note        string
	// ExpectedSources is Alert.ExpectedSources, nil when the model does
	// not measure the chance.
	ExpectedSources *float64
	// MaxBytes is the largest alert, JSON-encoded, that can be published
	// (the server's max_payload less room for headers); 0 for no limit.
	// The lowest-ranked sources are left out until the alert fits, and
	// the alert says how many (SourcesOmitted, and in Note): an alert
	// over the limit could never be published, and its incident would
	// neither update nor resolve.
	MaxBytes int
}

// FitSources returns a with the fewest of its lowest-ranked sources left
// out (counted in SourcesOmitted, said in Note) for its encoding, with
// room for the fields set after it (id, fingerprint, status), to hold at
// most maxBytes; a as it is when it fits or maxBytes is 0. Its
// CredibleSet is then the whole answer's less the nodes left out. Left
// with no source and still too large, it is returned so, for the publish
// to fail with the size. An alert fitted before to a larger limit is
// fitted again from what it kept, its count and note made anew.
func FitSources(a Alert, maxBytes int) Alert {
	if maxBytes <= 0 {
		return a
	}
	// Room for the id, fingerprint and status an alert made by Observe
	// gets after it is fitted; none for one that has them (counted twice,
	// an alert fitted when made lost one more source as it went out).
	idRoom := 0
	if a.ID == "" {
		idRoom = 256
	}
	all, note := a.Sources, a.Note
	before := a.SourcesOmitted
	if before > 0 {
		// The sentence need not end the note: the daemon's own note
		// follows it on an alert fitted when made and again as it goes out.
		note = strings.TrimPrefix(omittedNoteRE.ReplaceAllString(note, ""), "; ")
	}
	// The credible set of the whole answer (a's own, made with it), less
	// the nodes left out: of the kept ones alone, 90% of a smaller total
	// could take in a node the whole answer's set does not hold.
	full := a.CredibleSet
	credible := func(k int) []string {
		if k == len(all) {
			return full
		}
		kept := make(map[string]bool, k)
		for _, s := range all[:k] {
			kept[s.Node] = true
		}
		return slices.DeleteFunc(slices.Clone(full), func(n string) bool { return !kept[n] })
	}
	size := func(k int) int {
		b := a
		b.Sources = all[:k]
		b.CredibleSet = credible(k)
		if k < len(all) {
			b.SourcesOmitted = before + len(all) - k
			b.Note = omittedNote(note, b.SourcesOmitted, before+len(all), maxBytes)
		}
		data, err := json.Marshal(b)
		if err != nil {
			return math.MaxInt
		}
		return len(data) + idRoom
	}
	if size(len(all)) <= maxBytes {
		return a
	}
	// The largest k that fits: size grows with k.
	k := sort.Search(len(all), func(k int) bool { return size(k+1) > maxBytes })
	a.Sources = slices.Clone(all[:k])
	a.CredibleSet = credible(k)
	a.SourcesOmitted = before + len(all) - k
	a.Note = omittedNote(note, a.SourcesOmitted, before+len(all), maxBytes)
	return a
}

// omittedNoteRE matches what omittedNote adds to a note.
var omittedNoteRE = regexp.MustCompile(`(; )?the \d+ lowest-ranked of \d+ sources are left out: with them the alert would be over the \d+ bytes the server takes \(max_payload\)`)

func omittedNote(note string, omitted, total, maxBytes int) string {
	s := fmt.Sprintf("the %d lowest-ranked of %d sources are left out: with them the alert would be over the %d bytes the server takes (max_payload)", omitted, total, maxBytes)
	if note == "" {
		return s
	}
	return note + "; " + s
}

// utc normalizes every time in a to UTC and replaces nil slices by empty
// ones, so that the JSON form is RFC 3339 UTC with [] rather than null.
func (a Alert) utc() Alert {
	a.Window.From = a.Window.From.UTC()
	a.Window.To = a.Window.To.UTC()
	a.ObservedAt = a.ObservedAt.UTC()
	if a.Sources == nil {
		a.Sources = []Source{}
	}
	if a.CredibleSet == nil {
		a.CredibleSet = []string{}
	}
	return a
}

// CredibleSet returns the node ids of the smallest prefix of sources, ranked
// by probability descending (ties by score descending, then node id
// ascending), whose probabilities sum to at least mass times the total:
//
//	k* = min{ k : sum_{i<=k} p_(i) >= mass * sum_i p_i }
//
// Negative and NaN probabilities count as 0. An empty or all-zero total, or
// mass <= 0 (or NaN), gives an empty set; mass above 1 is treated as 1.
// The sources slice is not modified.
func CredibleSet(sources []Source, mass float64) []string {
	out := []string{}
	if !(mass > 0) {
		return out
	}
	mass = min(mass, 1)
	ranked := slices.Clone(sources)
	slices.SortStableFunc(ranked, func(a, b Source) int {
		if c := cmp.Compare(prob(b), prob(a)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Node, b.Node)
	})
	var total float64
	for _, s := range ranked {
		total += prob(s)
	}
	if !(total > 0) || math.IsInf(total, 0) {
		return out
	}
	// The tolerance keeps rounding from demanding one more (zero-probability)
	// node when mass is 1 and the running sum lands an ulp short of total.
	target := mass*total - 1e-12*total
	var cum float64
	for _, s := range ranked {
		if cum >= target {
			break
		}
		cum += prob(s)
		out = append(out, s.Node)
	}
	return out
}

func prob(s Source) float64 {
	if s.Probability > 0 {
		return s.Probability
	}
	return 0
}
