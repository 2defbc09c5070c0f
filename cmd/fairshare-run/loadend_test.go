package main

import (
	"strings"
	"testing"
)

// TestDemoLoadGuard: an end condition that never holds (a test's, here
// with a guard of 1s instead of 2 minutes) stops the load at its guard past
// -duration anyway, and the summary says what it was still waiting for.
// (The elapsed time is only bounded below: the load cannot stop before
// -duration and the guard have passed, however fast the machine.)
func TestDemoLoadGuard(t *testing.T) {
	// One team of one interactive client (planTeams, scaleTeams): little
	// load to drain.
	r, out := startRun(t, writeConfig(t, `{"pools": [{"name": "p", "capacity": 4, "models": ["m"], "teams": {"a": {"share": 1}}}]}`))
	r.opts.loadGuard = r.opts.duration
	r.opts.pending = func([]teamView) string { return "a sign that never comes" }
	s := r.demo(t.Context(), false)
	t.Logf("output:\n%s", out.String())
	text := out.String()
	want := "1s past -duration 1s the load stopped, still waiting for a sign that never comes"
	if s.LoadUnmet != want {
		t.Errorf("LoadUnmet = %q, want %q", s.LoadUnmet, want)
	}
	for _, w := range []string{"for at least 1s, then until the test's condition holds (at most 1s more)\n", "end condition never held: " + want + "\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q:\n%s", w, text)
		}
	}
	if s.Elapsed < 2*r.opts.duration {
		t.Errorf("the load stopped after %v, before -duration and the guard (%v)", s.Elapsed, 2*r.opts.duration)
	}
}
