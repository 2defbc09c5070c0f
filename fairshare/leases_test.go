package fairshare

import (
	"testing"
	"time"
)

func leasePool() *Pool {
	return NewPool("p", Config{
		Capacity:       4,
		Teams:          []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		HolderTimeout:  3 * time.Second,
		RequestTimeout: 10 * time.Second,
	}, base)
}

func TestHolderExpiresIntoPhantoms(t *testing.T) {
	p := leasePool() // a: 2 slots
	dead := p.Acquire(base, 7, "a", Interactive, 1)
	p.Acquire(base, 7, "a", Interactive, 1)
	p.Acquire(base, 7, "a", Interactive, 1) // borrows
	p.Heartbeat(at(2*time.Second), 8)
	verify(t, p)
	if s := stat(t, p, at(2*time.Second), "a"); s.InFlight != 3 || s.Phantoms != 0 {
		t.Fatalf("before the timeout: %+v", s)
	}
	// Holder 7 was last seen at base: presumed dead at +3s.
	s := stat(t, p, at(3*time.Second), "a")
	if s.InFlight != 0 || s.Phantoms != 3 || s.PhantomsWithin != 2 || len(p.holders) != 1 {
		t.Fatalf("after the timeout: %+v, holders %d", s, len(p.holders))
	}
	verify(t, p)
	// Phantoms keep their standing: a's within-share slots are still taken.
	if g := p.Acquire(at(4*time.Second), 8, "a", Interactive, 0); !g.Borrowing || g.Saturated {
		t.Fatalf("Acquire while a's phantoms hold its slots = %+v, want borrowing, not saturated", g)
	}
	// Phantoms count as in flight: 3 phantoms + 1 request = C.
	if g := p.Acquire(at(4*time.Second), 8, "b", Interactive, 0); !g.Saturated {
		t.Fatalf("Acquire with C in flight counting phantoms = %+v, want saturated", g)
	}
	// The dead holder's VM was alive after all: its Release drops a phantom
	// of the grant's standing and still charges usage.
	if !p.Release(at(5*time.Second), &dead, 6) {
		t.Fatal("Release of an expired holder's grant = false")
	}
	s = stat(t, p, at(5*time.Second), "a")
	if s.Phantoms != 2 || s.PhantomsWithin != 1 || s.Usage != 6 || s.InFlight != 1 {
		t.Fatalf("after the late Release: %+v", s)
	}
	verify(t, p)
	// Phantoms expire RequestTimeout after the holder was presumed dead
	// (3s + 10s): no slot leaks. Holder 8 stays alive.
	for s := 6; s <= 12; s += 2 {
		p.Heartbeat(at(time.Duration(s)*time.Second), 8)
	}
	if s := stat(t, p, at(13*time.Second-1), "a"); s.Phantoms != 2 {
		t.Fatalf("phantoms just before expiry: %+v", s)
	}
	if s := stat(t, p, at(13*time.Second), "a"); s.Phantoms != 0 {
		t.Fatalf("phantoms at expiry: %+v", s)
	}
	if g := p.Acquire(at(13*time.Second), 8, "a", Interactive, 0); g.Borrowing {
		t.Fatalf("Acquire after the phantoms expired = %+v, want within share", g)
	}
	verify(t, p)
}

func TestHeartbeatKeepsHolderAlive(t *testing.T) {
	p := leasePool()
	g := p.Acquire(base, 7, "a", Interactive, 0)
	for s := time.Second; s <= 19*time.Second; s += 2 * time.Second {
		p.Heartbeat(at(s), 7)
	}
	if s := stat(t, p, at(19*time.Second), "a"); s.InFlight != 1 || s.Phantoms != 0 {
		t.Fatalf("a heartbeating holder lost its request: %+v", s)
	}
	// Release also counts as seen.
	g2 := p.Acquire(at(19*time.Second), 7, "b", Interactive, 0)
	p.Release(at(21*time.Second), &g, 0)
	if s := stat(t, p, at(23*time.Second), "b"); s.InFlight != 1 {
		t.Fatalf("Release did not count as a heartbeat: %+v", s)
	}
	p.Release(at(23*time.Second), &g2, 0)
	verify(t, p)
	// An idle holder leaves the record once it times out.
	p.Heartbeat(at(2*time.Minute), 9)
	if len(p.holders) != 1 {
		t.Fatalf("Holders() = %d, want 1", len(p.holders))
	}
}

func TestLeasesDisabled(t *testing.T) {
	p := twoTeams(nil) // HolderTimeout 0
	g := p.Acquire(base, 7, "a", Interactive, 0)
	p.Heartbeat(at(1000*time.Hour), 8)
	if s := stat(t, p, at(1000*time.Hour), "a"); s.InFlight != 1 || len(p.holders) != 1 {
		t.Fatalf("leases disabled: %+v, holders %d", s, len(p.holders))
	}
	p.Release(at(1000*time.Hour), &g, 0)
	if len(p.holders) != 0 {
		t.Fatalf("leases disabled: a holder with nothing in flight stays in the record")
	}
}

func TestAddPhantoms(t *testing.T) {
	p := leasePool() // a: 2 slots
	p.Acquire(base, 1, "a", Interactive, 0)
	p.AddPhantoms(base, "a", 3, at(time.Minute)) // 1 within (the slot left), 2 borrowing
	p.AddPhantoms(base, "a", 1, at(time.Hour))
	p.AddPhantoms(base, "a", 0, at(time.Hour))
	p.AddPhantoms(base, "a", 5, base) // already expired: nothing
	p.AddPhantoms(base, "ghost", 2, at(time.Minute))
	verify(t, p)
	s := stat(t, p, base, "a")
	if s.Phantoms != 4 || s.PhantomsWithin != 1 || s.InFlight != 1 {
		t.Fatalf("after AddPhantoms: %+v", s)
	}
	if s := stat(t, p, base, UnknownTeam); s.Phantoms != 2 {
		t.Fatalf("unknown team phantoms: %+v", s)
	}
	// They expire at their time.
	if s := stat(t, p, at(time.Minute), "a"); s.Phantoms != 1 {
		t.Fatalf("after the first phantoms expired: %+v", s)
	}
	if s := stat(t, p, at(time.Hour), "a"); s.Phantoms != 0 {
		t.Fatalf("after every phantom expired: %+v", s)
	}
	verify(t, p)
}

// TestLostReleaseExpires: a live holder that never releases a request (its
// release was lost) does not hold the slot for good: the request leaves the
// count between one and two RequestTimeouts after it was granted, and a
// late Release only settles usage.
func TestLostReleaseExpires(t *testing.T) {
	p := leasePool() // RequestTimeout 10s, HolderTimeout 3s; a: 2 slots
	// Windows are multiples of RequestTimeout since the Unix epoch; base
	// (12:00:00) starts one, so both requests are granted in window k.
	lost := p.Acquire(base, 7, "a", Interactive, 0)
	p.Heartbeat(at(2*time.Second), 7)
	p.Heartbeat(at(4*time.Second), 7)
	p.Acquire(at(5*time.Second), 7, "a", Interactive, 0)
	tests := []struct {
		at       time.Duration
		inFlight int
	}{
		{9 * time.Second, 2},  // window k
		{19 * time.Second, 2}, // window k+1
		{20 * time.Second, 0}, // window k+2: dropped, 20s and 15s after they were granted
	}
	last := 5 * time.Second
	for _, tt := range tests {
		for ; last < tt.at; last += time.Second { // holder 7 stays alive
			p.Heartbeat(at(last), 7)
		}
		p.Heartbeat(at(tt.at), 7)
		verify(t, p)
		if s := stat(t, p, at(tt.at), "a"); s.InFlight != tt.inFlight || s.Phantoms != 0 {
			t.Fatalf("at +%v: %+v, want %d in flight", tt.at, s, tt.inFlight)
		}
	}
	// The slots are free again; a late Release settles usage and drops
	// nothing else.
	p.AddPhantoms(at(20*time.Second), "a", 1, at(time.Minute))
	if !p.Release(at(21*time.Second), &lost, 3) {
		t.Fatal("late Release = false")
	}
	if s := stat(t, p, at(21*time.Second), "a"); s.Usage != 3 || s.Phantoms != 1 || s.InFlight != 0 {
		t.Fatalf("after the late Release: %+v", s)
	}
	verify(t, p)
}
