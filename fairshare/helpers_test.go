package fairshare

import (
	"math"
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
