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

// applyLimits computes e's kept parts and borrowing limits from its
// reservation and the pool's capacities.
func (p *Pool) applyLimits(e *entry) {
	e.keepSeq = e.reserved - int(math.Floor(e.lend*float64(e.reserved)))
	e.keepTok = e.resTok - int64(math.Floor(e.lend*float64(e.resTok)))
	e.limSeq, e.limTok = -1, -1
	if e.borrowLim < 1 {
		e.limSeq = int(math.Floor(e.borrowLim * float64(p.capacity)))
		e.limTok = int64(math.Floor(e.borrowLim * float64(p.kvCap())))
	}
}

// tokens is the token demand a request of n estimated tokens records:
// n clamped into [0, K], 0 without a KV resource.
func (p *Pool) tokens(n int64) int64 {
	if p.kvTokens == 0 || n <= 0 {
		return 0
	}
	return min(n, p.kvTokens)
}

// withinFits reports whether a request of entry i demanding tok tokens
// fits what is left of the team's reservation (and loan, lend.go) in
// every resource. Cost: O(1).
func (p *Pool) withinFits(i int, tok int64) bool {
	e := &p.teams[i]
	if e.within+e.pWithin >= e.allowed() {
		return false
	}
	// A team with nothing within share in flight may run one request
	// within share whatever its token demand: a demand estimated above the
	// team's whole token reservation (a client's max_tokens before any
	// completion was seen) would otherwise never be within share, and as
	// the queue's head it would hold every borrower behind it while a
	// saturated pool never has room for it. The cache can then be
	// overcommitted by at most one request's excess per team; vLLM
	// preempts the lowest priority (a borrower's) if it must.
	res := e.resTok + e.lentTok
	return p.kvTokens == 0 || e.wTok+e.pwTok+tok <= res || e.wTok+e.pwTok == 0 && res > 0
}

// allowed is the within-share requests entry e may have in flight: its
// reservation, plus the loan of a replica (lend.go), which only the
// team's own within-share requests take and which adds nothing to what
// borrowers may use. Cost: O(1).
func (e *entry) allowed() int { return e.reserved + e.lent }

// withinRoom reports whether a request of entry i demanding tok tokens is
// within share (withinFits), or fits the team's free reserved sequences
// and the pool's free KV tokens as a borrower's would (hasTokRoom, given
// u = p.usage()): a request that exceeds only its team's token
// reservation takes its own team's sequence, borrowing tokens the pool
// has free, rather than leaving the sequence to other teams' borrowers.
// Cost: O(1).
func (p *Pool) withinRoom(u usage, i int, tok int64) bool {
	if p.withinFits(i, tok) {
		return true
	}
	e := &p.teams[i]
	return e.within+e.pWithin < e.allowed() && p.hasTokRoom(u, i, tok)
}

// mayBorrow reports whether entry i's borrowing limit lets it borrow a
// request of tok tokens. Cost: O(1).
func (p *Pool) mayBorrow(i int, tok int64) bool {
	e := &p.teams[i]
	if e.limSeq >= 0 && e.inFlight()+1-e.reserved > e.limSeq {
		return false
	}
	if p.kvTokens > 0 && e.limTok >= 0 && e.inFlightTokens()+tok-e.resTok > e.limTok {
		return false
	}
	return true
}

// usage is what a pool's requests in flight take, and what lending limits
// keep free, in each resource.
type usage struct {
	seq, keptSeq int
	tok, keptTok int64
	keepSeq      int   // Σ keepSeq: what lending limits keep, used or not
	keepTok      int64 // Σ keepTok
}

// usage sums the pool's use and kept parts. Cost: O(teams).
func (p *Pool) usage() usage {
	var u usage
	for i := range p.teams {
		e := &p.teams[i]
		u.seq += e.inFlight()
		u.tok += e.inFlightTokens()
		u.keptSeq += max(0, e.keepSeq-e.inFlight())
		u.keptTok += max(0, e.keepTok-e.inFlightTokens())
		u.keepSeq += e.keepSeq
		u.keepTok += e.keepTok
	}
	return u
}

// hasRoom reports whether the pool has room for a borrower of entry i
// demanding tok tokens, given u = p.usage(). Cost: O(1).
func (p *Pool) hasRoom(u usage, i int, tok int64) bool {
	e := &p.teams[i]
	keptSeq := u.keptSeq - max(0, e.keepSeq-e.inFlight())
	if u.seq+keptSeq+1 > p.capacity {
		return false
	}
	return p.hasTokRoom(u, i, tok)
}

// hasTokRoom reports whether the pool has room in KV tokens for a
// request of entry i demanding tok tokens, given u = p.usage() (always
// without a KV resource). Cost: O(1).
func (p *Pool) hasTokRoom(u usage, i int, tok int64) bool {
	if p.kvTokens == 0 {
		return true
	}
	e := &p.teams[i]
	keptTok := u.keptTok - max(0, e.keepTok-e.inFlightTokens())
	// A demand larger than the cache the other teams can ever lend counts
	// as all of it: it goes once the lent cache is empty, instead of
	// blocking the queue's head until its deadline.
	tok = min(tok, max(0, p.kvCap()-(u.keepTok-e.keepTok)))
	return u.tok+keptTok+tok <= p.kvCap()
}

// mayEverFit reports whether the other teams' lending limits leave a
// borrower of entry i a sequence at all (given u = p.usage()): one that
// they do not may wait, but must not hold the queue's head. Cost: O(1).
func (p *Pool) mayEverFit(u usage, i int) bool {
	return p.capacity-(u.keepSeq-p.teams[i].keepSeq) >= 1
}

// kvCap is the KV tokens the pool decides against: K, or its slice's.
func (p *Pool) kvCap() int64 {
	if p.sliced {
		return p.sliceTok
	}
	return p.kvTokens
}
