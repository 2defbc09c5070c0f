package fairshare

import "math"

// Resources. A pool has one or two resources: sequences (Config.Capacity,
// C, always) and KV-cache tokens (Config.KVTokens, K, when declared). A
// request demands one sequence plus its token estimate (Request.Tokens:
// prompt + expected completion); requests decided by Acquire demand one
// sequence and no token.
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

// The resource list. Every per-resource quantity of the core is an
// amounts vector indexed by kind: a team's reservation, loan, kept part
// and borrowing limit, its requests in flight of each standing, a holder's
// counts, a phantom group, the pool's capacities and a request's demand.
// Every test, limit, apportionment and slice operation is one loop over
// the kinds the pool declares (the others are 0 everywhere: verify checks
// it). Sequences (kindSeq, index 0) are the seat: always declared, a
// request demands exactly one, the queue's head must be able to get one
// at all (mayEverFit), and a request that has its team's seat may borrow
// the other kinds from the pool (withinRoom). Every other kind is an
// amount: its demand is clamped to the pool's capacity and, in the room
// test, to what the other teams' lending limits can ever leave.
//
// Adding a kind is one constant below, one capacity source (a Config
// field read in Reconfigure, Pool.total and live set from it) and one
// demand field (Request, waiter, Grant); the loops, the record (codec.go:
// one value per declared kind, in this order) and the slices follow.

// kind is one resource of a pool: an index into amounts, in list order.
type kind uint8

const (
	// kindSeq is sequences (requests in flight): C, Config.Capacity.
	// Always declared.
	kindSeq kind = iota
	// kindTok is KV-cache tokens: K, Config.KVTokens. Declared when
	// K > 0.
	kindTok
	// numKinds is the length of the list.
	numKinds
)

// kinds is a set of kinds, bit k for kind k: the kinds a pool declares.
type kinds uint8

// allKinds is every kind of the list.
const allKinds = kinds(1)<<numKinds - 1

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

// sub returns a − b in every kind.
func (a amounts) sub(b amounts) amounts {
	for k := range a {
		a[k] -= b[k]
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

// demand is what a request of tok estimated KV tokens demands: one
// sequence and its tokens (p.tokens).
func (p *Pool) demand(tok int64) amounts {
	var d amounts
	d[kindSeq] = 1
	d[kindTok] = p.tokens(tok)
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

// withinFits reports whether a request of entry i demanding d fits what
// is left of the team's reservation (and loan, lend.go) in every declared
// kind. Cost: O(kinds).
func (p *Pool) withinFits(i int, d amounts) bool {
	e := &p.teams[i]
	s := p.declared()
	for k := range numKinds {
		if !s.has(k) {
			continue
		}
		// A team with nothing within share in flight in a kind may run
		// one request within share whatever its demand there: a token
		// demand estimated above the team's whole token reservation (a
		// client's max_tokens before any completion was seen) would
		// otherwise never be within share, and as the queue's head it
		// would hold every borrower behind it while a saturated pool
		// never has room for it. The cache can then be overcommitted by
		// at most one request's excess per team; vLLM preempts the
		// lowest priority (a borrower's) if it must. For sequences (a
		// demand of one) the exception is the test itself.
		used, allowed := e.within[k]+e.pWithin[k], e.res[k]+e.lent[k]
		if used+d[k] > allowed && !(used == 0 && allowed > 0) {
			return false
		}
	}
	return true
}

// allowed is the within-share requests entry e may have in flight: its
// reservation, plus the loan of a replica (lend.go), which only the
// team's own within-share requests take and which adds nothing to what
// borrowers may use. Cost: O(1).
func (e *entry) allowed() int { return int(e.res[kindSeq] + e.lent[kindSeq]) }

// withinRoom reports whether a request of entry i demanding d is within
// share (withinFits), or has a seat of its team's (a free reserved
// sequence) and, in every other declared kind, fits either the team's
// reservation or the pool's free room as a borrower's would (given u =
// p.usage()): a request that exceeds only its team's token reservation
// takes its own team's sequence, borrowing tokens the pool has free,
// rather than leaving the sequence to other teams' borrowers. Cost:
// O(kinds).
func (p *Pool) withinRoom(u usage, i int, d amounts) bool {
	if p.withinFits(i, d) {
		return true
	}
	e := &p.teams[i]
	if e.within[kindSeq]+e.pWithin[kindSeq] >= e.res[kindSeq]+e.lent[kindSeq] {
		return false
	}
	s := p.declared()
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
// request demanding d, in every declared kind. Cost: O(kinds).
func (p *Pool) mayBorrow(i int, d amounts) bool {
	e := &p.teams[i]
	s := p.declared()
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
// demanding d in every declared kind, given u = p.usage(). Cost:
// O(kinds).
func (p *Pool) hasRoom(u usage, i int, d amounts) bool {
	s := p.declared()
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
	s := p.declared()
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
