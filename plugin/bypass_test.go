package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// The adversarial suite: every way a client could get its own priority to
// vLLM around the plugin, each case asserting what reaches the upstream
// (the forwarded body's top-level priority as vLLM reads it, the body
// itself) and what the client gets back.

// bypassConfig is one pool without a "*" model, so that unknown models are
// the plugin's decision to make.
const bypassConfig = `{"status_token":"sesame","default_max_tokens":16,
 "pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.25}}}]}`

// vllmPriority reads a forwarded body's top-level priority as vLLM's server
// does (Python's json module: a UTF-8 BOM accepted, and with a JSON content
// type UTF-16 too; the last of duplicate keys wins); ok is false when there
// is none. A body that cannot be decoded here but that Python could read
// (NaN, Infinity) and that spells priority counts as having one, unknown
// (-1 << 62).
func vllmPriority(t testing.TB, b []byte, jsonType bool) (int64, bool) {
	t.Helper()
	b = bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))
	if jsonType && len(b) >= 2 && (b[0] == 0xFF && b[1] == 0xFE || b[0] == 0) {
		u := make([]uint16, 0, len(b)/2)
		for i := 0; i+1 < len(b); i += 2 {
			if b[0] == 0 {
				u = append(u, uint16(b[i])<<8|uint16(b[i+1]))
			} else {
				u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
			}
		}
		b = []byte(strings.TrimPrefix(string(utf16.Decode(u)), "\uFEFF"))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) &&
			(bytes.Contains(b, []byte("NaN")) || bytes.Contains(b, []byte("Infinity"))) &&
			(bytes.Contains(b, []byte("priority")) || bytes.Contains(b, []byte(`\u`))) {
			return -1 << 62, true
		}
		return 0, false
	}
	raw, ok := m["priority"]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return -1 << 62, true // present, not an integer the plugin writes
	}
	return n, true
}

// upstream is what a case expects to reach vLLM.
type upstream int

const (
	refused   upstream = iota // a local reply, nothing forwarded
	decided                   // forwarded with the plugin's priority, counted
	noneLeft                  // forwarded without any priority
	untouched                 // forwarded byte for byte
	lowest                    // forwarded at the lowest borrowing priority, uncounted
)

type bypassCase struct {
	name   string
	config string // "" for bypassConfig
	method string // "" for POST
	path   string
	hdrs   [][2]string // after :method, :path; x-team a unless given
	chunks []string    // the body in chunks; nil for none
	trail  bool        // end the body with trailers
	want   upstream
	status int // local reply status when refused
	// prio is the decided priority when want is decided (-1: any).
	prio int
	// minEstimate is the least usage the entry penalty must charge while
	// the request runs (the estimate read as vLLM reads the body).
	minEstimate float64
}

func team(t string) [][2]string { return [][2]string{{"x-team", t}} }

// usersBypassConfig is bypassConfig's pool with the user level on.
const usersBypassConfig = `{"user_header":"x-user","default_max_tokens":16,
 "pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.25}}}]}`

func bypassCases() []bypassCase {
	const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":-1000}`
	big := strings.Repeat("x", 400_000)
	u16 := func(s string) string {
		var b []byte
		b = append(b, 0xFF, 0xFE)
		for _, r := range utf16.Encode([]rune(s)) {
			b = append(b, byte(r), byte(r>>8))
		}
		return string(b)
	}
	u16p := u16(`{"priority":-1000}`)
	return []bypassCase{
		// A request without a model, or with one no pool lists.
		{name: "no model", path: "/v1/chat/completions", chunks: []string{`{"messages":[],"priority":-1000}`}, want: refused, status: 400},
		{name: "empty model", path: "/v1/chat/completions", chunks: []string{`{"model":"","messages":[],"priority":-1000}`}, want: refused, status: 400},
		{name: "null model", path: "/v1/completions", chunks: []string{`{"model":null,"prompt":"x","priority":-1000}`}, want: refused, status: 400},
		{name: "unknown model (a LoRA adapter)", path: "/v1/chat/completions", chunks: []string{`{"model":"m-lora","messages":[],"priority":-1000}`}, want: refused, status: 404},
		{name: "unknown model forwarded lowest", config: `{"unknown_model":"lowest","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5}}}]}`,
			path: "/v1/chat/completions", chunks: []string{`{"model":"m-lora","messages":[],"priority":-1000}`}, want: lowest},
		{name: "default model", config: `{"default_model":"m","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5}}}]}`,
			path: "/v1/chat/completions", chunks: []string{`{"messages":[],"priority":-1000}`}, want: decided, prio: 0},
		{name: "unknown team still rejected without a model", config: `{"unknown_team":"reject","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5}}}]}`,
			path: "/v1/chat/completions", hdrs: team("z"), chunks: []string{`{"model":"","priority":-1000}`}, want: refused, status: 400},

		// Every endpoint that honours priority, and spellings of the paths.
		{name: "responses API", path: "/v1/responses", chunks: []string{`{"model":"m","input":"hi","priority":-1000}`}, want: decided, prio: 0},
		{name: "percent-encoded path", path: "/v1/chat/%63ompletions", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "double-encoded path", path: "/v1/chat/%2563ompletions", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "duplicate slashes and trailing slash", path: "//v1//chat/completions/", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "dot segments", path: "/v1/x/../chat/./completions", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "query string", path: "/v1/chat/completions?priority=-5", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "absolute-form target", path: "http://vllm:8000/v1/completions", chunks: []string{`{"model":"m","prompt":"x","priority":-1000}`}, want: decided, prio: 0},
		{name: "embeddings", path: "/v1/embeddings", chunks: []string{`{"model":"m","input":"hi","priority":-1000}`}, want: decided, prio: 0},
		{name: "pooling", path: "/pooling", chunks: []string{`{"model":"m","input":"hi","priority":-1000}`}, want: decided, prio: 0},
		{name: "classify", path: "/classify", chunks: []string{`{"model":"m","input":"hi","priority":-1000}`}, want: decided, prio: 0},
		{name: "score", path: "/v1/score", chunks: []string{`{"model":"m","text_1":"a","text_2":"b","priority":-1000}`}, want: decided, prio: 0},
		{name: "rerank v2", path: "/v2/rerank", chunks: []string{`{"model":"m","query":"a","documents":["b"],"priority":-1000}`}, want: decided, prio: 0},
		{name: "SageMaker invocations", path: "/invocations", chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "tokens-in generate", path: "/inference/v1/generate", chunks: []string{`{"model":"m","token_ids":[1,2,3],"priority":-1000}`}, want: decided, prio: 0},

		// Paths the plugin does not schedule: the priority is stripped.
		{name: "unscheduled path stripped", path: "/v1/messages", chunks: []string{`{"model":"m","priority":-1000,"max_tokens":5}`}, want: noneLeft},
		{name: "unscheduled path without a team", path: "/tokenize", hdrs: [][2]string{}, chunks: []string{`{"model":"m","prompt":"x","priority":-1000}`}, want: noneLeft},
		{name: "unscheduled method", method: "PUT", path: "/v1/chat/completions", chunks: []string{chatBody}, want: noneLeft},
		{name: "unscheduled duplicates and escapes", path: "/v1/messages", chunks: []string{`{"priority":1,"model":"m","\u0070riority":-1000,"priority":-2}`}, want: noneLeft},
		{name: "unscheduled reject", config: `{"unscheduled":"reject","pools":[{"name":"p","capacity":4,"models":["m"]}]}`,
			path: "/v1/messages", chunks: []string{`{"model":"m","priority":-1000}`}, want: refused, status: 400},
		{name: "unscheduled without priority untouched", path: "/v1/messages", chunks: []string{`{"model":"m","max_tokens":5}`}, want: untouched},
		{name: "unscheduled NaN body spelling priority", path: "/v1/messages", chunks: []string{`{"priority":-1000,"temperature":NaN}`}, want: refused, status: 400},
		{name: "unscheduled UTF-16 body", path: "/v1/messages", chunks: []string{u16(`{"priority":-1000}`)}, want: refused, status: 400},
		{name: "unscheduled UTF-8 BOM body stripped", path: "/v1/messages", chunks: []string{"\xEF\xBB\xBF" + `{"priority":-1000,"model":"m"}`}, want: noneLeft},
		{name: "unscheduled JSON without a JSON content type", path: "/v1/messages", hdrs: [][2]string{{"content-type", "text/plain"}}, chunks: []string{` {"priority":-1000}`}, want: noneLeft},
		{name: "unscheduled binary upload untouched", path: "/v1/files", hdrs: [][2]string{{"content-type", "application/octet-stream"}}, chunks: []string{"\x00\x01priority\x00"}, want: untouched},
		{name: "unscheduled multipart untouched", path: "/v1/audio/transcriptions", hdrs: [][2]string{{"content-type", "multipart/form-data; boundary=x"}},
			chunks: []string{"--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--x--\r\n"}, want: untouched},

		// Bodies in chunks: nothing may pass before the plugin has seen
		// enough of the body to know it cannot carry a priority, wherever
		// the client's chunks end.
		{name: "unscheduled empty first chunk", path: "/v1/messages", chunks: []string{"", `{"priority":-1000,"model":"m"}`}, want: noneLeft},
		{name: "unscheduled whitespace first chunk", path: "/v1/messages", chunks: []string{" \r\n\t ", `{"priority":-1000,"model":"m"}`}, want: noneLeft},
		{name: "unscheduled whitespace chunks then a split key", path: "/v1/messages", chunks: []string{" ", "\n", ` {"model":"m","prio`, `rity":-1000}`}, want: noneLeft},
		{name: "unscheduled bare BOM first chunk", path: "/v1/messages", chunks: []string{"\xEF\xBB\xBF", `{"priority":-1000,"model":"m"}`}, want: noneLeft},
		{name: "unscheduled BOM split across chunks", path: "/v1/messages", chunks: []string{"\xEF", "\xBB", "\xBF  ", `{"priority":-1000}`}, want: noneLeft},
		{name: "unscheduled key split across chunks", path: "/v1/messages", chunks: []string{`{"model":"m","prio`, `rity":-1000}`}, want: noneLeft},
		{name: "unscheduled one byte first chunk", path: "/v1/messages", chunks: []string{"{", `"priority":-1000}`}, want: noneLeft},
		{name: "unscheduled UTF-16 in one-byte chunks", path: "/v1/messages", chunks: append(strings.Split(u16p[:4], ""), u16p[4:]), want: refused, status: 400},
		{name: "unscheduled whitespace first chunk then trailers", path: "/v1/messages", chunks: []string{"  ", `{"priority":-1000,"model":"m"}`}, trail: true, want: noneLeft},
		{name: "unscheduled reject whitespace first chunk", config: `{"unscheduled":"reject","pools":[{"name":"p","capacity":4,"models":["m"]}]}`,
			path: "/v1/messages", chunks: []string{"\n", `{"model":"m","priority":-1000}`}, want: refused, status: 400},
		{name: "unscheduled whitespace body untouched", path: "/v1/messages", chunks: []string{"  ", "\n"}, want: untouched},
		{name: "unscheduled form after whitespace untouched", path: "/v1/messages", hdrs: [][2]string{{"content-type", "application/x-www-form-urlencoded"}}, chunks: []string{" ", "priority=-1000"}, want: untouched},
		{name: "empty first chunk", path: "/v1/chat/completions", chunks: []string{"", chatBody}, want: decided, prio: 0},
		{name: "whitespace first chunk", path: "/v1/chat/completions", chunks: []string{"\n  ", chatBody}, want: decided, prio: 0},
		{name: "bare BOM first chunk", path: "/v1/chat/completions", chunks: []string{"\xEF\xBB\xBF", chatBody}, want: refused, status: 400},
		{name: "priority key split across chunks", path: "/v1/chat/completions", chunks: []string{chatBody[:len(chatBody)-12], chatBody[len(chatBody)-12:]}, want: decided, prio: 0},

		// Identity headers.
		{name: "two team headers", path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-team", "b"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "team header with two values", path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "b, a"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "two class headers", path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-request-class", "batch"}, {"X-Request-Class", "interactive"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "user header", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", "alice"}}, chunks: []string{chatBody}, want: decided, prio: 0},
		{name: "two user headers", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", "alice"}, {"X-User", "bob"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "user header with two values", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", "bob, alice"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "user header too long", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", strings.Repeat("u", 65)}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "user header with a space", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", "al ice"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "user header beyond ASCII", config: usersBypassConfig, path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"x-user", "é"}}, chunks: []string{chatBody}, want: refused, status: 400},
		{name: "body user not opted in", config: usersBypassConfig, path: "/v1/chat/completions", chunks: []string{`{"model":"m","messages":[],"user":"` + strings.Repeat("u", 65) + `","priority":-1000}`}, want: decided, prio: 0},

		// The body read as vLLM reads it.
		{name: "duplicate priority keys", path: "/v1/chat/completions", chunks: []string{`{"priority":-1,"model":"m","messages":[],"priority":-1000}`}, want: decided, prio: 0},
		{name: "escaped priority key", path: "/v1/chat/completions", chunks: []string{`{"model":"m","messages":[],"\u0070riority":-1000}`}, want: decided, prio: 0},
		{name: "huge priority", path: "/v1/chat/completions", chunks: []string{`{"model":"m","messages":[],"priority":-1e400}`}, want: decided, prio: 0},
		{name: "nested priority only", path: "/v1/chat/completions", chunks: []string{`{"model":"m","messages":[],"extra":{"priority":-1000}}`}, want: decided, prio: 0},
		{name: "max_tokens as a string", path: "/v1/chat/completions", chunks: []string{`{"model":"m","messages":[],"max_tokens":"4096"}`}, want: decided, prio: 0, minEstimate: 2 * 4096},
		{name: "n as a string", path: "/v1/completions", chunks: []string{`{"model":"m","prompt":"x","max_tokens":100,"n":"8"}`}, want: decided, prio: 0, minEstimate: 2 * 800},
		{name: "text in an input_text part", path: "/v1/chat/completions",
			chunks: []string{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"input_text","text":"` + big + `"}]}]}`}, want: decided, prio: 0, minEstimate: 100_000},
		{name: "text in a thinking part", path: "/v1/chat/completions",
			chunks: []string{`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"` + big + `"}]}]}`}, want: decided, prio: 0, minEstimate: 100_000},
		{name: "estimate saturates", path: "/v1/completions", chunks: []string{`{"model":"m","prompt":["a"` + strings.Repeat(`,"a"`, 16383) + `],"n":16384,"max_tokens":1099511627776}`},
			want: decided, prio: -1, minEstimate: 1 << 40},
		{name: "gzip body", path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"content-encoding", "gzip"}}, chunks: []string{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"}, want: refused, status: 400},
		{name: "UTF-16 body", path: "/v1/chat/completions", chunks: []string{u16(chatBody)}, want: refused, status: 400},
		{name: "UTF-8 BOM body", path: "/v1/chat/completions", chunks: []string{"\xEF\xBB\xBF" + chatBody}, want: refused, status: 400},
		{name: "chunked without content-length", path: "/v1/chat/completions", hdrs: [][2]string{{"x-team", "a"}, {"content-length", ""}},
			chunks: []string{`{"model":"m","mess`, `ages":[],"prio`, `rity":-1000}`}, want: decided, prio: 0},
		{name: "body ending in trailers", path: "/v1/chat/completions", chunks: []string{`{"model":"m",`, `"messages":[],"priority":-1000}`}, trail: true, want: decided, prio: 0},
	}
}

// send plays a bypass case on a new stream.
func (c *bypassCase) send(h *host.Host) *host.Stream {
	s := h.NewStream(0)
	hdrs := c.headers()
	if s.RequestHeaders(hdrs, len(c.chunks) == 0) == host.Ended || len(c.chunks) == 0 {
		return s
	}
	for i, ch := range c.chunks {
		last := i == len(c.chunks)-1 && !c.trail
		if s.RequestBody([]byte(ch), last) == host.Ended {
			return s
		}
	}
	if c.trail {
		s.RequestTrailers(bypassTrailers)
	}
	return s
}

// bypassTrailers are the trailers of a case that ends its body with them.
var bypassTrailers = [][2]string{{"x-checksum", "1"}}

// headers are the request headers the case's client sends, in order.
func (c *bypassCase) headers() [][2]string {
	method := c.method
	if method == "" {
		method = "POST"
	}
	hdrs := [][2]string{{":method", method}, {":path", c.path}, {":authority", "vllm"}, {"content-type", "application/json"}}
	extra := c.hdrs
	if extra == nil {
		extra = team("a")
	}
	total := 0
	for _, ch := range c.chunks {
		total += len(ch)
	}
	cl := strconv.Itoa(total)
	for _, kv := range extra {
		switch {
		case kv[0] == "content-length":
			cl = kv[1]
		case kv[0] == "content-type":
			hdrs[3][1] = kv[1]
		default:
			hdrs = append(hdrs, kv)
		}
	}
	if cl != "" {
		hdrs = append(hdrs, [2]string{"content-length", cl})
	}
	return hdrs
}

func TestWasmNoClientPriorityReachesVLLM(t *testing.T) {
	for _, c := range bypassCases() {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config
			if cfg == "" {
				cfg = bypassConfig
			}
			h, _ := start(t, cfg, 1)
			s := c.send(h)
			fwd := s.ForwardedRequestBody()
			lr := s.LocalReply()
			if c.want == refused {
				jsonError(t, s, c.status)
				if len(fwd) != 0 {
					t.Errorf("refused request forwarded: %q", fwd)
				}
				s.Complete()
				checkIdle(t, h, "p")
				return
			}
			if lr != nil {
				t.Fatalf("local reply %d %s, want the request forwarded", lr.Status, lr.Body)
			}
			p, has := vllmPriority(t, fwd, true)
			in := strings.Join(c.chunks, "")
			switch c.want {
			case decided:
				if !has || (c.prio >= 0 && p != int64(c.prio)) || p < 0 {
					t.Errorf("forwarded priority %d (present %v), want the plugin's %d: %.200s", p, has, c.prio, fwd)
				}
				st := teamStats(t, h, "p")["a"]
				if st.InFlight != 1 {
					t.Errorf("in flight %d, want 1 (the request is counted)", st.InFlight)
				}
				if st.Usage < c.minEstimate {
					t.Errorf("entry penalty %v, want at least %v (the estimate as vLLM reads the body)", st.Usage, c.minEstimate)
				}
				respondJSON(s, 3, 2)
				if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-priority"); v != strconv.FormatInt(p, 10) {
					t.Errorf("x-fairshare-priority %q, forwarded %d", v, p)
				}
			case lowest:
				want := int64(fairshare.BorrowBase + fairshare.MaxRank*fairshare.RankStep)
				if !has || p != want {
					t.Errorf("forwarded priority %d (present %v), want the lowest %d", p, has, want)
				}
				s.Complete()
			case noneLeft:
				if has {
					t.Errorf("forwarded priority %d on an unscheduled request: %s", p, fwd)
				}
				if len(fwd) != len(in) {
					t.Errorf("stripped body is %d bytes, sent %d: its content-length no longer holds", len(fwd), len(in))
				}
				var a, b map[string]any
				if json.Unmarshal([]byte(in), &a) == nil {
					delete(a, "priority")
					if err := json.Unmarshal(fwd, &b); err != nil || len(a) != len(b) {
						t.Errorf("stripped body %s lost more than the priority of %s", fwd, in)
					}
				}
				s.Complete()
			case untouched:
				if string(fwd) != in {
					t.Errorf("forwarded %q, want untouched %q", fwd, in)
				}
				s.Complete()
			}
			checkIdle(t, h, "p")
		})
	}
}

func TestWasmStreamOptionsDuplicateKeys(t *testing.T) {
	// The client asks include_usage twice; vLLM reads the last (false), so
	// the plugin must ask for usage itself and hide the chunk.
	h, _ := start(t, bypassConfig, 1)
	s := request(h, 0, "/v1/chat/completions", team("a"),
		`{"model":"m","messages":[],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`)
	fwd := s.ForwardedRequestBody()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(fwd, &m); err != nil || string(m["stream_options"]) != `{"include_usage":true}` {
		t.Fatalf("forwarded stream_options %s, want {\"include_usage\":true} (whole): %s", m["stream_options"], fwd)
	}
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"total_tokens\":10,\"completion_tokens\":3}}\n\n"
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	s.ResponseBody([]byte(body+usage+"data: [DONE]\n\n"), true)
	s.Complete()
	if got := string(s.ResponseOut()); got != body+"data: [DONE]\n\n" {
		t.Errorf("client got %q: the usage chunk it did not ask for was not hidden", got)
	}
	if u := teamStats(t, h, "p")["a"].Usage; u != 7+2*3 {
		t.Errorf("usage %v, want the reported 13", u)
	}
	checkIdle(t, h, "p")
}

func TestWasmStatusSecureByDefault(t *testing.T) {
	get := func(h *host.Host) *host.Stream {
		s := h.NewStream(0)
		s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare//status/"}}, true)
		return s
	}
	h, _ := start(t, `{"pools":[{"name":"p","capacity":4,"models":["m"]}]}`, 1)
	jsonError(t, get(h), 403)
	h, _ = start(t, `{"status_public":true,"pools":[{"name":"p","capacity":4,"models":["m"]}]}`, 1)
	if lr := get(h).LocalReply(); lr == nil || lr.Status != 200 {
		t.Errorf("public status = %+v, want 200", lr)
	}
}

// FuzzNoClientPriority asserts the invariant on the built plugin.wasm: for
// any path, content type and body, the body forwarded upstream carries the
// priority the plugin decided (the one it reports in x-fairshare-priority)
// or none at all.
func FuzzNoClientPriority(f *testing.F) {
	for _, c := range bypassCases() {
		if len(c.chunks) == 1 && len(c.chunks[0]) < 4096 {
			f.Add(c.path, "application/json", []byte(c.chunks[0]))
		}
	}
	f.Add("/v1/messages", "", []byte(`{"priority":1}`))
	f.Add("/x", "application/vnd+json; charset=utf-8", []byte(` {"a":[],"priority":{"x":1}} `))
	h, _ := start(f, bypassConfig, 1)
	f.Fuzz(func(t *testing.T, path, ctype string, body []byte) {
		if strings.ContainsAny(path+ctype, "\x00\r\n") {
			return // not a header value a proxy passes on
		}
		s := h.NewStream(0)
		hdrs := [][2]string{{":method", "POST"}, {":path", path}, {"x-team", "a"}, {"content-length", strconv.Itoa(len(body))}}
		if ctype != "" {
			hdrs = append(hdrs, [2]string{"content-type", ctype})
		}
		if s.RequestHeaders(hdrs, len(body) == 0) != host.Ended && len(body) > 0 {
			s.RequestBody(body, true)
		}
		fwd := s.ForwardedRequestBody()
		if p, has := vllmPriority(t, fwd, fastAPIJSON(ctype)); has && s.LocalReply() == nil {
			respondJSON(s, 1, 1)
			if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-priority"); v != strconv.FormatInt(p, 10) {
				t.Fatalf("POST %q %q %q forwarded priority %d, the plugin decided %q: %q", path, ctype, body, p, v, fwd)
			}
		}
		s.Complete()
	})
}

// fastAPIJSON reports whether vLLM's server (FastAPI) parses a body with
// this content type as JSON: no content type, or application/json or
// application/*+json.
func fastAPIJSON(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "" || ct == "application/json" || strings.HasPrefix(ct, "application/") && strings.HasSuffix(ct, "+json")
}

func TestWasmRewriteRefusedIs500AndLeaksNothing(t *testing.T) {
	var refuse atomic.Bool
	h, err := compiled(t).Start(context.Background(), host.Options{
		Profile: hostProfile,
		VMs:     1, PluginName: pluginName, VMID: t.Name(), PluginConfig: []byte(flowConfig),
		Clock: host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		BufferFault: func(_ int, bt hostcalls.BufferType) hostcalls.Status {
			if refuse.Load() && bt == hostcalls.BufferHTTPRequestBody {
				return hostcalls.StatusInternalFailure
			}
			return hostcalls.StatusOK
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	noHostErrors(t, h)
	defer h.Close(context.Background())
	// Admitted at once: the body cannot be rewritten, so the client's
	// priority must not go: 500, and the grant released.
	refuse.Store(true)
	s := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, `,"priority":-1000`))
	jsonError(t, s, 500)
	if len(s.ForwardedRequestBody()) != 0 {
		t.Errorf("forwarded %q with the client's priority", s.ForwardedRequestBody())
	}
	s.Complete()
	checkIdle(t, h, "p")
	// An unscheduled path whose priority cannot be stripped: 500 too.
	s = request(h, 0, "/v1/messages", nil, `{"priority":-1000}`)
	jsonError(t, s, 500)
	s.Complete()
	// Held, then dispatched into a body that cannot be rewritten.
	refuse.Store(false)
	run := fill(t, h)
	held := request(h, 0, "/v1/chat/completions", team("a"), chat("m", 4, `,"priority":-1000`))
	refuse.Store(true)
	respondJSON(run[1], 1, 1)
	h.Advance(20 * time.Millisecond)
	jsonError(t, held, 500)
	if len(held.ForwardedRequestBody()) != 0 {
		t.Errorf("held request forwarded %q", held.ForwardedRequestBody())
	}
	held.Complete()
	refuse.Store(false)
	respondJSON(run[0], 1, 1)
	checkIdle(t, h, "p")
	if n := waiting(t, h, "p"); n != 0 {
		t.Errorf("waiting %d, want 0", n)
	}
}
