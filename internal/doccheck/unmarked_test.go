package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	scenarioRE = regexp.MustCompile(`\bS[1-9][0-9]*[a-z]?\b|\bs[1-9][0-9]*[a-z]?-[a-z]+|\bT[1-9][0-9]*\b|\bt[1-9][0-9]*-[a-z]+`)
	figureRE   = regexp.MustCompile(`\d+\.\d+|\d+(?:\s?(?:×|pp\b|%))`)
	historyRE  = regexp.MustCompile(`(?i)\b(was|were|before|earlier|used to|went|until|previously|draft|then)\b|→`)
)

// TestResultsFiguresAreMarked is the second check: a line of prose in
// README.md, RATIONALE.md or docs/*.md that names a scenario (S1, S2, S2b, …, T1, … or
// its file name) and quotes a figure (a decimal, a ratio ×, points or a
// percentage) must carry a results marker, unless it says the figure is
// history (was, before, earlier, →, ...). Code blocks are skipped, and so
// is docs/performance.md, whose figures are the Go benchmarks' (µs per
// request), not docs/results'. It cannot see a figure on a line that
// names no scenario; those are left to review.
func TestResultsFiguresAreMarked(t *testing.T) {
	root := moduleRoot(t)
	for _, name := range proseFiles(t, root) {
		if name == filepath.Join("docs", "performance.md") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		code := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				code = !code
				continue
			}
			if code || !scenarioRE.MatchString(line) || markerRE.MatchString(line) || historyRE.MatchString(line) || strings.Contains(line, "<!-- not results") || strings.Contains(line, "<!-- history") {
				continue
			}
			if f := figureRE.FindString(line); f != "" {
				t.Errorf("%s:%d: %q names a scenario and quotes %s without a results marker (<!-- results: ... -->) or a word saying it is history", name, i+1, strings.TrimSpace(line), f)
			}
		}
	}
}
