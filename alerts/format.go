package alerts

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"golang.org/x/text/width"
)

// Format writes a readable multi-line rendering of a: a headline with
// status, graph, time and seq; the id, window, infected count, credible set,
// model, threshold and inference time; then the ranked sources as a table
// with the credible set's members marked "*".
func Format(w io.Writer, a Alert) error {
	var buf bytes.Buffer
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return visible(s)
	}
	credible := "-"
	if len(a.CredibleSet) > 0 {
		// Each member on its own, as in the table: the list quoted whole
		// hid where one id ended and the next began ("a, b" and "c").
		members := make([]string, len(a.CredibleSet))
		for i, n := range a.CredibleSet {
			members[i] = visible(n)
		}
		credible = strings.Join(members, ", ")
	}
	fmt.Fprintf(&buf, "%s %s at %s (seq %d)\n", visible(strings.ToUpper(string(a.Status))), orDash(a.Graph), ts(a.ObservedAt), a.Seq)
	// Writes into a bytes.Buffer cannot fail, so tabwriter's errors are moot.
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  id\t%s\n", orDash(a.ID))
	fmt.Fprintf(tw, "  window\t%s .. %s\n", ts(a.Window.From), ts(a.Window.To))
	fmt.Fprintf(tw, "  infected\t%d\n", a.Infected)
	// The count is of the table's rows, said so: "2 of 3 sources" read as
	// a count of the true sources.
	switch len(a.Sources) {
	case 0:
		fmt.Fprintf(tw, "  credible set\t%s\n", credible)
	case 1:
		fmt.Fprintf(tw, "  credible set\t%s (%d of the 1 row below, marked *)\n", credible, len(a.CredibleSet))
	default:
		fmt.Fprintf(tw, "  credible set\t%s (%d of the %d rows below, marked *)\n", credible, len(a.CredibleSet), len(a.Sources))
	}
	fmt.Fprintf(tw, "  model\tbundle %s, forward %s %s\n", orDash(a.Model.Bundle), orDash(a.Model.Forward), orDash(a.Model.ForwardVersion))
	fmt.Fprintf(tw, "  threshold\t%s, inference %s ms\n", num(a.Threshold), strconv.FormatFloat(a.InferenceMS, 'f', 1, 64))
	if a.Note != "" {
		fmt.Fprintf(tw, "  note\t%s\n", visible(a.Note))
	}
	if e := a.ExpectedSources; e != nil {
		fmt.Fprintf(tw, "  expected\t%s sources (the sum of every node's chance of being one)\n", strconv.FormatFloat(*e, 'f', 1, 64))
	}
	if n := floorSources(a.Sources); n > 0 {
		fmt.Fprintf(tw, "  floor\t%d below the threshold, as the observation demands: a lone infected node is a source, and every infected component holds one (marked +)\n", n)
	}
	_ = tw.Flush()
	if len(a.Sources) == 0 {
		buf.WriteString("  no sources\n")
	} else {
		inSet := make(map[string]bool, len(a.CredibleSet))
		for _, n := range a.CredibleSet {
			inSet[n] = true
		}
		// The chance column appears when any source has one: a model
		// that measures it gives it to every node.
		withChance := slices.ContainsFunc(a.Sources, func(s Source) bool { return s.Chance != nil })
		header := []string{"rank", "node", "score", "probability"}
		if withChance {
			header = append(header, "chance")
		}
		rows := [][]string{append(header, "")}
		for i, s := range a.Sources {
			mark := ""
			if inSet[s.Node] {
				mark = "*"
			}
			if s.Floor {
				mark += "+"
			}
			row := []string{strconv.Itoa(i + 1), visible(s.Node), num(s.Score), fmt.Sprintf("%.3f", s.Probability)}
			if withChance {
				chance := "-"
				if s.Chance != nil {
					chance = fmt.Sprintf("%.3f", *s.Chance)
				}
				row = append(row, chance)
			}
			rows = append(rows, append(row, mark))
		}
		// Widths in terminal columns, so a node id in Chinese or Japanese
		// keeps the columns after it in line, which text/tabwriter does not.
		_ = WriteRightAligned(&buf, "      ", rows)
	}
	// Right-aligned columns leave trailing blanks; drop them.
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	if _, err := io.WriteString(w, out.String()); err != nil {
		return fmt.Errorf("alerts: writing %s: %w", a.ID, err)
	}
	return nil
}

// visible returns s, or where s holds a control character s quoted as
// a Go string ("12\x1b]0;x\a", backslashes doubled, so a literal
// backslash cannot pass for an escape): an alert is read from a stream
// anyone allowed to publish on its subject can write, and a terminal
// would act on an escape sequence in a node id or note instead of
// showing it. A field that begins with a double quote is quoted too, so
// text written to look quoted ("12\x1b]0;x\a" with a literal backslash)
// cannot pass for a quoted control character either. So is a field
// with a bidirectional formatting character (U+202E RIGHT-TO-LEFT
// OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE, ...): a terminal would lay out
// the rest of the line right to left, and one node id could show as
// another ("12\u202e34" as "1243").
func visible(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return strconv.Quote(s)
}

// unsafeRune reports a rune a terminal acts on rather than shows as
// written: a control character or a bidirectional formatting one.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// TextWidth is how many terminal columns s takes: two for an East Asian wide
// or fullwidth character (golang.org/x/text/width's classes: CJK
// ideographs, Hiragana and Katakana, Hangul syllables, fullwidth forms),
// none for a combining mark or a format character (a zero-width joiner),
// one for any other.
func TextWidth(s string) int {
	n := 0
	for _, r := range s {
		switch k := width.LookupRune(r).Kind(); {
		case unicode.Is(unicode.Mn, r), unicode.Is(unicode.Me, r), unicode.Is(unicode.Cf, r):
		case k == width.EastAsianWide, k == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}

// WriteRightAligned writes rows as a table of right-aligned columns two
// spaces apart, each line starting with indent, widths in terminal
// columns (TextWidth). For text of one column a character it writes what
// text/tabwriter writes with AlignRight, padding 2 and every cell ended
// by a tab, indent "  ". A row shorter than the others simply ends early.
func WriteRightAligned(w io.StringWriter, indent string, rows [][]string) error {
	var widths []int
	for _, r := range rows {
		for j, c := range r {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], TextWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(indent)
		for j, c := range r {
			if j > 0 {
				b.WriteString("  ")
			}
			b.WriteString(strings.Repeat(" ", widths[j]-TextWidth(c)))
			b.WriteString(c)
		}
		b.WriteByte('\n')
	}
	_, err := w.WriteString(b.String())
	return err
}

// floorSources counts the sources named by the floor.
func floorSources(srcs []Source) int {
	n := 0
	for _, s := range srcs {
		if s.Floor {
			n++
		}
	}
	return n
}

// num prints a score compactly whatever its scale.
func num(x float64) string {
	return strconv.FormatFloat(x, 'g', 4, 64)
}
