package plugin

// completionMeans is a per-team running mean of the completion tokens of
// one choice, learnt by this VM from the usage of finished responses. It
// is the KV demand's completion estimate: max_tokens is an upper bound that
// clients set far above what they get (a 4096 cap on a 300-token answer),
// and a pool whose requests reserve their caps looks full long before its
// cache is.
type completionMeans map[meanKey]*runningMean

type meanKey struct{ pool, team string }

// runningMean averages its first meanWindow samples, then decays
// exponentially with weight 1/meanWindow, so it follows a team whose
// requests change.
type runningMean struct {
	mean float64
	n    int
}

// meanWindow is the number of samples a running mean weighs as one.
const meanWindow = 32

// observe adds the completion tokens of one finished choice.
func (m completionMeans) observe(pool, team string, tokens float64) {
	if tokens < 0 {
		return
	}
	k := meanKey{pool, team}
	r := m[k]
	if r == nil {
		r = &runningMean{}
		m[k] = r
	}
	if r.n < meanWindow {
		r.n++
	}
	r.mean += (tokens - r.mean) / float64(r.n)
}

// completion returns the completion estimate of a request of team in pool
// with choices choices capped at limit tokens each: the team's mean
// (rounded up) times the choices, at most the cap; the cap times the
// choices before the team's first finished request.
func (m completionMeans) completion(pool, team string, choices, limit int64) int64 {
	r := m[meanKey{pool, team}]
	if r == nil || r.n == 0 {
		return satMul(choices, limit)
	}
	per := int64(r.mean + 0.999999)
	if per > limit {
		per = limit
	}
	if per < 1 {
		per = 1
	}
	return satMul(choices, per)
}
