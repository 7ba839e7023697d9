package eval

import (
	"fmt"
)

// Note is a remark on reading a report that its table leaves to the
// reader's arithmetic: WriteTable prints each one's Text after the table,
// and the JSON holds them as "notes" (absent when there are none), so a
// report read by a program says the same as the one read on a terminal.
type Note struct {
	// Kind says what the note is about: NoteEmptyPredictions.
	Kind string `json:"kind"`
	// Method is the row the note is about.
	Method string `json:"method"`
	// Text is the note as the table prints it.
	Text string `json:"text"`
}

// The kinds of Note.
const (
	// NoteEmptyPredictions: the method named no source on at least
	// EmptyNoteShare of the test cascades.
	NoteEmptyPredictions = "empty_predictions"
)

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
	var out []Note
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
