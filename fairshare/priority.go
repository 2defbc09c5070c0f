package fairshare

// Priority layout (lower runs earlier in vLLM, whose waiting queue is a
// min-heap on (priority, arrival_time) and whose preemption victim is the
// running request with the largest (priority, arrival_time)).
//
//	within share:  WithinShareBase + class                     0, 1
//	over (users):  OverBase + min(user rank, MaxOverRank)·OverRankStep + class
//	               2 to 9: a reserved sequence a teammate leaves (users.go);
//	               0, 1 when it takes a worse teammate's over sequence
//	borrowing:     BorrowBase + min(rank, MaxRank)·RankStep + class
//	               rank 0: 10, 11; rank 1: 20, 21; ... rank 9: 100, 101
const (
	// WithinShareBase is the priority of a request inside its team's
	// reservation, plus the class.
	WithinShareBase = 0
	// BorrowBase is the priority of the least over-served borrower, plus
	// the class.
	BorrowBase = 10
	// RankStep separates borrowers of successive fairshare ranks.
	RankStep = 10
	// MaxRank bounds the rank so priorities stay small (at most
	// BorrowBase + MaxRank·RankStep + Batch = 101).
	MaxRank = 9
)

// UnknownTeam names the single pool entry shared by every team that the
// pool's configuration does not list. The team name comes from a request
// header that the client may control, so unknown names must not grow the
// record: they all share this one entry (share 0, reservation 0, one usage,
// one rank, always last). A configured team cannot be named UnknownTeam
// (nor ""): such entries of a Config are ignored.
const UnknownTeam = "*"

// Class is the service class of a request.
type Class int

const (
	// Interactive is latency sensitive.
	Interactive Class = 0
	// Batch is throughput oriented and yields to interactive work of the
	// same standing.
	Batch Class = 1
)

// clampClass maps any Class value onto Interactive or Batch: below
// Interactive counts as Interactive, above Batch as Batch.
func clampClass(c Class) Class {
	if c <= Interactive {
		return Interactive
	}
	return Batch
}

// String returns "interactive" or "batch" (other values print as batch or
// interactive after clamping, as the pool treats them).
func (c Class) String() string {
	if clampClass(c) == Batch {
		return "batch"
	}
	return "interactive"
}

// borrowPriority is the priority of a borrower of the given rank and class.
func borrowPriority(rank int, c Class) int {
	if rank > MaxRank {
		rank = MaxRank
	}
	if rank < 0 {
		rank = 0
	}
	return BorrowBase + rank*RankStep + int(c)
}
