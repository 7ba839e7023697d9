package eval

import (
	"fmt"
	"math"
	"strings"
)

// Note is a remark on reading a report that its table leaves to the
// reader's arithmetic: WriteTable prints each one's Text after the table,
// and the JSON holds them as "notes" (absent when there are none), so a
// report read by a program says the same as the one read on a terminal.
type Note struct {
	// Kind says what the note is about: NoteEmptyPredictions,
	// NoteBeatsSLVAE or NoteCeiling.
	Kind string `json:"kind"`
	// Method is the row the note is about.
	Method string `json:"method"`
	// Versus is, for NoteBeatsSLVAE, the SL-VAE row Method beats.
	Versus string `json:"versus,omitempty"`
	// Text is the note as the table prints it.
	Text string `json:"text"`
}

// The kinds of Note.
const (
	// NoteEmptyPredictions: the method named no source on at least
	// EmptyNoteShare of the test cascades.
	NoteEmptyPredictions = "empty_predictions"
	// NoteBeatsSLVAE: the method, a baseline or a control, has a higher
	// mean ROC-AUC or F1 than slvae (or an slvae[plugin] row).
	NoteBeatsSLVAE = "beats_slvae"
	// NoteCeiling: with the bayes control and infected in the report, the
	// most any method can lead infected by, and each method's share of it.
	NoteCeiling = "ceiling"
)

// ceilingMethod is the control that is a ceiling, not a reference point
// to beat: no method is expected to, and its lead over SL-VAE is the
// ceiling note's, not a verdict on SL-VAE.
const ceilingMethod = "bayes"

// EmptyNoteShare is the share of test cascades on which a method named no
// source from which the report says what that does to its F1. An empty
// set scores F1 0, so a method that names nothing on a share s of the
// cascades has an F1 mean of (1 - s) times its F1 where it names
// something: at one cascade in five a fifth of that F1 is lost to
// abstaining, enough to reorder the F1 column, which then ranks how often
// a method names anything as much as where. A few empty sets (a
// threshold rule on the smallest outbreaks) are normal and said by the
// table's empty column alone.
const EmptyNoteShare = 0.2

// notes are the report's Notes, computed from its rows: Run stores them
// in the report, and WriteTable prints them afresh from the rows, so a
// Report built or decoded elsewhere (a library user's, one read back from
// an older JSON file) is printed with them too.
func (r *Report) notes() []Note {
	// What beats SL-VAE first: the most important thing to say.
	out := r.beatsSLVAENotes()
	if n, ok := r.ceilingNote(); ok {
		out = append(out, n)
	}
	for _, res := range r.Results {
		if n, ok := emptyNote(res); ok {
			out = append(out, n)
		}
	}
	return out
}

// emptyNote says, for a method that named no source on at least
// EmptyNoteShare of the test cascades, how many and what that means for
// its F1: each such cascade scores F1 0, so the F1 mean mixes how well the
// method names sources with how often it names any. Its F1 on the other
// cascades follows from the mean exactly, those cascades adding 0 to the
// sum. AUC reads the scores, which every prediction has, and is
// untouched.
func emptyNote(res Result) (Note, bool) {
	// F1 is defined on every cascade (0 for an empty set), so its count
	// is the test cascades'.
	total := res.F1.N + res.F1.Undefined
	if res.EmptyPredictions == 0 || total == 0 || float64(res.EmptyPredictions) < EmptyNoteShare*float64(total) {
		return Note{}, false
	}
	text := fmt.Sprintf("%s: named no source on %d of %s (%.0f%%); each scores F1 0 (precision and recall 0, and the error-distance penalty)",
		res.Method, res.EmptyPredictions, testCascades(total), 100*float64(res.EmptyPredictions)/float64(total))
	if rest := res.F1.N - res.EmptyPredictions; rest > 0 && res.F1.Undefined == 0 {
		text += fmt.Sprintf(", so its F1 %.3f counts how often it names nothing as well as how well it names: on the other %d its F1 is %.3f",
			res.F1.Mean, rest, res.F1.Mean*float64(res.F1.N)/float64(rest))
	}
	text += "; its AUC ranks every node whatever the set, and is unaffected"
	return Note{Kind: NoteEmptyPredictions, Method: res.Method, Text: text}, true
}

// beatsSLVAENotes name the methods that beat SL-VAE on the mean ROC-AUC
// or F1, and by how much: on a graph the project was not tuned on, a
// baseline or a control can, and the table leaves a reader to find that
// by comparing columns. The SL-VAE rows are slvae's, under its own name or
// a plugin's ("slvae[gat]"); the rows compared with them are every other
// method run but SL-VAE's own (its schedules, ablations and plugins are
// compared with it by design), the controls first: a control beating
// SL-VAE says it does not localize here at all, the most important thing
// a report can say. A lead that rounds to 0.000 is a tie, not a lead.
// Where the report holds a paired interval of the two (one of them was
// --paired-with), the note says whether 0 lies within it; it builds no
// statistics of its own.
func (r *Report) beatsSLVAENotes() []Note {
	var slvae, controls, others []Result
	for _, res := range r.Results {
		switch {
		case res.Method == "slvae" || strings.HasPrefix(res.Method, "slvae["):
			slvae = append(slvae, res)
		case hasForwardModel(res.Method), res.Method == ceilingMethod:
		case res.Control:
			controls = append(controls, res)
		default:
			others = append(others, res)
		}
	}
	rivals := append(controls, others...)
	var out []Note
	for _, s := range slvae {
		for _, c := range rivals {
			if n, ok := beatsNote(s, c); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// beatsNote is the note that rival c beats SL-VAE row s, if it does.
func beatsNote(s, c Result) (Note, bool) {
	type metric struct {
		name     string
		of       func(Result) Stat
		diff     func(Paired) Difference
		choiceOf string
	}
	metrics := []metric{
		{"ROC-AUC", func(r Result) Stat { return r.AUC }, func(p Paired) Difference { return p.AUC }, "a ranking of suspects"},
		{"F1", func(r Result) Stat { return r.F1 }, func(p Paired) Difference { return p.F1 }, "a set of suspects"},
	}
	var parts, won []string
	// sure: every lead won has a paired interval clear of 0; a lead
	// without one, or with 0 inside, may be noise, and the verdict says so.
	paired, sure := false, true
	for _, m := range metrics {
		cs, ss := m.of(c), m.of(s)
		lead := cs.Mean - ss.Mean
		// Below 0.0005 the lead prints as +0.000: a tie (as the paired
		// lines' verdict reads it).
		if cs.N == 0 || ss.N == 0 || math.IsNaN(lead) || lead < 0.0005 {
			continue
		}
		// Three decimals, as the table; four where three print the two
		// means alike, or a lead other than their printed difference
		// (0.8775 vs 0.8752 read "0.878 vs 0.875 (+0.002)").
		prec := 3
		r3 := func(v float64) float64 { return math.Round(v*1000) / 1000 }
		if r3(cs.Mean) == r3(ss.Mean) || fmt.Sprintf("%.3f", r3(cs.Mean)-r3(ss.Mean)) != fmt.Sprintf("%.3f", lead) {
			prec = 4
		}
		part := fmt.Sprintf("%s %.*f vs %.*f (+%.*f", m.name, prec, cs.Mean, prec, ss.Mean, prec, lead)
		d, ok := pairedOf(s, c, m.diff)
		paired = paired || ok
		if !ok || d.N < 2 || math.IsNaN(d.Mean) || math.IsNaN(d.CI95) || d.Mean-d.CI95 <= 0 {
			sure = false
		}
		switch {
		case !ok || d.N == 0 || math.IsNaN(d.Mean):
			// no interval, or no cascade defined the difference
		case d.N < 2 || math.IsNaN(d.CI95):
			part += "; paired " + d.String()
		case d.Mean-d.CI95 <= 0 && 0 <= d.Mean+d.CI95:
			part += "; paired " + d.String() + ", 0 within its 95% interval: it may be noise"
		case d.Mean > 0:
			part += "; paired " + d.String() + ", its 95% interval clear of 0"
		default:
			// the cascades' pairing reverses the means' order (recorded
			// cascades, each counted once): the interval speaks for itself
			part += "; paired " + d.String()
		}
		parts = append(parts, part+")")
		won = append(won, m.choiceOf)
	}
	if len(parts) == 0 {
		return Note{}, false
	}
	what := "choice"
	if len(won) == 1 {
		what = "choice for " + won[0]
	}
	lead := strings.Join(parts, ", ")
	if !paired {
		lead += fmt.Sprintf(", no paired interval (--paired-with %s gives one)", c.Method)
	}
	does, is := "does", "is"
	if !sure {
		does, is = "may do", "may be"
	}
	var text string
	if c.Control {
		text = fmt.Sprintf("%s, a control, beats %s here: %s; %s %s no better than a reference point on this graph and setting, where %s %s the better %s",
			c.Method, s.Method, lead, s.Method, does, c.Method, is, what)
	} else {
		text = fmt.Sprintf("%s beats %s here: %s; on this graph and setting %s %s the better %s",
			c.Method, s.Method, lead, c.Method, is, what)
	}
	return Note{Kind: NoteBeatsSLVAE, Method: c.Method, Versus: s.Method, Text: text}, true
}

// ceilingNote says, when the report holds the bayes control (the exact
// posterior, the best ROC-AUC any method can expect) and infected, how
// far apart the two are, which is the most any method can lead infected
// by on these cascades, and the share of it each method's lead takes.
func (r *Report) ceilingNote() (Note, bool) {
	var ceiling, infected *Result
	for i, res := range r.Results {
		switch res.Method {
		case ceilingMethod:
			ceiling = &r.Results[i]
		case "infected":
			infected = &r.Results[i]
		}
	}
	if ceiling == nil || infected == nil || ceiling.AUC.N == 0 || infected.AUC.N == 0 {
		return Note{}, false
	}
	most := ceiling.AUC.Mean - infected.AUC.Mean
	text := fmt.Sprintf("%s, the exact posterior, is the ceiling: the most any method can lead infected by here is %+.3f ROC-AUC (%s %.3f, infected %.3f)",
		ceilingMethod, most, ceilingMethod, ceiling.AUC.Mean, infected.AUC.Mean)
	if most >= 0.0005 {
		var shares []string
		for _, res := range r.Results {
			if res.Control || res.AUC.N == 0 {
				continue
			}
			lead := res.AUC.Mean - infected.AUC.Mean
			shares = append(shares, fmt.Sprintf("%s %+.3f (%.0f%%)", res.Method, lead, 100*lead/most))
		}
		if len(shares) > 0 {
			text += "; of it " + strings.Join(shares, ", ")
		}
	}
	return Note{Kind: NoteCeiling, Method: ceilingMethod, Text: text}, true
}

// pairedOf is the paired difference c - s of one metric where the report
// holds one: c's own comparison with s, or s's with c turned round.
func pairedOf(s, c Result, diff func(Paired) Difference) (Difference, bool) {
	switch {
	case c.Paired != nil && c.Paired.Reference == s.Method:
		return diff(*c.Paired), true
	case s.Paired != nil && s.Paired.Reference == c.Method:
		d := diff(*s.Paired)
		d.Mean = -d.Mean
		return d, true
	}
	return Difference{}, false
}
