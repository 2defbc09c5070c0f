package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/tidwall/gjson"
)

// shadowed returns the configuration cfg (a JSON object) in mode
// "shadow", with the members extra ("" or `"field":value,`) added.
func shadowed(cfg, extra string) string {
	i := strings.IndexByte(cfg, '{')
	return cfg[:i+1] + `"mode":"shadow",` + extra + cfg[i+1:]
}

// unscheduledCase reports whether a bypass case goes to a path (or with a
// method) the plugin does not schedule.
func unscheduledCase(c *bypassCase) bool {
	return c.method != "" && c.method != "POST" || strings.HasPrefix(c.name, "unscheduled")
}

// enforceReason plays c in enforce mode and returns the reason of the
// local reply it gets (from the rejected_<reason>_total counter it
// increments), "" when it is forwarded.
func enforceReason(t *testing.T, c *bypassCase, cfg string) string {
	t.Helper()
	reason := ""
	t.Run("enforce", func(t *testing.T) { // a host of its own (start's VM id)
		h, _ := start(t, cfg, 1)
		s := c.send(h)
		defer s.Complete()
		if s.LocalReply() == nil {
			return
		}
		reasons := counterReasons(h.Metrics(), "rejected_")
		if len(reasons) != 1 {
			t.Fatalf("enforce mode: local reply %d, rejected counters %v: want one reason", s.LocalReply().Status, reasons)
		}
		reason = reasons[0]
	})
	return reason
}

// sentHeaders are the headers c's client sends, as a proxy forwards them
// when nothing changes them: keys lower-cased (Envoy's codecs do, and so
// does the host).
func sentHeaders(c *bypassCase) [][2]string {
	hdrs := c.headers()
	for i := range hdrs {
		hdrs[i][0] = strings.ToLower(hdrs[i][0])
	}
	return hdrs
}

// counterReasons returns the <reason> of every non-zero counter named
// ...<prefix><reason>_total in ms, sorted.
func counterReasons(ms map[string]host.Metric, prefix string) []string {
	var out []string
	for name, m := range ms {
		i := strings.LastIndex(name, "."+prefix)
		if i < 0 || m.Value == 0 || !strings.HasSuffix(name, "_total") {
			continue
		}
		out = append(out, strings.TrimSuffix(name[i+1+len(prefix):], "_total"))
	}
	slices.Sort(out)
	return out
}

// TestWasmShadowForwardsAsSent plays the whole adversarial table in
// shadow mode: every request, whatever enforce mode does with it, reaches
// the upstream exactly as the client sent it (headers in order, body and
// trailers byte for byte), and the response says what enforce mode would
// have done: the priority it decides for a request it forwards, and the
// reason of the local reply it answers (the reason of enforce mode's own
// counter, played on its own host). A scheduled request is accounted as
// in enforce mode: in flight while it runs, its entry penalty charged,
// released at its end.
func TestWasmShadowForwardsAsSent(t *testing.T) {
	for _, c := range bypassCases() {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config
			if cfg == "" {
				cfg = bypassConfig
			}
			want := ""
			if !unscheduledCase(&c) {
				want = enforceReason(t, &c, cfg)
			}
			h, _ := start(t, shadowed(cfg, ""), 1)
			s := c.send(h)
			if lr := s.LocalReply(); lr != nil {
				t.Fatalf("local reply %d %s in shadow mode, want the request forwarded", lr.Status, lr.Body)
			}
			in := strings.Join(c.chunks, "")
			if fwd := s.ForwardedRequestBody(); string(fwd) != in {
				t.Errorf("forwarded body %.200q, the client sent %.200q", fwd, in)
			}
			if got, sent := s.RequestHeaderMap(), sentHeaders(&c); !slices.Equal(got, sent) {
				t.Errorf("forwarded headers %q, the client sent %q", got, sent)
			}
			if c.trail && !slices.Equal(s.RequestTrailerMap(), bypassTrailers) {
				t.Errorf("forwarded trailers %q, the client sent %q", s.RequestTrailerMap(), bypassTrailers)
			}
			counted := c.want == decided
			if counted {
				st := teamStats(t, h, "p")["a"]
				if st.InFlight != 1 || st.Usage < c.minEstimate {
					t.Errorf("in flight %d, entry penalty %v: want 1 and at least %v (accounted as in enforce mode)", st.InFlight, st.Usage, c.minEstimate)
				}
			}
			respondJSON(s, 3, 2)
			resp := s.ResponseHeaderMap()
			mode, _ := header(resp, "x-fairshare-mode")
			refusal, _ := header(resp, "x-fairshare-would-refuse")
			prio, hasPrio := header(resp, "x-fairshare-priority")
			switch {
			case unscheduledCase(&c) || c.want == lowest:
				if mode != "" || refusal != "" || hasPrio {
					t.Errorf("response headers %q on a request the plugin does not count", resp)
				}
			case want != "":
				if mode != "shadow" || refusal != want || hasPrio {
					t.Errorf("mode %q, would-refuse %q, priority %q; want shadow, enforce mode's %q, none", mode, refusal, prio, want)
				}
				if n := counterReasons(h.Metrics(), "would_refuse_"); !slices.Equal(n, []string{want}) {
					t.Errorf("would_refuse counters %v, want [%s]", n, want)
				}
			default:
				hold, _ := header(resp, "x-fairshare-would-hold")
				if mode != "shadow" || refusal != "" || hold != "false" || (c.prio >= 0 && prio != strconv.Itoa(c.prio)) || !hasPrio {
					t.Errorf("mode %q, would-refuse %q, would-hold %q, priority %q; want shadow, none, false, %d", mode, refusal, hold, prio, c.prio)
				}
			}
			if counted {
				if u := teamStats(t, h, "p")["a"].Usage; u != 3+2*2 {
					t.Errorf("usage %v after the response, want the reported 7", u)
				}
			}
			checkIdle(t, h, "p")
		})
	}
}

// TestWasmShadowForwardsBadInputs plays TestWasmBadInputs' table in shadow
// mode: each request enforce mode refuses reaches the upstream as the
// client sent it, and its response and counters name enforce mode's
// reason (the table's, which TestWasmBadInputs checks against enforce
// mode's counters).
func TestWasmShadowForwardsBadInputs(t *testing.T) {
	h, _ := start(t, shadowed(badInputConfig, ""), 1)
	for _, tt := range badInputs() {
		t.Run(tt.name, func(t *testing.T) {
			before := h.Metrics()
			s := request(h, 0, tt.path, tt.hdrs, tt.body)
			defer s.Complete()
			if lr := s.LocalReply(); lr != nil {
				t.Fatalf("local reply %d in shadow mode", lr.Status)
			}
			sent := append([][2]string{{":method", "POST"}, {":path", tt.path}, {":authority", "vllm"}, {"content-type", "application/json"},
				{"content-length", strconv.Itoa(len(tt.body))}}, tt.hdrs...)
			if got := s.RequestHeaderMap(); !slices.Equal(got, sent) {
				t.Errorf("forwarded headers %q, the client sent %q", got, sent)
			}
			if got := s.ForwardedRequestBody(); string(got) != tt.body {
				t.Errorf("forwarded %.100q, the client sent %.100q", got, tt.body)
			}
			s.ResponseHeaders([][2]string{{":status", "400"}, {"content-type", "application/json"}}, false)
			if v, _ := header(s.ResponseHeaderMap(), "x-fairshare-would-refuse"); v != tt.reason {
				t.Errorf("x-fairshare-would-refuse %q, want %q", v, tt.reason)
			}
			if r := counterDelta(before, h.Metrics(), "would_refuse_"); !slices.Equal(r, []string{tt.reason}) {
				t.Errorf("would_refuse counters %v, want [%s]", r, tt.reason)
			}
			s.ResponseBody([]byte(`{}`), true)
		})
	}
	checkIdle(t, h, "small", "rest")
}

// TestWasmShadowStripsOnlyThePriority plays the adversarial table in
// shadow mode with shadow_strip_priority: no client priority reaches the
// upstream, and nothing else changes: the headers as sent, the body of
// the same length, equal to the client's but for its priority (byte for
// byte when it had none). A request is refused only where enforce mode
// refuses it too (its body cannot be stripped).
func TestWasmShadowStripsOnlyThePriority(t *testing.T) {
	for _, c := range bypassCases() {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config
			if cfg == "" {
				cfg = bypassConfig
			}
			h, _ := start(t, shadowed(cfg, `"shadow_strip_priority":true,`), 1)
			s := c.send(h)
			defer checkIdle(t, h, "p")
			defer s.Complete()
			fwd := s.ForwardedRequestBody()
			if lr := s.LocalReply(); lr != nil {
				if c.want != refused || len(fwd) != 0 {
					t.Errorf("local reply %d %s (forwarded %q), enforce mode forwards it", lr.Status, lr.Body, fwd)
				}
				return
			}
			in := strings.Join(c.chunks, "")
			if p, has := vllmPriority(t, fwd, true); has {
				t.Errorf("forwarded priority %d: %.200s", p, fwd)
			}
			if got, sent := s.RequestHeaderMap(), sentHeaders(&c); !slices.Equal(got, sent) {
				t.Errorf("forwarded headers %q, the client sent %q", got, sent)
			}
			if _, had := vllmPriority(t, []byte(in), true); !had && string(fwd) != in {
				t.Errorf("forwarded %.200q, the client sent %.200q without a priority", fwd, in)
			}
			if len(fwd) != len(in) {
				t.Errorf("forwarded body of %d bytes, the client sent %d", len(fwd), len(in))
			}
			var a, b map[string]any
			if json.Unmarshal([]byte(strings.TrimPrefix(in, "\xEF\xBB\xBF")), &a) == nil {
				delete(a, "priority")
				if err := json.Unmarshal([]byte(strings.TrimPrefix(string(fwd), "\xEF\xBB\xBF")), &b); err != nil || len(a) != len(b) {
					t.Errorf("stripped body %.200s lost more than the priority of %.200s", fwd, in)
				}
			}
		})
	}
}

// FuzzShadowForwardsAsSent: in shadow mode, for any path, content type
// and body, the request reaches the upstream as the client sent it,
// headers and body byte for byte, and nothing is left in flight.
func FuzzShadowForwardsAsSent(f *testing.F) {
	for _, c := range bypassCases() {
		if len(c.chunks) == 1 && len(c.chunks[0]) < 4096 {
			f.Add(c.path, "application/json", []byte(c.chunks[0]))
		}
	}
	f.Add("/v1/messages", "", []byte(`{"priority":1}`))
	h, _ := start(f, shadowed(bypassConfig, `"status_path":"",`), 1)
	f.Fuzz(func(t *testing.T, path, ctype string, body []byte) {
		if strings.ContainsAny(path+ctype, "\x00\r\n") {
			return // not a header value a proxy passes on
		}
		s := h.NewStream(0)
		hdrs := [][2]string{{":method", "POST"}, {":path", path}, {"x-team", "a"}, {"content-length", strconv.Itoa(len(body))}}
		if ctype != "" {
			hdrs = append(hdrs, [2]string{"content-type", ctype})
		}
		if s.RequestHeaders(hdrs, len(body) == 0) != host.Ended && len(body) > 0 {
			s.RequestBody(body, true)
		}
		if lr := s.LocalReply(); lr != nil {
			t.Fatalf("POST %q %q %q: local reply %d in shadow mode", path, ctype, body, lr.Status)
		}
		if fwd := s.ForwardedRequestBody(); string(fwd) != string(body) {
			t.Fatalf("POST %q %q %q forwarded %q", path, ctype, body, fwd)
		}
		if got := s.RequestHeaderMap(); !slices.Equal(got, hdrs) {
			t.Fatalf("POST %q %q %q forwarded headers %q", path, ctype, body, got)
		}
		respondJSON(s, 1, 1)
		checkIdle(t, h, "p")
	})
}

// TestWasmShadowStatusAndMetrics: the status endpoint names the mode, the
// shadow counters carry the tags of today's (pool, team, class), and
// hold_headers "on" holds nothing: the headers go upstream at once.
func TestWasmShadowStatusAndMetrics(t *testing.T) {
	h, _ := start(t, shadowed(flowConfig, `"hold_headers":"on",`), 1)
	s := h.NewStream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
	lr := s.LocalReply()
	if lr == nil || lr.Status != 200 {
		t.Fatalf("status reply %+v", lr)
	}
	if m := gjson.GetBytes(lr.Body, "mode"); m.String() != "shadow" || gjson.GetBytes(lr.Body, "shadow_strip_priority").Type != gjson.False {
		t.Errorf("status mode %s, shadow_strip_priority %s: want shadow, false", m, gjson.GetBytes(lr.Body, "shadow_strip_priority"))
	}
	if !json.Valid(lr.Body) {
		t.Errorf("status is not JSON: %s", lr.Body)
	}
	// a's reservation is one sequence of two: a1 within, a2 borrows (room),
	// a3 finds no room: enforce mode would hold it.
	var run []*host.Stream
	for range 3 {
		s := h.NewStream(0)
		body := chat("m", 4, "")
		hdrs := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"x-team", "a"}, {"x-request-class", "batch"}, {"content-length", strconv.Itoa(len(body))}}
		s.RequestHeaders(hdrs, false)
		if got := s.RequestHeaderMap(); !slices.Equal(got, hdrs) {
			t.Fatalf("headers upstream before the body %q, want %q at once", got, hdrs)
		}
		s.RequestBody([]byte(body), true)
		run = append(run, s)
	}
	request(h, 0, "/v1/chat/completions", nil, chat("m", 4, "")).Complete() // no team
	ms := h.Metrics()
	for name, want := range map[string]int64{
		"fairshare.pool.p.team.a.class.batch.would_borrow_total":                2,
		"fairshare.pool.p.team.a.class.batch.would_hold_total":                  1,
		"fairshare.would_refuse_no_team_total":                                  1,
		"fairshare.pool.p.team.a.class.batch.standing.borrowing.requests_total": 2,
	} {
		if ms[name].Value != want {
			t.Errorf("%s = %d, want %d", name, ms[name].Value, want)
		}
	}
	if st := teamStats(t, h, "p")["a"]; st.InFlight != 3 || st.Waiting != 0 {
		t.Errorf("a: in flight %d, waiting %d; want 3 and 0 (nothing held in shadow mode)", st.InFlight, st.Waiting)
	}
	respondJSON(run[2], 1, 1)
	if v, _ := header(run[2].ResponseHeaderMap(), "x-fairshare-would-hold"); v != "true" {
		t.Errorf("x-fairshare-would-hold %q on the third request, want true", v)
	}
	respondJSON(run[0], 1, 1)
	respondJSON(run[1], 1, 1)
	checkIdle(t, h, "p")
}

// traceConfig has flow control on, three teams (c may not borrow, so its
// borrowers wait even with room) and unknown teams borrowing.
const traceConfig = `{"max_queue_time":"10s","dispatch_tick":"20ms","tick":"1s","default_max_tokens":16,
 "pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.25},"c":{"share":0.25,"borrowing_limit":0}}}]}`

// decision is what a mode did (enforce) or says it would have done
// (shadow) with one arrival.
type decision struct {
	refused   string // the reason of a local reply ("" for none)
	held      bool
	priority  string // x-fairshare-priority of a forwarded request
	borrowing string // x-fairshare-borrowing
}

// TestWasmShadowWouldRefuseByTeam: a pool's would-refuse counters carry
// the team as the pool counts it, as the other per-team counters do: a
// team the pool does not list (unknown_team "reject") under _unknown, and
// with the record unreadable under failure_mode "closed" the configured
// team a, and an unlisted one under _unknown again; the plugin-level
// no_team stays unlabelled.
func TestWasmShadowWouldRefuseByTeam(t *testing.T) {
	h, f := startFaulty(t, shadowed(flowConfig, `"unknown_team":"reject","failure_mode":"closed",`), 1, pluginName+"/fairshare/pool/")
	send := func(team string) {
		var hdrs [][2]string
		if team != "" {
			hdrs = [][2]string{{"x-team", team}}
		}
		s := request(h, 0, "/v1/chat/completions", hdrs, chat("m", 4, ""))
		if lr := s.LocalReply(); lr != nil {
			t.Fatalf("team %q: local reply %d in shadow mode", team, lr.Status)
		}
		respondJSON(s, 1, 1)
	}
	send("zz")
	send("")
	f.get.Store(uint32(hostcalls.StatusInternalFailure))
	send("a")
	f.get.Store(0)
	wantMetrics(t, h, map[string]int64{
		"fairshare.pool.p.team._unknown.would_refuse_unknown_team_total": 1,
		"fairshare.pool.p.team.a.would_refuse_unavailable_total":         1,
		"fairshare.would_refuse_no_team_total":                           1,
	})
	for name := range h.Metrics() {
		if strings.HasPrefix(name, "fairshare.pool.p.would_refuse_") {
			t.Errorf("%s: a pool's would-refuse counter without its team", name)
		}
	}
}

// TestWasmShadowDecidesAsEnforce runs enforce mode and shadow mode side
// by side, each on its own host, on one deterministic trace (a seeded
// sequence of arrivals of teams a, b, c, an unknown team and none, both
// classes and a bad one, a known and an unknown model, and of responses
// with their usage; one virtual clock per host, advanced alike) and
// compares every arrival's decision: enforce mode's local reply (its
// rejected_<reason>_total reason), its holding, or the priority and
// standing it forwards, against shadow mode's x-fairshare-would-refuse,
// -would-hold, -priority and -borrowing.
//
// The comparison is honest only while both modes decide on the same
// record, and a held request changes enforce mode's later decisions (it
// waits, then runs) where shadow's runs at once. So the trace makes every
// request that enforce mode holds leave before anything else happens,
// having run nothing: its client goes away in enforce mode (taken out of
// the queue, nothing charged), and in shadow mode, where it was forwarded,
// the engine answers it 429 (a refusal without usage: nothing charged,
// the entry penalty returned). Before every arrival the test asserts that
// the two records agree team by team (in flight, borrowing, waiting,
// rank, usage), so the premise is checked, not assumed. Queue-full and
// max_queue_time refusals need requests waiting, which never happens in
// shadow mode; the trace has none (see shadow.go). At the end the shadow
// counters are compared with enforce mode's: would_refuse_<reason> with
// rejected_<reason>, would_hold with the held requests, would_borrow
// with the borrowers forwarded and held.
func TestWasmShadowDecidesAsEnforce(t *testing.T) {
	enf, _ := start(t, traceConfig, 1)
	shd, _ := startAs(t, "-shadow", shadowed(traceConfig, ""), 1)
	rng := newTraceRand(11)
	type pair struct{ e, s *host.Stream }
	var live []pair
	seen := map[string]int{}
	held, borrowed := 0, 0
	for step := range 300 {
		d := time.Duration(rng.n(300)) * time.Millisecond // both clocks alike, ticks run
		enf.Advance(d)
		shd.Advance(d)
		if len(live) > 0 && rng.n(5) < 2 {
			k := int(rng.n(int64(len(live))))
			p := live[k]
			live = append(live[:k], live[k+1:]...)
			body := usageBody(int(rng.n(200)), int(rng.n(100)))
			for _, s := range []*host.Stream{p.e, p.s} {
				s.ResponseBody([]byte(body), true)
				s.Complete()
			}
			continue
		}
		sameRecords(t, step, enf, shd)
		hdrs := [][2]string{}
		switch tm := []string{"a", "a", "b", "c", "z", ""}[rng.n(6)]; tm {
		case "":
			if rng.n(3) != 0 {
				hdrs = append(hdrs, [2]string{"x-team", "a"})
			}
		default:
			hdrs = append(hdrs, [2]string{"x-team", tm})
		}
		switch rng.n(8) {
		case 0, 1, 2:
			hdrs = append(hdrs, [2]string{"x-request-class", "batch"})
		case 3:
			if rng.n(3) == 0 {
				hdrs = append(hdrs, [2]string{"x-request-class", "urgent"})
			}
		}
		model := "m"
		if rng.n(20) == 0 {
			model = "other"
		}
		body := chat(model, 1+int(rng.n(64)), "")
		before := enf.Metrics()
		se := request(enf, 0, "/v1/chat/completions", hdrs, body)
		ss := request(shd, 0, "/v1/chat/completions", hdrs, body)
		var de, ds decision
		switch {
		case se.LocalReply() != nil:
			r := counterDelta(before, enf.Metrics(), "rejected_")
			if len(r) != 1 {
				t.Fatalf("step %d: enforce local reply %d with rejected counters %v", step, se.LocalReply().Status, r)
			}
			de.refused = r[0]
			se.Complete()
		case len(se.ForwardedRequestBody()) == 0 && !se.Ended():
			de.held = true
			held++
		default:
			de.priority = strconv.Itoa(priority(t, se))
			se.ResponseHeaders([][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
			de.borrowing, _ = header(se.ResponseHeaderMap(), "x-fairshare-borrowing")
			if de.borrowing == "true" {
				borrowed++
			}
		}
		if lr := ss.LocalReply(); lr != nil || ss.Ended() || string(ss.ForwardedRequestBody()) != body {
			t.Fatalf("step %d: shadow mode did not forward the request as sent (%+v): %q", step, lr, ss.ForwardedRequestBody())
		}
		status := "200"
		if de.held {
			status = "429" // shadow's counterpart of the held request leaving unrun
		}
		ss.ResponseHeaders([][2]string{{":status", status}, {"content-type", "application/json"}}, false)
		resp := ss.ResponseHeaderMap()
		ds.refused, _ = header(resp, "x-fairshare-would-refuse")
		hold, _ := header(resp, "x-fairshare-would-hold")
		ds.held = hold == "true"
		if !ds.held && ds.refused == "" {
			ds.priority, _ = header(resp, "x-fairshare-priority")
			ds.borrowing, _ = header(resp, "x-fairshare-borrowing")
		}
		if ds != de {
			t.Fatalf("step %d (%q, model %s): shadow would %+v, enforce did %+v", step, hdrs, model, ds, de)
		}
		switch {
		case de.refused != "":
			seen["refused "+de.refused]++
			ss.ResponseBody([]byte(`{}`), true)
			ss.Complete()
		case de.held:
			seen["held"]++
			se.Reset() // the client goes away: out of the queue
			se.Complete()
			ss.ResponseBody([]byte(`{"error":{"message":"busy"}}`), true)
			ss.Complete()
		default:
			seen["borrowing "+de.borrowing]++
			live = append(live, pair{se, ss})
		}
	}
	for _, k := range []string{"refused no_team", "refused bad_class", "refused unknown_model", "held", "borrowing true", "borrowing false"} {
		if seen[k] == 0 {
			t.Errorf("the trace has no %q decision (%v): it must cover every kind", k, seen)
		}
	}
	for _, p := range live {
		for _, s := range []*host.Stream{p.e, p.s} {
			s.ResponseBody([]byte(usageBody(5, 5)), true)
			s.Complete()
		}
	}
	sameRecords(t, -1, enf, shd)
	em, sm := enf.Metrics(), shd.Metrics()
	for _, r := range []string{"no_team", "bad_class", "unknown_model"} {
		e, s := sumMetrics(em, ".rejected_"+r+"_total"), sumMetrics(sm, ".would_refuse_"+r+"_total")
		if e != s || e == 0 {
			t.Errorf("would_refuse_%s_total %d, enforce's rejected_%s_total %d", r, s, r, e)
		}
	}
	if s := sumMetrics(sm, ".would_hold_total"); s != int64(held) {
		t.Errorf("would_hold_total %d, enforce held %d", s, held)
	}
	if s := sumMetrics(sm, ".would_borrow_total"); s != int64(held+borrowed) {
		t.Errorf("would_borrow_total %d, enforce forwarded %d borrowers and held %d", s, borrowed, held)
	}
	if e, s := sumMetrics(em, ".standing.within.requests_total"), sumMetrics(sm, ".standing.within.requests_total"); e != s {
		t.Errorf("within-share requests_total: shadow %d, enforce %d", s, e)
	}
	t.Logf("decisions: %v", seen)
}

// sameRecords fails unless the pool records of the two hosts agree team
// by team: in flight, borrowing, waiting, rank and usage (to rounding).
func sameRecords(t *testing.T, step int, a, b *host.Host) {
	t.Helper()
	sa, sb := teamStats(t, a, "p"), teamStats(t, b, "p")
	for team, x := range sa {
		y := sb[team]
		if x.InFlight != y.InFlight || x.Borrowing != y.Borrowing || x.Waiting != y.Waiting || x.Rank != y.Rank ||
			!closeTo(x.Usage, y.Usage) {
			t.Fatalf("step %d: team %s: enforce %+v, shadow %+v: the records differ", step, team, x, y)
		}
	}
	if len(sa) != len(sb) {
		t.Fatalf("step %d: teams %d and %d", step, len(sa), len(sb))
	}
}

func closeTo(x, y float64) bool {
	d := x - y
	if d < 0 {
		d = -d
	}
	return d <= 1e-9*max(1, x, y)
}

// counterDelta returns the <reason> of every counter ...<prefix><reason>_total
// that grew from before to after.
func counterDelta(before, after map[string]host.Metric, prefix string) []string {
	grown := map[string]host.Metric{}
	for name, m := range after {
		if m.Value > before[name].Value {
			grown[name] = m
		}
	}
	return counterReasons(grown, prefix)
}

// sumMetrics sums the values of the metrics whose name ends in suffix.
func sumMetrics(ms map[string]host.Metric, suffix string) int64 {
	var n int64
	for name, m := range ms {
		if strings.HasSuffix(name, suffix) {
			n += m.Value
		}
	}
	return n
}

// usageBody is a vLLM JSON response body reporting usage.
func usageBody(prompt, completion int) string {
	return `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":` +
		strconv.Itoa(prompt) + `,"total_tokens":` + strconv.Itoa(prompt+completion) + `,"completion_tokens":` + strconv.Itoa(completion) + `}}`
}

// traceRand is a small deterministic generator (SplitMix64), so that the
// trace is the same on every run and Go release.
type traceRand struct{ s uint64 }

func newTraceRand(seed uint64) *traceRand { return &traceRand{seed} }

// n returns a value in [0, k).
func (r *traceRand) n(k int64) int64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	z ^= z >> 31
	return int64(z % uint64(k))
}

// upstreamRequest is a request as the upstream received it over HTTP.
type upstreamRequest struct {
	method, uri string
	header      http.Header
	body        string
}

// captureProxy starts the vLLM simulator behind a handler that records
// every request it receives, mod (plugin.wasm or a baseline filter) under
// cfg in the host, and the HTTP proxy in front; it returns the proxy's URL
// and the requests the upstream has received so far.
func captureProxy(t *testing.T, mod *host.Module, name, cfg string) (string, func() []upstreamRequest) {
	t.Helper()
	var mu sync.Mutex
	var got []upstreamRequest
	sim := vllmsim.NewServer(vllmsim.TestConfig(), vllmsim.ServerOptions{TimeScale: 0.05})
	t.Cleanup(sim.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, upstreamRequest{r.Method, r.RequestURI, r.Header.Clone(), string(b)})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	h, err := mod.Start(context.Background(), host.Options{Profile: hostProfile, VMs: 2, PluginName: pluginName,
		VMID: fmt.Sprintf("%s-%p-%s", t.Name(), t, name), PluginConfig: []byte(cfg)})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	noHostErrors(t, h)
	u, _ := url.Parse(up.URL)
	px := httptest.NewServer(proxy.New(h, u))
	t.Cleanup(px.Close)
	return px.URL, func() []upstreamRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestHTTPShadowUpstreamSeesWhatNoPluginSees sends the same requests over
// real HTTP through the proxy twice, once with plugin.wasm in shadow mode
// and once with the pass-through filter (a module that does nothing, as
// if no plugin were loaded), and compares what the upstream (the vLLM
// simulator) receives request by request: method, target, every header
// (accept-encoding and content-length included; x-request-id, which the
// proxy draws for every request as Envoy does, checked present and left
// out) and the body, byte for byte. The requests cover a good one with a client priority and a forged
// x-fairshare-team header, streams with and without include_usage,
// TestHTTPBadInputs' refusals, and a path the plugin does not schedule.
func TestHTTPShadowUpstreamSeesWhatNoPluginSees(t *testing.T) {
	cfg := shadowed(strings.Replace(httpConfig, `"unknown_team": "borrow"`, `"unknown_team": "reject"`, 1), "")
	shadowURL, shadowGot := captureProxy(t, compiled(t), "shadow", cfg)
	baseURL, baseGot := captureProxy(t, compiledFilter(t, "passthrough"), "passthrough", "{}")
	type req struct{ path, team, class, ctype, body string }
	reqs := []req{
		{"/v1/completions", "a", "", "application/json", completions(3, 4, false, `,"priority":-1000`)},
		{"/v1/completions", "b", "batch", "application/json", completions(3, 4, true, "")},
		{"/v1/completions", "a", "", "application/json", completions(3, 4, true, `,"stream_options":{"include_usage":true}`)},
		{"/tokenize", "", "", "application/json", `{"model":"` + vllmsim.DefaultModel + `","prompt":"x","priority":-5}`},
		{"/v1/completions", "", "", "application/json", completions(3, 1, false, "")},
		{"/v1/completions", "zz", "", "application/json", completions(3, 1, false, "")},
		{"/v1/completions", "a", "gold", "application/json", completions(3, 1, false, "")},
		{"/v1/completions", "a", "", "application/json", `"hello"`},
		{"/v1/chat/completions", "a", "", "application/json", `{"model":"x",`},
		{"/v1/completions", "a", "", "application/json", completions(20000, 1, false, "")},
		{"/v1/completions", "a", "", "text/plain", completions(3, 1, false, "")},
	}
	client := &http.Client{}
	for i, r := range reqs {
		var hdrs []string
		for _, base := range []string{shadowURL, baseURL} {
			hr, _ := http.NewRequest("POST", base+r.path, strings.NewReader(r.body))
			hr.Header.Set("content-type", r.ctype)
			hr.Header.Set("x-fairshare-team", "forged")
			if r.team != "" {
				hr.Header.Set("x-team", r.team)
			}
			if r.class != "" {
				hr.Header.Set("x-request-class", r.class)
			}
			resp, err := client.Do(hr)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			hdrs = append(hdrs, resp.Header.Get("x-fairshare-mode"))
		}
		s, b := shadowGot(), baseGot()
		if len(s) != i+1 || len(b) != i+1 {
			t.Fatalf("request %d: the upstream received %d (shadow) and %d (no plugin) requests, want %d", i, len(s), len(b), i+1)
		}
		// The proxy, as Envoy, gives every request its own x-request-id.
		for _, u := range []*upstreamRequest{&s[i], &b[i]} {
			if u.header.Get("x-request-id") == "" {
				t.Errorf("request %d: no x-request-id upstream", i)
			}
			u.header.Del("x-request-id")
		}
		if !reflect.DeepEqual(s[i], b[i]) {
			t.Errorf("request %d (%s %s): upstream received %s %s %q and a body of %d bytes (%.80q) in shadow mode, %s %s %q and %d bytes (%.80q) without the plugin",
				i, r.path, r.team, s[i].method, s[i].uri, s[i].header, len(s[i].body), s[i].body, b[i].method, b[i].uri, b[i].header, len(b[i].body), b[i].body)
		}
		if want := map[bool]string{true: "shadow", false: ""}[r.path != "/tokenize"]; hdrs[0] != want || hdrs[1] != "" {
			t.Errorf("request %d: x-fairshare-mode %q (shadow), %q (no plugin); want %q, none", i, hdrs[0], hdrs[1], want)
		}
	}
}

// TestWasmShadowUnscheduledNotBuffered: without shadow_strip_priority, a
// request the plugin does not schedule is not even buffered in shadow
// mode: each chunk goes upstream as it comes (enforce mode holds a JSON
// body until it can strip it); with it, the body is held and stripped as
// in enforce mode.
func TestWasmShadowUnscheduledNotBuffered(t *testing.T) {
	for _, strip := range []bool{false, true} {
		h, _ := startAs(t, strconv.FormatBool(strip), shadowed(bypassConfig, `"shadow_strip_priority":`+strconv.FormatBool(strip)+`,`), 1)
		s := h.NewStream(0)
		s.RequestHeaders([][2]string{{":method", "POST"}, {":path", "/v1/messages"}, {"content-type", "application/json"}}, false)
		s.RequestBody([]byte(`{"model":"m",`), false)
		first := string(s.ForwardedRequestBody())
		s.RequestBody([]byte(`"priority":-1000}`), true)
		all := string(s.ForwardedRequestBody())
		switch {
		case !strip && (first != `{"model":"m",` || all != `{"model":"m","priority":-1000}`):
			t.Errorf("without stripping: forwarded %q after the first chunk, %q at the end; want each chunk at once, untouched", first, all)
		case strip && (first != "" || strings.Contains(all, "priority") || len(all) != len(`{"model":"m","priority":-1000}`)):
			t.Errorf("with stripping: forwarded %q after the first chunk, %q at the end; want nothing, then the body stripped in place", first, all)
		}
		s.Complete()
	}
}
