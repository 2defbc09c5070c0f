package plugin_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
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

// TestWasmShadowStatusAndMetrics: the status endpoint names the mode, and
// the shadow counters carry the tags of today's (pool, team, class).
func TestWasmShadowStatusAndMetrics(t *testing.T) {
	h, _ := start(t, shadowed(flowConfig, ""), 1)
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
		run = append(run, request(h, 0, "/v1/chat/completions", [][2]string{{"x-team", "a"}, {"x-request-class", "batch"}}, chat("m", 4, "")))
	}
	request(h, 0, "/v1/chat/completions", nil, chat("m", 4, "")).Complete() // no team
	ms := h.Metrics()
	for name, want := range map[string]int64{
		"fairshare.pool.p.team.a.class.batch.would_borrow_total": 2,
		"fairshare.pool.p.team.a.class.batch.would_hold_total":   1,
		"fairshare.would_refuse_no_team_total":                   1,
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
	_ = fairshare.BorrowBase
}
