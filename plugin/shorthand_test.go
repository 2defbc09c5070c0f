package plugin

import (
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// Shorthands the unit tests call; the filter itself goes through the
// functions they wrap.

// rewrite is request.rewrite for a body read afresh.
func rewrite(dst, body []byte, priority int, addUsage bool) []byte {
	r, _ := inspect(body, 1, false)
	return r.rewrite(dst, body, priority, addUsage)
}

// observe is observeAt for team's entry, looked up afresh.
func (m completionMeans) observe(pool, team string, tokens float64) {
	m.observeAt(pool, &teamSlot{name: team}, tokens)
}

// acquire decides a request without a KV demand through arrive, as
// decide does (the plugin's own request id), and returns its grant; the
// outcome must be Granted (the tests configure no holding).
func (pc *pluginContext) acquire(now time.Time, ps *poolState, team string, class fairshare.Class, estimate float64) (fairshare.Grant, error) {
	pc.nextID++
	g, _, _, _, err := pc.arrive(now, ps, fairshare.Request{Holder: pc.holder, ID: pc.nextID, Team: team, Class: class, Estimate: estimate})
	return g, err
}
