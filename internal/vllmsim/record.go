package vllmsim

import "time"

// Finish reasons, as vLLM's finished_reason label and the API's
// finish_reason.
const (
	FinishStop   = "stop"   // the request hit its EOS (EOSAfter / mock_eos_after)
	FinishLength = "length" // the request reached its output limit
	FinishAbort  = "abort"  // the request was aborted (Handle.Abort, client disconnect)
)

// Record is what happened to one engine request (one choice of an API
// request). Times are engine times: virtual time in a Sim, the model clock in
// a Server (wall clock when TimeScale is 1). A zero time means the event did
// not happen (for example FirstToken of a request aborted while waiting).
type Record struct {
	// ID is the request's ID: Request.ID in a Sim; in a Server the
	// response id, "chatcmpl-" or "cmpl-" followed by the X-Request-Id
	// header, else the body's request_id, else 32 hex digits of a counter.
	ID string `json:"id"`
	// Choice is the index of this engine request among the request's N
	// (and, for a completions prompt list, its prompts: prompt·N + n).
	Choice int `json:"choice"`
	// Replica is the index of the engine that served it.
	Replica int `json:"replica"`
	// Priority is the priority received (also under FCFS, which ignores it).
	Priority int64 `json:"priority"`
	// Arrival is when the engine received it.
	Arrival time.Time `json:"arrival"`
	// Admitted is when it was first scheduled.
	Admitted time.Time `json:"admitted"`
	// FirstToken is the end of the step that produced its first token.
	FirstToken time.Time `json:"first_token"`
	// Finished is when it finished (or was aborted).
	Finished time.Time `json:"finished"`
	// Preemptions counts how often it was preempted.
	Preemptions int `json:"preemptions"`
	// PromptTokens is its prompt length.
	PromptTokens int `json:"prompt_tokens"`
	// CompletionTokens is the number of output tokens (as billed in usage:
	// recompute is not counted).
	CompletionTokens int `json:"completion_tokens"`
	// ComputedTokens is every token the engine computed for it, including
	// the recompute after preemptions.
	ComputedTokens int `json:"computed_tokens"`
	// CachedTokens is the prompt tokens found in the prefix cache when it
	// was first scheduled (vLLM's num_cached_tokens); always 0 unless
	// EngineConfig.EnablePrefixCaching.
	CachedTokens int `json:"cached_tokens,omitempty"`
	// FinishReason is FinishStop, FinishLength or FinishAbort.
	FinishReason string `json:"finish_reason"`
}

// QueueTime is Admitted − Arrival, or 0 if it was never admitted.
func (r Record) QueueTime() time.Duration {
	if r.Admitted.IsZero() {
		return 0
	}
	return r.Admitted.Sub(r.Arrival)
}

// TTFT is FirstToken − Arrival, or 0 if no token was produced.
func (r Record) TTFT() time.Duration {
	if r.FirstToken.IsZero() {
		return 0
	}
	return r.FirstToken.Sub(r.Arrival)
}

// E2E is Finished − Arrival.
func (r Record) E2E() time.Duration { return r.Finished.Sub(r.Arrival) }
