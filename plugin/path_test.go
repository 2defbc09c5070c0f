package plugin

import (
	"net/url"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/chat/completions?stream=1", "/v1/chat/completions"},
		{"/v1/chat/completions#frag", "/v1/chat/completions"},
		{"/v1/chat/%63ompletions", "/v1/chat/completions"},
		{"/v1/chat/%2563ompletions", "/v1/chat/completions"},
		{"/v1%2Fchat%2fcompletions", "/v1/chat/completions"},
		{"//v1///chat/completions", "/v1/chat/completions"},
		{"/v1/chat/completions/", "/v1/chat/completions"},
		{"/v1/./chat/x/../completions", "/v1/chat/completions"},
		{"/../../v1/chat/completions", "/v1/chat/completions"},
		{"/v1/chat/%2e%2e/chat/completions", "/v1/chat/completions"},
		{`/v1\chat\completions`, "/v1/chat/completions"},
		{"http://vllm:8000/v1/chat/completions?x", "/v1/chat/completions"},
		{"https://vllm", "/"},
		{"/v1/chat/completions%3Fx=1", "/v1/chat/completions?x=1"},
		{"/a/%zz/%4", "/a/%zz/%4"},
		{"", "/"},
		{"/", "/"},
		{"*", "/*"},
		{"/V1/Chat/Completions", "/V1/Chat/Completions"}, // the server's routes are case-sensitive
	}
	for _, tt := range tests {
		if got := cleanPath(tt.in); got != tt.want {
			t.Errorf("cleanPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCleanPathNoAllocWhenClean(t *testing.T) {
	n := testing.AllocsPerRun(100, func() { _ = cleanPath("/v1/chat/completions?x=1") })
	if n != 0 {
		t.Errorf("cleanPath of a clean path allocates %v times, want 0", n)
	}
}

// serverPaths are the paths a server can route p to: vLLM's (uvicorn and
// Starlette decode the path once, after splitting the query), and the same
// after a proxy's normalisation (merged slashes, resolved dot segments).
func serverPaths(p string) []string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	d, err := url.PathUnescape(p)
	if err != nil {
		d = p
	}
	out := []string{d, strings.TrimSuffix(d, "/")}
	if d != "" {
		out = append(out, dotSegments(d))
	}
	return out
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/chat/%63ompletions", "//v1/completions/", "/v1/./responses?x", "http://h/v1/embeddings", `\v1\score`, "/%", "/%2", "/a/../../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := cleanPath(p)
		if !strings.HasPrefix(c, "/") || strings.Contains(c, "//") || (len(c) > 1 && strings.HasSuffix(c, "/")) {
			t.Fatalf("cleanPath(%q) = %q: not a clean absolute path", p, c)
		}
		for _, s := range serverPaths(p) {
			for _, sched := range DefaultPaths {
				if s == sched && c != sched {
					t.Fatalf("cleanPath(%q) = %q, but the server routes it to %q", p, c, sched)
				}
			}
		}
	})
}
