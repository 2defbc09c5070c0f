package plugin_test

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/tidwall/gjson"
)

// Users within teams through plugin.wasm (users.go): the user header,
// its refusals, the requests' standing by user, the status and the
// gauges, and a configuration without the user level left as it was.

// usersConfig is a pool of capacity 8, a and b reserving 4 each, divided
// among the users of x-user; no flow control (borrowers go at once).
const usersConfig = `{"user_header":"x-user","default_max_tokens":16,"half_life":"0s","tick":"1s","status_token":"sesame",
 "pools":[{"name":"p","capacity":8,"models":["m"],"teams":{"a":{"share":0.5},"b":{"share":0.5}}}]}`

// as are the identity headers of team and user.
func as(team, user string) [][2]string { return [][2]string{{"x-team", team}, {"x-user", user}} }

// userStatus returns the status endpoint's entry of user in team of pool
// p ("" when the status lists no such user).
func userStatus(t *testing.T, h *host.Host, team, user string) gjson.Result {
	t.Helper()
	return gjson.Get(statusBody(t, h), `pools.#(name=="p").teams.#(team=="`+team+`").users.#(user=="`+user+`")`)
}

// overHeaders returns a response's x-fairshare-user and x-fairshare-over.
func overHeaders(s *host.Stream) (user, over string) {
	resp := s.ResponseHeaderMap()
	user, _ = header(resp, "x-fairshare-user")
	over, _ = header(resp, "x-fairshare-over")
	return user, over
}

// TestWasmUsersGrantCountedForUser: a request's user header makes it
// count under that user: within share, in the status's users while it
// runs and with its usage after; the response names the user.
func TestWasmUsersGrantCountedForUser(t *testing.T) {
	h, _ := start(t, usersConfig, 2)
	s := request(h, 1, "/v1/chat/completions", as("a", "alice"), chat("m", 10, ""))
	if p := priority(t, s); p != 0 {
		t.Fatalf("alice's first request priority %d, want 0 (within share)", p)
	}
	u := userStatus(t, h, "a", "alice")
	if u.Get("within").Int() != 1 || !u.Get("active").Bool() || u.Get("portion").Int() != 4 || u.Get("share").Float() != 1 {
		t.Errorf("status of alice while her request runs: %s; want within 1, active, portion 4 (the team's 4 seats), share 1", u.Raw)
	}
	ta := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if ta.Get("active_users").Int() != 1 || ta.Get("over").Int() != 0 || ta.Get("user_entries").Int() != 1 {
		t.Errorf("status of a: %s; want active_users 1, over 0, user_entries 1", ta.Raw)
	}
	respondJSON(s, 12, 3)
	if user, over := overHeaders(s); user != "alice" || over != "false" {
		t.Errorf("x-fairshare-user %q, x-fairshare-over %q; want alice, false", user, over)
	}
	u = userStatus(t, h, "a", "alice")
	if u.Get("within").Int() != 0 || math.Abs(u.Get("usage").Float()-18) > 1e-9 {
		t.Errorf("status of alice after her request: %s; want within 0, usage 18 (12 + 2×3)", u.Raw)
	}
	// Without the header: the user _none, named so in the response.
	s = request(h, 0, "/v1/chat/completions", team("a"), chat("m", 10, ""))
	respondJSON(s, 1, 1)
	if user, _ := overHeaders(s); user != fairshare.UserNone {
		t.Errorf("x-fairshare-user without a user header %q, want %q", user, fairshare.UserNone)
	}
	if !userStatus(t, h, "a", fairshare.UserNone).Exists() {
		t.Error("the status lists no _none user after a request without one")
	}
	// The gauges of the user level, on the next tick.
	h.Advance(time.Second)
	m := h.Metrics()
	if v := m["fairshare.pool.p.team.a.users_active"].Value; v != 2 {
		t.Errorf("users_active a = %d, want 2 (alice and _none, within user_active)", v)
	}
	if _, ok := m["fairshare.pool.p.team.a.over"]; !ok {
		t.Error("no over gauge for a")
	}
	checkIdle(t, h, "p")
}

// TestWasmUsersBadUserChangesNothing: a user value the plugin refuses is
// answered 400 in OpenAI's format, names the header (or the body's
// member), counts rejected_<reason>_total, and leaves the pool as it was:
// nothing in flight, nothing waiting, no user entry, no usage.
func TestWasmUsersBadUserChangesNothing(t *testing.T) {
	cfg := strings.Replace(usersConfig, `"user_header":"x-user",`, `"user_header":"x-user","user_from_body":true,"max_queue_time":"10s",`, 1)
	tests := []struct {
		name   string
		hdrs   [][2]string
		body   string
		param  string
		reason string
		msg    string
	}{
		{"65 bytes", as("a", strings.Repeat("u", 65)), chat("m", 1, ""), "x-user", "bad_user", "got 65 bytes, more than 64"},
		{"space inside", as("a", "al ice"), chat("m", 1, ""), "x-user", "bad_user", "got byte 0x20 at offset 2"},
		{"byte beyond ASCII", as("a", "caf\xc3\xa9"), chat("m", 1, ""), "x-user", "bad_user", "got byte 0xc3 at offset 3"},
		{"control byte", as("a", "a\x01b"), chat("m", 1, ""), "x-user", "bad_user", "got byte 0x01 at offset 1"},
		{"two headers", append(as("a", "alice"), [2]string{"X-User", "bob"}), chat("m", 1, ""), "x-user", "duplicate_header", "must be sent exactly once"},
		{"a list", as("a", "alice, bob"), chat("m", 1, ""), "x-user", "duplicate_header", "must be sent exactly once"},
		{"body user too long", team("a"), chat("m", 1, `,"user":"`+strings.Repeat("v", 65)+`"`), "user", "bad_user", `the body's "user" must be 1 to 64 bytes`},
		{"body user with a tab", team("a"), chat("m", 1, `,"user":"a\tb"`), "user", "bad_user", "got byte 0x09 at offset 1"},
		{"body user a number", team("a"), chat("m", 1, `,"user":7`), "user", "bad_user", `the body's "user" must be a string`},
	}
	h, _ := start(t, cfg, 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.Metrics()
			s := request(h, 0, "/v1/chat/completions", tt.hdrs, tt.body)
			jsonError(t, s, 400)
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Param   string `json:"param"`
				} `json:"error"`
			}
			if lr := s.LocalReply(); lr == nil || json.Unmarshal(lr.Body, &e) != nil ||
				e.Error.Param != tt.param || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("reply %+v, want param %q and a message with %q", e.Error, tt.param, tt.msg)
			}
			if len(s.ForwardedRequestBody()) != 0 {
				t.Error("refused request forwarded")
			}
			if r := counterDelta(before, h.Metrics(), "rejected_"); !slices.Equal(r, []string{tt.reason}) {
				t.Errorf("rejected counters %v, want [%s]", r, tt.reason)
			}
			s.Complete()
			st := teamStats(t, h, "p")["a"]
			if st.InFlight != 0 || st.Waiting != 0 || len(st.Users) != 0 || st.Usage != 0 {
				t.Errorf("team a after the refusal: in flight %d, waiting %d, users %+v, usage %v; want nothing",
					st.InFlight, st.Waiting, st.Users, st.Usage)
			}
		})
	}
}

// TestWasmUsersLightUserBeforeFlooder: one user floods its team while a
// teammate sends a request now and then. The flooder's requests beyond
// its portion take the team's seats its teammates leave (over: priority 2
// to 9, borrowing) and then borrow; a light teammate's request is within
// share (priority 0) at once, and so is a new one's.
func TestWasmUsersLightUserBeforeFlooder(t *testing.T) {
	h, _ := start(t, usersConfig, 2)
	// alice was active a moment ago: the team's 4 seats are hers and
	// bulk's, 2 each.
	s := request(h, 0, "/v1/chat/completions", as("a", "alice"), chat("m", 4, ""))
	respondJSON(s, 2, 2)
	var open []*host.Stream
	var prios []int
	for i := range 5 {
		s := request(h, i%2, "/v1/chat/completions", as("a", "bulk"), chat("m", 64, ""))
		open = append(open, s)
		prios = append(prios, priority(t, s))
	}
	if prios[0] != 0 || prios[1] != 0 {
		t.Errorf("bulk's first two requests %v, want 0 (its portion of 2)", prios[:2])
	}
	for _, p := range prios[2:4] {
		if p < fairshare.OverBase || p >= fairshare.BorrowBase {
			t.Errorf("bulk's third and fourth requests %v, want over (%d to %d): the seats alice leaves", prios[2:4], fairshare.OverBase, fairshare.BorrowBase-1)
		}
	}
	if prios[4] < fairshare.BorrowBase {
		t.Errorf("bulk's fifth request %d, want borrowing (>= %d): the team's seats are all taken", prios[4], fairshare.BorrowBase)
	}
	team := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if team.Get("over").Int() != 2 || team.Get("borrowing").Int() != 3 {
		t.Errorf("status of a: %s; want over 2 (counted in borrowing 3)", team.Raw)
	}
	// alice's next request and a new user's go within share at once.
	for _, u := range []string{"alice", "carol"} {
		s := request(h, 1, "/v1/chat/completions", as("a", u), chat("m", 4, ""))
		if p := priority(t, s); p != 0 {
			t.Errorf("%s's request %d, want 0 (within her portion, beside the flooder)", u, p)
		}
		open = append(open, s)
	}
	users := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a").users`).Array()
	if len(users) != 3 || users[len(users)-1].Get("user").Str != "bulk" {
		t.Errorf("users %v, want alice, carol and bulk last (the worst standing)", users)
	}
	bulk := userStatus(t, h, "a", "bulk")
	if bulk.Get("within").Int() != 2 || bulk.Get("over").Int() != 2 || bulk.Get("borrowing").Int() != 1 || bulk.Get("portion").Int() != 1 {
		t.Errorf("status of bulk: %s; want within 2, over 2, borrowing 1, portion 1 (4 seats among 3 users, alice first by name)", bulk.Raw)
	}
	for i, s := range open {
		respondJSON(s, 2, 2)
		user, over := overHeaders(s)
		wantUser, wantOver := "bulk", "false"
		switch {
		case i >= 5:
			wantUser = []string{"alice", "carol"}[i-5]
		case i == 2 || i == 3:
			wantOver = "true"
		}
		if user != wantUser || over != wantOver {
			t.Errorf("request %d: x-fairshare-user %q, -over %q; want %q, %q", i, user, over, wantUser, wantOver)
		}
		if b, _ := header(s.ResponseHeaderMap(), "x-fairshare-borrowing"); (b == "true") != (i >= 2 && i < 5) {
			t.Errorf("request %d: x-fairshare-borrowing %q (over counts as borrowing)", i, b)
		}
	}
	checkIdle(t, h, "p")
	for _, u := range []string{"alice", "bulk", "carol"} {
		s := userStatus(t, h, "a", u)
		if s.Get("within").Int()+s.Get("over").Int()+s.Get("borrowing").Int() != 0 {
			t.Errorf("%s still counts requests after every release: %s", u, s.Raw)
		}
	}
}

// TestWasmUsersHeldKeepsItsUser: a request held at the gateway keeps its
// user in the queue, and is counted under it when dispatched.
func TestWasmUsersHeldKeepsItsUser(t *testing.T) {
	cfg := strings.Replace(flowConfig, `"tick":"1s",`, `"tick":"1s","user_header":"x-user",`, 1)
	h, _ := start(t, cfg, 2)
	a1 := request(h, 0, "/v1/chat/completions", as("a", "alice"), chat("m", 4, ""))
	b1 := request(h, 0, "/v1/chat/completions", as("b", "bob"), chat("m", 4, ""))
	if priority(t, a1) != 0 || priority(t, b1) != 0 {
		t.Fatal("setup: the pool is not full within share")
	}
	held1 := request(h, 1, "/v1/chat/completions", as("a", "carol"), chat("m", 4, ""))
	if !held(held1) {
		t.Fatal("carol's borrower on a full pool is not held")
	}
	if w := userStatus(t, h, "a", "carol"); w.Get("waiting").Int() != 1 {
		t.Errorf("status of carol while held: %s; want waiting 1", w.Raw)
	}
	respondJSON(b1, 1, 1)
	h.Advance(20 * time.Millisecond)
	if held(held1) {
		t.Fatal("carol's request not dispatched once b's seat freed")
	}
	if c := userStatus(t, h, "a", "carol"); c.Get("waiting").Int() != 0 || c.Get("within").Int()+c.Get("over").Int()+c.Get("borrowing").Int() != 1 {
		t.Errorf("status of carol once dispatched: %s; want one request in flight, none waiting", c.Raw)
	}
	respondJSON(held1, 1, 1)
	if user, _ := overHeaders(held1); user != "carol" {
		t.Errorf("dispatched request's x-fairshare-user %q, want carol", user)
	}
	respondJSON(a1, 1, 1)
	checkIdle(t, h, "p")
}

// TestWasmUsersFromBody: with user_from_body a request without the user
// header takes the body's "user"; the header wins when both are there;
// without user_from_body the body's user is not read.
func TestWasmUsersFromBody(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fromBody bool
		hdrs     [][2]string
		user     string // the body's user member, raw
		want     string
	}{
		{"body user", true, team("a"), `"dora"`, "dora"},
		{"header wins", true, as("a", "erin"), `"dora"`, "erin"},
		{"null body user", true, team("a"), `null`, fairshare.UserNone},
		{"empty body user", true, team("a"), `""`, fairshare.UserNone},
		{"escaped body user", true, team("a"), `"d\u006fra"`, "dora"},
		{"not opted in", false, team("a"), `"dora"`, fairshare.UserNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := usersConfig
			if tc.fromBody {
				cfg = strings.Replace(cfg, `"user_header":"x-user",`, `"user_header":"x-user","user_from_body":true,`, 1)
			}
			h, _ := start(t, cfg, 1)
			s := request(h, 0, "/v1/chat/completions", tc.hdrs, chat("m", 4, `,"user":`+tc.user))
			if p := priority(t, s); p != 0 {
				t.Errorf("priority %d, want 0", p)
			}
			if !userStatus(t, h, "a", tc.want).Exists() {
				t.Errorf("the status lists no user %q: %s", tc.want, gjson.Get(statusBody(t, h), "pools.0.teams.0.users").Raw)
			}
			if fwd := gjson.GetBytes(s.ForwardedRequestBody(), "user"); fwd.Raw != tc.user {
				t.Errorf("forwarded user %s, want the client's %s untouched", fwd.Raw, tc.user)
			}
			respondJSON(s, 1, 1)
			if user, _ := overHeaders(s); user != tc.want {
				t.Errorf("x-fairshare-user %q, want %q", user, tc.want)
			}
		})
	}
}

// TestWasmUsersStatusTruncated: status_users bounds the users listed per
// team (best standing first); the counts still cover them all.
func TestWasmUsersStatusTruncated(t *testing.T) {
	cfg := strings.Replace(usersConfig, `"user_header":"x-user",`, `"user_header":"x-user","status_users":2,`, 1)
	h, _ := start(t, cfg, 1)
	var open []*host.Stream
	for i, u := range []string{"u1", "u2", "u3", "u4"} {
		open = append(open, request(h, 0, "/v1/chat/completions", as("a", u), chat("m", 16*(i+1), "")))
	}
	team := gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	users := team.Get("users").Array()
	if len(users) != 2 || team.Get("user_entries").Int() != 4 || team.Get("active_users").Int() != 4 {
		t.Fatalf("status of a: %s; want 2 users listed of 4 entries, 4 active", team.Raw)
	}
	// The smallest usage ranks best: u1 then u2 (their entry penalties).
	if users[0].Get("user").Str != "u1" || users[1].Get("user").Str != "u2" {
		t.Errorf("users listed %s, %s; want u1, u2 (best standing first)", users[0].Get("user").Str, users[1].Get("user").Str)
	}
	for _, s := range open {
		respondJSON(s, 1, 1)
	}
	cfg = strings.Replace(usersConfig, `"user_header":"x-user",`, `"user_header":"x-user","status_users":0,`, 1)
	h, _ = startAs(t, "none listed", cfg, 1)
	respondJSON(request(h, 0, "/v1/chat/completions", as("a", "u1"), chat("m", 4, "")), 1, 1)
	team = gjson.Get(statusBody(t, h), `pools.0.teams.#(team=="a")`)
	if team.Get("users").Raw != "[]" || team.Get("user_entries").Int() != 1 {
		t.Errorf("status_users 0: %s; want users [] and user_entries 1", team.Raw)
	}
}

// TestWasmUsersOffChangesNothing: user_header "" (and user fields that
// need no header) leave everything as a configuration without them: the
// record's bytes, the status, the response headers and the metrics.
func TestWasmUsersOffChangesNothing(t *testing.T) {
	run := func(name, cfg string) (record, status []byte, resp [][2]string, metrics []string) {
		h, _ := startAs(t, name, cfg, 2)
		s := request(h, 0, "/v1/chat/completions", as("a", "alice"), chat("m", 10, `,"user":"dora"`))
		b := request(h, 1, "/v1/chat/completions", team("b"), chat("m", 10, ""))
		respondJSON(s, 12, 3)
		h.Advance(time.Second)
		st := h.NewStream(0)
		st.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/fairshare/status"}, {"authorization", "Bearer sesame"}}, true)
		status = st.LocalReply().Body
		respondJSON(b, 1, 1)
		record, _, _ = h.SharedData(pluginName + "/fairshare/pool/small/v" + strconv.Itoa(fairshare.RecordVersion))
		for name := range h.Metrics() {
			metrics = append(metrics, name)
		}
		slices.Sort(metrics)
		return record, status, s.ResponseHeaderMap(), metrics
	}
	r1, s1, h1, m1 := run("plain", testConfig)
	r2, s2, h2, m2 := run("off", strings.Replace(testConfig, `"tick": "1s",`, `"tick": "1s", "user_header": "", "user_from_body": false, "status_users": 3,`, 1))
	if len(r1) == 0 || !bytes.Equal(r1, r2) {
		t.Errorf("record with user_header \"\" differs (%d bytes vs %d)", len(r2), len(r1))
	}
	if !bytes.Equal(s1, s2) {
		t.Errorf("status with user_header \"\":\n%s\nwant\n%s", s2, s1)
	}
	if strings.Contains(string(s2), "users") {
		t.Errorf("status without the user level names users: %s", s2)
	}
	if !slices.Equal(h1, h2) {
		t.Errorf("response headers %v, want %v", h2, h1)
	}
	if _, ok := header(h2, "x-fairshare-user"); ok {
		t.Error("x-fairshare-user without the user level")
	}
	if !slices.Equal(m1, m2) {
		t.Errorf("metrics %v, want %v", m2, m1)
	}
	for _, m := range m2 {
		if strings.HasSuffix(m, ".users_active") || strings.HasSuffix(m, ".over") {
			t.Errorf("metric %s without the user level", m)
		}
	}
}

// TestWasmUsersCASConflicts: users on four VMs, one record write in three
// conflicting: every user's counts stay those of its requests while they
// run and come back to zero, and the users' usage adds up to the team's.
func TestWasmUsersCASConflicts(t *testing.T) {
	h, f := startFaulty(t, usersConfig, 4, pluginName+"/")
	f.conflictEvery.Store(3)
	users := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	var open []*host.Stream
	for i := range 12 {
		h.Advance(time.Millisecond)
		open = append(open, request(h, i%4, "/v1/chat/completions", as("a", users[i%len(users)]), chat("m", 8, "")))
	}
	st := teamStats(t, h, "p")["a"]
	sum := 0
	for _, u := range st.Users {
		sum += u.Within + u.Over + u.Borrowing
	}
	if st.InFlight != 12 || sum != 12 || len(st.Users) != len(users) {
		t.Errorf("team a: in flight %d, users' requests %d over %d users; want 12, 12, %d", st.InFlight, sum, len(st.Users), len(users))
	}
	for i, s := range open {
		respondJSON(s, 3+i, 2)
	}
	checkIdle(t, h, "p")
	st = teamStats(t, h, "p")["a"]
	usage := 0.0
	for _, u := range st.Users {
		if u.Within+u.Over+u.Borrowing+u.Waiting != 0 {
			t.Errorf("user %s counts %+v after every release", u.User, u)
		}
		usage += u.Usage
	}
	if math.Abs(usage-st.Usage) > 1e-6*st.Usage {
		t.Errorf("users' usage sums to %v, the team's is %v", usage, st.Usage)
	}
	if f.sets.Load() == 0 {
		t.Error("no conflict was injected")
	}
}
