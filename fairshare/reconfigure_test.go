package fairshare

import (
	"math"
	"testing"
	"time"
)

func TestSetCapacity(t *testing.T) {
	p := twoTeams(nil) // a 6, b 4
	var ga []Grant
	for range 6 {
		ga = append(ga, p.Acquire(base, 1, "a", Interactive, 0))
	}
	if prev := p.SetCapacity(5); prev != 10 {
		t.Fatalf("SetCapacity(5) = %d, want 10", prev)
	}
	if r := p.Reserved(); r["a"] != 3 || r["b"] != 2 {
		t.Fatalf("Reserved() after SetCapacity(5) = %v, want a 3 b 2", r)
	}
	verify(t, p)
	// Requests in flight keep their standing; new ones are judged against
	// the new reservation.
	if s := stat(t, p, base, "a"); s.InFlight != 6 || s.Borrowing != 0 {
		t.Fatalf("a after shrinking: %+v", s)
	}
	if g := p.Acquire(base, 1, "a", Interactive, 0); !g.Borrowing {
		t.Fatalf("Acquire above the new reservation = %+v, want borrowing", g)
	}
	for i := range 4 {
		p.Release(base, &ga[i], 0)
	}
	if g := p.Acquire(base, 1, "a", Interactive, 0); g.Borrowing {
		t.Fatalf("a has 2 within-share requests in flight and 3 reserved: Acquire = %+v, want within share", g)
	}
	p.SetCapacity(-1)
	if p.Capacity() != 0 || p.Fingerprint() != twoTeams(nil).Fingerprint() {
		t.Fatalf("SetCapacity(-1): capacity %d; the fingerprint must not change", p.Capacity())
	}
	verify(t, p)
}

func TestReconfigure(t *testing.T) {
	p := NewPool("p", Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}}}, base)
	ga := p.Acquire(base, 1, "a", Interactive, 0)
	gb := p.Acquire(base, 1, "b", Interactive, 0)
	p.Charge(base, "a", 5)
	p.Charge(base, "b", 7)
	p.Charge(base, "c", 9)
	fp := p.Fingerprint()
	cfg := Config{Capacity: 6, Teams: []TeamConfig{{Name: "d", Share: 0.5}, {Name: "a", Share: 0.5}}}
	p.Reconfigure(at(time.Second), cfg)
	verify(t, p)
	if p.Fingerprint() == fp || p.Fingerprint() != cfg.Fingerprint() {
		t.Fatal("Reconfigure did not store the new fingerprint")
	}
	snap := p.Snapshot(at(time.Second))
	var order []string
	for _, s := range snap {
		order = append(order, s.Team)
	}
	if len(order) != 3 || order[0] != "d" || order[1] != "a" || order[2] != "b" {
		t.Fatalf("entries after Reconfigure = %v, want [d a b] (c dropped: nothing in flight)", order)
	}
	if a := snap[1]; a.Usage != 5 || a.InFlight != 1 || a.Reserved != 3 {
		t.Fatalf("a kept: %+v", a)
	}
	if b := snap[2]; b.Share != 0 || b.Reserved != 0 || b.InFlight != 1 || b.Usage != 7 {
		t.Fatalf("b draining: %+v", b)
	}
	// New requests of a removed team count as unknown.
	if g := p.Acquire(at(time.Second), 1, "b", Interactive, 0); g.Team != UnknownTeam {
		t.Fatalf("Acquire of a removed team = %+v, want UnknownTeam", g)
	}
	// The removed team's request releases normally, then the entry goes.
	if !p.Release(at(2*time.Second), &gb, 1) {
		t.Fatal("Release of a removed team's grant = false")
	}
	if s := p.Snapshot(at(2 * time.Second)); len(s) != 3 || s[2].Team != UnknownTeam {
		t.Fatalf("after the drain: %+v", s)
	}
	p.Release(at(2*time.Second), &ga, 1)
	verify(t, p)
	// Re-adding a dropped team starts it empty.
	p.Reconfigure(at(3*time.Second), Config{Capacity: 6, Teams: []TeamConfig{{Name: "b", Share: 1}}})
	if s := stat(t, p, at(3*time.Second), "b"); s.Usage != 0 || s.InFlight != 0 {
		t.Fatalf("re-added b: %+v", s)
	}
	verify(t, p)
}

func TestFingerprint(t *testing.T) {
	a := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}}, HalfLife: time.Hour}
	same := []Config{
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, Weight: 1}}, HalfLife: time.Hour},
		// Limits of 1 (or more, or NaN) are no limits; negative KV and
		// queue values are 0.
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(1), BorrowingLimit: Limit(3)}},
			HalfLife: time.Hour, KVTokens: -5, QueueLimit: -1},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(math.NaN())}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "a", Share: 0.9}, {Name: "*"}}, HalfLife: time.Hour},
	}
	for _, c := range same {
		if c.Fingerprint() != a.Fingerprint() {
			t.Errorf("Fingerprint(%+v) differs from an equivalent config", c)
		}
	}
	differ := []Config{
		{Capacity: 5, Teams: a.Teams, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.6}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, Weight: 2}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "b", Share: 0.5}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: a.Teams},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, EntryPenalty: true},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, HolderTimeout: time.Second},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, RequestTimeout: time.Second},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, KVTokens: 1000},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, QueueLimit: 8},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, TeamQueueLimit: 8},
		{Capacity: 4, Teams: a.Teams, HalfLife: time.Hour, MaxQueueTime: time.Second},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0.5)}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)}}, HalfLife: time.Hour},
		{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, BorrowingLimit: Limit(0)}}, HalfLife: time.Hour},
	}
	for _, c := range differ {
		if c.Fingerprint() == a.Fingerprint() {
			t.Errorf("Fingerprint(%+v) equals a different config's", c)
		}
	}
	// Stable across processes and versions of the record: a fixed value.
	if got := a.Fingerprint(); got != a.Fingerprint() || got == 0 {
		t.Errorf("Fingerprint() = %x", got)
	}
	for _, c := range append(differ, same...) {
		if got := NewPool("p", c, base).config(); got.Fingerprint() != c.Fingerprint() {
			t.Errorf("Config() = %+v does not round-trip the fingerprint of %+v", got, c)
		}
	}
	if got := NewPool("p", a, base).config(); got.Fingerprint() != a.Fingerprint() {
		t.Errorf("Config() = %+v does not round-trip the fingerprint", got)
	}
}

func TestSetKVTokens(t *testing.T) {
	p := twoTeams(func(c *Config) { c.KVTokens = 1000 }) // a 600, b 400 tokens
	g, _, _ := p.Arrive(base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 500})
	if prev := p.SetKVTokens(500); prev != 1000 || p.KVTokens() != 500 {
		t.Fatalf("SetKVTokens(500) = %d, K %d; want 1000, 500", prev, p.KVTokens())
	}
	verify(t, p)
	if s := stat(t, p, base, "a"); s.ReservedTokens != 300 || s.InFlight != 1 || s.Borrowing != 0 {
		t.Fatalf("a after SetKVTokens(500): %+v, want 300 reserved tokens and its request within share", s)
	}
	if g2, _, _ := p.Arrive(base, Request{Holder: 1, ID: 2, Team: "a", Tokens: 100}); !g2.Borrowing && !g2.BorrowsTokens {
		t.Fatalf("a holds 500 of its 300 reserved tokens: Arrive = %+v, want borrowing", g2)
	}
	p.Release(base, &g, 0)
	p.SetKVTokens(-5)
	if p.KVTokens() != 1 {
		t.Fatalf("SetKVTokens(-5): K %d, want 1 (the KV resource stays on)", p.KVTokens())
	}
	verify(t, p)
	q := twoTeams(nil)
	if q.SetKVTokens(800); q.KVTokens() != 0 {
		t.Fatalf("SetKVTokens on a pool without a KV resource: K %d, want 0", q.KVTokens())
	}
	if p.Fingerprint() != twoTeams(func(c *Config) { c.KVTokens = 1000 }).Fingerprint() {
		t.Fatal("SetKVTokens changed the fingerprint")
	}
}
