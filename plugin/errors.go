package plugin

import (
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// apiError is an error answered to the client in OpenAI's JSON format:
// {"error":{"message":...,"type":...,"param":...,"code":...}}.
type apiError struct {
	status  int    // HTTP status
	typ     string // error type, e.g. "invalid_request_error"
	param   string // offending field or header, "" for null
	message string
	reason  string // metric name segment: rejected_<reason>_total
}

// Errors the plugin answers itself.
var (
	errNoTeam = apiError{401, "authentication_error", "", "missing team: the request has no team header and no default team is configured", "no_team"}
	// errUnknownTeam, errBadClass and errBadModel are completed per request.
	errTooLarge     = apiError{413, "invalid_request_error", "", "request body too large", "body_too_large"}
	errNotObject    = apiError{400, "invalid_request_error", "", "request body must be a JSON object", "bad_body"}
	errBadModel     = apiError{400, "invalid_request_error", "model", "model must be a string", "bad_body"}
	errUnavailable  = apiError{503, "service_unavailable", "", "fair-share scheduler unavailable, retry later", "unavailable"}
	errStatusAuth   = apiError{401, "authentication_error", "", "missing or wrong bearer token for the status endpoint", "status_auth"}
	errStatusVerb   = apiError{405, "invalid_request_error", "", "the status endpoint answers GET only", "status_method"}
	errStatusOff    = apiError{403, "permission_error", "", "the status endpoint is off: configure status_token (or status_public)", "status_auth"}
	errNoModel      = apiError{400, "invalid_request_error", "model", "model is required: the request names no model and no default_model is configured", "no_model"}
	errBodyRead     = apiError{500, "internal_error", "", "fair-share scheduler could not read the request body", "body_read"}
	errRewrite      = apiError{500, "internal_error", "", "fair-share scheduler could not rewrite the request body", "rewrite"}
	errQueueFull    = apiError{429, "rate_limit_error", "", "the pool's queue is full: retry after the time in Retry-After", "queue_full"}
	errQueueTimeout = apiError{429, "rate_limit_error", "", "the request waited max_queue_time at the gateway without capacity: retry after the time in Retry-After", "queue_timeout"}
	errUnreadable   = apiError{400, "invalid_request_error", "", "request body must be valid UTF-8 JSON", "bad_body"}
	// errUnscheduledPriority answers a priority on a path the plugin does
	// not schedule, with unscheduled "reject".
	errUnscheduledPriority = apiError{400, "invalid_request_error", "priority", "priority is set by the gateway and must not be sent on this path", "client_priority"}
)

// duplicateHeaderError is the 400 of an identity header sent more than once
// (or with a comma-separated list of values).
func duplicateHeaderError(header string) apiError {
	return apiError{400, "invalid_request_error", header, "header " + strconv.Quote(header) + " must be sent exactly once, with one value", "duplicate_header"}
}

// unknownModelError is the 404 of a model that no pool lists.
func unknownModelError(model string) apiError {
	return apiError{404, "invalid_request_error", "model", "the model " + strconv.Quote(model) + " does not exist", "unknown_model"}
}

// unknownTeamError is the 403 of a team missing from the pool.
func unknownTeamError(header, team, pool string) apiError {
	return apiError{403, "permission_error", header, "team " + strconv.Quote(team) + " has no share in pool " + strconv.Quote(pool), "unknown_team"}
}

// badClassError is the 400 of an unknown request class.
func badClassError(header, class string) apiError {
	return apiError{400, "invalid_request_error", header, "request class must be \"interactive\" or \"batch\", got " + strconv.Quote(class), "bad_class"}
}

// body returns the JSON error body.
func (e apiError) body() []byte {
	b := make([]byte, 0, 96+len(e.message))
	b = append(b, `{"error":{"message":`...)
	b = gjson.AppendJSONString(b, e.message)
	b = append(b, `,"type":`...)
	b = gjson.AppendJSONString(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = gjson.AppendJSONString(b, e.param)
	}
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	return append(b, "}}"...)
}

// reply answers the stream with a JSON error and counts it.
func (h *httpContext) reply(e apiError, pool string) types.Action {
	h.state = stDone
	if pool != "" {
		h.pc.met.poolCounter(pool, rejectedName(e.reason), 1)
	} else {
		h.pc.met.pluginCounter(rejectedName(e.reason), 1)
	}
	if err := hostcalls.SendHttpResponse(uint32(e.status), jsonHeaders, e.body(), -1); err != nil {
		hostcalls.LogErrorf("fairshare: local reply %d: %v", e.status, err)
	}
	return types.ActionPause
}

var jsonHeaders = [][2]string{{"content-type", "application/json"}}

// tooMany answers 429 with a Retry-After of retry, rounded up to seconds.
func (h *httpContext) tooMany(e apiError, retry time.Duration, pool string) types.Action {
	h.state = stDone
	h.pc.met.poolCounter(pool, rejectedName(e.reason), 1)
	secs := int64((retry + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	hdrs := [][2]string{{"content-type", "application/json"}, {"retry-after", strconv.FormatInt(secs, 10)}}
	if err := hostcalls.SendHttpResponse(429, hdrs, e.body(), -1); err != nil {
		hostcalls.LogErrorf("fairshare: local reply 429: %v", err)
	}
	return types.ActionPause
}
