package fairshare

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestTakeSpill: a fallback takes a waiting request of another pool only
// while none of its own waits, a borrower fits beside what its teams'
// lending limits keep, and fewer than C are in flight; the request is
// granted as the unknown team, borrowing, with its ID and arrival kept
// (its wait counts as queue time); a refusal changes nothing but expiry.
func TestTakeSpill(t *testing.T) {
	cfg := Config{Capacity: 4, QueueLimit: 8, MaxQueueTime: 10 * time.Second,
		Teams: []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)}, {Name: "b", Share: 0.5}}}
	fb := NewPool("fb", cfg, base)
	w := Waiting{Holder: 7, ID: 42, Team: "x", Class: Batch, Arrived: base.UnixNano(), Estimate: 3}

	g, ok := fb.TakeSpill(at(2*time.Second), 7, w)
	if !ok {
		t.Fatal("an empty fallback refused a spill")
	}
	if g.Team != UnknownTeam || !g.Borrowing || g.ID != 42 || g.Arrived != base.UnixNano() || g.Class != Batch {
		t.Errorf("grant %+v: want the unknown team, borrowing, ID 42, arrival kept, batch", g)
	}
	if q := time.Duration(g.At - g.Arrived); q != 2*time.Second {
		t.Errorf("queue time %v, want 2s", q)
	}
	verify(t, fb)

	// b borrows one more: 2 in flight, a keeps its 2 (lending limit 0):
	// no room for a borrower although fewer than C are in flight.
	gb := fb.Acquire(at(2*time.Second), 1, "b", Interactive, 0)
	if _, ok := fb.TakeSpill(at(2*time.Second), 7, w); ok {
		t.Error("a spill took a sequence a's lending limit keeps")
	}
	fb.Release(at(3*time.Second), &gb, 0)
	fb.Release(at(3*time.Second), &g, 0)

	// A request of the fallback's own waits (o may not borrow) while two
	// sequences are free: it goes first, no spill takes them.
	own := NewPool("own", Config{Capacity: 4, QueueLimit: 8, MaxQueueTime: 10 * time.Second,
		Teams: []TeamConfig{{Name: "o", Share: 0.5, BorrowingLimit: Limit(0)}, {Name: "p", Share: 0.5}}}, base)
	own.Acquire(base, 1, "o", Interactive, 0)
	own.Acquire(base, 1, "o", Interactive, 0)
	if _, _, out := own.Arrive(base, Request{Holder: 1, ID: 1, Team: "o"}); out != Queued {
		t.Fatalf("o's third request: %v, want queued (borrowing limit)", out)
	}
	before, _ := own.AppendBinary(nil)
	if _, ok := own.TakeSpill(base, 7, w); ok {
		t.Error("a fallback with a request of its own waiting took a spill")
	}
	after, _ := own.AppendBinary(nil)
	if !bytes.Equal(before, after) {
		t.Error("a refused spill changed the fallback's record")
	}
	own.Cancel(base, 1, 1)
	if _, ok := own.TakeSpill(base, 7, w); !ok {
		t.Error("no spill once the fallback's own waiter left, with 2 of 4 in flight")
	}
	verify(t, own)

	// The pool full, with a request of its own waiting.
	for i := 0; i < 2; i++ {
		fb.Acquire(at(3*time.Second), 1, "a", Interactive, 0)
	}
	fb.Acquire(at(3*time.Second), 1, "b", Interactive, 0)
	fb.Acquire(at(3*time.Second), 1, "b", Interactive, 0)
	if _, _, out := fb.Arrive(at(3*time.Second), Request{Holder: 1, ID: 1, Team: "b"}); out != Queued {
		t.Fatalf("b's third request: %v, want queued", out)
	}
	if _, ok := fb.TakeSpill(at(3*time.Second), 7, w); ok {
		t.Error("a full fallback took a spill")
	}
	verify(t, fb)

	// Its own waiter expired (MaxQueueTime): it no longer holds a spill
	// back; the pool is full all the same.
	if _, ok := fb.TakeSpill(at(20*time.Second), 7, w); ok {
		t.Error("a spill into a pool with C in flight")
	}
	if fb.Waiters() != 0 {
		t.Errorf("%d waiting after the deadline, want 0", fb.Waiters())
	}
}

// TestTakeSpillNeverPastC: random acquires (which may pass C: Acquire
// never refuses), releases and spills from two holders, each spill on a
// copy of the record decoded as the plugin's compare-and-swap does: a
// spill is taken only below C and never leaves more than C in flight, a
// pool at or above C takes none, and the invariants hold throughout.
func TestTakeSpillNeverPastC(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 58))
	cfg := Config{Capacity: 5, QueueLimit: 4, Teams: []TeamConfig{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.4}}}
	p := NewPool("fb", cfg, base)
	var live []Grant
	taken, refused := 0, 0
	for step := 0; step < 3000; step++ {
		now := at(time.Duration(step) * time.Millisecond)
		switch k := r.IntN(5); {
		case k <= 1 && len(live) > 0:
			j := r.IntN(len(live))
			p.Release(now, &live[j], 1)
			live = append(live[:j], live[j+1:]...)
		case k == 2 && r.IntN(3) == 0:
			live = append(live, p.Acquire(now, 1, "a", Interactive, 0))
		default:
			b, _ := p.AppendBinary(nil)
			var q Pool
			if err := q.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			was := q.inFlight()
			w := Waiting{Holder: uint32(2 + k%2), ID: uint64(step), Arrived: now.UnixNano()}
			g, ok := q.TakeSpill(now, w.Holder, w)
			switch {
			case ok && (was >= cfg.Capacity || q.inFlight() > cfg.Capacity):
				t.Fatalf("step %d: a spill taken with %d in flight, leaving %d, C = %d", step, was, q.inFlight(), cfg.Capacity)
			case !ok && was < cfg.Capacity:
				t.Fatalf("step %d: a spill refused with %d in flight, no waiter, no lending limit, C = %d", step, was, cfg.Capacity)
			case ok:
				taken++
				live = append(live, g)
				p = &q
			default:
				refused++
			}
		}
		verify(t, p)
	}
	if taken == 0 || refused == 0 {
		t.Fatalf("taken %d, refused %d: the walk did not reach both sides of C", taken, refused)
	}
}
