package fairshare

import (
	"cmp"
	"slices"
	"time"
)

// The queue. With Config.QueueLimit > 0, a request that would borrow
// while the pool has no room for it (or while its team may not borrow)
// is not granted but held at the gateway: its holder keeps the stream
// paused and the pool records it as waiting, as (holder, id, team,
// class, arrival, tokens, work, estimate). The waiting requests of all holders
// form one queue in the record; whenever capacity frees, the next to go
// is the one with the best standing at that moment, and its priority is
// decided then (see Dispatch).
//
// Only the holder of a waiting request dispatches it (it alone can resume
// the stream): a holder that frees capacity and finds another holder's
// request at the head wakes that holder (Dispatch returns Elsewhere with
// the head). A waiting request leaves the queue when it is dispatched,
// cancelled (Cancel), when its deadline passes (arrival + MaxQueueTime:
// every operation that takes the time drops expired requests, and none is
// ever dispatched at or after its deadline; the holder, which was given
// the deadline by Arrive, answers the client then), or when its holder is
// presumed dead (its streams died with it).

// waiter is one waiting request.
type waiter struct {
	arrival  int64 // unix ns
	holder   uint32
	id       uint64
	team     int // entry index: a configured team or UnknownTeam
	class    Class
	tokens   int64   // KV tokens demanded (already clamped by p.tokens)
	work     int64   // work demanded, cost units (already clamped by p.work)
	estimate float64 // cost units (sanitized)
	uplus    int32   // 1 + the index in the team's users (users.go), 0 for none
}

// demand is what w demands in every kind: one sequence, its tokens and
// its work.
func (w *waiter) demand() amounts {
	var d amounts
	d[kindSeq] = 1
	d[kindTok] = w.tokens
	d[kindWork] = w.work
	return d
}

// compareWaiter orders the queue's storage: by arrival, then holder, then
// id.
func compareWaiter(a, b *waiter) int {
	if c := cmp.Compare(a.arrival, b.arrival); c != 0 {
		return c
	}
	if c := cmp.Compare(a.holder, b.holder); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// Request is a request as it arrives at the gateway, for Arrive.
type Request struct {
	// Holder is the holder (Wasm VM instance) that holds the request's
	// stream.
	Holder uint32
	// ID identifies the request among its holder's (a holder-local
	// counter): Dispatch and Cancel name it by (Holder, ID).
	ID uint64
	// Team is the team header's value (UnknownTeam's entry for a team the
	// configuration does not list).
	Team string
	// Class is the request's class (clamped to Interactive or Batch).
	Class Class
	// Tokens is the request's KV-token demand: prompt tokens plus expected
	// completion tokens. Ignored without a KV resource (Config.KVTokens);
	// negative counts as 0, above K as K.
	Tokens int64
	// Estimate is the estimated cost (cost units) charged as the entry
	// penalty when the request is granted, as Acquire's estimate.
	Estimate float64
	// Work is the request's work demand (cost units: what it is expected
	// to cost, prompt and completion), the room it needs in its team's
	// work bucket to be within share (Config.Throughput, resources.go)
	// and what a within-share grant charges to the team's debt. 0 and
	// negative values fall back to Estimate; it is rounded to an integer
	// and clamped into [0, 2^40]. Ignored without a work resource.
	Work float64
	// User is the request's user within its team (Config.Users,
	// users.go): "" counts as UserNone; a name longer than MaxUserName is
	// cut to it. Ignored without the user level, and for a team the
	// configuration does not list.
	User string
}

// Outcome is what Arrive did with a request.
type Outcome uint8

const (
	// Granted: the request goes now; the Grant is valid and must be
	// released.
	Granted Outcome = iota
	// Queued: the request waits in the pool's queue; its holder keeps the
	// stream paused until Dispatch grants it, or answers it at its
	// deadline (Waiting.Deadline).
	Queued
	// QueueFull: refused, the pool's queue holds QueueLimit requests.
	// Nothing was recorded.
	QueueFull
	// TeamQueueFull: refused, the team's requests waiting number
	// TeamQueueLimit. Nothing was recorded.
	TeamQueueFull
	// Duplicate: refused, the holder already has a request of that ID
	// waiting. Nothing was recorded.
	Duplicate
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case Granted:
		return "granted"
	case Queued:
		return "queued"
	case QueueFull:
		return "queue_full"
	case TeamQueueFull:
		return "team_queue_full"
	case Duplicate:
		return "duplicate"
	}
	return "unknown"
}

// Waiting describes a waiting request.
type Waiting struct {
	// Holder is the holder (Wasm VM instance) that holds the request's
	// paused stream: the only one that may dispatch it.
	Holder uint32
	// ID is the request's holder-local id.
	ID uint64
	// Team is the pool entry the request waits in (UnknownTeam for a team
	// the configuration does not list).
	Team string
	// Class is the request's class.
	Class Class
	// Arrived is when the request arrived (unix nanoseconds).
	Arrived int64
	// Deadline is when the request leaves the queue undispatched
	// (Arrived + MaxQueueTime; math.MaxInt64 without a queue time limit).
	Deadline int64
	// Tokens is the KV tokens it demands; Work its work demand (cost
	// units, rounded; 0 without a work resource); Estimate its estimated
	// cost.
	Tokens   int64
	Work     int64
	Estimate float64
	// Within is set when the request would now be within its team's
	// share (it then goes without room).
	Within bool
	// Over is set when the request would now take a reserved sequence its
	// teammates leave (users.go; it then goes without room).
	Over bool
	// User is the user the request waits as (users.go; "" without the
	// user level).
	User string
}

// DispatchStatus is what Dispatch found at the head of the queue.
type DispatchStatus uint8

const (
	// Empty: no request waits.
	Empty DispatchStatus = iota
	// Blocked: the head cannot go yet: the pool has no room for it in some
	// resource, or no waiting team may borrow now (borrowing limits).
	Blocked
	// Dispatched: the head was the caller's and was granted.
	Dispatched
	// Elsewhere: the head may go now but is held by another holder (see
	// the Waiting returned): wake that holder, which dispatches it.
	Elsewhere
)

// String returns the status's name in lower case.
func (s DispatchStatus) String() string {
	switch s {
	case Empty:
		return "empty"
	case Blocked:
		return "blocked"
	case Dispatched:
		return "dispatched"
	case Elsewhere:
		return "elsewhere"
	}
	return "unknown"
}

// Arrive decides a request as it arrives at time now.
//
//   - If it fits its team's reservation in every resource (with a work
//     resource, its work fits its team's bucket: resources.go), and no
//     request of its team that stands before it in the team's order (see
//     Dispatch) waits, it is granted within share (priority 0/1),
//     whatever the pool's load: within-share requests are never held.
//     One that fits its team's reserved sequences but needs tokens beyond
//     the team's token reservation is granted within share as well when
//     the pool has those tokens free (as a borrower would need them),
//     borrowing them: Grant.BorrowsTokens, at its team's borrowing
//     priority, so that vLLM runs and keeps within-share requests before
//     it. A request behind its team's waiting ones is not within share: what is
//     left of the reservation is theirs first (they go within share as
//     it frees, in the team's order), so it queues behind them.
//   - Otherwise it borrows. Without a queue (QueueLimit 0) it is granted
//     at once, as Acquire would. With a queue it is granted only if its
//     team may borrow (borrowing limit), the pool has room for it in every
//     resource (lending limits of other teams counted, see resources.go),
//     and no waiting request that could go has a better standing (see
//     Dispatch); else it is queued, or refused when the queue or the
//     team's share of it is full, or the holder already has a waiting
//     request of that ID.
//
// The Grant is valid only for Granted (then it must be released); the
// Waiting describes the request for Queued (its Deadline is when the
// holder answers the client if it has not been dispatched by then; its
// arrival is the latest time the record has seen, now unless another
// VM's clock is ahead). A refused request is not recorded. Arrive counts as a
// heartbeat of r.Holder. Cost: O(teams) within share when its team has
// nothing waiting, O(teams + waiting) when it has, O(teams·log teams +
// waiting) for a borrower; no allocation once the buffers have grown.
func (p *Pool) Arrive(now time.Time, r Request) (Grant, Waiting, Outcome) {
	return p.arrive(now, r, false)
}

// ArriveShadow is Arrive for a gateway in shadow mode, which forwards
// every request at once: it returns the outcome Arrive would return on
// the same record, but grants the request in every case. A request that
// Arrive would queue, or refuse for a full queue (QueueFull,
// TeamQueueFull), is granted at once as a borrower at its team's rank
// now, exactly as a pool without a queue (QueueLimit 0) grants it: it is
// counted in flight (sequences and KV tokens), its entry penalty charged,
// and its Grant must be released like any other (Duplicate, too, when
// that ID waits). ArriveShadow never queues: on a record that only it has
// fed nothing waits, so its outcomes are Granted and Queued alone. Cost:
// as Arrive's.
func (p *Pool) ArriveShadow(now time.Time, r Request) (Grant, Outcome) {
	g, _, out := p.arrive(now, r, true)
	return g, out
}

// arrive is Arrive, and with shadow ArriveShadow (the grant of a request
// that Arrive would queue or refuse).
func (p *Pool) arrive(now time.Time, r Request, shadow bool) (Grant, Waiting, Outcome) {
	t := now.UnixNano()
	p.advance(t)
	i := p.acquireEntry(r.Team)
	class := clampClass(r.Class)
	tok := p.tokens(r.Tokens)
	est := sanitizeAmount(r.Estimate)
	work := r.Work
	if !(work > 0) {
		work = r.Estimate
	}
	wk := p.work(work)
	// The arrival is the record's time: a VM whose clock lags queues in
	// the order the record saw it, and never behind a deadline already
	// passed.
	k := p.arrivingUser(i, r.User, p.now)
	w := waiter{arrival: p.now, holder: r.Holder, id: r.ID, team: i, class: class, tokens: tok, work: wk, estimate: est,
		uplus: int32(k + 1)}
	d := w.demand()
	var st standing
	if k < 0 && p.withinFits(i, d) {
		st = stWithin // the common case, without the pool's usage
	} else {
		st = p.standingOf(p.usage(), i, k, d, p.now)
	}
	if st >= stWithinTok && !p.waitsBefore(&w, k >= 0) {
		rank := 0
		if st == stWithinTok {
			rank = p.rank(i) // before the grant charges its penalty
		}
		g := p.grantArrived(t, r, i, k, class, est, tok, wk, stWithin, 0)
		if st == stWithinTok {
			g.BorrowsTokens, g.Priority = true, borrowPriority(rank, class)
		}
		return g, Waiting{}, Granted
	}
	if (st == stOver || st == stTakes) && !p.waitsBefore(&w, false) {
		return p.grantArrived(t, r, i, k, class, est, tok, wk, st, 0), Waiting{}, Granted
	}
	if p.queueLimit == 0 {
		return p.grantArrived(t, r, i, k, class, est, tok, wk, stBorrow, p.rank(i)), Waiting{}, Granted
	}
	// A borrower inside its team's work reservation stands so only as
	// the team's first, as a waiting one does (waiterStanding).
	bst := stBorrow
	if st == stWorkBorrow && !p.waitsBefore(&w, false) {
		bst = st
	}
	ranks := p.rankAll()
	u := p.usage()
	if p.mayBorrow(i, d) && p.hasRoom(u, i, d) {
		// Granted unless a waiting request that could go stands better.
		h, hst := p.head(u, ranks)
		if h < 0 || p.better(&w, bst, ranks, &p.waits[h], hst) {
			return p.grantArrived(t, r, i, k, class, est, tok, wk, bst, ranks[i]), Waiting{}, Granted
		}
	}
	out := Queued
	switch {
	case p.findWait(r.Holder, r.ID) >= 0:
		out = Duplicate
	case len(p.waits) >= p.queueLimit:
		out = QueueFull
	case p.teamQueueLimit > 0 && p.teams[i].waiting >= p.teamQueueLimit:
		out = TeamQueueFull
	}
	if shadow {
		// Forwarded all the same: counted as a borrower granted now.
		return p.grantArrived(t, r, i, k, class, est, tok, wk, bst, ranks[i]), Waiting{}, out
	}
	if out != Queued {
		p.touch(r.Holder, t, p.holderTimeout > 0)
		return Grant{released: true}, Waiting{}, out
	}
	h := p.touch(r.Holder, t, true)
	p.holders[h].waits++
	p.teams[i].waiting++
	if k >= 0 {
		p.teams[i].users[k].waiting++
	}
	lo, hi := 0, len(p.waits)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if compareWaiter(&p.waits[m], &w) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	p.waits = slices.Insert(p.waits, lo, w)
	return Grant{released: true}, p.describe(&p.waits[lo], stBorrow), Queued
}

// grantArrived grants a request of entry i on arrival.
func (p *Pool) grantArrived(t int64, r Request, i, k int, class Class, est float64, tok, work int64, st standing, rank int) Grant {
	g := p.grant(t, r.Holder, i, k, class, est, tok, work, st, rank)
	g.ID = r.ID
	return g
}

// Dispatch looks at the head of the queue at time now: the waiting
// request with the best standing at that moment among those that could go
// (see below). If the head may go and is held by holder, it leaves the
// queue and is granted, its standing decided now: within share (priority
// 0/1) if it now fits its team's reservation (borrowing tokens, at its
// team's borrowing priority, if it fits only the reserved sequences and
// the pool's free tokens), else borrowing at its team's rank now; Dispatched is returned with the grant (Grant.ID names
// the request, Grant.Arrived its arrival). If the head may go but another
// holder holds it, nothing changes and Elsewhere is returned with the
// head: the caller wakes that holder. Blocked returns the head that cannot
// go yet; Empty says nothing waits.
//
// Standing, best first:
//  1. a request within share now: it fits its team's reservation (or its
//     reserved sequences and, borrowing tokens, the pool's free tokens,
//     as at arrival; its work always fits its team's bucket, as the debt
//     stands now) and it is its team's first waiting request in the
//     team's order (3 to 5);
//  2. the team's level-fairshare rank now (lower first);
//  3. with BatchAging 0, class (Interactive before Batch) then arrival;
//     with BatchAging > 0, the arrival, a batch request's counted
//     BatchAging later, then class (Interactive first on a tie);
//  4. arrival, earlier first;
//  5. holder id, then request id, lower first (a stable final tie-break).
//
// Only a team's first request can be within share: a smaller request of
// the team never takes the reservation ahead of an earlier one that does
// not fit it yet (Kueue's StrictFIFO within a queue), so a large request
// is not starved by its own team's small ones.
//
// Requests of a team that its borrowing limit keeps from borrowing now,
// or to which the other teams' lending limits leave no sequence at all,
// are passed over (they cannot go whatever the room). The head then goes
// if it is within share, or if the pool has room for it in every
// resource; otherwise nothing goes (no smaller request overtakes it, so a
// large request is not starved). Dispatch counts as a heartbeat of
// holder. Call it until it returns something other than Dispatched.
// Cost: O(teams·log teams + waiting).
func (p *Pool) Dispatch(now time.Time, holder uint32) (Grant, Waiting, DispatchStatus) {
	t := now.UnixNano()
	p.advance(t)
	p.touch(holder, t, p.holderTimeout > 0)
	k, hst, st := p.next()
	if st == Empty {
		return Grant{released: true}, Waiting{}, Empty
	}
	w := p.waits[k]
	desc := p.describe(&w, hst)
	if st == Blocked {
		return Grant{released: true}, desc, Blocked
	}
	if w.holder != holder {
		return Grant{released: true}, desc, Elsewhere
	}
	p.removeWait(k)
	gst := hst
	if gst == stWithinTok {
		gst = stWithin
	}
	g := p.grant(t, holder, w.team, w.user(), w.class, w.estimate, w.tokens, w.work, gst, p.ranks[w.team])
	if hst == stWithinTok {
		g.BorrowsTokens, g.Priority = true, borrowPriority(p.ranks[w.team], w.class)
	}
	g.ID, g.Arrived = w.id, w.arrival
	return g, desc, Dispatched
}

// Next returns the head of the queue at time now, as Dispatch finds it,
// without dispatching it: Elsewhere when it may go (whoever holds it;
// Next never returns Dispatched), Blocked when it cannot go yet, Empty
// when nothing waits. A holder uses it to learn whose turn it is, e.g.
// after a release, to wake that holder. It changes nothing but what every
// operation taking the time does (expiry; with a work resource, the debts
// paid down to now, so a request held for its team's empty bucket is
// within share here once enough time has passed), and counts as no
// heartbeat.
// Cost: O(teams·log teams + waiting).
func (p *Pool) Next(now time.Time) (Waiting, DispatchStatus) {
	p.advance(now.UnixNano())
	k, hst, st := p.next()
	if st == Empty {
		return Waiting{}, Empty
	}
	return p.describe(&p.waits[k], hst), st
}

// next finds the head: its index, its standing now (within share, over
// or borrowing), and Blocked or Elsewhere (Empty with k = -1 when nothing
// waits). p.ranks holds every entry's rank afterwards.
func (p *Pool) next() (k int, hst standing, st DispatchStatus) {
	if len(p.waits) == 0 {
		return -1, stBorrow, Empty
	}
	ranks := p.rankAll()
	u := p.usage()
	k, hst = p.head(u, ranks)
	if k < 0 {
		// Every waiting team is held by its borrowing limit: report the
		// best of them as blocked.
		k = 0
		for j := 1; j < len(p.waits); j++ {
			if p.better(&p.waits[j], stBorrow, ranks, &p.waits[k], stBorrow) {
				k = j
			}
		}
		return k, stBorrow, Blocked
	}
	w := &p.waits[k]
	if hst >= stOver || p.hasRoom(u, w.team, w.demand()) {
		return k, hst, Elsewhere
	}
	return k, hst, Blocked
}

// head returns the index of the waiting request with the best standing
// among those that could go (within share or over now, or of a team that
// may borrow them and to which the other teams' lending limits leave a
// sequence), and its standing (-1 if none could go), given
// u = p.usage(). Cost: O(waiting), O(waiting + users·log users) with
// users.
func (p *Pool) head(u usage, ranks []int) (int, standing) {
	if p.users {
		p.userRanks(p.now)
	}
	first := p.firstOfTeams()
	ufirst := p.firstOfUsers()
	best, bestSt := -1, stBorrow
	for k := range p.waits {
		w := &p.waits[k]
		st := p.waiterStanding(u, k, first, ufirst)
		if st < stOver && (!p.mayBorrow(w.team, w.demand()) || !p.mayEverFit(u, w.team)) {
			continue
		}
		if best < 0 || p.better(w, st, ranks, &p.waits[best], bestSt) {
			best, bestSt = k, st
		}
	}
	return best, bestSt
}

// waiterStanding is the standing waiting request k would be granted as
// now (first: every team's first waiting request in the team's order;
// ufirst: every user's): without users, within share only as its team's
// first; with users, within share only as its user's first and over
// only as its team's first.
func (p *Pool) waiterStanding(u usage, k int, first, ufirst []int) standing {
	w := &p.waits[k]
	d := w.demand()
	tf := first[w.team] == k
	if !p.users || w.user() < 0 {
		if tf {
			switch {
			case p.withinFits(w.team, d):
				return stWithin
			case p.withinRoom(u, w.team, d):
				return stWithinTok
			}
			return p.borrowStanding(w.team, d)
		}
		return stBorrow
	}
	uf := ufirst[p.ubase[w.team]+w.user()] == k
	if !uf && !tf {
		return stBorrow
	}
	st := p.standingOf(u, w.team, w.user(), d, p.now)
	if st >= stWithinTok && !uf {
		st = stBorrow
		if p.overFits(w.team, d) {
			st = stOver
		}
	}
	if (st == stOver || st == stTakes || st == stWorkBorrow) && !tf {
		st = stBorrow
	}
	return st
}

// class is the order of standings in the queue: within share (with or
// without borrowed tokens) first, then over, then a borrower inside its
// team's work reservation (stWorkBorrow), then any other borrower.
func (s standing) class() int {
	switch s {
	case stWithin, stWithinTok:
		return 3
	case stOver, stTakes:
		return 2
	case stWorkBorrow:
		return 1
	}
	return 0
}

// better reports whether a (of standing as now) stands strictly better
// than b (bs): the order of Dispatch.
func (p *Pool) better(a *waiter, as standing, ranks []int, b *waiter, bs standing) bool {
	if ca, cb := as.class(), bs.class(); ca != cb {
		return ca > cb
	}
	if ra, rb := ranks[a.team], ranks[b.team]; ra != rb {
		return ra < rb
	}
	return p.compareTeamOrder(a, b) < 0
}

// compareTeamOrder is the team's order of its waiting requests: with
// users, the user's rank first (p.uranks, userRanks), then compareInTeam.
func (p *Pool) compareTeamOrder(a, b *waiter) int {
	if p.users && a.team == b.team && a.uplus > 0 && b.uplus > 0 && a.uplus != b.uplus {
		base := p.ubase[a.team]
		if c := cmp.Compare(p.uranks[base+a.user()], p.uranks[base+b.user()]); c != 0 {
			return c
		}
	}
	return p.compareInTeam(a, b)
}

// compareInTeam orders waiting requests of one standing (steps 3 to 5 of
// Dispatch's order; negative when a goes first): with BatchAging 0 by
// class then arrival, else by arrival plus BatchAging for a batch
// request, then class, then arrival. It is a strict total order (the
// final tie-break is (holder, id), unique in the queue), independent of
// the time: a request's place among its team's never changes while it
// waits. Cost: O(1).
func (p *Pool) compareInTeam(a, b *waiter) int {
	if p.batchAging > 0 {
		if c := cmp.Compare(p.aged(a), p.aged(b)); c != 0 {
			return c
		}
	}
	if a.class != b.class {
		return cmp.Compare(a.class, b.class)
	}
	return compareWaiter(a, b)
}

// aged returns w's arrival as the queue counts it: BatchAging later for a
// batch request (saturating).
func (p *Pool) aged(w *waiter) int64 {
	if w.class == Batch {
		return addSat(w.arrival, p.batchAging)
	}
	return w.arrival
}

// firstOfTeams returns, for every entry, the index of its first waiting
// request in the team's order (compareTeamOrder; with users p.uranks must
// be current), -1 for none. Cost: O(teams + waiting), no allocation once
// the scratch has grown.
func (p *Pool) firstOfTeams() []int {
	n := len(p.teams)
	if cap(p.first) < n {
		p.first = make([]int, n, n+4)
	}
	first := p.first[:n]
	for i := range first {
		first[i] = -1
	}
	for k := range p.waits {
		w := &p.waits[k]
		if f := first[w.team]; f < 0 || p.compareTeamOrder(w, &p.waits[f]) < 0 {
			first[w.team] = k
		}
	}
	p.first = first
	return first
}

// firstOfUsers returns, with users, for every user (by p.ubase, which
// userRanks sets) the index of its first waiting request in its team's
// order, -1 for none; nil without users. Cost: O(users + waiting).
func (p *Pool) firstOfUsers() []int {
	if !p.users {
		return nil
	}
	n := p.ubase[len(p.teams)]
	if cap(p.ufirst) < n {
		p.ufirst = make([]int, n, n+16)
	}
	uf := p.ufirst[:n]
	for i := range uf {
		uf[i] = -1
	}
	for k := range p.waits {
		w := &p.waits[k]
		if w.uplus == 0 {
			continue
		}
		x := p.ubase[w.team] + w.user()
		if f := uf[x]; f < 0 || p.compareInTeam(w, &p.waits[f]) < 0 {
			uf[x] = k
		}
	}
	p.ufirst = uf
	return uf
}

// waitsBefore reports whether a request that stands before w waits (w
// itself is not in the queue): with user set, a request of w's user
// before it in the team's order (a within-share request of a user waits
// behind its own requests only); else a request of its team before it in
// the team's order. Cost: O(1) when the team has nothing waiting, else
// O(waiting), O(waiting + users·log users) with users.
func (p *Pool) waitsBefore(w *waiter, user bool) bool {
	if p.teams[w.team].waiting == 0 {
		return false
	}
	if p.users {
		p.userRanks(p.now)
	}
	for k := range p.waits {
		o := &p.waits[k]
		if o.team != w.team || user && o.uplus != w.uplus {
			continue
		}
		if p.compareTeamOrder(o, w) < 0 {
			return true
		}
	}
	return false
}

// rankAll fills p.ranks with every entry's dense LF rank (as rank) and
// returns it. Cost: O(teams·log teams), no allocation once the scratch
// has grown.
func (p *Pool) rankAll() []int {
	lf := p.levelFairshares()
	n := len(lf)
	h := append(p.higher[:0], lf...)
	slices.Sort(h)
	p.higher = h
	if cap(p.ranks) < n {
		p.ranks = make([]int, n, n+4)
		p.sorted = make([]int, n, n+4)
	}
	p.ranks, p.sorted = p.ranks[:n], p.sorted[:n]
	tieGroups(h, p.sorted)
	for i, v := range lf {
		k, _ := slices.BinarySearch(h, v)
		p.ranks[i] = p.sorted[k]
	}
	return p.ranks
}

// describe returns the Waiting of w.
func (p *Pool) describe(w *waiter, st standing) Waiting {
	d := Waiting{Holder: w.holder, ID: w.id, Team: p.teams[w.team].name, Class: w.class, Arrived: w.arrival,
		Deadline: p.deadline(w.arrival), Tokens: w.tokens, Work: w.work, Estimate: w.estimate,
		Within: st >= stWithinTok, Over: st == stOver || st == stTakes}
	if k := w.user(); k >= 0 && k < len(p.teams[w.team].users) {
		d.User = p.teams[w.team].users[k].name
	}
	return d
}

// deadline returns the deadline of a request that arrived at a.
func (p *Pool) deadline(a int64) int64 {
	if p.maxQueueTime <= 0 {
		return 1<<63 - 1
	}
	return addSat(a, p.maxQueueTime)
}

// Cancel removes the waiting request (holder, id), at time now, and
// reports whether it was waiting: a client that gave up, or a holder that
// answers a request at its deadline. It is idempotent: a request that was
// dispatched, expired, cancelled or never queued is not touched (false).
// Cancel counts as a heartbeat of holder. Cost: O(waiting).
func (p *Pool) Cancel(now time.Time, holder uint32, id uint64) bool {
	t := now.UnixNano()
	p.advance(t)
	p.touch(holder, t, p.holderTimeout > 0)
	k := p.findWait(holder, id)
	if k < 0 {
		return false
	}
	p.removeWait(k)
	return true
}

// Reestimate lowers the KV-token demand of the waiting request (holder,
// id) to tokens (clamped as Arrive clamps a demand), at time now, and
// reports whether it changed. A holder calls it when it has learnt that a
// request it holds will take less than it said on arrival (its team's
// usual completion, once a first one is seen): a demand fixed at a
// client's max_tokens could otherwise keep the request from ever fitting
// and, at the head of the queue, hold every borrower behind it. A demand
// is never raised: the request keeps the place its arrival gave it.
// Reestimate counts as a heartbeat of holder. Cost: O(waiting).
func (p *Pool) Reestimate(now time.Time, holder uint32, id uint64, tokens int64) bool {
	return p.lowerDemand(now, holder, id, func(w *waiter) *int64 { return &w.tokens }, p.tokens(tokens))
}

// lowerDemand sets the demand of the waiting request (holder, id) that
// field picks to d if d is lower, at time now, and reports whether it
// changed (Reestimate, ReestimateWork). Counts as a heartbeat of holder.
// Cost: O(waiting).
func (p *Pool) lowerDemand(now time.Time, holder uint32, id uint64, field func(*waiter) *int64, d int64) bool {
	t := now.UnixNano()
	p.advance(t)
	p.touch(holder, t, p.holderTimeout > 0)
	k := p.findWait(holder, id)
	if k < 0 {
		return false
	}
	f := field(&p.waits[k])
	if d >= *f {
		return false
	}
	*f = d
	return true
}

// ReestimateWork lowers the work demand of the waiting request (holder,
// id) to work (cost units, rounded and clamped as Arrive does; 0 and
// negative count as 0 here), at time now, and reports whether it changed:
// Reestimate for the work resource, for the same reason (a work estimate
// from a client's max_tokens would keep the request out of its team's
// bucket). A demand is never raised. Counts as a heartbeat of holder.
// Cost: O(waiting).
func (p *Pool) ReestimateWork(now time.Time, holder uint32, id uint64, work float64) bool {
	return p.lowerDemand(now, holder, id, func(w *waiter) *int64 { return &w.work }, p.work(work))
}

// clampWork is the work demand a waiting request keeps when the pool's
// work resource changes: none once it is gone.
func (p *Pool) clampWork(n int64) int64 {
	if p.total[kindWork] == 0 {
		return 0
	}
	return n
}

// findWait returns the index of the waiting request (holder, id), or -1.
func (p *Pool) findWait(holder uint32, id uint64) int {
	for k := range p.waits {
		if w := &p.waits[k]; w.holder == holder && w.id == id {
			return k
		}
	}
	return -1
}

// removeWait removes waiting request k, and its holder if it is then idle
// without leases.
func (p *Pool) removeWait(k int) {
	w := p.waits[k]
	p.waits = slices.Delete(p.waits, k, k+1)
	p.teams[w.team].waiting--
	p.userUnwait(&w)
	if h := p.findHolder(w.holder); h >= 0 {
		p.holders[h].waits--
		if p.holderTimeout == 0 && p.holders[h].idle() {
			p.removeHolder(h)
		}
	}
}

// dropWaits removes every waiting request of holder id (the caller
// removes the holder).
func (p *Pool) dropWaits(id uint32) {
	kept := p.waits[:0]
	for _, w := range p.waits {
		if w.holder == id {
			p.teams[w.team].waiting--
			p.userUnwait(&w)
			continue
		}
		kept = append(kept, w)
	}
	p.waits = kept
	if h := p.findHolder(id); h >= 0 {
		p.holders[h].waits = 0
	}
}

// expireWaits drops the waiting requests whose deadline is at or before
// t. The queue is sorted by arrival, so they are a prefix. Cost: O(1)
// when none expires.
func (p *Pool) expireWaits(t int64) {
	if p.maxQueueTime <= 0 || len(p.waits) == 0 || p.deadline(p.waits[0].arrival) > t {
		return
	}
	n := 0
	for n < len(p.waits) && p.deadline(p.waits[n].arrival) <= t {
		w := &p.waits[n]
		p.teams[w.team].waiting--
		p.userUnwait(w)
		if h := p.findHolder(w.holder); h >= 0 {
			p.holders[h].waits--
		}
		n++
	}
	p.waits = append(p.waits[:0], p.waits[n:]...)
	if p.holderTimeout == 0 {
		for k := 0; k < len(p.holders); {
			if p.holders[k].idle() {
				p.removeHolder(k)
				continue
			}
			k++
		}
	}
}

// Waiters returns the number of requests waiting in the queue. Cost: O(1).
func (p *Pool) Waiters() int { return len(p.waits) }

// RetryAfter estimates, at time now, how long a client whose request
// expired in the queue (or was refused because the queue is full) should
// wait before retrying, for a request of team: the age of the oldest
// request of the team still waiting, else of the oldest request waiting,
// rounded up to whole seconds, at least 1 s and at most MaxQueueTime
// (when set).
//
// Why: the request dispatched next is about the oldest of its standing,
// so its age is the time a request arriving now waits before its turn
// comes (CoDel's sojourn time, read at the head instead of the tail); a
// client that retries sooner only queues again behind it. It knows
// nothing of the future (a burst ending, capacity added), so it is an
// estimate, not a promise. Cost: O(waiting).
func (p *Pool) RetryAfter(now time.Time, team string) time.Duration {
	t := now.UnixNano()
	i := p.find(team)
	if i >= 0 && !p.teams[i].configured {
		i = -1
	}
	if i < 0 {
		i = p.unknownIndex()
	}
	oldest, oldestTeam := int64(-1), int64(-1)
	for k := range p.waits {
		w := &p.waits[k]
		if w.arrival > t || p.deadline(w.arrival) <= t {
			continue
		}
		if oldest < 0 {
			oldest = w.arrival
		}
		if w.team == i {
			oldestTeam = w.arrival
			break // sorted by arrival: the team's first is its oldest
		}
	}
	age := time.Duration(0)
	switch {
	case oldestTeam >= 0:
		age = time.Duration(t - oldestTeam)
	case oldest >= 0:
		age = time.Duration(t - oldest)
	}
	age = ((age + time.Second - 1) / time.Second) * time.Second
	if p.maxQueueTime > 0 {
		age = min(age, ((p.maxQueueTime+time.Second-1)/time.Second)*time.Second)
	}
	return max(age, time.Second)
}
