package fairshare

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Users: Fair Tree's second level. With Config.Users every team is
// divided among its users (Request.User) by the rule that divides the
// pool among its teams, one level down:
//
//   - Each active user of a team (one with requests in flight or waiting,
//     or whose last request arrived less than Config.UserActive ago)
//     reserves its part of the team's reserved sequences: the team's
//     allowed sequences (reservation plus loan, less the within-share
//     requests no user counts: phantoms added without a grant, requests
//     granted before the user level), apportioned among the active users
//     by their shares (TeamConfig.Users; 1 for a user not listed) with
//     largest remainder, ties by name, as teams are apportioned (its
//     portion). A request whose user has fewer within-share requests in
//     flight than its portion is within share (priority 0/1), provided
//     the team's reservation holds it in every other resource (KV
//     tokens, work) as without users: the seat test is the user's, the
//     others stay the team's.
//   - A request of a user at or above its portion that still finds one of
//     its team's reserved sequences free (the team's within-share
//     requests, phantoms and over requests in flight are fewer than its
//     allowed sequences), and fits the team's reservation in the other
//     resources, takes it "over": what its teammates leave. It is counted
//     as borrowing (it takes no within-share seat, so a teammate's
//     request that comes later is within share), it is never held,
//     like a within-share request, its work is charged to the team's
//     bucket, and its priority is OverBase + min(user rank,
//     MaxOverRank)·OverRankStep + class (2 to 9): after every
//     within-share request of the pool, before every borrower of another
//     team, and, being the running request of the largest priority but
//     borrowers, the one vLLM preempts for a teammate's within-share
//     request on an engine that preempts running requests for waiting
//     ones.
//   - When the team's reserved sequences are all taken, a request of a
//     user at or above its portion may take the sequence of an over
//     request of a worse-ranked teammate (overTakes: while the team's
//     requests beyond its allowed sequences are fewer than those
//     teammates' over requests): it is over (counted as borrowing, never
//     held) at the within-share priority WithinShareBase + class, so vLLM
//     runs it before that teammate's: an engine that preempts running
//     requests for waiting ones preempts the teammate's over request (2
//     to 9) for it, one that does not runs it when a sequence frees, among
//     the within-share requests waiting. The team then has in flight
//     beyond its reservation at most its worse-ranked users' over
//     requests.
//   - Otherwise the request borrows as its team does, at its team's rank.
//
// So a light user's request inside the team's reservation is decided
// before a flooding teammate's: within share at once while the
// flooder's requests above its portion hold the team's other seats as
// over requests. Across teams nothing changes: the team's standing is
// the sum of its users' usage (the team's usage, charged as before),
// its within-share and borrowing requests are counted as before, and a
// team of one user behaves as without users (its portion is the whole
// reservation; nothing can be over).
//
// The one bound the user level loosens: a team's within-share requests
// may exceed its allowed sequences while a user who has just become
// active is within share and teammates still hold more within-share
// requests than their portions, which shrank when it came (they were
// granted while it was inactive). The excess is at most those
// teammates' requests beyond their new portions, so at most the team's
// reservation, and it drains as they finish (their requests above
// their portions are over or borrowing from then on). The alternative,
// holding the newcomer until they drain, is the flood this level is
// there to stop. A user stays active for UserActive after its latest
// request, so a light user who sends one at least that often never
// rejoins.
//
// A user's rank is its dense level-fairshare rank among the team's
// active users: S = share / Σ active shares, U = decayed usage
// (consumption plus entry penalties, as a team's) / Σ active usage,
// LF = S / U. It orders the over requests' priorities and, in the
// queue, the team's waiting requests: user rank first, then the team's
// order as without users (class and arrival, BatchAging). A waiting
// request is within share when its user is below its portion and it
// is its user's first waiting request; over when its team has a free
// reserved sequence and it is its team's first waiting request.
//
// State stays bounded: at most Config.MaxUsers user entries per team
// (plus UserOther); a user with nothing in flight or waiting whose last
// request arrived Config.UserIdle ago is dropped with its usage; a new
// user of a full team replaces the idle user of least usage, or, if
// every entry has requests, counts as UserOther, one entry shared like
// UnknownTeam. A request without a user counts as UserNone.
//
// Counts that leases drop (a dead holder's phantoms expiring, a lost
// release, see leases.go) are per team, not per user: when a team's
// requests in flight fall below the sum of its users' counts, the users'
// counts are lowered to match, largest first (healUsers), so a user's
// count is never more than its team's and heals when the team's does.

// Priorities of over requests (see Users above).
const (
	// OverBase is the priority of a request that takes a reserved
	// sequence its teammates leave, of the best user rank, plus the
	// class.
	OverBase = 2
	// OverRankStep separates over requests of successive user ranks.
	OverRankStep = 2
	// MaxOverRank caps the user rank of an over request's priority, so
	// that it stays below BorrowBase (at most
	// OverBase + MaxOverRank·OverRankStep + Batch = 9).
	MaxOverRank = 3
)

// UserNone is the user of a request that names none (Request.User "")
// on a pool with users.
const UserNone = "_none"

// UserOther is the one user entry shared by the new users of a team
// whose user entries (Config.MaxUsers) all have requests in flight or
// waiting.
const UserOther = "_other"

// MaxUserName is the longest user name the pool keeps, in bytes; a
// longer name is cut to it (the plugin refuses longer values).
const MaxUserName = 64

// Defaults of the user level.
const (
	// DefaultMaxUsers is Config.MaxUsers when 0.
	DefaultMaxUsers = 256
	// maxMaxUsers bounds Config.MaxUsers.
	maxMaxUsers = 1 << 16
)

// UserShare is a user's share within its team (TeamConfig.Users).
type UserShare struct {
	// Name is the user (the user header's value).
	Name string
	// Share weighs the user's portion of the team against its active
	// teammates' (a user not listed has 1). Negative, NaN, infinite and 0
	// count as 1; values are clamped into [1e-9, 1e9].
	Share float64
}

// user is one user of a team entry.
type user struct {
	name    string
	share   float64 // resolved: the configured share or 1 (not encoded)
	usage   float64 // consumption settled, decayed to Pool.usageAt
	penalty float64 // entry penalties not settled yet, decayed alike
	seen    int64   // unix ns of the user's latest arrival
	within  int64   // within-share requests in flight
	over    int64   // over requests in flight (counted as borrowing)
	borrow  int64   // borrowing requests in flight (not over)
	waiting int64   // requests waiting (not encoded: counted from the queue)
}

// busy reports whether u has requests in flight or waiting.
func (u *user) busy() bool { return u.within+u.over+u.borrow+u.waiting > 0 }

// total is u's usage as it ranks.
func (u *user) total() float64 { return u.usage + u.penalty }

// cleanUserShare maps a configured user share onto the one the pool uses.
func cleanUserShare(s float64) float64 { return cleanWeight(s) }

// cleanUserName cuts a user name to MaxUserName bytes and maps "" to
// UserNone.
func cleanUserName(name string) string {
	if name == "" {
		return UserNone
	}
	if len(name) > MaxUserName {
		return name[:MaxUserName]
	}
	return name
}

// cleanMaxUsers maps Config.MaxUsers onto the bound the pool applies.
func cleanMaxUsers(n int) int {
	if n <= 0 {
		return DefaultMaxUsers
	}
	return min(n, maxMaxUsers)
}

// cleanUserShares returns the usable user shares of a team: named, first
// of their name, shares cleaned, sorted by name.
func cleanUserShares(in []UserShare) []UserShare {
	var out []UserShare
	for _, u := range in {
		if u.Name == "" {
			continue
		}
		n := cleanUserName(u.Name)
		if slices.ContainsFunc(out, func(o UserShare) bool { return o.Name == n }) {
			continue
		}
		out = append(out, UserShare{Name: n, Share: cleanUserShare(u.Share)})
	}
	slices.SortFunc(out, func(a, b UserShare) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// userShare is the share of user name in entry e.
func (e *entry) userShare(name string) float64 {
	k, ok := slices.BinarySearchFunc(e.ushares, name, func(u UserShare, n string) int { return strings.Compare(u.Name, n) })
	if ok {
		return e.ushares[k].Share
	}
	return 1
}

// findUser returns the index of user name in entry e, or -1-k where k is
// where it would be inserted.
func (e *entry) findUser(name string) int {
	k, ok := slices.BinarySearchFunc(e.users, name, func(u user, n string) int { return strings.Compare(u.name, n) })
	if ok {
		return k
	}
	return -1 - k
}

// userIndex returns the index of the user a new request of entry i named
// name counts in, created (evicting the idle user of least usage from a
// full team, or falling back on UserOther) when it is not there; -1 when
// the pool has no user level. Cost: O(log users), O(users) when it
// creates.
func (p *Pool) userIndex(i int, name string, t int64) int {
	if !p.users {
		return -1
	}
	name = cleanUserName(name)
	e := &p.teams[i]
	if k := e.findUser(name); k >= 0 {
		return k
	}
	if name != UserOther && p.userEntries(e) >= p.maxUsers {
		victim := -1
		for k := range e.users {
			u := &e.users[k]
			if u.busy() || u.name == UserOther {
				continue
			}
			if victim < 0 || u.total() < e.users[victim].total() ||
				u.total() == e.users[victim].total() && u.seen < e.users[victim].seen {
				victim = k
			}
		}
		if victim < 0 {
			name = UserOther
			if k := e.findUser(name); k >= 0 {
				return k
			}
		} else {
			p.removeUser(i, victim)
		}
	}
	k := -1 - e.findUser(name)
	e.users = slices.Insert(e.users, k, user{name: name, share: e.userShare(name), seen: t})
	for w := range p.waits {
		if p.waits[w].team == i && p.waits[w].user() >= k {
			p.waits[w].uplus++
		}
	}
	p.invalidate()
	return k
}

// userEntries is the number of e's user entries that count against
// Config.MaxUsers (UserOther does not).
func (p *Pool) userEntries(e *entry) int {
	n := len(e.users)
	if e.findUser(UserOther) >= 0 {
		n--
	}
	return n
}

// removeUser deletes user k of entry i (which has nothing waiting).
func (p *Pool) removeUser(i, k int) {
	e := &p.teams[i]
	e.users = slices.Delete(e.users, k, k+1)
	for w := range p.waits {
		if p.waits[w].team == i && p.waits[w].user() > k {
			p.waits[w].uplus--
		}
	}
	p.invalidate()
}

// sweepUsers drops, in every team, the users with nothing in flight or
// waiting whose last request arrived UserIdle or more before t. Cost:
// O(users).
func (p *Pool) sweepUsers(t int64) {
	for i := range p.teams {
		e := &p.teams[i]
		for k := len(e.users) - 1; k >= 0; k-- {
			if u := &e.users[k]; !u.busy() && t-u.seen >= int64(p.userIdle) {
				p.removeUser(i, k)
			}
		}
	}
}

// active reports whether user u counts in its team's division at t.
func (p *Pool) active(u *user, t int64) bool {
	return u.busy() || t-u.seen < int64(p.userActive)
}

// portion returns user k's portion of entry i's reserved sequences at t:
// the team's allowed sequences less the within-share requests no user
// counts, apportioned among its active users (k counted active) by
// share, largest remainder, ties by name. Cost: O(users).
func (p *Pool) portion(i, k int, t int64) int64 {
	e := &p.teams[i]
	// The within-share requests no user counts (AddPhantoms' phantoms,
	// requests granted before the user level) take their sequences off
	// the top; a user's own phantoms stay in its count.
	attributed := int64(0)
	for j := range e.users {
		attributed += e.users[j].within
	}
	seats := int64(e.allowed()) - max(0, e.within[kindSeq]+e.pWithin[kindSeq]-attributed)
	if seats <= 0 {
		return 0
	}
	sum := 0.0
	for j := range e.users {
		if u := &e.users[j]; j == k || p.active(u, t) {
			sum += u.share
		}
	}
	c := float64(seats)
	tol := apportionTol(c)
	q := func(u *user) (int64, float64) {
		x := u.share / sum * c
		f := math.Floor(x + tol)
		return int64(f), x - f
	}
	own, rem := q(&e.users[k])
	given, better := int64(0), int64(0)
	for j := range e.users {
		u := &e.users[j]
		if j != k && !p.active(u, t) {
			continue
		}
		f, r := q(u)
		given += f
		if j == k {
			continue
		}
		// Remainders within the tolerance tie; ties go by name (users
		// are sorted by name, so an earlier index is a smaller name).
		if r > rem+tol || math.Abs(r-rem) <= tol && j < k {
			better++
		}
	}
	if left := seats - given; better < left {
		own++
	}
	return own
}

// userRank returns user k's dense level-fairshare rank among entry i's
// active users at t (k counted active): 0 for the highest LF.
// Cost: O(users log users).
func (p *Pool) userRank(i, k int, t int64) int {
	e := &p.teams[i]
	p.userLFs(e, k, t)
	return p.denseRank(p.ulf, p.ulf[k])
}

// userLFs fills p.ulf with the level fairshare of every user of e among
// its active users at t (k counted active; inactive users get -1, below
// every LF, so they rank after all and change no active user's rank).
func (p *Pool) userLFs(e *entry, k int, t int64) {
	n := len(e.users)
	if cap(p.ulf) < n {
		p.ulf = make([]float64, n, n+8)
	}
	lf := p.ulf[:n]
	sumS, sumU := 0.0, 0.0
	for j := range e.users {
		if u := &e.users[j]; j == k || p.active(u, t) {
			sumS += u.share
			sumU += u.total()
		}
	}
	for j := range e.users {
		u := &e.users[j]
		switch {
		case j != k && !p.active(u, t):
			lf[j] = -1
		case sumU == 0 || u.total() == 0:
			lf[j] = math.Inf(1)
		default:
			lf[j] = (u.share / sumS) / (u.total() / sumU)
		}
	}
	p.ulf = lf
}

// userRanks fills p.uranks with every user's rank among its team's
// active users at t, indexed by p.ubase[team] + user (inactive users
// ranked last). Cost: O(users log users).
func (p *Pool) userRanks(t int64) {
	n := len(p.teams)
	if cap(p.ubase) < n+1 {
		p.ubase = make([]int, n+1, n+4)
	}
	p.ubase = p.ubase[:n+1]
	total := 0
	for i := range p.teams {
		p.ubase[i] = total
		total += len(p.teams[i].users)
	}
	p.ubase[n] = total
	if cap(p.uranks) < total {
		p.uranks = make([]int, total, total+16)
	}
	p.uranks = p.uranks[:total]
	for i := range p.teams {
		e := &p.teams[i]
		if len(e.users) == 0 {
			continue
		}
		p.userLFs(e, -1, t)
		h := append(p.higher[:0], p.ulf...)
		slices.Sort(h)
		p.higher = h
		if cap(p.sorted) < len(h) {
			p.sorted = make([]int, len(h), len(h)+4)
		}
		sorted := p.sorted[:len(h)]
		tieGroups(h, sorted)
		for j, v := range p.ulf {
			x, _ := slices.BinarySearch(h, v)
			p.uranks[p.ubase[i]+j] = sorted[x]
		}
		p.sorted = sorted
	}
}

// overPriority is the priority of an over request of a user of the given
// rank and class.
func overPriority(rank int, c Class) int {
	rank = min(max(rank, 0), MaxOverRank)
	return OverBase + rank*OverRankStep + int(c)
}

// standing is what a request would be granted as now.
type standing uint8

const (
	stBorrow     standing = iota // above the team's reservation
	stWorkBorrow                 // above it in seats or tokens, inside it in work (borrowStanding)
	stOver                       // a reserved sequence its teammates leave
	stTakes                      // over, taking a worse teammate's over sequence (overTakes)
	stWithinTok                  // within share, borrowing KV tokens
	stWithin                     // within share
)

// standingOf is the standing of a request of entry i (user k, -1 without
// users) demanding d, at t, given u = p.usage(): the team's tests
// (withinFits, withinRoom) without users; with users the seat test is the
// user's portion, and a request above it may be over (see Users above).
// Cost: O(kinds), O(users) with users.
func (p *Pool) standingOf(u usage, i, k int, d amounts, t int64) standing {
	if k < 0 {
		switch {
		case p.withinFits(i, d):
			return stWithin
		case p.withinRoom(u, i, d):
			return stWithinTok
		}
		return p.borrowStanding(i, d)
	}
	if p.teams[i].users[k].within < p.portion(i, k, t) {
		if p.restFits(i, d) {
			return stWithin
		}
		if p.restRoom(u, i, d) {
			return stWithinTok
		}
	}
	if p.overFits(i, d) {
		return stOver
	}
	if p.restFits(i, d) && p.overTakes(i, k, t) {
		return stTakes
	}
	return p.borrowStanding(i, d)
}

// borrowStanding is the standing of a borrower of entry i demanding d:
// stWorkBorrow when the pool declares work and the request fits the
// team's bucket (the team is above its reservation in sequences or
// tokens, not in work), else stBorrow. Cost: O(1).
func (p *Pool) borrowStanding(i int, d amounts) standing {
	if p.declared().has(kindWork) && p.workFits(i, d[kindWork]) {
		return stWorkBorrow
	}
	return stBorrow
}

// overTakes reports whether user k of entry i, above its portion while
// the team's reserved sequences are all taken, may take the sequence of
// a worse-ranked teammate's over request: the team's requests beyond its
// allowed sequences are fewer than those teammates' over requests.
// Cost: O(users log users).
func (p *Pool) overTakes(i, k int, t int64) bool {
	e := &p.teams[i]
	excess := e.within[kindSeq] + e.pWithin[kindSeq] + p.overOf(i) - int64(e.allowed())
	p.userLFs(e, k, t)
	lf := p.ulf
	mine := lf[k]
	var worse int64
	for j := range e.users {
		if j != k && e.users[j].over > 0 && lf[j] >= 0 && lf[j] < mine && !sameLF(mine, lf[j]) {
			worse += e.users[j].over
		}
	}
	return excess < worse
}

// overOf is the number of entry i's over requests in flight.
func (p *Pool) overOf(i int) int64 {
	n := int64(0)
	for k := range p.teams[i].users {
		n += p.teams[i].users[k].over
	}
	return n
}

// countUser adds one request of standing st to user k of entry i.
func (p *Pool) countUser(i, k int, st standing) {
	if k < 0 {
		return
	}
	u := &p.teams[i].users[k]
	switch st {
	case stWithin, stWithinTok:
		u.within++
	case stOver, stTakes:
		u.over++
	default:
		u.borrow++
	}
}

// uncountUser removes one request of g's standing from its user (if the
// user is still there and counts one).
func (p *Pool) uncountUser(i int, g *Grant) {
	if !p.users || g.User == "" {
		return
	}
	e := &p.teams[i]
	k := e.findUser(g.User)
	if k < 0 {
		return
	}
	u := &e.users[k]
	c := &u.within
	switch {
	case g.Over:
		c = &u.over
	case g.Borrowing:
		c = &u.borrow
	}
	if *c > 0 {
		*c--
	}
}

// healUsers lowers the users' counts of every team to its requests in
// flight (phantoms included) where leases dropped requests (see Users
// above): within-share counts to the team's within-share requests, over
// and borrowing counts to its borrowing requests, the largest count
// first. Cost: O(users).
func (p *Pool) healUsers() {
	for i := range p.teams {
		e := &p.teams[i]
		if len(e.users) == 0 {
			continue
		}
		var within, out int64
		for k := range e.users {
			within += e.users[k].within
			out += e.users[k].over + e.users[k].borrow
		}
		for x := within - (e.within[kindSeq] + e.pWithin[kindSeq]); x > 0; x-- {
			lowest(e.users, func(u *user) *int64 { return &u.within })
		}
		for x := out - (e.borrowing[kindSeq] + e.pBorrowing[kindSeq]); x > 0; x-- {
			lowest(e.users, func(u *user) *int64 {
				if u.borrow >= u.over {
					return &u.borrow
				}
				return &u.over
			})
		}
	}
}

// lowest decrements the largest count that field picks among users
// (the first such user on a tie).
func lowest(users []user, field func(*user) *int64) {
	best := -1
	var bv int64
	for k := range users {
		if v := *field(&users[k]); v > bv {
			best, bv = k, v
		}
	}
	if best >= 0 {
		*field(&users[best])--
	}
}

// UserStat is a snapshot of one user of a team (TeamStat.Users).
type UserStat struct {
	// User is the user's name (UserNone, UserOther for the shared
	// entries).
	User string
	// Share is the user's share within the team (1 unless configured).
	Share float64
	// Usage is the user's decayed usage (cost units) at the snapshot
	// time, entry penalties included.
	Usage float64
	// LevelFairshare is the user's LF among the team's active users (0
	// for an inactive user), Rank its dense rank among them (0 best;
	// inactive users rank after every active one).
	LevelFairshare float64
	Rank           int
	// Active reports whether the user counts in the team's division now.
	Active bool
	// Portion is the user's part of the team's reserved sequences now (0
	// when inactive).
	Portion int
	// Within, Over and Borrowing count the user's requests in flight of
	// each standing; Waiting its requests in the queue.
	Within, Over, Borrowing, Waiting int
	// LastSeen is when the user's latest request arrived.
	LastSeen int64
}

// userStats returns the users of entry i at t, by standing: rank, then
// usage (larger first), then name.
func (p *Pool) userStats(i int, t int64) []UserStat {
	e := &p.teams[i]
	if len(e.users) == 0 {
		return nil
	}
	out := make([]UserStat, len(e.users))
	p.userLFs(e, -1, t)
	lf := slices.Clone(p.ulf)
	for k := range e.users {
		u := &e.users[k]
		s := UserStat{User: u.name, Share: u.share, Usage: u.total(), Active: p.active(u, t),
			Within: int(u.within), Over: int(u.over), Borrowing: int(u.borrow), Waiting: int(u.waiting), LastSeen: u.seen}
		if s.Active {
			s.LevelFairshare = lf[k]
			s.Portion = int(p.portion(i, k, t))
		}
		s.Rank = p.denseRank(lf, lf[k])
		out[k] = s
	}
	slices.SortFunc(out, func(a, b UserStat) int {
		if c := cmp.Compare(a.Rank, b.Rank); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Usage, a.Usage); c != 0 {
			return c
		}
		return strings.Compare(a.User, b.User)
	})
	return out
}

// configureUsers applies cfg's user level (Reconfigure): without it every
// user entry goes and no waiting request has a user; with it every user
// takes its configured share.
func (p *Pool) configureUsers(cfg Config) {
	p.users = cfg.Users
	p.maxUsers, p.userActive, p.userIdle = 0, 0, 0
	if !p.users {
		for i := range p.teams {
			p.teams[i].users = nil
		}
		for k := range p.waits {
			p.waits[k].uplus = 0
		}
		return
	}
	p.maxUsers = cleanMaxUsers(cfg.MaxUsers)
	p.userActive, p.userIdle = cleanUserTimes(cfg.UserActive, cfg.UserIdle)
	for i := range p.teams {
		e := &p.teams[i]
		for k := range e.users {
			e.users[k].share = e.userShare(e.users[k].name)
		}
	}
}

// arrivingUser is userIndex for a request arriving at t, which it records
// as the user's latest arrival; -1 without the user level and for an
// entry the configuration does not list.
func (p *Pool) arrivingUser(i int, name string, t int64) int {
	if !p.users || !p.teams[i].configured {
		return -1
	}
	k := p.userIndex(i, name, t)
	if u := &p.teams[i].users[k]; t > u.seen {
		u.seen = t
	}
	return k
}

// userUnwait counts w out of its user's waiting requests.
func (p *Pool) userUnwait(w *waiter) {
	k := w.user()
	if k < 0 {
		return
	}
	if e := &p.teams[w.team]; k < len(e.users) && e.users[k].waiting > 0 {
		e.users[k].waiting--
	}
}

// overFits reports whether a request of entry i demanding d may be over:
// a reserved sequence of the team is free (within-share requests,
// within-share phantoms and over requests in flight are fewer than its
// allowed sequences) and it fits the team's reservation in every other
// kind. Cost: O(kinds + users).
func (p *Pool) overFits(i int, d amounts) bool {
	e := &p.teams[i]
	return e.within[kindSeq]+e.pWithin[kindSeq]+p.overOf(i) < int64(e.allowed()) && p.restFits(i, d)
}

// releaseUser settles g's request with its user in entry i (Release):
// one request of its standing leaves the user's count, what is left of
// its entry penalty (residual, after decay) leaves the user's penalties
// and its consumption joins the user's usage. Nothing happens when the
// user is gone (dropped, evicted) or g has none.
func (p *Pool) releaseUser(i int, g *Grant, residual, consumed float64) {
	if !p.users || g.User == "" {
		return
	}
	e := &p.teams[i]
	k := e.findUser(g.User)
	if k < 0 {
		return
	}
	p.uncountUser(i, g)
	u := &e.users[k]
	u.penalty -= min(residual, u.penalty)
	if u.penalty < settleEps*residual {
		u.penalty = 0
	}
	u.usage = min(u.usage+consumed, maxUsage)
}

// user is the index of w's user in its team's users, -1 for none.
func (w *waiter) user() int { return int(w.uplus) - 1 }

// userKeySep separates the team from the user in a UserKey: a byte no
// user name carries (the plugin admits printable ASCII only) and no team
// name should.
const userKeySep = "\x1f"

// UserKey is the key of a user's usage in UserUsage and SetUserUsage's
// callers' maps: the team, a unit separator (0x1f), the user.
func UserKey(team, user string) string { return team + userKeySep + user }

// SplitUserKey splits a UserKey into its team and user; ok is false for
// a key that is not one (a team's name).
func SplitUserKey(key string) (team, user string, ok bool) {
	return strings.Cut(key, userKeySep)
}

// UserUsage returns the decayed usage (entry penalties included, as
// Usage's) of every user of every team at now, keyed by UserKey: what a
// replica adds up with the others' (plugin/cluster.go) so that users rank
// on their usage across the pool. Empty without the user level. It
// allocates the map. Cost: O(users).
func (p *Pool) UserUsage(now time.Time) map[string]float64 {
	t := now.UnixNano()
	p.advance(t)
	p.decayTo(t)
	out := map[string]float64{}
	for i := range p.teams {
		e := &p.teams[i]
		for k := range e.users {
			out[UserKey(e.name, e.users[k].name)] = e.users[k].total()
		}
	}
	return out
}

// SetUserUsage sets the usage of user of team, decayed to now, as
// SetUsage sets a team's (penalties not settled yet kept up to it), and
// reports whether it did. A user the team does not have is added only
// while the team has room for it (MaxUsers), as an idle user last seen
// UserActive before now: a remote user never evicts a local one. It
// does nothing (false) without the user level, for a team the pool does
// not list, or for a user it has no room for. Cost: O(log users),
// O(users) when it adds one.
func (p *Pool) SetUserUsage(now time.Time, team, user string, usage float64) bool {
	t := now.UnixNano()
	p.advance(t)
	if !p.users {
		return false
	}
	i := p.find(team)
	if i < 0 || !p.teams[i].configured {
		return false
	}
	p.decayTo(t)
	e := &p.teams[i]
	name := cleanUserName(user)
	k := e.findUser(name)
	if k < 0 {
		if p.userEntries(e) >= p.maxUsers || name == UserOther {
			return false
		}
		k = p.userIndex(i, name, t-int64(p.userActive))
		e = &p.teams[i]
	}
	u := &e.users[k]
	x := sanitizeAmount(usage)
	u.penalty = min(u.penalty, x)
	u.usage = max(x-u.penalty, 0)
	return true
}
