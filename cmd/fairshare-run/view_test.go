package main

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestFmtDur(t *testing.T) {
	tests := []struct {
		d    time.Duration
		ok   bool
		want string
	}{
		{0, false, "-"},
		{500 * time.Microsecond, true, "500µs"},
		{38 * time.Millisecond, true, "38ms"},
		{1234 * time.Millisecond, true, "1.23s"},
		{12345 * time.Millisecond, true, "12.3s"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.d, tt.ok); got != tt.want {
			t.Errorf("fmtDur(%v, %v) = %q, want %q", tt.d, tt.ok, got, tt.want)
		}
	}
}

func TestFmtNum(t *testing.T) {
	tests := []struct {
		x    float64
		want string
	}{
		{0, "0"},
		{1.5, "1.5"},
		{4.1666, "4.17"},
		{1234.5, "1234"},
		{123456, "123456"},
		{1234567, "1.23e+06"},
		{0.0001, "1.00e-04"},
		{math.Inf(1), "inf"},
		{math.NaN(), "-"},
	}
	for _, tt := range tests {
		if got := fmtNum(tt.x); got != tt.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tt.x, got, tt.want)
		}
	}
}

// demoFrame is a frame as the runner builds it mid-run: search within share,
// research flooding and borrowing, the plugin's status known for both.
func demoFrame() frame {
	return frame{
		Elapsed:  12 * time.Second,
		Duration: 40 * time.Second,
		Phase:    "demo load",
		Flow:     flowControl{On: true, MaxQueueTime: 30 * time.Second},
		Pools: []statusPool{{Name: "llama-8b", Capacity: 16, Teams: []statusTeam{
			{Team: "search", Share: 0.5, Reserved: 8, InFlight: 5, Usage: 1200, LevelFairshare: 2.5},
			{Team: "research", Share: 0.2, Reserved: 3, InFlight: 28, Borrowing: 25, Usage: 9000, LevelFairshare: 0.3, Rank: 1},
		}}},
		Teams: []teamView{
			{Name: "search", Share: 0.5, InFlight: 5, Within: 5, Bands: "0", TokPerSec: 612,
				P50: 38 * time.Millisecond, P99: 95 * time.Millisecond, HasTTFT: true, PluginTTFT: true, Done: 214,
				Status: &statusTeam{Team: "search", Share: 0.5, Reserved: 8, InFlight: 5, Usage: 1200, LevelFairshare: 2.5}},
			{Name: "chat", Share: 0.3, Bands: "-", Errors: 2},
			{Name: "research", Share: 0.2, InFlight: 28, Within: 3, Borrowing: 25, Bands: "1, 11-21", TokPerSec: 1500,
				P50: 2100 * time.Millisecond, P99: 6 * time.Second, HasTTFT: true, Done: 80,
				Status: &statusTeam{Team: "research", Share: 0.2, Reserved: 3, InFlight: 28, Borrowing: 25, Usage: 9000, LevelFairshare: 0.3, Rank: 1, Waiting: 4}},
		},
	}
}

func TestRenderTable(t *testing.T) {
	var b strings.Builder
	renderTable(&b, demoFrame())
	got := b.String()
	for _, want := range []string{
		"12s / 40s · demo load · flow control on (max_queue_time 30s)\n",
		"pool llama-8b: capacity 16 · in flight 33 (within share 8, borrowing 25) · 17 above capacity: waiting in vLLM's queue\n",
		"RSV reserved slots (share × capacity) · FLIGHT = WITHIN (in its reservation) + BORROW (beyond it), the plugin's count · WAIT held at the gateway\n",
		"in flight above capacity: a team's requests within its reservation are never held",
		"TEAM ",
		"│ WAIT    USAGE      LF RANK\n",
		"search       50%    8      5      5      0  0              612     38ms     95ms    214    0 │    0     1200     2.5    0\n",
		"chat         30%    -      0      0      0  -                0        -        -      0    2 │    -        -       -    -\n",
		"research     20%    3     28      3     25  1, 11-21      1500   2.10s*   6.00s*     80    0 │    4     9000     0.3    1\n",
		ttftLegend + ".\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderTable() lacks %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("renderTable() wrote escape codes:\n%q", got)
	}
}

// TestRenderTableFlowControlOff: a configuration without flow control says
// so in the view's first line, and the legend says why in flight then
// exceeds capacity; every legend line fits the 150 columns of
// docs/make-run.txt.
func TestRenderTableFlowControlOff(t *testing.T) {
	f := demoFrame()
	f.Flow = flowControl{}
	var b strings.Builder
	renderTable(&b, f)
	got := b.String()
	for _, want := range []string{
		"12s / 40s · demo load · flow control OFF (max_queue_time 0s: nothing is held)\n",
		"in flight above capacity: without flow control every request goes to vLLM at once",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderTable() lacks %q; got:\n%s", want, got)
		}
	}
	f.Flow = flowControl{MaxQueueTime: 30 * time.Second, Shadow: true}
	b.Reset()
	renderTable(&b, f)
	if want := "12s / 40s · demo load · mode shadow: nothing held"; !strings.Contains(b.String(), want) {
		t.Errorf("renderTable() in shadow mode lacks %q; got:\n%s", want, b.String())
	}
	for _, fc := range []flowControl{{}, {On: true, MaxQueueTime: time.Minute}} {
		for _, l := range append(legend(fc), ttftLegend+".") {
			if n := utf8.RuneCountInString(l); n > 150 {
				t.Errorf("legend line of %d characters, want at most 150: %q", n, l)
			}
		}
	}
}

func TestRenderTableWithoutStatus(t *testing.T) {
	f := demoFrame()
	f.Pools, f.StatusErr = nil, "status: connection refused"
	for i := range f.Teams {
		f.Teams[i].Status = nil
	}
	var b strings.Builder
	renderTable(&b, f)
	got := b.String()
	for _, want := range []string{
		"plugin status: status: connection refused\n",
		// client-side figures when the plugin's are unknown
		"research     20%    -     28      3     25  1, 11-21      1500",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderTable() lacks %q; got:\n%s", want, got)
		}
	}
}

func TestLiveViewRedrawsInPlace(t *testing.T) {
	var b strings.Builder
	v := &liveView{w: &b}
	v.drawText("a\nb\nc\n")
	first := b.String()
	if first != "\x1b[?7la\x1b[K\nb\x1b[K\nc\x1b[K\n\x1b[J" {
		t.Errorf("first frame = %q", first)
	}
	b.Reset()
	v.drawText("x\ny\n")
	if got := b.String(); got != "\x1b[3A\rx\x1b[K\ny\x1b[K\n\x1b[J" {
		t.Errorf("second frame = %q, want cursor up 3 lines then 2 lines and clear below", got)
	}
	b.Reset()
	v.drawText("p\n")
	if got := b.String(); !strings.HasPrefix(got, "\x1b[2A\r") {
		t.Errorf("third frame = %q, want cursor up 2 lines", got)
	}
	b.Reset()
	v.close()
	if got := b.String(); got != "\x1b[?7h" {
		t.Errorf("close() wrote %q, want autowrap back on", got)
	}
}

func TestRenderLines(t *testing.T) {
	var b strings.Builder
	renderLines(&b, demoFrame())
	got := b.String()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("renderLines() wrote %d lines, want 4 (pool + 3 teams):\n%s", len(lines), got)
	}
	for _, want := range []string{
		"[ 12s] pool llama-8b: 33/16 in flight, 25 borrowing\n",
		"[ 12s] search    in flight   5 (within  5, borrowing   0)  priority 0            612 tok/s  TTFT p50   38ms p99   95ms  done 214\n",
		"[ 12s] chat      in flight   0 (within  0, borrowing   0)  priority -              0 tok/s  TTFT p50      - p99      -  done 0, 2 errors\n",
		"[ 12s] research  in flight  28 (within  3, borrowing  25)  priority 1, 11-21    1500 tok/s  TTFT p50 2.10s* p99 6.00s*  done 80, 4 held\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderLines() lacks %q; got:\n%s", want, got)
		}
	}
}

func TestRenderSummary(t *testing.T) {
	s := summary{
		Elapsed:  40 * time.Second,
		Upstream: "simulated vLLM",
		Config:   "demo",
		Classes:  []string{"interactive", "batch"},
		Teams: []teamView{
			{Name: "search", Share: 0.5, Bands: "0", Done: 300, DoneWithin: 300, Tokens: 3000, TokPerSec: 75,
				P50: 40 * time.Millisecond, P99: 90 * time.Millisecond, HasTTFT: true, PluginTTFT: true,
				P50Within: 40 * time.Millisecond, HasP50Within: true},
			{Name: "research", Share: 0.2, Bands: "1, 11-21", Done: 100, DoneWithin: 20, DoneBorrow: 80, Tokens: 7000, TokPerSec: 175,
				P50: 2 * time.Second, P99: 5 * time.Second, HasTTFT: true,
				P50Within: 100 * time.Millisecond, HasP50Within: true, P50Borrow: 2500 * time.Millisecond, HasP50Borrow: true,
				HeldWithin: 50 * time.Millisecond, HeldBorrow: 2 * time.Second, Canceled: 3},
		},
		Flow: flowControl{On: true, MaxQueueTime: 30 * time.Second},
		Baseline: map[string]map[string]baselineTeam{"": {
			"search":   {Done: 100, Tokens: 1000, P50: 2 * time.Second, P99: 3 * time.Second, HasTTFT: true},
			"research": {Done: 150, Tokens: 9000, P50: time.Second, P99: 2 * time.Second, HasTTFT: true},
		}},
		Pools:      []statusPool{{Name: "llama-8b", Capacity: 16, Teams: []statusTeam{{Team: "search", Usage: 10, LevelFairshare: 2}, {Team: "research", Usage: 90, LevelFairshare: 0.2, Rank: 1}}}},
		Errors:     []string{"research: status 500"},
		PluginLogs: 2,
	}
	var b strings.Builder
	renderSummary(&b, s)
	got := b.String()
	for _, want := range []string{
		"summary after 40.0s (simulated vLLM, demo, flow control on (max_queue_time 30s))\n",
		"search     interactive   300    0    300        0  0             3000     75    30%      50%     40ms     90ms       40ms          -\n",
		"research   batch         100    0     20       80  1, 11-21      7000    175    70%      20%   2.00s*   5.00s*      100ms      2.50s\n",
		ttftLegend + ".\n",
		"TOK%: the team's part of its pool's completion tokens. ENTITLED: its share, which it gets whenever it asks for it;",
		"p50 within, p50 borrow: their TTFT p50 (the client's figures).\n",
		"without the plugin: the same demo load on the same simulated engine under vLLM's default fcfs, computed in virtual time:\n",
		"  search     TTFT p50 2.00s, p99 3.00s (with the plugin 40ms, 90ms) · 10% of the tokens (with 30%) · 100 requests (with 300)\n",
		"  research   TTFT p50 1.00s, p99 2.00s (with the plugin 2.00s*, 5.00s*) · 90% of the tokens (with 70%) · 150 requests (with 100)\n",
		"research: 3 requests cancelled at the end\n",
		"plugin at the end: pool llama-8b in flight 0 (borrowing 0); usage / LF / rank: search 10 / 2 / 0, research 90 / 0.2 / 1\n",
		"last error of research: status 500\n",
		"the plugin logged 2 warnings or errors (-v prints them)\n",
		"research borrowed for 80 of its 100 requests (priority 1, 11-21); its borrowers waited TTFT p50 2.50s, its within-share requests 100ms: " +
			"both include the time held at the gateway (p50 2.00s borrowing, 50ms within share), since a slot of its reservation goes to its own oldest held request; " +
			"it got 70% of the tokens for a 20% share: capacity the others left idle.\n",
		"search stayed within its share: 300 requests at priority 0, TTFT p50 40ms.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderSummary() lacks %q; got:\n%s", want, got)
		}
	}
	s.Interrupted = true
	b.Reset()
	renderSummary(&b, s)
	if !strings.Contains(b.String(), "summary interrupted after 40.0s") {
		t.Errorf("interrupted summary does not say so:\n%s", b.String())
	}
}

// TestRenderReplicasStanding: the line of a proxy of a cluster shows
// every team's reservation and loan there, and its requests within
// share and borrowing, so that a user sees a team within its
// reservation stay within share at every proxy.
func TestRenderReplicasStanding(t *testing.T) {
	var b strings.Builder
	renderReplicas(&b, "", []replicaStatus{{Name: "r1", Addr: "127.0.0.1:10001", Weight: 2, Pools: []statusPool{{
		Name: "llama-8b", Capacity: 2, Teams: []statusTeam{
			{Team: "search", Share: 0.5, Reserved: 1, InFlight: 1},
			{Team: "chat", Share: 0.3, Reserved: 0, Lent: 2, InFlight: 2},
			{Team: "research", Share: 0.2, Reserved: 1, InFlight: 3, Borrowing: 2, Waiting: 1},
		}}}}})
	want := "replica r1 127.0.0.1:10001 (20% of the load): pool llama-8b slice 2 (reserved+lent search 1, chat 0+2, research 1), in flight 6 " +
		"(search 1 within, 0 borrowing; chat 2 within, 0 borrowing; research 1 within, 2 borrowing, 1 held);\n"
	if got := b.String(); got != want {
		t.Errorf("replica line:\n got %q\nwant %q", got, want)
	}
}

// TestShadowViewTellsTheTruth: in shadow mode nothing is enforced, so the
// view and the summary say what enforce mode would have done (would-be
// priorities, would-hold counts) and claim nothing enforce mode's
// legend and verdict say: no borrowers waiting behind within-share
// requests in vLLM's queue, no "capacity the others left idle" for a
// borrower's tokens.
func TestShadowViewTellsTheTruth(t *testing.T) {
	f := demoFrame()
	f.Flow = flowControl{MaxQueueTime: 30 * time.Second, Shadow: true}
	f.Teams[2].WouldHold = 17
	var b strings.Builder
	renderTable(&b, f)
	live := b.String()
	b.Reset()
	renderLines(&b, f)
	lines := b.String()
	for _, l := range legend(f.Flow) {
		if n := utf8.RuneCountInString(l); n > 150 {
			t.Errorf("shadow legend line of %d characters, want at most 150: %q", n, l)
		}
	}
	for _, c := range []struct{ view, got, want string }{
		{"table", live, "WOULD PRIO"},
		{"table", live, "│ HOLD    USAGE      LF RANK\n"},
		{"table", live, "research     20%    3     28      3     25  1, 11-21      1500   2.10s*   6.00s*     80    0 │   17     9000     0.3    1\n"},
		{"table", live, "queues the rest in arrival order"},
		{"lines", lines, "would-be priority 1, 11-21"},
		{"lines", lines, ", 17 enforce would have held\n"},
	} {
		if !strings.Contains(c.got, c.want) {
			t.Errorf("shadow %s lacks %q:\n%s", c.view, c.want, c.got)
		}
	}
	if strings.Contains(live, "behind within-share requests") || strings.Contains(live, "  PRIORITY ") {
		t.Errorf("shadow table says what only enforce mode does:\n%s", live)
	}

	s := summary{
		Elapsed: 25 * time.Second, Upstream: "simulated vLLM", Config: "shadow.json", Classes: []string{"interactive", "batch"},
		Flow: f.Flow,
		Teams: []teamView{
			{Name: "search", Share: 0.5, Bands: "0", Done: 43, DoneWithin: 43, Tokens: 2095, P50: 2560 * time.Millisecond, P99: 3630 * time.Millisecond, HasTTFT: true, PluginTTFT: true,
				P50Within: 2560 * time.Millisecond, HasP50Within: true},
			{Name: "research", Share: 0.2, Bands: "1, 31", Done: 131, DoneWithin: 15, DoneBorrow: 116, Tokens: 31505, WouldHold: 90,
				P50: 2550 * time.Millisecond, HasTTFT: true, PluginTTFT: true,
				P50Within: 2460 * time.Millisecond, HasP50Within: true, P50Borrow: 2560 * time.Millisecond, HasP50Borrow: true},
		},
		Baseline: map[string]map[string]baselineTeam{"": {"search": {Done: 46, Tokens: 2000, P50: 2300 * time.Millisecond, HasTTFT: true}}},
	}
	b.Reset()
	renderSummary(&b, s)
	sum := b.String()
	for _, want := range []string{
		"WOULD PRIO",
		"shadow mode: WITHIN, BORROWED and WOULD PRIO are what enforce mode would have decided; nothing was written or held,",
		"research would have borrowed for 116 of its 131 requests (would-be priority 1, 31), and enforce mode would have held 90 of them at the gateway; " +
			"nothing was enforced: it got 94% of the tokens for a 20% share, what vLLM's arrival order gave it.\n",
		"search would have stayed within its share: 43 requests at would-be priority 0, TTFT p50 2.56s (nothing enforced).\n",
		"(with the plugin in shadow mode 2.56s, 3.63s)",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("shadow summary lacks %q:\n%s", want, sum)
		}
	}
	if strings.Contains(sum, "left idle") {
		t.Errorf("shadow summary credits the others with leaving capacity idle:\n%s", sum)
	}
}

// TestVerdictBorrowersNotHeld: when most of a team's borrowers went at
// once (a fallback took them) while its within-share requests were held,
// the verdict says so instead of printing a held p50 of 0.
func TestVerdictBorrowersNotHeld(t *testing.T) {
	got := verdict([]teamView{{Name: "research", Share: 0.2, Bands: "1, 31", Done: 100, DoneWithin: 30, DoneBorrow: 70, Tokens: 10,
		P50Within: 2 * time.Second, HasP50Within: true, P50Borrow: 700 * time.Millisecond, HasP50Borrow: true, HeldWithin: 1800 * time.Millisecond}}, false)
	want := "research borrowed for 70 of its 100 requests (priority 1, 31); its borrowers waited TTFT p50 700ms, its within-share requests 2.00s: " +
		"they include the time held at the gateway (p50 1.80s), since a slot of its reservation goes to its own oldest held request, " +
		"while most of its borrowers were not held; it got 100% of the tokens for a 20% share: capacity the others left idle."
	if len(got) != 1 || got[0] != want {
		t.Errorf("verdict = %q\nwant %q", got, want)
	}
	if strings.Contains(strings.Join(got, ""), "µs") {
		t.Errorf("verdict prints a zero held time: %q", got)
	}
}

// TestRenderLinesCapacitySource: the line view names where the pool's
// capacity comes from next to the word capacity, and the pool's Jain
// reading.
func TestRenderLinesCapacitySource(t *testing.T) {
	f := demoFrame()
	f.Pools[0].Source = "engines (2)"
	f.Jain = map[string]jainReading{"llama-8b": {J: 0.982, Saturated: 2}}
	var b strings.Builder
	renderLines(&b, f)
	if want := "[ 12s] pool llama-8b: 33/16 in flight, 25 borrowing · capacity read from engines (2) · Jain 0.982 over 2 teams\n"; !strings.Contains(b.String(), want) {
		t.Errorf("renderLines() lacks %q:\n%s", want, b.String())
	}
	f.Jain["llama-8b"] = jainReading{J: 1, Saturated: 1}
	b.Reset()
	renderTable(&b, f)
	if want := "capacity 16 read from engines (2) · in flight 33 (within share 8, borrowing 25) · 17 above capacity: waiting in vLLM's queue · Jain - (fewer than two teams above their share)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("renderTable() lacks %q:\n%s", want, b.String())
	}
}

// TestRenderSummaryLatency: the summary lists every team's queue time and
// end to end next to its TTFT from the plugin's histograms, and each
// pool's Jain index over the readings that compare two teams or more.
func TestRenderSummaryLatency(t *testing.T) {
	s := summary{Flow: flowControl{On: true, MaxQueueTime: 30 * time.Second}, Teams: []teamView{
		{Name: "search", Done: 10, P50: 90 * time.Millisecond, P99: 400 * time.Millisecond, HasTTFT: true, PluginTTFT: true,
			Total: latencyStats{N: 10, P50: time.Second, P99: 1500 * time.Millisecond}},
		{Name: "research", Done: 20, P50: 3 * time.Second, P99: 4 * time.Second, HasTTFT: true, PluginTTFT: true,
			Queue: latencyStats{N: 12, P50: 2800 * time.Millisecond, P99: 3900 * time.Millisecond}, Total: latencyStats{N: 20, P50: 6 * time.Second, P99: 8 * time.Second}},
	}, Jain: map[string]jainSummary{"llama-8b": {P50: 0.97, Min: 0.9, Readings: 20, All: 30}, "qwen": {All: 30}}}
	var b strings.Builder
	renderSummary(&b, s)
	for _, want := range []string{
		"  search     TTFT p50 90ms, p99 400ms · none held at the gateway · end to end p50 1.00s, p99 1.50s\n",
		"  research   TTFT p50 3.00s, p99 4.00s · 12 held at the gateway, p50 2.80s, p99 3.90s · end to end p50 6.00s, p99 8.00s\n",
		"Jain's index (fairness_jain), pool llama-8b: p50 0.970, lowest 0.900, over 20 readings with two or more teams above their share (1: served by share)\n",
		"Jain's index (fairness_jain), pool qwen: no reading had two teams above their share (30 readings): nobody to compare\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// TestWorkNote: a pool with throughput shows its work capacity and every
// team's reserved rate and what is left of its bucket, read from the
// plugin's status; a pool without one shows nothing.
func TestWorkNote(t *testing.T) {
	pools, err := parseStatus([]byte(`{"pools":[{"name":"p","capacity":16,"throughput":30000,"teams":[
		{"team":"search","reserved_work":15000,"work_debt":30000,"work_burst":150000},
		{"team":"research","reserved_work":6000,"work_debt":90000,"work_burst":60000}]},
		{"name":"q","capacity":4,"teams":[{"team":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "  work: throughput 30000 cost units/s (configured) · reserved/s, bucket left: search 15000 80% research 6000 0%"
	if got := workNote(&pools[0]); got != want {
		t.Errorf("workNote = %q, want %q", got, want)
	}
	if got := workNote(&pools[1]); got != "" {
		t.Errorf("workNote of a pool without throughput = %q, want none", got)
	}
}
