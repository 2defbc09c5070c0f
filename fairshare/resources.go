package fairshare

import "math"

// Resources. A pool has up to three resources: sequences
// (Config.Capacity, C, always), KV-cache tokens (Config.KVTokens, K, when
// declared) and work (Config.Throughput, X cost units per second, when
// declared). A request demands one sequence, its token estimate
// (Request.Tokens: prompt + expected completion) and its work estimate
// (Request.Work, cost units; Estimate when not set); requests decided by
// Acquire demand one sequence, no token, and their estimate as work.
//
// Every team's reservation is apportioned in each resource with the same
// shares (from C and from K, largest remainder, apportion.go). A request
// is within share when it fits what its team's within-share requests in
// flight (phantoms included) leave of the reservation, in every resource. Arrive and
// Dispatch also count as within share a request that fits what is left
// of its team's reserved sequences and whose tokens, beyond the team's
// token reservation, fit the pool's free tokens as a borrower's would
// (withinRoom): it takes its team's sequence and borrows tokens, at a
// borrower's priority (Grant.BorrowsTokens). The pool has
// room for a borrower of team i with demand d when, in every resource r,
//
//	used_r + kept_r(i) + d_r ≤ capacity_r
//
// where used_r counts every request in flight (phantoms included) and
// kept_r(i) is what the other teams' lending limits keep free for them:
// Σ over teams t ≠ i of max(0, keep_t,r − use_t,r), keep_t,r being the part
// of t's reservation it does not lend (reservation − ⌊LendingLimit ×
// reservation⌋) and use_t,r its requests in flight in r. A team with a
// borrowing limit may borrow when, in every resource,
//
//	use_i,r + d_r − reservation_i,r ≤ ⌊BorrowingLimit × capacity_r⌋.
//
// Without a KV resource the token terms vanish; without limits keep is 0
// and the borrowing test always passes, so the room test is today's
// "fewer than C requests in flight".
//
// A token demand larger than K is clamped to K (the request then needs
// the whole cache, and runs alone); without a KV resource token demands
// are not recorded. In the room test a demand is further capped at what
// the other teams' lending limits can ever leave to it (K − Σ_{t≠i}
// keep_t,tok), so that it goes once that part of the cache is empty.
//
// Work: a throughput reservation. Every team reserves w_i = its share of
// X (cost units per second, apportioned as the other kinds). Its use is
// not a sum of requests in flight but a debt D_i (cost units, float64):
// the within-share work granted and not yet paid for, paid down linearly
// at the reserved rate wherever the pool advances its usage clock,
//
//	D_i(t) = max(0, D_i(t0) − a_i · (t − t0)),  a_i = w_i + loan_i
//
// (a_i = w_i on one proxy; lend.go for a replica's loan). It is a token
// bucket of depth B · a_i (B = Config.ThroughputBurst, 10 s by default)
// holding B · a_i − D_i. A request of work estimate d is within share in
// work when
//
//	D_i + d ≤ B · a_i,  or D_i = 0 and a_i > 0
//
// (the one-request exception of the other kinds: a request larger than
// the bucket goes when the bucket is full); a within-share grant adds d
// to D_i (Grant.Work), and its Release settles it to what the request
// cost: D_i += consumed − d, clamped at 0. A new entry's debt is 0. A
// team whose share of X rounds to 0 reserves no work: its requests of any
// work borrow (X is meant to be large against the number of teams: cost
// units, not requests, per second).
// Work is the one kind nothing borrows: the room, borrowing and lending
// tests leave work out (borrowers are bounded by sequences and tokens,
// ordered by standing). A borrower whose work still fits its team's
// bucket (stWorkBorrow: the team is above its reservation in sequences
// or tokens, not in work) is charged its work as a within-share request
// is, and, held, goes before every borrower whose team's bucket is
// empty, whatever their ranks (Pool.better): it borrows seats or tokens
// to do work its team has reserved, while the other borrows work that
// is not its team's. Without that a team of long requests, which holds
// its seats and tokens for little work, got less than its share of the
// work while a better-ranked team over its rate took every seat that
// freed (S5 in the benchmark). Other borrowers are not charged. Without
// a queue (Acquire, QueueLimit 0) nothing is held, so no borrower is
// charged either.
// Nor may a request that has its team's seat borrow work (withinRoom):
// a team whose bucket is empty borrows, whatever its seats, and its
// requests become within share again as the debt pays down, with no
// release needed (every test reads the debt at the operation's time).
// So the reservation divides the work the engines do, not only their
// seats (see RATIONALE.md, "Why a throughput reservation is a debt paid
// down at the reserved rate"). Without a work resource (X = 0) there is
// no debt, no work demand, and every test is the other kinds' alone.

// The resource list. Every per-resource quantity of the core is an
// amounts vector indexed by kind: a team's reservation, loan, kept part
// and borrowing limit, the pool's capacities and a request's demand; what
// is in flight (a team's requests of each standing, a holder's counts, a
// phantom group) is a flight vector, the same list without work (whose
// use is a debt), so that the counts every record carries do not grow
// with it.
// Every test, limit, apportionment and slice operation is one loop over
// the kinds the pool declares (the others are 0 everywhere: verify checks
// it). Sequences (kindSeq, index 0) are the seat: always declared, a
// request demands exactly one, the queue's head must be able to get one
// at all (mayEverFit), and a request that has its team's seat may borrow
// the other counted kinds (KV tokens) from the pool, never work
// (withinRoom). Every other kind is an
// amount: its demand is clamped to the pool's capacity and, in the room
// test, to what the other teams' lending limits can ever leave.
//
// Adding a kind is one constant below, one capacity source (a Config
// field read in Reconfigure, Pool.total and live set from it) and one
// demand field (Request, waiter, Grant); the loops, the record (codec.go:
// one value per declared kind, in this order) and the slices follow. A
// kind counted in flight goes before kindWork. Work is the exception the
// list allows: its use is a debt, not a sum of requests in flight
// (counted and flight leave it out of every in-flight amount), and a
// replica's slice derives it from its sequences (slice.go).

// kind is one resource of a pool: an index into amounts, in list order.
type kind uint8

const (
	// kindSeq is sequences (requests in flight): C, Config.Capacity.
	// Always declared.
	kindSeq kind = iota
	// kindTok is KV-cache tokens: K, Config.KVTokens. Declared when
	// K > 0.
	kindTok
	// kindWork is work: X, Config.Throughput, the pool's throughput in
	// cost units per second. Declared when X > 0. Its use is not a sum
	// of requests in flight but every team's debt (see above).
	kindWork
	// numKinds is the length of the list.
	numKinds
)

// kinds is a set of kinds, bit k for kind k: the kinds a pool declares.
type kinds uint8

// allKinds is every kind of the list.
const allKinds = kinds(1)<<numKinds - 1

// numCounted is the number of counted kinds: the kinds whose use is a
// sum of the requests in flight, the list's first ones (every kind but
// work, which comes last).
const numCounted = int(kindWork)

// counted is the counted kinds as a set: the ones a holder count, a
// phantom group and the room, borrowing and lending tests carry.
const counted = kinds(1)<<numCounted - 1

// flight is one value per counted kind: what requests in flight take (a
// team's sums, a holder count, a phantom group). Work, a debt, has no
// place in it: the counts the record decodes and encodes on every
// request are as small as before work came (see BenchmarkArriveWork).
type flight [numCounted]int64

// add returns a + b in every counted kind.
func (a flight) add(b flight) flight {
	for k := range a {
		a[k] += b[k]
	}
	return a
}

// sub returns a − b in every counted kind.
func (a flight) sub(b flight) flight {
	for k := range a {
		a[k] -= b[k]
	}
	return a
}

// restZero reports whether a is 0 in every counted kind but sequences.
func (a flight) restZero() bool {
	for k := 1; k < numCounted; k++ {
		if a[k] != 0 {
			return false
		}
	}
	return true
}

// wide returns a as amounts (0 in work).
func (a flight) wide() amounts {
	var w amounts
	copy(w[:], a[:])
	return w
}

// counted returns a's counted kinds.
func (a amounts) counted() flight {
	var f flight
	copy(f[:], a[:numCounted])
	return f
}

// has reports whether s holds k.
func (s kinds) has(k kind) bool { return s>>k&1 != 0 }

// amounts is one value per kind (sequences, tokens, ...), indexed by kind.
// A fixed-size array rather than a slice: it is copied, compared and
// summed without allocating, and the record codec reads and writes it in
// place (see RATIONALE.md, "Why is a pool's resource list a fixed-size
// vector?").
type amounts [numKinds]int64

// add returns a + b in every kind.
func (a amounts) add(b amounts) amounts {
	for k := range a {
		a[k] += b[k]
	}
	return a
}

// isZero reports whether a is 0 in every kind.
func (a amounts) isZero() bool { return a == amounts{} }

// restZero reports whether a is 0 in every kind but sequences.
func (a amounts) restZero() bool {
	for k := kindSeq + 1; k < numKinds; k++ {
		if a[k] != 0 {
			return false
		}
	}
	return true
}

// declared returns the kinds the pool declares: sequences, and every kind
// whose capacity is configured (K > 0 for tokens).
func (p *Pool) declared() kinds {
	s := kinds(1) << kindSeq
	for k := kindSeq + 1; k < numKinds; k++ {
		if p.total[k] > 0 {
			s |= 1 << k
		}
	}
	return s
}

// demand is what a request of tok estimated KV tokens and work work
// (cost units, already clamped by p.work) demands: one sequence, its
// tokens (p.tokens) and its work.
func (p *Pool) demand(tok, work int64) amounts {
	var d amounts
	d[kindSeq] = 1
	d[kindTok] = p.tokens(tok)
	d[kindWork] = work
	return d
}

// applyLimits computes e's kept parts and borrowing limits from its
// reservation and the pool's capacities, in every kind.
func (p *Pool) applyLimits(e *entry) {
	for k := range numKinds {
		e.keep[k] = e.res[k] - int64(math.Floor(e.lend*float64(e.res[k])))
		e.lim[k] = -1
		if e.borrowLim < 1 {
			e.lim[k] = int64(math.Floor(e.borrowLim * float64(p.live[k])))
		}
	}
}

// tokens is the token demand a request of n estimated tokens records:
// n clamped into [0, K], 0 without a KV resource.
func (p *Pool) tokens(n int64) int64 {
	if p.total[kindTok] == 0 || n <= 0 {
		return 0
	}
	return min(n, p.total[kindTok])
}

// work is the work demand (cost units) a request of work estimate x
// records: x rounded to an integer and clamped into [0, 2^40], 0 without
// a work resource (negative, NaN and infinite count as 0).
func (p *Pool) work(x float64) int64 {
	if p.total[kindWork] == 0 || !(x > 0) {
		return 0
	}
	return int64(math.Round(min(x, maxWork)))
}

// workRate is entry e's work rate: its reservation plus its loan, cost
// units per second.
func (e *entry) workRate() int64 { return e.res[kindWork] + e.lent[kindWork] }

// depth is entry e's bucket depth, B × its work rate (cost units).
func (p *Pool) depth(e *entry) float64 {
	return float64(e.workRate()) * p.burst.Seconds()
}

// workFits reports whether a request of entry i demanding d cost units
// is within share in work: the debt plus d fits the bucket, or the debt
// is 0 and the team reserves any work. Cost: O(1).
func (p *Pool) workFits(i int, d int64) bool {
	e := &p.teams[i]
	return e.debt+float64(d) <= p.depth(e) || e.debt == 0 && e.workRate() > 0
}

// payDown pays every entry's debt down at its work rate for dt
// nanoseconds (decayTo calls it when the usage clock advances).
func (p *Pool) payDown(dt int64) {
	for i := range p.teams {
		e := &p.teams[i]
		if e.debt > 0 {
			e.debt = max(0, e.debt-float64(e.workRate())*float64(dt)/1e9)
		}
	}
}

// withinFits reports whether a request of entry i demanding d fits what
// is left of the team's reservation (and loan, lend.go) in every declared
// kind: in work, its bucket (workFits). Cost: O(kinds).
func (p *Pool) withinFits(i int, d amounts) bool {
	// A team with nothing within share in flight in a kind may run one
	// request within share whatever its demand there (kindFits): a token
	// demand estimated above the team's whole token reservation (a
	// client's max_tokens before any completion was seen) would otherwise
	// never be within share, and as the queue's head it would hold every
	// borrower behind it while a saturated pool never has room for it.
	// The cache can then be overcommitted by at most one request's excess
	// per team; vLLM preempts the lowest priority (a borrower's) if it
	// must. For sequences (a demand of one) the exception is the test
	// itself.
	return p.kindFits(i, kindSeq, d[kindSeq]) && p.restFits(i, d)
}

// allowed is the within-share requests entry e may have in flight: its
// reservation, plus the loan of a replica (lend.go), which only the
// team's own within-share requests take and which adds nothing to what
// borrowers may use. Cost: O(1).
func (e *entry) allowed() int { return int(e.res[kindSeq] + e.lent[kindSeq]) }

// withinRoom reports whether a request of entry i demanding d is within
// share (withinFits), or has a seat of its team's (a free reserved
// sequence), fits its team's bucket in work, and, in every other declared
// kind, fits either the team's reservation or the pool's free room as a
// borrower's would (given u = p.usage()): a request that exceeds only its
// team's token reservation takes its own team's sequence, borrowing
// tokens the pool has free, rather than leaving the sequence to other
// teams' borrowers. Work is never borrowed so: a team whose bucket is
// empty would otherwise run on its seats whatever the work it was
// granted. Cost: O(kinds).
func (p *Pool) withinRoom(u usage, i int, d amounts) bool {
	if p.withinFits(i, d) {
		return true
	}
	e := &p.teams[i]
	if e.within[kindSeq]+e.pWithin[kindSeq] >= e.res[kindSeq]+e.lent[kindSeq] {
		return false
	}
	return p.restRoom(u, i, d)
}

// restFits is withinFits in every declared kind but sequences: in work
// the team's bucket (workFits), in every other kind kindFits.
func (p *Pool) restFits(i int, d amounts) bool {
	s := p.declared()
	for k := kindSeq + 1; k < numKinds; k++ {
		if !s.has(k) {
			continue
		}
		if k == kindWork {
			if !p.workFits(i, d[k]) {
				return false
			}
			continue
		}
		if !p.kindFits(i, k, d[k]) {
			return false
		}
	}
	return true
}

// restRoom is withinRoom's test in every declared kind but sequences
// (given u = p.usage()): work fits the team's bucket, every other kind
// fits the team's reservation or the pool's room as a borrower's would.
func (p *Pool) restRoom(u usage, i int, d amounts) bool {
	s := p.declared()
	if s.has(kindWork) && !p.workFits(i, d[kindWork]) {
		return false
	}
	s &= counted
	for k := kindSeq + 1; k < numKinds; k++ {
		if s.has(k) && !p.kindFits(i, k, d[k]) && !p.kindRoom(u, i, k, d[k]) {
			return false
		}
	}
	return true
}

// kindFits is withinFits in kind k alone.
func (p *Pool) kindFits(i int, k kind, d int64) bool {
	e := &p.teams[i]
	used, allowed := e.within[k]+e.pWithin[k], e.res[k]+e.lent[k]
	return used+d <= allowed || used == 0 && allowed > 0
}

// mayBorrow reports whether entry i's borrowing limit lets it borrow a
// request demanding d, in every declared kind but work. Cost: O(kinds).
func (p *Pool) mayBorrow(i int, d amounts) bool {
	e := &p.teams[i]
	s := p.declared() & counted
	use := e.use()
	for k := range numKinds {
		if s.has(k) && e.lim[k] >= 0 && use[k]+d[k]-e.res[k] > e.lim[k] {
			return false
		}
	}
	return true
}

// usage is what a pool's requests in flight take, and what lending limits
// keep free, in every kind.
type usage struct {
	used amounts // Σ in flight, phantoms included
	kept amounts // Σ max(0, keep − use): what lending limits keep free now
	keep amounts // Σ keep: what lending limits keep, used or not
}

// usage sums the pool's use and kept parts. Cost: O(teams · kinds).
func (p *Pool) usage() usage {
	var u usage
	for i := range p.teams {
		e := &p.teams[i]
		use := e.use()
		for k := range numKinds {
			u.used[k] += use[k]
			u.kept[k] += max(0, e.keep[k]-use[k])
			u.keep[k] += e.keep[k]
		}
	}
	return u
}

// hasRoom reports whether the pool has room for a borrower of entry i
// demanding d in every declared kind but work, given u = p.usage().
// Cost: O(kinds).
func (p *Pool) hasRoom(u usage, i int, d amounts) bool {
	s := p.declared() & counted
	for k := range numKinds {
		if s.has(k) && !p.kindRoom(u, i, k, d[k]) {
			return false
		}
	}
	return true
}

// kindRoom reports whether the pool has room in kind k for a borrower of
// entry i demanding d there, given u = p.usage(): what is in flight, plus
// what the other teams' lending limits keep free, plus the demand, fits
// the capacity. Cost: O(1).
func (p *Pool) kindRoom(u usage, i int, k kind, d int64) bool {
	e := &p.teams[i]
	kept := u.kept[k] - max(0, e.keep[k]-e.use()[k])
	if k != kindSeq {
		// A demand larger than what the other teams can ever lend counts
		// as all of it: it goes once the lent part is empty, instead of
		// blocking the queue's head until its deadline.
		d = min(d, max(0, p.live[k]-(u.keep[k]-e.keep[k])))
	}
	return u.used[k]+kept+d <= p.live[k]
}

// roomNoEntry is hasRoom for a team with no entry yet: nothing of its own
// in flight, nothing kept. Cost: O(kinds).
func (p *Pool) roomNoEntry(u usage, d amounts) bool {
	s := p.declared() & counted
	for k := range numKinds {
		if !s.has(k) {
			continue
		}
		x := d[k]
		if k != kindSeq {
			x = min(x, max(0, p.live[k]-u.keep[k]))
		}
		if u.used[k]+u.kept[k]+x > p.live[k] {
			return false
		}
	}
	return true
}

// mayEverFit reports whether the other teams' lending limits leave a
// borrower of entry i a sequence at all (given u = p.usage()): one that
// they do not may wait, but must not hold the queue's head. Cost: O(1).
func (p *Pool) mayEverFit(u usage, i int) bool {
	return p.live[kindSeq]-(u.keep[kindSeq]-p.teams[i].keep[kindSeq]) >= 1
}
