// Package textwidth measures text in terminal columns, not runes, and
// lays out tables by it: a node id or method name in Chinese, Japanese or
// Korean takes two columns a character, which text/tabwriter (it counts
// runes) and fmt's %-*s (runes too) get wrong, pushing the columns after
// it out of line. The alerts' source tables, localize's ranking and
// eval's table pad by it.
package textwidth

import (
	"io"
	"strings"
	"unicode"

	"golang.org/x/text/width"
)

// Width is how many terminal columns s takes: two for an East Asian wide
// or fullwidth character (golang.org/x/text/width's classes: CJK
// ideographs, Hiragana and Katakana, Hangul syllables, fullwidth forms),
// none for a combining mark or a format character (a zero-width joiner),
// one for any other.
func Width(s string) int {
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
// columns (Width). For text of one column a character it writes what
// text/tabwriter writes with AlignRight, padding 2 and every cell ended
// by a tab, indent "  ". A row shorter than the others simply ends early.
func WriteRightAligned(w io.StringWriter, indent string, rows [][]string) error {
	var widths []int
	for _, r := range rows {
		for j, c := range r {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], Width(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(indent)
		for j, c := range r {
			if j > 0 {
				b.WriteString("  ")
			}
			b.WriteString(strings.Repeat(" ", widths[j]-Width(c)))
			b.WriteString(c)
		}
		b.WriteByte('\n')
	}
	_, err := w.WriteString(b.String())
	return err
}
