package host

import "testing"

// The ORIGINAL_DST load balancer takes the first value of its header as
// an IP address and port, never a name; anything else chooses no host.
func TestOriginalDst(t *testing.T) {
	tests := []struct {
		hdr  string
		hv   map[string]string
		base string
	}{
		{"", map[string]string{"x-envoy-original-dst-host": "10.0.0.5:8000"}, "http://10.0.0.5:8000"},
		{"", map[string]string{"x-envoy-original-dst-host": "[fd00::5]:8000"}, "http://[fd00::5]:8000"},
		{"X-Engine", map[string]string{"x-engine": "127.0.0.1:9"}, "http://127.0.0.1:9"},
		{"", map[string]string{"x-envoy-original-dst-host": "vllm-0.vllm:8000"}, ""},
		{"", map[string]string{"x-envoy-original-dst-host": "10.0.0.5"}, ""},
		{"", map[string]string{"x-envoy-original-dst-host": "fd00::5:8000"}, ""},
		{"", map[string]string{"x-engine": "10.0.0.5:8000"}, ""},
		{"x-engine", map[string]string{"x-envoy-original-dst-host": "10.0.0.5:8000"}, ""},
	}
	for _, tt := range tests {
		base, noHost := originalDst(tt.hdr, tt.hv)
		if base != tt.base || noHost != (tt.base == "") {
			t.Errorf("originalDst(%q, %v) = %q, %v; want %q", tt.hdr, tt.hv, base, noHost, tt.base)
		}
	}
	if r := noHealthyUpstream(); r.headers[0][1] != "503" || string(r.body) != "no healthy upstream" {
		t.Errorf("no host reply %+v", r)
	}
}
