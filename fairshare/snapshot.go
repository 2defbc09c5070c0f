package fairshare

import (
	"slices"
	"time"
)

// TeamStat is a snapshot of one team entry of a pool.
type TeamStat struct {
	// Team is the entry's name (UnknownTeam for the shared entry of
	// unknown teams).
	Team string
	// Share is the configured share (0 for UnknownTeam and removed teams).
	Share float64
	// NormalizedShare is S, the share divided by the sum of the pool's
	// shares (0 when that sum is 0).
	NormalizedShare float64
	// Weight is the team's weight (Kueue's fairSharing.weight; 1 unless
	// configured).
	Weight float64
	// WeightedShare is U, the team's fraction of the pool's weighted
	// usage: (Usage/Weight) / Σ over the pool's entries of (Usage/Weight),
	// in [0, 1]; 0 when the pool has no usage. It plays the part of Kueue's
	// LocalQueue status.fairSharing.weightedShare: the larger, the later
	// the team's borrowers run.
	WeightedShare float64
	// Reserved is the number of within-share slots, see apportion.go.
	Reserved int
	// Lent is the team's loan at this replica (SetLoans, lend.go): the
	// within-share requests it may have beyond Reserved (0 on one proxy).
	Lent int
	// InFlight counts the team's granted requests in flight (phantoms not
	// included).
	InFlight int
	// Borrowing counts the requests of InFlight that borrow.
	Borrowing int
	// InFlightEstimate is the sum of the estimates of the team's requests
	// in flight (cost units). Requests of a dead holder that expire as
	// phantoms keep their estimate counted until the team has nothing in
	// flight.
	InFlightEstimate float64
	// Usage is the decayed usage (cost units) at the snapshot time,
	// including entry penalties of requests in flight.
	Usage float64
	// LevelFairshare is LF = NormalizedShare / WeightedShare (+Inf when
	// the team has a share and no usage, 0 when it has no share).
	LevelFairshare float64
	// Rank is the dense LF rank, 0 for the highest LF (not capped: the
	// priority caps it at MaxRank).
	Rank int
	// Phantoms are requests counted in flight without a grant (a dead
	// holder's requests, AddPhantoms); InFlight does not include them.
	Phantoms int
	// PhantomsWithin counts the phantoms that hold within-share slots.
	PhantomsWithin int
	// LastUpdate is when the team's usage last changed (a charge, an entry
	// penalty, a settlement, SetUsage); the zero Time if never.
	LastUpdate time.Time
	// ReservedTokens is the team's reservation in KV tokens (0 without a
	// KV resource).
	ReservedTokens int64
	// InFlightTokens is the KV tokens of the team's requests in flight,
	// phantoms included.
	InFlightTokens int64
	// ReservedWork is the team's reserved work rate in cost units per
	// second (its share of Config.Throughput, or its slice's; 0 without
	// a work resource), and LentWork its loan at this replica (lend.go):
	// its debt is paid down at ReservedWork + LentWork.
	ReservedWork int64
	LentWork     int64
	// WorkDebt is the team's debt (cost units): the within-share work
	// granted and not yet paid down, settled to what the requests cost
	// as they finish. 0 without a work resource.
	WorkDebt float64
	// WorkBurst is the depth of the team's work bucket (cost units):
	// Config.ThroughputBurst × (ReservedWork + LentWork). The bucket
	// holds WorkBurst − WorkDebt (negative when the requests cost more
	// than their estimates); a request is within share in work while its
	// work fits what it holds (or the debt is 0).
	WorkBurst float64
	// Waiting counts the team's requests waiting in the queue.
	Waiting int
	// OldestWait is how long the team's oldest waiting request has waited
	// (0 when none waits).
	OldestWait time.Duration
	// Over counts the requests of Borrowing that took reserved sequences
	// their teammates left (users.go; 0 without the user level).
	Over int
	// Users are the team's user entries by standing, best first (rank,
	// then larger usage, then name), with Config.Users; nil without.
	Users []UserStat
	// ActiveUsers counts the users of Users that count in the team's
	// division now.
	ActiveUsers int
}

// Snapshot returns the state of every team entry at now, in a stable
// order: configured teams in configuration order, then removed teams still
// draining, then UnknownTeam. Like every method taking the time it first
// expires dead holders, stale phantoms and waiting requests past their
// deadline, and decays usage to now. It allocates the result. Cost:
// O(n log n) in teams, plus O(waiting).
func (p *Pool) Snapshot(now time.Time) []TeamStat {
	t := now.UnixNano()
	p.advance(t)
	p.decayTo(t)
	lf := p.levelFairshares()
	sumS, sumU := 0.0, 0.0
	for i := range p.teams {
		sumS += p.teams[i].share
		sumU += p.teams[i].weightedUsage()
	}
	out := make([]TeamStat, len(p.teams))
	for i := range p.teams {
		e := &p.teams[i]
		s := TeamStat{
			Team:             e.name,
			Share:            e.share,
			Weight:           e.weight,
			Reserved:         int(e.res[kindSeq]),
			Lent:             int(e.lent[kindSeq]),
			InFlight:         int(e.within[kindSeq] + e.borrowing[kindSeq]),
			Borrowing:        int(e.borrowing[kindSeq]),
			InFlightEstimate: e.estimate,
			Usage:            e.total(),
			LevelFairshare:   lf[i],
			Phantoms:         int(e.pWithin[kindSeq] + e.pBorrowing[kindSeq]),
			PhantomsWithin:   int(e.pWithin[kindSeq]),
			ReservedTokens:   e.res[kindTok],
			InFlightTokens:   e.use()[kindTok],
			Waiting:          e.waiting,
			ReservedWork:     e.res[kindWork],
			LentWork:         e.lent[kindWork],
			WorkDebt:         e.debt,
			WorkBurst:        p.depth(e),
		}
		if sumS > 0 {
			s.NormalizedShare = e.share / sumS
		}
		if sumU > 0 {
			s.WeightedShare = e.weightedUsage() / sumU
		}
		if e.updated {
			s.LastUpdate = time.Unix(0, e.lastUpdate)
		}
		s.Over = int(p.overOf(i))
		s.Users = p.userStats(i, t)
		for _, u := range s.Users {
			if u.Active {
				s.ActiveUsers++
			}
		}
		out[i] = s
	}
	// The queue is sorted by arrival: a team's first is its oldest.
	for k := len(p.waits) - 1; k >= 0; k-- {
		w := &p.waits[k]
		out[w.team].OldestWait = time.Duration(max(0, t-w.arrival))
	}
	// Dense ranks in one sort (tie groups as denseRank): the rank of every
	// sorted value, then each entry's value found again.
	sorted := slices.Sorted(slices.Values(lf))
	ranks := make([]int, len(sorted))
	tieGroups(sorted, ranks)
	for i := range out {
		k, _ := slices.BinarySearch(sorted, lf[i])
		out[i].Rank = ranks[k]
	}
	return out
}
