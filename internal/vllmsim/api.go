package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// apiError is an error answered to a client, in vLLM's OpenAI format.
type apiError struct {
	status  int
	message string
	typ     string
	param   string // "" is null
}

func (e *apiError) Error() string { return e.message }

// body returns {"error":{"message","type","param","code"}}.
func (e *apiError) body() []byte {
	var param any
	if e.param != "" {
		param = e.param
	}
	b, _ := json.Marshal(struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   any    `json:"param"`
			Code    int    `json:"code"`
		} `json:"error"`
	}{Error: struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    int    `json:"code"`
	}{e.message, e.typ, param, e.status}})
	return b
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: 400, message: fmt.Sprintf(format, args...), typ: "BadRequestError"}
}

// validationError is FastAPI/pydantic's request validation failure, which
// vLLM answers with 400 and type "Bad Request".
func validationError(typ, loc, msg string, input string) *apiError {
	return &apiError{status: 400, typ: "Bad Request",
		message: fmt.Sprintf("[{'type': '%s', 'loc': ('body', '%s'), 'msg': '%s', 'input': %s}]", typ, loc, msg, input)}
}

// apiRequest is a parsed chat or completions request.
type apiRequest struct {
	chat            bool
	model           string
	requestID       string // the body's request_id, if any
	prompts         []int  // prompt tokens of each prompt
	n               int
	maxOut          []int // output limit per prompt
	eosAfter        int
	priority        int64
	stream          bool
	includeUsage    bool
	continuousUsage bool
	idents          []tokenIdent // per prompt, with prefix caching only
}

// parseOptions are the server settings the parser checks against.
type parseOptions struct {
	model       string            // the default when the body names none
	serves      func(string) bool // the names served; nil: model only
	maxModelLen int
	policy      Policy
	legacyV0    bool
	caching     bool // the engines cache prefixes: derive token identities
}

// parseRequest validates a POST body as vLLM does, in its order: content
// type, JSON schema, model, then prompt length. It never panics; errors are
// 400 or 404.
func parseRequest(chat bool, contentType string, body []byte, o parseOptions) (*apiRequest, *apiError) {
	mt, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	if strings.TrimSpace(mt) != "application/json" {
		return nil, &apiError{status: 400, typ: "Bad Request",
			message: "Unsupported Media Type: Only 'application/json' is allowed"}
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return nil, validationError("json_invalid", "0", "JSON decode error", "{}")
	}
	if _, err := dec.Token(); err == nil {
		return nil, validationError("json_invalid", "0", "JSON decode error", "{}")
	}
	req := &apiRequest{chat: chat, n: 1, model: o.model}

	if raw, ok := present(fields, "model"); ok {
		var m string
		if json.Unmarshal(raw, &m) != nil {
			return nil, validationError("string_type", "model", "Input should be a valid string", string(raw))
		}
		req.model = m
	}
	if raw, ok := present(fields, "request_id"); ok {
		if json.Unmarshal(raw, &req.requestID) != nil {
			return nil, validationError("string_type", "request_id", "Input should be a valid string", string(raw))
		}
	}
	var err *apiError
	if raw, ok := fields["priority"]; ok {
		if req.priority, err = laxInt("priority", raw); err != nil {
			return nil, err
		}
	}
	optInt := func(name string) (int64, bool, *apiError) {
		raw, ok := present(fields, name)
		if !ok {
			return 0, false, nil
		}
		v, err := laxInt(name, raw)
		return v, err == nil, err
	}
	n, hasN, err := optInt("n")
	if err != nil {
		return nil, err
	}
	maxTok, hasMax, err := optInt("max_tokens")
	if err != nil {
		return nil, err
	}
	if chat {
		mct, hasMCT, err := optInt("max_completion_tokens")
		if err != nil {
			return nil, err
		}
		if hasMCT {
			maxTok, hasMax = mct, true
		}
	} else if !hasMax {
		maxTok, hasMax = 16, true
	}
	eos, hasEOS, err := optInt("mock_eos_after")
	if err != nil {
		return nil, err
	}
	mockPrompt, hasMockPrompt, err := optInt("mock_prompt_tokens")
	if err != nil {
		return nil, err
	}
	if raw, ok := present(fields, "stream"); ok {
		if req.stream, err = laxBool("stream", raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := present(fields, "stream_options"); ok {
		var so map[string]json.RawMessage
		if json.Unmarshal(raw, &so) != nil || so == nil {
			return nil, validationError("model_type", "stream_options", "Input should be a valid dictionary or instance of StreamOptions", string(raw))
		}
		if r, ok := present(so, "include_usage"); ok {
			if req.includeUsage, err = laxBool("stream_options.include_usage", r); err != nil {
				return nil, err
			}
		}
		if r, ok := present(so, "continuous_usage_stats"); ok {
			if req.continuousUsage, err = laxBool("stream_options.continuous_usage_stats", r); err != nil {
				return nil, err
			}
		}
		if !req.stream {
			return nil, &apiError{status: 400, typ: "Bad Request",
				message: "Stream options can only be defined when `stream=True`."}
		}
	}
	req.continuousUsage = req.continuousUsage && req.includeUsage

	// The prompt.
	if chat {
		raw, ok := present(fields, "messages")
		if !ok {
			return nil, validationError("missing", "messages", "Field required", "{}")
		}
		p, perr := chatPromptTokens(raw)
		if perr != nil {
			return nil, perr
		}
		req.prompts = []int{p}
	} else {
		raw, ok := present(fields, "prompt")
		if !ok {
			return nil, validationError("missing", "prompt", "Field required", "{}")
		}
		ps, perr := completionPromptTokens(raw)
		if perr != nil {
			return nil, perr
		}
		req.prompts = ps
	}

	// Sampling parameters (vLLM's ValueErrors, 400 BadRequestError).
	if hasN {
		if n < 1 {
			return nil, badRequest("n must be at least 1, got %d.", n)
		}
		if n > 16384 {
			return nil, badRequest("n must be at most 16384, got %d.", n)
		}
		req.n = int(n)
	}
	if hasMax && maxTok < 1 {
		return nil, badRequest("max_tokens must be at least 1, got %d.", maxTok)
	}
	if hasEOS {
		if eos < 1 {
			return nil, badRequest("mock_eos_after must be at least 1, got %d.", eos)
		}
		req.eosAfter = int(min(eos, math.MaxInt32))
	}
	if hasMockPrompt {
		if mockPrompt < 1 {
			return nil, badRequest("mock_prompt_tokens must be at least 1, got %d.", mockPrompt)
		}
		for i := range req.prompts {
			req.prompts[i] = int(min(mockPrompt, math.MaxInt32))
		}
	}
	if o.caching {
		if req.idents, err = promptIdents(chat, fields, len(req.prompts)); err != nil {
			return nil, err
		}
	}

	if req.model != o.model && (o.serves == nil || !o.serves(req.model)) {
		return nil, &apiError{status: 404, typ: "NotFoundError", param: "model",
			message: fmt.Sprintf("The model `%s` does not exist.", req.model)}
	}
	if o.legacyV0 && o.policy == FCFS && req.priority != 0 {
		return nil, badRequest("Got priority %d but Priority scheduling is not enabled.", req.priority)
	}
	for _, p := range req.prompts {
		if p >= o.maxModelLen {
			requested := int64(0)
			if hasMax {
				requested = maxTok
			}
			return nil, &apiError{status: 400, typ: "BadRequestError", param: "input_tokens",
				message: fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains %d input tokens, for a total of %d tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
					o.maxModelLen, requested, p, requested+int64(p))}
		}
		limit := o.maxModelLen - p
		out := limit
		if hasMax && maxTok < int64(limit) {
			out = int(maxTok)
		}
		req.maxOut = append(req.maxOut, out)
	}
	return req, nil
}

// present returns the field unless it is absent or null.
func present(f map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := f[name]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false
	}
	return raw, true
}

// laxInt parses an int64 as pydantic's lax mode: an integer, an integral
// float (5.0), a numeric string ("5") or a bool. Anything else, or a value
// outside int64, is a validation error.
func laxInt(name string, raw json.RawMessage) (int64, *apiError) {
	raw = bytes.TrimSpace(raw)
	in := string(raw)
	if len(in) > 200 {
		in = in[:200]
	}
	if len(raw) == 0 {
		return 0, validationError("int_type", name, "Input should be a valid integer", "None")
	}
	switch raw[0] {
	case 't':
		if string(raw) == "true" {
			return 1, nil
		}
	case 'f':
		if string(raw) == "false" {
			return 0, nil
		}
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			break
		}
		s = strings.TrimSpace(s)
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return 0, validationError("int_parsing_size", name, "Unable to parse input string as an integer, exceeded maximum size", in)
			}
			return 0, validationError("int_parsing", name, "Input should be a valid integer, unable to parse string as an integer", in)
		}
		return v, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return v, nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !strings.ContainsAny(string(raw), ".eE") {
			// an integer literal beyond int64
			return 0, validationError("less_than_equal", name, "Input should be less than or equal to 9223372036854775807", in)
		}
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, validationError("finite_number", name, "Input should be a finite number", in)
		}
		if f != math.Trunc(f) {
			return 0, validationError("int_from_float", name, "Input should be a valid integer, got a number with a fractional part", in)
		}
		if f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
			return 0, validationError("less_than_equal", name, "Input should be in the int64 range", in)
		}
		return int64(f), nil
	}
	return 0, validationError("int_type", name, "Input should be a valid integer", in)
}

// laxBool parses a bool as pydantic's lax mode.
func laxBool(name string, raw json.RawMessage) (bool, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true", "1", `"true"`, `"1"`, `"yes"`, `"on"`, `"y"`, `"t"`:
		return true, nil
	case "false", "0", `"false"`, `"0"`, `"no"`, `"off"`, `"n"`, `"f"`:
		return false, nil
	}
	in := string(raw)
	if len(in) > 200 {
		in = in[:200]
	}
	return false, validationError("bool_parsing", name, "Input should be a valid boolean", in)
}

// estimateTokens is the mock's tokenizer: ceil(bytes/4).
func estimateTokens(b int) int { return (b + 3) / 4 }

// chatPromptTokens estimates the templated prompt: ceil(content bytes / 4)
// + 3 + 4 per message.
func chatPromptTokens(raw json.RawMessage) (int, *apiError) {
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return 0, validationError("list_type", "messages", "Input should be a valid list", "...")
	}
	bytesN := 0
	for i, m := range msgs {
		if m == nil {
			return 0, validationError("model_type", fmt.Sprintf("messages.%d", i), "Input should be a valid dictionary", "None")
		}
		c, ok := present(m, "content")
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(c, &s) == nil {
			bytesN += len(s)
			continue
		}
		var parts []map[string]json.RawMessage
		if json.Unmarshal(c, &parts) != nil {
			return 0, validationError("string_type", fmt.Sprintf("messages.%d.content", i), "Input should be a valid string", "...")
		}
		for _, p := range parts {
			var t string
			if tr, ok := present(p, "text"); ok && json.Unmarshal(tr, &t) == nil {
				bytesN += len(t)
			}
		}
	}
	return estimateTokens(bytesN) + 3 + 4*len(msgs), nil
}

// completionPromptTokens returns the lengths of the prompts of
// str | list[str] | list[int] | list[list[int]].
func completionPromptTokens(raw json.RawMessage) ([]int, *apiError) {
	empty := badRequest("The decoder prompt cannot be empty")
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, empty
		}
		return []int{estimateTokens(len(s))}, nil
	}
	var ints []int64
	if json.Unmarshal(raw, &ints) == nil {
		if len(ints) == 0 {
			return nil, empty
		}
		for _, t := range ints {
			if t < 0 {
				return nil, badRequest("Token id %d is out of vocabulary", t)
			}
		}
		return []int{len(ints)}, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) == 0 {
			return nil, empty
		}
		out := make([]int, 0, len(strs))
		for _, s := range strs {
			if s == "" {
				return nil, empty
			}
			out = append(out, estimateTokens(len(s)))
		}
		return out, nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		out := make([]int, 0, len(lists))
		for _, l := range lists {
			if len(l) == 0 {
				return nil, empty
			}
			for _, t := range l {
				if t < 0 {
					return nil, badRequest("Token id %d is out of vocabulary", t)
				}
			}
			out = append(out, len(l))
		}
		return out, nil
	}
	return nil, validationError("string_type", "prompt", "Input should be a valid string", "...")
}
