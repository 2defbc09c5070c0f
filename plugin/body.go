package plugin

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// maxN bounds n in the estimate (vLLM's VLLM_MAX_N_SEQUENCES).
const maxN = 16384

// request is what the decision needs from a request body, read in one pass
// over its top-level members.
type request struct {
	model    string // "" when absent; refers to the body's memory
	modelBad bool   // model present but not a string
	// prompt is the estimated prompt length in tokens: bytes/4 (rounded up)
	// of messages or of prompt strings, exact for token-id prompts.
	prompt int64
	// completion is the completion limit of one choice:
	// max_completion_tokens ?? max_tokens ?? default_max_tokens.
	completion int64
	n          int64 // choices, at least 1
	// prompts is the number of prompts: a completions prompt given as a
	// list of strings or of token-id lists is a batch, each prompt with its
	// own n completions.
	prompts int64
	stream  bool
	// includeUsage: the client asked for stream_options.include_usage.
	includeUsage bool

	// Where rewrite edits, found by the same pass.
	open       int     // index of the object's '{'
	empty      bool    // the object has no members
	priorities []span  // every top-level priority value
	prioBuf    [2]span // backing array of priorities
	options    []span  // every top-level stream_options value
	optBuf     [1]span // backing array of options
}

// span is a value's position in the body.
type span struct{ at, end int }

// tokens is the estimated token count of the request: the prompt once (vLLM
// reports it once even for n > 1) plus n completions of every prompt of a
// batch.
func (r *request) tokens() (prompt, completion int64) {
	return r.prompt, r.prompts * r.n * r.completion
}

// bstr views b as a string without copying; the string is valid while b is
// neither modified nor reused.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// inspect checks that body is one JSON object and reads, in the same pass,
// the fields that drive its cost and where rewrite edits it; ok is false
// if body is not a JSON object. Duplicate members are read as Python's json
// module (and so vLLM) reads them: the last one wins. The request refers to
// body's memory.
func inspect(body []byte, defaultMaxTokens int) (r request, ok bool) {
	r = request{n: 1, prompts: 1, open: -1, empty: true}
	r.priorities = r.prioBuf[:0]
	r.options = r.optBuf[:0]
	r.open = skipWS(body, 0)
	var maxTokens, maxCompletion int64 = -1, -1
	ok = scanObject(body, func(key string, at, end int) {
		r.empty = false
		raw := body[at:end]
		switch key {
		case "priority":
			r.priorities = append(r.priorities, span{at, end})
		case "model":
			if v := parseValue(raw); v.Type == gjson.String {
				r.model, r.modelBad = v.Str, false
			} else {
				r.model, r.modelBad = "", true
			}
		case "messages":
			r.prompt = messagesTokens(raw)
		case "prompt":
			r.prompt, r.prompts = promptTokens(gjson.Parse(bstr(raw)))
		case "max_tokens":
			maxTokens = positive(parseValue(raw))
		case "max_completion_tokens":
			maxCompletion = positive(parseValue(raw))
		case "n":
			r.n = positive(parseValue(raw))
		case "stream":
			r.stream = laxTrue(raw)
		case "stream_options":
			v := gjson.Parse(bstr(raw))
			r.includeUsage = v.IsObject() && laxTrue([]byte(v.Get("include_usage").Raw))
			r.options = append(r.options, span{at, end})
		}
	})
	if !ok {
		return r, false
	}
	switch {
	case maxCompletion > 0:
		r.completion = maxCompletion
	case maxTokens > 0:
		r.completion = maxTokens
	default:
		r.completion = int64(defaultMaxTokens)
	}
	if r.n < 1 {
		r.n = 1
	}
	if r.n > maxN {
		r.n = maxN
	}
	return r, true
}

// parseValue is gjson.Parse(bstr(raw)) for raw, one complete JSON value
// without surrounding whitespace (a span found by scanObject), with fast
// paths that give the same Result for the common values of a request or a
// usage object: integers of up to 15 digits (exact as a float64; gjson's
// strconv.ParseFloat costs about half a microsecond in Wasm) and strings
// without escapes.
func parseValue(raw []byte) gjson.Result {
	switch {
	case len(raw) == 0:
	case raw[0] >= '0' && raw[0] <= '9' && len(raw) <= 15:
		n := 0
		for _, c := range raw {
			if c < '0' || c > '9' {
				return gjson.Parse(bstr(raw))
			}
			n = n*10 + int(c-'0')
		}
		return gjson.Result{Type: gjson.Number, Raw: bstr(raw), Num: float64(n)}
	case raw[0] == '"' && len(raw) >= 2 && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0:
		s := bstr(raw)
		return gjson.Result{Type: gjson.String, Raw: s, Str: s[1 : len(s)-1]}
	}
	return gjson.Parse(bstr(raw))
}

// positive returns v as a positive integer, or -1.
func positive(v gjson.Result) int64 {
	if v.Type != gjson.Number || v.Num < 1 || v.Num != math.Trunc(v.Num) || v.Num > 1<<40 {
		return -1
	}
	return int64(v.Num)
}

func ceil4(n int) int64 { return int64((n + 3) / 4) }

// laxTrue reports whether the JSON value raw is true as vLLM's pydantic
// models read a bool in lax mode: true, the numbers 1 and 1.0, or a string
// that is, in lower case, one of 1, on, t, true, y, yes. A stream given as
// "true" is a stream.
func laxTrue(raw []byte) bool {
	switch v := parseValue(raw); v.Type {
	case gjson.True:
		return true
	case gjson.Number:
		return v.Num == 1
	case gjson.String:
		switch strings.ToLower(v.Str) {
		case "1", "on", "t", "true", "y", "yes":
			return true
		}
	}
	return false
}

// mediaPartTokens is the prompt estimate of one non-text content part of a
// chat message (image, audio, video): its tokens depend on the model's
// encoder, not on the bytes of its (often base64) data.
const mediaPartTokens = 1024

// messagesTokens estimates the prompt of chat messages: bytes/4 (rounded
// up) of the messages, except that each content part whose type is not
// "text" counts mediaPartTokens instead of its bytes.
func messagesTokens(raw []byte) int64 {
	if !bytes.Contains(raw, []byte(`"type"`)) {
		return ceil4(len(raw))
	}
	text, parts := len(raw), int64(0)
	gjson.Parse(bstr(raw)).ForEach(func(_, m gjson.Result) bool {
		c := m.Get("content")
		if !c.IsArray() {
			return true
		}
		c.ForEach(func(_, p gjson.Result) bool {
			if t := p.Get("type"); p.IsObject() && t.Type == gjson.String && t.Str != "text" {
				text -= len(p.Raw)
				parts++
			}
			return true
		})
		return true
	})
	return ceil4(text) + parts*mediaPartTokens
}

// promptTokens estimates a completions prompt: str | [str] | [int] |
// [[int]]; prompts is the number of prompts (the length of a [str] or
// [[int]] batch, else 1).
func promptTokens(v gjson.Result) (n, prompts int64) {
	switch v.Type {
	case gjson.String:
		return ceil4(len(v.Str)), 1
	case gjson.JSON:
		if !v.IsArray() {
			return ceil4(len(v.Raw)), 1
		}
	default:
		return 0, 1
	}
	var elems, numbers int64
	v.ForEach(func(_, e gjson.Result) bool {
		elems++
		if e.Type == gjson.Number {
			numbers++
		}
		switch {
		case e.Type == gjson.Number:
			n++
		case e.Type == gjson.String:
			n += ceil4(len(e.Str))
		case e.IsArray():
			e.ForEach(func(_, t gjson.Result) bool {
				n++
				return true
			})
		default:
			n += ceil4(len(e.Raw))
		}
		return true
	})
	prompts = 1
	if numbers == 0 && elems > 1 {
		prompts = min(elems, maxN)
	}
	return n, prompts
}

// rewrite returns body with "priority": priority, overwriting every priority
// member the client sent (all of them, so that no duplicate survives). With
// addUsage it also sets stream_options.include_usage to true (creating
// stream_options if needed) and turns continuous_usage_stats off, so that
// vLLM sends exactly one extra usage chunk, which the response filter hides.
// The edit is byte-level: every other byte of the body is kept. body must be
// a valid JSON object. dst is reused when it has room.
func rewrite(dst, body []byte, priority int, addUsage bool) []byte {
	r, _ := inspect(body, 1)
	return r.rewrite(dst, body, priority, addUsage)
}

// rewrite is rewrite for the body r was read from, without reading the
// body's members again.
func (r *request) rewrite(dst, body []byte, priority int, addUsage bool) []byte {
	var pr [24]byte
	pv := strconv.AppendInt(pr[:0], int64(priority), 10)
	var edits [8]edit
	es := edits[:0]
	for _, p := range r.priorities {
		es = append(es, edit{p.at, p.end, pv})
	}
	if addUsage {
		for _, o := range r.options {
			v := gjson.Parse(bstr(body[o.at:o.end]))
			es = appendOptionEdits(es, v, o.at)
		}
	}
	var insert []byte
	if len(r.priorities) == 0 {
		insert = append(insert, `"priority":`...)
		insert = append(insert, pv...)
	}
	if addUsage && len(r.options) == 0 {
		if len(insert) > 0 {
			insert = append(insert, ',')
		}
		insert = append(insert, `"stream_options":{"include_usage":true}`...)
	}
	if len(insert) > 0 {
		if !r.empty {
			insert = append(insert, ',')
		}
		es = append(es, edit{r.open + 1, r.open + 1, insert})
	}
	// Apply the edits in order of position.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].at < es[j-1].at; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	grow := 0
	for _, e := range es {
		grow += len(e.val) - (e.end - e.at)
	}
	out := dst[:0]
	if cap(out) < len(body)+grow {
		out = make([]byte, 0, len(body)+grow)
	}
	last := 0
	for _, e := range es {
		out = append(out, body[last:e.at]...)
		out = append(out, e.val...)
		last = e.end
	}
	return append(out, body[last:]...)
}

// edit replaces body[at:end] with val.
type edit struct {
	at, end int
	val     []byte
}

var (
	jsonTrue  = []byte("true")
	jsonFalse = []byte("false")
)

// appendOptionEdits appends the edits that make the stream_options value v,
// parsed from the body at offset base, ask for exactly one usage chunk.
func appendOptionEdits(es []edit, v gjson.Result, base int) []edit {
	if !v.IsObject() {
		// Not an object (vLLM rejects it anyway): replace it.
		return append(es, edit{base, base + len(v.Raw), []byte(`{"include_usage":true}`)})
	}
	found, empty := false, true
	v.ForEach(func(k, o gjson.Result) bool {
		empty = false
		switch k.Str {
		case "include_usage":
			found = true
			es = append(es, edit{base + o.Index, base + o.Index + len(o.Raw), jsonTrue})
		case "continuous_usage_stats":
			es = append(es, edit{base + o.Index, base + o.Index + len(o.Raw), jsonFalse})
		}
		return true
	})
	if !found {
		at := base + v.Index + 1 // after the '{' (v.Raw starts with it)
		val := []byte(`"include_usage":true`)
		if !empty {
			val = append(val, ',')
		}
		es = append(es, edit{at, at, val})
	}
	return es
}
