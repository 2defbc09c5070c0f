package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSpillDemo: with testdata/plugin/spill.json the demo floods llama-8b
// only (its fallback gets no load of its own); the requests the plugin
// moves go to the fallback's engine through the proxy's route on
// x-fairshare-pool, and the view shows the counts: every request the
// fallback's engine finished is one the status counts as spilled. The load
// runs until the plugin has spilled a request (its status says so), not for
// a fixed time.
func TestSpillDemo(t *testing.T) {
	r, out := startRun(t, "../../testdata/plugin/spill.json", "-duration", "3s")
	if len(r.plans) != 1 || r.plans[0].pool.Name != "llama-8b" {
		t.Fatalf("demo plans = %+v, want llama-8b only", r.plans)
	}
	if len(r.routes()) != 2 {
		t.Fatalf("routes = %+v, want one per pool", r.routes())
	}
	r.opts.pending = func([]teamView) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		pools, err := r.status(ctx)
		if err != nil {
			return "the plugin's status (" + err.Error() + ")"
		}
		for _, p := range pools {
			if p.Name == "llama-8b" && len(p.SpilledTo) == 1 && p.SpilledTo[0] > 0 {
				return ""
			}
		}
		return "llama-8b to spill a request to llama-8b-ondemand"
	}
	s, text := runDemo(t, r, out)
	var from, in int64 = -1, -1
	for _, p := range s.Pools {
		switch p.Name {
		case "llama-8b":
			if len(p.SpilledTo) == 1 {
				from = p.SpilledTo[0]
			}
		case "llama-8b-ondemand":
			in = p.SpilledIn
		}
	}
	served := r.upstream.byPool["llama-8b-ondemand"].Load()
	if from <= 0 || from != in || served != from {
		t.Errorf("spilled to %d, spilled in %d, the fallback's engine finished %d: want equal and > 0", from, in, served)
	}
	for _, want := range []string{"pool llama-8b: ", "spilled to llama-8b-ondemand: ", "pool llama-8b-ondemand: ", "spilled in: "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}
