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

func TestCompletionMeansShared(t *testing.T) {
	m := completionMeans{}
	for _, v := range []float64{100, 300} {
		m.observe("p", "a", v)
	}
	m.observe("p", "b", 7)
	enc := m.appendBinary(nil)
	got := decodeMeans(enc)
	if len(got) != 2 || got[meanKey{"p", "a"}].mean != 200 || got[meanKey{"p", "a"}].n != 2 || got[meanKey{"p", "b"}].mean != 7 {
		t.Fatalf("decode(encode) = %v, want a 200 (2 samples), b 7", got)
	}
	// A VM keeps what it learnt itself and takes only what it lacks.
	own := completionMeans{}
	own.observe("p", "a", 50)
	if !own.seed(got) {
		t.Fatal("seed added nothing, want b")
	}
	if own.completion("p", "a", 1, 4096) != 50 || own.completion("p", "b", 1, 4096) != 7 {
		t.Errorf("after seed: a %d (want its own 50), b %d (want 7)", own.completion("p", "a", 1, 4096), own.completion("p", "b", 1, 4096))
	}
	if own.seed(got) {
		t.Error("a second seed added entries")
	}
	// Another version, a cut encoding, and bad values decode to what is
	// valid.
	if n := len(decodeMeans(append([]byte{meansVersion + 1}, enc[1:]...))); n != 0 {
		t.Errorf("another version gave %d entries", n)
	}
	if n := len(decodeMeans(enc[:len(enc)-3])); n != 1 {
		t.Errorf("a cut encoding gave %d entries, want the first one", n)
	}
	bad := completionMeans{meanKey{"p", "x"}: {mean: -1, n: 3}, meanKey{"p", "y"}: {mean: 5, n: 1}}
	if got := decodeMeans(bad.appendBinary(nil)); len(got) != 1 || got[meanKey{"p", "y"}] == nil {
		t.Errorf("negative mean kept: %v", got)
	}
}

// TestCompletionMeansThroughSlots checks that a team's slot, which keeps
// the team's entry once found, answers as the map does after every step:
// before the first sample, after samples through either form, and after
// a seed that fills an entry the slot already holds.
func TestCompletionMeansThroughSlots(t *testing.T) {
	m := completionMeans{}
	a, b := &teamSlot{name: "a"}, &teamSlot{name: "b"}
	check := func(step string) {
		t.Helper()
		for _, s := range []*teamSlot{a, b} {
			for _, c := range [][2]int64{{1, 4096}, {3, 50}, {2, 1}} {
				if got, want := m.completionAt("p", s, c[0], c[1]), m.completion("p", s.name, c[0], c[1]); got != want {
					t.Errorf("%s: completionAt(%s, %d, %d) = %d, the map gives %d", step, s.name, c[0], c[1], got, want)
				}
			}
		}
	}
	check("empty")
	m.observeAt("p", a, 100)
	check("a observed through its slot")
	m.observe("p", a.name, 300)
	m.observe("p", b.name, 20)
	check("observed through the map")
	m.observeAt("p", b, 40)
	check("b observed through its slot")
	if m[meanKey{"p", "b"}].n != 2 || len(m) != 2 {
		t.Errorf("b has %d samples in %d entries, want 2 in 2", m[meanKey{"p", "b"}].n, len(m))
	}
	// An entry without samples that a seed fills stays the one the
	// slot holds.
	c := &teamSlot{name: "c"}
	m[meanKey{"p", "c"}] = &runningMean{}
	check("c empty")
	_ = m.completionAt("p", c, 1, 1)
	m.seed(completionMeans{meanKey{"p", "c"}: {mean: 9, n: 4}})
	if got := m.completionAt("p", c, 1, 4096); got != 9 {
		t.Errorf("after a seed of 9: completionAt(c) = %d, want 9", got)
	}
}
