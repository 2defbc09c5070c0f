package fairshare

import (
	"math"
	"time"
)

// Leases. Every request in flight is held by a holder: one Wasm VM
// instance, named by a uint32 the VM picks at random when it starts. The
// record keeps, per holder, the time it was last seen and its requests in
// flight per team (sparse: only teams it holds requests of). Acquire,
// TryAcquire and Heartbeat count as seeing the holder; Release does
// too while the holder is still in the record.
//
// A holder not seen for Config.HolderTimeout is presumed dead at
// last seen + HolderTimeout (its VM trapped, or was replaced by a new
// plugin version). Its requests in flight then become phantoms of their
// teams that expire RequestTimeout later: requests that may still be
// running in vLLM, but that nobody will release. The expiry time depends
// only on the record, not on when the expiry is noticed. A later Release
// of one of those grants (the VM was alive after all) drops one phantom
// of the team instead. So no slot of a dead VM stays taken for longer
// than HolderTimeout + RequestTimeout after the VM was last seen.
//
// Phantoms keep their standing: a within-share request becomes a
// within-share phantom and still occupies one of its team's reserved slots
// until it expires or is dropped, because the request it stands for may
// still be running in vLLM at its within-share priority; counting it as
// borrowing would let the team be granted more within-share requests than
// its reservation. Every phantom counts as in flight for Grant.Saturated
// and TryAcquire. Snapshot reports them apart (TeamStat.Phantoms).
//
// Lost releases. A live holder can lose a release too (a CAS retry loop
// that gave up, a stream Envoy never finished). So a holder's counts are
// kept per window of RequestTimeout: a request granted in window k
// (k = ⌊At / RequestTimeout⌋) that has not been released when window k+2
// begins (between one and two RequestTimeouts after it was granted) is
// dropped from the count, and its Release, if it ever comes, only settles
// usage. RequestTimeout must therefore bound how long a request can run;
// 0 disables this (and then a lost release of a live holder holds its slot
// for good).
//
// Every method that takes the time first expires dead holders, stale
// phantoms and lost requests (cost O(holders' counts + teams)).

// maxCount bounds one count of the record (a holder's requests of a team,
// a phantom group's requests).
const maxCount = 1 << 32

// Heartbeat records that holder is alive at now (the plugin calls it on
// every tick) and expires dead holders and stale phantoms. With leases
// disabled (HolderTimeout 0) holders are only recorded while they hold
// requests, so Heartbeat only expires phantoms.
func (p *Pool) Heartbeat(now time.Time, holder uint32) {
	t := now.UnixNano()
	p.advance(t)
	p.touch(holder, t, p.holderTimeout > 0)
}

// HasHolder reports whether holder id is in the record (seen within
// HolderTimeout, or still owning requests or waiting requests). A new
// holder uses it to choose an id no live holder has. Cost: O(log holders).
func (p *Pool) HasHolder(id uint32) bool { return p.findHolder(id) >= 0 }

// AddPhantoms counts n requests of a team as in flight until the given
// time, without grants: requests that may still run but that nobody can
// release (a previous owner's in-flight count, a silent replica's
// requests). Each phantom takes the standing a new request would get now:
// within share while the team's within-share requests in flight are fewer
// than its reservation, borrowing beyond. The team is the entry of that
// name if the pool has one, else UnknownTeam. n <= 0, or until not after
// now, adds nothing; n is clamped to 2^30.
func (p *Pool) AddPhantoms(now time.Time, team string, n int, until time.Time) {
	t := now.UnixNano()
	p.advance(t)
	u := until.UnixNano()
	if n <= 0 || u <= t {
		return
	}
	n = min(n, maxCapacity)
	i := p.resolve(team, true)
	e := &p.teams[i]
	w := min(n, max(0, e.allowed()-int(e.within[kindSeq]+e.pWithin[kindSeq])))
	var wa, ba flight
	wa[kindSeq], ba[kindSeq] = int64(w), int64(n-w)
	p.addPhantoms(i, u, wa, ba)
}

// window returns the RequestTimeout window of time t (0 when RequestTimeout
// is 0).
func (p *Pool) window(t int64) int64 {
	w := int64(p.requestTimeout)
	if w <= 0 {
		return 0
	}
	k := t / w
	if t%w != 0 && t < 0 {
		k--
	}
	return k
}

// expireCounts drops the holders' counts of windows before gen. Cost:
// O(1) when no count can be that old (genMin), else O(holders' counts).
func (p *Pool) expireCounts(gen int64) {
	if gen <= p.genMin {
		return
	}
	p.genMin = math.MaxInt64
	for k := 0; k < len(p.holders); {
		h := &p.holders[k]
		stale := false
		for _, c := range h.counts {
			stale = stale || c.gen < gen
			if c.gen >= gen {
				p.genMin = min(p.genMin, c.gen)
			}
		}
		if !stale {
			k++
			continue
		}
		kept := h.counts[:0]
		for _, c := range h.counts {
			if c.gen >= gen {
				kept = append(kept, c)
				continue
			}
			e := &p.teams[c.team]
			e.within = e.within.sub(c.within)
			e.borrowing = e.borrowing.sub(c.borrowing)
		}
		h.counts = kept
		if p.holderTimeout == 0 && h.idle() {
			p.removeHolder(k)
			continue
		}
		k++
	}
}

// addSat returns a+d, saturating at math.MaxInt64.
func addSat(a int64, d time.Duration) int64 {
	if d > 0 && a > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return a + int64(d)
}

// advance brings the pool to time t: it expires dead holders and stale
// phantoms and drops removed teams with nothing left in flight; with a
// work resource it also brings the usage clock, and so the debts, to the
// latest time seen.
func (p *Pool) advance(t int64) {
	p.lastOK = false // every operation that changes the pool comes here
	if t > p.now {
		p.now = t
	}
	if p.requestTimeout > 0 {
		p.expireCounts(p.window(p.now) - 1)
	}
	if p.holderTimeout > 0 {
		for k := 0; k < len(p.holders); {
			if addSat(p.holders[k].seen, p.holderTimeout) <= t {
				p.expireHolder(k, t)
				continue
			}
			k++
		}
	}
	if t >= p.phantomMin {
		p.expirePhantoms(t)
	}
	p.expireWaits(p.now)
	p.compact()
	if p.users {
		p.healUsers()
		if p.now-p.swept >= int64(p.userIdle/8) {
			p.swept = p.now
			p.sweepUsers(p.now)
		}
	}
	if p.total[kindWork] > 0 {
		// Every test of within share reads the debts at the latest time
		// seen: a team whose debt paid down is within share again with
		// no release in between.
		p.decayTo(p.now)
	}
}

// findHolder returns the index of holder id, or -1-k where k is the index
// it would be inserted at. Cost: O(log holders).
func (p *Pool) findHolder(id uint32) int {
	lo, hi := 0, len(p.holders)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.holders[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(p.holders) && p.holders[lo].id == id {
		return lo
	}
	return -1 - lo
}

// touch marks holder id seen at t and returns its index; a holder not in
// the record is inserted if create is set, else touch returns -1.
func (p *Pool) touch(id uint32, t int64, create bool) int {
	k := p.findHolder(id)
	if k >= 0 {
		if t > p.holders[k].seen {
			p.holders[k].seen = t
		}
		return k
	}
	if !create {
		return -1
	}
	k = -1 - k
	n := len(p.holders)
	var spare []holderCount
	if n < cap(p.holders) {
		spare = p.holders[:n+1][n].counts[:0]
	}
	p.holders = append(p.holders, holder{})
	copy(p.holders[k+1:], p.holders[k:n])
	p.holders[k] = holder{id: id, seen: t, counts: spare}
	return k
}

// idle reports whether h holds nothing: no request in flight, none
// waiting. Without leases an idle holder leaves the record.
func (h *holder) idle() bool { return len(h.counts) == 0 && h.waits == 0 }

// removeHolder deletes holder k, keeping its buffer for reuse.
func (p *Pool) removeHolder(k int) {
	c := p.holders[k].counts[:0]
	copy(p.holders[k:], p.holders[k+1:])
	n := len(p.holders) - 1
	p.holders[n] = holder{counts: c}
	p.holders = p.holders[:n]
}

// expireHolder turns holder k's requests into phantoms (which keep their
// KV tokens), drops its waiting requests (nobody can resume their
// streams) and removes it.
func (p *Pool) expireHolder(k int, t int64) {
	h := &p.holders[k]
	until := addSat(addSat(h.seen, p.holderTimeout), p.requestTimeout)
	for _, c := range h.counts {
		e := &p.teams[c.team]
		e.within = e.within.sub(c.within)
		e.borrowing = e.borrowing.sub(c.borrowing)
		if until > t {
			p.addPhantoms(c.team, until, c.within, c.borrowing)
		}
	}
	if h.waits > 0 {
		p.dropWaits(h.id)
	}
	p.removeHolder(k)
}

// addPhantoms adds a group of phantoms to entry i, merging it with a group
// that expires at the same time: within and borrowing are the phantoms of
// each standing in every kind (their counts in sequences, their KV tokens).
func (p *Pool) addPhantoms(i int, until int64, within, borrowing flight) {
	if within[kindSeq] <= 0 && borrowing[kindSeq] <= 0 {
		return
	}
	e := &p.teams[i]
	k := len(e.phantoms)
	for k > 0 && e.phantoms[k-1].until > until {
		k--
	}
	if k == 0 || e.phantoms[k-1].until != until {
		e.phantoms = append(e.phantoms, phantomGroup{})
		copy(e.phantoms[k+1:], e.phantoms[k:])
		e.phantoms[k] = phantomGroup{until: until}
		k++
	}
	g := &e.phantoms[k-1]
	within[kindSeq] = min(within[kindSeq], maxCount-g.within[kindSeq])
	borrowing[kindSeq] = min(borrowing[kindSeq], maxCount-g.borrowing[kindSeq])
	g.within = g.within.add(within)
	g.borrowing = g.borrowing.add(borrowing)
	e.pWithin = e.pWithin.add(within)
	e.pBorrowing = e.pBorrowing.add(borrowing)
	p.phantomMin = min(p.phantomMin, until)
}

// dropPhantom removes one phantom of entry i: the longest-lasting one of
// the given standing (borrowing or within share) if any, otherwise the
// longest-lasting one, borrowing first. It reports whether one was
// removed. The phantom gives back d in every kind but sequences (never
// more than its group holds; all of it if it was the group's last of its
// standing); d < 0 in a kind gives back the group's mean there.
func (p *Pool) dropPhantom(i int, borrowing bool, d amounts) bool {
	e := &p.teams[i]
	k := -1
	for j := len(e.phantoms) - 1; j >= 0; j-- {
		if g := &e.phantoms[j]; borrowing && g.borrowing[kindSeq] > 0 || !borrowing && g.within[kindSeq] > 0 {
			k = j
			break
		}
	}
	if k < 0 {
		k = len(e.phantoms) - 1
		if k < 0 {
			return false
		}
		borrowing = e.phantoms[k].borrowing[kindSeq] > 0
	}
	g, sum := &e.phantoms[k].within, &e.pWithin
	if borrowing {
		g, sum = &e.phantoms[k].borrowing, &e.pBorrowing
	}
	n := g[kindSeq]
	for r := 1; r < numCounted; r++ {
		x := g[r] / n
		if d[r] >= 0 {
			x = min(d[r], g[r])
		}
		if n == 1 {
			x = g[r]
		}
		g[r] -= x
		sum[r] -= x
	}
	g[kindSeq]--
	sum[kindSeq]--
	e.trimGroup(k)
	return true
}

// trimGroup deletes phantom group k if it is empty.
func (e *entry) trimGroup(k int) {
	if g := e.phantoms[k]; g.within[kindSeq] == 0 && g.borrowing[kindSeq] == 0 {
		e.phantoms = append(e.phantoms[:k], e.phantoms[k+1:]...)
	}
}

// expirePhantoms drops every phantom group that expires at or before t and
// recomputes phantomMin.
func (p *Pool) expirePhantoms(t int64) {
	next := int64(math.MaxInt64)
	for i := range p.teams {
		e := &p.teams[i]
		n := 0
		for n < len(e.phantoms) && e.phantoms[n].until <= t {
			e.pWithin = e.pWithin.sub(e.phantoms[n].within)
			e.pBorrowing = e.pBorrowing.sub(e.phantoms[n].borrowing)
			n++
		}
		if n > 0 {
			e.phantoms = append(e.phantoms[:0], e.phantoms[n:]...)
		}
		if len(e.phantoms) > 0 {
			next = min(next, e.phantoms[0].until)
		}
	}
	p.phantomMin = next
}
