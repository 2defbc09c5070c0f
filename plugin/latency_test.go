package plugin_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// latencyConfig holds borrowers that find no room: capacity 4, teams a
// (0.5: 2 slots) and b (0.25: 1 slot).
const latencyConfig = `{
  "default_max_tokens": 16,
  "tick": "1s",
  "max_queue_time": "10s",
  "pools": [
    {"name": "small", "capacity": 4, "models": ["m"], "teams": {"a": {"share": 0.5}, "b": {"share": 0.25}}}
  ]
}`

// samples returns the samples of the histogram name, failing the test
// when it is not one.
func samples(t *testing.T, h *host.Host, name string) []uint64 {
	t.Helper()
	m, ok := h.Metrics()[name]
	if !ok || m.Type != hostcalls.MetricHistogram {
		t.Errorf("%s: not defined as a histogram (%+v)", name, m)
		return nil
	}
	return m.Samples
}

// counter returns the value of the counter name.
func counter(t *testing.T, h *host.Host, name string) int64 {
	t.Helper()
	m, ok := h.Metrics()[name]
	if !ok || m.Type != hostcalls.MetricCounter {
		t.Errorf("%s: not defined as a counter (%+v)", name, m)
		return 0
	}
	return m.Value
}

func wantSamples(t *testing.T, h *host.Host, name string, want ...uint64) {
	t.Helper()
	if got := samples(t, h, name); !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// TestWasmLatencyHistograms drives the built plugin on a virtual clock and
// reads every latency histogram and token counter, by pool, team and class:
// a held batch request (3 s at the gateway, first byte 200 ms after its
// dispatch, the end 50 ms later), a stream whose first event comes after a
// comment and a "data:" split across chunks, and an unknown team's JSON
// response.
func TestWasmLatencyHistograms(t *testing.T) {
	h, clock := start(t, latencyConfig, 1)
	a := [][2]string{{"x-team", "a"}}
	var first []*host.Stream
	for range 4 { // a's 2 slots, then the 2 free ones, borrowing
		first = append(first, request(h, 0, "/v1/chat/completions", a, chat("m", 4, "")))
	}
	held := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}, {"x-request-class", "batch"}}, chat("m", 4, ""))
	if held.ForwardedRequestBody() != nil {
		t.Fatalf("a's fifth request was forwarded, want it held")
	}
	clock.Advance(3 * time.Second)
	respondJSON(first[0], 10, 2) // frees a slot: the held request goes now
	if held.ForwardedRequestBody() == nil {
		t.Fatalf("the held request was not dispatched (local reply %+v)", held.LocalReply())
	}
	clock.Advance(200 * time.Millisecond)
	held.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	clock.Advance(50 * time.Millisecond)
	body := `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":32}}}`
	held.ResponseBody([]byte(body), true)
	held.Complete()

	batch := "fairshare.pool.small.team.a.class.batch."
	wantSamples(t, h, batch+"queue_time_ms", 3000)
	wantSamples(t, h, batch+"upstream_first_byte_ms", 200)
	wantSamples(t, h, batch+"first_byte_ms", 3200)
	wantSamples(t, h, batch+"total_time_ms", 3250)
	for name, want := range map[string]int64{"prompt_tokens_total": 40, "cached_tokens_total": 32, "completion_tokens_total": 6} {
		if got := counter(t, h, batch+name); got != want {
			t.Errorf("%s%s = %d, want %d", batch, name, got, want)
		}
	}
	// a's first interactive request went at once, answered 3 s later
	// (headers and body at the same instant).
	inter := "fairshare.pool.small.team.a.class.interactive."
	wantSamples(t, h, inter+"first_byte_ms", 3000)
	wantSamples(t, h, inter+"upstream_first_byte_ms", 3000)
	wantSamples(t, h, inter+"total_time_ms", 3000)
	if got := counter(t, h, inter+"prompt_tokens_total"); got != 10 {
		t.Errorf("interactive prompt tokens = %d, want 10", got)
	}
	if _, ok := h.Metrics()[inter+"queue_time_ms"]; ok {
		t.Errorf("%squeue_time_ms defined: no interactive request was held", inter)
	}
	for _, s := range first[1:] {
		respondJSON(s, 1, 1)
	}

	// b's stream: headers at +100 ms, a comment at +500 ms, "da" at
	// +600 ms, "ta: {...}" at +650 ms: the first event is at 650 ms.
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 4, `,"stream":true`))
	clock.Advance(100 * time.Millisecond)
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	for _, step := range []struct {
		after time.Duration
		chunk string
	}{
		{400 * time.Millisecond, ": keep-alive\n\n"},
		{100 * time.Millisecond, "da"},
		{50 * time.Millisecond, `ta: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"},
		{50 * time.Millisecond, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}}` + "\n\n"},
	} {
		clock.Advance(step.after)
		s.ResponseBody([]byte(step.chunk), false)
	}
	clock.Advance(50 * time.Millisecond)
	s.ResponseBody([]byte("data: [DONE]\n\n"), true)
	s.Complete()
	stream := "fairshare.pool.small.team.b.class.interactive."
	wantSamples(t, h, stream+"first_byte_ms", 650)
	wantSamples(t, h, stream+"upstream_first_byte_ms", 650)
	wantSamples(t, h, stream+"total_time_ms", 750)
	for name, want := range map[string]int64{"prompt_tokens_total": 7, "cached_tokens_total": 3, "completion_tokens_total": 5} {
		if got := counter(t, h, stream+name); got != want {
			t.Errorf("%s%s = %d, want %d", stream, name, got, want)
		}
	}

	// A team the pool does not list is counted as _unknown.
	u := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "zed"}, {"x-request-class", "batch"}}, chat("m", 4, ""))
	clock.Advance(120 * time.Millisecond)
	respondJSON(u, 2, 3)
	unknown := "fairshare.pool.small.team._unknown.class.batch."
	wantSamples(t, h, unknown+"first_byte_ms", 120)
	wantSamples(t, h, unknown+"total_time_ms", 120)
	if got := counter(t, h, unknown+"completion_tokens_total"); got != 3 {
		t.Errorf("unknown team's completion tokens = %d, want 3", got)
	}
	for name := range h.Metrics() {
		if strings.Contains(name, ".zed.") {
			t.Errorf("%s: an unknown team's name in a metric", name)
		}
	}
}

// TestWasmLatencyResetRecordsNoEnd: a stream reset before its response
// ended records its first byte but no end-to-end time and no tokens.
func TestWasmLatencyResetRecordsNoEnd(t *testing.T) {
	h, clock := start(t, latencyConfig, 1)
	s := request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "b"}}, chat("m", 4, ""))
	clock.Advance(80 * time.Millisecond)
	s.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	clock.Advance(time.Second)
	s.Reset()
	p := "fairshare.pool.small.team.b.class.interactive."
	wantSamples(t, h, p+"first_byte_ms", 80)
	for _, name := range []string{"total_time_ms", "prompt_tokens_total", "completion_tokens_total"} {
		if _, ok := h.Metrics()[p+name]; ok {
			t.Errorf("%s%s defined after a reset", p, name)
		}
	}
}

// TestWasmJainFairnessGauge: the pool's fairness_jain gauge is Jain's index
// of the share-normalised decayed usage over the saturated teams (borrowing
// or held), computed here from the pool record; a team within its share
// (c) and the unknown team (no share) are not in it; once no team is
// saturated it reads 1 over none.
func TestWasmJainFairnessGauge(t *testing.T) {
	const cfg = `{
  "default_max_tokens": 16, "tick": "1s", "half_life": "60s",
  "pools": [{"name": "p", "capacity": 12, "models": ["m"],
    "teams": {"a": {"share": 0.25}, "b": {"share": 0.25}, "c": {"share": 0.25}}}]
}`
	h, _ := start(t, cfg, 1)
	h.Advance(time.Second)
	// a and b borrow (4 each, 3 slots each); c stays within its share.
	as, bs, cs := sendTeam(h, 0, "a", 4), sendTeam(h, 0, "b", 4), sendTeam(h, 0, "c", 1)
	respondJSON(as[0], 300, 50) // a served ~3× b
	respondJSON(bs[0], 100, 20)
	respondJSON(cs[0], 1000, 1000)
	respondJSON(sendTeam(h, 0, "zed", 1)[0], 500, 500)
	h.Advance(time.Second)

	st := teamStats(t, h, "p")
	for _, team := range []string{"a", "b"} {
		if st[team].Borrowing == 0 {
			t.Fatalf("%s is not borrowing (%+v)", team, st[team])
		}
	}
	want := jainOf(st, "a", "b")
	m := h.Metrics()
	if got := m["fairshare.pool.p.fairness_jain"].Value; got != want || want >= 1000 {
		t.Errorf("fairness_jain = %d, want %d (J of a and b), below 1000", got, want)
	}
	if got := m["fairshare.pool.p.saturated_teams"].Value; got != 2 {
		t.Errorf("saturated_teams = %d, want 2 (a and b)", got)
	}
	if got := m["fairshare.pool.p.team.a.share"].Value; got != 333 {
		t.Errorf("share of a = %d, want 333 (0.25 of 0.75, in thousandths)", got)
	}
	h.Advance(time.Second) // a second without service: usage decays alike
	if got := h.Metrics()["fairshare.pool.p.fairness_jain"].Value; got != want {
		t.Errorf("fairness_jain after a second without service = %d, want %d (decay scales every team alike)", got, want)
	}
	for _, s := range append(as[1:], bs[1:]...) {
		respondJSON(s, 1, 1)
	}
	h.Advance(time.Second)
	m = h.Metrics()
	if got, n := m["fairshare.pool.p.fairness_jain"].Value, m["fairshare.pool.p.saturated_teams"].Value; got != 1000 || n != 0 {
		t.Errorf("fairness_jain, saturated_teams = %d, %d once nothing borrows, want 1000, 0", got, n)
	}
}

// TestWasmJainSameOnEveryVM: two VMs whose heartbeats come at different
// moments (VM 1 beats 0.9 s into a tick, then responses end, then VM 0
// beats and VM 1 again 0.1 s later) write the same fairness_jain, the
// index of the shared record: which VM wrote the gauge last does not
// change it (the per-VM windows it used to be computed over gave each VM
// its own value).
func TestWasmJainSameOnEveryVM(t *testing.T) {
	const cfg = `{
  "default_max_tokens": 16, "tick": "1s", "half_life": "60s",
  "pools": [{"name": "p", "capacity": 8, "models": ["m"],
    "teams": {"a": {"share": 0.25}, "b": {"share": 0.25}, "c": {"share": 0.5}}}]
}`
	h, clock := start(t, cfg, 2)
	h.Advance(time.Second) // both VMs beat
	as, bs := sendTeam(h, 0, "a", 4), sendTeam(h, 1, "b", 4)
	respondJSON(as[0], 300, 50)
	beat := func(vm int) int64 {
		t.Helper()
		if _, err := h.Call(vm, "proxy_on_tick", 1); err != nil {
			t.Fatalf("tick VM %d: %v", vm, err)
		}
		return h.Metrics()["fairshare.pool.p.fairness_jain"].Value
	}
	clock.Advance(900 * time.Millisecond)
	beat(1)
	respondJSON(as[1], 200, 40)
	respondJSON(bs[0], 100, 20)
	clock.Advance(time.Second)
	j0 := beat(0)
	want := jainOf(teamStats(t, h, "p"), "a", "b")
	clock.Advance(100 * time.Millisecond)
	j1 := beat(1)
	if j0 != j1 || j0 != want || want >= 1000 {
		t.Errorf("fairness_jain written by VM 0 %d, by VM 1 %d; want both %d (J of a and b from the record), below 1000", j0, j1, want)
	}
	for _, s := range append(as[2:], bs[1:]...) {
		respondJSON(s, 1, 1)
	}
}

// sendTeam sends n chat requests of team on VM vm.
func sendTeam(h *host.Host, vm int, team string, n int) []*host.Stream {
	var out []*host.Stream
	for range n {
		out = append(out, request(h, vm, "/v1/chat/completions", [][2]string{{"x-team", team}}, chat("m", 4, "")))
	}
	return out
}

// jainOf is Jain's index, in thousandths, of the teams' usage over their
// normalised share in st.
func jainOf(st map[string]fairshare.TeamStat, teams ...string) int64 {
	var sum, sq float64
	for _, team := range teams {
		x := st[team].Usage / st[team].NormalizedShare
		sum += x
		sq += x * x
	}
	return int64(math.Round(sum * sum / (float64(len(teams)) * sq) * 1000))
}
