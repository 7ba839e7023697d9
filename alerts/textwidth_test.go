package alerts

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/stretchr/testify/require"
)

func TestTextWidth(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want int
	}{
		{"", 0},
		{"user-12", 7},
		{"北京", 4},          // CJK Unified Ideographs
		{"東京", 4},          // CJK Unified Ideographs (Japanese)
		{"서울", 4},          // Hangul syllables
		{"とうきょう", 10},      // Hiragana
		{"ソウル", 6},         // Katakana
		{"ｗｅｉｂｏ", 10},      // fullwidth forms
		{"ｶﾀｶﾅ", 4},        // halfwidth Katakana: one column each
		{"e\u0301mile", 5}, // a combining accent takes none
		{"a\u200db", 2},    // nor a zero-width joiner
		{"slvae[模型]", 11},
	} {
		require.Equal(t, tt.want, TextWidth(tt.s), "%q", tt.s)
	}
}

// Of text one column a character, the table is what text/tabwriter
// writes (eval's table was written by it); with wide characters, every
// row still ends at the same column, where tabwriter pushed them out.
func TestWriteRightAligned(t *testing.T) {
	ascii := [][]string{
		{"method", "F1", "AUC", "empty"},
		{"slvae", "0.444 ± 0.232", "0.892 ± 0.103", "0"},
		{"infected *", "0.357 ± 0.059", "0.819 ± 0.046", "12"},
	}
	var want bytes.Buffer
	tw := tabwriter.NewWriter(&want, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range ascii {
		tw.Write([]byte(strings.Join(r, "\t") + "\t\n"))
	}
	require.NoError(t, tw.Flush())
	var got strings.Builder
	require.NoError(t, WriteRightAligned(&got, "  ", ascii))
	require.Equal(t, want.String(), got.String())

	wide := [][]string{
		{"rank", "node", "score"},
		{"1", "北京", "0.9"},
		{"2", "ソウル", "0.25"},
		{"3", "e\u0301mile", "0.125"},
		{"4", "a", "0"},
	}
	got.Reset()
	require.NoError(t, WriteRightAligned(&got, "", wide))
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	require.Len(t, lines, len(wide))
	for i, l := range lines {
		require.Equal(t, TextWidth(lines[0]), TextWidth(l), "line %d %q\n%s", i, l, got.String())
		// and the node column too, before the score's padding
		node := strings.TrimRight(l[:strings.LastIndex(l, wide[i][2])], " ")
		require.Equal(t, TextWidth(lines[0])-len("  score"), TextWidth(node), "line %d %q", i, l)
	}
}
