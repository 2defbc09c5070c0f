// Package fairshare decides the vLLM priority of every request so that a
// GPU pool shared by several teams behaves like a reservation with
// borrowing:
//
//   - each team owns share × C of the pool's sustainable concurrency C
//     (its reservation, largest remainder, see apportion.go);
//   - a request that keeps its team within that reservation is sent
//     "within share": priority 0 (Interactive) or 1 (Batch);
//   - a request above it "borrows" idle capacity: priority 10 / 11 and
//     more, so it runs when nobody else needs the GPUs, and it is the one
//     vLLM preempts when they do.
//
// The mapping relies on two properties of vLLM's priority scheduler: the
// waiting queue is a min-heap on (priority, arrival_time), and when a
// running request runs out of KV blocks vLLM preempts the running request
// with the largest (priority, arrival_time). A waiting request never
// preempts a running one.
//
// # Ranking borrowers
//
// Among borrowers the order follows Slurm's Fair Tree level fairshare
// LF = S / U: S is the team's share normalised over the teams of the pool,
// U its decayed usage normalised the same way, after dividing each team's
// usage by its weight (Kueue's LocalQueue fairSharing.weight). Usage is the
// consumption (cost units, e.g. GPU-seconds or weighted tokens) of the
// team's finished requests, decayed with a half-life by the exact
// exponential exp(−ln2·Δt/halfLife). Teams are ranked by LF, highest
// first, equal LF sharing a rank (equal up to floating-point error: values
// within a relative 1e-9 of each other tie); a borrower's priority is
// BorrowBase + min(rank, MaxRank)·RankStep + class, so the most
// over-served borrower gets the largest number: admitted last, preempted
// first.
//
// # Worked example
//
// A pool of C = 10 with search 0.5, chat 0.3 and labs 0.2 reserves 5, 3 and
// 2 slots. Past usage (decayed) is search 50, chat 10, labs 40, so
//
//	        S     U            LF     rank
//	search  0.5   50/100=0.5   1      1
//	chat    0.3   10/100=0.1   3      0
//	labs    0.2   40/100=0.4   0.5    2
//
// search's first five requests run within share at priority 0; its sixth
// borrows at 10 + 1·10 = 20. A batch request of labs with both its slots
// taken borrows at 10 + 2·10 + 1 = 31, and a request from a team the pool
// does not know (share 0, so LF 0: ranked last, rank 3) at 40.
//
// Entry penalty (Kueue's admission fair sharing): with Config.EntryPenalty
// a request's estimated cost is added to its team's usage when it is
// granted, so a team that sends 100 requests at once is deprioritised from
// its second one on, before any of them has finished. If search sends a
// burst of requests estimated at 10 each, its usage reaches 100 after five
// of them and its sixth borrows tied with labs (LF 0.75 both, rank 1, 20);
// from the seventh on it ranks last of the three (30). Release removes
// what is left of the penalty after decay and charges what the request
// actually consumed, so once the burst has finished search's usage is the
// decayed sum of its consumption, exactly: the pool keeps the penalties not
// yet settled apart from the consumption, so a penalty far larger than the
// usage does not cost the usage its low digits.
//
// Leases: the pool lives in a shared-data record that several Wasm VMs
// (holders) decode, change and write back. Each request in flight is
// counted under its holder; a holder that stops heartbeating for
// HolderTimeout is presumed dead, and its requests become phantoms that
// still hold their slots (within-share phantoms hold within-share slots)
// for RequestTimeout, then expire. A request released later by a VM that
// was presumed dead drops one phantom instead. A live VM can lose a
// release too (a CAS retry loop that gave up): a request still counted one
// to two RequestTimeouts after it was granted is dropped from the count. No
// slot leaks when a VM dies or a release is lost.
//
// # Flow control
//
// With a queue (Config.QueueLimit > 0) the pool decides, besides the
// priority, whether a request may go at all, so that it behaves like
// Kueue's admission with borrowing: never more admitted than the engine
// can run, and the order of admission decided when capacity frees, not
// when requests arrive. A request is described by a Request (holder,
// holder-local id, team, class, KV-token demand, estimate):
//
//	Arrive(now, req)
//	  │
//	  ├─ fits its team's reservation in every resource? ──▶ Granted, within share
//	  │                                  (0/1; never held, even on a full pool)
//	  ├─ a reserved sequence free, its tokens only in
//	  │  what the pool has free? ─────────────────────────▶ Granted, within share,
//	  │                              borrowing tokens (a borrower's priority)
//	  ├─ no queue (QueueLimit 0)? ─────────────────────────▶ Granted, borrowing
//	  ├─ its team may borrow (BorrowingLimit), the pool has
//	  │  room in every resource (other teams' LendingLimit
//	  │  kept free), and no waiting request that could go
//	  │  stands better? ──────────────────────────────────▶ Granted, borrowing
//	  ├─ queue, team's queue full / id waiting already? ──▶ QueueFull, TeamQueueFull,
//	  │                                                     Duplicate (nothing recorded)
//	  └─ Queued: recorded as waiting; the holder pauses the stream
//	       │
//	       │  Dispatch(now, holder): on every release and tick
//	       ▼
//	  head = the waiting request with the best standing now,
//	         among those that could go (borrowing and lending limits)
//	       ├─ within share now, or room for it? ── no ──▶ Blocked (nothing overtakes it)
//	       ├─ held by the caller? ───────────────── no ──▶ Elsewhere: wake head.Holder
//	       └─ Dispatched: granted, its standing and priority decided now
//
//	A waiting request also leaves the queue by Cancel (the client went away),
//	at its deadline (arrival + MaxQueueTime: never dispatched at or after it),
//	or with its holder (HolderTimeout: nobody can resume its stream).
//
// Standing at dispatch, best first: (1) a request that is now within
// share (as at arrival, borrowing tokens included) and is its team's
// first waiting request, (2) the team's level-fairshare rank now, (3) the team's order: with Config.BatchAging
// 0, Interactive before Batch then earlier arrival; with BatchAging > 0,
// earlier arrival with a batch request's counted BatchAging later (its
// age earns back what its class costs it, as Slurm's multifactor
// priority weighs age against QOS), Interactive first on a tie, (4)
// earlier arrival, (5) lower holder id, then lower request id (a stable
// final tie-break: no two waiting requests tie). A team's reservation
// goes to its waiting requests in the team's order: a request that
// arrives while an earlier one of its team waits is not within share
// (it queues behind it), and a smaller request of the team never takes
// what is left of the reservation ahead of an earlier one that does not
// fit it yet.
// Requests whose team's borrowing limit forbids them to borrow now, or to
// which the other teams' lending limits leave no sequence, are passed
// over; the head is never overtaken by a smaller request that would
// fit, so a large request is not starved by small ones (Kueue's
// StrictFIFO, within standing). A newcomer is granted at arrival only if
// it would be that head and fits.
//
// Only the holder of a waiting request dispatches it, because only it can
// resume the paused stream; a holder that frees capacity and finds
// another holder's request at the head learns it from Dispatch
// (Elsewhere, with the head's Holder) and wakes that holder. Every
// operation runs inside the record's get–decode–op–encode–CAS, so the
// result of Dispatch (a stream to resume) is acted on only once the write
// has succeeded.
//
// Resources. Besides sequences (Capacity), a pool may declare its KV
// capacity in tokens (KVTokens). A request then demands one sequence and
// its tokens; reservations are apportioned in both; a request is within
// share when it fits its team's reservation in both, and the pool is full
// when either is (resources.go states the conditions). One exception: a
// team with nothing within share in flight may run one request within
// share whatever its token demand (in its reserved sequences), so that a
// demand estimated above the team's whole token reservation neither
// borrows forever nor, at the head of the queue, holds every borrower
// behind it; the cache is then overcommitted by at most that request's
// excess, once per team, and vLLM preempts the lowest priority if it
// must. A request that fits its team's free reserved sequences but not
// its token reservation, while the pool's KV tokens have room for it
// (as for a borrower), goes within share too, borrowing the tokens
// (Grant.BorrowsTokens, at a borrower's priority): the team's sequence
// then goes to the team, not to another team's borrower that the team's
// next request would push over the pool's capacity (see RATIONALE.md,
// "Why does a team's free sequence go to its own request first?").
// The Grant keeps the tokens
// it took, and Release gives back exactly those; a dead holder's grants
// keep theirs as phantoms until they expire. Borrowers are still ranked
// by one usage, the decayed consumption in cost units (weighted tokens),
// not by a dominant resource share: see RATIONALE.md ("Why does ranking
// keep one usage instead of a dominant resource share?").
//
// Work. A pool may also declare its throughput X (Throughput, cost units
// per second: what its engines serve at saturation). Every team then
// reserves its share of X as a rate w (units/s), and its use of it is a
// debt D (cost units), the within-share work granted and not yet paid
// for, paid down at w as time passes: D(t) = max(0, D(t0) − w·(t − t0)).
// A request of work estimate d (Request.Work, cost units; Estimate when
// not set, and Acquire's estimate) is within share in work when
// D + d ≤ B·w (B = ThroughputBurst, DefaultThroughputBurst = 10 s), or
// when D = 0 (one request whatever its size, as for tokens); within
// share takes every resource, work included. A within-share grant adds d
// to D (Grant.Work), and Release settles it to what the request cost
// (D += consumed − d, at least 0). Nothing borrows work: a borrower's
// room is sequences and tokens as without it, and a request that has its
// team's seat may borrow tokens but never work. A held borrower whose
// work fits its team's bucket (the team is above its reservation in
// seats or tokens only) is charged as a within-share request is and goes
// before the borrowers whose team's bucket is empty, whatever the ranks:
// it borrows a seat to do work its team has reserved, they borrow work.
// Other borrowers are not charged. So
// equal shares divide the work the engines do, not only their seats: a
// team whose requests are long takes its share of the service and no
// more within share, and borrows the rest at its rank, while a team of
// short requests stays within share. A held request becomes within share
// once its team's debt has paid down, at the next Dispatch, with no
// release needed. Without Throughput (0) there is no work resource and
// nothing of the above. See RATIONALE.md ("Why a throughput reservation
// is a debt paid down at the reserved rate").
//
// Limits (per team, in every resource, Kueue's lendingLimit and
// borrowingLimit): TeamConfig.LendingLimit is the fraction of its
// reservation a team lends while it does not use it; the rest stays free,
// so that its within-share requests find room at once even on an engine
// that never preempts a running request for a waiting one, at the cost of
// capacity left idle while the team is. TeamConfig.BorrowingLimit bounds
// what a team may use above its reservation, as a fraction of the pool.
// Both are enforced through the queue.
//
// Cost of each operation (T teams, W waiting requests, H holders; none
// allocates once the pool's buffers have grown):
//
//	Acquire, Arrive within share       O(T)
//	Arrive borrowing, Dispatch, Next   O(T log T + W)
//	Cancel, RetryAfter                 O(W)
//	Release, Heartbeat                 O(T) (+ O(H·counts) when a lease expires)
//	expiry of waiting requests         O(1) when none is due, else O(W)
//	UnmarshalBinary, AppendBinary      O(record): about 18 bytes per waiting request
//
// # Use
//
// Time is always an argument; a Pool is a plain value decoded from the
// record (UnmarshalBinary), changed by one operation and encoded back
// (AppendBinary), without allocating when its buffers are reused:
//
//	var p fairshare.Pool
//	if err := p.UnmarshalBinary(rec); err != nil { /* rebuild: NewPool */ }
//	if p.Fingerprint() != cfg.Fingerprint() { p.Reconfigure(now, cfg) }
//	g := p.Acquire(now, vmID, team, fairshare.Interactive, estimate)
//	rec, _ = p.AppendBinary(rec[:0]) // write back with CAS; send g.Priority
//	...
//	gc := g; p.Release(now, &gc, consumed) // on the response's end
//
// With flow control, the request path and the release path become
//
//	g, w, out := p.Arrive(now, fairshare.Request{Holder: vmID, ID: id, Team: team,
//		Class: class, Tokens: promptTokens + expectedCompletion, Estimate: estimate,
//		Work: expectedCost})
//	// Granted: send g.Priority. Queued: keep the stream paused until a
//	// Dispatch grants it, answer 429 at w.Deadline (Cancel, RetryAfter).
//	// QueueFull, TeamQueueFull: answer 429 with RetryAfter.
//	...
//	p.Release(now, &gc, consumed)
//	for {
//		g, head, st := p.Dispatch(now, vmID)
//		if st == fairshare.Dispatched { /* resume stream g.ID at g.Priority */ continue }
//		if st == fairshare.Elsewhere { /* wake head.Holder */ }
//		break
//	}
//
// and every tick of every holder calls Dispatch the same way.
//
// Keep one Pool per record for the life of the VM: decoding reuses its
// memory, skips the static section when it is unchanged, and a record
// that is the Pool's own last write (no other VM wrote since) decodes in
// one comparison.
//
// A Pool is not safe for concurrent use: the shared-data record's CAS
// serialises the VMs.
//
// # Users within teams
//
// With Config.Users each team is divided among its users (Request.User),
// Fair Tree's second level, by the rule that divides the pool among its
// teams: the team's reserved sequences are apportioned among its active
// users by share (TeamConfig.Users, 1 by default); a request of a user
// below its portion is within share (0/1); one of a user at its portion
// that finds a reserved sequence its teammates leave takes it "over"
// (Grant.Over: counted as borrowing, never held, priority
// OverBase + min(user rank, MaxOverRank)·OverRankStep + class, 2 to 9;
// 0/1 when, the team's sequences all taken, it takes the sequence of a
// worse-ranked teammate's over request),
// so a light user's next request is within share at once and, on an
// engine that preempts running requests for waiting ones, preempts the
// flooder's over request first; beyond that the request borrows as its
// team does. The team's queue goes in its users' level-fairshare order.
// Across teams nothing changes: the team's usage is its users' sum. At
// most Config.MaxUsers user entries per team are kept, idle ones dropped
// after Config.UserIdle. users.go states the rules.
//
// # One pool across several proxies
//
// When R proxies front the same engines, each decides against a Slice of
// the pool (SetSlice: a part of the capacity, of the KV tokens and of
// every team's reservation; the work rates follow the sequences, see
// slice.go; SetSliceOf for a slice of other totals than the configured
// ones, whose rates follow those), kept in the record like the rest. The
// slice rule (replicas.go) computes every replica's slice from every
// replica's demand (Report);
// Rebalance lets a replica grow only into what the others hold no more,
// so that requests in flight stay within the pool but for replicas cut
// off from the store, whose overshoot is bounded (replicas.go states the
// bound; SafeSlice is what a cut-off replica shrinks to). Loans
// (lend.go, SetLoans) let a team below its reservation across the pool
// run up to MaxLoan within-share requests beyond a replica's slice, a permission
// only its own requests take and never capacity for borrowers, within a
// stated over-admission bound. SumUsage adds the replicas' usage
// contributions into the pool's global usage.
package fairshare
