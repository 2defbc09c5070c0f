package fairshare

import (
	"encoding/binary"
	"math"
	"time"
)

// The user level in the record (since version 6; see codec.go for the rest).
// A pool without users (Config.Users false) writes version 5's bytes
// after the version byte; with users the static section's flags carry
// bit 4 and
//
//	static section, after the loans:
//	  uvarint  MaxUsers, UserActive (ns), UserIdle (ns)
//	  per configured entry: uvarint number of user shares, then per
//	           share, names ascending: uvarint len(name), name bytes;
//	           f64 share
//	after the waiting requests (the users trailer):
//	  per entry, in the order of the static section:
//	    uvarint  number of users (0 for UnknownTeam), then per user,
//	             names ascending:
//	      uvarint  len(name) (1 to MaxUserName), name bytes
//	      u8       flags: 1 usage, 2 penalty, 4 counts
//	      f64      consumption settled             (flag 1)
//	      f64      penalties not settled           (flag 2)
//	      uvarint  stamp − latest arrival
//	      uvarint  within, over, borrowing          (flag 4: one is not 0)
//	  per waiting request, in queue order: uvarint 1 + its user's index
//	           in its team's users, 0 for none
//
// A user takes its name's bytes plus 2 and the varint of its age (5
// bytes for an arrival up to 34 s before the stamp, 6 up to 73 min), 8
// more with a usage, 8 more with penalties, 3 more with requests in
// flight; a waiting request takes one byte more. Users' waiting counts are not
// stored: they are counted from the queue. TestUserRecordSize states
// the sizes for 10, 1,000 and 10,000 users.

// User flags of the users trailer.
const (
	userUsage   = 1
	userPenalty = 2
	userCounts  = 4
)

// appendUserStatic appends the user level's part of the static section.
func (p *Pool) appendUserStatic(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(p.maxUsers))
	b = binary.AppendUvarint(b, uint64(p.userActive))
	b = binary.AppendUvarint(b, uint64(p.userIdle))
	for i := range p.configured {
		e := &p.teams[i]
		b = binary.AppendUvarint(b, uint64(len(e.ushares)))
		for _, u := range e.ushares {
			b = binary.AppendUvarint(b, uint64(len(u.Name)))
			b = append(b, u.Name...)
			b = appendF64(b, u.Share)
		}
	}
	return b
}

// appendUsers appends the users trailer (stamp st).
func (p *Pool) appendUsers(b []byte, st int64) []byte {
	for i := range p.teams {
		e := &p.teams[i]
		b = binary.AppendUvarint(b, uint64(len(e.users)))
		for k := range e.users {
			u := &e.users[k]
			b = binary.AppendUvarint(b, uint64(len(u.name)))
			b = append(b, u.name...)
			var f byte
			if u.usage != 0 {
				f |= userUsage
			}
			if u.penalty != 0 {
				f |= userPenalty
			}
			if u.within|u.over|u.borrow != 0 {
				f |= userCounts
			}
			b = append(b, f)
			if f&userUsage != 0 {
				b = appendF64(b, u.usage)
			}
			if f&userPenalty != 0 {
				b = appendF64(b, u.penalty)
			}
			b = binary.AppendUvarint(b, uint64(max(0, st-u.seen)))
			if f&userCounts != 0 {
				b = binary.AppendUvarint(b, uint64(u.within))
				b = binary.AppendUvarint(b, uint64(u.over))
				b = binary.AppendUvarint(b, uint64(u.borrow))
			}
		}
	}
	for k := range p.waits {
		b = binary.AppendUvarint(b, uint64(p.waits[k].uplus))
	}
	return b
}

// decodeUserStatic reads the user level's part of the static section
// (on is the pool flag); without it every entry has no user shares.
func (p *Pool) decodeUserStatic(d *decoder, on bool) error {
	p.users = on
	p.maxUsers, p.userActive, p.userIdle = 0, 0, 0
	for i := range p.teams {
		p.teams[i].ushares = p.teams[i].ushares[:0]
	}
	if !on {
		return nil
	}
	p.maxUsers = d.bounded(maxMaxUsers)
	p.userActive = time.Duration(d.bounded(math.MaxInt64))
	p.userIdle = time.Duration(d.bounded(math.MaxInt64))
	if d.err != nil {
		return d.err
	}
	if p.maxUsers == 0 || p.userActive == 0 || p.userIdle < p.userActive {
		return errCorrupt // the pool applies positive bounds
	}
	for i := 0; i < p.configured && d.err == nil; i++ {
		e := &p.teams[i]
		// Every share takes at least ten bytes.
		n := d.bounded(uint64(d.left() / 10))
		for k := 0; k < n && d.err == nil; k++ {
			nb := d.str()
			if len(nb) == 0 || len(nb) > MaxUserName || k > 0 && string(nb) <= e.ushares[k-1].Name {
				return errCorrupt
			}
			e.ushares = append(e.ushares, UserShare{Name: string(nb), Share: d.f64(minWeight, maxWeight)})
		}
	}
	return d.err
}

// decodeUsers reads the users trailer (stamp st), or empties every
// entry's users without the user level.
func (p *Pool) decodeUsers(d *decoder, st int64) error {
	for i := range p.teams {
		p.teams[i].users = p.teams[i].users[:0]
	}
	if !p.users {
		return nil
	}
	for i := range p.teams {
		e := &p.teams[i]
		// Every user takes at least four bytes.
		n := d.bounded(uint64(d.left() / 4))
		if d.err != nil {
			return d.err
		}
		if n > 0 && e.name == UnknownTeam || n > p.maxUsers+1 {
			return errCorrupt
		}
		if cap(e.users) < n {
			e.users = append(e.users[:cap(e.users)], make([]user, n-cap(e.users))...)
		}
		e.users = e.users[:n]
		for k := range e.users {
			u := &e.users[k]
			nb := d.str()
			if len(nb) == 0 || len(nb) > MaxUserName || k > 0 && string(nb) <= e.users[k-1].name {
				return errCorrupt
			}
			setString(&u.name, nb)
			f := d.byte()
			if f&^(userUsage|userPenalty|userCounts) != 0 {
				return errCorrupt
			}
			u.usage, u.penalty = 0, 0
			if f&userUsage != 0 {
				u.usage = d.f64(0, maxUsage)
			}
			if f&userPenalty != 0 {
				u.penalty = d.f64(0, maxUsage)
			}
			age := d.uvarint()
			if age > math.MaxInt64 || st-int64(age) > st {
				return errCorrupt // before the earliest time there is
			}
			u.seen = st - int64(age)
			u.within, u.over, u.borrow, u.waiting = 0, 0, 0, 0
			if f&userCounts != 0 {
				u.within = int64(d.bounded(maxCount))
				u.over = int64(d.bounded(maxCount))
				u.borrow = int64(d.bounded(maxCount))
				if u.within|u.over|u.borrow == 0 {
					return errCorrupt // the flag is set only for counts
				}
			}
			if f&(userUsage|userPenalty) != 0 && u.usage == 0 && u.penalty == 0 {
				return errCorrupt
			}
			u.share = e.userShare(u.name)
		}
		if d.err != nil {
			return d.err
		}
		// A user's counts are never more than its team's (healUsers).
		var within, out int64
		for k := range e.users {
			within += e.users[k].within
			out += e.users[k].over + e.users[k].borrow
		}
		if within > e.within[kindSeq]+e.pWithin[kindSeq] || out > e.borrowing[kindSeq]+e.pBorrowing[kindSeq] {
			return errCorrupt
		}
	}
	for k := range p.waits {
		w := &p.waits[k]
		x := d.bounded(math.MaxInt32)
		if d.err != nil {
			return d.err
		}
		if x > len(p.teams[w.team].users) {
			return errCorrupt
		}
		w.uplus = int32(x)
		if x > 0 {
			p.teams[w.team].users[x-1].waiting++
		}
	}
	return nil
}
