package doccheck

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Figures quoted from docs/results (the fairness benchmark's output,
// written by `make fairness`) carry a marker right after them, an HTML
// comment that markdown does not show:
//
//	1.20×<!-- results: README.md; Flow-control; s2-saturate & vllm & worst p99; plugin -->
//
// The fields, separated by ";", are:
//
//   - the results file (docs/results/FILE);
//   - the section: one or more parts separated by " > ", each a substring
//     of one of the headings above the table, in order, the last one of
//     the nearest ("vLLM main > Interactive TTFT");
//   - the row: one or more parts separated by " & ", each equal to one
//     of the row's cells (markdown links and backticks stripped);
//   - the column: its header, as written;
//   - optionally, which number of the cell ("2" for the p99 of
//     "0.12 / 0.47"; default 1) and "%" for a fraction quoted as a
//     percentage.
//
// The figure is the last number before the marker on its line. It must
// equal the cell's number rounded to as many decimals as the figure has
// (0.73 quotes 0.731; 0.730 does not). A marker that names no cell, or
// more than one, is an error.
//
// A figure that is history, not a current result, says so in its
// sentence and carries no marker. Figures from benchmarks whose output is
// not in docs/results (docs/performance.md's µs per request, allocations,
// module sizes) are not checked here.

// resultTable is one markdown table of a results file.
type resultTable struct {
	headings []string // the headings above it, outermost first
	header   []string
	rows     [][]string
}

// readResults parses every table of docs/results/*.md, by file name.
func readResults(t *testing.T, root string) map[string][]resultTable {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "results", "*.md"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no docs/results/*.md (%v)", err)
	}
	out := map[string][]resultTable{}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		var heads [7]string
		var cur *resultTable
		var tables []resultTable
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "#") {
				level := len(line) - len(strings.TrimLeft(line, "#"))
				heads[min(level, 6)] = strings.TrimSpace(line[level:])
				for i := level + 1; i < len(heads); i++ {
					heads[i] = ""
				}
				continue
			}
			if !strings.HasPrefix(line, "|") {
				if cur != nil {
					tables = append(tables, *cur)
					cur = nil
				}
				continue
			}
			cells := splitRow(line)
			switch {
			case cur == nil:
				var hs []string
				for _, h := range heads {
					if h != "" {
						hs = append(hs, h)
					}
				}
				cur = &resultTable{headings: hs, header: cells}
			case strings.HasPrefix(line, "|---"):
			default:
				cur.rows = append(cur.rows, cells)
			}
		}
		if cur != nil {
			tables = append(tables, *cur)
		}
		out[filepath.Base(n)] = tables
	}
	return out
}

// splitRow returns the cells of a markdown table row, trimmed.
func splitRow(line string) []string {
	parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

var linkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// plain strips markdown links (keeping their text) and backticks.
func plain(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(linkRE.ReplaceAllString(s, "$1"), "`", ""))
}

var numberRE = regexp.MustCompile(`[-+]?\d+(?:\.\d+)?`)

// marker is one parsed results marker.
type marker struct {
	file, section, row, column string
	part                       int
	percent                    bool
}

func parseMarker(s string) (marker, error) {
	f := strings.Split(s, ";")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	if len(f) < 4 || len(f) > 5 {
		return marker{}, fmt.Errorf("want FILE; SECTION; ROW; COLUMN[; N and/or %%], got %d fields", len(f))
	}
	m := marker{file: f[0], section: f[1], row: f[2], column: f[3], part: 1}
	if len(f) == 5 {
		for _, o := range strings.Fields(f[4]) {
			if o == "%" {
				m.percent = true
			} else if n, err := strconv.Atoi(o); err == nil && n >= 1 {
				m.part = n
			} else {
				return marker{}, fmt.Errorf("option %q: want a number >= 1 or %%", o)
			}
		}
	}
	return m, nil
}

// lookup returns the cell m names, or an error.
func (m marker) lookup(results map[string][]resultTable) (string, error) {
	tables, ok := results[m.file]
	if !ok {
		return "", fmt.Errorf("no results file %s", m.file)
	}
	var found []string
	for _, tb := range tables {
		if !headingsMatch(tb.headings, strings.Split(m.section, " > ")) {
			continue
		}
		col := -1
		for i, h := range tb.header {
			if plain(h) == m.column {
				col = i
			}
		}
		if col < 0 {
			continue
		}
		for _, r := range tb.rows {
			if rowMatches(r, strings.Split(m.row, " & ")) && col < len(r) {
				found = append(found, r[col])
			}
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no cell in %s under %q, row %q, column %q", m.file, m.section, m.row, m.column)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d cells in %s under %q, row %q, column %q (%v): name one", len(found), m.file, m.section, m.row, m.column, found)
}

// headingsMatch reports whether the parts are substrings of the
// headings, in order, the last one of the nearest heading.
func headingsMatch(heads, parts []string) bool {
	if len(heads) == 0 || !strings.Contains(heads[len(heads)-1], parts[len(parts)-1]) {
		return false
	}
	i := 0
	for _, p := range parts[:len(parts)-1] {
		for i < len(heads)-1 && !strings.Contains(heads[i], p) {
			i++
		}
		if i == len(heads)-1 {
			return false
		}
		i++
	}
	return true
}

func rowMatches(row, parts []string) bool {
	for _, p := range parts {
		found := false
		for _, c := range row {
			if plain(c) == p {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// proseFiles are the files whose results figures are checked.
func proseFiles(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "RATIONALE.md"}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	return files
}

var markerRE = regexp.MustCompile(`<!--\s*results:(.*?)-->`)

// TestQuotedFiguresMatchResults checks every results marker in README.md,
// RATIONALE.md and docs/*.md against docs/results.
func TestQuotedFiguresMatchResults(t *testing.T) {
	root := moduleRoot(t)
	results := readResults(t, root)
	count := 0
	for _, name := range proseFiles(t, root) {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			prev := 0
			for _, loc := range markerRE.FindAllStringSubmatchIndex(line, -1) {
				count++
				where := fmt.Sprintf("%s:%d", name, i+1)
				before := line[prev:loc[0]]
				prev = loc[1]
				nums := numberRE.FindAllString(before, -1)
				if len(nums) == 0 {
					t.Errorf("%s: a results marker with no figure before it", where)
					continue
				}
				quoted := nums[len(nums)-1]
				m, err := parseMarker(line[loc[2]:loc[3]])
				if err != nil {
					t.Errorf("%s: marker: %v", where, err)
					continue
				}
				cell, err := m.lookup(results)
				if err != nil {
					t.Errorf("%s: %s: %v", where, quoted, err)
					continue
				}
				if err := sameFigure(quoted, cell, m); err != nil {
					t.Errorf("%s: quotes %s, but %s says %q: %v", where, quoted, m.file, cell, err)
				}
			}
		}
	}
	if count == 0 {
		t.Fatal("no results marker found: the prose quotes no figure from docs/results?")
	}
}

// sameFigure reports whether quoted is the m.part-th number of cell,
// rounded to quoted's decimals.
func sameFigure(quoted, cell string, m marker) error {
	nums := numberRE.FindAllString(cell, -1)
	if m.part > len(nums) {
		return fmt.Errorf("the cell has %d numbers, the marker names number %d", len(nums), m.part)
	}
	v, _ := strconv.ParseFloat(nums[m.part-1], 64)
	if m.percent {
		v *= 100
	}
	q, _ := strconv.ParseFloat(quoted, 64)
	dec := 0
	if i := strings.IndexByte(quoted, '.'); i >= 0 {
		dec = len(quoted) - i - 1
	}
	scale := math.Pow(10, float64(dec))
	if math.Abs(math.Round(v*scale)-math.Round(q*scale)) > 0.5 {
		return fmt.Errorf("%v rounded to %d decimals is not %s", v, dec, quoted)
	}
	return nil
}
