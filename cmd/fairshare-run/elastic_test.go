package main

import (
	"context"
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
	wait := func(c int, source string) statusPool {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
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
	p := wait(8, "engines (1)") // one engine of 8 sequences (the fallback is 16)
	if n := capacityNote(&p); n != " read from engines (1)" {
		t.Errorf("view note %q", n)
	}
	r.upstream.elastic["llama-8b"].SetActive(2) // the schedule's most: 2 engines
	wait(16, "engines (2)")
	if n := capacityNote(&statusPool{Source: "config"}); !strings.Contains(n, "configured") {
		t.Errorf("view note for the configured capacity %q", n)
	}
}
