package fairshare

import (
	"bytes"
	"testing"
)

// TestHasRoom: a borrower of any team other than a lending-limited one
// finds no room once the free sequences are what that team keeps for
// itself, although fewer than C requests are in flight (which is all
// TryAcquire checks); HasRoom changes nothing in the pool; with KV
// tokens the token demand counts too.
func TestHasRoom(t *testing.T) {
	p := NewPool("p", Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)}, {Name: "b", Share: 0.5}}}, base)
	// a reserves 2 and lends none of them: b's borrowers and an unknown
	// team's may use 2 sequences.
	if !p.HasRoom(UnknownTeam, 0) || !p.HasRoom("nobody", 0) {
		t.Fatal("no room in an empty pool")
	}
	g1 := p.Acquire(base, 1, "b", Interactive, 0)
	g2 := p.Acquire(base, 1, "b", Interactive, 0)
	before, _ := p.AppendBinary(nil)
	if p.HasRoom(UnknownTeam, 0) || p.HasRoom("b", 0) {
		t.Error("room for a borrower while the free sequences are a's, kept")
	}
	if !p.HasRoom("a", 0) {
		t.Error("a finds no room in its own kept sequences")
	}
	if _, ok := p.TryAcquire(base, 1, UnknownTeam, Interactive, 0); !ok {
		t.Fatal("TryAcquire refused with 2 of 4 in flight (it does not read lending limits)")
	}
	p2 := NewPool("p", Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)}, {Name: "b", Share: 0.5}}}, base)
	p2.Acquire(base, 1, "b", Interactive, 0)
	p2.Acquire(base, 1, "b", Interactive, 0)
	x, _ := p2.AppendBinary(nil)
	p2.HasRoom(UnknownTeam, 0)
	p2.HasRoom("a", 0)
	if y, _ := p2.AppendBinary(nil); !bytes.Equal(x, y) || !bytes.Equal(x, before) {
		t.Error("HasRoom changed the pool")
	}
	p.Release(base, &g1, 0)
	p.Release(base, &g2, 0)
	verify(t, p)

	// Tokens: K = 100, a keeps its 50, b has 20 in flight: 30 are left.
	k := NewPool("k", Config{Capacity: 10, KVTokens: 100, Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)}, {Name: "b", Share: 0.5}}}, base)
	if _, _, out := k.Arrive(base, Request{Holder: 1, ID: 1, Team: "b", Tokens: 20}); out != Granted {
		t.Fatalf("b's request: %v", out)
	}
	if !k.HasRoom(UnknownTeam, 30) || k.HasRoom(UnknownTeam, 31) {
		t.Errorf("token room: 30 %v, 31 %v; want true, false", k.HasRoom(UnknownTeam, 30), k.HasRoom(UnknownTeam, 31))
	}
}
