package fairshare

import (
	"math"
	"time"
)

// Usage decays with the exact exponential
//
//	usage(t) = usage(t0) · exp(−ln2 · (t − t0) / halfLife)
//
// (Slurm's decay_factor = 1 − 0.693/half_life per second is its first-order
// expansion; Kueue's 1 − A with A = 1 − 0.5^(sampling/halfLife) is the same
// curve sampled). Every entry's usage is kept decayed to one common time,
// Pool.usageAt: the common factor cancels when usages are normalised, so
// ranking needs no exponential at all, and bringing the pool to a new time
// costs one exp and one multiplication per team. Times earlier than
// usageAt (clocks of two VMs that disagree slightly) count as usageAt:
// usage never grows back.

// decayFactor returns exp(−ln2·dt/halfLife) for dt nanoseconds (1 when
// dt <= 0 or decay is disabled).
func (p *Pool) decayFactor(dt int64) float64 {
	if dt <= 0 || p.halfLife <= 0 {
		return 1
	}
	return math.Exp(-math.Ln2 * float64(dt) / float64(p.halfLife))
}

// decayTo brings every entry's usage to time t (no-op if t <= usageAt),
// and pays every entry's work debt down to t at its work rate
// (resources.go).
func (p *Pool) decayTo(t int64) {
	if t <= p.usageAt {
		return
	}
	if f := p.decayFactor(t - p.usageAt); f != 1 {
		for i := range p.teams {
			e := &p.teams[i]
			e.usage *= f
			e.penalty *= f
			for k := range e.users {
				e.users[k].usage *= f
				e.users[k].penalty *= f
			}
		}
	}
	if p.total[kindWork] > 0 {
		p.payDown(t - p.usageAt)
	}
	p.usageAt = t
}

// addUsage adds amount (>= 0, already sanitized) to entry i at time t.
func (p *Pool) addUsage(i int, t int64, amount float64) {
	p.decayTo(t)
	e := &p.teams[i]
	e.usage = min(e.usage+amount, maxUsage)
	e.updated, e.lastUpdate = true, max(t, p.usageAt)
}

// Charge adds consumption (cost units) to a team's usage at time now,
// without a grant: the release of a request this pool never counted. The
// team is the entry of that name if the pool has one, else UnknownTeam.
// Negative, NaN and infinite values count as 0. Cost: O(teams).
func (p *Pool) Charge(now time.Time, team string, consumed float64) {
	t := now.UnixNano()
	p.advance(t)
	p.addUsage(p.resolve(team, true), t, sanitizeAmount(consumed))
}

// SetUsage sets a team's usage, decayed to now (restored from a previous
// owner of the pool). The team is the entry of that name if the pool has
// one, else UnknownTeam. Negative, NaN and infinite values count as 0.
// Cost: O(teams).
func (p *Pool) SetUsage(now time.Time, team string, usage float64) {
	t := now.UnixNano()
	p.advance(t)
	i := p.resolve(team, true)
	p.decayTo(t)
	e := &p.teams[i]
	u := sanitizeAmount(usage)
	e.penalty = min(e.penalty, u)
	e.usage = max(u-e.penalty, 0)
	e.updated, e.lastUpdate = true, max(t, p.usageAt)
}

// Usage returns every entry's usage decayed to now and its requests in
// flight, phantoms included: what an owner persists for the next one. It
// allocates both maps. Cost: O(teams).
func (p *Pool) Usage(now time.Time) (usage map[string]float64, inflight map[string]int) {
	t := now.UnixNano()
	p.advance(t)
	p.decayTo(t)
	usage = make(map[string]float64, len(p.teams))
	inflight = make(map[string]int, len(p.teams))
	for i := range p.teams {
		e := &p.teams[i]
		usage[e.name] = e.total()
		inflight[e.name] = e.inFlight()
	}
	return usage, inflight
}
