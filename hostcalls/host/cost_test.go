package host

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// The helpers below replace allocating code on the host-call path; each is
// checked against what it replaced.

func TestAppendPairsMatchesEncodePairs(t *testing.T) {
	buf := []byte("stale bytes of an earlier call")
	for _, tc := range []struct {
		name string
		m    [][2]string
	}{
		{"empty", nil},
		{"one", [][2]string{{":path", "/"}}},
		{"several", [][2]string{{":method", "POST"}, {"x-a", "1"}, {"x-a", "2"}, {"content-length", "1022"}}},
		{"empty key and value", [][2]string{{"", ""}, {"k", ""}, {"", "v"}}},
		{"utf-8", [][2]string{{"x-ä", "ünïcode"}}},
	} {
		buf = appendPairs(buf[:0], tc.m)
		if want := hostcalls.EncodePairs(tc.m); !bytes.Equal(buf, want) {
			t.Errorf("%s: appendPairs = %q, want %q", tc.name, buf, want)
		}
	}
	if got := appendPairs([]byte("pre"), [][2]string{{"a", "b"}}); !bytes.Equal(got, append([]byte("pre"), hostcalls.EncodePairs([][2]string{{"a", "b"}})...)) {
		t.Errorf("appendPairs(\"pre\", a=b) = %q: it must append", got)
	}
}

func TestLowerMatchesToLower(t *testing.T) {
	for _, key := range []string{"", "x-a", "X-A", "content-length", "Content-Length", ":path", "x-ÄB", "\xff", "a\x80b", "ÀÉ", "x-\u212a"} {
		if got, want := string(lowerKey([]byte(key))), strings.ToLower(key); got != want {
			t.Errorf("lowerKey(%q) = %q, want %q", key, got, want)
		}
		if got, want := lowerString(key), strings.ToLower(key); got != want {
			t.Errorf("lowerString(%q) = %q, want %q", key, got, want)
		}
	}
	lower := []byte("x-fairshare-team")
	if got := lowerKey(lower); &got[0] != &lower[0] {
		t.Errorf("lowerKey(%q) copied a key that is already lower case", lower)
	}
}

func TestReplaceAndRemoveHeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     [][2]string
		op    string // "replace" or "remove"
		key   string
		value string
		want  [][2]string
	}{
		{"replace first, drop the later ones", [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"c", "4"}, {"a", "5"}}, "replace", "a", "x",
			[][2]string{{"a", "x"}, {"b", "2"}, {"c", "4"}}},
		{"replace a later key", [][2]string{{"b", "2"}, {"a", "1"}, {"a", "3"}}, "replace", "a", "x", [][2]string{{"b", "2"}, {"a", "x"}}},
		{"replace absent appends", [][2]string{{"b", "2"}}, "replace", "a", "x", [][2]string{{"b", "2"}, {"a", "x"}}},
		{"replace in empty", nil, "replace", "a", "", [][2]string{{"a", ""}}},
		{"remove every value", [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}}, "remove", "a", "", [][2]string{{"b", "2"}}},
		{"remove absent", [][2]string{{"b", "2"}}, "remove", "a", "", [][2]string{{"b", "2"}}},
	} {
		m := append([][2]string(nil), tc.m...)
		var got [][2]string
		if tc.op == "replace" {
			got = replaceHeader(m, []byte(tc.key), []byte(tc.value))
		} else {
			got = removeHeader(m, []byte(tc.key))
		}
		equal(t, tc.name, got, tc.want)
	}
}

func TestPushStackPerDepth(t *testing.T) {
	vm := &VM{}
	var stacks [][]uint64
	for d := 0; d < len(vm.stacks)+2; d++ {
		s := vm.pushStack(5)
		if len(s) != 5 {
			t.Fatalf("depth %d: len %d, want 5", d, len(s))
		}
		for i := range s {
			if s[i] != 0 {
				t.Fatalf("depth %d: stack not zeroed: %v", d, s)
			}
			s[i] = uint64(d + 1)
		}
		stacks = append(stacks, s)
	}
	for d, s := range stacks {
		for _, v := range s {
			if v != uint64(d+1) {
				t.Fatalf("depth %d: overwritten by a deeper call: %v", d, s)
			}
		}
	}
	for range stacks {
		vm.popStack()
	}
	if vm.stackDepth != 0 {
		t.Fatalf("stackDepth = %d after popping every stack", vm.stackDepth)
	}
	if s := vm.pushStack(len(vm.stacks[0]) + 1); len(s) != len(vm.stacks[0])+1 {
		t.Fatalf("a stack longer than the reused ones: len %d", len(s))
	}
}

// TestSharedDataCopies: the store hands the guest its stored bytes without
// a copy, so Host.SharedData must copy and a set must not change a value
// read before it.
func TestSharedDataCopies(t *testing.T) {
	h := start(t, passthroughPkg, Options{})
	h.SetSharedData("k", []byte("abc"), 0)
	v, _, _ := h.SharedData("k")
	v[0] = 'X'
	if again, _, _ := h.SharedData("k"); string(again) != "abc" {
		t.Errorf("SharedData after changing its result = %q, want \"abc\"", again)
	}
	held, _, _ := h.store.get([]byte("k"))
	h.SetSharedData("k", []byte("xyz"), 0)
	if string(held) != "abc" {
		t.Errorf("a value read before a set = %q, want \"abc\"", held)
	}
}

// TestCallbackNames: every callback id names a distinct proxy_on_* export
// that the transcript knows the parameters of.
func TestCallbackNames(t *testing.T) {
	seen := map[string]bool{}
	for id, name := range callbackNames {
		if !strings.HasPrefix(name, "proxy_on_") || seen[name] {
			t.Errorf("callbackNames[%d] = %q: want a distinct proxy_on_* name", id, name)
		}
		seen[name] = true
		if _, ok := callbackParams[name]; !ok {
			t.Errorf("callbackParams has no %s", name)
		}
	}
}
