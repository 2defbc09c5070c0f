package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUsersDemo: with testdata/plugin/users.json the steady team's load is
// its users': bulk floods, alice, bob and carol send a request now and
// then. The view lists the team's users under its row, and the summary
// each user's requests: every light user's ran within share (one client
// each, never above its portion of the team's reservation), while bulk's
// went over (the slots its teammates left) and borrowed. The load runs
// until each of those was seen, not for a fixed time.
func TestUsersDemo(t *testing.T) {
	r, out := startRun(t, "../../testdata/plugin/users.json", "-duration", "3s")
	if r.cfg.UserHeader != "x-user" || len(r.plans) != 1 || len(r.plans[0].teams[0].Users) != 4 {
		t.Fatalf("plan %+v (user header %q), want the steady team's four users", r.plans, r.cfg.UserHeader)
	}
	r.opts.pending = func([]teamView) string {
		if r.users == nil {
			return "the users' figures"
		}
		r.users.mu.Lock()
		defer r.users.mu.Unlock()
		search := r.users.by["search"]
		for _, u := range []string{"alice", "bob", "carol"} {
			if search[u] == nil || search[u].done == 0 {
				return u + " to finish a request"
			}
		}
		if b := search["bulk"]; b == nil || b.over == 0 || b.borrowing == 0 {
			return "bulk to go over and to borrow"
		}
		return ""
	}
	s, text := runDemo(t, r, out)
	r.users.mu.Lock()
	for name, u := range r.users.by["search"] {
		if name != "bulk" && (u.within != u.done || u.done == 0) {
			t.Errorf("%s: %d of %d requests within share, want all (a light user beside a flooder)", name, u.within, u.done)
		}
	}
	r.users.mu.Unlock()
	for _, want := range []string{"search interactive clients of users bulk ", " users: ", "alice ", " over", "users of search (the clients' figures):"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(s.UserLines) != 5 {
		t.Errorf("summary user lines %q, want the team's and one per user", s.UserLines)
	}
	for _, p := range s.Pools {
		for _, tm := range p.Teams {
			for _, u := range tm.Users {
				if u.Within+u.Over+u.Borrowing+u.Waiting != 0 {
					t.Errorf("user %s of %s still counts requests at the end: %+v", u.User, tm.Team, u)
				}
			}
		}
	}
}

// TestUsersNote: the line under a divided team lists its counts and its
// first users by standing; a team whose only user is _none (its clients
// name no user) gets none.
func TestUsersNote(t *testing.T) {
	st := &statusTeam{ActiveUsers: 5, Over: 3, Users: []statusUser{
		{User: "alice", Active: true, Portion: 2, Within: 1},
		{User: "bob", Active: true, Portion: 2, Waiting: 1},
		{User: "carol", Portion: 0},
		{User: "dave", Active: true, Portion: 1, Within: 1},
		{User: "bulk", Active: true, Portion: 2, Within: 2, Over: 3, Borrowing: 4, Waiting: 5},
	}}
	want := "users: 5 active, 3 over (within/portion +over +borrowing, held): alice 1/2 · bob 0/2, 1 held · carol 0/0 (idle) · dave 1/1 · 1 more"
	if got := usersNote(st); got != want {
		t.Errorf("usersNote =\n%q\nwant\n%q", got, want)
	}
	st.Users = st.Users[4:]
	if got := usersNote(st); !strings.HasSuffix(got, "bulk 2/2 +3 over +4 borrowing, 5 held") {
		t.Errorf("usersNote(bulk) = %q", got)
	}
	for _, s := range []*statusTeam{nil, {}, {ActiveUsers: 1, Users: []statusUser{{User: userNone, Active: true, Portion: 3, Within: 3}}}} {
		if got := usersNote(s); got != "" {
			t.Errorf("usersNote(%+v) = %q, want none", s, got)
		}
	}
}

// TestUserTallies: each finished request counts once under its user by
// its standing (over before borrowing: an over request is borrowing too);
// failed ones and requests without a user are not counted.
func TestUserTallies(t *testing.T) {
	u := newUserTallies()
	u.add("search", "bulk", result{Over: true, Borrowing: true, HasTTFT: true, TTFT: 300 * time.Millisecond})
	u.add("search", "bulk", result{Borrowing: true, HasTTFT: true, TTFT: 900 * time.Millisecond})
	u.add("search", "bulk", result{HasTTFT: true, TTFT: 100 * time.Millisecond})
	u.add("search", "alice", result{HasTTFT: true, TTFT: 50 * time.Millisecond})
	u.add("search", "alice", result{Err: context.Canceled})
	u.add("search", "", result{})
	got := u.lines()
	want := []string{
		"users of search (the clients' figures):",
		"  alice          1 requests:    1 within,    0 over,    0 borrowing · TTFT p50 50ms",
		"  bulk           3 requests:    1 within,    1 over,    1 borrowing · TTFT p50 300ms",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var none *userTallies
	none.add("search", "x", result{})
	if none.lines() != nil {
		t.Error("nil tallies have lines")
	}
}

// TestPlanTeamsUsers: with users the steady team's load is its users';
// scaled with the pool's capacity like the teams' clients.
func TestPlanTeamsUsers(t *testing.T) {
	p := configPool{Capacity: 32, Teams: []configTeam{{"search", 0.5, 0}, {"chat", 0.3, 0}, {"research", 0.2, 0}}}
	plain := planTeams(p, false)
	users := planTeams(p, true)
	if len(plain[0].Users) != 0 || len(users[0].Users) != 4 || users[0].Users[0].Name != "bulk" || users[0].Users[0].Think != 0 {
		t.Fatalf("planTeams users: %+v", users[0].Users)
	}
	for i := 1; i < len(users); i++ {
		if len(users[i].Users) != 0 {
			t.Errorf("team %s has users %+v, want the steady team's only", users[i].Name, users[i].Users)
		}
	}
	scaled := scaleTeams(users, p.Capacity)
	if scaled[0].Users[0].Workers != 2*users[0].Users[0].Workers || scaled[0].Users[1].Workers != 2 || users[0].Users[1].Workers != 1 {
		t.Errorf("scaled users %+v of %+v, want twice the clients at capacity 32 (the plan unchanged)", scaled[0].Users, users[0].Users)
	}
	cs := scaled[0].clients()
	if len(cs) != 4 || cs[0].User != "bulk" || cs[0].Workers != scaled[0].Users[0].Workers || cs[0].Name != "search" || cs[0].Users != nil {
		t.Errorf("clients %+v", cs)
	}
}

// TestParseStatusUsers: the status's per-team user fields are read.
func TestParseStatusUsers(t *testing.T) {
	pools, err := parseStatus([]byte(`{"pools":[{"name":"p","capacity":8,"teams":[{"team":"a","active_users":2,"over":1,"user_entries":3,
	  "users":[{"user":"alice","active":true,"portion":2,"within":1,"over":0,"borrowing":0,"waiting":1},{"user":"bulk","active":true,"portion":2,"within":2,"over":1,"borrowing":3,"waiting":0}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a := pools[0].Teams[0]
	if a.ActiveUsers != 2 || a.Over != 1 || len(a.Users) != 2 || a.Users[0] != (statusUser{User: "alice", Active: true, Portion: 2, Within: 1, Waiting: 1}) ||
		a.Users[1] != (statusUser{User: "bulk", Active: true, Portion: 2, Within: 2, Over: 1, Borrowing: 3}) {
		t.Errorf("team a %+v", a)
	}
}
