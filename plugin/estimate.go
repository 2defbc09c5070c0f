package plugin

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tidwall/gjson"
)

// estimate is the cost estimate of the request read from the body (req)
// in pool ps: its prompt and completion tokens (request.tokens) under the
// cost weights; and its KV demand: the prompt plus the team's usual
// completion, capped by the request's own limit (see completionMeans). It
// keeps in h what the release and a later reestimate need: the prompt
// estimate, the choices, the completion cap, the team's slot, the demand
// and the work demand (h.work, workOf).
func (h *httpContext) estimate(req *request, ps *poolState) (cost float64, kv int64) {
	pc := h.pc
	prompt, completion := req.tokens()
	h.prompt = prompt
	w := pc.cfg.cost
	cost = w.prompt*float64(prompt) + w.completion*float64(completion)
	h.choices, h.maxCompletion = satMul(req.prompts, req.n), req.completion
	h.slot = ps.slot(h.team)
	kv = satAdd(prompt, pc.means.completionAt(ps.cfg.name, h.slot, h.choices, req.completion))
	h.kv = kv
	h.work = workOf(w, prompt, kv)
	return cost, kv
}

// workOf is the work demand (cost units) of a request of prompt tokens
// whose KV demand is kv (the prompt plus the team's usual completion):
// what a pool with a throughput reservation (throughput) takes from the
// team's work bucket when the request runs within share, settled to the
// request's reported usage at its end. Unlike the entry penalty's
// estimate, which charges the client's max_tokens, it counts the team's
// usual completion: a bucket charged for completions that never come
// would send the team's requests borrowing while its reservation is
// idle. Every prompt token counts at prompt_token: which are cached is
// known only from the response.
func workOf(w costWeights, prompt, kv int64) float64 {
	return w.prompt*float64(prompt) + w.completion*float64(max(kv-prompt, 0))
}

// maxEstimateTokens caps every token count of the estimate, so that no
// product of client-chosen numbers can wrap: 2^40 tokens is beyond any
// context, and times the cost weights still far inside float64's exact
// integers.
const maxEstimateTokens = 1 << 40

// tokens is the estimated token count of the request: the prompt once (vLLM
// reports it once even for n > 1) plus n completions of every prompt of a
// batch, each saturating at maxEstimateTokens.
func (r *request) tokens() (prompt, completion int64) {
	return min(r.prompt, maxEstimateTokens), satMul(satMul(r.prompts, r.n), r.completion)
}

// satMul is a × b for non-negative a and b, saturating at
// maxEstimateTokens.
func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > maxEstimateTokens/b {
		return maxEstimateTokens
	}
	return a * b
}

// satAdd is a + b for non-negative a and b, saturating at
// maxEstimateTokens.
func satAdd(a, b int64) int64 { return min(a+min(b, maxEstimateTokens), maxEstimateTokens) }

// ceil4 is the token estimate of n bytes of text: n/4, rounded up.
func ceil4(n int) int64 { return int64((n + 3) / 4) }

// mediaPartTokens is the prompt estimate of one image, audio or video
// content part of a chat message: its tokens depend on the model's encoder,
// not on the bytes of its (often base64) data.
const mediaPartTokens = 1024

// mediaPart reports whether a content part of type t carries media that
// vLLM encodes rather than text that it tokenises. Every other type (text,
// input_text, output_text, refusal, thinking, reasoning, one vLLM adds
// later) counts its bytes: a part type the plugin does not know must not
// make a long text cheap.
func mediaPart(t string) bool {
	switch t {
	case "image_url", "input_image", "image", "image_embeds", "image_pil",
		"audio_url", "input_audio", "audio", "audio_embeds",
		"video_url", "input_video", "video", "video_embeds":
		return true
	}
	return false
}

// messagesTokens estimates the prompt of chat messages (or of a Responses
// input list): bytes/4 (rounded up) of the messages, except that each
// content part of a media type counts mediaPartTokens instead of its bytes.
func messagesTokens(raw []byte) int64 {
	if !bytes.Contains(raw, []byte(`"type"`)) {
		return ceil4(len(raw))
	}
	text, parts := len(raw), int64(0)
	media := func(p gjson.Result) {
		if t := p.Get("type"); p.IsObject() && t.Type == gjson.String && mediaPart(t.Str) {
			text -= len(p.Raw)
			parts++
		}
	}
	gjson.Parse(bstr(raw)).ForEach(func(_, m gjson.Result) bool {
		media(m) // a Responses input item can itself be an image
		if c := m.Get("content"); c.IsArray() {
			c.ForEach(func(_, p gjson.Result) bool {
				media(p)
				return true
			})
		}
		return true
	})
	return ceil4(text) + satMul(parts, mediaPartTokens)
}

// inputTokens estimates the input of a Responses or embeddings request: a
// string, a list of items (as messages), or a prompt in any of the
// completions forms.
func inputTokens(raw []byte) int64 {
	v := gjson.Parse(bstr(raw))
	if v.IsArray() && bytes.Contains(raw, []byte("{")) {
		return messagesTokens(raw)
	}
	n, _ := promptTokens(v)
	return n
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

// completionMeans is a per-team running mean of the completion tokens of
// one choice, learnt by this VM from the usage of finished responses. It
// is the KV demand's completion estimate: max_tokens is an upper bound that
// clients set far above what they get (a 4096 cap on a 300-token answer),
// and a pool whose requests reserve their caps looks full long before its
// cache is.
type completionMeans map[meanKey]*runningMean

type meanKey struct{ pool, team string }

// runningMean averages its first meanWindow samples, then decays
// exponentially with weight 1/meanWindow, so it follows a team whose
// requests change.
type runningMean struct {
	mean float64
	n    int
}

// meanWindow is the number of samples a running mean weighs as one.
const meanWindow = 32

// at returns the running mean of s's team in pool, nil before its first
// sample, and keeps it in s: an entry, once made, stays in place (observeAt
// and seed change it, never replace it), so that the next lookup of the
// team hashes nothing.
func (m completionMeans) at(pool string, s *teamSlot) *runningMean {
	if s.mean == nil {
		s.mean = m[meanKey{pool, s.name}]
	}
	return s.mean
}

// observeAt adds the completion tokens of one finished choice of the team
// of slot s.
func (m completionMeans) observeAt(pool string, s *teamSlot, tokens float64) {
	if tokens < 0 {
		return
	}
	if m.at(pool, s) == nil {
		s.mean = &runningMean{}
		m[meanKey{pool, s.name}] = s.mean
	}
	s.mean.add(tokens)
}

// completionAt is completion for the team of slot s.
func (m completionMeans) completionAt(pool string, s *teamSlot, choices, limit int64) int64 {
	return m.at(pool, s).completion(choices, limit)
}

// add adds one sample.
func (r *runningMean) add(tokens float64) {
	if r.n < meanWindow {
		r.n++
	}
	r.mean += (tokens - r.mean) / float64(r.n)
}

// completion returns the completion estimate of a request of team in pool
// with choices choices capped at limit tokens each: the team's mean
// (rounded up) times the choices, at most the cap; the cap times the
// choices before the team's first finished request.
func (m completionMeans) completion(pool, team string, choices, limit int64) int64 {
	return m[meanKey{pool, team}].completion(choices, limit)
}

// completion is completionMeans.completion for r, nil before the team's
// first finished request.
func (r *runningMean) completion(choices, limit int64) int64 {
	if r == nil || r.n == 0 {
		return satMul(choices, limit)
	}
	per := int64(r.mean + 0.999999)
	if per > limit {
		per = limit
	}
	if per < 1 {
		per = 1
	}
	return satMul(choices, per)
}

// Sharing. Each VM learns from the requests it forwarded, but a VM that
// starts (a configuration swap starts a whole new set) knows nothing, and
// until one of its own requests of a team finishes it estimates that
// team's demands at max_tokens: with flow control on, those demands hold
// the head of the queue, which is never overtaken, while the cache is
// free (the fairness benchmark's S6 idled 3 to 4 sequences of 16 to 32
// for 20 s after each capacity change). So the VMs of a plugin share
// their means in one shared-data value: a VM adds what it has learnt on
// its heartbeat tick, and takes the means it lacks from it at start and
// on every heartbeat. What a VM has learnt itself is never replaced.

// meansKey is the shared-data key of the completion means shared by the
// VMs of the plugin named plugin.
func meansKey(plugin string) string { return plugin + "/fairshare/means" }

// meansVersion is the first byte of an encoding of completion means.
const meansVersion = 1

// appendBinary appends the encoding of m: meansVersion, then per entry,
// in key order, the pool's and the team's names (a length byte each; an
// entry with a longer name is left out), the mean (float64 bits, big
// endian) and the sample count (one byte, at most meanWindow).
func (m completionMeans) appendBinary(b []byte) []byte {
	keys := make([]meanKey, 0, len(m))
	for k := range m {
		if len(k.pool) <= 255 && len(k.team) <= 255 && m[k].n > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b meanKey) int {
		if c := cmp.Compare(a.pool, b.pool); c != 0 {
			return c
		}
		return cmp.Compare(a.team, b.team)
	})
	b = append(b, meansVersion)
	for _, k := range keys {
		r := m[k]
		b = append(b, byte(len(k.pool)))
		b = append(b, k.pool...)
		b = append(b, byte(len(k.team)))
		b = append(b, k.team...)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.mean))
		b = append(b, byte(min(r.n, meanWindow)))
	}
	return b
}

// decodeMeans decodes an encoding of appendBinary. An encoding of another
// version, or cut short, gives what could be read before (nothing for
// another version); a mean that is not a finite non-negative number or
// a count outside [1, meanWindow] leaves its entry out.
func decodeMeans(b []byte) completionMeans {
	m := completionMeans{}
	if len(b) == 0 || b[0] != meansVersion {
		return m
	}
	b = b[1:]
	name := func() (string, bool) {
		if len(b) < 1 || len(b) < 1+int(b[0]) {
			return "", false
		}
		s := string(b[1 : 1+int(b[0])])
		b = b[1+int(b[0]):]
		return s, true
	}
	for len(b) > 0 {
		pool, ok := name()
		if !ok {
			break
		}
		team, ok := name()
		if !ok || len(b) < 9 {
			break
		}
		mean, n := math.Float64frombits(binary.BigEndian.Uint64(b)), int(b[8])
		b = b[9:]
		if math.IsNaN(mean) || math.IsInf(mean, 0) || mean < 0 || n < 1 || n > meanWindow {
			continue
		}
		m[meanKey{pool, team}] = &runningMean{mean: mean, n: n}
	}
	return m
}

// seed adds the entries of shared that m lacks, and reports whether it
// added any.
func (m completionMeans) seed(shared completionMeans) bool {
	added := false
	for k, r := range shared {
		switch own := m[k]; {
		case own == nil:
			m[k] = &runningMean{mean: r.mean, n: r.n}
			added = true
		case own.n == 0:
			*own = runningMean{mean: r.mean, n: r.n} // in place: slots keep it (at)
			added = true
		}
	}
	return added
}

// usesKV reports whether a pool of the configuration has a KV capacity:
// only then are completion means used (the KV demand), and shared.
func (c *config) usesKV() bool {
	for i := range c.pools {
		if c.pools[i].kvTokens > 0 {
			return true
		}
	}
	return false
}

// takeMeans adds to this VM's completion means those it lacks from the
// means the plugin's VMs share (see meansKey). It reads the shared value
// and returns it decoded (nil when there is none).
func (pc *pluginContext) takeMeans() completionMeans {
	if !pc.cfg.usesKV() {
		return nil
	}
	v, _, err := hostcalls.GetSharedData(meansKey(pc.name))
	if err != nil {
		return nil
	}
	shared := decodeMeans(v)
	pc.means.seed(shared)
	return shared
}

// shareMeans, on a heartbeat tick, takes the shared means this VM lacks
// and, if it has learnt since it last shared, writes the shared value
// back with its own means in place of the others' (unconditionally: two
// VMs writing at once lose one's news until its next heartbeat, which
// costs nothing but a later start for a new VM).
func (pc *pluginContext) shareMeans() {
	if !pc.cfg.usesKV() {
		return
	}
	shared := pc.takeMeans()
	if !pc.meansNew {
		return
	}
	if shared == nil {
		shared = completionMeans{}
	}
	for k, r := range pc.means {
		shared[k] = r
	}
	if err := hostcalls.SetSharedData(meansKey(pc.name), shared.appendBinary(nil), 0); err != nil {
		hostcalls.LogWarnf("fairshare: share completion means: %v", err)
		return
	}
	pc.meansNew = false
}
