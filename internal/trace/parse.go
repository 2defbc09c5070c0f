package trace

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// csvTable reads a CSV file with a header row, locating the columns by
// name.
type csvTable struct {
	name string
	r    *csv.Reader
	cols map[string]int
	n    int
}

// openCSV reads the header and checks it: every column in required must be
// present, every other column must be in optional, none twice. Names are
// compared after trimming spaces (and a UTF-8 byte order mark).
func openCSV(r io.Reader, name string, required, optional []string) (*csvTable, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	want := strings.Join(required, ",")
	head, err := cr.Read()
	if err == io.EOF {
		return nil, rowError(name, 1, "", "empty file, want the header %s", want)
	}
	if err != nil {
		return nil, csvError(name, 1, err)
	}
	t := &csvTable{name: name, r: cr, cols: map[string]int{}, n: len(head)}
	known := map[string]bool{}
	for _, c := range append(append([]string(nil), required...), optional...) {
		known[c] = true
	}
	for i, h := range head {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if !known[h] {
			return nil, rowError(name, 1, "header", "unknown column %q, want %s", h, want)
		}
		if _, dup := t.cols[h]; dup {
			return nil, rowError(name, 1, "header", "column %q appears twice", h)
		}
		t.cols[h] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, rowError(name, 1, "header", "missing column %q, want %s", c, want)
		}
	}
	return t, nil
}

// next returns the next record and its line, io.EOF at the end.
func (t *csvTable) next() ([]string, int, error) {
	rec, err := t.r.Read()
	if err == io.EOF {
		return nil, 0, io.EOF
	}
	if err != nil {
		line := 0
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			line = pe.Line
		}
		return nil, 0, csvError(t.name, line, err)
	}
	line, _ := t.r.FieldPos(0)
	if len(rec) != t.n {
		return nil, 0, rowError(t.name, line, "", "%d fields, want %d as in the header", len(rec), t.n)
	}
	return rec, line, nil
}

// get returns the named column of rec, trimmed.
func (t *csvTable) get(rec []string, col string) string {
	return strings.TrimSpace(rec[t.cols[col]])
}

// csvError turns a csv package error into a file:line error.
func csvError(name string, line int, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return rowError(name, pe.Line, "", "csv: %v", pe.Err)
	}
	if line < 1 {
		line = 1
	}
	return rowError(name, line, "", "read: %v", err)
}

// tokens parses a token count.
func tokens(name string, line int, field, s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, rowError(name, line, field, "%q is not a non-negative integer", s)
	}
	if n > maxTokens {
		return 0, rowError(name, line, field, "%d tokens is more than %d", n, maxTokens)
	}
	return int(n), nil
}

// azureLayouts are the TIMESTAMP layouts accepted: the 2023 traces'
// "2023-11-16 18:17:03.9799600" (any fraction, no zone, read as UTC), with
// a zone suffix or a T separator.
var azureLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04:05Z07:00", "2006-01-02T15:04:05", "2006-01-02T15:04:05Z07:00"}

// parseAzure reads an Azure LLM inference trace. Times are relative to
// the first row's.
func parseAzure(r io.Reader, name string) ([]row, error) {
	t, err := openCSV(r, name, []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}, nil)
	if err != nil {
		return nil, err
	}
	var (
		rows  []row
		epoch time.Time
	)
	for {
		rec, line, err := t.next()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		s := t.get(rec, "TIMESTAMP")
		var ts time.Time
		ok := false
		for _, l := range azureLayouts {
			if ts, err = time.Parse(l, s); err == nil {
				ok = true
				break
			}
		}
		if !ok {
			return nil, rowError(name, line, "TIMESTAMP", "%q is not a time like 2023-11-16 18:17:03.9799600", s)
		}
		if len(rows) == 0 {
			epoch = ts
		}
		d := ts.Sub(epoch)
		if d.Abs() > seconds(maxSeconds) {
			return nil, rowError(name, line, "TIMESTAMP", "%s is more than %g s from the first row's %s", s, float64(maxSeconds), epoch.Format("2006-01-02 15:04:05.9999999"))
		}
		q := Request{Line: line}
		if q.Prompt, err = tokens(name, line, "ContextTokens", t.get(rec, "ContextTokens")); err != nil {
			return nil, err
		}
		if q.Output, err = tokens(name, line, "GeneratedTokens", t.get(rec, "GeneratedTokens")); err != nil {
			return nil, err
		}
		rows = append(rows, row{at: d, req: q})
	}
}

// parseBurstGPT reads a BurstGPT trace. Rows with 0 response tokens are the
// failed requests (the dataset's README) and are marked failed.
func parseBurstGPT(r io.Reader, name string) ([]row, error) {
	t, err := openCSV(r, name,
		[]string{"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"},
		[]string{"Session ID", "Elapsed time"})
	if err != nil {
		return nil, err
	}
	var rows []row
	for {
		rec, line, err := t.next()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		s := t.get(rec, "Timestamp")
		at, err := nonNegSeconds(s, 1)
		if err != nil {
			return nil, rowError(name, line, "Timestamp", "%q %v", s, err)
		}
		q := Request{Line: line}
		if q.Prompt, err = tokens(name, line, "Request tokens", t.get(rec, "Request tokens")); err != nil {
			return nil, err
		}
		if q.Output, err = tokens(name, line, "Response tokens", t.get(rec, "Response tokens")); err != nil {
			return nil, err
		}
		rows = append(rows, row{at: at, req: q, failed: q.Output == 0})
	}
}

// nonNegSeconds parses a non-negative number of units (1 for seconds,
// 1e-3 for milliseconds) into a Duration, at most maxSeconds.
func nonNegSeconds(s string, unit float64) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, errors.New("is not a non-negative number")
	}
	if f*unit > maxSeconds {
		return 0, fmt.Errorf("is more than %g s", float64(maxSeconds))
	}
	return seconds(f * unit), nil
}

// rowParser parses one JSON object of a JSON-lines format.
type rowParser func(fields map[string]json.RawMessage, name string, line int) (row, error)

// parseJSONLines reads one JSON object a line (blank lines are skipped) and
// hands each to parse.
func parseJSONLines(r *bufio.Reader, name string, parse rowParser) ([]row, error) {
	var rows []row
	for line := 1; ; line++ {
		b, err := readLine(r)
		if err == io.EOF && len(b) == 0 {
			return rows, nil
		}
		if err != nil && err != io.EOF {
			if err == errLineTooLong {
				return nil, rowError(name, line, "", "%v", err)
			}
			return nil, rowError(name, line, "", "read: %v", err)
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		fields, err := jsonObject(b)
		if err != nil {
			return nil, rowError(name, line, "", "%v", err)
		}
		x, err := parse(fields, name, line)
		if err != nil {
			return nil, err
		}
		rows = append(rows, x)
	}
}

// readLine returns the next line without its newline; io.EOF with the
// last line if it has none.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLine {
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		return buf, err
	}
}

// jsonObject parses b as exactly one JSON object and returns its fields.
func jsonObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value on the line")
	}
	return m, nil
}

// jsonNumber returns the raw JSON number of field, or an error naming what
// it is instead.
func jsonNumber(fields map[string]json.RawMessage, field string) (string, bool, error) {
	raw, ok := fields[field]
	if !ok || string(raw) == "null" {
		return "", false, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil || !isJSONNumber(raw) {
		return "", true, fmt.Errorf("%s is not a number", clip(raw))
	}
	return n.String(), true, nil
}

// isJSONNumber reports whether raw is a JSON number (json.Number also
// accepts a quoted string).
func isJSONNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// clip returns raw as a string, cut to 40 bytes.
func clip(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// requiredTokens reads a required token-count field of a JSON row.
func requiredTokens(fields map[string]json.RawMessage, name string, line int, field string) (int, error) {
	s, ok, err := jsonNumber(fields, field)
	if err != nil {
		return 0, rowError(name, line, field, "%v", err)
	}
	if !ok {
		return 0, rowError(name, line, field, "missing")
	}
	return tokens(name, line, field, s)
}

// requiredTime reads a required non-negative time field of a JSON row, in
// units of unit seconds.
func requiredTime(fields map[string]json.RawMessage, name string, line int, field string, unit float64) (time.Duration, error) {
	s, ok, err := jsonNumber(fields, field)
	if err != nil {
		return 0, rowError(name, line, field, "%v", err)
	}
	if !ok {
		return 0, rowError(name, line, field, "missing")
	}
	at, err := nonNegSeconds(s, unit)
	if err != nil {
		return 0, rowError(name, line, field, "%s %v", s, err)
	}
	return at, nil
}

// blockIDs reads an array of block ids; a missing or null field is nil.
func blockIDs(fields map[string]json.RawMessage, name string, line int, field string) ([]uint64, error) {
	raw, ok := fields[field]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var nums []json.RawMessage
	if err := json.Unmarshal(raw, &nums); err != nil {
		return nil, rowError(name, line, field, "%s is not an array of block ids", clip(raw))
	}
	ids := make([]uint64, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return nil, rowError(name, line, fmt.Sprintf("%s[%d]", field, i), "%s is not a non-negative integer", clip(n))
		}
		ids[i] = v
	}
	return ids, nil
}

// blocksFor returns the number of BlockTokens blocks a prompt spans.
func blocksFor(prompt int) int { return (prompt + BlockTokens - 1) / BlockTokens }

// parseMooncakeRow reads one Mooncake row: timestamp (ms), input_length,
// output_length, hash_ids with one id per started 512-token block. Other
// fields are ignored.
func parseMooncakeRow(f map[string]json.RawMessage, name string, line int) (row, error) {
	at, err := requiredTime(f, name, line, "timestamp", 1e-3)
	if err != nil {
		return row{}, err
	}
	q := Request{Line: line}
	if q.Prompt, err = requiredTokens(f, name, line, "input_length"); err != nil {
		return row{}, err
	}
	if q.Output, err = requiredTokens(f, name, line, "output_length"); err != nil {
		return row{}, err
	}
	if _, ok := f["hash_ids"]; !ok {
		return row{}, rowError(name, line, "hash_ids", "missing")
	}
	if q.Blocks, err = blockIDs(f, name, line, "hash_ids"); err != nil {
		return row{}, err
	}
	if q.Blocks == nil {
		q.Blocks = []uint64{}
	}
	if want := blocksFor(q.Prompt); len(q.Blocks) != want {
		return row{}, rowError(name, line, "hash_ids", "%d block ids for %d input tokens, want %d (one per %d tokens)", len(q.Blocks), q.Prompt, want, BlockTokens)
	}
	return row{at: at, req: q}, nil
}

// ownFields are the fields of the jsonl format.
var ownFields = map[string]bool{"arrival_s": true, "team": true, "class": true, "prompt_tokens": true, "output_tokens": true, "blocks": true}

// parseOwnRow reads one row of the project's jsonl format.
func parseOwnRow(f map[string]json.RawMessage, name string, line int) (row, error) {
	var unknown []string
	for k := range f {
		if !ownFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown) // the same error whatever the map order
		return row{}, rowError(name, line, strconv.Quote(unknown[0]), "unknown field (known: arrival_s, team, class, prompt_tokens, output_tokens, blocks)")
	}
	at, err := requiredTime(f, name, line, "arrival_s", 1)
	if err != nil {
		return row{}, err
	}
	q := Request{Line: line}
	raw, ok := f["team"]
	if !ok || string(raw) == "null" {
		return row{}, rowError(name, line, "team", "missing")
	}
	if err := json.Unmarshal(raw, &q.Team); err != nil || q.Team == "" || strings.ContainsAny(q.Team, " \t\r\n") {
		return row{}, rowError(name, line, "team", "%s is not a non-empty string without spaces", clip(raw))
	}
	raw, ok = f["class"]
	if !ok || string(raw) == "null" {
		return row{}, rowError(name, line, "class", "missing")
	}
	var c string
	if err := json.Unmarshal(raw, &c); err != nil || (Class(c) != Interactive && Class(c) != Batch) {
		return row{}, rowError(name, line, "class", "%s is not \"interactive\" or \"batch\"", clip(raw))
	}
	q.Class = Class(c)
	if q.Prompt, err = requiredTokens(f, name, line, "prompt_tokens"); err != nil {
		return row{}, err
	}
	if q.Output, err = requiredTokens(f, name, line, "output_tokens"); err != nil {
		return row{}, err
	}
	if q.Blocks, err = blockIDs(f, name, line, "blocks"); err != nil {
		return row{}, err
	}
	if max := blocksFor(q.Prompt); len(q.Blocks) > max {
		return row{}, rowError(name, line, "blocks", "%d block ids for %d prompt tokens, want at most %d (one per %d tokens)", len(q.Blocks), q.Prompt, max, BlockTokens)
	}
	return row{at: at, req: q}, nil
}
