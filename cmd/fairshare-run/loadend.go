package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The demo load's end. The command stops the load at -duration. A test
// cannot assert what happened within a real-time window (a loaded machine
// does less in it), so it sets an end on events instead (options.minDone,
// options.pending): the load runs for at least -duration, then until every
// team has completed minDone requests and pending has nothing left to wait
// for. A guard (loadHangGuard past -duration) ends it anyway; the summary's
// LoadUnmet then says what never happened.

// loadHangGuard is how long past -duration the load waits for its end
// condition before it stops anyway: a guard against a hang, not a speed
// check.
const loadHangGuard = 2 * time.Minute

// loadEndPoll is how often the end condition is checked once -duration has
// passed (polling, not a window).
const loadEndPoll = 100 * time.Millisecond

// loadEnd is the stop of one demo load.
type loadEnd struct {
	mu sync.Mutex
	loadStopped
}

// loadStopped is how a demo load stopped.
type loadStopped struct {
	ran   time.Duration // how long it ran: -duration, or more on events
	unmet string        // what never happened, when the guard stopped it
}

// onEvents reports whether the load's end waits for events (a test set
// options.minDone or options.pending).
func (o options) onEvents() bool { return o.minDone > 0 || o.pending != nil }

// guard is how long past -duration the load waits for its end condition.
func (o options) guard() time.Duration {
	if o.loadGuard > 0 {
		return o.loadGuard
	}
	return loadHangGuard
}

// stopLoad returns the context whose end stops the demo load begun at
// start: -duration from now, or (options.onEvents) once the end
// condition over rows holds after that, or the guard passed. Done early
// when ctx is.
func (r *runner) stopLoad(ctx context.Context, start time.Time, rows []row) (context.Context, context.CancelFunc, *loadEnd) {
	e := &loadEnd{loadStopped: loadStopped{ran: r.opts.duration}}
	if !r.opts.onEvents() {
		stop, cancel := context.WithTimeout(ctx, r.opts.duration)
		return stop, cancel, e
	}
	stop, cancel := context.WithCancel(ctx)
	go func() {
		if !sleepCtx(stop, time.Until(start.Add(r.opts.duration))) {
			return
		}
		guard := start.Add(r.opts.duration + r.opts.guard())
		tick := time.NewTicker(loadEndPoll)
		defer tick.Stop()
		for {
			p := r.loadPending(rows)
			if p == "" || time.Now().After(guard) {
				e.mu.Lock()
				e.ran = time.Since(start)
				if p != "" {
					e.unmet = fmt.Sprintf("%v past -duration %v the load stopped, still waiting for %s", r.opts.guard(), r.opts.duration, p)
				}
				e.mu.Unlock()
				cancel()
				return
			}
			select {
			case <-stop.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return stop, cancel, e
}

// result returns how the load stopped.
func (e *loadEnd) result() loadStopped {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loadStopped
}

// loadPending says what the end condition still waits for: the teams of
// rows short of options.minDone completed requests, then what
// options.pending says; "" when nothing.
func (r *runner) loadPending(rows []row) string {
	now := time.Now()
	var views []teamView
	var parts []string
	for _, rw := range rows {
		v := rw.stats.view(now, 0, 0)
		r.label(&v, rw, nil)
		if v.Done < r.opts.minDone {
			parts = append(parts, fmt.Sprintf("team %s to complete %s (%d done)", v.label(), requests(r.opts.minDone), v.Done))
		}
		views = append(views, v)
	}
	if r.opts.pending != nil {
		if p := r.opts.pending(views); p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}

// describeEnd says in a few words when the demo load of -duration d
// stops.
func (o options) describeEnd(d time.Duration) string {
	if !o.onEvents() {
		return "for " + d.String()
	}
	var what []string
	if o.minDone > 0 {
		what = append(what, "every team has completed "+requests(o.minDone))
	}
	if o.pending != nil {
		what = append(what, "the test's condition holds")
	}
	return fmt.Sprintf("for at least %v, then until %s (at most %v more)", d, strings.Join(what, " and "), o.guard())
}

// requests says "a request" or "n requests".
func requests(n int) string {
	if n == 1 {
		return "a request"
	}
	return fmt.Sprintf("%d requests", n)
}
