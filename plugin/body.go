package plugin

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tidwall/gjson"
)

// maxN bounds n in the estimate (vLLM's VLLM_MAX_N_SEQUENCES).
const maxN = 16384

// request is what the decision needs from a request body, read in one pass
// over its top-level members. Duplicate members are read as vLLM reads them:
// the last one wins.
type request struct {
	model    string // "" when absent; refers to the body's memory
	modelSet bool   // the body has a model member
	modelBad bool   // model present but neither a string nor null
	// prompt is the estimated prompt length in tokens: bytes/4 (rounded up)
	// of messages, prompt strings, input and instructions, exact for
	// token-id prompts, mediaPartTokens for an image, audio or video part.
	prompt int64
	// completion is the completion limit of one choice:
	// max_completion_tokens ?? max_tokens ?? max_output_tokens ??
	// default_max_tokens, 0 for a pooling request.
	completion int64
	n          int64 // choices, at least 1
	// prompts is the number of prompts: a completions prompt given as a
	// list of strings or of token-id lists is a batch, each prompt with its
	// own n completions.
	prompts int64
	stream  bool
	// includeUsage: the client asked for stream_options.include_usage.
	includeUsage bool
	// user is the span of the body's last top-level "user" member
	// (userSet), read only with user_from_body (users.go).
	user    span
	userSet bool

	// Where rewrite and strip edit, found by the same pass.
	open       int   // index of the object's '{'
	empty      bool  // the object has no members
	priorities spans // every top-level priority member
	options    spans // every top-level stream_options member
}

// span is a member's position in the body: its key starts at key, its
// value is body[at:end].
type span struct{ key, at, end int }

// spans is a list of spans that holds its first two in place: a request,
// which inspect returns by value, then allocates nothing for them (a slice
// of an array of its own would move every request to the heap). The zero
// value is an empty list.
type spans struct {
	n     int
	first [2]span
	more  []span // the spans after the first two
}

// add appends p.
func (s *spans) add(p span) {
	if s.n < len(s.first) {
		s.first[s.n] = p
	} else {
		s.more = append(s.more, p)
	}
	s.n++
}

// len is the number of spans.
func (s *spans) len() int { return s.n }

// at returns the i-th span, 0 ≤ i < len().
func (s *spans) at(i int) span {
	if i < len(s.first) {
		return s.first[i]
	}
	return s.more[i-len(s.first)]
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
// module (and so vLLM) reads them: the last one wins. Numbers are read as
// vLLM's pydantic models read an int in lax mode (a numeric string counts).
// With pooling the request generates nothing: its estimate is its prompt,
// the whole body's bytes/4. The request refers to body's memory.
func inspect(body []byte, defaultMaxTokens int, pooling bool) (r request, ok bool) {
	r = request{n: 1, prompts: 1, open: -1, empty: true}
	r.open = skipWS(body, 0)
	var maxTokens, maxCompletion, maxOutput int64 = -1, -1, -1
	var messages, prompt, input, instructions, tokenIDs int64
	prev := r.open + 1 // where the previous member's value ended
	ok = scanMembers(body, func(key string, at, end int, typed bool) {
		r.empty = false
		k := skipWS(body, prev)
		if k < len(body) && body[k] == ',' {
			k = skipWS(body, k+1)
		}
		prev = end
		raw := body[at:end]
		switch key {
		case "priority":
			r.priorities.add(span{k, at, end})
		case "model":
			r.modelSet = true
			switch v := parseValue(raw); v.Type {
			case gjson.String:
				r.model, r.modelBad = v.Str, false
			case gjson.Null:
				r.model, r.modelBad = "", false
			default:
				r.model, r.modelBad = "", true
			}
		case "messages":
			if typed {
				messages = messagesTokens(raw)
			} else {
				// No content part names a type: messagesTokens
				// would count every byte, without a second pass.
				messages = ceil4(len(raw))
			}
		case "prompt":
			prompt, r.prompts = promptTokens(gjson.Parse(bstr(raw)))
		case "input":
			input = inputTokens(raw)
		case "instructions":
			instructions = ceil4(len(raw))
		case "token_ids":
			tokenIDs, _ = promptTokens(gjson.Parse(bstr(raw)))
		case "max_tokens":
			maxTokens = laxPositive(raw)
		case "max_completion_tokens":
			maxCompletion = laxPositive(raw)
		case "max_output_tokens":
			maxOutput = laxPositive(raw)
		case "n":
			r.n = laxPositive(raw)
		case "stream":
			r.stream = laxTrue(raw)
		case "stream_options":
			r.includeUsage = includeUsage(raw)
			r.options.add(span{k, at, end})
		case bodyUser:
			r.user, r.userSet = span{k, at, end}, true
		}
	})
	if !ok {
		return r, false
	}
	r.prompt = satAdd(satAdd(satAdd(satAdd(messages, prompt), input), instructions), tokenIDs)
	switch {
	case pooling:
		r.prompt, r.completion, r.prompts = ceil4(len(body)), 0, 1
	case maxCompletion > 0:
		r.completion = maxCompletion
	case maxTokens > 0:
		r.completion = maxTokens
	case maxOutput > 0:
		r.completion = maxOutput
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

// includeUsage reports whether the stream_options value raw asks for usage
// as vLLM reads it: an object whose last include_usage member is true.
func includeUsage(raw []byte) bool {
	v := gjson.Parse(bstr(raw))
	if !v.IsObject() {
		return false
	}
	on := false
	v.ForEach(func(k, o gjson.Result) bool {
		if k.Str == "include_usage" {
			on = laxTrue([]byte(o.Raw))
		}
		return true
	})
	return on
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

// laxPositive returns the JSON value raw as a positive integer, as vLLM's
// pydantic models read an int in lax mode: a number without a fraction, a
// string holding one (surrounding whitespace, a sign and digit-separating
// underscores allowed, "4096.0" too), or true (1); -1 for anything else,
// for which vLLM refuses the request or uses its default.
func laxPositive(raw []byte) int64 {
	v := parseValue(raw)
	switch v.Type {
	case gjson.True:
		return 1
	case gjson.String:
		s := strings.TrimSpace(v.Str)
		s = strings.TrimPrefix(s, "+")
		if strings.Contains(s, "_") {
			if strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
				return -1
			}
			s = strings.ReplaceAll(s, "_", "")
		}
		if s == "" || strings.ContainsAny(s, "eExXnN") {
			return -1
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return -1
		}
		v = gjson.Result{Type: gjson.Number, Num: f}
	case gjson.Number:
	default:
		return -1
	}
	if v.Num < 1 || v.Num != math.Trunc(v.Num) {
		return -1
	}
	if v.Num > maxEstimateTokens {
		return maxEstimateTokens
	}
	return int64(v.Num)
}

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

// rewrite returns body, the body r was read from (inspect), with
// "priority": priority, overwriting every priority member the client sent
// (all of them, so that no duplicate survives). With addUsage it also sets
// stream_options.include_usage to true (creating stream_options if needed)
// and turns continuous_usage_stats off, so that vLLM sends exactly one
// extra usage chunk, which the response filter hides. The edit is
// byte-level: every other byte of the body is kept. body must be a valid
// JSON object. dst is reused when it has room.
func (r *request) rewrite(dst, body []byte, priority int, addUsage bool) []byte {
	var pr [24]byte
	var edits [8]edit
	var ins [insertMax]byte
	es := r.edits(edits[:0], ins[:0], r.priorityValue(pr[:0], body, priority), addUsage)
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

// insertMax bounds what edits inserts after the '{': the priority and
// stream_options members.
const insertMax = len(`"priority":-9223372036854775808,"stream_options":{"include_usage":true},`)

// priorityValue returns the digits of priority appended to dst, or, for
// noPriority, nil after removing every priority member from body in place
// (strip), so that edits writes none.
func (r *request) priorityValue(dst, body []byte, priority int) []byte {
	if priority != noPriority {
		return strconv.AppendInt(dst, int64(priority), 10)
	}
	if r.strip(body) && skipWS(body, r.open+1) < len(body) && body[skipWS(body, r.open+1)] == '}' {
		r.empty = true // only priorities: nothing is left to separate
	}
	r.priorities = spans{}
	return nil
}

// edits appends to es, in order of position, the edits that rewrite makes
// to the body r was read from; pv is the priority's digits (nil: no
// priority is written) and ins the memory for the inserted members.
func (r *request) edits(es []edit, ins, pv []byte, addUsage bool) []edit {
	for i := range r.priorities.len() {
		p := r.priorities.at(i)
		es = append(es, edit{p.at, p.end, pv})
	}
	if addUsage {
		// Every stream_options the client sent is replaced whole, so that
		// no duplicate key inside it can be read differently by vLLM.
		for i := range r.options.len() {
			o := r.options.at(i)
			es = append(es, edit{o.at, o.end, usageOptions})
		}
	}
	insert := ins[:0]
	if r.priorities.len() == 0 && pv != nil {
		insert = append(insert, `"priority":`...)
		insert = append(insert, pv...)
	}
	if addUsage && r.options.len() == 0 {
		if len(insert) > 0 {
			insert = append(insert, ',')
		}
		insert = append(insert, `"stream_options":`...)
		insert = append(insert, usageOptions...)
	}
	if len(insert) > 0 {
		if !r.empty {
			insert = append(insert, ',')
		}
		es = append(es, edit{r.open + 1, r.open + 1, insert})
	}
	// In order of position.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].at < es[j-1].at; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
	return es
}

// keepBuffer is the largest buffer the plugin keeps for the next request
// (the body read buffer, the rewrite scratch): a larger one is left to the
// garbage collector.
const keepBuffer = 2 << 20

// readBody reads the buffered request body (at most size bytes) into
// pc.reqBuf's memory and keeps the buffer for the next request, so that a
// request body up to keepBuffer is read without allocating. The body is
// valid until the next readBody: decide reads the request's members from
// it and writes it back (writeBody) before it returns, and nothing keeps
// it.
func (pc *pluginContext) readBody(size int) ([]byte, error) {
	body, err := hostcalls.GetHttpRequestBodyInto(pc.reqBuf, 0, size)
	if cap(body) <= keepBuffer && cap(body) > cap(pc.reqBuf) {
		pc.reqBuf = body[:0]
	}
	return body, err
}

// writeBody writes body with req's edits back as the request body
// (request.send), its short pieces joined in pc.body.
func (pc *pluginContext) writeBody(req *request, body []byte, priority int, addUsage bool) error {
	out, err := req.send(pc.body, &pc.edit, body, priority, addUsage, hostcalls.ReplaceHttpRequestBody, hostcalls.AppendHttpRequestBody)
	if cap(out) <= keepBuffer {
		pc.body = out
	}
	return err
}

// sendDirect is the length from which an unchanged piece of the body is
// passed to the host as it is rather than joined with its neighbours.
const sendDirect = 1 << 10

// send writes rewrite's result to the host without building it: the body
// is replaced by its first piece (replace: proxy_set_buffer_bytes with
// start 0 and size ≥ len) and every further piece appended (add: start ≥
// len), which are the edits Envoy's Buffer::copyFrom accepts besides a
// prepend. Unchanged runs of the body of sendDirect bytes or more go to the
// host straight from body, so the module never copies them; the short
// pieces between them (the '{', the inserted members, the values replaced)
// are joined in scratch, which is returned for reuse; the edits' values are
// built in tmp (nil: a new one), which must outlive no other send. A body with nothing
// long in it is one replace, as with rewrite. On an error the host's body
// may hold only some pieces: the caller must not forward it.
func (r *request) send(scratch []byte, tmp *editScratch, body []byte, priority int, addUsage bool, replace, add func([]byte) error) ([]byte, error) {
	if tmp == nil {
		tmp = new(editScratch)
	}
	var edits [8]edit
	es := r.edits(edits[:0], tmp.ins[:0], r.priorityValue(tmp.pr[:0], body, priority), addUsage)
	w := pieceWriter{pending: scratch[:0], replace: replace, add: add}
	last := 0
	for _, e := range es {
		w.piece(body[last:e.at])
		// An edit's value is short (a number, the inserted members):
		// always joined, so that it never reaches a host call from the
		// stack memory it is built in.
		w.pending = append(w.pending, e.val...)
		last = e.end
	}
	w.piece(body[last:])
	if w.err == nil && (len(w.pending) > 0 || w.calls == 0) {
		w.put(w.pending)
	}
	return w.pending[:0], w.err
}

// editScratch is where send builds the edits' values: kept by the plugin
// context from request to request, since a value stored in an edit would
// move a local array to the heap on every request.
type editScratch struct {
	pr  [24]byte
	ins [insertMax]byte
}

// pieceWriter sends the pieces of a body to the host for send: the first
// through replace, the others through add, short ones joined in pending.
// After an error it sends nothing more.
type pieceWriter struct {
	pending      []byte
	replace, add func([]byte) error
	calls        int
	err          error
}

// put sends b.
func (w *pieceWriter) put(b []byte) {
	if w.err != nil {
		return
	}
	if w.calls++; w.calls == 1 {
		w.err = w.replace(b)
	} else {
		w.err = w.add(b)
	}
}

// piece queues b, or sends it straight from the body with what is pending
// before it if it is sendDirect bytes or more.
func (w *pieceWriter) piece(b []byte) {
	if len(b) < sendDirect {
		w.pending = append(w.pending, b...)
		return
	}
	if len(w.pending) > 0 {
		w.put(w.pending)
		w.pending = w.pending[:0]
	}
	w.put(b)
}

// edit replaces body[at:end] with val.
type edit struct {
	at, end int
	val     []byte
}

// usageOptions is the stream_options of a stream whose usage the plugin
// asks for: exactly one usage chunk, at the end, which the response filter
// hides.
var usageOptions = []byte(`{"include_usage":true}`)

// strip blanks every top-level priority member of body, the body r was read
// from, in place: the member and one comma next to it become spaces, so the
// object stays valid JSON of the same length (no Content-Length to fix) and
// no priority is left. It reports whether it changed body.
func (r *request) strip(body []byte) bool {
	if r.priorities.len() == 0 {
		return false
	}
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			body[i] = ' '
		}
	}
	// kept: a member before the current one survives, so the comma
	// before the current one exists and can go with it. Until then every
	// byte from the '{' to the last blank is whitespace.
	kept, last := false, r.open+1
	for i := range r.priorities.len() {
		p := r.priorities.at(i)
		if !kept && skipWS(body, last) < p.key {
			kept = true
		}
		if kept {
			c := p.key - 1
			for body[c] != ',' {
				c--
			}
			blank(c, p.end)
			last = p.end
			continue
		}
		to := p.end
		if j := skipWS(body, p.end); j < len(body) && body[j] == ',' {
			to = j + 1
		}
		blank(p.key, to)
		last = to
	}
	return true
}
