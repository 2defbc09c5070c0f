package fairshare

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// Version 1 of the record (see codec.go): the same static section and,
// like version 2, a usage that includes the penalties; after
// it the stamp is a varint and every other time a varint difference from
// the stamp with wrapping arithmetic. It is only decoded, so that a record
// written by the previous plugin keeps its usage and requests in flight.

// time reads a version 1 time: a wrapping varint difference from stamp.
func (d *decoder) time(stamp int64) int64 {
	return int64(uint64(stamp) + uint64(d.varint()))
}

// decodeDynamicV1 reads what follows the static section in a version 1
// record.
func (p *Pool) decodeDynamicV1(d *decoder) error {
	st := d.varint()
	p.now = st
	p.usageAt = d.time(st)
	if p.usageAt > st {
		return errCorrupt // the stamp is the latest time the pool has seen
	}
	n := len(p.teams)
	p.phantomMin, p.genMin = math.MaxInt64, math.MaxInt64
	for i := 0; i < n && d.err == nil; i++ {
		e := &p.teams[i]
		f := d.byte()
		if f&^flagsDynamic != 0 {
			return errCorrupt
		}
		// The floats, read in one go.
		need := 8 * bits.OnesCount8(f&(flagUsage|flagEstimate|flagPenalty))
		if d.left() < need {
			return errTruncated
		}
		fb := d.b[d.off : d.off+need]
		d.off += need
		e.usage, e.estimate, e.penalty = 0, 0, 0
		if f&flagUsage != 0 {
			e.usage = math.Float64frombits(binary.LittleEndian.Uint64(fb))
			fb = fb[8:]
		}
		if f&flagEstimate != 0 {
			e.estimate = math.Float64frombits(binary.LittleEndian.Uint64(fb))
			fb = fb[8:]
		}
		if f&flagPenalty != 0 {
			e.penalty = math.Float64frombits(binary.LittleEndian.Uint64(fb))
		}
		if !(e.usage >= 0 && e.usage <= maxUsage && e.estimate >= 0 && e.estimate <= maxUsage &&
			e.penalty >= 0 && e.penalty <= e.usage) {
			return errCorrupt
		}
		e.usage -= e.penalty // version 1's usage includes the penalties
		e.updated, e.lastUpdate = f&flagLastUpdate != 0, 0
		if e.updated {
			e.lastUpdate = d.time(st)
		}
		e.within, e.borrowing, e.pWithin, e.pBorrowing = 0, 0, 0, 0
		e.wTok, e.bTok, e.pwTok, e.pbTok, e.waiting = 0, 0, 0, 0, 0
		e.phantoms = e.phantoms[:0]
		if f&flagPhantoms != 0 {
			// Every group takes at least three bytes.
			m := d.bounded(uint64(d.left() / 3))
			if m == 0 && d.err == nil {
				return errCorrupt
			}
			e.phantoms = slices.Grow(e.phantoms, m)
			for k := 0; k < m && d.err == nil; k++ {
				g := phantomGroup{until: d.time(st), within: d.bounded(maxCount), borrowing: d.bounded(maxCount)}
				if g.within == 0 && g.borrowing == 0 || k > 0 && g.until <= e.phantoms[k-1].until {
					return errCorrupt
				}
				e.phantoms = append(e.phantoms, g)
				e.pWithin += g.within
				e.pBorrowing += g.borrowing
			}
			if len(e.phantoms) > 0 {
				p.phantomMin = min(p.phantomMin, e.phantoms[0].until)
			}
		}
	}
	if d.err != nil {
		return d.err
	}
	cur := p.window(st)
	// Every holder takes at least six bytes.
	nh := d.bounded(uint64(d.left() / 6))
	if d.err != nil {
		return d.err
	}
	if cap(p.holders) < nh {
		p.holders = slices.Grow(p.holders[:cap(p.holders)], nh-cap(p.holders))
	}
	p.holders = p.holders[:nh]
	for k := 0; k < nh && d.err == nil; k++ {
		h := &p.holders[k]
		h.id = d.u32()
		if k > 0 && h.id <= p.holders[k-1].id {
			return errCorrupt
		}
		h.seen = d.time(st)
		h.waits = 0
		if err := p.decodeCounts(d, h, cur, false); err != nil {
			return err
		}
	}
	p.waits = p.waits[:0]
	return p.decodeEnd(d)
}
