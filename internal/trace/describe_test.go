package trace

import "testing"

// TestSpanAndShaping: the window and the settings that reshape it, as the
// benchmark's setup tables and fairshare-run's banner print them.
func TestSpanAndShaping(t *testing.T) {
	for _, c := range []struct {
		s           Spec
		unit        string
		span, shape string
	}{
		{Spec{Start: 1800, Duration: 900}, " s", "[1800 s, 2700 s)", ""},
		{Spec{Start: 0}, "s", "[0s, end)", ""},
		{Spec{Start: 60, Duration: 30, TimeScale: 1, RateScale: 1, Every: 1}, "s", "[60s, 90s)", ""},
		{Spec{Start: 0.5, Duration: 2, TimeScale: 0.5, RateScale: 2, Every: 3, Offset: 1}, "s", "[0.5s, 2.5s)",
			", time_scale 0.5, rate_scale 2, every 3 offset 1"},
	} {
		if got := c.s.Span(c.unit); got != c.span {
			t.Errorf("%+v: Span(%q) = %q, want %q", c.s, c.unit, got, c.span)
		}
		if got := c.s.Shaping(); got != c.shape {
			t.Errorf("%+v: Shaping() = %q, want %q", c.s, got, c.shape)
		}
	}
}
