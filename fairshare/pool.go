package fairshare

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Pool tracks one capacity domain: its configuration, every team's
// reservation, decayed usage and requests in flight, and the holders (Wasm
// VM instances) that hold those requests.
//
// A Pool is a value that the plugin decodes from the shared-data record,
// changes with one operation and encodes back (AppendBinary,
// UnmarshalBinary); every method that depends on time takes it as an
// argument. It is not safe for concurrent use.
//
// The zero Pool is usable: it has capacity 0, no teams (every request
// borrows as UnknownTeam), no decay and no leases.
//
// Entries are kept in a fixed order: the configured teams in
// configuration order, then removed teams whose requests are still in
// flight (share 0, until they finish), then the UnknownTeam entry once an
// unknown team has been seen.
type Pool struct {
	name           string
	fp             uint64
	total          amounts // the configured capacities: Capacity, K (SetKVTokens)
	live           amounts // what decisions use: live C (SetCapacity), K, or the slice's (resources.go)
	halfLife       time.Duration
	holderTimeout  time.Duration
	requestTimeout time.Duration
	entryPenalty   bool
	sliced         bool // reservations and capacities are a replica's slice (SetSlice)
	// whole is the capacity and throughput of the totals the slice was
	// cut from (SetSliceOf; wholeSet), which its work follows (slice.go);
	// without it, the configured ones.
	whole          amounts
	wholeSet       bool
	queueLimit     int
	teamQueueLimit int
	maxQueueTime   time.Duration
	batchAging     time.Duration // see Config.BatchAging (0: class before arrival)
	burst          time.Duration // B, the work buckets' depth (see Config.ThroughputBurst; 0 without work)
	users          bool          // the user level (Config.Users, users.go)
	maxUsers       int           // Config.MaxUsers as applied (users)
	userActive     time.Duration // Config.UserActive as applied (users)
	userIdle       time.Duration // Config.UserIdle as applied (users)
	swept          int64         // when this VM last swept idle users (not encoded)

	now        int64  // latest time seen (unix ns); the record's stamp
	usageAt    int64  // every entry's usage is decayed to this time
	phantomMin int64  // no phantom expires before this time (may be stale-low)
	genMin     int64  // no holder count has a window before this (may be stale-low)
	epochs     uint64 // entries created so far: the next entry's epoch

	teams      []entry
	configured int     // teams[:configured] are the configured teams
	index      []int32 // indices of named entries (not UnknownTeam), sorted by name
	holders    []holder
	waits      []waiter // the queue, sorted by (arrival, holder, id); see queue.go

	static   []byte // the encoded static section of the record (codec.go)
	staticOK bool   // static matches the state
	last     []byte // the record p last encoded (codec.go)
	lastOK   bool   // last describes p exactly: nothing changed since

	lf     []float64 // scratch: level fairshare per entry
	higher []float64 // scratch: LF values above the requester's
	ranks  []int     // scratch: every entry's dense LF rank (queue.go)
	sorted []int     // scratch: ranks of the sorted LF values
	first  []int     // scratch: each entry's first waiting request in team order (queue.go)
	ufirst []int     // scratch: each user's first waiting request, by ubase (users.go)
	ulf    []float64 // scratch: level fairshare per user of one entry (users.go)
	ubase  []int     // scratch: every entry's first index in uranks and ufirst
	uranks []int     // scratch: every user's rank in its team (users.go)
}

// entry is one team of the pool (configured, draining or UnknownTeam).
type entry struct {
	name       string
	share      float64 // configured share, 0 when not configured
	weight     float64 // > 0
	configured bool
	lend       float64 // LendingLimit as applied (1: lends all)
	borrowLim  float64 // BorrowingLimit as applied (1: no limit)
	res        amounts // reservation in every kind
	lent       amounts // within-share amounts beyond res (a replica's loan, lend.go)
	keep       amounts // part of the reservation never lent
	lim        amounts // most above the reservation (-1: no limit)
	epoch      uint64  // tells entries of the same name apart over time
	within     flight  // within-share grants in flight (sum over holders)
	borrowing  flight  // borrowing grants in flight (sum over holders)
	pWithin    flight  // within-share phantoms (sum over groups)
	pBorrowing flight  // borrowing phantoms (sum over groups)
	waiting    int     // requests waiting in the queue (count of p.waits)
	estimate   float64
	usage      float64 // consumption settled, decayed to Pool.usageAt
	penalty    float64 // entry penalties not settled yet, decayed alike
	debt       float64 // within-share work not paid for yet (cost units), paid down to Pool.usageAt
	updated    bool
	lastUpdate int64 // unix ns of the last usage change, if updated
	phantoms   []phantomGroup
	users      []user      // the team's users, sorted by name (users.go; nil without users)
	ushares    []UserShare // configured user shares, sorted by name (TeamConfig.Users)
}

// phantomGroup counts phantoms of one team that expire together.
type phantomGroup struct {
	until     int64
	within    flight // the within-share phantoms, in every counted kind
	borrowing flight // the borrowing phantoms
}

// holder is one Wasm VM instance with requests in flight or waiting.
type holder struct {
	id     uint32
	seen   int64
	counts []holderCount // sorted by (team, gen), no zero entries
	waits  int           // requests of the holder waiting in the queue
}

// holderCount is a holder's requests in flight of one team granted in one
// window of RequestTimeout (see leases.go).
type holderCount struct {
	team      int
	gen       int64
	within    flight // the within-share requests, in every counted kind
	borrowing flight // the borrowing requests
}

func (e *entry) inFlight() int {
	return int(e.within[kindSeq] + e.borrowing[kindSeq] + e.pWithin[kindSeq] + e.pBorrowing[kindSeq])
}

// use is what the team's requests in flight take in every kind, phantoms
// included (0 in work: its use is the debt).
func (e *entry) use() amounts {
	var u amounts
	for k := range numCounted {
		u[k] = e.within[k] + e.borrowing[k] + e.pWithin[k] + e.pBorrowing[k]
	}
	return u
}

// inWithin is what the team's within-share requests in flight take in
// every kind, phantoms included.
func (e *entry) inWithin() amounts { return e.within.add(e.pWithin).wide() }

// total is the team's usage as it ranks and as Snapshot and Usage report
// it: the consumption settled plus the entry penalties not settled yet.
// The two are kept apart so that settling a penalty never subtracts it
// from the consumption in floating point (which would lose the low digits
// of a usage much smaller than the penalty).
func (e *entry) total() float64 { return e.usage + e.penalty }

// NewPool returns a pool named name (the name is informational: it is kept
// in the record and returned by Name) configured with cfg at time now.
func NewPool(name string, cfg Config, now time.Time) *Pool {
	p := &Pool{name: name}
	p.Reconfigure(now, cfg)
	return p
}

// Capacity returns C, the live capacity (see SetCapacity).
func (p *Pool) Capacity() int { return int(p.live[kindSeq]) }

// Fingerprint returns the fingerprint of the configuration the pool was
// last built from (NewPool or Reconfigure); SetCapacity does not change it.
// Compare it with Config.Fingerprint to know when to Reconfigure.
func (p *Pool) Fingerprint() uint64 { return p.fp }

// inFlight returns the number of requests in flight in the pool, phantoms
// included: the figure compared with C for Grant.Saturated and TryAcquire.
// Cost: O(teams).
func (p *Pool) inFlight() int {
	n := 0
	for i := range p.teams {
		n += p.teams[i].inFlight()
	}
	return n
}

// Reconfigure applies a new configuration at time now. Teams that remain
// keep their usage, requests in flight (with their standing) and phantoms;
// new teams start empty; reservations are recomputed (apportion.go) and the
// live capacity becomes cfg.Capacity. A removed team keeps its entry, as
// share 0 and reservation 0, while it has requests in flight or phantoms,
// so they finish and release normally; then the entry is dropped with its
// usage. New requests of a removed team count as UnknownTeam. Usage is
// decayed to now under the old half-life before the new one applies; entry
// penalties still in flight are then settled at the new rate (an error of
// at most those penalties' decay difference). When RequestTimeout
// changes, the requests in flight stay counted with their standing (see
// rewindow). The stored fingerprint becomes cfg.Fingerprint(). Cost: O(n log n) in teams plus the holders'
// entries; it allocates.
func (p *Pool) Reconfigure(now time.Time, cfg Config) {
	t := now.UnixNano()
	p.advance(t)
	p.decayTo(t)
	teams := cfg.teams()
	old := p.teams
	oldIndex := p.index
	find := func(name string) int {
		k, ok := slices.BinarySearchFunc(oldIndex, name, func(i int32, n string) int {
			return strings.Compare(old[i].name, n)
		})
		if !ok {
			return -1
		}
		return int(oldIndex[k])
	}
	remap := make([]int, len(old))
	for i := range remap {
		remap[i] = -1
	}
	next := make([]entry, 0, len(teams)+1)
	for _, tc := range teams {
		e := entry{name: tc.Name, weight: tc.Weight, epoch: p.epochs}
		if i := find(tc.Name); i < 0 {
			p.epochs++
		} else {
			e = old[i]
			remap[i] = len(next)
		}
		e.share, e.weight, e.configured = tc.Share, tc.Weight, true
		e.lend, e.borrowLim = cleanLimit(tc.LendingLimit), cleanLimit(tc.BorrowingLimit)
		e.ushares = nil
		if cfg.Users {
			e.ushares = tc.Users
		}
		next = append(next, e)
	}
	configured := len(next)
	unknown := -1
	for i := range old {
		if remap[i] >= 0 {
			continue
		}
		if old[i].name == UnknownTeam {
			unknown = i
			continue
		}
		if old[i].inFlight() == 0 {
			continue // a removed team with nothing in flight: dropped
		}
		e := old[i]
		e.share, e.res, e.configured = 0, amounts{}, false
		e.ushares = nil
		e.lent = amounts{}
		e.lend, e.borrowLim = 1, 1
		remap[i] = len(next)
		next = append(next, e)
	}
	// Waiting requests of a removed team wait on as UnknownTeam's, as
	// its new requests would arrive: the queue survives a configuration
	// swap.
	for k := range p.waits {
		j := remap[p.waits[k].team]
		if j < 0 || !next[j].configured {
			j = -1
		}
		p.waits[k].team = j
	}
	u := -1
	if unknown >= 0 {
		u = len(next)
		remap[unknown] = u
		next = append(next, old[unknown])
	}
	for k := range p.waits {
		if p.waits[k].team >= 0 {
			continue
		}
		if u < 0 {
			u = len(next)
			next = append(next, unknownTeamEntry(p.epochs))
			p.epochs++
		}
		p.waits[k].team, p.waits[k].uplus = u, 0
	}
	for i := range next {
		next[i].waiting = 0
	}
	for _, w := range p.waits {
		next[w.team].waiting++
	}
	p.teams = next
	p.configured = configured
	for h := range p.holders {
		c := p.holders[h].counts
		for k := range c {
			c[k].team = remap[c[k].team]
		}
		slices.SortFunc(c, compareCount)
	}
	// The capacity sources, one per kind: Config.Capacity, Config.KVTokens,
	// Config.Throughput. The debts were paid down to now at the old rates
	// above (decayTo).
	p.total[kindSeq] = int64(cleanCapacity(cfg.Capacity))
	p.total[kindTok] = cleanTokens(cfg.KVTokens)
	p.total[kindWork] = cleanWork(cfg.Throughput)
	p.burst = 0
	if p.total[kindWork] > 0 {
		p.burst = cleanBurst(cfg.ThroughputBurst)
	}
	for k := range numKinds {
		if p.sliced {
			p.live[k] = min(p.live[k], p.total[k])
		} else {
			p.live[k] = p.total[k]
		}
	}
	p.clampWhole()
	p.dropUndeclared()
	p.halfLife = cleanDuration(cfg.HalfLife)
	p.holderTimeout = cleanDuration(cfg.HolderTimeout)
	p.queueLimit = cleanQueue(cfg.QueueLimit)
	p.teamQueueLimit = cleanQueue(cfg.TeamQueueLimit)
	p.maxQueueTime = cleanDuration(cfg.MaxQueueTime)
	p.batchAging = cleanDuration(cfg.BatchAging)
	// A waiting request demands at most the new K (none without a KV
	// resource), so a smaller cache cannot block the queue for good.
	for k := range p.waits {
		p.waits[k].tokens = p.tokens(p.waits[k].tokens)
		p.waits[k].work = p.clampWork(p.waits[k].work)
	}
	if p.holderTimeout == 0 {
		// Without leases, holders are only recorded while they hold
		// requests.
		for k := 0; k < len(p.holders); {
			if p.holders[k].idle() {
				p.removeHolder(k)
				continue
			}
			k++
		}
	}
	if rt := cleanDuration(cfg.RequestTimeout); rt != p.requestTimeout {
		p.rewindow(rt)
	}
	p.entryPenalty = cfg.EntryPenalty
	p.configureUsers(cfg)
	p.fp = cfg.Fingerprint()
	p.reapportion()
	if p.sliced && p.declared().has(kindWork) {
		p.deriveWork() // the slice's work follows its sequences (slice.go)
	}
	p.rebuildIndex()
	p.expireWaits(p.now)
	p.invalidate()
}

// SetBatchAging sets the pool's Config.BatchAging (negative counts as 0),
// the one setting a holder applies to every record it decodes rather than
// reads from it (see Config.BatchAging). Cost: O(1).
func (p *Pool) SetBatchAging(d time.Duration) { p.batchAging = cleanDuration(d) }

// rewindow sets the request timeout to rt and moves every holder count
// into the window of the new timeout that holds the start of its old
// window, kept within the two windows a count may have (the current one
// and the one before): a count's window is only known to the old
// timeout's precision, and a window left over from the old timeout would
// either expire every request in flight at once or make the record
// undecodable. A request whose window the move does not match is dropped
// as a lost release one to two new RequestTimeouts later.
func (p *Pool) rewindow(rt time.Duration) {
	oldRT := int64(p.requestTimeout)
	p.requestTimeout = rt
	cur := p.window(p.now)
	p.genMin = math.MaxInt64
	for h := range p.holders {
		c := p.holders[h].counts
		for k := range c {
			start := p.now // the old timeout was 0: no window
			if oldRT > 0 {
				start = c[k].gen * oldRT // gen = ⌊t/oldRT⌋: no overflow
			}
			c[k].gen = min(max(p.window(start), cur-1), cur)
		}
		slices.SortFunc(c, compareCount)
		// Merge counts that moved into the same window.
		out := c[:0]
		for _, x := range c {
			if n := len(out); n > 0 && compareCount(out[n-1], x) == 0 {
				out[n-1].within = out[n-1].within.add(x.within)
				out[n-1].borrowing = out[n-1].borrowing.add(x.borrowing)
				continue
			}
			out = append(out, x)
		}
		for _, x := range out {
			p.genMin = min(p.genMin, x.gen)
		}
		p.holders[h].counts = out
	}
}

// SetCapacity changes C (an elastic pool whose instances come and go) and
// recomputes the within-share reservations (apportion.go). Requests in
// flight keep their within-share or borrowing standing; new requests are
// judged against the new reservations (and, for TryAcquire, the new C). It
// returns the previous C. Negative values count as 0. The fingerprint is
// unchanged: it describes the configuration applied. On a
// pool that decides against a slice (SetSlice) it sets the slice's
// capacity, at most the configured one, and cuts the slice's
// reservations to fit it. The plugin calls it when a pool takes its
// capacity from the engines (capacity_from).
func (p *Pool) SetCapacity(capacity int) int {
	prev := int(p.live[kindSeq])
	p.live[kindSeq] = int64(cleanCapacity(capacity))
	if p.sliced {
		p.live[kindSeq] = min(p.live[kindSeq], p.total[kindSeq])
	}
	p.reapportion()
	p.invalidate()
	return prev
}

// KVTokens returns K, the live KV capacity in tokens (0: the pool has no
// KV resource); see SetKVTokens.
func (p *Pool) KVTokens() int64 { return p.total[kindTok] }

// SetKVTokens changes K, the KV capacity in tokens, as SetCapacity changes
// C (an elastic pool whose engines come and go, or are restarted with
// another cache size), and recomputes the reservations in KV tokens.
// Requests in flight keep their standing and the tokens they were granted;
// a waiting request demands at most the new K. A pool without a KV
// resource (K = 0) keeps none: the grants in flight were recorded without
// tokens, so K is never turned on here. Values below 1 count as 1. On a
// sliced pool (SetSlice) it changes nothing: the slice's tokens are the
// Rebalance's. It returns the previous K. The fingerprint is unchanged.
func (p *Pool) SetKVTokens(tokens int64) int64 {
	prev := p.total[kindTok]
	if prev == 0 || p.sliced {
		return prev
	}
	p.total[kindTok] = max(cleanTokens(tokens), 1)
	p.live[kindTok] = p.total[kindTok]
	for k := range p.waits {
		p.waits[k].tokens = p.tokens(p.waits[k].tokens)
	}
	p.reapportion()
	p.invalidate()
	return prev
}

// Throughput returns X, the pool's throughput in cost units per second
// (0: the pool has no work resource); see SetThroughput. Cost: O(1).
func (p *Pool) Throughput() int64 { return p.total[kindWork] }

// SetThroughput changes X, the pool's throughput in cost units per second,
// as SetKVTokens changes K: a reading from the engines (what they served
// per second at saturation). Every team's reserved rate is apportioned
// anew; the debts are first paid down to the latest time the pool has
// seen at the old rates, and keep their value. x ≤ 0 (no reading) leaves
// X as it is. A pool without a work resource (Config.Throughput 0) keeps
// none: X is never turned on here. Values above 2^40 are clamped. On a
// sliced pool (SetSlice) it changes nothing: the slice's work is derived
// from its sequences (slice.go). It returns the previous X. The
// fingerprint is unchanged. Cost: O(kinds · teams · log teams).
func (p *Pool) SetThroughput(x int64) int64 {
	prev := p.total[kindWork]
	if prev == 0 || p.sliced || x <= 0 {
		return prev
	}
	p.decayTo(p.now)
	p.total[kindWork] = cleanWork(x)
	p.live[kindWork] = p.total[kindWork]
	p.reapportion()
	p.invalidate()
	return prev
}

// dropUndeclared zeroes, everywhere in flight, the amounts of the kinds
// the pool no longer declares (a Reconfigure that removed KVTokens), and
// the debts once work is not declared: a kind not declared has no amount
// anywhere, as a waiting request demands none (Reconfigure clamps the
// demands), so the record need not carry it. Cost: O(teams + holders'
// counts).
func (p *Pool) dropUndeclared() {
	var mask flight
	s := p.declared()
	if !s.has(kindWork) {
		for i := range p.teams {
			p.teams[i].debt = 0
		}
	}
	for k := range numCounted {
		if s.has(kind(k)) {
			mask[k] = -1
		}
	}
	and := func(a *flight) {
		for k := range a {
			a[k] &= mask[k]
		}
	}
	for i := range p.teams {
		e := &p.teams[i]
		and(&e.within)
		and(&e.borrowing)
		and(&e.pWithin)
		and(&e.pBorrowing)
		for j := range e.phantoms {
			and(&e.phantoms[j].within)
			and(&e.phantoms[j].borrowing)
		}
	}
	for h := range p.holders {
		for j := range p.holders[h].counts {
			and(&p.holders[h].counts[j].within)
			and(&p.holders[h].counts[j].borrowing)
		}
	}
}

// Reserved returns the within-share slots of every team entry (configured
// teams, draining teams and UnknownTeam, the last two with 0). It
// allocates the map.
func (p *Pool) Reserved() map[string]int {
	m := make(map[string]int, len(p.teams))
	for _, e := range p.teams {
		m[e.name] = int(e.res[kindSeq])
	}
	return m
}

// reapportion recomputes every entry's reservation for the live
// capacities, in every kind, and the limits that follow from them
// (resources.go).
func (p *Pool) reapportion() {
	n := p.configured
	if p.sliced {
		// A slice's reservations stay with their teams (Reconfigure moves
		// the entries); teams new to the pool wait for the next slice.
		for k := range numKinds {
			p.live[k] = min(p.live[k], p.total[k])
		}
		for i := range p.teams {
			e := &p.teams[i]
			if i >= n {
				e.res, e.lent = amounts{}, amounts{}
				e.lend, e.borrowLim = 1, 1
			}
			p.applyLimits(e)
		}
		p.fitSlice()
		return
	}
	names := make([]string, n)
	shares := make([]float64, n)
	out := make([]int, n)
	for i := range n {
		names[i], shares[i] = p.teams[i].name, p.teams[i].share
	}
	for i := n; i < len(p.teams); i++ {
		e := &p.teams[i]
		e.res = amounts{}
		e.lend, e.borrowLim = 1, 1
	}
	for k := range numKinds {
		apportion(int(p.live[k]), names, shares, out)
		for i := range n {
			p.teams[i].res[k] = int64(out[i])
		}
	}
	for i := range p.teams {
		p.applyLimits(&p.teams[i])
	}
}

// rebuildIndex sorts the named entries by name.
func (p *Pool) rebuildIndex() {
	p.index = p.index[:0]
	for i := range p.teams {
		if p.teams[i].name != UnknownTeam {
			p.index = append(p.index, int32(i))
		}
	}
	slices.SortFunc(p.index, func(a, b int32) int { return strings.Compare(p.teams[a].name, p.teams[b].name) })
}

// find returns the index of the entry named name exactly (UnknownTeam
// included), or -1. Cost: O(log n) string comparisons.
func (p *Pool) find(name string) int {
	if name == UnknownTeam {
		return p.unknownIndex()
	}
	lo, hi := 0, len(p.index)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.teams[p.index[m]].name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(p.index) && p.teams[p.index[lo]].name == name {
		return int(p.index[lo])
	}
	return -1
}

// unknownIndex returns the index of the UnknownTeam entry, or -1.
func (p *Pool) unknownIndex() int {
	if n := len(p.teams); n > 0 && p.teams[n-1].name == UnknownTeam {
		return n - 1
	}
	return -1
}

// unknownEntry returns the index of the UnknownTeam entry, creating it.
func (p *Pool) unknownEntry() int {
	if i := p.unknownIndex(); i >= 0 {
		return i
	}
	p.teams = append(p.teams, unknownTeamEntry(p.epochs))
	p.epochs++
	p.invalidate()
	return len(p.teams) - 1
}

// unknownTeamEntry returns a new UnknownTeam entry of the given epoch:
// share 0, no reservation, no limits.
func unknownTeamEntry(epoch uint64) entry {
	return entry{name: UnknownTeam, weight: 1, epoch: epoch, lend: 1, borrowLim: 1, lim: noLimit}
}

// acquireEntry is the entry a new request of team is judged in: the
// configured team, or UnknownTeam (a removed team counts as unknown).
func (p *Pool) acquireEntry(team string) int {
	if i := p.find(team); i >= 0 && p.teams[i].configured {
		return i
	}
	return p.unknownEntry()
}

// resolve is the entry other operations apply to: the entry named team if
// the pool has one (configured or draining), else UnknownTeam, created if
// create is set (-1 if absent and not created).
func (p *Pool) resolve(team string, create bool) int {
	if i := p.find(team); i >= 0 {
		return i
	}
	if create {
		return p.unknownEntry()
	}
	return p.unknownIndex()
}

// compact drops removed teams that have nothing in flight any more.
func (p *Pool) compact() {
	end := len(p.teams)
	if p.unknownIndex() >= 0 {
		end--
	}
	if end == p.configured {
		return
	}
	dropped := false
	for i := end - 1; i >= p.configured; i-- {
		if p.teams[i].inFlight() != 0 {
			continue
		}
		p.teams = slices.Delete(p.teams, i, i+1)
		for k := range p.waits {
			if p.waits[k].team > i {
				p.waits[k].team--
			}
		}
		for h := range p.holders {
			c := p.holders[h].counts
			for k := range c {
				if c[k].team > i {
					c[k].team--
				}
			}
		}
		dropped = true
	}
	if dropped {
		p.rebuildIndex()
		p.invalidate()
	}
}

// noLimit is the borrowing limits of a team without one: -1 in every
// kind.
var noLimit = func() (a amounts) {
	for k := range a {
		a[k] = -1
	}
	return a
}()

// compareCount orders holder counts by team, then generation.
func compareCount(a, b holderCount) int {
	if a.team != b.team {
		return a.team - b.team
	}
	return cmp.Compare(a.gen, b.gen)
}

// sanitizeAmount maps negative, NaN and infinite amounts to 0 and clamps
// the rest to the usage bound.
func sanitizeAmount(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return 0
	}
	return min(x, maxUsage)
}
