package plugin

import "testing"

func TestCompletionMeans(t *testing.T) {
	m := completionMeans{}
	if got := m.completion("p", "a", 2, 4096); got != 8192 {
		t.Errorf("before any sample = %d, want the cap × choices 8192", got)
	}
	for _, v := range []float64{100, 300} {
		m.observe("p", "a", v)
	}
	if got := m.completion("p", "a", 2, 4096); got != 400 {
		t.Errorf("after 100, 300 = %d, want mean 200 × 2", got)
	}
	if got := m.completion("p", "a", 1, 50); got != 50 {
		t.Errorf("mean above the cap = %d, want the cap 50", got)
	}
	if got := m.completion("p", "b", 1, 7); got != 7 {
		t.Errorf("another team = %d, want its cap 7", got)
	}
	// Past the window the mean follows a change.
	for i := 0; i < 10*meanWindow; i++ {
		m.observe("p", "a", 1000)
	}
	if got := m.completion("p", "a", 1, 4096); got < 990 || got > 1000 {
		t.Errorf("after many samples of 1000 = %d, want about 1000", got)
	}
}
