package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseEngines(t *testing.T) {
	got, err := parseEngines("2,10s=4,20s=1")
	if err != nil || len(got) != 3 || got[1] != (engineStep{10 * time.Second, 4}) || maxEngines(got) != 4 || describeEngines(got) != "2,10s=4,20s=1" {
		t.Fatalf("parseEngines = %+v, %v", got, err)
	}
	for _, bad := range []string{"0", "2,10s", "2,10s=4,5s=1", "2,x=3", "2,1s=65"} {
		if _, err := parseEngines(bad); err == nil || !strings.Contains(err.Error(), "-engines") {
			t.Errorf("parseEngines(%q) = %v, want an -engines error", bad, err)
		}
	}
	if _, err := parseFlags([]string{"-engines", "2,1s"}, &syncBuffer{}); err == nil {
		t.Error("-engines 2,1s accepted")
	}
}

// With testdata/plugin/elastic.json the pool's capacity is read from the
// simulated engines (one capacity_from read every 2 s of the wall clock)
// and follows when the engines in service change; the view says where C
// comes from.
func TestElasticDemo(t *testing.T) {
	r, out := startRun(t, "../../testdata/plugin/elastic.json", "-engines", "1,1h=2")
	if !strings.Contains(out.String(), "engines:  1,1h0m0s=2 in service over time") {
		t.Errorf("banner lacks the engine schedule:\n%s", out.String())
	}
	p := waitCapacity(t, r, 8, "engines (1)") // one engine of 8 sequences (the fallback is 16)
	if n := capacityNote(&p); n != " read from engines (1)" {
		t.Errorf("view note %q", n)
	}
	r.upstream.elastic["llama-8b"].SetActive(2) // the schedule's most: 2 engines
	waitCapacity(t, r, 16, "engines (2)")
	if n := capacityNote(&statusPool{Source: "config"}); !strings.Contains(n, "configured") {
		t.Errorf("view note for the configured capacity %q", n)
	}
}

// waitCapacity polls the plugin's status until its one pool has capacity
// c from source. The plugin's reads run on the wall clock (one every 2 s),
// so this waits for the change however long it takes; the deadline only
// stops a hung test (a guard, not a speed check).
func waitCapacity(t *testing.T, r *runner, c int, source string) statusPool {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ps, err := r.status(context.Background())
		if err == nil && len(ps) == 1 && ps[0].Capacity == c && ps[0].Source == source {
			return ps[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v (%v), want capacity %d from %q", ps, err, c, source)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The gateway mode in the demo: engines "learned" through an ORIGINAL_DST
// cluster. Nothing is read until a response names its upstream (the
// local proxy sets upstream.address to the connection's remote address);
// then the simulator's engines are.
func TestElasticDemoLearned(t *testing.T) {
	b, err := os.ReadFile("../../testdata/plugin/elastic.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), `"engines": "cluster"`, `"engines": "learned"`, 1)
	if cfg == string(b) {
		t.Fatal("elastic.json has no engines \"cluster\" to replace")
	}
	r, _ := startRun(t, writeConfig(t, cfg), "-engines", "3")
	waitCapacity(t, r, 16, "config")
	if st, body := post(t, r, "meta-llama/Llama-3.1-8B-Instruct", "search", 0); st != 200 {
		t.Fatalf("request: %d %s", st, body)
	}
	waitCapacity(t, r, 24, "engines (3)")
}
