package fairshare

import (
	"math"
	"slices"
	"time"
)

// Brute-force references for the queue's decisions, written apart from
// queue.go and resources.go: the random operation tests compare every
// Arrive and Dispatch with them.

// refWithin reports whether a request of entry i with tok tokens and
// work cost units fits what the team's within-share requests leave of
// its reservation, and its work bucket.
func refWithin(p *Pool, i int, tok, work int64) bool {
	e := p.teams[i]
	seqOK := e.within[kindSeq]+e.pWithin[kindSeq]+1 <= e.res[kindSeq]
	// One request within share whatever its demand when the team has
	// none within share in flight.
	tokOK := p.total[kindTok] == 0 || e.within[kindTok]+e.pWithin[kindTok]+tok <= e.res[kindTok] || e.within[kindTok]+e.pWithin[kindTok] == 0 && e.res[kindTok] > 0
	return seqOK && tokOK && refWorkFits(p, i, work)
}

// refWork is the work demand of a request whose work estimate is x: x
// rounded, at most 2^40, 0 for x ≤ 0 or NaN and without a work resource.
func refWork(p *Pool, x float64) int64 {
	if p.total[kindWork] == 0 || math.IsNaN(x) || x <= 0 {
		return 0
	}
	if x > 1<<40 {
		return 1 << 40
	}
	return int64(math.Round(x))
}

// refWorkFits reports whether work cost units fit entry i's work bucket:
// the debt plus the work is at most B × (reserved + lent rate), or the
// debt is 0 and the rate is not (always without a work resource).
func refWorkFits(p *Pool, i int, work int64) bool {
	if p.total[kindWork] == 0 {
		return true
	}
	e := p.teams[i]
	rate := e.res[kindWork] + e.lent[kindWork]
	return e.debt+float64(work) <= float64(rate)*float64(p.burst)/1e9 || e.debt == 0 && rate > 0
}

// refTokFits reports whether tok tokens fit what entry i's within-share
// requests leave of its token reservation (always without a KV resource;
// the one request of a team with none within share in flight fits).
func refTokFits(p *Pool, i int, tok int64) bool {
	e := p.teams[i]
	return p.total[kindTok] == 0 || e.within[kindTok]+e.pWithin[kindTok]+tok <= e.res[kindTok] || e.within[kindTok]+e.pWithin[kindTok] == 0 && e.res[kindTok] > 0
}

// refWithinQueue reports whether a request of entry i with tok tokens and
// work cost units is within share as Arrive and Dispatch judge it: a
// reserved sequence is free, the work fits the team's bucket (never
// borrowed), and the tokens fit the team's token reservation or else the
// pool's free KV tokens as a borrower's would (the request then borrows
// tokens, see refTokFits).
func refWithinQueue(p *Pool, i int, tok, work int64) bool {
	e := p.teams[i]
	if e.within[kindSeq]+e.pWithin[kindSeq]+1 > e.res[kindSeq] || !refWorkFits(p, i, work) {
		return false
	}
	return refTokFits(p, i, tok) || refTokRoom(p, i, tok)
}

// refMayBorrow reports whether entry i's borrowing limit allows tok more.
func refMayBorrow(p *Pool, i int, tok int64) bool {
	e := p.teams[i]
	if e.borrowLim >= 1 {
		return true
	}
	useSeq := e.within[kindSeq] + e.borrowing[kindSeq] + e.pWithin[kindSeq] + e.pBorrowing[kindSeq]
	if useSeq+1-e.res[kindSeq] > int64(e.borrowLim*float64(p.live[kindSeq])) {
		return false
	}
	if p.total[kindTok] == 0 {
		return true
	}
	useTok := e.within[kindTok] + e.borrowing[kindTok] + e.pWithin[kindTok] + e.pBorrowing[kindTok]
	return useTok+tok-e.res[kindTok] <= int64(e.borrowLim*float64(p.live[kindTok]))
}

// refRoom reports whether the pool has room for a borrower of entry i
// with tok tokens: use + what other teams' lending limits keep + demand
// within capacity, in every resource.
func refRoom(p *Pool, i int, tok int64) bool {
	var seq, kseq int64
	for j, e := range p.teams {
		useSeq := e.within[kindSeq] + e.borrowing[kindSeq] + e.pWithin[kindSeq] + e.pBorrowing[kindSeq]
		seq += useSeq
		if j != i {
			kseq += max(0, e.res[kindSeq]-int64(e.lend*float64(e.res[kindSeq]))-useSeq)
		}
	}
	if seq+kseq+1 > p.live[kindSeq] {
		return false
	}
	return refTokRoom(p, i, tok)
}

// refTokRoom reports whether the pool has room in KV tokens for a
// request of entry i with tok tokens: tokens in flight + what other
// teams' lending limits keep + demand within the KV capacity.
func refTokRoom(p *Pool, i int, tok int64) bool {
	if p.total[kindTok] == 0 {
		return true
	}
	var t, ktok int64
	for j, e := range p.teams {
		useTok := e.within[kindTok] + e.borrowing[kindTok] + e.pWithin[kindTok] + e.pBorrowing[kindTok]
		t += useTok
		if j != i {
			ktok += max(0, e.res[kindTok]-int64(e.lend*float64(e.res[kindTok]))-useTok)
		}
	}
	// At most what the others' lending limits can ever leave to i.
	var keptAll int64
	for j, e := range p.teams {
		if j != i {
			keptAll += e.res[kindTok] - int64(e.lend*float64(e.res[kindTok]))
		}
	}
	if avail := max(p.live[kindTok]-keptAll, 0); tok > avail {
		tok = avail
	}
	return t+ktok+tok <= p.live[kindTok]
}

// refEverFits reports whether the others' lending limits leave entry i a
// sequence when all of them are idle.
func refEverFits(p *Pool, i int) bool {
	var kept int64
	for j, e := range p.teams {
		if j != i {
			kept += e.res[kindSeq] - int64(e.lend*float64(e.res[kindSeq]))
		}
	}
	return p.live[kindSeq]-kept >= 1
}

// refKey is a waiting request's standing, compared lexicographically:
// within share, rank, then the team's order (refOrder).
type refKey struct {
	notWithin int // 0 within share, 1 a borrower inside its team's work reservation, 2 any other borrower
	rank      int
	order     [5]int64
}

func (a refKey) less(b refKey) bool {
	x := append([]int64{int64(a.notWithin), int64(a.rank)}, a.order[:]...)
	y := append([]int64{int64(b.notWithin), int64(b.rank)}, b.order[:]...)
	return slices.Compare(x, y) < 0
}

// refOrder is a request's place in its team's order: (class, arrival)
// without batch aging; with it, (arrival + aging for a batch request,
// class); then arrival, holder, id.
func refOrder(p *Pool, class Class, arrival int64, holder uint32, id uint64) [5]int64 {
	if p.batchAging == 0 {
		return [5]int64{int64(class), arrival, arrival, int64(holder), int64(id)}
	}
	aged := arrival
	if class == Batch {
		if aged > math.MaxInt64-int64(p.batchAging) {
			aged = math.MaxInt64
		} else {
			aged += int64(p.batchAging)
		}
	}
	return [5]int64{aged, int64(class), arrival, int64(holder), int64(id)}
}

// refWaitOrder is refOrder of a waiting request.
func refWaitOrder(p *Pool, w waiter) [5]int64 {
	return refOrder(p, w.class, w.arrival, w.holder, w.id)
}

// refFirst reports whether waiting request j stands before every other
// waiting request of its team.
func refFirst(p *Pool, j int) bool {
	o := refWaitOrder(p, p.waits[j])
	for k, w := range p.waits {
		if wo := refWaitOrder(p, w); k != j && w.team == p.waits[j].team && slices.Compare(wo[:], o[:]) < 0 {
			return false
		}
	}
	return true
}

// refBefore reports whether a request of team i waits that stands before
// a request arriving with the given order.
func refBefore(p *Pool, i int, o [5]int64) bool {
	for _, w := range p.waits {
		if wo := refWaitOrder(p, w); w.team == i && slices.Compare(wo[:], o[:]) < 0 {
			return true
		}
	}
	return false
}

// refRanks returns every entry's rank as Snapshot computes it.
func refRanks(p *Pool) []int {
	snap := p.Snapshot(time.Unix(0, p.now))
	r := make([]int, len(snap))
	for i, s := range snap {
		r[i] = s.Rank
	}
	return r
}

// refHead returns the index of the request Dispatch must look at, whether
// it is within share, and whether it may go (-1 when none is eligible).
func refHead(p *Pool) (k int, within, ready bool) {
	ranks := refRanks(p)
	k = -1
	var best refKey
	for j, w := range p.waits {
		in := refWithinQueue(p, w.team, w.tokens, w.work) && refFirst(p, j)
		if !in && (!refMayBorrow(p, w.team, w.tokens) || !refEverFits(p, w.team)) {
			continue
		}
		key := refKey{2 * boolInt(!in), ranks[w.team], refWaitOrder(p, w)}
		if !in && refWorkBorrow(p, w.team, w.work) && refFirst(p, j) {
			key.notWithin = 1
		}
		if k < 0 || key.less(best) {
			k, best, within = j, key, in
		}
	}
	if k < 0 {
		return -1, false, false
	}
	return k, within, within || refRoom(p, p.waits[k].team, p.waits[k].tokens)
}

// refArrivalKey is the standing of a borrowing request arriving now.
func refArrivalKey(p *Pool, i int, class Class, holder uint32, id uint64, t int64, work int64) refKey {
	o := refOrder(p, class, t, holder, id)
	key := refKey{2, refRanks(p)[i], o}
	if refWorkBorrow(p, i, work) && !refBefore(p, i, o) {
		key.notWithin = 1
	}
	return key
}

// refWorkBorrow reports whether a borrower of entry i demanding work
// stands inside its team's work reservation: the pool declares work and
// the work fits the team's bucket.
func refWorkBorrow(p *Pool, i int, work int64) bool {
	return p.total[kindWork] != 0 && refWorkFits(p, i, work)
}
