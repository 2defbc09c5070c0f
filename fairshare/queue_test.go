package fairshare

import (
	"testing"
	"time"
)

// flowPool is a pool of C = 4 with a (0.5) and b (0.5), 2 slots each, a
// queue of 10 and leases; mod changes the configuration.
func flowPool(mod func(*Config)) *Pool {
	cfg := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		QueueLimit: 10, MaxQueueTime: 10 * time.Second, HolderTimeout: 3 * time.Second, RequestTimeout: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	return NewPool("p", cfg, base)
}

// arrive calls Arrive and checks the outcome.
func arrive(t *testing.T, p *Pool, now time.Time, r Request, want Outcome) Grant {
	t.Helper()
	g, w, out := p.Arrive(now, r)
	verify(t, p)
	if out != want {
		t.Fatalf("Arrive(%+v) = %v (%+v, %+v), want %v\n%s", r, out, g, w, want, dump(p))
	}
	return g
}

func TestArriveWithinShareNeverHeld(t *testing.T) {
	p := flowPool(nil)
	var a []Grant
	for i := range 4 {
		a = append(a, arrive(t, p, base, Request{Holder: 1, ID: uint64(i + 1), Team: "a"}, Granted))
	}
	if !a[2].Borrowing || !a[3].Borrowing || a[1].Borrowing {
		t.Fatalf("a's grants %+v: want two within share, two borrowing", a)
	}
	// The pool is full: a's next borrower waits, b's request within
	// share goes at once, beyond C.
	arrive(t, p, base, Request{Holder: 1, ID: 5, Team: "a"}, Queued)
	g := arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "b", Class: Batch}, Granted)
	if g.Borrowing || g.Priority != 1 || !g.Saturated {
		t.Fatalf("b within share on a full pool = %+v, want priority 1, saturated", g)
	}
	if p.Waiters() != 1 || p.inFlight() != 5 {
		t.Fatalf("waiting %d, in flight %d; want 1, 5", p.Waiters(), p.inFlight())
	}
	if s := stat(t, p, at(1500*time.Millisecond), "a"); s.Waiting != 1 || s.OldestWait != 1500*time.Millisecond {
		t.Fatalf("Snapshot of a = %+v, want 1 waiting for 1.5 s", s)
	}
}

// TestDispatchStandingOrder: waiting requests of several holders go in
// the order of their standing at dispatch (rank, class, arrival), each
// dispatched by its own holder; another holder is told whose turn it is.
func TestDispatchStandingOrder(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity = 5
		c.Teams = []TeamConfig{{Name: "a", Share: 0.4}, {Name: "b", Share: 0.2}, {Name: "c", Share: 0.2}}
	}) // a: 2, b: 1, c: 1
	p.SetUsage(base, "a", 100) // LF 0.8: rank 1
	p.SetUsage(base, "b", 10)  // LF 4:   rank 0
	p.SetUsage(base, "c", 50)  // LF 0.8: rank 1, tied with a
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "b"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 4, Team: "c"}, Granted)
	var x []Grant // an unknown team's requests, admitted without a queue
	for range 3 {
		x = append(x, p.Acquire(base, 1, "x", Interactive, 0))
	}
	// Arrival order: a interactive, b batch, c interactive, b interactive.
	queue := []Request{
		{Holder: 2, ID: 1, Team: "a"},
		{Holder: 2, ID: 2, Team: "b", Class: Batch},
		{Holder: 2, ID: 3, Team: "c"},
		{Holder: 3, ID: 1, Team: "b"},
	}
	for k, r := range queue {
		arrive(t, p, at(time.Duration(k)*time.Millisecond), r, Queued)
	}
	now := at(time.Second)
	// 7 in flight for C = 5: nothing goes until three have finished.
	for k := range 3 {
		if _, w, st := p.Dispatch(now, 2); st != Blocked || w.Holder != 3 {
			t.Fatalf("Dispatch after %d releases = %v, head %+v; want blocked on holder 3", k, st, w)
		}
		p.Release(now, &x[k], 1)
	}
	want := []struct {
		holder uint32
		id     uint64
		prio   int
	}{{3, 1, 10}, {2, 2, 11}, {2, 1, 20}, {2, 3, 20}}
	for k, w := range want {
		if head, st := p.Next(now); st != Elsewhere || head.Holder != w.holder || head.ID != w.id {
			t.Fatalf("#%d: Next = %v %+v, want holder %d id %d", k, st, head, w.holder, w.id)
		}
		other := uint32(2)
		if w.holder == 2 {
			other = 3
		}
		if _, head, st := p.Dispatch(now, other); st != Elsewhere || head.Holder != w.holder {
			t.Fatalf("#%d: Dispatch(%d) = %v %+v, want elsewhere", k, other, st, head)
		}
		g, _, st := p.Dispatch(now, w.holder)
		verify(t, p)
		if st != Dispatched || g.ID != w.id || g.Priority != w.prio || !g.Borrowing || g.Holder != w.holder {
			t.Fatalf("#%d: Dispatch(%d) = %v %+v, want id %d priority %d", k, w.holder, st, g, w.id, w.prio)
		}
		if g.At-g.Arrived <= 0 {
			t.Fatalf("#%d: queue time %v", k, time.Duration(g.At-g.Arrived))
		}
		if k < len(want)-1 {
			if _, _, st := p.Dispatch(now, w.holder); st != Blocked {
				t.Fatalf("#%d: second Dispatch = %v, want blocked (the pool is full again)", k, st)
			}
		}
		p.Release(now, &g, 1)
	}
	if _, _, st := p.Dispatch(now, 2); st != Empty {
		t.Fatalf("Dispatch on an empty queue = %v", st)
	}
}

// TestDispatchDecidesStanding: a request that waited as a borrower is
// dispatched within share once its team has dropped back into its
// reservation, without needing room.
func TestDispatchDecidesStanding(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity = 2 }) // a: 1, b: 1
	aw := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted) // borrows: full
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a", Class: Batch}, Queued)
	arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "b"}, Granted) // within share, beyond C
	if _, _, st := p.Dispatch(at(time.Second), 1); st != Blocked {
		t.Fatalf("Dispatch = %v, want blocked", st)
	}
	p.Release(at(2*time.Second), &aw, 1) // 2 in flight = C: still no room
	g, w, st := p.Dispatch(at(2*time.Second), 1)
	verify(t, p)
	if st != Dispatched || !w.Within || g.Borrowing || g.Priority != 1 || g.ID != 3 {
		t.Fatalf("Dispatch = %v %+v %+v, want within share at priority 1", st, g, w)
	}
}

func TestQueueLimits(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity, c.QueueLimit, c.TeamQueueLimit = 2, 2, 1 })
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a"}, Queued)
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a"}, Duplicate)
	arrive(t, p, base, Request{Holder: 2, ID: 3, Team: "a"}, TeamQueueFull)
	arrive(t, p, base, Request{Holder: 2, ID: 4, Team: "someone"}, Queued) // UnknownTeam
	arrive(t, p, base, Request{Holder: 2, ID: 5, Team: "other"}, QueueFull)
	if p.Waiters() != 2 {
		t.Fatalf("waiting %d, want 2", p.Waiters())
	}
	// Without a queue, Arrive grants borrowers beyond C as Acquire does.
	q := flowPool(func(c *Config) { c.QueueLimit = 0 })
	for i := range 6 {
		arrive(t, q, base, Request{Holder: 1, ID: uint64(i), Team: "a"}, Granted)
	}
	if q.inFlight() != 6 {
		t.Fatalf("in flight %d, want 6", q.inFlight())
	}
}

func TestQueueExpiryAndRetryAfter(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity, c.HolderTimeout = 2, 0 })
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	_, w, _ := p.Arrive(base, Request{Holder: 1, ID: 3, Team: "a"})
	if w.Deadline != at(10*time.Second).UnixNano() {
		t.Fatalf("deadline %v, want base + 10s", time.Unix(0, w.Deadline))
	}
	arrive(t, p, at(4*time.Second), Request{Holder: 2, ID: 1, Team: "b", Tokens: 5}, Granted)
	arrive(t, p, at(4*time.Second), Request{Holder: 2, ID: 2, Team: "b"}, Queued)
	tests := []struct {
		now  time.Duration
		team string
		want time.Duration
	}{
		{9 * time.Second, "a", 9 * time.Second},
		{9*time.Second + 1, "a", 10 * time.Second}, // rounded up
		{9 * time.Second, "b", 5 * time.Second},
		{9 * time.Second, "nobody", 9 * time.Second}, // the oldest waiting
		{10 * time.Second, "a", 6 * time.Second},     // a's has expired: b's
		{20 * time.Second, "a", time.Second},         // nothing waits
	}
	for _, tt := range tests {
		if got := p.RetryAfter(at(tt.now), tt.team); got != tt.want {
			t.Errorf("RetryAfter(+%v, %q) = %v, want %v", tt.now, tt.team, got, tt.want)
		}
	}
	// At its deadline a's request is gone: never dispatched, and its
	// holder's Cancel finds nothing.
	if head, _ := p.Next(at(10 * time.Second)); head.Holder != 2 {
		t.Fatalf("Next at the deadline = %+v, want b's", head)
	}
	verify(t, p)
	if p.Cancel(at(10*time.Second), 1, 3) || p.Waiters() != 1 {
		t.Fatalf("Cancel of an expired request = true or queue %d", p.Waiters())
	}
	if !p.Cancel(at(11*time.Second), 2, 2) || p.Cancel(at(11*time.Second), 2, 2) {
		t.Fatal("Cancel is not idempotent")
	}
	verify(t, p)
}

func TestDeadHolderLeavesQueue(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity = 2 })
	arrive(t, p, base, Request{Holder: 8, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 8, ID: 2, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 7, ID: 1, Team: "a"}, Queued)
	arrive(t, p, base, Request{Holder: 8, ID: 3, Team: "b", Class: Batch, Tokens: 9}, Granted)
	for s := 1; s <= 3; s++ {
		p.Heartbeat(at(time.Duration(s)*time.Second), 8)
		verify(t, p)
	}
	if p.Waiters() != 0 || len(p.holders) != 1 {
		t.Fatalf("after holder 7 died: waiting %d, holders %d; want 0, 1", p.Waiters(), len(p.holders))
	}
}

// TestOwnSequenceBeforeBorrowers: a team's waiting request that exceeds
// only its token reservation takes the team's free sequence when the pool
// has the tokens, before a better-ranked borrower of another team (which
// would otherwise run in that sequence until the owner's next request
// pushed the pool over C, where vLLM PR #45561 preempts it).
func TestOwnSequenceBeforeBorrowers(t *testing.T) {
	p := flowPool(func(c *Config) { c.KVTokens = 1000 }) // a, b: 2 sequences, 500 tokens
	a0 := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 10}, Granted)
	p.Release(base, &a0, 1000) // a has used the pool: b ranks first
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a", Tokens: 300}, Granted)
	arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "b", Tokens: 100}, Granted)
	arrive(t, p, base, Request{Holder: 2, ID: 2, Team: "b", Tokens: 100}, Granted)
	// b borrows a's unused sequence while nothing waits.
	b3 := arrive(t, p, base, Request{Holder: 2, ID: 3, Team: "b", Tokens: 300}, Granted)
	if !b3.Borrowing {
		t.Fatalf("b3 = %+v, want borrowing", b3)
	}
	// 4 sequences, 800 tokens in flight: a's request does not fit the
	// cache, b's borrower finds no sequence.
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a", Tokens: 450}, Queued)
	arrive(t, p, base, Request{Holder: 2, ID: 4, Team: "b", Tokens: 100}, Queued)
	p.Release(at(time.Second), &b3, 1)
	// 3 sequences, 500 tokens: both fit the pool. a's request goes into
	// a's own free sequence, borrowing 250 tokens, before b's borrower.
	g, w, st := p.Dispatch(at(time.Second), 1)
	verify(t, p)
	if st != Dispatched || w.ID != 3 || w.Team != "a" || !w.Within || g.Borrowing || !g.BorrowsTokens || g.Priority != borrowPriority(1, Interactive) {
		t.Fatalf("Dispatch = %v %+v %+v: want a's request within share in sequences, borrowing tokens at rank 1", st, g, w)
	}
	// The pool is full: b's borrower waits.
	if _, w, st := p.Dispatch(at(time.Second), 2); st != Blocked || w.Team != "b" {
		t.Fatalf("Dispatch = %v %+v: want b's borrower blocked", st, w)
	}
}

func TestKVTokens(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity, c.KVTokens = 10, 1000 }) // a, b: 5 sequences, 500 tokens
	a1 := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 400}, Granted)
	a2 := arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a", Tokens: 200}, Granted)
	// a2 exceeds a's 500 tokens but fits the pool's free ones: it takes
	// a's second sequence and borrows the tokens, at a borrower's priority.
	if a1.Borrowing || a1.BorrowsTokens || a2.Borrowing || !a2.BorrowsTokens || a2.Priority < BorrowBase || a2.Tokens != 200 {
		t.Fatalf("a: %+v, %+v: want 400 within share, 200 within share in sequences borrowing tokens", a1, a2)
	}
	// 2 sequences of 10 in flight, but 1100 tokens would exceed K.
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a", Tokens: 500}, Queued)
	arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "b", Tokens: 300}, Granted)
	if got := p.inFlightTokens(); got != 900 {
		t.Fatalf("tokens in flight %d, want 900", got)
	}
	if s := stat(t, p, base, "a"); s.ReservedTokens != 500 || s.InFlightTokens != 600 || s.Waiting != 1 {
		t.Fatalf("Snapshot of a = %+v, want 500 tokens reserved, 600 in flight, 1 waiting", s)
	}
	// A demand above K counts as K.
	g := arrive(t, p, base, Request{Holder: 2, ID: 2, Team: "c", Tokens: 5000}, Queued)
	_ = g
	if _, w := p.Next(base); w != Blocked {
		t.Fatalf("Next = %v, want blocked", w)
	}
	p.Release(at(time.Second), &a1, 1)
	g, w, st := p.Dispatch(at(time.Second), 1)
	verify(t, p)
	if st != Dispatched || g.Borrowing || !g.BorrowsTokens || g.Tokens != 500 || !w.Within {
		t.Fatalf("Dispatch = %v %+v: want a's 500 tokens within share in sequences, borrowing tokens", st, g)
	}
	if got := p.inFlightTokens(); got != 1000 {
		t.Fatalf("tokens in flight %d, want 1000", got)
	}
	// A dead holder's grants keep their tokens until they expire.
	for s := 2; s <= 5; s++ {
		p.Heartbeat(at(time.Duration(s)*time.Second), 2)
	}
	if got := p.inFlightTokens(); got != 1000 || stat(t, p, at(5*time.Second), "a").Phantoms != 2 {
		t.Fatalf("after holder 1 died: tokens %d, want 1000 held by phantoms", got)
	}
	for s := 6; s <= 70; s += 2 { // holder 1's phantoms last until 1 s + 3 s + 1 min
		p.Heartbeat(at(time.Duration(s)*time.Second), 2)
	}
	verify(t, p)
	if got := p.inFlightTokens(); got != 300 {
		t.Fatalf("after the phantoms expired: tokens %d, want b's 300", got)
	}
	if _, w := p.Next(at(70 * time.Second)); w != Empty {
		t.Fatalf("Next = %v: c's request should have expired", w)
	}
}

func TestLendingLimit(t *testing.T) {
	for _, tt := range []struct {
		lend      float64
		borrowers int // of b, granted while a is idle
	}{{1, 2}, {0.5, 1}, {0, 0}} {
		p := flowPool(func(c *Config) { c.Teams[0].LendingLimit = Limit(tt.lend) })
		arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "b"}, Granted)
		arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "b"}, Granted)
		n := 0
		for i := range 3 {
			_, _, out := p.Arrive(base, Request{Holder: 1, ID: uint64(3 + i), Team: "b"})
			verify(t, p)
			if out == Granted {
				n++
			}
		}
		if n != tt.borrowers {
			t.Errorf("lending limit %v: b borrowed %d, want %d", tt.lend, n, tt.borrowers)
		}
		// a's own requests find its kept slots free.
		for i := range 2 {
			if g := arrive(t, p, base, Request{Holder: 2, ID: uint64(i), Team: "a"}, Granted); g.Borrowing {
				t.Errorf("lending limit %v: a's request %d borrows", tt.lend, i)
			}
		}
	}
}

// TestLendingLimitOwnTeam: what a team keeps from lending stays available
// to its own borrowers (a request within share in sequences but not in
// tokens).
func TestLendingLimitOwnTeam(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity, c.KVTokens = 3, 100
		c.Teams = []TeamConfig{{Name: "a", Share: 1.0 / 3, LendingLimit: Limit(0)}, {Name: "b", Share: 2.0 / 3}}
	}) // a: 1 sequence, 33 tokens, all kept
	// a's first request takes its sequence within share (a team with
	// nothing within share in flight may run one request whatever its
	// demand: TestFirstRequestWithinShare); the next borrows.
	arrive(t, p, base, Request{Holder: 1, ID: 8, Team: "a", Tokens: 10}, Granted)
	g := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 80}, Granted)
	if !g.Borrowing {
		t.Fatalf("a's 80 tokens = %+v, want borrowing", g)
	}
	// b borrowing 30 tokens more: a has used what it keeps.
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "b", Tokens: 67}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "b", Tokens: 1}, Queued)
}

func TestBorrowingLimit(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity = 20
		c.Teams = []TeamConfig{{Name: "a", Share: 0.25, BorrowingLimit: Limit(0.1)}, {Name: "b", Share: 0.25}}
	}) // a: 5 + at most 2 borrowed; b: 5
	var gs []Grant
	for i := range 7 {
		gs = append(gs, arrive(t, p, base, Request{Holder: 1, ID: uint64(i), Team: "a"}, Granted))
	}
	arrive(t, p, base, Request{Holder: 1, ID: 7, Team: "a"}, Queued)
	if _, st := p.Next(base); st != Blocked {
		t.Fatalf("Next = %v, want blocked by a's borrowing limit", st)
	}
	// b's borrowers are not held behind a's.
	for i := range 6 {
		arrive(t, p, base, Request{Holder: 2, ID: uint64(i), Team: "b"}, Granted)
	}
	// A borrower of a finishes: the waiting one borrows in its place.
	p.Release(at(time.Second), &gs[6], 1)
	if g, _, st := p.Dispatch(at(time.Second), 1); st != Dispatched || !g.Borrowing || g.ID != 7 {
		t.Fatalf("Dispatch = %v %+v, want a's request 7 borrowing", st, g)
	}
	verify(t, p)
	// Zero forbids borrowing altogether.
	q := flowPool(func(c *Config) { c.Teams[0].BorrowingLimit = Limit(0) })
	arrive(t, q, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, q, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	arrive(t, q, base, Request{Holder: 1, ID: 3, Team: "a"}, Queued)
}

func TestReconfigureKeepsQueue(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity = 2 })
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a"}, Queued)
	arrive(t, p, base, Request{Holder: 1, ID: 4, Team: "b", Tokens: 3}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 5, Team: "b"}, Queued)
	cfg := p.config()
	cfg.Capacity = 8
	cfg.Teams = cfg.Teams[1:] // a is removed: its waiting request goes on as UnknownTeam's
	p.Reconfigure(at(time.Second), cfg)
	verify(t, p)
	got := map[uint64]string{}
	for {
		g, _, st := p.Dispatch(at(time.Second), 1)
		verify(t, p)
		if st != Dispatched {
			break
		}
		got[g.ID] = g.Team
	}
	if len(got) != 2 || got[3] != UnknownTeam || got[5] != "b" {
		t.Fatalf("dispatched %v, want 3 as %q and 5 as b", got, UnknownTeam)
	}
}

func TestOutcomeAndStatusStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Granted.String(), "granted"}, {Queued.String(), "queued"}, {QueueFull.String(), "queue_full"},
		{TeamQueueFull.String(), "team_queue_full"}, {Duplicate.String(), "duplicate"}, {Outcome(99).String(), "unknown"},
		{Empty.String(), "empty"}, {Blocked.String(), "blocked"}, {Dispatched.String(), "dispatched"},
		{Elsewhere.String(), "elsewhere"}, {DispatchStatus(9).String(), "unknown"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

// TestFlowAllocationFree: decode + Arrive + encode and decode + Dispatch +
// encode allocate nothing once the buffers have grown, with 512 waiting.
func TestFlowAllocationFree(t *testing.T) {
	q := queuePool(32, 512)
	arrivals, _ := q.AppendBinary(nil)
	g := Grant{Team: "team-000", Holder: q.holders[0].id, Tokens: 1500, At: base.UnixNano(), epoch: q.teams[0].epoch}
	q.Release(at(time.Second), &g, 1)
	head, st := q.Next(at(time.Second))
	if st != Elsewhere {
		t.Fatalf("Next = %v, want a head that may go", st)
	}
	dispatches, _ := q.AppendBinary(nil)
	var p Pool
	buf := make([]byte, 0, 2*len(dispatches))
	now := at(time.Second)
	for _, tt := range []struct {
		name string
		rec  []byte
		op   func()
	}{
		{"Arrive", arrivals, func() {
			if _, _, out := p.Arrive(now, Request{Holder: 12345, ID: 1 << 40, Team: "team-003", Tokens: 100, Estimate: 1}); out != Queued {
				t.Fatalf("Arrive = %v", out)
			}
		}},
		{"Dispatch", dispatches, func() {
			if _, _, st := p.Dispatch(now, head.Holder); st != Dispatched {
				t.Fatalf("Dispatch = %v", st)
			}
		}},
	} {
		allocs := testing.AllocsPerRun(50, func() {
			if err := p.UnmarshalBinary(tt.rec); err != nil {
				t.Fatal(err)
			}
			tt.op()
			buf, _ = p.AppendBinary(buf[:0])
		})
		if allocs != 0 {
			t.Errorf("decode + %s + encode allocates %v times, want 0", tt.name, allocs)
		}
	}
}

// TestArriveLaggingClock: a VM whose clock lags the record's by more than
// MaxQueueTime still queues, at the record's time.
func TestArriveLaggingClock(t *testing.T) {
	p := flowPool(func(c *Config) { c.Capacity = 2 })
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a"}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a"}, Granted)
	p.Heartbeat(at(20*time.Second), 2) // VM 2's clock is 20 s ahead
	_, w, out := p.Arrive(base, Request{Holder: 1, ID: 3, Team: "a"})
	verify(t, p)
	if out != Queued || w.Arrived != at(20*time.Second).UnixNano() || w.Deadline != at(30*time.Second).UnixNano() {
		t.Fatalf("Arrive = %v %+v, want queued at +20s until +30s", out, w)
	}
}

// TestLargeDemandNotStuck: a request that needs more cache than the other
// teams' lending limits can ever leave to it goes when the lent cache is
// empty, instead of holding the queue until its deadline.
func TestLargeDemandNotStuck(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity, c.KVTokens = 8, 16000
		c.Teams[1].LendingLimit = Limit(0.5) // b keeps 4000 of its 8000 tokens
	})
	g := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 100}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a", Tokens: 15000}, Queued) // 12000 at most
	p.Release(at(time.Second), &g, 1)
	g, _, st := p.Dispatch(at(time.Second), 1)
	verify(t, p)
	// a has nothing else within share in flight: it goes within share
	// (TestFirstRequestWithinShare), its demand kept whole.
	if st != Dispatched || g.Tokens != 15000 || g.Borrowing {
		t.Fatalf("Dispatch = %v %+v, want the 15000-token request within share", st, g)
	}
	// b's kept part is spent until it finishes: b's own requests still go.
	arrive(t, p, at(time.Second), Request{Holder: 2, ID: 1, Team: "b", Tokens: 4000}, Granted)
}

// TestNeverFittingNotHead: a borrower to which the other teams' lending
// limits leave no sequence at all waits without holding back a borrower
// that fits, whatever their standing.
func TestNeverFittingNotHead(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.KVTokens = 100
		c.Teams = []TeamConfig{{Name: "a", Share: 0.5, LendingLimit: Limit(0)},
			{Name: "b", Share: 0.5, LendingLimit: Limit(0)}, {Name: "c", Share: 0.0001}}
	}) // a, b: 2 sequences and 50 tokens each, all kept; c: nothing
	p.SetUsage(base, "a", 10)
	p.SetUsage(base, "b", 10)
	// c has used nothing: it ranks first, but a and b keep every slot.
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "c", Tokens: 1}, Queued)
	// a's request goes although c ranks first: c can never go (a and b
	// keep everything), so it does not hold a back. (A team with nothing
	// within share in flight runs one request within share whatever its
	// tokens: TestFirstRequestWithinShare.)
	arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "a", Tokens: 60}, Granted)
	if w, st := p.Next(base); st != Blocked || w.Team != "c" {
		t.Fatalf("Next = %v %+v, want c's request blocked", st, w)
	}
}

// TestFirstRequestWithinShare: a team with nothing within share in flight
// runs one request within share whatever its token demand, so that a demand
// estimated above the team's whole token reservation (a client's max_tokens
// before any completion was seen) neither borrows forever nor, as the
// queue's head, holds every borrower behind it on a saturated pool.
func TestFirstRequestWithinShare(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity, c.KVTokens = 4, 1000
		c.Teams = []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}
	}) // a, b: 2 sequences and 500 tokens each
	// b fills the pool's tokens within and beyond its share.
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "b", Tokens: 500}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "b", Tokens: 500}, Granted)
	// a's first request asks 4104 tokens, more than a's 500: it still goes,
	// within share, although the pool has no token left.
	g := arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "a", Tokens: 4104}, Granted)
	if g.Borrowing || g.Priority != 0 {
		t.Fatalf("a's first request = %+v, want within share at 0", g)
	}
	// Its second does not: a now has tokens within share in flight.
	arrive(t, p, base, Request{Holder: 2, ID: 2, Team: "a", Tokens: 10}, Queued)
	p.Release(at(time.Second), &g, 1)
	// Released, a's tokens are free again: the waiting one is within share.
	g2, _, st := p.Dispatch(at(time.Second), 2)
	verify(t, p)
	if st != Dispatched || g2.Borrowing {
		t.Fatalf("Dispatch = %v %+v, want a's request within share", st, g2)
	}
}

// TestReestimate: a waiting request whose demand its holder lowers (the
// team's usual completion learnt after arrival) goes once it fits; a demand
// is never raised, and an unknown request is not touched.
func TestReestimate(t *testing.T) {
	p := flowPool(func(c *Config) {
		c.Capacity, c.KVTokens = 4, 1000
		c.Teams = []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}}
	}) // a, b: 2 sequences and 500 tokens each
	arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "b", Tokens: 500}, Granted)
	arrive(t, p, base, Request{Holder: 1, ID: 2, Team: "a", Tokens: 300}, Granted)
	// a's next asks 400 (its max_tokens): 300 + 400 > 500 and the pool has
	// 200 tokens left: it waits, blocked.
	arrive(t, p, base, Request{Holder: 1, ID: 3, Team: "a", Tokens: 400}, Queued)
	if _, st := p.Next(base); st != Blocked {
		t.Fatalf("Next = %v, want blocked", st)
	}
	if p.Reestimate(base, 1, 3, 900) || p.Reestimate(base, 1, 99, 10) {
		t.Error("Reestimate raised a demand or touched an unknown request")
	}
	if !p.Reestimate(at(time.Second), 1, 3, 150) {
		t.Fatal("Reestimate(150) = false")
	}
	verify(t, p)
	g, _, st := p.Dispatch(at(time.Second), 1)
	verify(t, p)
	if st != Dispatched || g.Tokens != 150 || g.Borrowing {
		t.Fatalf("Dispatch = %v %+v, want the request within share with 150 tokens", st, g)
	}
}

// TestWithinShareInTeamOrder: a team's reservation goes to its waiting
// requests in the team's order. A small request that would fit what is
// left does not take it ahead of an earlier, larger one of its team that
// does not fit yet: on arrival it queues behind it (it is not within
// share), and at dispatch the larger one is the only one of the team that
// can go within share.
func TestWithinShareInTeamOrder(t *testing.T) {
	p := flowPool(func(c *Config) { c.KVTokens = 100 }) // a and b: 2 sequences, 50 tokens each
	a1 := arrive(t, p, base, Request{Holder: 1, ID: 1, Team: "a", Tokens: 30}, Granted)
	arrive(t, p, base, Request{Holder: 2, ID: 1, Team: "b", Tokens: 25}, Granted)
	arrive(t, p, base, Request{Holder: 2, ID: 2, Team: "b", Tokens: 25}, Granted)
	// 30 + 40 > 50: not within share; 80 + 40 > 100: no room.
	arrive(t, p, at(time.Millisecond), Request{Holder: 1, ID: 2, Team: "a", Tokens: 40}, Queued)
	// 30 + 10 fits a's reservation, but a's larger request waits before it.
	arrive(t, p, at(2*time.Millisecond), Request{Holder: 1, ID: 3, Team: "a", Tokens: 10}, Queued)
	if _, w, st := p.Dispatch(at(3*time.Millisecond), 1); st != Blocked || w.ID != 2 {
		t.Fatalf("Dispatch = %v, head %+v; want blocked on a's request 2 (the small one must not overtake it)", st, w)
	}
	p.Release(at(4*time.Millisecond), &a1, 1)
	for _, id := range []uint64{2, 3} {
		g, _, st := p.Dispatch(at(5*time.Millisecond), 1)
		verify(t, p)
		if st != Dispatched || g.ID != id || g.Borrowing {
			t.Fatalf("Dispatch = %v %+v, want a's request %d within share", st, g, id)
		}
	}
}

// TestBatchAging: among waiting requests of one standing, a batch request
// counts as arrived BatchAging after its arrival: it yields to an
// interactive request that arrived within BatchAging after it, not to
// one that arrived later. Without aging, class goes before arrival.
func TestBatchAging(t *testing.T) {
	for _, tc := range []struct {
		aging time.Duration
		want  []uint64
	}{
		{0, []uint64{2, 3, 1}},
		{500 * time.Millisecond, []uint64{2, 1, 3}},
		{time.Nanosecond, []uint64{1, 2, 3}},
	} {
		p := flowPool(func(c *Config) { c.Capacity, c.BatchAging = 2, tc.aging }) // a: 1, b: 1
		g := arrive(t, p, base, Request{Holder: 1, ID: 9, Team: "a"}, Granted)
		arrive(t, p, base, Request{Holder: 2, ID: 9, Team: "b"}, Granted)
		arrive(t, p, at(100*time.Millisecond), Request{Holder: 1, ID: 1, Team: "a", Class: Batch}, Queued)
		arrive(t, p, at(300*time.Millisecond), Request{Holder: 1, ID: 2, Team: "a"}, Queued)
		arrive(t, p, at(800*time.Millisecond), Request{Holder: 1, ID: 3, Team: "a"}, Queued)
		now := at(time.Second)
		for k, id := range tc.want {
			p.Release(now, &g, 1)
			var st DispatchStatus
			g, _, st = p.Dispatch(now, 1)
			verify(t, p)
			if st != Dispatched || g.ID != id || g.Borrowing {
				t.Fatalf("BatchAging %v: #%d: Dispatch = %v %+v, want request %d within share", tc.aging, k, st, g, id)
			}
		}
	}
}
