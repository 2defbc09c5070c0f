package fairshare

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Replicas: one pool across several proxies.
//
// When R proxies (Envoy replicas) front the same engines, each holds a
// Slice of the pool and decides its requests against its slice alone,
// locally, as a single proxy decides against the whole pool. The slices
// are kept in a store that every replica reaches (etcd; the plugin does
// the talking): every sync interval a replica reads every live member's
// report, computes its target with Rebalance, and writes its own report
// back with a compare-and-swap over all the members' reports.
//
//	          demand (in flight + waiting per team)
//	 replica a ─────┐                         ┌──▶ slice a ─▶ decides locally
//	 replica b ─────┼──▶ Rebalance (same rule ├──▶ slice b ─▶ decides locally
//	 replica c ─────┘    on every replica)    └──▶ slice c ─▶ decides locally
//
// A slice divides the pool's budgets: its capacity C in sequences, its KV
// tokens K, and every team's reservation in both (Totals).
//
// The slice rule (targets). Each team's reservation goes first to the
// replicas' demand of that team, the rest as headroom for a burst before
// the next sync (an idle team's reservation is all headroom): one at
// every replica when there are enough, the rest in proportion to each
// replica's demand of all teams, its part of the traffic (evenly when no
// replica has any); a team whose demand exceeds its reservation has it
// split in proportion to demand. The team's token reservation follows its
// sequences. The room that no reservation holds (C − Σ reservations) goes
// in proportion to each replica's demand beyond its reservations (then
// its whole demand, then evenly, when those are all 0). Every split is a
// largest-remainder split in exact integer arithmetic, ties to the
// replica whose ID sorts first, so the targets sum to the totals exactly
// and every replica computes the same.
//
// Growing into room only (Rebalance). A replica never applies more than
// what the others leave: for every budget b,
//
//	next_b = min(target_b, total_b − Σ_{others} hold_b),  hold = max(applied, used)
//
// where used is what the member has in flight against b (its requests in
// flight, its within-share requests of each team). A replica that must
// shrink applies its smaller slice at once (before it writes it), and its
// hold falls as its requests finish; the others grow into what it frees
// at their next sync. Since writes are compare-and-swaps over every
// member's report, two replicas never grow into the same room: among
// members that stay registered, Σ hold ≤ total in every budget, so their
// requests in flight never exceed it.
//
// Faults. A member registers under a lease of TTL; a dead member's report
// disappears when the lease expires, and its slice returns to the others
// at their next sync. A replica that cannot reach the store keeps its
// slice until its lease would have expired (last keepalive sent + TTL,
// never later than the store's expiry), then shrinks to SafeSlice: a
// fraction f of an even share of each budget (⌊f·total/n⌋, n the members
// it last saw), never more than it had. A replica that reaches the store
// and finds its report gone (its lease expired) shrinks the same way at
// once, and decides against that safe slice until its registration
// (a new lease) is written.
//
// The overshoot bound. A replica cut off (alive, its lease expired) is
// the only way requests in flight exceed a budget: the others take its
// slice back while it still runs the requests it admitted. Let H_p be
// what p held when the store dropped it (max of its slice and its
// requests in flight, in every budget) and S_p = ⌊f·total/n_p⌋. In every
// budget,
//
//	in flight ≤ total + Σ_{p cut off} H_p
//
// until one sync interval (p notices at its next read, if it reaches the
// store) plus the longest request D after the store dropped p, and
//
//	in flight ≤ total + Σ_{p cut off} S_p
//
// after that, while p stays cut off; once p is registered again, H_p
// counts for another D (the requests it admitted while cut off), then
// nothing. With every replica cut off, Σ S_p ≤ f·total: the configured
// fraction is the overshoot of a long partition; f = 0 makes a cut-off
// replica admit nothing once its lease would have expired. A replica
// that dies takes its requests with it (Envoy drops their connections):
// no overshoot. TestReplicasBound checks both bounds at every step of
// random sequences of demand shifts, deaths, new replicas, partitions,
// store outages and conflicting writes.

// Slice is one replica's part of a pool: the budgets it decides against.
// Teams follow the order of Totals.Teams. The zero Slice holds nothing.
type Slice struct {
	// Capacity is the sequences (requests in flight) the replica may run.
	Capacity int
	// KVTokens is the KV-cache tokens it may use (0 when the pool has no
	// KV resource).
	KVTokens int64
	// Reserved is every team's within-share sequences at the replica.
	Reserved []int
	// ReservedTokens is every team's within-share KV tokens.
	ReservedTokens []int64
}

// Totals is what the slices of a pool divide: the pool as configured,
// or as the replicas agreed on it (Pool.SetSliceOf).
type Totals struct {
	// Teams names the configured teams, in configuration order.
	Teams []string
	// Whole is the pool's capacity, KV tokens and reservations.
	Whole Slice
	// Throughput is the pool's X, the work the slices' rates follow
	// (cost units per second; 0: no work resource). Rebalance does not
	// divide it: a slice's work is derived from its sequences as a part
	// of Whole.Capacity (slice.go).
	Throughput int64
}

// Member is one replica's report in the store.
type Member struct {
	// ID names the replica; IDs sort the members and break ties.
	ID string
	// Demand is every team's requests in flight plus waiting.
	Demand []int
	// Applied is the slice in force at the replica.
	Applied Slice
	// Used is what the replica has in flight against each budget: all its
	// requests (Capacity, KVTokens) and every team's within-share
	// requests (Reserved, ReservedTokens).
	Used Slice
}

// makeSlice returns a zero Slice with room for teams teams.
func makeSlice(teams int) Slice {
	return Slice{Reserved: make([]int, teams), ReservedTokens: make([]int64, teams)}
}

// caps is s's capacity in every kind. The only places that map the
// Slice's fields to kinds are caps, setCaps, reserved and setReserved.
func (s Slice) caps() amounts {
	var a amounts
	a[kindSeq], a[kindTok] = int64(s.Capacity), s.KVTokens
	return a
}

// setCaps sets s's capacities to a.
func (s *Slice) setCaps(a amounts) { s.Capacity, s.KVTokens = int(a[kindSeq]), a[kindTok] }

// reserved is team i's reservation in every kind (0 where s has no entry).
func (s Slice) reserved(i int) amounts {
	var a amounts
	if i < len(s.Reserved) {
		a[kindSeq] = int64(s.Reserved[i])
	}
	if i < len(s.ReservedTokens) {
		a[kindTok] = s.ReservedTokens[i]
	}
	return a
}

// setReserved sets team i's reservation to a (s has room for it).
func (s *Slice) setReserved(i int, a amounts) {
	s.Reserved[i], s.ReservedTokens[i] = int(a[kindSeq]), a[kindTok]
}

// budgets is a slice as one vector: the capacity in every kind, then
// every team's reservation, kind by kind (numKinds + k·T + i).
type budgets []int64

// newBudgets returns zero budgets for T teams.
func newBudgets(T int) budgets { return make(budgets, int(numKinds)*(1+T)) }

// teams is the number of teams b holds.
func (b budgets) teams() int { return len(b)/int(numKinds) - 1 }

// cap is the capacity in kind k.
func (b budgets) cap(k kind) int64 { return b[k] }

// resOf is the index of team i's reservation in kind k.
func (b budgets) resOf(k kind, i int) int { return int(numKinds) + int(k)*b.teams() + i }

// kindRes is every team's reservation in kind k (a view into b).
func (b budgets) kindRes(k kind) []int64 {
	T := b.teams()
	return b[int(numKinds)+int(k)*T : int(numKinds)+int(k+1)*T]
}

// setCaps sets the capacities to a.
func (b budgets) setCaps(a amounts) { copy(b[:numKinds], a[:]) }

// res is team i's reservation in every kind.
func (b budgets) res(i int) amounts {
	var a amounts
	for k := range numKinds {
		a[k] = b[b.resOf(k, i)]
	}
	return a
}

// setRes sets team i's reservation to a.
func (b budgets) setRes(i int, a amounts) {
	for k := range numKinds {
		b[b.resOf(k, i)] = a[k]
	}
}

// vec is a slice as budgets for teams teams.
func (s Slice) vec(teams int) budgets {
	v := newBudgets(teams)
	v.setCaps(s.caps())
	for i := range teams {
		v.setRes(i, s.reserved(i))
	}
	return v
}

// sliceOf is the inverse of vec.
func sliceOf(v budgets, teams int) Slice {
	s := makeSlice(teams)
	s.setCaps(amounts(v[:numKinds]))
	for i := range teams {
		s.setReserved(i, v.res(i))
	}
	return s
}

// split divides total into out in proportion to weights with the
// largest-remainder method in exact integer arithmetic: every i first
// gets ⌊total·w_i/W⌋, then the units left go one each to the largest
// remainders, ties to the lower index. When every weight is 0 the split
// is even (all weights 1). Weights must be ≥ 0 and total ≥ 0.
func split(total int64, weights []int64, out []int64) {
	n := len(weights)
	if n == 0 {
		return
	}
	var w uint64
	for _, x := range weights {
		w += uint64(x)
	}
	even := w == 0
	if even {
		w = uint64(n)
	}
	rem := make([]uint64, n)
	var given int64
	for i := range n {
		x := uint64(1)
		if !even {
			x = uint64(weights[i])
		}
		hi, lo := bits.Mul64(uint64(total), x)
		q, r := bits.Div64(hi, lo, w) // hi < w since x ≤ w
		out[i], rem[i] = int64(q), r
		given += int64(q)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for k := 0; given < total; k++ {
		out[order[k%n]]++
		given++
	}
}

// targets returns every member's target slice under the slice rule (see
// above), in the order of members, which must be sorted by ID (see
// SortMembers). Demands beyond len(t.Teams) are ignored, negative ones
// count as 0. Cost: O(members × teams); it allocates.
func targets(t Totals, members []Member) []Slice {
	n, T := len(members), len(t.Teams)
	out := make([]budgets, n)
	for r := range out {
		out[r] = newBudgets(T)
	}
	if n == 0 {
		return nil
	}
	whole := t.Whole.vec(T)
	demand := func(r, i int) int64 {
		if d := members[r].Demand; i < len(d) {
			return int64(max(d[i], 0))
		}
		return 0
	}
	w := make([]int64, n)
	part := make([]int64, n)
	// traffic weighs the replicas by their demand of all teams: their
	// part of the requests the load balancer sends.
	traffic := make([]int64, n)
	for r := range n {
		for i := range T {
			traffic[r] += demand(r, i)
		}
	}
	ones := make([]int64, n)
	extra := make([]int64, n)
	for i := range T {
		var d int64
		for r := range n {
			w[r] = demand(r, i)
			d += w[r]
		}
		res := whole[whole.resOf(kindSeq, i)]
		if d >= res {
			split(res, w, part)
		} else {
			// Every replica's demand, then the rest as headroom for a
			// burst before the next sync: one at every replica, the rest
			// where the traffic goes.
			h := res - d
			clear(ones)
			if h >= int64(n) {
				for r := range n {
					ones[r] = 1
				}
				h -= int64(n)
			}
			split(h, traffic, extra)
			for r := range n {
				part[r] = w[r] + ones[r] + extra[r]
			}
		}
		for r := range n {
			out[r][out[r].resOf(kindSeq, i)] = part[r]
		}
		// Every other kind follows the sequences (evenly when the team
		// reserves none).
		for k := kindSeq + 1; k < numKinds; k++ {
			split(whole[whole.resOf(k, i)], part, extra)
			for r := range n {
				out[r][out[r].resOf(k, i)] = extra[r]
			}
		}
	}
	// Demand beyond the reservations, else all demand, else even.
	excess := make([]int64, n)
	all := make([]int64, n)
	var sumEx, sumAll int64
	for r := range n {
		for i := range T {
			d := demand(r, i)
			excess[r] += max(0, d-out[r][out[r].resOf(kindSeq, i)])
			all[r] += d
		}
		sumEx += excess[r]
		sumAll += all[r]
	}
	if sumEx == 0 {
		excess = all
	}
	// The room no reservation holds, in every kind.
	for k := range numKinds {
		var resSum int64
		for _, x := range whole.kindRes(k) {
			resSum += x
		}
		split(max(0, whole.cap(k)-resSum), excess, part)
		for r := range n {
			out[r][k] = part[r]
			for _, x := range out[r].kindRes(k) {
				out[r][k] += x
			}
		}
	}
	s := make([]Slice, n)
	for r := range n {
		s[r] = sliceOf(out[r], T)
	}
	return s
}

// SortMembers sorts members by ID, the order Rebalance uses.
func SortMembers(members []Member) {
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
}

// Rebalance returns the target of member self (an index into members,
// sorted by ID) and next, the slice it may apply now: its target, cut
// down in every budget to what the other members' holds leave (see
// above), its reservations then cut to fit its capacities, the teams
// whose demand at the member reaches their reservation first (see
// fitVec). next is never negative; it is
// below the member's applied slice where it must shrink. Cost: O(members × teams); it allocates.
func Rebalance(t Totals, members []Member, self int) (target, next Slice) {
	T := len(t.Teams)
	target = targets(t, members)[self]
	room := t.Whole.vec(T)
	for r, m := range members {
		if r == self {
			continue
		}
		a, u := m.Applied.vec(T), m.Used.vec(T)
		for b := range room {
			room[b] -= max(a[b], u[b])
		}
	}
	nv := target.vec(T)
	for b := range nv {
		nv[b] = max(0, min(nv[b], room[b]))
	}
	fitVec(nv, T, members[self].Demand)
	return target, sliceOf(nv, T)
}

// fitVec cuts the reservations of v until they fit its capacity and
// tokens. With demand (every team's requests in flight and waiting at
// the replica; nil: none known) the teams whose demand reaches their
// reservation are cut first, in proportion to their reservations, then,
// if that is not enough, the others in proportion: a team below its
// reservation holds headroom for its next requests, and cutting it sends
// a within-share team's request to the queue, while cutting a team at or
// above its reservation changes only whether its next request borrows.
// Proportional cuts are largest-remainder splits (ties to the first
// team), so no team bears a cut more than another of its kind, and
// within-share requests never outnumber the slice.
func fitVec(v budgets, T int, demand []int) {
	// full: the teams whose demand reaches their reserved sequences (for
	// every kind: demand is in requests).
	full := make([]bool, T)
	for i := range min(T, len(demand)) {
		full[i] = int64(demand[i]) >= v[v.resOf(kindSeq, i)]
	}
	fit := func(total int64, res []int64) {
		var sum int64
		for _, x := range res {
			sum += x
		}
		if sum <= total {
			return
		}
		// First round: the teams at or above their reservation.
		first := make([]int64, len(res))
		var sumFirst int64
		for i, x := range res {
			if full[i] {
				first[i] = x
				sumFirst += x
			}
		}
		if over := sum - total; sumFirst > 0 {
			cut := min(over, sumFirst)
			keep := make([]int64, len(res))
			split(sumFirst-cut, first, keep)
			for i := range res {
				if first[i] > 0 {
					res[i] = keep[i]
				}
			}
			sum -= cut
		}
		if sum <= total {
			return
		}
		out := make([]int64, len(res))
		split(max(total, 0), res, out)
		copy(res, out)
	}
	for k := range numKinds {
		fit(v.cap(k), v.kindRes(k))
	}
}

// SafeSlice returns the slice a replica cut off from the store shrinks
// to once its lease would have expired: in every budget ⌊fraction ×
// total / n⌋ (n the members it last saw, at least 1), never more than
// applied. fraction is clamped into [0, 1] (NaN counts as 0).
func SafeSlice(t Totals, fraction float64, n int, applied Slice) Slice {
	if math.IsNaN(fraction) {
		fraction = 0
	}
	fraction = min(max(fraction, 0), 1)
	n = max(n, 1)
	T := len(t.Teams)
	whole, a := t.Whole.vec(T), applied.vec(T)
	for b := range whole {
		s := int64(math.Floor(fraction * float64(whole[b]) / float64(n)))
		whole[b] = max(0, min(s, a[b]))
	}
	return sliceOf(whole, T)
}

// MinSlice returns the smaller of a and b in every budget, for teams
// budgets of each team.
func MinSlice(a, b Slice, teams int) Slice {
	x, y := a.vec(teams), b.vec(teams)
	for i := range x {
		x[i] = min(x[i], y[i])
	}
	return sliceOf(x, teams)
}

// UsageReport is one replica's contribution to a pool's usage: every
// team's usage it charged, decayed to At.
type UsageReport struct {
	// ID names the replica.
	ID string
	// At is the time the usage is decayed to.
	At time.Time
	// Usage is every team's contribution (cost units).
	Usage map[string]float64
}

// SumUsage returns every team's usage across the reports, each decayed
// from its At to now with the half-life (0: no decay; a report from
// after now counts undecayed), summed in the order of the reports' IDs
// then of team names, so that every replica computes the same figure.
// Negative, NaN and infinite contributions count as 0. Cost:
// O(reports × teams · log); it allocates.
func SumUsage(now time.Time, halfLife time.Duration, reports []UsageReport) map[string]float64 {
	rs := slices.Clone(reports)
	slices.SortFunc(rs, func(a, b UsageReport) int { return strings.Compare(a.ID, b.ID) })
	out := make(map[string]float64)
	for _, r := range rs {
		f := 1.0
		if dt := now.Sub(r.At); halfLife > 0 && dt > 0 {
			f = math.Exp(-math.Ln2 * float64(dt) / float64(halfLife))
		}
		names := make([]string, 0, len(r.Usage))
		for n := range r.Usage {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			out[n] = min(out[n]+sanitizeAmount(r.Usage[n])*f, maxUsage)
		}
	}
	return out
}
