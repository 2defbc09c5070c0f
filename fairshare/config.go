package fairshare

import (
	"encoding/binary"
	"math"
	"time"
)

// Bounds that keep every computation finite. They are far outside any
// sensible configuration; values beyond them are clamped.
const (
	minWeight   = 1e-9
	maxWeight   = 1e9
	maxShare    = 1e9
	maxUsage    = 1e200
	maxCapacity = 1 << 30
	// maxTokens bounds a KV capacity, a request's token demand and a
	// stored token sum.
	maxTokens = 1 << 40
	// maxQueue bounds the queue limits.
	maxQueue = 1 << 20
	// maxWork bounds a throughput (cost units per second) and a
	// request's work demand (cost units).
	maxWork = 1 << 40
)

// DefaultThroughputBurst is the depth of a team's work bucket, in seconds
// of its reserved rate, when Config.ThroughputBurst is 0: a team that
// sent nothing for 10 s may send 10 s of its reserved work at once within
// share.
const DefaultThroughputBurst = 10 * time.Second

// TeamConfig is one team of a pool.
type TeamConfig struct {
	// Name identifies the team (the value of the team header). It must not
	// be "" nor UnknownTeam; duplicates after the first are ignored.
	Name string
	// Share is the team's fraction of the pool, normally in (0, 1] with the
	// shares of a pool summing to at most 1 (see apportion.go). Negative, NaN
	// and infinite values count as 0; values above 1e9 count as 1e9.
	Share float64
	// Weight divides the team's usage before ranking, as Kueue's
	// LocalQueue fairSharing.weight does: a team of weight 2 is treated as
	// if it had used half as much. 0 (the zero value), negative, NaN and
	// infinite values mean 1; others are clamped into [1e-9, 1e9].
	Weight float64
	// LendingLimit is the fraction of the team's reservation, in every
	// resource, that other teams may borrow while the team does not use
	// it (Kueue's lendingLimit, as a fraction of the reservation). The
	// rest is kept free for the team's own bursts: borrowers are held at
	// the gateway rather than let into it, so the team's within-share
	// requests find room even on an engine that never preempts for them.
	// nil (the zero value) lends the whole reservation, as 1 does; 0
	// lends nothing; values are clamped into [0, 1] (NaN counts as nil).
	// Held requests need the queue (Config.QueueLimit): without it the
	// limit is not enforced.
	LendingLimit *float64
	// BorrowingLimit is the most the team may use above its reservation,
	// as a fraction of the pool's capacity, in every resource (Kueue's
	// borrowingLimit, as a fraction of the pool). nil (the zero value)
	// and values of 1 or more mean no limit; 0 forbids borrowing; values
	// are clamped into [0, 1] (NaN counts as nil). A request above the
	// limit waits in the queue until the team's use drops (without a
	// queue the limit is not enforced).
	BorrowingLimit *float64
	// Users lists the shares of the team's users that do not have the
	// default share 1 (with Config.Users; see users.go). Entries without a
	// name, and duplicates after the first, are ignored; names longer than
	// MaxUserName are cut to it.
	Users []UserShare
}

// Limit returns a pointer to f, for TeamConfig.LendingLimit and
// BorrowingLimit.
func Limit(f float64) *float64 { return &f }

// cleanLimit maps a configured limit onto the fraction the pool uses: nil
// and NaN give 1 (no limit); others are clamped into [0, 1].
func cleanLimit(f *float64) float64 {
	if f == nil || math.IsNaN(*f) {
		return 1
	}
	return min(max(*f, 0), 1)
}

// Config is the configuration of one pool.
type Config struct {
	// Capacity is C, the pool's sustainable concurrency (requests in
	// flight). Negative values count as 0; values above 2^30 are clamped.
	Capacity int
	// Teams lists the teams in display order (Snapshot follows it).
	Teams []TeamConfig
	// HalfLife is the half-life of usage decay; 0 disables decay (usage
	// accumulates forever). Negative values count as 0.
	HalfLife time.Duration
	// EntryPenalty charges a request's estimated cost to its team's usage
	// at Acquire and settles it at Release, as Kueue's admission fair
	// sharing does.
	EntryPenalty bool
	// HolderTimeout is how long a holder (one Wasm VM) may go unseen before
	// it is presumed dead and its requests in flight become phantoms. 0
	// disables leases: holders never expire.
	HolderTimeout time.Duration
	// RequestTimeout is the longest a request can run. A dead holder's
	// requests stay counted as phantoms for this long after the holder was
	// presumed dead (0 drops them at once), and a request that a live
	// holder has not released one to two RequestTimeouts after it was
	// granted is dropped as a lost release (0 disables that: a lost
	// release then holds its slot for good). See leases.go.
	RequestTimeout time.Duration

	// KVTokens is the pool's KV-cache capacity in tokens (vLLM's
	// num_gpu_blocks × block_size, summed over the pool's engines): a
	// second resource besides Capacity. A request's demand is then one
	// sequence plus its token estimate (Request.Tokens); reservations are
	// apportioned in both resources, a request is within share when it
	// fits its team's reservation in both, and the pool is full when
	// either is. 0 (the zero value) declares no KV resource: token
	// estimates are ignored. Negative values count as 0; values above
	// 2^40 are clamped.
	KVTokens int64
	// Throughput is X, the pool's throughput in cost units per second
	// (the unit of Release's consumed: what the engines serve in a
	// second at saturation): a third resource, work. Every team reserves
	// its share of X (apportioned as C is), as a rate: a request is
	// within share in work while its team's debt, the within-share work
	// granted and not yet paid for at the reserved rate, leaves room for
	// its work estimate (Request.Work) in a bucket of ThroughputBurst
	// seconds of that rate (see resources.go). Borrowers take no work. 0
	// (the zero value) declares no work resource. Negative values count
	// as 0; values above 2^40 are clamped. The plugin refuses negative
	// values in its configuration.
	Throughput int64
	// ThroughputBurst is B, the depth of every team's work bucket as a
	// duration of its reserved rate: a team may run B × its rate of
	// work within share at once before it waits for its debt to pay down.
	// 0 (the zero value) means DefaultThroughputBurst; negative values
	// count as 0 (the default). Without Throughput it is ignored.
	ThroughputBurst time.Duration
	// QueueLimit is the most requests that may wait in the pool's queue
	// (see Arrive). 0 (the zero value) disables the queue: Arrive grants
	// every request, as Acquire does. Negative values count as 0; values
	// above 2^20 are clamped.
	QueueLimit int
	// TeamQueueLimit is the most requests of one team that may wait. 0
	// (the zero value) leaves only QueueLimit. Negative values count as 0.
	TeamQueueLimit int
	// MaxQueueTime is the longest a request may wait: past
	// arrival + MaxQueueTime it is no longer dispatched and leaves the
	// queue (the holder answers it with an error; see Arrive). 0 (the
	// zero value) sets no time limit (a request then waits until it is
	// dispatched, cancelled or its holder dies; with HolderTimeout 0 too,
	// the requests of a VM that died without cancelling them wait for
	// good). Negative values count as 0.
	MaxQueueTime time.Duration
	// BatchAging is how much later than an interactive request a waiting
	// batch request of the same standing stands in the queue: requests of
	// one rank go in the order of arrival, a batch request's counted
	// BatchAging after its real arrival (Slurm's multifactor priority: a
	// request's age earns it what its class costs it). A batch request
	// thus yields to interactive requests that arrive up to BatchAging
	// after it, and no longer: once it has waited BatchAging it goes before
	// every interactive request that arrived after it. 0 (the zero value)
	// ages nothing: class before arrival, so a batch request waits while
	// any interactive request of its standing does. Negative values count
	// as 0. See Dispatch for the whole order.
	//
	// BatchAging is the deciding holder's own setting, not the record's: it
	// is neither encoded (a record decoded into a Pool keeps the Pool's
	// value) nor part of the Fingerprint, so VMs of an older layout, which
	// do not know it, read the records of newer ones during an upgrade.
	// Holders that order differently (during such an upgrade) only pick
	// the next request differently; no invariant depends on it. See
	// SetBatchAging.
	BatchAging time.Duration

	// Users divides every team among its users (Request.User), Fair
	// Tree's second level (users.go): the team's reserved sequences are
	// apportioned among its active users by TeamConfig.Users, a user's
	// request within its portion is within share, one above it takes what
	// its teammates leave at priority OverBase and up, and the team's
	// queue goes in the users' order. false (the zero value): teams are
	// not divided, Request.User is ignored, and nothing of the user level
	// is in the record.
	Users bool
	// MaxUsers bounds the user entries of a team (UserOther aside); 0
	// means DefaultMaxUsers, values above 65,536 are clamped.
	MaxUsers int
	// UserActive is how long after its latest request a user with
	// nothing in flight or waiting still counts in its team's division (0
	// means DefaultUserActive).
	UserActive time.Duration
	// UserIdle is how long after its latest request a user with nothing
	// in flight or waiting is dropped with its usage (0 means
	// DefaultUserIdle; never below UserActive).
	UserIdle time.Duration
}

// Defaults of the user level's durations.
const (
	// DefaultUserActive is Config.UserActive when 0.
	DefaultUserActive = 30 * time.Second
	// DefaultUserIdle is Config.UserIdle when 0.
	DefaultUserIdle = 10 * time.Minute
)

// cleanUserTimes maps Config.UserActive and UserIdle onto the durations
// the pool applies.
func cleanUserTimes(active, idle time.Duration) (time.Duration, time.Duration) {
	if active <= 0 {
		active = DefaultUserActive
	}
	if idle <= 0 {
		idle = DefaultUserIdle
	}
	return active, max(idle, active)
}

// cleanTokens clamps a token count into [0, 2^40].
func cleanTokens(n int64) int64 {
	return min(max(n, 0), maxTokens)
}

// cleanWork clamps a throughput into [0, 2^40].
func cleanWork(n int64) int64 {
	return min(max(n, 0), maxWork)
}

// cleanBurst maps a configured ThroughputBurst onto the one the pool
// applies: DefaultThroughputBurst for 0 and negative values.
func cleanBurst(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultThroughputBurst
	}
	return d
}

// cleanQueue clamps a queue limit into [0, 2^20].
func cleanQueue(n int) int {
	return min(max(n, 0), maxQueue)
}

// cleanWeight maps a configured weight onto the one the pool uses.
func cleanWeight(w float64) float64 {
	if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 {
		return 1
	}
	return min(max(w, minWeight), maxWeight)
}

// cleanDuration maps negative durations to 0.
func cleanDuration(d time.Duration) time.Duration {
	return max(d, 0)
}

// cleanCapacity clamps a capacity into [0, 2^30].
func cleanCapacity(c int) int {
	return min(max(c, 0), maxCapacity)
}

// teams returns the usable teams of c: named, not UnknownTeam, first of
// their name, with clean shares and weights.
func (c Config) teams() []TeamConfig {
	out := make([]TeamConfig, 0, len(c.Teams))
	for _, t := range c.Teams {
		if t.Name == "" || t.Name == UnknownTeam {
			continue
		}
		dup := false
		for _, o := range out {
			if o.Name == t.Name {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		tc := TeamConfig{Name: t.Name, Share: cleanShare(t.Share), Weight: cleanWeight(t.Weight)}
		if l := cleanLimit(t.LendingLimit); l < 1 {
			tc.LendingLimit = &l
		}
		if l := cleanLimit(t.BorrowingLimit); l < 1 {
			tc.BorrowingLimit = &l
		}
		tc.Users = cleanUserShares(t.Users)
		out = append(out, tc)
	}
	return out
}

// Tags of the optional words of Fingerprint.
const (
	fpLending = 0xf10_0001 + iota
	fpBorrowing
	fpKV
	fpQueue
	fpWork
	fpUsers
	fpUserShares
)

// Fingerprint returns a stable 64-bit hash (FNV-1a) of the configuration
// as the pool applies it: equivalent configurations (Weight 0 and 1, a
// negative and a zero HalfLife, a duplicate team) have equal fingerprints,
// and the value is the same in every process and version of this package
// (it depends on the configuration only, not on the record layout). A pool stores the fingerprint of the
// configuration it was built from, so the plugin can tell when to
// Reconfigure. Cost: O(total length of the team names).
func (c Config) Fingerprint() uint64 {
	// fingerprintVersion was the record version when the hash was
	// defined; it stays 1 so fingerprints survive layout changes.
	const fingerprintVersion = 1
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var buf [8]byte
	word := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		for _, b := range buf {
			h = (h ^ uint64(b)) * prime
		}
	}
	word(fingerprintVersion)
	word(uint64(cleanCapacity(c.Capacity)))
	word(uint64(cleanDuration(c.HalfLife)))
	word(uint64(cleanDuration(c.HolderTimeout)))
	word(uint64(cleanDuration(c.RequestTimeout)))
	if c.EntryPenalty {
		word(1)
	} else {
		word(0)
	}
	teams := c.teams()
	word(uint64(len(teams)))
	for _, t := range teams {
		word(uint64(len(t.Name)))
		for i := 0; i < len(t.Name); i++ {
			h = (h ^ uint64(t.Name[i])) * prime
		}
		word(math.Float64bits(t.Share))
		word(math.Float64bits(t.Weight))
		// Limits are hashed only when set, so that the fingerprints of
		// configurations without them are those of earlier versions.
		if t.LendingLimit != nil {
			word(fpLending)
			word(math.Float64bits(*t.LendingLimit))
		}
		if t.BorrowingLimit != nil {
			word(fpBorrowing)
			word(math.Float64bits(*t.BorrowingLimit))
		}
		if c.Users && len(t.Users) > 0 {
			word(fpUserShares)
			word(uint64(len(t.Users)))
			for _, u := range t.Users {
				word(uint64(len(u.Name)))
				for i := 0; i < len(u.Name); i++ {
					h = (h ^ uint64(u.Name[i])) * prime
				}
				word(math.Float64bits(u.Share))
			}
		}
	}
	// So are the flow-control fields.
	if kv := cleanTokens(c.KVTokens); kv != 0 {
		word(fpKV)
		word(uint64(kv))
	}
	if x := cleanWork(c.Throughput); x != 0 {
		word(fpWork)
		word(uint64(x))
		word(uint64(cleanBurst(c.ThroughputBurst)))
	}
	if q, tq, mq := cleanQueue(c.QueueLimit), cleanQueue(c.TeamQueueLimit), cleanDuration(c.MaxQueueTime); q|tq != 0 || mq != 0 {
		word(fpQueue)
		word(uint64(q))
		word(uint64(tq))
		word(uint64(mq))
	}
	if c.Users {
		active, idle := cleanUserTimes(c.UserActive, c.UserIdle)
		word(fpUsers)
		word(uint64(cleanMaxUsers(c.MaxUsers)))
		word(uint64(active))
		word(uint64(idle))
	}
	return h
}
