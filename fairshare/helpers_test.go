package fairshare

import (
	"math"
	"slices"
	"testing"
	"time"
)

var base = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// at returns base + d.
func at(d time.Duration) time.Time { return base.Add(d) }

// twoTeams is a pool of C = 10 with a (0.6) and b (0.4).
func twoTeams(mod func(*Config)) *Pool {
	cfg := Config{Capacity: 10, Teams: []TeamConfig{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.4}}}
	if mod != nil {
		mod(&cfg)
	}
	return NewPool("p", cfg, base)
}

func stat(t testing.TB, p *Pool, now time.Time, team string) TeamStat {
	t.Helper()
	for _, s := range p.Snapshot(now) {
		if s.Team == team {
			return s
		}
	}
	t.Fatalf("Snapshot has no team %q", team)
	return TeamStat{}
}

func closeRel(a, b, rel float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b))
}

// config returns the configuration the pool was last built from, as it
// applies it (clean shares and weights, Capacity of the configuration
// even after SetCapacity). It allocates the Teams slice.
func (p *Pool) config() Config {
	c := Config{
		Capacity:       int(p.total[kindSeq]),
		HalfLife:       p.halfLife,
		EntryPenalty:   p.entryPenalty,
		HolderTimeout:  p.holderTimeout,
		RequestTimeout: p.requestTimeout,
		KVTokens:       p.total[kindTok],
		Throughput:     p.total[kindWork],
		QueueLimit:     p.queueLimit,
		TeamQueueLimit: p.teamQueueLimit,
		MaxQueueTime:   p.maxQueueTime,
		BatchAging:     p.batchAging,
		Teams:          make([]TeamConfig, 0, p.configured),
	}
	if c.Throughput > 0 {
		c.ThroughputBurst = p.burst
	}
	if p.users {
		c.Users, c.MaxUsers, c.UserActive, c.UserIdle = true, p.maxUsers, p.userActive, p.userIdle
	}
	for _, e := range p.teams[:p.configured] {
		tc := TeamConfig{Name: e.name, Share: e.share, Weight: e.weight}
		if e.lend < 1 {
			tc.LendingLimit = Limit(e.lend)
		}
		if e.borrowLim < 1 {
			tc.BorrowingLimit = Limit(e.borrowLim)
		}
		tc.Users = e.ushares
		c.Teams = append(c.Teams, tc)
	}
	return c
}

// inFlightTokens returns the KV tokens of the requests in flight in the
// pool, phantoms included. Cost: O(teams).
func (p *Pool) inFlightTokens() int64 {
	var n int64
	for i := range p.teams {
		n += p.teams[i].use()[kindTok]
	}
	return n
}

// apportionMap is apportion with names and reservations in maps, as the
// tests state them: every name of names gets an entry (0 when it has no
// share); duplicate names count once.
func apportionMap(capacity int, names []string, shares map[string]float64) map[string]int {
	uniq := make([]string, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	s := make([]float64, len(uniq))
	for i, n := range uniq {
		s[i] = shares[n]
	}
	r := make([]int, len(uniq))
	apportion(capacity, uniq, s, r)
	out := make(map[string]int, len(uniq))
	for i, n := range uniq {
		out[n] = r[i]
	}
	return out
}

// clone returns a deep copy of s.
func (s Slice) clone() Slice {
	s.Reserved = slices.Clone(s.Reserved)
	s.ReservedTokens = slices.Clone(s.ReservedTokens)
	return s
}
