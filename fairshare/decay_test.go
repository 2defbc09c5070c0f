package fairshare

import (
	"math"
	"testing"
	"time"
)

// TestDecayHalvesEveryHalfLife: the value halves at every half-life within
// 1e-9 relative (the manner of Kueue's decay tests).
func TestDecayHalvesEveryHalfLife(t *testing.T) {
	for _, hl := range []time.Duration{time.Second, 5 * time.Minute, 168 * time.Hour} {
		p := twoTeams(func(c *Config) { c.HalfLife = hl })
		p.Charge(base, "a", 1024)
		for k := 1; k <= 20; k++ {
			now := base.Add(time.Duration(k) * hl)
			want := 1024 / math.Pow(2, float64(k))
			if got := p.Snapshot(now)[0].Usage; !closeRel(got, want, 1e-9) {
				t.Fatalf("half-life %v: usage after %d half-lives = %v, want %v", hl, k, got, want)
			}
		}
	}
}

// TestDecayStepsEqualOneStep: decaying in many small steps equals one step
// over the same time, within 1e-9.
func TestDecayStepsEqualOneStep(t *testing.T) {
	steps := twoTeams(func(c *Config) { c.HalfLife = time.Minute })
	once := twoTeams(func(c *Config) { c.HalfLife = time.Minute })
	steps.Charge(base, "a", 100)
	once.Charge(base, "a", 100)
	now := base
	for range 10000 {
		now = now.Add(37 * time.Millisecond)
		steps.Heartbeat(now, 1)
		steps.decayTo(now.UnixNano())
	}
	a, b := steps.Snapshot(now)[0].Usage, once.Snapshot(now)[0].Usage
	if !closeRel(a, b, 1e-9) {
		t.Fatalf("10000 steps: %v, one step: %v", a, b)
	}
	want := 100 * math.Exp(-math.Ln2*now.Sub(base).Seconds()/60)
	if !closeRel(b, want, 1e-12) {
		t.Fatalf("usage = %v, want %v", b, want)
	}
}

func TestDecayDisabled(t *testing.T) {
	p := twoTeams(nil)
	p.Charge(base, "a", 10)
	if got := p.Snapshot(at(1000 * time.Hour))[0].Usage; got != 10 {
		t.Fatalf("half-life 0: usage = %v, want 10", got)
	}
}

// TestDecayTimeBackwards: a time before the last update (two VMs' clocks
// disagree) neither grows usage nor decays it twice.
func TestDecayTimeBackwards(t *testing.T) {
	p := twoTeams(func(c *Config) { c.HalfLife = time.Minute })
	p.Charge(at(time.Minute), "a", 8)
	p.Charge(base, "a", 8) // counts as charged at the later time
	if got := p.Snapshot(at(time.Minute))[0].Usage; got != 16 {
		t.Fatalf("usage = %v, want 16", got)
	}
	if got := p.Snapshot(at(2 * time.Minute))[0].Usage; !closeRel(got, 8, 1e-12) {
		t.Fatalf("usage a half-life later = %v, want 8", got)
	}
}

func TestChargeAndSetUsage(t *testing.T) {
	tests := []struct {
		name  string
		value float64
		want  float64
	}{
		{"positive", 3, 3}, {"zero", 0, 0}, {"negative", -1, 0}, {"NaN", math.NaN(), 0},
		{"+Inf", math.Inf(1), 0}, {"-Inf", math.Inf(-1), 0}, {"huge", 1e308, maxUsage},
	}
	for _, tt := range tests {
		p := twoTeams(nil)
		p.SetUsage(base, "a", 7)
		p.SetUsage(base, "a", tt.value)
		if got := p.Snapshot(base)[0].Usage; got != tt.want {
			t.Errorf("SetUsage(%s) then usage = %v, want %v", tt.name, got, tt.want)
		}
		p.SetUsage(base, "b", 1)
		p.Charge(base, "b", tt.value)
		if got := p.Snapshot(base)[1].Usage; got != min(1+tt.want, maxUsage) {
			t.Errorf("Charge(%s) then usage = %v, want %v", tt.name, got, 1+tt.want)
		}
		verify(t, p)
	}
	// Unknown teams are charged to UnknownTeam.
	p := twoTeams(nil)
	p.Charge(base, "stranger", 2)
	p.Charge(base, "other", 3)
	usage, inflight := p.Usage(base)
	if usage[UnknownTeam] != 5 || len(usage) != 3 || inflight["a"] != 0 {
		t.Fatalf("Usage() = %v, %v", usage, inflight)
	}
}
