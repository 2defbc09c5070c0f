package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Format names the layout of a trace file.
type Format string

// The formats Read understands.
const (
	// Azure is the Azure LLM inference trace 2023: CSV with the header
	// TIMESTAMP,ContextTokens,GeneratedTokens.
	Azure Format = "azure"
	// BurstGPT is the BurstGPT trace: CSV with the header Timestamp,Model,
	// Request tokens,Response tokens,Total tokens,Log Type (and optionally
	// Session ID and Elapsed time).
	BurstGPT Format = "burstgpt"
	// Mooncake is the Mooncake trace: JSON lines with timestamp (ms),
	// input_length, output_length and hash_ids.
	Mooncake Format = "mooncake"
	// JSONL is the project's own format: JSON lines with arrival_s, team,
	// class, prompt_tokens, output_tokens and optionally blocks.
	JSONL Format = "jsonl"
)

// Formats lists the known formats in documentation order.
var Formats = []Format{Azure, BurstGPT, Mooncake, JSONL}

// Class is a request's service class as a trace names it.
type Class string

// The classes a trace can name.
const (
	// Unspecified is the class of every request of a format that names
	// none (all but jsonl): the consumer assigns one.
	Unspecified Class = ""
	// Interactive requests are latency sensitive.
	Interactive Class = "interactive"
	// Batch requests are throughput oriented.
	Batch Class = "batch"
)

// BlockTokens is the number of prompt tokens one prefix block id stands for
// (Mooncake's block size; the jsonl format uses the same).
const BlockTokens = 512

// Request is one request of a replayed trace.
type Request struct {
	// Arrival is the request's arrival time from the window's start, after
	// time_scale.
	Arrival time.Duration
	// Team is the team the trace names ("" for every format but jsonl).
	Team string
	// Class is the class the trace names (Unspecified for every format but
	// jsonl).
	Class Class
	// Prompt and Output are the prompt and output lengths in tokens.
	Prompt, Output int
	// Blocks are the prompt's prefix block ids, one per started
	// BlockTokens tokens (mooncake: all of them; jsonl: at most that many,
	// nil when the row names none; nil for the CSV formats). Equal ids mean an equal prefix up to
	// and including that block. Copies made by rate_scale > 1 carry ids
	// remapped per copy (see the package doc).
	Blocks []uint64
	// Line is the source line of the row (1-based; a CSV header is line 1).
	Line int
	// Copy is 0 for the row itself and k ≥ 1 for the k-th extra copy that
	// rate_scale > 1 made of it.
	Copy int
}

// Trace is the request stream of one trace window.
type Trace struct {
	// Name is the file name the errors and reports use.
	Name string
	// Format is the file's format.
	Format Format
	// Requests are the requests, sorted by Arrival, then Line, then Copy.
	Requests []Request
	// Rows is the number of data rows in the file.
	Rows int
	// Failed is the number of rows dropped as failed requests (BurstGPT
	// rows with 0 response tokens; 0 for the other formats).
	Failed int
	// Window is the number of replayable rows in the time window, before
	// every/offset and rate_scale.
	Window int
	// Span is the length of the replayed window after time_scale:
	// duration_s × time_scale, or, when duration_s is 0, from start_s to
	// the last row.
	Span time.Duration
}

// Stats summarises the trace's requests over its span.
func (t *Trace) Stats() Stats { return Summarize(t.Requests, t.Span) }

// Load reads the trace file that spec names. A relative spec.File is
// resolved against dir (the directory of the scenario file, say); errors
// name the file as spec.File spells it.
func Load(spec Spec, dir string) (*Trace, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	path := spec.File
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: open trace: %w", spec.File, err)
	}
	defer f.Close()
	return Read(f, spec.File, spec)
}

// Read parses a trace of spec.Format from r and returns the window that
// spec selects (spec.File is not opened; name is used in errors). The
// result depends only on the bytes read and spec.
func Read(r io.Reader, name string, spec Spec) (*Trace, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	var (
		rows []row
		err  error
	)
	br := bufio.NewReaderSize(r, 64<<10)
	switch spec.Format {
	case Azure:
		rows, err = parseAzure(br, name)
	case BurstGPT:
		rows, err = parseBurstGPT(br, name)
	case Mooncake:
		rows, err = parseJSONLines(br, name, parseMooncakeRow)
	case JSONL:
		rows, err = parseJSONLines(br, name, parseOwnRow)
	}
	if err != nil {
		return nil, err
	}
	t := &Trace{Name: name, Format: spec.Format, Rows: len(rows)}
	live := rows[:0:0]
	for _, x := range rows {
		if x.failed {
			t.Failed++
			continue
		}
		live = append(live, x)
	}
	t.Requests, t.Window, t.Span = selectRows(live, spec)
	return t, nil
}

// row is one parsed data row: its time from the format's epoch and the
// request it stands for.
type row struct {
	at     time.Duration
	req    Request
	failed bool
}

// maxSeconds bounds timestamps (from the format's epoch, or for azure
// from the first row) and start_s and duration_s: about 3 years, so that
// every difference of two times, stretched by MaxTimeScale, fits in a
// time.Duration.
const maxSeconds = 1e8

// maxTokens bounds token counts.
const maxTokens = 1 << 30

// rowError is a malformed row: file, line, field and what is wrong.
func rowError(name string, line int, field, format string, args ...any) error {
	if field == "" {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s:%d: %s: %s", name, line, field, fmt.Sprintf(format, args...))
}

// errLineTooLong is returned for a JSON line over maxLine bytes.
var errLineTooLong = errors.New("line longer than 16 MiB")

// maxLine bounds one JSON line.
const maxLine = 16 << 20

// selectRows cuts the window out of rows (any order), applies every/offset
// and rate_scale, and returns the requests sorted, the number of rows in
// the window and the scaled span.
func selectRows(rows []row, spec Spec) ([]Request, int, time.Duration) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].at < rows[j].at })
	if len(rows) == 0 {
		return nil, 0, spec.span(spec.Duration)
	}
	origin := rows[0].at
	from := origin + seconds(spec.Start)
	to := time.Duration(math.MaxInt64)
	if spec.Duration > 0 {
		to = from + seconds(spec.Duration)
	}
	lo := sort.Search(len(rows), func(i int) bool { return rows[i].at >= from })
	hi := sort.Search(len(rows), func(i int) bool { return rows[i].at >= to })
	win := rows[lo:hi]
	every, offset := spec.every(), spec.Offset
	var picked []row
	for i := offset; i < len(win); i += every {
		picked = append(picked, win[i])
		if every >= len(win)-i {
			break // also keeps i += every from overflowing
		}
	}
	end := to
	if spec.Duration == 0 {
		end = from
		if len(win) > 0 {
			end = win[len(win)-1].at
		}
	}
	scale := spec.timeScale()
	at := func(d time.Duration) time.Duration {
		return time.Duration(math.Round(float64(d-from) * scale))
	}
	rate := spec.rateScale()
	var out []Request
	for i, x := range picked {
		n := copies(x.req.Line, rate)
		if n == 0 {
			continue
		}
		q := x.req
		q.Arrival = at(x.at)
		out = append(out, q)
		if n == 1 {
			continue
		}
		next := end
		if i+1 < len(picked) {
			next = picked[i+1].at
		}
		gap := next - x.at
		for k := 1; k < n; k++ {
			c := x.req
			c.Copy = k
			c.Arrival = at(x.at + time.Duration(unit(x.req.Line, k)*float64(gap)))
			c.Blocks = remap(x.req.Blocks, k)
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.Arrival != b.Arrival {
			return a.Arrival < b.Arrival
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Copy < b.Copy
	})
	var span time.Duration
	if spec.Duration > 0 {
		span = spec.span(spec.Duration)
	} else {
		span = at(end)
	}
	return out, len(win), span
}

// seconds converts trace seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// copies returns how many requests the row on line makes under rate:
// floor(rate), plus one more when the row's hash falls under the
// fractional part. For rate < 1 that is 1 with probability rate, else 0.
func copies(line int, rate float64) int {
	whole := math.Floor(rate)
	n := int(whole)
	if unit(line, 0) < rate-whole {
		n++
	}
	return n
}

// unit returns a deterministic number in [0, 1) for (line, k): the
// splitmix64 finaliser of the pair.
func unit(line, k int) float64 {
	return float64(mix(uint64(line)*0x9e3779b97f4a7c15^uint64(k)*0xd1b54a32d192ed03)>>11) / (1 << 53)
}

// mix is the splitmix64 finaliser.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// remap returns the block ids of copy k: every id moved to copy k's own id
// space, so copies share prefixes with each other's rows of the same copy
// number exactly as the originals do, and never with the originals.
func remap(blocks []uint64, k int) []uint64 {
	if blocks == nil {
		return nil
	}
	out := make([]uint64, len(blocks))
	for i, b := range blocks {
		out[i] = mix(b ^ mix(uint64(k)))
	}
	return out
}
