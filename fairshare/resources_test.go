package fairshare

import (
	"fmt"
	"testing"
	"time"
)

// kindPool is a pool of both kinds, C = 4 and K = 1000, teams a and b of
// share 0.5 (reservations 2 sequences and 500 tokens each), with the
// given limits on a.
func kindPool(lend, borrow float64) *Pool {
	cfg := Config{Capacity: 4, KVTokens: 1000, RequestTimeout: time.Hour, QueueLimit: 16, MaxQueueTime: time.Minute,
		Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(lend), BorrowingLimit: Limit(borrow)}, {Name: "b", Share: 0.5}}}
	return NewPool("kinds", cfg, base)
}

// put counts n requests of entry i of the given standing, each taking
// tok tokens.
func put(p *Pool, i, n int, borrowing bool, tok int64) {
	for range n {
		p.count(1, base.UnixNano(), i, p.window(base.UnixNano()), borrowing, p.demand(tok, 0))
	}
}

// TestKindsApportion: every declared kind is apportioned with the same
// shares, and a slice sets and reports every kind.
func TestKindsApportion(t *testing.T) {
	cfg := Config{Capacity: 10, KVTokens: 1001, Teams: []TeamConfig{{Name: "a", Share: 0.7}, {Name: "b", Share: 0.3}}}
	p := NewPool("kinds", cfg, base)
	verify(t, p)
	want := []amounts{{7, 701}, {3, 300}}
	for i, w := range want {
		if got := p.teams[i].res; got != w {
			t.Errorf("reservation of %q = %v, want %v", p.teams[i].name, got, w)
		}
	}
	tot := p.Totals()
	for i, w := range want {
		if got := tot.Whole.reserved(i); got != w {
			t.Errorf("Totals().Whole.reserved(%d) = %v, want %v", i, got, w)
		}
	}
	if got := tot.Whole.caps(); got != (amounts{10, 1001}) {
		t.Errorf("Totals().Whole.caps() = %v, want [10 1001]", got)
	}
	// A slice too small in each kind alone cuts that kind's
	// reservations and only those.
	for k := range numKinds {
		s := tot.Whole
		caps := s.caps()
		caps[k] /= 2
		s.setCaps(caps)
		p.SetSlice(&s)
		verify(t, p)
		got, _ := p.Slice()
		if got.caps() != caps {
			t.Errorf("kind %d: Slice().caps() = %v, want %v", k, got.caps(), caps)
		}
		var sum int64
		for i, w := range want {
			r := got.reserved(i)
			sum += r[k]
			for o := range numKinds {
				if o != k && r[o] != w[o] {
					t.Errorf("kind %d: slice cut %q in kind %d: %v, want %v", k, p.teams[i].name, o, r, w)
				}
			}
		}
		if sum > caps[k] {
			t.Errorf("kind %d: reservations %d above the slice's %d", k, sum, caps[k])
		}
		p.SetSlice(nil)
	}
	verify(t, p)
}

// TestKindsTests: within share, room, borrowing limit and lending limit
// are decided in every declared kind: each case makes one kind alone
// binding, so a loop that left a kind out answers wrong.
func TestKindsTests(t *testing.T) {
	type state struct {
		within, borrowing int   // a's requests in flight
		tok               int64 // tokens of each of a's requests
		bUse              int   // b's borrowing requests
		bTok              int64 // tokens of each of b's requests
	}
	tests := []struct {
		name        string
		lend, limit float64
		st          state
		demand      int64 // a's next request's tokens
		fits        bool  // withinFits
		room        bool  // hasRoom for a borrower of a
		mayBorrow   bool
	}{
		{"both free", 1, 1, state{0, 0, 0, 0, 0}, 100, true, true, true},
		{"sequences full, tokens free", 1, 1, state{2, 0, 10, 2, 10}, 100, false, false, true},
		{"tokens full, sequences free", 1, 1, state{1, 0, 450, 1, 460}, 100, false, false, true},
		{"pool: sequences only", 1, 1, state{0, 0, 0, 4, 1}, 100, true, false, true},
		{"pool: tokens only", 1, 1, state{0, 0, 0, 1, 950}, 100, true, false, true},
		// a's borrowing limit, ⌊0.25·C⌋ = 1 sequence and ⌊0.25·K⌋ = 250
		// tokens above its reservation, binding in one kind at a time.
		{"borrowing limit: sequences", 1, 0.25, state{2, 1, 10, 0, 0}, 10, false, true, false},
		{"borrowing limit: tokens", 1, 0.25, state{1, 1, 400, 0, 0}, 100, true, true, false},
		{"borrowing limit: within both", 1, 0.5, state{2, 1, 10, 0, 0}, 10, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kindPool(tt.lend, tt.limit)
			put(p, 0, tt.st.within, false, tt.st.tok)
			put(p, 0, tt.st.borrowing, true, tt.st.tok)
			put(p, 1, tt.st.bUse, true, tt.st.bTok)
			verify(t, p)
			d := p.demand(tt.demand, 0)
			if got := p.withinFits(0, d); got != tt.fits {
				t.Errorf("withinFits(a, %v) = %v, want %v\n%s", d, got, tt.fits, dump(p))
			}
			if got := p.hasRoom(p.usage(), 0, d); got != tt.room {
				t.Errorf("hasRoom(a, %v) = %v, want %v\n%s", d, got, tt.room, dump(p))
			}
			if got := p.mayBorrow(0, d); got != tt.mayBorrow {
				t.Errorf("mayBorrow(a, %v) = %v, want %v\n%s", d, got, tt.mayBorrow, dump(p))
			}
			if got, want := p.withinFits(0, d), refWithin(p, 0, tt.demand, 0); got != want {
				t.Errorf("withinFits(a, %v) = %v, the reference %v", d, got, want)
			}
			if got, want := p.hasRoom(p.usage(), 0, d), refRoom(p, 0, tt.demand); got != want {
				t.Errorf("hasRoom(a, %v) = %v, the reference %v", d, got, want)
			}
		})
	}
}

// TestKindsLendingLimit: what a team's lending limit keeps free is kept
// in every kind: with a lending nothing, b's borrower finds no room once
// the rest of either kind is used.
func TestKindsLendingLimit(t *testing.T) {
	for k := range numKinds {
		if !counted.has(k) {
			continue // work lends nothing and keeps nothing (TestKindsWorkNotBorrowable)
		}
		t.Run(fmt.Sprintf("kind %d", k), func(t *testing.T) {
			p := kindPool(0, 1) // a keeps its whole reservation [2 500]
			if p.teams[0].keep != (amounts{2, 500}) {
				t.Fatalf("keep of a = %v, want [2 500]", p.teams[0].keep)
			}
			// b uses its reservation in kind k (and little of the other),
			// so only kind k's free part is what a keeps.
			if k == kindSeq {
				put(p, 1, 2, false, 10)
			} else {
				put(p, 1, 1, false, 500)
			}
			verify(t, p)
			if p.hasRoom(p.usage(), 1, p.demand(1, 0)) {
				t.Errorf("hasRoom(b) = true with a keeping the rest of kind %d\n%s", k, dump(p))
			}
			// Without the lending limit the same request has room.
			q := kindPool(1, 1)
			if k == kindSeq {
				put(q, 1, 2, false, 10)
			} else {
				put(q, 1, 1, false, 500)
			}
			if !q.hasRoom(q.usage(), 1, q.demand(1, 0)) {
				t.Errorf("hasRoom(b) = false without a lending limit\n%s", dump(q))
			}
		})
	}
}

// TestKindsWithinRoom: a request that has its team's seat but exceeds its
// token reservation is within share only while the pool has the tokens
// free (withinRoom), and a team without a KV resource never weighs
// tokens.
func TestKindsWithinRoom(t *testing.T) {
	p := kindPool(1, 1)
	put(p, 0, 1, false, 450)
	d := p.demand(100, 0)
	if p.withinFits(0, d) || !p.withinRoom(p.usage(), 0, d) {
		t.Fatalf("withinFits, withinRoom(a, %v) = %v, %v, want false, true", d, p.withinFits(0, d), p.withinRoom(p.usage(), 0, d))
	}
	put(p, 1, 1, true, 460) // the pool's tokens: 450 + 460 + 100 > 1000
	if p.withinRoom(p.usage(), 0, d) {
		t.Fatalf("withinRoom(a, %v) = true with the pool's tokens used\n%s", d, dump(p))
	}
	// Sequences alone: the same state without K has no token test.
	cfg := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}}
	q := NewPool("seq", cfg, base)
	if q.declared() != 1<<kindSeq {
		t.Fatalf("declared() = %b, want sequences alone", q.declared())
	}
	put(q, 0, 1, false, 1<<30)
	if !q.withinFits(0, q.demand(1<<30, 0)) {
		t.Fatalf("withinFits on a pool of sequences alone weighed tokens\n%s", dump(q))
	}
}
