package fairshare

// Loans: within share whichever replica a request reaches.
//
// A replica's slice gives every team an integer part of its reservation
// R_t, cut from the members' demand at the last sync (replicas.go). A
// team whose demand is spread over more replicas than it has reserved
// slots, or whose demand moves between replicas between two syncs, finds
// no reserved slot at some replica while it is well within R_t across
// the pool; without more, its request there borrows. A loan is what a
// replica adds to a team's within-share allowance there beyond its
// slice:
//
//	allowed_t,r = slice_t,r + loan_t,r
//	loan_t,r    = min(MaxLoan, R_t − D_t) if D_t < R_t, else 0
//
// where D_t is the team's demand (requests in flight, waiting included)
// across the pool as the replica saw it at its sync: its own then, the
// others' as they last reported. MaxLoan (2) sequences at most per team
// and replica: a replica whose slice holds none (or all in use) of a
// team's reservation runs the team's next two requests within share
// while the team has room across the pool. One was not enough: a small
// team's two requests overlapping at a replica that carries 1/35 of the
// load (S1 on ten proxies) were held as borrowers until the next sync,
// its p99 TTFT 9× one proxy's; more would only serve a team whose
// demand at one replica grows by three or more within one sync
// interval, and each one adds n to the bound below. A loan is
// recomputed at every sync (the sequences are 0 once the team's demand
// reaches R_t), and is 0 for a replica that decides against its safe
// slice (cut off from the store).
//
// Token loans. A replica's part of a team's token reservation K_t
// follows its sequences, and is cut, with the other teams', when the
// slice's KV tokens are short (fitVec): the other replicas' requests in
// flight hold the rest of the pool's tokens until they finish. A seat
// at a replica can so be left with fewer tokens than one request needs,
// and the team's request there, within its reserved sequences, is sent
// borrowing tokens (at the team's borrowing priority) while the team
// uses a fraction of K_t across the pool. The token loan is therefore
// lent whatever the team's demand:
//
//	tokloan_t,r = max(loan_t,r · q_t, min(MaxLoan · q_t, K_t − W_t)),  q_t = ⌊K_t / R_t⌋
//
// W_t the team's within-share tokens in flight across the pool, as the
// replica saw it at its sync (its own then, the others' as they last
// reported): while the team is within K_t across the pool, a replica
// runs the tokens of up to MaxLoan of its sequences beyond its slice.
//
// A loan is a permission, not capacity: only the team's own within-share
// requests at that replica take it, and nothing adds it to the slice's
// capacity, so borrowers there are held, as before, once the replica's
// requests in flight (the lent ones included) fill its slice. The
// within-share requests a loan admits are in the member's report (Used),
// so the other replicas grow into none of the room they take (Rebalance
// counts max(applied, used)).
//
// The over-admission bound. A team's within-share requests across the
// pool exceed R_t only when its demand grew past R_t since some
// replica's last sync, and then by at most MaxLoan per replica:
//
//	within_t ≤ R_t + Σ_r loan_t,r ≤ R_t + MaxLoan·n
//
// and its within-share tokens by at most its token loans:
//
//	withintok_t ≤ K_t + Σ_r tokloan_t,r ≤ K_t + MaxLoan·⌊K_t/R_t⌋·n
//
// A loan in work (slice.go: ⌊W_t·loan_t,r/R_t⌋) adds to the rate at which
// the team's bucket at the replica fills, and so its within-share work
// rate across the pool is at most W_t + MaxLoan·⌊W_t/R_t⌋·n units per
// second while the loans last (and its bucket depths B times that);
//
// (plus the cut-off replicas' holds of replicas.go's bound), n the
// replicas that lent within the last D. A loan lives one sync interval
// I (the replica's next sync sees the demand and lends nothing more);
// the requests it admitted keep their standing until they finish (the
// longest request D). So the excess lasts at most I + D after every
// replica has seen the team's demand at R_t, and never exists for a
// team whose requests across the pool stay within R_t: such a team's
// request is within share at every replica that has a loan or slice
// room for it. TestReplicasBound checks the bound at every step of
// random sequences of demand shifts, deaths, new replicas, partitions,
// store outages and conflicting writes.

// MaxLoan is the most within-share requests a replica lends a team
// beyond its slice (see above).
const MaxLoan = 2

// Loans returns member self's loans (an index into members, sorted by
// ID; self's report carries its current demand and use): every team's sequences
// and KV tokens beyond its slice that its within-share requests may
// take at that replica, by the rule above, teams in the order of
// t.Teams. Cost: O(members × teams); it allocates.
func Loans(t Totals, members []Member, self int) (seq []int, tok []int64) {
	T := len(t.Teams)
	seq, tok = make([]int, T), make([]int64, T)
	n := len(members)
	if n == 0 || self < 0 || self >= n {
		return seq, tok
	}
	for i := range T {
		r := 0
		if i < len(t.Whole.Reserved) {
			r = t.Whole.Reserved[i]
		}
		if r <= 0 {
			continue
		}
		var d int
		var w int64
		for _, m := range members {
			if i < len(m.Demand) {
				d += max(m.Demand[i], 0)
			}
			if i < len(m.Used.ReservedTokens) {
				w += max(m.Used.ReservedTokens[i], 0)
			}
		}
		if d < r {
			seq[i] = min(MaxLoan, r-d)
		}
		if i < len(t.Whole.ReservedTokens) {
			k := max(t.Whole.ReservedTokens[i], 0)
			q := k / int64(r)
			tok[i] = max(int64(seq[i])*q, min(MaxLoan*q, k-w))
		}
	}
	return seq, tok
}

// SetLoans makes seq and tok (teams in the order of Totals; missing
// entries count as 0) every configured team's loan at this replica: its
// within-share requests may number its slice's reservation plus seq,
// and take its token reservation plus tok, while nothing changes for
// borrowers (see above). With a work resource the loan in work follows
// the sequences (⌊W_t × seq / R_t⌋, slice.go): the team's bucket at the
// replica fills at its slice's rate plus that, and is that much deeper.
// Values are clamped into [0, the configured
// totals]. A pool that decides against the whole pool (no slice) keeps
// no loans; SetSlice(nil) clears them. Requests in flight keep their
// standing. Cost: O(teams), O(kinds · teams · log teams) with a work
// resource.
func (p *Pool) SetLoans(seq []int, tok []int64) {
	defer p.invalidate()
	var whole []amounts
	if p.sliced && p.declared().has(kindWork) {
		p.decayTo(p.now) // the debts paid down at the old rates
		_, whole = p.wholeRes(p.sliceWhole())
	}
	for i := range p.teams {
		e := &p.teams[i]
		e.lent = amounts{}
		if !p.sliced || i >= p.configured {
			continue
		}
		if i < len(seq) {
			e.lent[kindSeq] = min(max(int64(seq[i]), 0), p.total[kindSeq])
		}
		if i < len(tok) && p.total[kindTok] > 0 {
			e.lent[kindTok] = min(max(tok[i], 0), p.total[kindTok])
		}
		if whole != nil {
			e.lent[kindWork] = workOf(whole[i], e.lent[kindSeq])
		}
	}
}

// LoansApplied returns every configured team's loan at this replica
// (SetLoans), teams in the order of Totals. It allocates.
func (p *Pool) LoansApplied() (seq []int, tok []int64) {
	n := p.configured
	seq, tok = make([]int, n), make([]int64, n)
	for i := range n {
		seq[i], tok[i] = int(p.teams[i].lent[kindSeq]), p.teams[i].lent[kindTok]
	}
	return seq, tok
}

// FirstLoans returns the loans of a replica that has not synced yet
// (teams in the order of t.Teams): one within-share sequence for every
// team that reserves any, and that sequence's tokens (⌊K_t/R_t⌋), so
// that a team within its reservation is not made to borrow by a replica
// that has just joined. It counts in the over-admission bound above as
// any loan does (lasting until the replica's first sync instead of one
// interval). It allocates.
func FirstLoans(t Totals) (seq []int, tok []int64) {
	T := len(t.Teams)
	seq, tok = make([]int, T), make([]int64, T)
	for i := range T {
		if i < len(t.Whole.Reserved) && t.Whole.Reserved[i] > 0 {
			seq[i] = 1
			if i < len(t.Whole.ReservedTokens) {
				tok[i] = t.Whole.ReservedTokens[i] / int64(t.Whole.Reserved[i])
			}
		}
	}
	return seq, tok
}
