package wasmgw

import (
	"testing"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/tidwall/gjson"
)

func TestConfigKeepsTeamOrderAndValues(t *testing.T) {
	s := &fairbench.Scenario{HalfLife: 90, Teams: []fairbench.TeamSpec{{Name: "zeta", Share: 0.7, Weight: 2}, {Name: "alpha", Share: 0.3}}}
	cfg := Config(s, 24)
	if !gjson.ValidBytes(cfg) {
		t.Fatalf("Config = %s: not JSON", cfg)
	}
	p := gjson.GetBytes(cfg, "pools.0")
	if got := p.Get("capacity").Int(); got != 24 {
		t.Errorf("capacity = %d, want 24", got)
	}
	var names []string
	p.Get("teams").ForEach(func(k, v gjson.Result) bool {
		names = append(names, k.String())
		return true
	})
	if len(names) != 2 || names[0] != "zeta" || names[1] != "alpha" {
		t.Errorf("teams in order %v, want [zeta alpha] (the scenario's order)", names)
	}
	if w := p.Get("teams.zeta.weight").Float(); w != 2 {
		t.Errorf("zeta weight = %v, want 2", w)
	}
	if p.Get("teams.alpha.weight").Exists() {
		t.Error("alpha has a weight, want none (default 1)")
	}
	if hl := gjson.GetBytes(cfg, "half_life").String(); hl != "1m30s" {
		t.Errorf("half_life = %q, want 1m30s", hl)
	}
}

func TestBodies(t *testing.T) {
	b := requestBody(300, 77)
	if !gjson.ValidBytes(b) {
		t.Fatalf("requestBody is not JSON: %.80s", b)
	}
	if got := len(gjson.GetBytes(b, "messages.0.content").String()); got != 1200 {
		t.Errorf("content of %d bytes, want 1200 (4 per prompt token, the plugin's estimate)", got)
	}
	if got := gjson.GetBytes(b, "max_tokens").Int(); got != 77 {
		t.Errorf("max_tokens = %d, want 77", got)
	}
	if b := requestBody(10, 0); gjson.GetBytes(b, "max_tokens").Exists() {
		t.Errorf("requestBody(10, 0) = %.80s: has max_tokens, want none", b)
	}
	r := responseBody(5, 300, 40, 77)
	u := gjson.GetBytes(r, "usage")
	if u.Get("prompt_tokens").Int() != 300 || u.Get("completion_tokens").Int() != 40 || u.Get("total_tokens").Int() != 340 {
		t.Errorf("usage = %s, want 300 / 40 / 340 (the real output, not max_tokens)", u.Raw)
	}
	if f := gjson.GetBytes(r, "choices.0.finish_reason").String(); f != "stop" {
		t.Errorf("finish_reason = %q for 40 of 77 tokens, want stop", f)
	}
	if f := gjson.GetBytes(responseBody(5, 300, 77, 77), "choices.0.finish_reason").String(); f != "length" {
		t.Errorf("finish_reason = %q at max_tokens, want length", f)
	}
}
