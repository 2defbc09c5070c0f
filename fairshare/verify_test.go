package fairshare

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

// verify checks every invariant of p (container/heap style); tests call
// it after every operation.
func verify(t testing.TB, p *Pool) {
	t.Helper()
	if err := check(p); err != nil {
		t.Fatalf("invariant: %v\nstate: %s", err, dump(p))
	}
}

// check returns the first broken invariant of p.
func check(p *Pool) error {
	if p.configured > len(p.teams) {
		return fmt.Errorf("configured = %d > %d entries", p.configured, len(p.teams))
	}
	if p.live[kindSeq] < 0 || p.live[kindSeq] > maxCapacity {
		return fmt.Errorf("capacity %d out of range", p.live[kindSeq])
	}
	// The resource list: sequences always declared, every other kind
	// declared iff its capacity is configured; an undeclared kind holds
	// nothing anywhere (checked below with the counts).
	decl := p.declared()
	if !decl.has(kindSeq) || decl&^allKinds != 0 {
		return fmt.Errorf("declared kinds %b", decl)
	}
	for k := range numKinds {
		if p.total[k] < 0 || p.live[k] < 0 || p.total[k] > maxAmount[k] || p.live[k] > maxAmount[k] {
			return fmt.Errorf("kind %d: capacity %d, live %d out of range", k, p.total[k], p.live[k])
		}
		if k != kindSeq && !p.sliced && p.live[k] != p.total[k] {
			return fmt.Errorf("kind %d: live capacity %d of a pool not sliced is not its total %d", k, p.live[k], p.total[k])
		}
		if p.sliced && p.live[k] > p.total[k] {
			return fmt.Errorf("kind %d: slice %d beyond the pool's %d", k, p.live[k], p.total[k])
		}
	}
	// The totals a slice was cut from: only with a slice, within the
	// configured totals.
	if p.wholeSet && !p.sliced || !p.wholeSet && p.whole != (amounts{}) {
		return fmt.Errorf("slice's totals %v (set %v) on a pool sliced %v", p.whole, p.wholeSet, p.sliced)
	}
	for k := range numKinds {
		if p.whole[k] < 0 || p.whole[k] > p.total[k] || k == kindTok && p.whole[k] != 0 {
			return fmt.Errorf("kind %d: slice's totals %d beyond the pool's %d", k, p.whole[k], p.total[k])
		}
	}
	// Work: the buckets' depth is set iff work is declared.
	if decl.has(kindWork) != (p.burst > 0) || p.burst < 0 {
		return fmt.Errorf("work declared %v with burst %v", decl.has(kindWork), p.burst)
	}
	var sumRes amounts
	names := map[string]bool{}
	for i := range p.teams {
		e := &p.teams[i]
		if names[e.name] {
			return fmt.Errorf("duplicate entry %q", e.name)
		}
		names[e.name] = true
		if e.configured != (i < p.configured) {
			return fmt.Errorf("entry %d %q: configured = %v", i, e.name, e.configured)
		}
		if e.name == UnknownTeam && i != len(p.teams)-1 {
			return fmt.Errorf("UnknownTeam at %d, not last", i)
		}
		if e.epoch >= p.epochs {
			return fmt.Errorf("entry %q: epoch %d >= %d", e.name, e.epoch, p.epochs)
		}
		if e.name == "" {
			return fmt.Errorf("entry %d has no name", i)
		}
		if !e.configured && (e.share != 0 || !e.res.isZero()) {
			return fmt.Errorf("entry %q not configured has share %v reserved %v", e.name, e.share, e.res)
		}
		if !e.configured && e.name != UnknownTeam && e.inFlight() == 0 {
			return fmt.Errorf("removed entry %q kept with nothing in flight", e.name)
		}
		if !(e.usage >= 0 && e.usage <= maxUsage) || !(e.estimate >= 0 && e.estimate <= maxUsage) {
			return fmt.Errorf("entry %q: usage %v estimate %v", e.name, e.usage, e.estimate)
		}
		// A debt is finite, never negative, and only with a work
		// resource; work is never an amount in flight.
		if !(e.debt >= 0 && e.debt <= maxUsage) || e.debt != 0 && !decl.has(kindWork) {
			return fmt.Errorf("entry %q: debt %v (work declared %v)", e.name, e.debt, decl.has(kindWork))
		}
		if u := e.use(); u[kindWork] != 0 {
			return fmt.Errorf("entry %q: work counted in flight %v", e.name, u)
		}
		if !(e.penalty >= 0 && e.penalty <= maxUsage) {
			return fmt.Errorf("entry %q: penalty %v, usage %v", e.name, e.penalty, e.usage)
		}
		if !(e.weight >= minWeight && e.weight <= maxWeight) || !(e.share >= 0) || math.IsInf(e.share, 0) {
			return fmt.Errorf("entry %q: weight %v share %v", e.name, e.weight, e.share)
		}
		if !(e.lend >= 0 && e.lend <= 1) || !(e.borrowLim >= 0 && e.borrowLim <= 1) ||
			!e.configured && (e.lend != 1 || e.borrowLim != 1) {
			return fmt.Errorf("entry %q: lend %v borrow %v", e.name, e.lend, e.borrowLim)
		}
		if !e.lent.isZero() && (!p.sliced || !e.configured) {
			return fmt.Errorf("entry %q: loan %v (sliced %v, configured %v)", e.name, e.lent, p.sliced, e.configured)
		}
		for k, g := range e.phantoms {
			if g.within[kindSeq]+g.borrowing[kindSeq] == 0 {
				return fmt.Errorf("entry %q: empty phantom group %+v", e.name, g)
			}
			if k > 0 && g.until <= e.phantoms[k-1].until {
				return fmt.Errorf("entry %q: phantom groups out of order", e.name)
			}
			if g.until < p.phantomMin {
				return fmt.Errorf("entry %q: phantom until %d before phantomMin %d", e.name, g.until, p.phantomMin)
			}
		}
		// Every kind: no negative amount, phantoms the groups' sums
		// (none in a kind without phantoms in sequences), nothing in an
		// undeclared kind, kept parts and limits as applyLimits gives
		// them.
		for k := range numKinds {
			if u := e.use(); e.res[k] < 0 || e.lent[k] < 0 || u[k] < 0 || k < kindWork && (e.within[k] < 0 || e.borrowing[k] < 0 || e.pWithin[k] < 0 || e.pBorrowing[k] < 0) {
				return fmt.Errorf("entry %q: kind %d: negative amount %+v", e.name, k, *e)
			}
			if !decl.has(k) && (e.res[k] != 0 || e.lent[k] != 0 || e.use()[k] != 0) {
				return fmt.Errorf("entry %q: kind %d not declared holds res %d lent %d use %d", e.name, k, e.res[k], e.lent[k], e.use()[k])
			}
			// Work is not an amount in flight: flight has no place for it.
			for _, g := range e.phantoms {
				if k == kindWork {
					break
				}
				if g.within[k] < 0 || g.borrowing[k] < 0 || g.within[kindSeq] == 0 && g.within[k] != 0 || g.borrowing[kindSeq] == 0 && g.borrowing[k] != 0 {
					return fmt.Errorf("entry %q: kind %d: bad phantom group %+v", e.name, k, g)
				}
			}
			if k < kindWork {
				var pw, pb int64
				for _, g := range e.phantoms {
					pw += g.within[k]
					pb += g.borrowing[k]
				}
				if pw != e.pWithin[k] || pb != e.pBorrowing[k] {
					return fmt.Errorf("entry %q: kind %d: phantoms %d/%d, groups sum %d/%d", e.name, k, e.pWithin[k], e.pBorrowing[k], pw, pb)
				}
			}
			if keep := e.res[k] - int64(math.Floor(e.lend*float64(e.res[k]))); e.keep[k] != keep || keep < 0 || keep > e.res[k] {
				return fmt.Errorf("entry %q: kind %d: kept %d of reservation %d (lend %v)", e.name, k, e.keep[k], e.res[k], e.lend)
			}
			if (e.borrowLim == 1) != (e.lim[k] < 0) || e.lim[k] > p.live[k] {
				return fmt.Errorf("entry %q: kind %d: borrowing limit %v gives %d of %d", e.name, k, e.borrowLim, e.lim[k], p.live[k])
			}
		}
		sumRes = sumRes.add(e.res)
	}
	if p.usageAt > p.now {
		return fmt.Errorf("usage time %d after the stamp %d", p.usageAt, p.now)
	}
	// Reservations fit every kind's capacity, and are Apportion of the
	// configured shares unless they are a slice's.
	names2 := make([]string, p.configured)
	shares := map[string]float64{}
	for i := range p.configured {
		names2[i] = p.teams[i].name
		shares[p.teams[i].name] = p.teams[i].share
	}
	for k := range numKinds {
		if sumRes[k] > p.live[k] {
			return fmt.Errorf("kind %d: Σ reserved = %d > capacity %d", k, sumRes[k], p.live[k])
		}
		if p.sliced {
			continue // a slice's reservations are set, not apportioned
		}
		want := apportionMap(int(p.live[k]), names2, shares)
		for i := range p.configured {
			if got := p.teams[i].res[k]; got != int64(want[p.teams[i].name]) {
				return fmt.Errorf("kind %d: reserved[%q] = %d, Apportion gives %d", k, p.teams[i].name, got, want[p.teams[i].name])
			}
		}
	}
	// Index: every named entry, sorted.
	if len(p.index) != len(p.teams)-boolInt(p.unknownIndex() >= 0) {
		return fmt.Errorf("index has %d entries for %d teams", len(p.index), len(p.teams))
	}
	for k, i := range p.index {
		if k > 0 && p.teams[i].name <= p.teams[p.index[k-1]].name {
			return fmt.Errorf("index out of order at %d", k)
		}
		if p.find(p.teams[i].name) != int(i) {
			return fmt.Errorf("find(%q) != %d", p.teams[i].name, i)
		}
	}
	// Holders: ids ascending, counts sparse and sorted, none from a window
	// that has expired; team counts are sums.
	within := make([]flight, len(p.teams))
	borrowing := make([]flight, len(p.teams))
	for k := range p.holders {
		h := &p.holders[k]
		if k > 0 && h.id <= p.holders[k-1].id {
			return fmt.Errorf("holders out of order at %d", k)
		}
		for j, c := range h.counts {
			if c.team < 0 || c.team >= len(p.teams) || c.within[kindSeq]+c.borrowing[kindSeq] == 0 {
				return fmt.Errorf("holder %d: bad count %+v", h.id, c)
			}
			if j > 0 && compareCount(h.counts[j-1], c) >= 0 {
				return fmt.Errorf("holder %d: counts out of order", h.id)
			}
			if c.gen < p.genMin {
				return fmt.Errorf("holder %d: count %+v of a window before genMin %d", h.id, c, p.genMin)
			}
			if p.requestTimeout > 0 && c.gen < p.window(p.now)-1 {
				return fmt.Errorf("holder %d: count %+v of an expired window (now %d)", h.id, c, p.window(p.now))
			}
			for r := range numCounted {
				if c.within[r] < 0 || c.borrowing[r] < 0 || c.within[kindSeq] == 0 && c.within[r] != 0 || c.borrowing[kindSeq] == 0 && c.borrowing[r] != 0 {
					return fmt.Errorf("holder %d: kind %d: bad count %+v", h.id, r, c)
				}
			}
			within[c.team] = within[c.team].add(c.within)
			borrowing[c.team] = borrowing[c.team].add(c.borrowing)
		}
	}
	for i := range p.teams {
		if within[i] != p.teams[i].within || borrowing[i] != p.teams[i].borrowing {
			return fmt.Errorf("entry %q: in flight %v/%v, holders sum %v/%v", p.teams[i].name,
				p.teams[i].within, p.teams[i].borrowing, within[i], borrowing[i])
		}
	}
	// The queue: in order, every request of a live holder and of a team
	// that takes new requests, none past its deadline nor from the future;
	// per-team and per-holder counts are its counts.
	waiting := make([]int, len(p.teams))
	holderWaits := map[uint32]int{}
	for k := range p.waits {
		w := &p.waits[k]
		if k > 0 && compareWaiter(&p.waits[k-1], w) >= 0 {
			return fmt.Errorf("queue out of order at %d", k)
		}
		if w.team < 0 || w.team >= len(p.teams) || !p.teams[w.team].configured && p.teams[w.team].name != UnknownTeam {
			return fmt.Errorf("waiting %+v: team not accepting requests", *w)
		}
		if p.findHolder(w.holder) < 0 {
			return fmt.Errorf("waiting %+v: no such holder", *w)
		}
		if w.arrival > p.now || p.deadline(w.arrival) <= p.now {
			return fmt.Errorf("waiting %+v: arrival out of [now − MaxQueueTime, now] (now %d)", *w, p.now)
		}
		if w.tokens < 0 || w.tokens > p.total[kindTok] || !(w.estimate >= 0 && w.estimate <= maxUsage) || w.class != clampClass(w.class) ||
			w.work < 0 || w.work > maxWork || w.work != 0 && !decl.has(kindWork) {
			return fmt.Errorf("waiting %+v: bad fields", *w)
		}
		waiting[w.team]++
		holderWaits[w.holder]++
	}
	for i := range p.teams {
		if waiting[i] != p.teams[i].waiting {
			return fmt.Errorf("entry %q: waiting %d, queue has %d", p.teams[i].name, p.teams[i].waiting, waiting[i])
		}
	}
	for _, h := range p.holders {
		if h.waits != holderWaits[h.id] {
			return fmt.Errorf("holder %d: waits %d, queue has %d", h.id, h.waits, holderWaits[h.id])
		}
	}
	if err := checkUsers(p); err != nil {
		return err
	}
	// Rank order agrees with LF order.
	lf := append([]float64(nil), p.levelFairshares()...)
	for i := range lf {
		if math.IsNaN(lf[i]) || lf[i] < 0 {
			return fmt.Errorf("LF[%q] = %v", p.teams[i].name, lf[i])
		}
		if p.teams[i].share == 0 && lf[i] != 0 {
			return fmt.Errorf("LF[%q] = %v with share 0", p.teams[i].name, lf[i])
		}
	}
	for i := range lf {
		ri := p.denseRank(lf, lf[i])
		for j := range lf {
			rj := p.denseRank(lf, lf[j])
			// Ranks follow LF; a rank only joins values within the tie
			// tolerance of each other.
			if lf[i] > lf[j] && ri > rj || lf[i] == lf[j] && ri != rj || ri < rj && !(lf[i] > lf[j]) ||
				ri == rj && lf[i] > lf[j] && !sameLF(lf[i], lf[j]) {
				return fmt.Errorf("LF %v/%v but ranks %d/%d", lf[i], lf[j], ri, rj)
			}
		}
	}
	// The record round-trips.
	enc, err := p.AppendBinary(nil)
	if err != nil {
		return err
	}
	var q Pool
	if err := q.UnmarshalBinary(enc); err != nil {
		return fmt.Errorf("decode own record: %v", err)
	}
	if a, b := dump(p), dump(&q); a != b {
		return fmt.Errorf("round trip changed the state:\n%s\n%s", a, b)
	}
	enc2, _ := q.AppendBinary(nil)
	if !bytes.Equal(enc, enc2) {
		return fmt.Errorf("re-encoding differs")
	}
	// Into a buffer that already has room for the bound (not grown), after
	// a byte already there: the same bytes, in that buffer's memory.
	room := append(make([]byte, 0, 1+len(enc)+p.dynamicBound()), 0xee)
	enc3, _ := p.AppendBinary(room)
	if enc3[0] != 0xee || !bytes.Equal(enc3[1:], enc) || &enc3[0] != &room[:1][0] {
		return fmt.Errorf("encoding in place differs from appending")
	}
	return nil
}

// dump prints the whole state of p (not its scratch buffers).
func dump(p *Pool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name=%q fp=%x total=%v live=%v sliced=%v hl=%v ht=%v rt=%v pen=%v now=%d usageAt=%d configured=%d epochs=%d\n",
		p.name, p.fp, p.total, p.live, p.sliced, p.halfLife, p.holderTimeout, p.requestTimeout,
		p.entryPenalty, p.now, p.usageAt, p.configured, p.epochs)
	fmt.Fprintf(&b, "queue=%d/%d maxQueueTime=%v burst=%v whole=%v/%v\n", p.queueLimit, p.teamQueueLimit, p.maxQueueTime, p.burst, p.whole, p.wholeSet)
	fmt.Fprintf(&b, "users=%v max=%d active=%v idle=%v\n", p.users, p.maxUsers, p.userActive, p.userIdle)
	for _, e := range p.teams {
		if len(e.users)+len(e.ushares) > 0 {
			fmt.Fprintf(&b, "  %q ushares=%v users=%+v\n", e.name, e.ushares, e.users)
		}
		fmt.Fprintf(&b, "  %q epoch=%d share=%v w=%v conf=%v est=%v use=%v pen=%v debt=%v upd=%v@%d groups=%v\n",
			e.name, e.epoch, e.share, e.weight, e.configured, e.estimate, e.usage, e.penalty, e.debt, e.updated, e.lastUpdate, e.phantoms)
		fmt.Fprintf(&b, "    res=%v lent=%v lend=%v keep=%v borrowLim=%v lim=%v in=%v/%v ph=%v/%v waiting=%d\n",
			e.res, e.lent, e.lend, e.keep, e.borrowLim, e.lim, e.within, e.borrowing, e.pWithin, e.pBorrowing, e.waiting)
	}
	for _, h := range p.holders {
		fmt.Fprintf(&b, "  holder %d seen=%d counts=%v waits=%d\n", h.id, h.seen, h.counts, h.waits)
	}
	for _, w := range p.waits {
		fmt.Fprintf(&b, "  wait %+v\n", w)
	}
	return b.String()
}

// checkUsers checks the invariants of the user level (users.go).
func checkUsers(p *Pool) error {
	for i := range p.teams {
		e := &p.teams[i]
		if !p.users && (len(e.users) > 0 || len(e.ushares) > 0) {
			return fmt.Errorf("entry %q: users without the user level", e.name)
		}
		if len(e.users) > 0 && e.name == UnknownTeam {
			return fmt.Errorf("UnknownTeam has users")
		}
		if p.users && p.userEntries(e) > p.maxUsers {
			return fmt.Errorf("entry %q: %d users > %d", e.name, p.userEntries(e), p.maxUsers)
		}
		var within, out int64
		for k := range e.users {
			u := &e.users[k]
			if k > 0 && u.name <= e.users[k-1].name {
				return fmt.Errorf("entry %q: users out of order at %d", e.name, k)
			}
			if u.name == "" || len(u.name) > MaxUserName || u.within < 0 || u.over < 0 || u.borrow < 0 || u.waiting < 0 ||
				!(u.usage >= 0 && u.usage <= maxUsage) || !(u.penalty >= 0 && u.penalty <= maxUsage) || u.seen > p.now {
				return fmt.Errorf("entry %q: bad user %+v", e.name, *u)
			}
			if u.share != e.userShare(u.name) {
				return fmt.Errorf("entry %q: user %q share %v, configured %v", e.name, u.name, u.share, e.userShare(u.name))
			}
			within += u.within
			out += u.over + u.borrow
			n := int64(0)
			for _, w := range p.waits {
				if w.team == i && w.user() == k {
					n++
				}
			}
			if n != u.waiting {
				return fmt.Errorf("entry %q: user %q waiting %d, queue has %d", e.name, u.name, u.waiting, n)
			}
		}
		// A user's counts are never more than its team's (healUsers).
		if within > e.within[kindSeq]+e.pWithin[kindSeq] || out > e.borrowing[kindSeq]+e.pBorrowing[kindSeq] {
			return fmt.Errorf("entry %q: users count %d within, %d over or borrowing; team %v+%v within, %v+%v borrowing",
				e.name, within, out, e.within, e.pWithin, e.borrowing, e.pBorrowing)
		}
	}
	for _, w := range p.waits {
		if w.uplus < 0 || int(w.uplus) > len(p.teams[w.team].users) || !p.users && w.uplus != 0 {
			return fmt.Errorf("waiting %+v: bad user", w)
		}
	}
	return nil
}
