package vllmsim

import (
	"encoding/json"
	"hash/fnv"
)

// Chat template stand-in for the token identities of a chat prompt: the
// mock counts ceil(content bytes/4) + 3 + 4 per message tokens, which is
// exactly the tokens of the byte stream "16-byte header per message, its
// content, then a 12-byte generation prompt" cut into 4-byte tokens.
const (
	chatHeaderBytes    = 16
	chatGenPromptBytes = 12
)

// promptIdents returns the token identities of each prompt of a parsed
// request, for prefix caching: the request's "mock_hash_ids" (Mooncake ids
// of 512 tokens, for every prompt) if present, else the prompt itself (token
// ids, or text cut into the mock tokenizer's 4-byte tokens; for chat the
// templated messages). It is called only when the engines cache prefixes,
// so that without caching "mock_hash_ids" stays an ignored field.
func promptIdents(chat bool, fields map[string]json.RawMessage, prompts int) ([]tokenIdent, *apiError) {
	out := make([]tokenIdent, prompts)
	if raw, ok := present(fields, "mock_hash_ids"); ok {
		var ids []uint64
		if json.Unmarshal(raw, &ids) != nil {
			return nil, badRequest("mock_hash_ids must be a list of non-negative integers.")
		}
		for i := range out {
			out[i] = hashIDIdent(ids)
		}
		return out, nil
	}
	if chat {
		raw, _ := present(fields, "messages")
		out[0] = textIdent(chatPromptBytes(raw))
		return out, nil
	}
	raw, _ := present(fields, "prompt")
	var s string
	if json.Unmarshal(raw, &s) == nil {
		out[0] = textIdent([]byte(s))
		return out, nil
	}
	var ints []int64
	if json.Unmarshal(raw, &ints) == nil {
		out[0] = tokenIDIdent(ints)
		return out, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		for i := range min(len(strs), prompts) {
			out[i] = textIdent([]byte(strs[i]))
		}
		return out, nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil {
		for i := range min(len(lists), prompts) {
			out[i] = tokenIDIdent(lists[i])
		}
	}
	return out, nil
}

// chatPromptBytes renders already validated messages as the byte stream the
// chat token identities are cut from: per message a header naming its role,
// then its text; then the generation prompt.
func chatPromptBytes(raw json.RawMessage) []byte {
	var msgs []map[string]json.RawMessage
	json.Unmarshal(raw, &msgs)
	var b []byte
	for _, m := range msgs {
		var role string
		if r, ok := present(m, "role"); ok {
			json.Unmarshal(r, &role)
		}
		h := fnv.New64a()
		h.Write([]byte(role))
		var hdr [chatHeaderBytes]byte
		copy(hdr[:], "<|msg|>")
		for i, v := 0, h.Sum64(); i < 8; i++ {
			hdr[8+i] = byte(v >> (8 * i))
		}
		b = append(b, hdr[:]...)
		c, ok := present(m, "content")
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(c, &s) == nil {
			b = append(b, s...)
			continue
		}
		var parts []map[string]json.RawMessage
		json.Unmarshal(c, &parts)
		for _, p := range parts {
			var t string
			if tr, ok := present(p, "text"); ok && json.Unmarshal(tr, &t) == nil {
				b = append(b, t...)
			}
		}
	}
	return append(b, "<|assistant|>"[:chatGenPromptBytes]...)
}
