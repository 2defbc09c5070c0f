package plugin_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// TestWasmReconfigureKeepsUsageAndInFlight: a new configuration (new VMs,
// as Envoy and Istio start on every change) applies new capacities and
// shares to the existing record and keeps usage and requests in flight,
// which the old VMs still release.
func TestWasmReconfigureKeepsUsageAndInFlight(t *testing.T) {
	h, _ := start(t, testConfig, 2)
	done := request(h, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, `{"model":"m","prompt":[1,2,3,4]}`)
	respondJSON(done, 4, 8) // usage a: 4 + 16 = 20
	open := request(h, 1, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":[1,2]}`)
	cfg2 := strings.Replace(testConfig, `"capacity": 4, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}}`,
		`"capacity": 8, "models": ["m"], "teams": {"a": {"share": 0.25}, "b": {"share": 0.75}}`, 1)
	if cfg2 == testConfig {
		t.Fatal("test setup: configuration not changed")
	}
	if err := h.Reconfigure([]byte(cfg2)); err != nil {
		t.Fatalf("reconfigure: %v", err)
	}
	// A request on the new VMs makes them apply the new configuration.
	s := request(h, 0, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":[1]}`)
	p := pool(t, h, "small")
	if p.Capacity() != 8 {
		t.Errorf("capacity after reconfiguration = %d, want 8", p.Capacity())
	}
	st := teamStats(t, h, "small")
	if st["b"].Reserved != 6 || st["a"].Reserved != 2 {
		t.Errorf("reserved a %d b %d, want 2 and 6", st["a"].Reserved, st["b"].Reserved)
	}
	if math.Abs(st["a"].Usage-20) > 1e-6 {
		t.Errorf("usage a = %v, want 20 (kept)", st["a"].Usage)
	}
	if st["b"].InFlight != 2 {
		t.Errorf("in flight b = %d, want 2 (one from before the change)", st["b"].InFlight)
	}
	respondJSON(open, 2, 1) // released by an old VM
	if c := pool(t, h, "small").Capacity(); c != 8 {
		t.Errorf("capacity after an old VM's release = %d, want 8 (an old VM must not put its configuration back)", c)
	}
	respondJSON(s, 1, 1)
	checkIdle(t, h, "small")
}

// TestWasmDeadVMLeaksNoSlot: the requests of a VM that stops (trapped,
// replaced) become phantoms once it misses its heartbeats, and expire at
// the request timeout.
func TestWasmDeadVMLeaksNoSlot(t *testing.T) {
	cfg := strings.Replace(testConfig, `"tick": "1s"`, `"tick": "1s", "holder_timeout": "3s", "request_timeout": "20s"`, 1)
	clock := host.NewVirtualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	opts := host.Options{Profile: hostProfile, VMs: 1, PluginName: pluginName, VMID: "dead-vm-" + t.Name(), PluginConfig: []byte(cfg), Clock: clock, Seed: 3}
	alive, err := compiled(t).Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	noHostErrors(t, alive)
	defer alive.Close(context.Background())
	opts.Seed = 4
	dying, err := compiled(t).Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	request(dying, 0, "/v1/completions", [][2]string{{"x-team", "a"}}, `{"model":"m","prompt":[1]}`)
	request(dying, 0, "/v1/completions", [][2]string{{"x-team", "b"}}, `{"model":"m","prompt":[1]}`)
	dying.Close(context.Background()) // its streams never end: nothing releases them
	if st := teamStats(t, alive, "small"); st["a"].InFlight+st["a"].Phantoms != 1 || st["b"].InFlight+st["b"].Phantoms != 1 {
		t.Fatalf("before the timeout: a %+v b %+v", st["a"], st["b"])
	}
	alive.Advance(5 * time.Second) // the alive VM's ticks expire the dead holder
	st := teamStats(t, alive, "small")
	if st["a"].InFlight != 0 || st["a"].Phantoms != 1 {
		t.Errorf("after the holder timeout: a in flight %d phantoms %d, want 0 and 1", st["a"].InFlight, st["a"].Phantoms)
	}
	alive.Advance(30 * time.Second)
	checkIdle(t, alive, "small")
	if v := alive.Metrics()["fairshare.pool.small.team.a.phantoms"].Value; v != 0 {
		t.Errorf("phantoms gauge = %v, want 0", v)
	}
}
