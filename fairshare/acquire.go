package fairshare

import "time"

// Grant is the decision for one request. Release must be called once when
// the request has finished (successfully or not); further calls do nothing.
// A Grant is a plain value: it can be stored with the request and copied.
type Grant struct {
	// Team is the pool entry the request is counted in: the configured
	// team, or UnknownTeam for a team the configuration does not list.
	Team string
	// Class is the request's class (clamped to Interactive or Batch).
	Class Class
	// Priority is the vLLM priority to send (lower runs earlier).
	Priority int
	// Borrowing is set when the request is above its team's reservation.
	Borrowing bool
	// BorrowsTokens is set when the request took one of its team's
	// reserved sequences but KV tokens beyond the team's token
	// reservation, from what the pool had free (Arrive and Dispatch, see
	// resources.go): it counts within share (Borrowing is false), and its
	// Priority is a borrower's, so that vLLM runs the team's other
	// within-share requests first and preempts it before them.
	BorrowsTokens bool
	// Saturated is set when, as the request arrived, the pool already had
	// C or more requests in flight (phantoms included): the request waits
	// in the engine's queue. The plugin counts such grants
	// (granted_saturated_total); spill-over does not read it, since under
	// the flow control it needs a granted borrower always had room.
	Saturated bool
	// Holder is the holder (Wasm VM instance) that holds the request.
	Holder uint32
	// Estimate is the estimated cost of the request (cost units), counted
	// in its team's in-flight estimate until Release.
	Estimate float64
	// Penalty is the entry penalty charged to the team's usage at Acquire
	// (Estimate when Config.EntryPenalty, else 0); Release removes what is
	// left of it after decay.
	Penalty float64
	// At is when the request was granted (and its entry penalty charged),
	// in unix nanoseconds; never before the pool's latest usage update.
	At int64
	// Tokens is the KV tokens the request takes until Release (0 without
	// a KV resource, and for Acquire): Release returns exactly
	// these.
	Tokens int64
	// Work is the work estimate (cost units) charged to the team's debt
	// (resources.go): the request's work demand when it was granted
	// within share on a pool with a work resource, or dispatched or
	// granted by Arrive as a borrower whose work fitted its team's bucket
	// (a team over its seats or tokens, not its work), else 0 (no other
	// borrower is charged). Release settles it to what the request
	// consumed.
	Work float64
	// ID is the holder-local id of a request granted by Arrive or
	// Dispatch (0 for Acquire and TryAcquire).
	ID uint64
	// Arrived is when the request arrived (unix nanoseconds): At for a
	// request granted on arrival, earlier for one that waited in the
	// queue (At − Arrived is its queue time).
	Arrived int64

	// User is the user the request is counted under within its team
	// (users.go): the request's user, UserNone or UserOther; "" without
	// the user level.
	User string
	// Over is set when the request took a reserved sequence of its team
	// that its teammates left (users.go): counted as borrowing
	// (Borrowing is set), at priority OverBase and up, never held.
	Over bool

	released bool
	epoch    uint64 // the epoch of the team's entry
}

// demand is what g's request takes until Release, in every kind: one
// sequence and g.Tokens (its work is a debt, not an amount in flight).
func (g *Grant) demand() amounts {
	var d amounts
	d[kindSeq] = 1
	d[kindTok] = g.Tokens
	return d
}

// Acquire records a new in-flight request of team, held by holder, at time
// now, and returns its grant.
//
// The request is within share iff the team's within-share requests in
// flight (phantoms included) are fewer than its reservation: priority
// WithinShareBase + class. Otherwise it borrows, at BorrowBase +
// min(rank, MaxRank)·RankStep + class, where rank is the team's dense level
// fairshare rank (see rank.go): the most over-served borrower gets the
// largest number. A team the configuration does not list counts as
// UnknownTeam: share 0, reservation 0, ranked last.
//
// With Config.EntryPenalty the estimate (cost units; negative, NaN and
// infinite count as 0) is charged to the team's usage at once, after the
// decision, so a team that sends many requests at once is deprioritised
// from its second request on. With a work resource (Config.Throughput)
// the estimate is also the request's work: within share needs room for
// it in the team's bucket too, and a within-share grant charges it to the
// team's debt (Grant.Work). Acquire counts as a heartbeat of holder and
// first expires dead holders and stale phantoms. Cost: O(teams) for a
// within-share request, O(teams·log teams) for a borrower; no allocation
// once the pool's buffers have grown.
func (p *Pool) Acquire(now time.Time, holder uint32, team string, class Class, estimate float64) Grant {
	return p.AcquireUser(now, holder, team, "", class, estimate)
}

// AcquireUser is Acquire for a request of user within its team (see
// Request.User and users.go): with Config.Users the request is within
// share when its user is below its portion of the team's reserved
// sequences, over when it takes one its teammates leave (Grant.Over),
// else it borrows. Without the user level it is Acquire.
func (p *Pool) AcquireUser(now time.Time, holder uint32, team, user string, class Class, estimate float64) Grant {
	t := now.UnixNano()
	p.advance(t)
	return p.acquire(t, holder, team, user, class, estimate, estimate)
}

// TryAcquire is Acquire only when the pool has room (fewer than C requests
// in flight, phantoms included), decided and recorded in the same
// transition: a fallback that moves a request to this pool never pushes it
// past C. When the pool is full it returns a released zero Grant and false
// (it still counts as a heartbeat of holder). The plugin's spill-over
// moves a request into a fallback pool with it.
func (p *Pool) TryAcquire(now time.Time, holder uint32, team string, class Class, estimate float64) (Grant, bool) {
	t := now.UnixNano()
	p.advance(t)
	if p.inFlight() >= p.Capacity() {
		p.touch(holder, t, p.holderTimeout > 0)
		return Grant{released: true}, false
	}
	return p.acquire(t, holder, team, "", class, estimate, estimate), true
}

// TakeSpill moves into this pool, as a fallback of another pool, a
// request described by w that waits there (or would wait: Arrive's
// Waiting), decided and recorded in one transition, by the rules of
// spill-over: it moves only if no request of this pool's own waits (they
// go first), a borrower fits (HasRoom, for UnknownTeam with w.Tokens:
// what the teams' lending limits keep stays theirs) and fewer than C
// requests are in flight (TryAcquire's test). It is then granted as
// UnknownTeam (share 0: it always borrows, ranked after every configured
// team's borrowers, and is charged no work) with w's class, estimate and
// work, by the grant path of every other operation, and its Grant carries w's ID
// and arrival, so the time it waited counts as queue time. Otherwise
// nothing but expiry and holder's heartbeat changes, and it returns a
// released zero Grant and false. Removing w from the pool it waits in is
// the caller's, after this transition succeeded: it is then counted in
// flight here and still waiting there for a moment, never in flight twice.
// Cost: O(teams·log teams).
func (p *Pool) TakeSpill(now time.Time, holder uint32, w Waiting) (Grant, bool) {
	t := now.UnixNano()
	p.advance(t)
	if len(p.waits) > 0 || !p.HasRoom(UnknownTeam, w.Tokens) {
		p.touch(holder, t, p.holderTimeout > 0)
		return Grant{released: true}, false
	}
	if p.inFlight() >= p.Capacity() {
		p.touch(holder, t, p.holderTimeout > 0)
		return Grant{released: true}, false
	}
	work := float64(w.Work)
	if w.Work <= 0 {
		work = w.Estimate
	}
	g := p.acquire(t, holder, UnknownTeam, "", w.Class, w.Estimate, work)
	g.ID, g.Arrived = w.ID, min(w.Arrived, g.At)
	return g, true
}

// acquire is Acquire's decision for a request of the given user,
// estimate and work (cost units, clamped here), after advance.
func (p *Pool) acquire(t int64, holder uint32, team, user string, class Class, estimate, work float64) Grant {
	i := p.acquireEntry(team)
	class = clampClass(class)
	wk := p.work(work)
	k := p.arrivingUser(i, user, t)
	d := p.demand(0, wk)
	st := stBorrow
	switch {
	case k >= 0:
		// No token demand: within share is never stWithinTok here.
		if st = p.standingOf(p.usage(), i, k, d, t); st == stWithinTok {
			st = stWithin
		}
	case p.withinFits(i, d):
		st = stWithin
	}
	if st == stWorkBorrow {
		// Nothing is held without a queue: a borrower's order does not
		// arise, and its work is not the team's.
		st = stBorrow
	}
	rank := 0
	if st == stBorrow {
		rank = p.rank(i)
	}
	return p.grant(t, holder, i, k, class, sanitizeAmount(estimate), 0, wk, st, rank)
}

// grant counts a request of entry i (user k, -1 for none; class clamped,
// estimate sanitized, tok already clamped by p.tokens, work by p.work) as
// in flight with standing st and, borrowing, the team's rank, charges its
// entry penalty and, within share or over, its work to the team's debt,
// and returns its grant (ID and Arrived are the caller's to set when the
// request waited; a within-share request borrowing tokens gets its
// borrower's priority from the caller).
func (p *Pool) grant(t int64, holder uint32, i, k int, class Class, estimate float64, tok, work int64, st standing, rank int) Grant {
	saturated := p.inFlight() >= p.Capacity()
	e := &p.teams[i]
	at := max(t, p.usageAt)
	g := Grant{Team: e.name, Class: class, Saturated: saturated, Holder: holder, Estimate: estimate, At: at,
		Tokens: tok, Arrived: at, epoch: e.epoch}
	borrowing := st <= stTakes
	switch st {
	case stBorrow, stWorkBorrow:
		g.Borrowing = true
		g.Priority = borrowPriority(rank, class)
	case stOver:
		g.Borrowing, g.Over = true, true
		g.Priority = overPriority(p.userRank(i, k, t), class)
	case stTakes:
		g.Borrowing, g.Over = true, true
		g.Priority = WithinShareBase + int(class)
	default:
		g.Priority = WithinShareBase + int(class)
	}
	p.count(holder, t, i, p.window(at), borrowing, p.demand(tok, 0))
	e = &p.teams[i]
	e.estimate = min(e.estimate+estimate, maxUsage)
	if st != stBorrow && work > 0 {
		// Within share, over, or a borrower inside its team's work
		// reservation (stWorkBorrow): the work is the team's.
		// The debt is paid down to at before it grows (advance brought
		// it to the latest time seen, at or after at).
		p.decayTo(at)
		e = &p.teams[i]
		e.debt = min(e.debt+float64(work), maxUsage)
		g.Work = float64(work)
	}
	if p.entryPenalty && estimate > 0 {
		p.decayTo(at)
		e = &p.teams[i]
		e.penalty = min(e.penalty+estimate, maxUsage)
		e.updated, e.lastUpdate = true, max(at, p.usageAt)
		g.Penalty = estimate
	}
	if k >= 0 {
		u := &p.teams[i].users[k]
		g.User = u.name
		p.countUser(i, k, st)
		if g.Penalty > 0 {
			u.penalty = min(u.penalty+g.Penalty, maxUsage)
		}
	}
	return g
}

// count adds one request in flight of entry i held by holder, granted in
// window gen, demanding d.
func (p *Pool) count(holder uint32, t int64, i int, gen int64, borrowing bool, d amounts) {
	h := &p.holders[p.touch(holder, t, true)]
	c := holderCount{team: i, gen: gen}
	p.genMin = min(p.genMin, gen)
	k := 0
	for k < len(h.counts) && compareCount(h.counts[k], c) < 0 {
		k++
	}
	if k == len(h.counts) || compareCount(h.counts[k], c) != 0 {
		h.counts = append(h.counts, holderCount{})
		copy(h.counts[k+1:], h.counts[k:])
		h.counts[k] = c
	}
	e := &p.teams[i]
	f := d.counted()
	if borrowing {
		h.counts[k].borrowing = h.counts[k].borrowing.add(f)
		e.borrowing = e.borrowing.add(f)
	} else {
		h.counts[k].within = h.counts[k].within.add(f)
		e.within = e.within.add(f)
	}
}

// HasRoom reports whether the pool has room for a borrower of team (a
// team the configuration does not list counts as UnknownTeam) demanding
// tokens KV tokens, as Arrive and Dispatch judge a borrower (see
// resources.go): in every resource, what is in flight plus what the other
// teams' lending limits keep free for them, plus the demand, fits the
// capacity. It changes nothing. A spill-over asks it before TryAcquire
// (whose test is fewer than C requests in flight) in the same transition,
// so that a request moved into a pool never takes what the pool's teams
// keep for themselves. Cost: O(teams).
func (p *Pool) HasRoom(team string, tokens int64) bool {
	u := p.usage()
	i := p.find(team)
	if i < 0 || !p.teams[i].configured {
		i = p.unknownIndex()
	}
	d := p.demand(tokens, 0)
	if i >= 0 {
		return p.hasRoom(u, i, d)
	}
	// No entry yet: nothing of its own in flight, nothing kept.
	return p.roomNoEntry(u, d)
}
