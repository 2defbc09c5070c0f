package plugin

import (
	"bytes"
	"strings"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// jsonContentType reports whether a request whose content-type header is
// ct ("" when absent) has a body vLLM's server reads as JSON: no
// content-type, or application/json or application/*+json (FastAPI parses
// the body as JSON exactly then).
func jsonContentType(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || strings.HasPrefix(ct, "application/") && strings.HasSuffix(ct, "+json")
}

// unscheduledBody is on_request_body for a stream in stStrip (checked
// against max_body_bytes already): it buffers the body until sniff has
// decided whether it may be JSON, then, for one that may, until its end,
// and strips it.
func (h *httpContext) unscheduledBody(size int, eos bool) types.Action {
	if !h.sniffed {
		switch h.sniff(size, eos) {
		case sniffWait:
			return types.ActionPause // StopIterationAndBuffer: nothing passes yet
		case sniffOther:
			h.state = stIgnored
			return types.ActionContinue
		}
		h.sniffed = true
	}
	if !eos {
		return types.ActionPause
	}
	return h.strip(size)
}

// strip removes (or, with unscheduled "reject", refuses) every top-level
// priority of the JSON body of a request the plugin does not schedule, so
// that no client-chosen priority reaches vLLM on any path (stripBody).
func (h *httpContext) strip(size int) types.Action {
	pc := h.pc
	h.state = stIgnored
	body, err := hostcalls.GetHttpRequestBody(0, size)
	if err != nil && err != types.ErrorStatusNotFound {
		return h.reply(errBodyRead, "")
	}
	if len(body) > pc.cfg.maxBodyBytes {
		return h.reply(errTooLarge, "")
	}
	// A scheduled request that shadow mode forwards after a would-refuse
	// (wouldRefuse set) is stripped, never refused for its priority.
	if e := h.stripBody(body, pc.cfg.rejectUnscheduled && h.wouldRefuse == ""); e != nil {
		return h.reply(*e, "")
	}
	return types.ActionContinue
}

// stripBody blanks out in place every top-level priority of the buffered
// request body (its length, and so its content-length, unchanged) and
// replaces the request body with it; with reject it refuses one instead.
// A body that is not JSON passes; one that is not valid JSON passes only
// if it cannot spell priority (no "priority", no escape). It returns the
// error to answer, or nil when the body may go. It serves the unscheduled
// path and, in shadow mode with shadow_strip_priority, the scheduled one.
func (h *httpContext) stripBody(body []byte, reject bool) *apiError {
	// Python's json module (and so vLLM) reads a UTF-8 byte-order mark:
	// the object is read after it, and stripped in place behind it.
	obj := bytes.TrimPrefix(body, utf8BOM)
	r, ok := inspect(obj, 1, true)
	if !ok {
		if h.json && utf16(body) || bytes.Contains(body, []byte("priority")) || bytes.Contains(body, []byte(`\u`)) {
			return &errUnreadable
		}
		return nil
	}
	if r.priorities.len() == 0 {
		return nil
	}
	if reject {
		return &errUnscheduledPriority
	}
	r.strip(obj)
	if err := hostcalls.ReplaceHttpRequestBody(body); err != nil {
		hostcalls.LogErrorf("fairshare: strip priority: %v", err)
		return &errRewrite
	}
	h.pc.met.pluginCounter(mStripped, 1)
	return nil
}

// sniffResult is what the buffered start of an unscheduled body shows.
type sniffResult uint8

const (
	// sniffWait: not yet known (fewer than four bytes, or nothing but a
	// byte-order mark and whitespace so far): keep buffering.
	sniffWait sniffResult = iota
	// sniffJSON: the body may be JSON that vLLM reads: buffer it whole.
	sniffJSON
	// sniffOther: the body cannot be JSON that vLLM reads (a form, a
	// binary upload, a body of only whitespace): it passes untouched.
	sniffOther
)

// sniff decides from the size bytes buffered so far whether an unscheduled
// body may be JSON that vLLM reads: an object ('{' after any whitespace,
// behind an optional UTF-8 byte-order mark), or, with a JSON content type,
// UTF-16 or UTF-32 (a byte-order mark or a zero byte among the first four,
// as Python's json.detect_encoding reads them). Nothing of the body is
// forwarded until it has decided: the decision never rests on where the
// client's chunks happen to end (a first chunk that is empty, whitespace
// or a bare byte-order mark). Whitespace already scanned is not read
// again (h.scanned).
func (h *httpContext) sniff(size int, eos bool) sniffResult {
	if !h.headSeen {
		if size < 4 && !eos {
			return sniffWait
		}
		head, _ := hostcalls.GetHttpRequestBody(0, min(size, 4))
		if h.json && utf16(head) {
			return sniffJSON
		}
		h.headSeen = true
		if bytes.HasPrefix(head, utf8BOM) {
			h.scanned = len(utf8BOM)
		}
	}
	for h.scanned < size {
		chunk, err := hostcalls.GetHttpRequestBody(h.scanned, min(size-h.scanned, sniffChunk))
		if err != nil || len(chunk) == 0 {
			return sniffJSON // not readable now: buffer it whole, for strip to read or refuse
		}
		if i := skipWS(chunk, 0); i < len(chunk) {
			if chunk[i] == '{' {
				return sniffJSON
			}
			return sniffOther
		}
		h.scanned += len(chunk)
	}
	if eos {
		return sniffOther // empty, or nothing but whitespace: no priority
	}
	return sniffWait
}

// sniffChunk bounds the bytes sniff reads per host call while it skips
// leading whitespace.
const sniffChunk = 4096

var utf8BOM = []byte("\xEF\xBB\xBF")

// utf16 reports whether body looks like JSON in UTF-16 or UTF-32, which
// Python's json module (and so vLLM) accepts: a byte-order mark, or a zero
// byte among the first four.
func utf16(b []byte) bool {
	if len(b) >= 2 && (b[0] == 0xFE && b[1] == 0xFF || b[0] == 0xFF && b[1] == 0xFE) {
		return true
	}
	return bytes.IndexByte(b[:min(len(b), 4)], 0) >= 0
}
