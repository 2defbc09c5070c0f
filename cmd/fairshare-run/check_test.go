package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: -check answers a valid configuration with exit 0 and a
// one-line summary (its pools, flow control, unknown teams), and an invalid
// one with an error that names every problem with its field path and the
// field a misspelt one probably means, and no host's prefix; it starts
// nothing (no -wasm needed).
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"max_queue_tme":"30s","pools":[{"name":"p","capacity":0,"models":["m"],
		"teams":{"a":{"share":0.5,"wieght":2}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"-wasm", filepath.Join(dir, "absent.wasm"), "-check", "../../testdata/plugin/two-pools.json"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("-check two-pools.json: %v", err)
	}
	want := "../../testdata/plugin/two-pools.json: OK: 2 pools: llama-8b capacity 16, teams search 50% chat 30% research 20%; " +
		"qwen-32b capacity 8, teams research 60% eval 40%; flow control"
	if !strings.HasPrefix(out.String(), want) || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("-check two-pools.json printed %q, want one line starting %q", out.String(), want)
	}

	// A shadow configuration says so: nothing it decides is enforced.
	shadow := filepath.Join(dir, "shadow.json")
	if err := os.WriteFile(shadow, []byte(`{"mode":"shadow","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"-check", shadow}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "; mode shadow: ") {
		t.Errorf("-check shadow.json = %v, printed %q; want OK naming mode shadow", err, out.String())
	}

	// Users within teams: the header and every pool's bounds.
	out.Reset()
	if err := run(context.Background(), []string{"-check", "../../testdata/plugin/users.json"}, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "llama-8b capacity 16, users max 256 (active 30s, idle 10m0s), teams ") || !strings.Contains(out.String(), "; users within teams from x-user;") {
		t.Errorf("-check users.json = %v, printed %q; want OK naming the user header and the bounds", err, out.String())
	}

	out.Reset()
	err = run(context.Background(), []string{"-wasm", filepath.Join(dir, "absent.wasm"), "-check", bad}, &out, io.Discard)
	if err == nil {
		t.Fatalf("-check bad.json succeeded, printing %q", out.String())
	}
	msg := err.Error()
	for _, w := range []string{
		bad + ": invalid plugin configuration (3 problems; the plugin would refuse to start):",
		"\n  max_queue_tme: unknown field (did you mean \"max_queue_time\"?)",
		"\n  pools[0].capacity: must be an integer in [1, 1048576], got 0",
		"\n  pools[0].teams.a.wieght: unknown field (did you mean \"weight\"?)",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("-check bad.json: error lacks %q:\n%s", w, msg)
		}
	}
	for _, no := range []string{"canary", "proxy_on_configure", "start plugin"} {
		if strings.Contains(msg, no) {
			t.Errorf("-check bad.json: error has the host's %q:\n%s", no, msg)
		}
	}
}

// TestRunRefusesInvalidConfig: a run with a configuration the plugin would
// refuse stops before it starts a proxy, with the same problems as -check
// and without the host's error around them.
func TestRunRefusesInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"shares":0.5}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"-wasm", pluginFile(t), "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-config", bad}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := start(context.Background(), o, io.Discard, io.Discard)
	if err == nil {
		r.close()
		t.Fatal("start with an invalid configuration succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "pools[0].teams.a.shares: unknown field (did you mean \"share\"?)") || strings.Contains(msg, "canary") {
		t.Errorf("start: %v; want the problem with its path and no host's prefix", err)
	}
}
