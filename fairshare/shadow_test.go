package fairshare

import (
	"math/rand"
	"testing"
	"time"
)

// TestArriveShadowDecidesAsArrive runs a random trace of arrivals and
// releases on a pool with a queue, KV tokens and a borrowing limit
// through ArriveShadow, and before every arrival decides the same request
// with Arrive on a copy of the record: the outcome must be Arrive's, a
// request Arrive grants must get Arrive's grant (priority, standing), and
// one Arrive would queue or refuse must be granted as a borrower. Nothing
// ever waits, and every shadow grant stays counted in flight (sequences
// and KV tokens) until its release: the record's invariants hold at
// every step.
func TestArriveShadowDecidesAsArrive(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.KVTokens = 4000
		c.QueueLimit = 2
		c.TeamQueueLimit = 1
		c.EntryPenalty = true
		c.Teams = []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25, BorrowingLimit: Limit(0.25)}, {Name: "c", Share: 0.25}}
	})
	rng := rand.New(rand.NewSource(3))
	var live []Grant
	var tokens int64
	now := base
	seen := map[Outcome]int{}
	for step := range 4000 {
		now = now.Add(time.Duration(rng.Intn(50)) * time.Millisecond)
		if len(live) > 0 && rng.Intn(3) == 0 {
			k := rng.Intn(len(live))
			g := live[k]
			live = append(live[:k], live[k+1:]...)
			tokens -= g.Tokens
			p.Release(now, &g, float64(rng.Intn(300)))
			verify(t, p)
			continue
		}
		r := Request{Holder: 1, ID: uint64(step + 1), Team: []string{"a", "b", "c", "z"}[rng.Intn(4)],
			Class: Class(rng.Intn(2)), Tokens: int64(rng.Intn(1500)), Estimate: float64(rng.Intn(400))}
		rec, err := p.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		q := new(Pool)
		if err := q.UnmarshalBinary(rec); err != nil {
			t.Fatal(err)
		}
		want, _, wantOut := q.Arrive(now, r)
		before := p.inFlight()
		g, out := p.ArriveShadow(now, r)
		verify(t, p)
		seen[out]++
		if out != wantOut {
			t.Fatalf("step %d: ArriveShadow(%+v) = %v, Arrive = %v\n%s", step, r, out, wantOut, dump(p))
		}
		switch {
		case out == Granted:
			if g.Priority != want.Priority || g.Borrowing != want.Borrowing || g.BorrowsTokens != want.BorrowsTokens || g.Tokens != want.Tokens {
				t.Fatalf("step %d: shadow grant %+v, Arrive's %+v", step, g, want)
			}
		case !g.Borrowing || g.Priority < BorrowBase:
			t.Fatalf("step %d: %v request granted %+v, want a borrower", step, out, g)
		}
		if p.Waiters() != 0 || p.inFlight() != before+1 {
			t.Fatalf("step %d: waiting %d, in flight %d after %d: want nothing waiting, one more in flight", step, p.Waiters(), p.inFlight(), before)
		}
		live = append(live, g)
		tokens += g.Tokens
		if got := p.inFlightTokens(); got != tokens {
			t.Fatalf("step %d: %d KV tokens in flight, the live grants hold %d", step, got, tokens)
		}
	}
	if seen[Granted] == 0 || seen[Queued] == 0 {
		t.Fatalf("outcomes %v: the trace must reach both granted and queued", seen)
	}
	for i := range live {
		p.Release(now, &live[i], 0)
	}
	if p.inFlight() != 0 || p.inFlightTokens() != 0 {
		t.Fatalf("after every release: %d in flight, %d tokens", p.inFlight(), p.inFlightTokens())
	}
}
