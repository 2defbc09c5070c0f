package script

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

func TestParse(t *testing.T) {
	e := &Env{calls: Family{}}
	for _, f := range Basic() {
		for n, c := range f {
			e.calls[n] = c
		}
	}
	tests := []struct {
		name, script, wantErr string
	}{
		{"empty object", `{}`, ""},
		{"steps and returns", `{"on":{"configure":[{"call":"get_shared_data","key":"k"}]},"return":{"request_headers":1}}`, ""},
		{"not json", `{`, "script: unexpected EOF"},
		{"unknown field", `{"on":{"configure":[{"call":"log","lvl":"info"}]}}`, `unknown field "lvl"`},
		{"unknown callback", `{"on":{"on_tick":[]}}`, "script: on.on_tick: unknown callback"},
		{"call not in module", `{"on":{"tick":[{"call":"get_status"}]}}`, `script: on.tick[0].call: "get_status" is not in this module`},
		{"unknown return", `{"return":{"headers":1}}`, "script: return.headers: unknown callback"},
	}
	for _, tt := range tests {
		_, err := e.Parse([]byte(tt.script))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: Parse = %v, want nil", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: Parse = %v, want an error containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestFamiliesDoNotOverlap(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range All() {
		for n := range f {
			if seen[n] {
				t.Errorf("call %q is in two families", n)
			}
			seen[n] = true
		}
	}
	// One call per host function, named after it, plus gc.
	want := []string{"gc"}
	for _, fn := range []string{
		hostcalls.ProxyLog, hostcalls.ProxyGetLogLevel, hostcalls.ProxySetTickPeriod,
		hostcalls.ProxyGetBufferBytes, hostcalls.ProxyGetBufferStatus, hostcalls.ProxySetBufferBytes,
		hostcalls.ProxyGetHeaderMapPairs, hostcalls.ProxySetHeaderMapPairs, hostcalls.ProxyGetHeaderMapSize,
		hostcalls.ProxyGetHeaderMapValue, hostcalls.ProxyAddHeaderMapValue, hostcalls.ProxyReplaceHeaderMapValue,
		hostcalls.ProxyRemoveHeaderMapValue, hostcalls.ProxyContinueStream, hostcalls.ProxyCloseStream,
		hostcalls.ProxySendLocalResponse, hostcalls.ProxyHTTPCall, hostcalls.ProxyGetStatus,
		hostcalls.ProxySetSharedData, hostcalls.ProxyGetSharedData, hostcalls.ProxyRegisterSharedQueue,
		hostcalls.ProxyResolveSharedQueue, hostcalls.ProxyEnqueueSharedQueue, hostcalls.ProxyDequeueSharedQueue,
		hostcalls.ProxyDefineMetric, hostcalls.ProxyIncrementMetric, hostcalls.ProxyRecordMetric,
		hostcalls.ProxyGetMetric, hostcalls.ProxyGetProperty, hostcalls.ProxySetProperty,
		hostcalls.ProxySetEffectiveContext, hostcalls.ProxyDone,
	} {
		want = append(want, strings.TrimPrefix(fn, "proxy_"))
	}
	got := slices.Sorted(maps.Keys(seen))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("calls %v,\nwant %v", got, want)
	}
}

func TestStepValueAndHash(t *testing.T) {
	s := Step{Value: "ab", Repeat: 3}
	if got := s.value(); got != "ababab" {
		t.Errorf("value() = %q, want ababab", got)
	}
	if got := s.valueArg(); got != `value="ababab"` {
		t.Errorf("valueArg() = %s", got)
	}
	s.Hash = true
	h := fnv.New64a()
	h.Write([]byte("ababab"))
	if got, want := s.valueArg(), fmt.Sprintf("value_len=6 value_fnv=%016x", h.Sum64()); got != want {
		t.Errorf("valueArg() with hash = %s, want %s", got, want)
	}
}
