package plugin_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// splitBody cuts body into 1 to 8 chunks at points drawn from seed (empty
// chunks included), as a client that uploads slowly or in parts makes
// Envoy deliver it.
func splitBody(body []byte, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed>>32|1))
	n := 1 + r.IntN(8)
	cuts := make([]int, n-1)
	for i := range cuts {
		cuts[i] = r.IntN(len(body) + 1)
	}
	slices.Sort(cuts)
	out := make([][]byte, 0, n)
	prev := 0
	for _, c := range cuts {
		out = append(out, body[prev:c])
		prev = c
	}
	return append(out, body[prev:])
}

// FuzzChunkedNoClientPriority asserts the invariant of FuzzNoClientPriority
// on bodies split into chunks at random points, on scheduled and
// unscheduled paths, ending with or without trailers: what reaches the
// upstream carries the priority the plugin decided (the one it reports in
// x-fairshare-priority) or none, and nothing stays counted once the
// stream is done.
func FuzzChunkedNoClientPriority(f *testing.F) {
	for i, c := range bypassCases() {
		body := strings.Join(c.chunks, "")
		if len(c.chunks) == 0 || len(body) >= 4096 {
			continue
		}
		f.Add(c.path, "application/json", []byte(body), uint64(i)*0x9E3779B97F4A7C15, c.trail)
	}
	for seed := range uint64(8) {
		f.Add("/v1/messages", "", []byte(" \n\xEF\xBB\xBF"+`{"model":"m","priority":-1000}`), seed, seed%2 == 0)
		f.Add("/v1/chat/completions", "application/json", []byte("\n"+`{"model":"m","messages":[],"priority":-1000}`), seed, seed%3 == 0)
		f.Add("/x", "application/vnd+json; charset=utf-8", []byte(`   {"a":[],"prio`+`rity":{"x":1}} `), seed, false)
	}
	h, _ := start(f, bypassConfig, 1)
	f.Fuzz(func(t *testing.T, path, ctype string, body []byte, seed uint64, trail bool) {
		if strings.ContainsAny(path+ctype, "\x00\r\n") {
			return // not a header value a proxy passes on
		}
		chunks := splitBody(body, seed)
		s := h.NewStream(0)
		hdrs := [][2]string{{":method", "POST"}, {":path", path}, {"x-team", "a"}}
		if seed&1 == 0 {
			hdrs = append(hdrs, [2]string{"content-length", strconv.Itoa(len(body))})
		}
		if ctype != "" {
			hdrs = append(hdrs, [2]string{"content-type", ctype})
		}
		noBody := len(body) == 0 && !trail
		if s.RequestHeaders(hdrs, noBody) != host.Ended && !noBody {
			for i, ch := range chunks {
				if s.RequestBody(ch, i == len(chunks)-1 && !trail) == host.Ended {
					break
				}
			}
			if trail {
				s.RequestTrailers([][2]string{{"x-checksum", "1"}})
			}
		}
		fwd := s.ForwardedRequestBody()
		if p, has := vllmPriority(t, fwd, fastAPIJSON(ctype)); has && s.LocalReply() == nil {
			respondJSON(s, 1, 1)
			if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-priority"); v != strconv.FormatInt(p, 10) {
				t.Fatalf("POST %q %q in chunks %q (trailers %v) forwarded priority %d, the plugin decided %q: %q", path, ctype, chunks, trail, p, v, fwd)
			}
		}
		s.Complete()
		checkIdle(t, h, "p")
	})
}
