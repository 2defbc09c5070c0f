package fairshare

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"slices"
	"time"
)

// The record codec: one pool's state as a compact, versioned byte string,
// decoded and encoded by every worker on every request.
//
// Layout of version 7 (uvarint as encoding/binary; u32le/i64le are fixed
// width little endian; times are unix nanoseconds; f64 is an IEEE 754
// float64, little endian). Every per-resource value is a list: one value
// per declared kind (resources.go), in list order (sequences, KV tokens,
// work), the kinds the static section declares; a kind not declared has
// nothing anywhere and takes no byte. Work is not an amount in flight:
// holder counts and phantom groups carry the counted kinds only
// (sequences and KV tokens), and a team's work use is its debt.
//
//	u8       version = 7
//	uvarint  length of the static section, then the static section:
//	  u8       flags: bit 0 EntryPenalty, bit 1 flow control, bit 2 slice,
//	           bit 3 loans, bit 4 users, bit 5 the slice's totals
//	  u64le    fingerprint of the configuration applied
//	  uvarint  len(name), name bytes
//	  u8       declared kinds: bit k for kind k (bit 0, sequences, always;
//	           bit 1, KV tokens, when K > 0; bit 2, work, when X > 0)
//	  per declared kind: uvarint configured capacity (C, K, X), live
//	           capacity (SetCapacity's C, K, X, or the slice's; equal to
//	           the configured one but for sequences on a pool not sliced)
//	  uvarint  work buckets' depth B (ns, > 0)  (work declared)
//	  uvarint  half-life, holder timeout, request timeout (ns)
//	  uvarint  queue limit, team queue limit,   (flag bit 1)
//	           max queue time (ns)
//	  uvarint  epochs (entries created so far)
//	  uvarint  number of entries, then per entry:
//	    u8       flags: 1 configured, 2 weight≠1, 4 lending limit,
//	             8 borrowing limit, 64 UnknownTeam
//	    uvarint  len(name), name bytes        (absent for UnknownTeam)
//	    uvarint  epoch (< epochs)
//	    f64      share                        (configured only)
//	    f64      weight                       (flag 2)
//	    f64      lending limit                (flag 4)
//	    f64      borrowing limit              (flag 8)
//	  per configured entry, per declared kind:  (flag bit 2)
//	           uvarint the slice's reservation (work: derived from
//	           its sequences, slice.go)
//	  per configured entry, per declared kind:  (flag bit 3, with bit 2)
//	           uvarint the loan (a replica's loans, lend.go)
//	  uvarint  the capacity of the totals the     (flag bit 5, with bit 2)
//	           slice was cut from (≤ C), then their
//	           throughput (≤ X, work declared)
//	           (SetSliceOf, slice.go)
//	  the user level's bounds and user shares  (flag bit 4, usercodec.go)
//	i64le    stamp: the latest time the pool has seen
//	i64le    usage time
//	per entry, in the order of the static section:
//	  u8       flags: 2 debt, 4 usage, 8 last update, 16 estimate,
//	           32 phantoms, 128 penalty
//	  f64      consumption settled            (flag 4)
//	  f64      in-flight estimate             (flag 16)
//	  f64      penalties not settled          (flag 128)
//	  i64le    last update                    (flag 8)
//	  f64      work debt, in (0, 2^200]       (flag 2, work declared)
//	  uvarint  groups, then per group:        (flag 32)
//	           i64le until; per declared counted kind: uvarint
//	           within, borrowing
//	uvarint  number of holders, then per holder, ids ascending:
//	  u32le    id
//	  i64le    last seen
//	  uvarint  entries, then per entry ((team, window) ascending):
//	           uvarint team index;
//	           uvarint zigzag(window(stamp) − window)·2 + (1 if more);
//	           uvarint within, borrowing (sequences);
//	           per declared counted kind after sequences: uvarint
//	           within, borrowing                    (if more: one is not 0)
//	uvarint  number of waiting requests, then per request, in queue order
//	         (arrival, holder id, request id ascending):
//	  uvarint  holder index (in the holders above)
//	  uvarint  team index (configured or UnknownTeam)
//	  u8       flags: 1 Batch, 2 estimate, 4 demand beyond a sequence
//	  uvarint  request id
//	  uvarint  arrival: stamp − arrival for the first, arrival − the
//	           previous arrival for the others
//	  per declared kind after sequences:      (flag 4: one is not 0)
//	           uvarint demand (tokens ≤ K, work ≤ 2^40)
//	  f64      estimate                       (flag 2)
//	the users trailer                         (flag bit 4, usercodec.go)
//
// Version 7 is version 6 with the totals a slice was cut from (flag bit
// 5: SetSliceOf, for a slice whose work follows totals other than the
// configured ones): a pool without them writes version 6's bytes after
// the version byte, and a version-6 record decodes as the version-7
// record of the same bytes (the one layout this decoder reads besides
// its own: nothing to translate).
//
// Version 6 is version 5 with the user level (users.go): a pool without
// it writes version 5's bytes after the version byte.
//
// Version 4 wrote the same values with the two kinds spelt out: K under
// the flow-control flag, the slice's K before the reservations, and a
// phantom group's tokens even without a KV resource. On a pool of both
// kinds version 5 is version 4's bytes plus the kinds byte and the live
// K; on a pool of sequences alone it drops two bytes per phantom group.
// The work resource (X, B, the debts, the work demands) came with
// version 5 before it was released: a pool without it writes the bytes
// version 5 wrote before.
//
// A waiting request takes 9 to 14 bytes (a request id below 2^14, a
// gap between arrivals below 34 s, under 2^21 tokens), 8 more with an
// estimate: 17 to 22 bytes as the plugin fills them, 18 in
// TestRecordSize (1 ms apart). Holders are named by their index (one
// byte) rather than their id (four).
//
// The team's usage is the sum of the two floats (flags 4 and 128).
//
// Only versions 7 and 6 (its subset, read by the same code) are
// decoded: a record of any other version is refused with
// ErrUnknownVersion. No decoder of an older layout is kept, because
// none could ever run: the plugin keeps the record's version in its
// shared-data key ("<plugin>/fairshare/pool/<pool>/v<RecordVersion>",
// plugin/store.go), so a VM only ever reads records of its own version.
// A new layout gets a new version and so a new key; the records of older
// versions are left to expire: once the VMs that wrote them are gone,
// nothing reads or writes them (during a rolling upgrade each layout
// keeps its own record).
//
// The static section holds what changes only with the configuration
// (Reconfigure, SetCapacity) or when an entry comes or goes. A Pool keeps
// the bytes of the static section it last decoded or encoded: when the
// next record carries the same bytes, decoding skips them (no name, share
// or reservation is touched), and encoding copies them.
//
// A Pool also keeps a copy of the record it last encoded, valid until any
// operation changes it: decoding those very bytes again (the record read
// back by the VM that wrote it, no other VM having written since) costs
// one comparison and changes nothing.
//
// Requests in flight per team are not stored: they are the sums of the
// holders' counts, so the two can never disagree. Nor are reservations:
// they follow from the capacity and the shares (largest remainder,
// apportion.go), recomputed when the static section changes. Entries are in pool order (configured,
// removed, UnknownTeam last). A record of 100 teams and 64 holders
// (TestRecordSize: 8-character names, usage, penalties and estimates on
// every team, three teams per holder, ten phantom groups) takes 6,975
// bytes (6,994 in version 4). A pool of 32 teams with 128 requests in
// flight carrying KV tokens takes 2,849 bytes (2,845), and 18 more per
// waiting request (12,068 with 512 waiting; TestRecordSize). The work
// resource adds X twice and B to the static section (11 bytes for X =
// 32,000 and B = 5 s), 8 bytes per team in debt and a work demand's
// varint per waiting request (2 bytes below 2^14): the same pool with 64
// waiting takes 4,398 bytes against 4,003.

// RecordVersion is the version of the record layout written by
// AppendBinary. A writer that does not know a record's version cannot
// update it without losing its state, so when writers of different
// versions may share a store (a rolling upgrade of the plugin), keep the
// version in the record's key: each version then updates its own record.
const RecordVersion = 7

// recordVersion is RecordVersion, as the codec's internal name.
const recordVersion = RecordVersion

// recordVersion6 is the layout version 7 extends: its records decode as
// version 7's of the same bytes (see above).
const recordVersion6 = 6

// ErrUnknownVersion is returned by UnmarshalBinary for a record written by
// a version of the codec this package does not know (or an empty one):
// rebuild the record from the configuration.
var ErrUnknownVersion = errors.New("fairshare: unknown record version")

// Entry flags (static and dynamic flags share one numbering).
const (
	flagConfigured = 1 << iota
	flagWeight
	flagUsage
	flagLastUpdate
	flagEstimate
	flagPhantoms
	flagUnknown
	flagPenalty

	flagsStatic  = flagConfigured | flagWeight | flagUnknown
	flagsDynamic = flagUsage | flagLastUpdate | flagEstimate | flagPhantoms | flagPenalty | flagDebt

	// Static entry flags (bits the dynamic flags use), as in version 4.
	flagLending   = flagUsage
	flagBorrowing = flagLastUpdate
	flagsStatic4  = flagsStatic | flagLending | flagBorrowing

	// flagDebt is the dynamic flag of a work debt (a bit the static
	// flags use).
	flagDebt = flagWeight
)

// maxDemand bounds a waiting request's demand in kind k of a pool of
// capacities total: K for tokens (a token demand is clamped to K), 2^40
// for work (a request may cost more than a second of the pool's work).
func maxDemand(total amounts, k kind) int64 {
	if k == kindWork {
		return maxWork
	}
	return total[k]
}

// Static flags of the pool and of waiting requests.
const (
	poolPenalty = 1
	poolFlow    = 2
	poolSliced  = 4
	poolLent    = 8  // a replica's loans (lend.go), after the slice
	poolUsers   = 16 // the user level (users.go): its bounds, user shares and the users trailer
	poolWhole   = 32 // the totals the slice was cut from (SetSliceOf), after the loans

	waitBatch    = 1
	waitEstimate = 2
	waitTokens   = 4
)

func appendF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// invalidate marks the cached static section stale; every change to the
// configuration, the capacity or the set of entries calls it.
func (p *Pool) invalidate() { p.staticOK, p.lastOK = false, false }

// appendStatic appends the static section of p to b.
func (p *Pool) appendStatic(b []byte) []byte {
	var flags byte
	if p.entryPenalty {
		flags |= poolPenalty
	}
	flow := p.queueLimit != 0 || p.teamQueueLimit != 0 || p.maxQueueTime != 0
	if flow {
		flags |= poolFlow
	}
	lent := false
	if p.sliced {
		flags |= poolSliced
		for i := range p.configured {
			lent = lent || !p.teams[i].lent.isZero()
		}
		if lent {
			flags |= poolLent
		}
		if p.wholeSet {
			flags |= poolWhole
		}
	}
	if p.users {
		flags |= poolUsers
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, p.fp)
	b = binary.AppendUvarint(b, uint64(len(p.name)))
	b = append(b, p.name...)
	decl := p.declared()
	b = append(b, byte(decl))
	for k := range numKinds {
		if decl.has(k) {
			b = binary.AppendUvarint(b, uint64(p.total[k]))
			b = binary.AppendUvarint(b, uint64(p.live[k]))
		}
	}
	if decl.has(kindWork) {
		b = binary.AppendUvarint(b, uint64(p.burst))
	}
	b = binary.AppendUvarint(b, uint64(p.halfLife))
	b = binary.AppendUvarint(b, uint64(p.holderTimeout))
	b = binary.AppendUvarint(b, uint64(p.requestTimeout))
	if flow {
		b = binary.AppendUvarint(b, uint64(p.queueLimit))
		b = binary.AppendUvarint(b, uint64(p.teamQueueLimit))
		b = binary.AppendUvarint(b, uint64(p.maxQueueTime))
	}
	b = binary.AppendUvarint(b, p.epochs)
	b = binary.AppendUvarint(b, uint64(len(p.teams)))
	for i := range p.teams {
		e := &p.teams[i]
		var f byte
		if e.configured {
			f |= flagConfigured
		}
		if e.weight != 1 {
			f |= flagWeight
		}
		if e.name == UnknownTeam {
			f |= flagUnknown
		}
		if e.configured && e.lend < 1 {
			f |= flagLending
		}
		if e.configured && e.borrowLim < 1 {
			f |= flagBorrowing
		}
		b = append(b, f)
		if f&flagUnknown == 0 {
			b = binary.AppendUvarint(b, uint64(len(e.name)))
			b = append(b, e.name...)
		}
		b = binary.AppendUvarint(b, e.epoch)
		if f&flagConfigured != 0 {
			b = appendF64(b, e.share)
		}
		if f&flagWeight != 0 {
			b = appendF64(b, e.weight)
		}
		if f&flagLending != 0 {
			b = appendF64(b, e.lend)
		}
		if f&flagBorrowing != 0 {
			b = appendF64(b, e.borrowLim)
		}
	}
	if p.sliced {
		for i := range p.configured {
			b = appendAmounts(b, decl, &p.teams[i].res)
		}
		if lent {
			for i := range p.configured {
				b = appendAmounts(b, decl, &p.teams[i].lent)
			}
		}
		if p.wholeSet {
			b = binary.AppendUvarint(b, uint64(p.whole[kindSeq]))
			if decl.has(kindWork) {
				b = binary.AppendUvarint(b, uint64(p.whole[kindWork]))
			}
		}
	}
	if p.users {
		b = p.appendUserStatic(b)
	}
	return b
}

// appendAmounts appends a's value in every kind of decl, in list order.
func appendAmounts(b []byte, decl kinds, a *amounts) []byte {
	for k := range numKinds {
		if decl.has(k) {
			b = binary.AppendUvarint(b, uint64(a[k]))
		}
	}
	return b
}

// AppendBinary appends the record of p to b and returns it (see the layout
// above). It never fails; the error is there for encoding.BinaryAppender.
// p keeps a copy of the record for UnmarshalBinary. Cost: O(size of the
// record); no allocation when b has room and the static section and the
// copy are cached (the record did not grow). b is first grown to hold a
// bound of the entries' and holders' part (dynamicBound, about twice its
// size) past its length, so that they are written in place (in Wasm every
// append costs a call site); a nil b gets a buffer of that size.
func (p *Pool) AppendBinary(b []byte) ([]byte, error) {
	if !p.staticOK {
		p.static = p.appendStatic(p.static[:0])
		p.staticOK = true
	}
	st := p.now
	start := len(b)
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(len(p.static)))
	b = append(b, p.static...)
	b = le.AppendUint64(b, uint64(st))
	b = le.AppendUint64(b, uint64(p.usageAt))
	b = p.appendDynamicFast(slices.Grow(b, p.dynamicBound()), st)
	decl := p.declared()
	b = binary.AppendUvarint(b, uint64(len(p.waits)))
	prev := st
	for k := range p.waits {
		w := &p.waits[k]
		var f byte
		if w.class == Batch {
			f |= waitBatch
		}
		if w.estimate != 0 {
			f |= waitEstimate
		}
		d := w.demand()
		if !d.restZero() {
			f |= waitTokens
		}
		hi := p.findHolder(w.holder)
		if uint(hi) < 0x80 && uint(w.team) < 0x80 {
			b = append(b, byte(hi), byte(w.team), f)
		} else {
			b = binary.AppendUvarint(b, uint64(hi))
			b = binary.AppendUvarint(b, uint64(w.team))
			b = append(b, f)
		}
		b = binary.AppendUvarint(b, w.id)
		if k == 0 {
			b = binary.AppendUvarint(b, uint64(st)-uint64(w.arrival))
		} else {
			b = binary.AppendUvarint(b, uint64(w.arrival)-uint64(prev))
		}
		prev = w.arrival
		if f&waitTokens != 0 {
			for r := kindSeq + 1; r < numKinds; r++ {
				if decl.has(r) {
					b = binary.AppendUvarint(b, uint64(d[r]))
				}
			}
		}
		if f&waitEstimate != 0 {
			b = le.AppendUint64(b, math.Float64bits(w.estimate))
		}
	}
	if p.users {
		b = p.appendUsers(b, st)
	}
	p.last = append(p.last[:0], b[start:]...)
	p.lastOK = true
	return b, nil
}

// flags returns the flag byte that says which of e's dynamic fields the
// record carries. Small enough to be inlined, so the in-place writer's
// loop keeps no call site.
func (e *entry) flags() byte {
	var f byte
	if e.usage != 0 {
		f |= flagUsage
	}
	if e.updated {
		f |= flagLastUpdate
	}
	if e.estimate != 0 {
		f |= flagEstimate
	}
	if len(e.phantoms) > 0 {
		f |= flagPhantoms
	}
	if e.penalty != 0 {
		f |= flagPenalty
	}
	if e.debt != 0 {
		f |= flagDebt
	}
	return f
}

// dynamicBound is an upper bound on the bytes appendDynamicFast writes.
func (p *Pool) dynamicBound() int {
	const v = binary.MaxVarintLen64
	n := 41*len(p.teams) + v
	for i := range p.teams {
		if k := len(p.teams[i].phantoms); k > 0 {
			n += v + k*(8+2*int(numKinds)*v)
		}
	}
	for i := range p.holders {
		n += 12 + v + (2+2*int(numKinds))*v*len(p.holders[i].counts)
	}
	return n
}

// appendDynamicFast appends the entries' dynamic fields and the holders
// of p to b (the part of the record between the usage time and the waiting
// requests). b must have room for dynamicBound bytes past its length: it
// writes in place rather than appending, and so makes no call in its loops. In Wasm, Go saves and reloads the live values around a call
// site, append's included, and splits the function at it.
func (p *Pool) appendDynamicFast(b []byte, st int64) []byte {
	cnt := p.declared() & counted
	n := len(b)
	w := b[:cap(b)]
	for i := range p.teams {
		e := &p.teams[i]
		f := e.flags()
		w[n] = f
		n++
		if f&flagUsage != 0 {
			le.PutUint64(w[n:], math.Float64bits(e.usage))
			n += 8
		}
		if f&flagEstimate != 0 {
			le.PutUint64(w[n:], math.Float64bits(e.estimate))
			n += 8
		}
		if f&flagPenalty != 0 {
			le.PutUint64(w[n:], math.Float64bits(e.penalty))
			n += 8
		}
		if f&flagLastUpdate != 0 {
			le.PutUint64(w[n:], uint64(e.lastUpdate))
			n += 8
		}
		if f&flagDebt != 0 {
			le.PutUint64(w[n:], math.Float64bits(e.debt))
			n += 8
		}
		if f&flagPhantoms != 0 {
			n += binary.PutUvarint(w[n:], uint64(len(e.phantoms)))
			for _, g := range e.phantoms {
				le.PutUint64(w[n:], uint64(g.until))
				n += 8
				for k := range numCounted {
					if cnt.has(kind(k)) {
						n += binary.PutUvarint(w[n:], uint64(g.within[k]))
						n += binary.PutUvarint(w[n:], uint64(g.borrowing[k]))
					}
				}
			}
		}
	}
	n += binary.PutUvarint(w[n:], uint64(len(p.holders)))
	cur := p.window(st)
	for i := range p.holders {
		h := &p.holders[i]
		le.PutUint32(w[n:], h.id)
		le.PutUint64(w[n+4:], uint64(h.seen))
		n += 12
		n += binary.PutUvarint(w[n:], uint64(len(h.counts)))
		for _, c := range h.counts {
			dg := cur - c.gen // 0 or 1 in a consistent record
			tok := !c.within.restZero() || !c.borrowing.restZero()
			cw, cb := c.within[kindSeq], c.borrowing[kindSeq]
			if uint(c.team) < 0x80 && uint64(dg) < 0x20 && uint64(cw) < 0x80 && uint64(cb) < 0x80 {
				le.PutUint32(w[n:], uint32(c.team)|uint32(byte(dg<<2)|byte(boolInt(tok)))<<8|
					uint32(cw)<<16|uint32(cb)<<24)
				n += 4
			} else {
				z := uint64(dg<<1) ^ uint64(dg>>63) // zigzag
				n += binary.PutUvarint(w[n:], uint64(c.team))
				n += binary.PutUvarint(w[n:], z<<1|uint64(boolInt(tok)))
				n += binary.PutUvarint(w[n:], uint64(cw))
				n += binary.PutUvarint(w[n:], uint64(cb))
			}
			if tok {
				for k := 1; k < numCounted; k++ {
					if cnt.has(kind(k)) {
						n += binary.PutUvarint(w[n:], uint64(c.within[k]))
						n += binary.PutUvarint(w[n:], uint64(c.borrowing[k]))
					}
				}
			}
		}
	}
	return w[:n]
}

// le is the byte order of the record's fixed-width fields.
var le = binary.LittleEndian

// decoder reads a record; the first error sticks (and every later read
// returns zero values).
type decoder struct {
	b   []byte
	off int
	err error
}

var (
	errTruncated = errors.New("fairshare: record truncated")
	errCorrupt   = errors.New("fairshare: record corrupt")
)

// left returns the number of bytes not read yet.
func (d *decoder) left() int { return len(d.b) - d.off }

//go:noinline
func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.off = len(d.b)
}

func (d *decoder) byte() byte {
	if d.off < len(d.b) {
		c := d.b[d.off]
		d.off++
		return c
	}
	d.fail(errTruncated)
	return 0
}

func (d *decoder) uvarint() uint64 {
	if o := d.off; o < len(d.b) && d.b[o] < 0x80 {
		d.off = o + 1
		return uint64(d.b[o])
	}
	return d.uvarintLong()
}

// uvarintLong is uvarint for values of more than one byte (and errors).
func (d *decoder) uvarintLong() uint64 {
	var x uint64
	var sh uint
	for i := d.off; i < len(d.b); i++ {
		c := d.b[i]
		if c < 0x80 {
			if i-d.off == binary.MaxVarintLen64-1 && c > 1 {
				break // overflows 64 bits
			}
			d.off = i + 1
			return x | uint64(c)<<sh
		}
		if i-d.off == binary.MaxVarintLen64-1 {
			break
		}
		x |= uint64(c&0x7f) << sh
		sh += 7
	}
	d.fail(errTruncated)
	return 0
}

// bounded reads a uvarint that must not exceed max.
func (d *decoder) bounded(max uint64) int {
	v := d.uvarint()
	if v > max {
		d.fail(errCorrupt)
		return 0
	}
	return int(v)
}

func (d *decoder) u64() uint64 {
	if d.left() < 8 {
		d.fail(errTruncated)
		return 0
	}
	d.off += 8
	return binary.LittleEndian.Uint64(d.b[d.off-8:])
}

// amounts reads a's value in every kind of decl, each at most max's
// (appendAmounts); the others are set to 0.
func (d *decoder) amounts(decl kinds, a, max *amounts) {
	for k := range numKinds {
		a[k] = 0
		if decl.has(k) {
			a[k] = int64(d.bounded(uint64(max[k])))
		}
	}
}

// f64 reads a float that must be finite and within [lo, hi].
func (d *decoder) f64(lo, hi float64) float64 {
	if o := d.off; o+8 <= len(d.b) {
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.b[o:]))
		if f >= lo && f <= hi {
			d.off = o + 8
			return f
		}
	}
	return d.f64Fail()
}

//go:noinline
func (d *decoder) f64Fail() float64 {
	if d.left() < 8 {
		d.fail(errTruncated)
	} else {
		d.fail(errCorrupt)
	}
	return 0
}

// str reads a length-prefixed byte string (a view into the input).
func (d *decoder) str() []byte {
	n := d.uvarint()
	if n > uint64(d.left()) {
		d.fail(errTruncated)
		return nil
	}
	d.off += int(n)
	return d.b[d.off-int(n) : d.off]
}

// setString sets *s to b, allocating only if the text differs.
func setString(s *string, b []byte) bool {
	if *s == string(b) {
		return false
	}
	*s = string(b)
	return true
}

// UnmarshalBinary replaces p's state with the record data, reusing p's
// memory: when the static section (configuration and entry names) is the
// one p last decoded or encoded, it is skipped, and otherwise no string is
// allocated for a name that is unchanged; slices only grow. Any input
// either decodes or returns an error; it never panics, and allocation is
// bounded by a small multiple of len(data) (every count is checked against
// the bytes left before anything is allocated). A record of another
// version returns ErrUnknownVersion; a malformed one another error. On
// error p is left empty (no teams, no holders, capacity 0) but usable.
// When data is the record p last encoded and no operation has changed p
// since, it returns at once (one comparison). Only records of
// RecordVersion are read (see the layout above for why). Cost:
// O(len(data)), plus O(n log n) name comparisons when the names change.
func (p *Pool) UnmarshalBinary(data []byte) error {
	if p.lastOK && equalBytes(data, p.last) {
		return nil // p is the record it encoded last, unchanged since
	}
	p.lastOK = false
	if err := p.decode(data); err != nil {
		p.clear()
		return err
	}
	return nil
}

// clear empties p, keeping its buffers.
func (p *Pool) clear() {
	p.name, p.fp = "", 0
	p.total, p.live = amounts{}, amounts{}
	p.whole, p.wholeSet = amounts{}, false
	p.burst = 0
	p.halfLife, p.holderTimeout, p.requestTimeout = 0, 0, 0
	p.entryPenalty = false
	p.users, p.maxUsers, p.userActive, p.userIdle = false, 0, 0, 0
	p.queueLimit, p.teamQueueLimit, p.maxQueueTime = 0, 0, 0
	p.waits = p.waits[:0]
	p.now, p.usageAt, p.phantomMin, p.epochs = 0, 0, math.MaxInt64, 0
	p.genMin = math.MinInt64
	p.teams = p.teams[:0]
	p.configured = 0
	p.index = p.index[:0]
	p.holders = p.holders[:0]
	p.invalidate()
}

func (p *Pool) decode(data []byte) error {
	if len(data) == 0 || data[0] != recordVersion && data[0] != recordVersion6 {
		return ErrUnknownVersion
	}
	d := decoder{b: data[1:]}
	size := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if size > uint64(d.left()) {
		return errTruncated
	}
	static := d.b[d.off : d.off+int(size)]
	d.off += int(size)
	if !p.staticOK || !equalBytes(static, p.static) {
		p.invalidate()
		if err := p.decodeStatic(static); err != nil {
			return err
		}
		p.static = append(p.static[:0], static...)
		p.staticOK = true
	}
	return p.decodeDynamic(&d)
}

// decodeStatic reads the static section.
func (p *Pool) decodeStatic(data []byte) error {
	d := decoder{b: data}
	flags := d.byte()
	if flags&^(poolPenalty|poolFlow|poolSliced|poolLent|poolUsers|poolWhole) != 0 || flags&(poolLent|poolWhole) != 0 && flags&poolSliced == 0 {
		return errCorrupt
	}
	p.entryPenalty = flags&poolPenalty != 0
	p.fp = d.u64()
	setString(&p.name, d.str())
	p.sliced = flags&poolSliced != 0
	decl := kinds(d.byte())
	if decl&^allKinds != 0 || !decl.has(kindSeq) {
		return errCorrupt
	}
	p.total, p.live = amounts{}, amounts{}
	for k := range numKinds {
		if !decl.has(k) {
			continue
		}
		p.total[k] = int64(d.bounded(uint64(maxAmount[k])))
		p.live[k] = int64(d.bounded(uint64(maxAmount[k])))
		// A kind other than sequences is declared by its capacity, and
		// only a slice's decides against less than it.
		if k != kindSeq && (p.total[k] == 0 || !p.sliced && p.live[k] != p.total[k]) || p.sliced && p.live[k] > p.total[k] {
			return errCorrupt
		}
	}
	p.burst = 0
	if decl.has(kindWork) {
		p.burst = time.Duration(d.bounded(math.MaxInt64))
		if p.burst == 0 {
			return errCorrupt // the pool applies a positive depth
		}
	}
	p.halfLife = time.Duration(d.bounded(math.MaxInt64))
	p.holderTimeout = time.Duration(d.bounded(math.MaxInt64))
	p.requestTimeout = time.Duration(d.bounded(math.MaxInt64))
	p.queueLimit, p.teamQueueLimit, p.maxQueueTime = 0, 0, 0
	if flags&poolFlow != 0 {
		p.queueLimit = d.bounded(maxQueue)
		p.teamQueueLimit = d.bounded(maxQueue)
		p.maxQueueTime = time.Duration(d.bounded(math.MaxInt64))
	}
	p.epochs = d.uvarint()
	// Every entry takes at least two bytes.
	n := d.bounded(uint64(d.left() / 2))
	if d.err != nil {
		return d.err
	}
	oldLen := len(p.teams)
	renamed := n != oldLen
	if cap(p.teams) < n {
		p.teams = slices.Grow(p.teams[:cap(p.teams)], n-cap(p.teams))
	}
	p.teams = p.teams[:n]
	p.configured = 0
	for i := 0; i < n && d.err == nil; i++ {
		e := &p.teams[i]
		f := d.byte()
		if f&^flagsStatic4 != 0 || f&(flagLending|flagBorrowing) != 0 && f&flagConfigured == 0 {
			return errCorrupt
		}
		if f&flagConfigured != 0 {
			if p.configured != i || f&flagUnknown != 0 {
				return errCorrupt // configured entries come first
			}
			p.configured++
		}
		if f&flagUnknown != 0 {
			if i != n-1 {
				return errCorrupt // UnknownTeam comes last
			}
			if e.name != UnknownTeam {
				e.name = UnknownTeam
				renamed = true
			}
		} else {
			nb := d.str()
			if len(nb) == 0 || string(nb) == UnknownTeam {
				return errCorrupt
			}
			if setString(&e.name, nb) {
				renamed = true
			}
		}
		e.epoch = d.uvarint()
		if e.epoch >= p.epochs {
			return errCorrupt
		}
		e.configured = f&flagConfigured != 0
		e.share = 0
		if e.configured {
			e.share = d.f64(0, maxShare)
		}
		e.weight = 1
		if f&flagWeight != 0 {
			e.weight = d.f64(minWeight, maxWeight)
		}
		e.lend, e.borrowLim = 1, 1
		if f&flagLending != 0 {
			e.lend = d.f64(0, math.Nextafter(1, 0))
		}
		if f&flagBorrowing != 0 {
			e.borrowLim = d.f64(0, math.Nextafter(1, 0))
		}
	}
	for i := range p.teams {
		p.teams[i].lent = amounts{}
	}
	if p.sliced {
		for i := 0; i < p.configured && d.err == nil; i++ {
			d.amounts(decl, &p.teams[i].res, &p.live)
		}
	}
	if flags&poolLent != 0 {
		for i := 0; i < p.configured && d.err == nil; i++ {
			d.amounts(decl, &p.teams[i].lent, &p.total)
		}
	}
	p.whole, p.wholeSet = amounts{}, flags&poolWhole != 0
	if p.wholeSet {
		p.whole[kindSeq] = int64(d.bounded(uint64(p.total[kindSeq])))
		if decl.has(kindWork) {
			p.whole[kindWork] = int64(d.bounded(uint64(p.total[kindWork])))
		}
	}
	if err := p.decodeUserStatic(&d, flags&poolUsers != 0); err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	if d.left() != 0 {
		return errCorrupt
	}
	if renamed || len(p.index) != n-boolInt(p.unknownIndex() >= 0) {
		p.rebuildIndex()
		for k := 1; k < len(p.index); k++ {
			if p.teams[p.index[k]].name == p.teams[p.index[k-1]].name {
				return errCorrupt
			}
		}
	}
	p.reapportion()
	return nil
}

// decodeDynamic reads what follows the static section.
func (p *Pool) decodeDynamic(d *decoder) error {
	b, o := d.b, d.off
	if len(b)-o < 16 {
		return errTruncated
	}
	st := int64(le.Uint64(b[o:]))
	p.now = st
	p.usageAt = int64(le.Uint64(b[o+8:]))
	o += 16
	if p.usageAt > st {
		return errCorrupt // the stamp is the latest time the pool has seen
	}
	p.phantomMin, p.genMin = math.MaxInt64, math.MaxInt64
	for i := range p.teams {
		e := &p.teams[i]
		if o >= len(b) {
			return errTruncated
		}
		f := b[o]
		o++
		if f&^flagsDynamic != 0 {
			return errCorrupt
		}
		// The fixed-width fields, read in one go: when 32 bytes are left,
		// the four slots they may take are read whatever the flags, and
		// each field picks its slot with arithmetic (no branch: in Wasm,
		// Go makes every taken branch a jump through a dispatch table).
		nu, ne, np, nl := int(f>>2&1), int(f>>4&1), int(f>>7&1), int(f>>3&1)
		need := 8 * (nu + ne + np + nl)
		if len(b)-o < need {
			return errTruncated
		}
		var wu, we, wp, wl uint64
		if len(b)-o >= 32 && !slowDecode {
			s := b[o : o+32]
			w0, w1, w2, w3 := le.Uint64(s), le.Uint64(s[8:]), le.Uint64(s[16:]), le.Uint64(s[24:])
			wu, we, wp, wl = w0, w0, w0, w0
			if nu != 0 {
				we = w1
			}
			k := nu + ne
			if k == 1 {
				wp = w1
			}
			if k == 2 {
				wp = w2
			}
			k += np
			if k == 1 {
				wl = w1
			}
			if k == 2 {
				wl = w2
			}
			if k == 3 {
				wl = w3
			}
			wu &= -uint64(nu)
			we &= -uint64(ne)
			wp &= -uint64(np)
			wl &= -uint64(nl)
		} else {
			fb := b[o : o+need]
			if nu != 0 {
				wu, fb = le.Uint64(fb), fb[8:]
			}
			if ne != 0 {
				we, fb = le.Uint64(fb), fb[8:]
			}
			if np != 0 {
				wp, fb = le.Uint64(fb), fb[8:]
			}
			if nl != 0 {
				wl = le.Uint64(fb)
			}
		}
		o += need
		usage, estimate, penalty := math.Float64frombits(wu), math.Float64frombits(we), math.Float64frombits(wp)
		if boolInt(usage >= 0)&boolInt(usage <= maxUsage)&boolInt(estimate >= 0)&boolInt(estimate <= maxUsage)&
			boolInt(penalty >= 0)&boolInt(penalty <= maxUsage) == 0 {
			return errCorrupt
		}
		e.usage, e.estimate, e.penalty = usage, estimate, penalty
		e.updated, e.lastUpdate = nl != 0, int64(wl)
		e.debt = 0
		if f&flagDebt != 0 {
			if len(b)-o < 8 || p.total[kindWork] == 0 {
				return errCorrupt
			}
			e.debt = math.Float64frombits(le.Uint64(b[o:]))
			o += 8
			if !(e.debt > 0 && e.debt <= maxUsage) {
				return errCorrupt
			}
		}
		e.within, e.borrowing, e.pWithin, e.pBorrowing = flight{}, flight{}, flight{}, flight{}
		e.waiting = 0
		e.phantoms = e.phantoms[:0]
		if f&flagPhantoms != 0 {
			d.off = o
			if err := p.decodePhantoms(d, e); err != nil {
				return err
			}
			o = d.off
		}
	}
	d.off = o
	// Every holder takes at least thirteen bytes.
	nh := d.bounded(uint64(d.left() / 13))
	if d.err != nil {
		return d.err
	}
	if cap(p.holders) < nh {
		p.holders = slices.Grow(p.holders[:cap(p.holders)], nh-cap(p.holders))
	}
	p.holders = p.holders[:nh]
	cur := p.window(st)
	k0 := 0
	if !slowDecode {
		k0 = p.decodeHoldersFast(d, cur)
		if d.err != nil {
			return d.err
		}
	}
	for k := k0; k < len(p.holders); k++ {
		h := &p.holders[k]
		if d.left() < 12 {
			return errTruncated
		}
		h.id = le.Uint32(d.b[d.off:])
		h.seen = int64(le.Uint64(d.b[d.off+4:]))
		d.off += 12
		if k > 0 && h.id <= p.holders[k-1].id {
			return errCorrupt
		}
		h.waits = 0
		if err := p.decodeCounts(d, h, cur); err != nil {
			return err
		}
	}
	if err := p.decodeWaits(d, st); err != nil {
		return err
	}
	if err := p.decodeUsers(d, st); err != nil {
		return err
	}
	return p.decodeEnd(d)
}

// decodePhantoms reads the phantom groups of entry e, apart from
// decodeDynamic's loop over the entries: a call in that loop, even one not
// taken, costs every entry in Wasm.
func (p *Pool) decodePhantoms(d *decoder, e *entry) error {
	cnt := p.declared() & counted
	// Every group takes at least ten bytes.
	m := d.bounded(uint64(d.left() / 10))
	if m == 0 && d.err == nil {
		return errCorrupt
	}
	e.phantoms = slices.Grow(e.phantoms, m)
	for k := 0; k < m && d.err == nil; k++ {
		g := phantomGroup{until: int64(d.u64())}
		g.within[kindSeq], g.borrowing[kindSeq] = int64(d.bounded(maxCount)), int64(d.bounded(maxCount))
		for r := 1; r < numCounted; r++ {
			if cnt.has(kind(r)) {
				g.within[r], g.borrowing[r] = int64(d.bounded(uint64(maxAmount[r]))), int64(d.bounded(uint64(maxAmount[r])))
			}
		}
		if g.within[kindSeq] == 0 && g.borrowing[kindSeq] == 0 || k > 0 && g.until <= e.phantoms[k-1].until ||
			g.within[kindSeq] == 0 && !g.within.restZero() || g.borrowing[kindSeq] == 0 && !g.borrowing.restZero() {
			return errCorrupt
		}
		e.phantoms = append(e.phantoms, g)
		e.pWithin = e.pWithin.add(g.within)
		e.pBorrowing = e.pBorrowing.add(g.borrowing)
		if overSum(&e.pWithin) || overSum(&e.pBorrowing) {
			return errCorrupt
		}
	}
	if d.err != nil {
		return d.err
	}
	p.phantomMin = min(p.phantomMin, e.phantoms[0].until)
	return nil
}

// maxTokenSum bounds a team's token sums in a decoded record (each count
// is at most maxTokens, so a sum checked after every addition never
// overflows).
const maxTokenSum = 1 << 60

// overSum reports whether a team's sum a exceeds maxTokenSum in a kind.
func overSum(a *flight) bool {
	for _, x := range a {
		if x > maxTokenSum {
			return true
		}
	}
	return false
}

// decodeWaits reads the waiting requests of a record.
func (p *Pool) decodeWaits(d *decoder, st int64) error {
	// Every waiting request takes at least five bytes.
	n := d.bounded(uint64(d.left() / 5))
	if d.err != nil {
		return d.err
	}
	if n > 0 && (len(p.holders) == 0 || len(p.teams) == 0) {
		return errCorrupt
	}
	if cap(p.waits) < n {
		p.waits = slices.Grow(p.waits[:cap(p.waits)], n-cap(p.waits))
	}
	p.waits = p.waits[:n]
	nh, nt := len(p.holders), len(p.teams)
	decl := p.declared()
	prev := st
	for k := range p.waits {
		w := &p.waits[k]
		var hi, team int
		var f byte
		if o := d.off; len(d.b)-o >= 3 && d.b[o]|d.b[o+1] < 0x80 {
			// Fast path: one-byte holder index and team.
			hi, team, f = int(d.b[o]), int(d.b[o+1]), d.b[o+2]
			d.off = o + 3
		} else {
			hi = d.bounded(uint64(nh - 1))
			team = d.bounded(uint64(nt - 1))
			f = d.byte()
		}
		w.id = d.uvarint()
		delta := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if hi >= nh || team >= nt || f&^(waitBatch|waitEstimate|waitTokens) != 0 {
			return errCorrupt
		}
		// Arrivals ascend and none is after the stamp.
		if k == 0 {
			w.arrival = st - int64(delta)
			if delta > math.MaxInt64 || w.arrival > st || p.deadline(w.arrival) <= st {
				return errCorrupt // wrapped, or past its deadline
			}
		} else {
			if delta > uint64(st)-uint64(prev) {
				return errCorrupt
			}
			w.arrival = prev + int64(delta)
		}
		prev = w.arrival
		w.team = team
		w.holder = p.holders[hi].id
		w.class = Interactive
		if f&waitBatch != 0 {
			w.class = Batch
		}
		w.tokens, w.work, w.estimate = 0, 0, 0
		if f&waitTokens != 0 {
			var dm amounts
			for r := kindSeq + 1; r < numKinds; r++ {
				if decl.has(r) {
					dm[r] = int64(d.bounded(uint64(maxDemand(p.total, r))))
				}
			}
			if dm.restZero() {
				return errCorrupt // the flag is set only for a demand
			}
			w.tokens, w.work = dm[kindTok], dm[kindWork]
		}
		if f&waitEstimate != 0 {
			w.estimate = d.f64(0, maxUsage)
			if w.estimate == 0 {
				return errCorrupt
			}
		}
		if d.err != nil {
			return d.err
		}
		e := &p.teams[team]
		if !e.configured && e.name != UnknownTeam || delta == 0 && k > 0 && compareWaiter(&p.waits[k-1], w) >= 0 {
			return errCorrupt
		}
		e.waiting++
		p.holders[hi].waits++
	}
	return nil
}

// slowDecode turns decodeHoldersFast and the in-one-go read of the
// entries' fixed-width fields off, for the test that compares them with
// the general path.
var slowDecode = false

// decodeHoldersFast reads the holders of a record, from the
// first, as long as each has its twelve bytes, ascends, its count of
// counts and every count take one byte per field and carry no tokens (the
// common case) and its buffer has room for them, with the checks of
// decodeDynamic and decodeCounts. It returns the index of the first
// holder it did not read, d.off at its start, for the general path to
// read; a corrupt count sets d.err to errCorrupt. It makes no call but on
// that error, and decides with arithmetic rather than branches where it
// can: in Wasm, Go compiles every taken branch to a jump through the
// function's dispatch table, and saves live values around a call site.
func (p *Pool) decodeHoldersFast(d *decoder, cur int64) int {
	b, o := d.b, d.off
	n := len(p.teams)
	checkGen := boolInt(p.requestTimeout > 0)
	genMin := p.genMin
	k := 0
	for ; k < len(p.holders); k++ {
		h := &p.holders[k]
		if len(b)-o < 13 || b[o+12] >= 0x80 {
			break
		}
		id := le.Uint32(b[o:])
		if k > 0 && id <= p.holders[k-1].id {
			break
		}
		m := int(b[o+12])
		if m > (len(b)-o-13)/4 {
			break
		}
		body := b[o+13 : o+13+4*m]
		bits := uint32(0)
		for i := 0; i+4 <= len(body); i += 4 {
			bits |= le.Uint32(body[i:])
		}
		if bits&0x80808180 != 0 {
			break // a long varint or the token bit
		}
		if cap(h.counts) < m {
			break // the general path grows the buffer (a call)
		}
		h.id = id
		h.seen = int64(le.Uint64(b[o+4:]))
		h.waits = 0
		o += 13 + 4*m
		counts := h.counts[:m]
		pt, pg := -1, int64(0)
		for j := range counts {
			x := le.Uint32(body[4*j:])
			dg := int64(x>>9) & 0x3f
			team, within, borrowing := int(x&0x7f), int(x>>16&0x7f), int(x>>24)
			gen := cur - (dg>>1 ^ -(dg & 1))
			bad := boolInt(team >= n) | boolInt(within|borrowing == 0) |
				boolInt(pt > team) | boolInt(pt == team)&boolInt(pg >= gen) |
				boolInt(gen > cur) | checkGen&boolInt(gen < cur-1)
			if bad != 0 {
				d.fail(errCorrupt)
				return k
			}
			counts[j] = holderCount{team: team, gen: gen}
			counts[j].within[kindSeq], counts[j].borrowing[kindSeq] = int64(within), int64(borrowing)
			pt, pg = team, gen
			genMin = min(genMin, gen)
			e := &p.teams[team]
			e.within[kindSeq] += int64(within)
			e.borrowing[kindSeq] += int64(borrowing)
		}
		h.counts = h.counts[:m] // no write barrier (a call) for a self-slice
	}
	p.genMin = genMin
	d.off = o
	return k
}

// decodeCounts reads the counts of holder h (with the token bit and
// tokens) and adds them to their teams.
func (p *Pool) decodeCounts(d *decoder, h *holder, cur int64) error {
	n := len(p.teams)
	decl := p.declared() & counted
	// Every count takes at least four bytes.
	m := d.bounded(uint64(d.left() / 4))
	if d.err != nil {
		return d.err
	}
	counts := slices.Grow(h.counts[:0], m)[:m]
	for j := range counts {
		var c holderCount
		if o := d.off; len(d.b)-o >= 4 && le.Uint32(d.b[o:])&0x80808080 == 0 {
			// Fast path: four one-byte varints (the common case), then
			// the tokens if the bit says so.
			x := le.Uint32(d.b[o:])
			dg := int64(x >> 8 & 0x7f)
			tok := dg&1 != 0
			dg >>= 1
			c = holderCount{team: int(x & 0x7f), gen: cur - (dg>>1 ^ -(dg & 1))}
			c.within[kindSeq], c.borrowing[kindSeq] = int64(x>>16&0x7f), int64(x>>24)
			d.off = o + 4
			if tok {
				if err := d.restCount(decl, &c); err != nil {
					return err
				}
			}
		} else {
			c.team = d.bounded(uint64(n))
			z := d.uvarint()
			tok := z&1 != 0
			z >>= 1
			c.gen = cur - (int64(z>>1) ^ -int64(z&1))
			c.within[kindSeq], c.borrowing[kindSeq] = int64(d.bounded(maxCount)), int64(d.bounded(maxCount))
			if tok {
				if err := d.restCount(decl, &c); err != nil {
					return err
				}
			}
			if d.err != nil {
				return d.err
			}
		}
		if c.team >= n || c.within[kindSeq] == 0 && c.borrowing[kindSeq] == 0 || j > 0 && compareCount(counts[j-1], c) >= 0 ||
			c.gen > cur || p.requestTimeout > 0 && c.gen < cur-1 ||
			c.within[kindSeq] == 0 && !c.within.restZero() || c.borrowing[kindSeq] == 0 && !c.borrowing.restZero() {
			return errCorrupt
		}
		counts[j] = c
		p.genMin = min(p.genMin, c.gen)
		e := &p.teams[c.team]
		e.within = e.within.add(c.within)
		e.borrowing = e.borrowing.add(c.borrowing)
		if overSum(&e.within) || overSum(&e.borrowing) {
			return errCorrupt
		}
	}
	h.counts = counts
	return nil
}

// restCount reads the amounts of count c in every counted kind of decl
// after sequences (the count's bit says they follow): at least one is not
// 0.
func (d *decoder) restCount(decl kinds, c *holderCount) error {
	for r := 1; r < numCounted; r++ {
		if decl.has(kind(r)) {
			c.within[r], c.borrowing[r] = int64(d.bounded(uint64(maxAmount[r]))), int64(d.bounded(uint64(maxAmount[r])))
		}
	}
	if d.err != nil {
		return d.err
	}
	if c.within.restZero() && c.borrowing.restZero() {
		return errCorrupt // the bit is set only for amounts beyond sequences
	}
	return nil
}

// decodeEnd checks the end of a record and what holds across sections.
func (p *Pool) decodeEnd(d *decoder) error {
	if d.err != nil {
		return d.err
	}
	if d.left() != 0 {
		return errCorrupt
	}
	// Removed teams are only kept while they have requests in flight.
	for i := p.configured; i < len(p.teams); i++ {
		if e := &p.teams[i]; e.name != UnknownTeam && e.inFlight() == 0 {
			return errCorrupt
		}
	}
	return nil
}

// callLight selects, where they differ, the variant of a routine that
// makes fewer calls and branches: it is set when compiling to Wasm.
const callLight = runtime.GOARCH == "wasm"

// equalBytes reports whether a and b hold the same bytes: bytes.Equal, but
// in Wasm (callLight) equalWords, since there bytes.Equal is a loop over
// single bytes, and the static section and the last record, which every
// decode compares, take hundreds of them.
func equalBytes(a, b []byte) bool {
	if !callLight {
		return bytes.Equal(a, b)
	}
	return equalWords(a, b)
}

// equalWords is equalBytes comparing eight bytes at a time.
func equalWords(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for ; i+8 <= len(a); i += 8 {
		if le.Uint64(a[i:]) != le.Uint64(b[i:]) {
			return false
		}
	}
	for ; i < len(a); i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
