package vllmsim

import (
	"bytes"
	"strconv"
	"strings"
)

// TokenText is the text of every generated token.
const TokenText = " tok"

// responseWriter renders the JSON bodies and SSE chunks of one API request
// with vLLM's shapes (vllm/entrypoints/openai/engine/protocol.py and
// chat_completion/serving.py at 9aaf83ef). id and model are JSON-quoted.
type responseWriter struct {
	chat    bool
	id      string
	model   string
	created int64
	req     *apiRequest
	details bool // --enable-prompt-tokens-details
	cached  int  // num_cached_tokens of the request
}

func (rw *responseWriter) object() string {
	if rw.chat {
		return `"chat.completion.chunk"`
	}
	return `"text_completion"`
}

// promptTokens is the usage prompt_tokens: once per prompt, not per choice.
func (rw *responseWriter) promptTokens() int {
	p := 0
	for _, n := range rw.req.prompts {
		p += n
	}
	return p
}

func (rw *responseWriter) choicePrompt(choice int) int { return rw.req.prompts[choice/rw.req.n] }

func (rw *responseWriter) head(b *bytes.Buffer, object string) {
	b.WriteString(`{"id":`)
	b.WriteString(rw.id)
	b.WriteString(`,"object":`)
	b.WriteString(object)
	b.WriteString(`,"created":`)
	b.WriteString(strconv.FormatInt(rw.created, 10))
	b.WriteString(`,"model":`)
	b.WriteString(rw.model)
}

// writeUsage writes vLLM's UsageInfo. withDetails writes
// prompt_tokens_details (the JSON response dumps every field: null unless
// cached > 0); otherwise it appears only when cached > 0 (the usage chunk is
// dumped without None fields). cached > 0 only with
// --enable-prompt-tokens-details, as vLLM sets the field only then
// (PromptTokenUsageInfo{cached_tokens}, set by the chat and completion
// servers under "if self.enable_prompt_tokens_details and
// num_cached_tokens"; vLLM vllm/entrypoints/openai/engine/protocol.py at
// 9aaf83ef).
func writeUsage(b *bytes.Buffer, prompt, completion int, withDetails bool, cached int) {
	b.WriteString(`{"prompt_tokens":`)
	b.WriteString(strconv.Itoa(prompt))
	b.WriteString(`,"total_tokens":`)
	b.WriteString(strconv.Itoa(prompt + completion))
	b.WriteString(`,"completion_tokens":`)
	b.WriteString(strconv.Itoa(completion))
	if cached > 0 {
		b.WriteString(`,"prompt_tokens_details":{"cached_tokens":`)
		b.WriteString(strconv.Itoa(cached))
		b.WriteString(`}`)
	} else if withDetails {
		b.WriteString(`,"prompt_tokens_details":null`)
	}
	b.WriteString(`}`)
}

// reportedCached is the cached_tokens usage reports: vLLM sets
// prompt_tokens_details only with the flag and a non-zero count.
func (rw *responseWriter) reportedCached() int {
	if !rw.details {
		return 0
	}
	return rw.cached
}

func (rw *responseWriter) continuous(b *bytes.Buffer, choice, k int) {
	if rw.req.continuousUsage {
		b.WriteString(`,"usage":`)
		writeUsage(b, rw.choicePrompt(choice), k, false, 0)
	}
}

// roleChunk is the first chat chunk of a choice.
func (rw *responseWriter) roleChunk(b *bytes.Buffer, choice int) {
	b.WriteString("data: ")
	rw.head(b, rw.object())
	b.WriteString(`,"choices":[{"index":`)
	b.WriteString(strconv.Itoa(choice))
	b.WriteString(`,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`)
	rw.continuous(b, choice, 0)
	b.WriteString(`,"prompt_token_ids":null,"prompt_text":null}` + "\n\n")
}

// tokenChunk is the chunk of the k-th token of a choice; reason is set on
// its last token.
func (rw *responseWriter) tokenChunk(b *bytes.Buffer, choice, k int, reason string) {
	b.WriteString("data: ")
	rw.head(b, rw.object())
	b.WriteString(`,"choices":[{"index":`)
	b.WriteString(strconv.Itoa(choice))
	if rw.chat {
		b.WriteString(`,"delta":{"content":"` + TokenText + `"},"logprobs":null,"finish_reason":`)
	} else {
		b.WriteString(`,"text":"` + TokenText + `","logprobs":null,"finish_reason":`)
	}
	if reason == "" {
		b.WriteString(`null`)
	} else {
		b.WriteString(`"` + reason + `"`)
	}
	if rw.chat {
		if reason != "" {
			b.WriteString(`,"stop_reason":null`)
		}
		b.WriteString(`,"token_ids":null}]`)
	} else {
		b.WriteString(`,"stop_reason":null}]`)
	}
	rw.continuous(b, choice, k)
	b.WriteString("}\n\n")
}

// usageChunk is the include_usage chunk: no choices, the total usage.
func (rw *responseWriter) usageChunk(b *bytes.Buffer, tokens []int) {
	completion := 0
	for _, k := range tokens {
		completion += k
	}
	b.WriteString("data: ")
	rw.head(b, rw.object())
	b.WriteString(`,"choices":[],"usage":`)
	writeUsage(b, rw.promptTokens(), completion, false, rw.reportedCached())
	b.WriteString("}\n\n")
}

// full is the non-streaming response.
func (rw *responseWriter) full(recs []Record) []byte {
	var b bytes.Buffer
	completion := 0
	if rw.chat {
		rw.head(&b, `"chat.completion"`)
	} else {
		rw.head(&b, `"text_completion"`)
	}
	b.WriteString(`,"choices":[`)
	for i, r := range recs {
		completion += r.CompletionTokens
		if i > 0 {
			b.WriteByte(',')
		}
		text := strings.Repeat(TokenText, r.CompletionTokens)
		b.WriteString(`{"index":`)
		b.WriteString(strconv.Itoa(i))
		if rw.chat {
			b.WriteString(`,"message":{"role":"assistant","content":"` + text +
				`","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning":null},"logprobs":null,"finish_reason":"` +
				r.FinishReason + `","stop_reason":null,"token_ids":null}`)
		} else {
			b.WriteString(`,"text":"` + text + `","logprobs":null,"finish_reason":"` + r.FinishReason +
				`","stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null}`)
		}
	}
	b.WriteString(`],"service_tier":null,"system_fingerprint":null,"usage":`)
	writeUsage(&b, rw.promptTokens(), completion, true, rw.reportedCached())
	if rw.chat {
		b.WriteString(`,"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,"kv_transfer_params":null}`)
	} else {
		b.WriteString(`,"kv_transfer_params":null}`)
	}
	return b.Bytes()
}
