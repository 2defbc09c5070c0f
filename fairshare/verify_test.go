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
	if p.capacity < 0 || p.capacity > maxCapacity {
		return fmt.Errorf("capacity %d out of range", p.capacity)
	}
	sumReserved := 0
	var sumResTok int64
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
		if !e.configured && (e.share != 0 || e.reserved != 0) {
			return fmt.Errorf("entry %q not configured has share %v reserved %d", e.name, e.share, e.reserved)
		}
		if !e.configured && e.name != UnknownTeam && e.inFlight() == 0 {
			return fmt.Errorf("removed entry %q kept with nothing in flight", e.name)
		}
		if e.reserved < 0 || e.within < 0 || e.borrowing < 0 || e.pWithin < 0 || e.pBorrowing < 0 {
			return fmt.Errorf("entry %q: negative count %+v", e.name, *e)
		}
		if e.lent < 0 || e.lentTok < 0 || (e.lent != 0 || e.lentTok != 0) && (!p.sliced || !e.configured) {
			return fmt.Errorf("entry %q: loan %d/%d (sliced %v, configured %v)", e.name, e.lent, e.lentTok, p.sliced, e.configured)
		}
		if !(e.usage >= 0 && e.usage <= maxUsage) || !(e.estimate >= 0 && e.estimate <= maxUsage) {
			return fmt.Errorf("entry %q: usage %v estimate %v", e.name, e.usage, e.estimate)
		}
		if !(e.penalty >= 0 && e.penalty <= maxUsage) {
			return fmt.Errorf("entry %q: penalty %v, usage %v", e.name, e.penalty, e.usage)
		}
		if !(e.weight >= minWeight && e.weight <= maxWeight) || !(e.share >= 0) || math.IsInf(e.share, 0) {
			return fmt.Errorf("entry %q: weight %v share %v", e.name, e.weight, e.share)
		}
		sumReserved += e.reserved
		pw, pb := 0, 0
		for k, g := range e.phantoms {
			if g.within < 0 || g.borrowing < 0 || g.within+g.borrowing == 0 {
				return fmt.Errorf("entry %q: bad phantom group %+v", e.name, g)
			}
			if k > 0 && g.until <= e.phantoms[k-1].until {
				return fmt.Errorf("entry %q: phantom groups out of order", e.name)
			}
			if g.until < p.phantomMin {
				return fmt.Errorf("entry %q: phantom until %d before phantomMin %d", e.name, g.until, p.phantomMin)
			}
			pw += g.within
			pb += g.borrowing
		}
		if pw != e.pWithin || pb != e.pBorrowing {
			return fmt.Errorf("entry %q: phantoms %d/%d, groups sum %d/%d", e.name, e.pWithin, e.pBorrowing, pw, pb)
		}
		// Tokens: phantom groups' sums, none without requests.
		var pwt, pbt int64
		for _, g := range e.phantoms {
			if g.wTok < 0 || g.bTok < 0 || g.within == 0 && g.wTok != 0 || g.borrowing == 0 && g.bTok != 0 {
				return fmt.Errorf("entry %q: bad phantom tokens %+v", e.name, g)
			}
			pwt += g.wTok
			pbt += g.bTok
		}
		if pwt != e.pwTok || pbt != e.pbTok {
			return fmt.Errorf("entry %q: phantom tokens %d/%d, groups sum %d/%d", e.name, e.pwTok, e.pbTok, pwt, pbt)
		}
		// Limits as applied.
		if !(e.lend >= 0 && e.lend <= 1) || !(e.borrowLim >= 0 && e.borrowLim <= 1) ||
			!e.configured && (e.lend != 1 || e.borrowLim != 1 || e.resTok != 0) {
			return fmt.Errorf("entry %q: lend %v borrow %v resTok %d", e.name, e.lend, e.borrowLim, e.resTok)
		}
		if e.keepSeq < 0 || e.keepSeq > e.reserved || e.keepTok < 0 || e.keepTok > e.resTok ||
			e.lend == 1 && (e.keepSeq != 0 || e.keepTok != 0) || e.lend == 0 && (e.keepSeq != e.reserved || e.keepTok != e.resTok) {
			return fmt.Errorf("entry %q: kept %d/%d of reservation %d/%d (lend %v)", e.name, e.keepSeq, e.keepTok, e.reserved, e.resTok, e.lend)
		}
		if (e.borrowLim == 1) != (e.limSeq < 0) || (e.borrowLim == 1) != (e.limTok < 0) ||
			e.limSeq > p.capacity || e.limTok > p.kvCap() {
			return fmt.Errorf("entry %q: borrowing limit %v gives %d/%d", e.name, e.borrowLim, e.limSeq, e.limTok)
		}
		sumResTok += e.resTok
	}
	if sumResTok > p.kvCap() {
		return fmt.Errorf("Σ reserved tokens = %d > K = %d", sumResTok, p.kvCap())
	}
	if p.sliced && (p.sliceTok > p.kvTokens || p.capacity > p.cfgCapacity) {
		return fmt.Errorf("slice %d sequences, %d tokens beyond the pool's %d, %d", p.capacity, p.sliceTok, p.cfgCapacity, p.kvTokens)
	}
	tokShares := map[string]float64{}
	tokNames := make([]string, p.configured)
	for i := range p.configured {
		tokNames[i] = p.teams[i].name
		tokShares[p.teams[i].name] = p.teams[i].share
	}
	wantTok := apportionMap(int(p.kvTokens), tokNames, tokShares)
	for i := range p.configured {
		if p.sliced {
			break // a slice's reservations are set, not apportioned
		}
		if got := p.teams[i].resTok; got != int64(wantTok[p.teams[i].name]) {
			return fmt.Errorf("resTok[%q] = %d, Apportion gives %d", p.teams[i].name, got, wantTok[p.teams[i].name])
		}
	}
	if p.usageAt > p.now {
		return fmt.Errorf("usage time %d after the stamp %d", p.usageAt, p.now)
	}
	if sumReserved > p.capacity {
		return fmt.Errorf("Σ reserved = %d > C = %d", sumReserved, p.capacity)
	}
	// Reservations are Apportion of the configured shares.
	names2 := make([]string, p.configured)
	shares := map[string]float64{}
	for i := range p.configured {
		names2[i] = p.teams[i].name
		shares[p.teams[i].name] = p.teams[i].share
	}
	want := apportionMap(p.capacity, names2, shares)
	for i := range p.configured {
		if p.sliced {
			break
		}
		if got := p.teams[i].reserved; got != want[p.teams[i].name] {
			return fmt.Errorf("reserved[%q] = %d, Apportion gives %d", p.teams[i].name, got, want[p.teams[i].name])
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
	within := make([]int, len(p.teams))
	borrowing := make([]int, len(p.teams))
	wTok := make([]int64, len(p.teams))
	bTok := make([]int64, len(p.teams))
	for k := range p.holders {
		h := &p.holders[k]
		if k > 0 && h.id <= p.holders[k-1].id {
			return fmt.Errorf("holders out of order at %d", k)
		}
		for j, c := range h.counts {
			if c.team < 0 || c.team >= len(p.teams) || c.within < 0 || c.borrowing < 0 || c.within+c.borrowing == 0 {
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
			if c.wTok < 0 || c.bTok < 0 || c.within == 0 && c.wTok != 0 || c.borrowing == 0 && c.bTok != 0 {
				return fmt.Errorf("holder %d: bad count tokens %+v", h.id, c)
			}
			within[c.team] += c.within
			borrowing[c.team] += c.borrowing
			wTok[c.team] += c.wTok
			bTok[c.team] += c.bTok
		}
	}
	for i := range p.teams {
		if within[i] != p.teams[i].within || borrowing[i] != p.teams[i].borrowing {
			return fmt.Errorf("entry %q: in flight %d/%d, holders sum %d/%d", p.teams[i].name,
				p.teams[i].within, p.teams[i].borrowing, within[i], borrowing[i])
		}
		if wTok[i] != p.teams[i].wTok || bTok[i] != p.teams[i].bTok {
			return fmt.Errorf("entry %q: tokens in flight %d/%d, holders sum %d/%d", p.teams[i].name,
				p.teams[i].wTok, p.teams[i].bTok, wTok[i], bTok[i])
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
		if w.tokens < 0 || w.tokens > p.kvTokens || !(w.estimate >= 0 && w.estimate <= maxUsage) || w.class != clampClass(w.class) {
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
	fmt.Fprintf(&b, "name=%q fp=%x C=%d/%d hl=%v ht=%v rt=%v pen=%v now=%d usageAt=%d configured=%d epochs=%d\n",
		p.name, p.fp, p.cfgCapacity, p.capacity, p.halfLife, p.holderTimeout, p.requestTimeout,
		p.entryPenalty, p.now, p.usageAt, p.configured, p.epochs)
	fmt.Fprintf(&b, "K=%d queue=%d/%d maxQueueTime=%v\n", p.kvTokens, p.queueLimit, p.teamQueueLimit, p.maxQueueTime)
	for _, e := range p.teams {
		fmt.Fprintf(&b, "  %q epoch=%d share=%v w=%v res=%d conf=%v in=%d/%d ph=%d/%d est=%v use=%v pen=%v upd=%v@%d groups=%v\n",
			e.name, e.epoch, e.share, e.weight, e.reserved, e.configured, e.within, e.borrowing, e.pWithin, e.pBorrowing,
			e.estimate, e.usage, e.penalty, e.updated, e.lastUpdate, e.phantoms)
		fmt.Fprintf(&b, "    resTok=%d lend=%v keep=%d/%d borrowLim=%v lim=%d/%d tok=%d/%d ptok=%d/%d waiting=%d\n",
			e.resTok, e.lend, e.keepSeq, e.keepTok, e.borrowLim, e.limSeq, e.limTok, e.wTok, e.bTok, e.pwTok, e.pbTok, e.waiting)
	}
	for _, h := range p.holders {
		fmt.Fprintf(&b, "  holder %d seen=%d counts=%v waits=%d\n", h.id, h.seen, h.counts, h.waits)
	}
	for _, w := range p.waits {
		fmt.Fprintf(&b, "  wait %+v\n", w)
	}
	return b.String()
}
