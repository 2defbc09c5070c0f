package main

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(100 - i) // 100ms ... 1ms, unsorted
	}
	tests := []struct {
		name   string
		xs     []time.Duration
		p      float64
		want   time.Duration
		wantOK bool
	}{
		{"empty", nil, 50, 0, false},
		{"one p50", []time.Duration{ms(7)}, 50, ms(7), true},
		{"one p99", []time.Duration{ms(7)}, 99, ms(7), true},
		{"two p50 is the lower", []time.Duration{ms(20), ms(10)}, 50, ms(10), true},
		{"two p51 is the upper", []time.Duration{ms(20), ms(10)}, 51, ms(20), true},
		{"p0 is the min", []time.Duration{ms(3), ms(1), ms(2)}, 0, ms(1), true},
		{"p100 is the max", []time.Duration{ms(3), ms(1), ms(2)}, 100, ms(3), true},
		{"below 0 is the min", []time.Duration{ms(3), ms(1)}, -5, ms(1), true},
		{"above 100 is the max", []time.Duration{ms(3), ms(1)}, 150, ms(3), true},
		{"100 samples p50", hundred, 50, ms(50), true},
		{"100 samples p99", hundred, 99, ms(99), true},
		{"100 samples p99.5", hundred, 99.5, ms(100), true},
		{"100 samples p1", hundred, 1, ms(1), true},
		{"ten samples p99 is the max", []time.Duration{ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7), ms(8), ms(9), ms(10)}, 99, ms(10), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tt.xs...)
			got, ok := percentile(tt.xs, tt.p)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("percentile(%v, %v) = %v, %v, want %v, %v", tt.xs, tt.p, got, ok, tt.want, tt.wantOK)
			}
			for i := range before {
				if before[i] != tt.xs[i] {
					t.Fatalf("percentile modified its input")
				}
			}
		})
	}
}

func TestRateMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name string
		adds []time.Duration // one token each
		now  time.Duration
		want float64
	}{
		{"nothing", nil, ms(5000), 0},
		{"at start", nil, 0, 0},
		{"young run divides by its age", []time.Duration{ms(100), ms(200), ms(300), ms(400)}, ms(2000), 2},
		{"full window", []time.Duration{ms(300), ms(1100), ms(2100), ms(3100), ms(4100)}, ms(5100), 1},
		{"the oldest bucket leaves", []time.Duration{ms(100), ms(1100), ms(2100), ms(3100), ms(4100)}, ms(5100), 0.8},
		{"old events leave the window", []time.Duration{ms(100), ms(200), ms(9000)}, ms(9100), 0.2},
		{"long gap empties it", []time.Duration{ms(100), ms(200)}, ms(60000), 0},
		{"before start is ignored", []time.Duration{-ms(100)}, ms(5000), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRateMeter(t0, 250*time.Millisecond, 20)
			for _, d := range tt.adds {
				m.add(at(d), 1)
			}
			if got := m.rate(at(tt.now)); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("rate after %v at %v = %v, want %v", tt.adds, tt.now, got, tt.want)
			}
		})
	}
}

func TestRateMeterLateEventAfterWrap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newRateMeter(t0, 250*time.Millisecond, 4) // 1 s window
	m.add(t0.Add(ms(2100)), 10)
	m.add(t0.Add(ms(100)), 5) // same ring slot, older bucket: dropped
	if got := m.rate(t0.Add(ms(2200))); got != 10 {
		t.Errorf("rate = %v, want 10 (the late event must not overwrite the newer bucket)", got)
	}
}

func TestFormatBands(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, "-"},
		{[]int{0}, "0"},
		{[]int{1, 0}, "0, 1"},
		{[]int{11}, "11"},
		{[]int{21, 1, 11, 31}, "1, 11-31"},
		{[]int{20, 10}, "10-20"},
	}
	for _, tt := range tests {
		if got := formatBands(append([]int(nil), tt.in...)); got != tt.want {
			t.Errorf("formatBands(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTeamStats(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newTeamStats("research", t0)
	// Two within share (priority 1), three borrowing (11, 21), one error,
	// one cancelled, one still waiting for its headers.
	reqs := []struct {
		prio   int
		borrow bool
		ttft   time.Duration
		tokens int64
		err    error
		cancel bool
	}{
		{1, false, ms(40), 100, nil, false},
		{1, false, ms(60), 100, nil, false},
		{11, true, ms(900), 50, nil, false},
		{11, true, ms(1100), 50, nil, false},
		{21, true, ms(3000), 50, nil, false},
		{11, true, 0, 0, errors.New("status 500"), false},
		{11, true, 0, 0, errors.New("context canceled"), true},
	}
	for i, r := range reqs {
		s.begin()
		now := t0.Add(time.Duration(i) * time.Second)
		s.headers(now, r.prio, r.borrow, false)
		s.token(now, r.tokens)
		s.end(now, result{Priority: r.prio, Borrowing: r.borrow, TTFT: r.ttft, HasTTFT: r.ttft > 0,
			Tokens: r.tokens, Err: r.err, Canceled: r.cancel}, true)
	}
	s.begin() // in flight, no headers yet
	s.begin() // in flight, borrowing
	s.headers(t0.Add(7*time.Second), 11, true, false)

	v := s.view(t0.Add(8*time.Second), 0, 10*time.Second)
	want := teamView{
		Name: "research", InFlight: 2, Within: 0, Borrowing: 1, Waiting: 1,
		Done: 5, Errors: 1, Canceled: 1, DoneWithin: 2, DoneBorrow: 3, Tokens: 350,
		Bands: "1, 11-21", Prios: []int{1, 11, 21}, TokPerSec: 35,
		P50: ms(900), P99: ms(3000), HasTTFT: true,
		P50Within: ms(40), HasP50Within: true, P50Borrow: ms(1100), HasP50Borrow: true,
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("view(whole run) =\n%+v\nwant\n%+v", v, want)
	}
	if got := s.lastError(); got != "status 500" {
		t.Errorf("lastError() = %q, want %q", got, "status 500")
	}

	// The live window keeps only the recent priorities and samples.
	v = s.view(t0.Add(8*time.Second), 5*time.Second, 10*time.Second)
	if v.Bands != "11-21" || !v.HasTTFT || v.P50 != ms(3000) {
		t.Errorf("view(5s window): bands %q, p50 %v (has %v), want \"11-21\", 3s", v.Bands, v.P50, v.HasTTFT)
	}
}

func TestParseStanding(t *testing.T) {
	tests := []struct {
		hdr        map[string]string
		wantPrio   int
		wantBorrow bool
	}{
		{map[string]string{}, -1, false},
		{map[string]string{"X-Fairshare-Priority": "0", "X-Fairshare-Borrowing": "false"}, 0, false},
		{map[string]string{"X-Fairshare-Priority": "21", "X-Fairshare-Borrowing": "true"}, 21, true},
		{map[string]string{"X-Fairshare-Priority": "11"}, 11, true},
		{map[string]string{"X-Fairshare-Priority": "1"}, 1, false},
		{map[string]string{"X-Fairshare-Priority": "high"}, -1, false},
	}
	for _, tt := range tests {
		h := map[string][]string{}
		for k, v := range tt.hdr {
			h[k] = []string{v}
		}
		p, b := parseStanding(h)
		if p != tt.wantPrio || b != tt.wantBorrow {
			t.Errorf("parseStanding(%v) = %d, %v, want %d, %v", tt.hdr, p, b, tt.wantPrio, tt.wantBorrow)
		}
	}
}
