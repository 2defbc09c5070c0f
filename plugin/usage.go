package plugin

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// usage is the token usage a vLLM response reports.
type usage struct {
	prompt, cached, completion int64
	ok                         bool // a usage object was found
}

// cost is Σ weight × tokens: uncached prompt, cached prompt and completion
// tokens. Cached tokens above the prompt count as prompt tokens.
func (u usage) cost(w costWeights) float64 {
	cached := u.cached
	if cached > u.prompt {
		cached = u.prompt
	}
	if cached < 0 {
		cached = 0
	}
	return w.prompt*float64(u.prompt-cached) + w.cachedPrompt*float64(cached) + w.completion*float64(u.completion)
}

// readUsage reads a usage object (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens) from raw, a valid JSON value (a span
// of a document already validated); ok is false unless it is an object with
// integer prompt or completion tokens. Members are read in order, as
// gjson's ForEach would, so a later valid duplicate wins.
func readUsage(raw []byte) usage {
	if u, ok := readFlatUsage(raw); ok {
		return u
	}
	return readUsageMembers(raw)
}

// readUsageMembers is readUsage for any object, member by member.
func readUsageMembers(raw []byte) usage {
	if len(raw) == 0 || raw[0] != '{' {
		return usage{}
	}
	var u usage
	scanObject(raw, func(key string, at, end int) {
		switch key {
		case "prompt_tokens":
			if n := nonNegative(parseValue(raw[at:end])); n >= 0 {
				u.prompt, u.ok = n, true
			}
		case "completion_tokens":
			if n := nonNegative(parseValue(raw[at:end])); n >= 0 {
				u.completion, u.ok = n, true
			}
		case "prompt_tokens_details":
			if end-at == 4 && string(raw[at:end]) == "null" {
				return // vLLM's default; gjson finds no member in it either
			}
			if c := nonNegative(parseValue(raw[at:end]).Get("cached_tokens")); c >= 0 {
				u.cached = c
			}
		}
	})
	return u
}

// readFlatUsage reads a usage object of the form vLLM writes, without a
// callback per member (each call costs in Wasm): ok only if all of raw is
// an object without whitespace whose keys are lower-case letters, digits
// and '_', and whose values are integers of at most 15 digits (below
// nonNegative's bound, exact as floats), null, or, for
// prompt_tokens_details, null or {"cached_tokens":integer}. Such an object
// is valid JSON, and the result is then readUsageMembers' (FuzzReadUsage);
// anything else is left to it.
func readFlatUsage(raw []byte) (u usage, ok bool) {
	n := len(raw)
	if n < 2 || raw[0] != '{' || raw[n-1] != '}' {
		return usage{}, false
	}
	i := 1
	if raw[i] == '}' {
		return u, n == 2
	}
	for {
		// "key":
		if i >= n || raw[i] != '"' {
			return usage{}, false
		}
		ks := i + 1
		i = ks
		for i < n && (raw[i] >= 'a' && raw[i] <= 'z' || raw[i] == '_' || raw[i] >= '0' && raw[i] <= '9') {
			i++
		}
		if i == ks || i+1 >= n || raw[i] != '"' || raw[i+1] != ':' {
			return usage{}, false
		}
		key := raw[ks:i]
		i += 2
		// The value.
		var v int64
		isNull, isObj := false, false
		switch {
		case i+4 <= n && string(raw[i:i+4]) == "null":
			isNull = true
			i += 4
		case string(key) == "prompt_tokens_details" && i+17 <= n && string(raw[i:i+17]) == `{"cached_tokens":`:
			if v, i = flatInt(raw, i+17); i < 0 || i >= n || raw[i] != '}' {
				return usage{}, false
			}
			i++
			isObj = true
		default:
			if v, i = flatInt(raw, i); i < 0 {
				return usage{}, false
			}
		}
		switch string(key) {
		case "prompt_tokens":
			if !isNull && !isObj {
				u.prompt, u.ok = v, true
			}
		case "completion_tokens":
			if !isNull && !isObj {
				u.completion, u.ok = v, true
			}
		case "prompt_tokens_details":
			if isObj { // a number (or null) has no cached_tokens
				u.cached = v
			}
		}
		if i >= n {
			return usage{}, false
		}
		switch raw[i] {
		case ',':
			i++
		case '}':
			return u, i == n-1
		default:
			return usage{}, false
		}
	}
}

// flatInt reads a JSON integer of 1 to 15 digits (no sign, no leading
// zero) at raw[i] and returns it and the index after it; -1 if there is
// none, or if a fraction or exponent follows.
func flatInt(raw []byte, i int) (int64, int) {
	start := i
	var v int64
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		v = v*10 + int64(raw[i]-'0')
		i++
	}
	if d := i - start; d == 0 || d > 15 || d > 1 && raw[start] == '0' {
		return 0, -1
	}
	if i < len(raw) && (raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E') {
		return 0, -1
	}
	return v, i
}

func nonNegative(v gjson.Result) int64 {
	if v.Type != gjson.Number || v.Num < 0 || v.Num > 1<<50 {
		return -1
	}
	return int64(v.Num)
}

// jsonUsage reads the usage of a complete non-streaming response body: the
// first top-level "usage" member (as gjson.Get finds it) of a valid JSON
// object. One pass validates the body and locates the member, so only the
// usage object itself is parsed again.
func jsonUsage(body []byte) usage {
	at, end := -1, -1
	if !scanObject(body, func(key string, a, e int) {
		if at < 0 && key == "usage" {
			at, end = a, e
		}
	}) || at < 0 {
		return usage{}
	}
	return readUsage(body[at:end])
}

// Bounds of the SSE scanner's held-back line.
const (
	// maxScanLine bounds the copy of an incomplete line kept to parse it
	// once complete; longer lines are passed through unparsed.
	maxScanLine = 1 << 20
	// maxHoldLine bounds the incomplete trailing line held back from the
	// client while hiding the usage chunk. The usage chunk is a few hundred
	// bytes, so a longer line is not it and is released at once.
	maxHoldLine = 64 << 10
)

// sseScanner reads token usage from a server-sent-event stream chunk by
// chunk, with chunks split anywhere, and optionally removes the usage-only
// chunk that the plugin asked for on the client's behalf.
//
// Without hiding, chunks pass through unchanged and only an incomplete last
// line is copied (to parse it when the next chunk completes it). With hiding,
// the incomplete last line of a chunk is cut from it and prepended to the
// next chunk: nothing else is held back, so the stream is never delayed by
// more than one partial line.
type sseScanner struct {
	hide      bool
	carry     []byte // incomplete line so far
	skipping  bool   // the current line overflowed: drop bytes up to '\n'
	dropBlank bool   // the previous line was hidden: drop the blank line after it
	u         usage  // the last usage seen
	seen      int64  // completion tokens seen (content-bearing choices)
	done      bool   // data: [DONE] seen
	out       []byte // output buffer when hiding
}

// feed scans a chunk of the stream and returns the bytes to forward in its
// place (the chunk itself, unchanged, unless hiding removed or held back
// bytes). At eos every held-back byte is released.
func (s *sseScanner) feed(chunk []byte, eos bool) []byte {
	if !s.hide {
		s.scan(chunk, eos)
		return chunk
	}
	return s.filter(chunk, eos)
}

// scan parses the complete lines of chunk without changing it.
func (s *sseScanner) scan(chunk []byte, eos bool) {
	rest := chunk
	if len(s.carry) > 0 || s.skipping {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			s.hold(rest, maxScanLine)
			if eos {
				s.flushCarry()
			}
			return
		}
		if !s.skipping {
			s.carry = append(s.carry, rest[:i]...)
			s.line(s.carry)
		}
		s.carry, s.skipping = s.carry[:0], false
		rest = rest[i+1:]
	}
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		s.line(rest[:i])
		rest = rest[i+1:]
	}
	s.hold(rest, maxScanLine)
	if eos {
		s.flushCarry()
	}
}

// hold appends b to the incomplete line, or starts skipping it when it
// grows beyond limit.
func (s *sseScanner) hold(b []byte, limit int) {
	if s.skipping || len(b) == 0 {
		return
	}
	if len(s.carry)+len(b) > limit {
		s.carry, s.skipping = s.carry[:0], true
		return
	}
	s.carry = append(s.carry, b...)
}

func (s *sseScanner) flushCarry() {
	if len(s.carry) > 0 && !s.skipping {
		s.line(s.carry)
	}
	s.carry, s.skipping = s.carry[:0], false
}

// filter forwards carry+chunk up to its last newline without the hidden
// lines, and keeps the rest for the next chunk.
func (s *sseScanner) filter(chunk []byte, eos bool) []byte {
	out := s.out[:0]
	rest := chunk
	if s.skipping {
		// An overlong line is being passed through as it arrives.
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return chunk
		}
		out = append(out, rest[:i+1]...)
		rest = rest[i+1:]
		s.skipping = false
		s.seen++
	}
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		var line []byte
		if len(s.carry) > 0 {
			s.carry = append(s.carry, rest[:i+1]...)
			line = s.carry
		} else {
			line = rest[:i+1]
		}
		if !s.line(line[:len(line)-1]) {
			out = append(out, line...)
		}
		s.carry = s.carry[:0]
		rest = rest[i+1:]
	}
	if len(s.carry)+len(rest) > maxHoldLine {
		// Too long to be the usage chunk: release it and pass the rest of
		// the line through unparsed.
		out = append(out, s.carry...)
		out = append(out, rest...)
		s.carry, s.skipping = s.carry[:0], true
	} else {
		s.carry = append(s.carry, rest...)
	}
	if eos {
		if len(s.carry) > 0 && !s.line(s.carry) {
			out = append(out, s.carry...)
		}
		s.carry, s.skipping = s.carry[:0], false
	}
	s.out = out
	return out
}

var (
	dataPrefix = []byte("data:")
	doneMarker = []byte("[DONE]")
	usageKey   = []byte(`"usage"`)
)

// line handles one complete line (without its '\n') and reports whether
// it is to be hidden.
func (s *sseScanner) line(l []byte) bool {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	if len(l) == 0 {
		if s.dropBlank {
			s.dropBlank = false
			return true
		}
		return false
	}
	s.dropBlank = false
	if !bytes.HasPrefix(l, dataPrefix) {
		return false
	}
	p := l[len(dataPrefix):]
	if len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	if bytes.Equal(p, doneMarker) {
		s.done = true
		return false
	}
	if len(p) == 0 || p[0] != '{' || !validObject(p) {
		return false
	}
	hasUsage := bytes.Contains(p, usageKey)
	emptyChoices := false
	var u usage
	gjson.Parse(bstr(p)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "usage":
			if hasUsage {
				// v.Index is the value's offset in p (parsed from p[0]).
				u = readUsage(p[v.Index : v.Index+len(v.Raw)])
			}
		case "choices":
			n := 0
			v.ForEach(func(_, c gjson.Result) bool {
				n++
				if !c.Get("delta.role").Exists() {
					s.seen++
				}
				return true
			})
			emptyChoices = v.IsArray() && n == 0
		}
		return true
	})
	if u.ok {
		s.u = u
		if s.hide && emptyChoices {
			s.dropBlank = true
			return true
		}
	}
	return false
}

// maxTail is the tail of a non-streaming response kept, beyond
// max_response_bytes, to find its usage: usage and the members vLLM writes
// after it (prompt_logprobs, prompt_token_ids, ... when requested) are
// usually far smaller.
const maxTail = 64 << 10

// keepTail appends chunk to tail and keeps at most the last maxTail bytes
// (in a buffer of at most 2 × maxTail).
func keepTail(tail, chunk []byte) []byte {
	if len(chunk) >= maxTail {
		return append(tail[:0], chunk[len(chunk)-maxTail:]...)
	}
	if len(tail)+len(chunk) > 2*maxTail {
		n := copy(tail, tail[len(tail)-(maxTail-len(chunk)):])
		tail = tail[:n]
	}
	return append(tail, chunk...)
}

// tailUsage reads the usage of a response from the tail of its body: the
// last complete object value of a "usage" member in it. Inside a JSON
// string, quotes are escaped, so the bytes "usage" followed by a colon only
// occur as a member name.
func tailUsage(tail []byte) usage {
	for end := len(tail); end > 0; {
		i := bytes.LastIndex(tail[:end], usageKey)
		if i < 0 {
			break
		}
		end = i
		j := skipWS(tail, i+len(usageKey))
		if j >= len(tail) || tail[j] != ':' {
			continue
		}
		j = skipWS(tail, j+1)
		if j >= len(tail) || tail[j] != '{' {
			continue
		}
		k := objectEnd(tail, j)
		if k < 0 {
			continue
		}
		raw := tail[j:k]
		if !validObject(raw) {
			continue
		}
		if u := readUsage(raw); u.ok {
			return u
		}
	}
	return usage{}
}

// objectEnd returns the index after the '}' that closes the object opened
// at b[at], or -1 if b ends first. Only strings and braces are followed;
// the caller validates the span.
func objectEnd(b []byte, at int) int {
	depth, str := 0, false
	for i := at; i < len(b); i++ {
		c := b[i]
		switch {
		case str:
			if c == '\\' {
				i++
			} else if c == '"' {
				str = false
			}
		case c == '"':
			str = true
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
