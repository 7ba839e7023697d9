package alerts

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sourcewatch/sourcewatch/internal/textwidth"
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
		return s
	}
	credible := "-"
	if len(a.CredibleSet) > 0 {
		credible = strings.Join(a.CredibleSet, ", ")
	}
	fmt.Fprintf(&buf, "%s %s at %s (seq %d)\n", strings.ToUpper(string(a.Status)), orDash(a.Graph), ts(a.ObservedAt), a.Seq)
	// Writes into a bytes.Buffer cannot fail, so tabwriter's errors are moot.
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  id\t%s\n", orDash(a.ID))
	fmt.Fprintf(tw, "  window\t%s .. %s\n", ts(a.Window.From), ts(a.Window.To))
	fmt.Fprintf(tw, "  infected\t%d\n", a.Infected)
	fmt.Fprintf(tw, "  credible set\t%s (%d of %d sources, marked *)\n", credible, len(a.CredibleSet), len(a.Sources))
	fmt.Fprintf(tw, "  model\tbundle %s, forward %s %s\n", orDash(a.Model.Bundle), orDash(a.Model.Forward), orDash(a.Model.ForwardVersion))
	fmt.Fprintf(tw, "  threshold\t%s, inference %s ms\n", num(a.Threshold), strconv.FormatFloat(a.InferenceMS, 'f', 1, 64))
	if a.Note != "" {
		fmt.Fprintf(tw, "  note\t%s\n", a.Note)
	}
	_ = tw.Flush()
	if len(a.Sources) == 0 {
		buf.WriteString("  no sources\n")
	} else {
		inSet := make(map[string]bool, len(a.CredibleSet))
		for _, n := range a.CredibleSet {
			inSet[n] = true
		}
		rows := [][]string{{"rank", "node", "score", "probability", ""}}
		for i, s := range a.Sources {
			mark := ""
			if inSet[s.Node] {
				mark = "*"
			}
			rows = append(rows, []string{strconv.Itoa(i + 1), s.Node, num(s.Score), fmt.Sprintf("%.3f", s.Probability), mark})
		}
		// Widths in terminal columns, so a node id in Chinese or Japanese
		// keeps the columns after it in line, which text/tabwriter does not.
		_ = textwidth.WriteRightAligned(&buf, "      ", rows)
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

// TextWidth is how many terminal columns s takes (textwidth.Width): two
// for an East Asian wide or fullwidth character, none for a combining
// mark or a format character (a zero-width joiner), one for any other.
// Tables of node ids (alert sources, localize's ranking) pad by it.
func TextWidth(s string) int { return textwidth.Width(s) }

// num prints a score compactly whatever its scale.
func num(x float64) string {
	return strconv.FormatFloat(x, 'g', 4, 64)
}
