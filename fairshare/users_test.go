package fairshare

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// usersPool is S2's pool with the user level: C = 16, search 0.5 (8
// sequences), b 0.3, c 0.2, flow control.
func usersPool(mod func(*Config)) *Pool {
	cfg := Config{Capacity: 16, HalfLife: time.Minute, HolderTimeout: 10 * time.Second, RequestTimeout: 10 * time.Minute,
		QueueLimit: 100, MaxQueueTime: 5 * time.Minute, Users: true,
		Teams: []TeamConfig{{Name: "search", Share: 0.5}, {Name: "b", Share: 0.3}, {Name: "c", Share: 0.2}}}
	if mod != nil {
		mod(&cfg)
	}
	return NewPool("pool", cfg, at(0))
}

// userReq is an interactive request of user in team, held by holder 1.
func userReq(id uint64, team, user string) Request {
	return Request{Holder: 1, ID: id, Team: team, User: user, Class: Interactive, Estimate: 1}
}

// arriveOK is Arrive that fails the test unless the request is granted.
func arriveOK(t *testing.T, p *Pool, now time.Time, r Request) Grant {
	t.Helper()
	g, _, out := p.Arrive(now, r)
	verify(t, p)
	if out != Granted {
		t.Fatalf("Arrive(%+v) = %v, want granted", r, out)
	}
	return g
}

// userStat returns the snapshot of user in team.
func userStat(t *testing.T, p *Pool, now time.Time, team, user string) UserStat {
	t.Helper()
	for _, u := range stat(t, p, now, team).Users {
		if u.User == user {
			return u
		}
	}
	t.Fatalf("no user %q in team %q", user, team)
	return UserStat{}
}

// TestUsersLightBeforeFlooder: a flooding user gets its portion within
// share, then the reserved sequences its teammates leave as over
// requests (priority 2 and up, counted as borrowing), then borrows; a
// light teammate's request is within share at once, although the team's
// sequences are all taken.
func TestUsersLightBeforeFlooder(t *testing.T) {
	p := usersPool(nil)
	// ann sent one request a second ago: active (UserActive 30 s).
	g := arriveOK(t, p, at(0), userReq(1, "search", "ann"))
	p.Release(at(time.Second), &g, 10)
	var prios []int
	for id := uint64(10); id < 22; id++ {
		g := arriveOK(t, p, at(2*time.Second), userReq(id, "search", "script"))
		prios = append(prios, g.Priority)
		if g.User != "script" {
			t.Fatalf("grant user %q", g.User)
		}
	}
	// Portion 4 of 8 (two active users): 4 within share, 4 over (script
	// has used nothing: rank 0, priority 2), then borrowing at the team's
	// rank (search has usage, b and c none: rank 1, priority 20).
	want := []int{0, 0, 0, 0, 2, 2, 2, 2, 20, 20, 20, 20}
	if fmt.Sprint(prios) != fmt.Sprint(want) {
		t.Fatalf("script's priorities %v, want %v", prios, want)
	}
	s := userStat(t, p, at(2*time.Second), "search", "script")
	if s.Within != 4 || s.Over != 4 || s.Borrowing != 4 || s.Portion != 4 {
		t.Fatalf("script %+v, want 4 within, 4 over, 4 borrowing, portion 4", s)
	}
	if ts := stat(t, p, at(2*time.Second), "search"); ts.Over != 4 || ts.Borrowing != 8 || ts.InFlight != 12 || ts.ActiveUsers != 2 {
		t.Fatalf("team %+v, want 4 over among 8 borrowing, 12 in flight, 2 active users", ts)
	}
	// ann's request: within share though within + over fill the 8.
	g = arriveOK(t, p, at(3*time.Second), userReq(30, "search", "ann"))
	if g.Borrowing || g.Priority != 0 || g.Over {
		t.Fatalf("ann's grant %+v, want within share at 0", g)
	}
	// script's next borrows: no reserved sequence is left.
	g = arriveOK(t, p, at(3*time.Second), userReq(31, "search", "script"))
	if !g.Borrowing || g.Over || g.Priority < BorrowBase {
		t.Fatalf("script's grant %+v, want borrowing", g)
	}
}

// TestUsersOneUserIsTeam: a team whose requests all come from one user
// is decided as without the user level: the same outcomes, priorities
// and standings over a random sequence of arrivals, dispatches, releases
// and time.
func TestUsersOneUserIsTeam(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		mod := func(users bool) func(*Config) {
			return func(c *Config) {
				c.Users = users
				c.KVTokens = 4000
				c.EntryPenalty = seed%2 == 0
				c.QueueLimit = int(seed % 3 * 50)
			}
		}
		with, without := usersPool(mod(true)), usersPool(mod(false))
		now := at(0)
		var gw, gn []Grant
		teams := []string{"search", "b", "c", "other"}
		for step := range 400 {
			switch op := r.IntN(10); {
			case op < 5:
				req := Request{Holder: uint32(r.IntN(2)), ID: uint64(step), Team: teams[r.IntN(4)], Class: Class(r.IntN(2)),
					Tokens: int64(r.IntN(900)), Estimate: float64(r.IntN(50))}
				a, wa, oa := without.Arrive(now, req)
				req.User = "solo"
				b, wb, ob := with.Arrive(now, req)
				if oa != ob || a.Priority != b.Priority || a.Borrowing != b.Borrowing || a.BorrowsTokens != b.BorrowsTokens ||
					wa.Within != wb.Within || b.Over {
					t.Fatalf("seed %d step %d: %+v %v / with users %+v %v", seed, step, a, oa, b, ob)
				}
				if oa == Granted {
					gn, gw = append(gn, a), append(gw, b)
				}
			case op < 8 && len(gn) > 0:
				k := r.IntN(len(gn))
				c := float64(r.IntN(100))
				without.Release(now, &gn[k], c)
				with.Release(now, &gw[k], c)
				gn, gw = append(gn[:k], gn[k+1:]...), append(gw[:k], gw[k+1:]...)
				for h := range uint32(2) {
					for {
						a, _, sa := without.Dispatch(now, h)
						b, _, sb := with.Dispatch(now, h)
						if sa != sb || a.Priority != b.Priority || a.Borrowing != b.Borrowing || a.ID != b.ID {
							t.Fatalf("seed %d step %d: dispatch %+v %v / with users %+v %v", seed, step, a, sa, b, sb)
						}
						if sa != Dispatched {
							break
						}
						gn, gw = append(gn, a), append(gw, b)
					}
				}
			default:
				now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			}
			verify(t, with)
		}
	}
}

// TestUserPortions: the team's reserved sequences are apportioned among
// its active users by share, largest remainder, ties by name; within-share
// phantoms belong to nobody.
func TestUserPortions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shares   []UserShare
		active   []string
		phantoms int
		want     []int64
	}{
		{"alone", nil, []string{"ann"}, 0, []int64{8}},
		{"two", nil, []string{"ann", "bob"}, 0, []int64{4, 4}},
		{"three: remainders to the smaller names", nil, []string{"ann", "bob", "cyd"}, 0, []int64{3, 3, 2}},
		{"four", nil, []string{"ann", "bob", "cyd", "dan"}, 0, []int64{2, 2, 2, 2}},
		{"shares", []UserShare{{"ann", 2}}, []string{"ann", "bob", "cyd"}, 0, []int64{4, 2, 2}},
		{"shares, remainder", []UserShare{{"cyd", 3}}, []string{"ann", "bob", "cyd"}, 0, []int64{2, 1, 5}},
		{"phantoms", nil, []string{"ann", "bob"}, 2, []int64{3, 3}},
		{"nine users of eight", nil, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}, 0, []int64{1, 1, 1, 1, 1, 1, 1, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := usersPool(func(c *Config) { c.Teams[0].Users = tc.shares })
			for k, u := range tc.active {
				g := arriveOK(t, p, at(0), userReq(uint64(k), "search", u))
				p.Release(at(0), &g, 1)
			}
			if tc.phantoms > 0 {
				p.AddPhantoms(at(0), "search", tc.phantoms, at(time.Hour))
			}
			var got []int64
			for _, u := range tc.active {
				got = append(got, p.portion(0, p.teams[0].findUser(u), p.now))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("portions %v, want %v", got, tc.want)
			}
			sum := int64(0)
			for _, g := range got {
				sum += g
			}
			if sum != 8-int64(tc.phantoms) {
				t.Fatalf("portions sum to %d", sum)
			}
		})
	}
}

// TestUserJoinsAndLeaves: a user counts in the division while it has
// requests or for UserActive after its latest one; then its teammates'
// portions grow back.
func TestUserJoinsAndLeaves(t *testing.T) {
	p := usersPool(nil)
	g := arriveOK(t, p, at(0), userReq(1, "search", "ann"))
	script := func(now time.Time) int64 {
		arriveOK(t, p, now, userReq(uint64(now.UnixNano()), "search", "script")).Release(p, now)
		return p.portion(0, p.teams[0].findUser("script"), p.now)
	}
	if n := script(at(time.Second)); n != 4 {
		t.Fatalf("script's portion with ann in flight = %d, want 4", n)
	}
	p.Release(at(2*time.Second), &g, 1)
	if n := script(at(29 * time.Second)); n != 4 {
		t.Fatalf("script's portion 29 s after ann's arrival = %d, want 4", n)
	}
	if n := script(at(31 * time.Second)); n != 8 {
		t.Fatalf("script's portion 31 s after ann's arrival = %d, want 8", n)
	}
	if s := userStat(t, p, at(31*time.Second), "search", "ann"); s.Active || s.Portion != 0 {
		t.Fatalf("ann %+v, want inactive", s)
	}
}

// Release is p.Release(now, &g, 1) for a grant value (tests).
func (g Grant) Release(p *Pool, now time.Time) { p.Release(now, &g, 1) }

// TestUsersOverRank: over requests are prioritised by their user's rank
// in the team (OverBase + rank·OverRankStep + class): the user with the
// most usage for its share gets the largest over priority.
func TestUsersOverRank(t *testing.T) {
	p := usersPool(func(c *Config) { c.Teams[0].Share, c.Teams[1].Share, c.Teams[2].Share = 1, 0, 0 })
	users := []string{"ann", "bob", "cyd", "dan", "eve"}
	for k, u := range users {
		// Usage 1, 10, 100, 1000, 10000.
		g := arriveOK(t, p, at(0), userReq(uint64(k), "search", u))
		p.Release(at(0), &g, math.Pow(10, float64(k)))
	}
	// Five active users share 16 sequences: portions 4, 3, 3, 3, 3. Each
	// takes its portion within share, leaving nothing over; then ann
	// releases two, and every user's next request is over while a
	// sequence is free.
	id := uint64(100)
	var anns []Grant
	for k, u := range users {
		for range 3 + boolInt(k == 0) {
			g := arriveOK(t, p, at(time.Second), userReq(id, "search", u))
			id++
			if g.Borrowing {
				t.Fatalf("%s within its portion: %+v", u, g)
			}
			if u == "ann" {
				anns = append(anns, g)
			}
		}
	}
	p.Release(at(time.Second), &anns[0], 1)
	p.Release(at(time.Second), &anns[1], 1)
	verify(t, p)
	for k, u := range []string{"eve", "bob"} {
		g := arriveOK(t, p, at(2*time.Second), userReq(id, "search", u))
		id++
		// eve ranks 4 (capped at 3), bob 1.
		want := []int{OverBase + MaxOverRank*OverRankStep, OverBase + OverRankStep}[k]
		if !g.Over || !g.Borrowing || g.Priority != want {
			t.Fatalf("%s: %+v, want over at %d", u, g, want)
		}
	}
	// The team, and with it the pool, is full, but eve (rank 4) holds an
	// over request: cyd (rank 2) takes its sequence (overTakes), over at
	// the within-share priority; cyd's next finds no worse over request
	// left to take, and waits; eve, the worst, takes nobody's.
	if g := arriveOK(t, p, at(2*time.Second), userReq(id, "search", "cyd")); !g.Over || !g.Borrowing || g.Priority != WithinShareBase {
		t.Fatalf("cyd: %+v, want over at %d", g, WithinShareBase)
	}
	id++
	if _, w, out := p.Arrive(at(2*time.Second), userReq(id, "search", "cyd")); out != Queued || w.Within || w.Over || w.User != "cyd" {
		t.Fatalf("cyd: %v %+v, want queued as a borrower", out, w)
	}
	verify(t, p)
	if _, _, out := p.Arrive(at(2*time.Second), userReq(id+1, "search", "eve")); out != Queued {
		t.Fatalf("eve: %v, want queued", out)
	}
}

// TestUsersQueueOrder: a light user above its portion takes the
// sequences a heavier teammate holds over (overTakes), up to their
// number; beyond, it waits, and the team's waiting requests go in its
// users' order: a light user's waiting request goes before a heavy
// teammate's that waited longer.
func TestUsersQueueOrder(t *testing.T) {
	p := usersPool(nil)
	// b and c fill their reservations (8): the pool's other half.
	for id := range uint64(8) {
		arriveOK(t, p, at(0), userReq(1000+id, []string{"b", "c"}[id%2], "x"))
	}
	// ann (light), cyd (light, idle) and script (heavy) are active:
	// portions 3, 3, 2.
	for k, u := range []string{"ann", "cyd", "script"} {
		g := arriveOK(t, p, at(0), userReq(uint64(k), "search", u))
		p.Release(at(0), &g, []float64{1, 1, 1000}[k])
	}
	// script fills the team: 2 within, 6 over.
	var over []Grant
	for id := uint64(10); id < 18; id++ {
		if g := arriveOK(t, p, at(time.Second), userReq(id, "search", "script")); g.Over {
			over = append(over, g)
		}
	}
	if len(over) != 6 {
		t.Fatalf("%d over requests, want 6", len(over))
	}
	// script's next two wait (the pool is full) ...
	for id := uint64(20); id < 22; id++ {
		if _, _, out := p.Arrive(at(2*time.Second), userReq(id, "search", "script")); out != Queued {
			t.Fatalf("script %d: %v, want queued", id, out)
		}
	}
	// ... ann takes her portion (3) within share, beyond the pool ...
	for id := uint64(30); id < 33; id++ {
		if g := arriveOK(t, p, at(3*time.Second), userReq(id, "search", "ann")); g.Borrowing {
			t.Fatalf("ann within portion: %+v", g)
		}
	}
	// ... and, above her portion while script (worse) holds 6 over
	// requests, ann's next three take their sequences (overTakes: the
	// team's requests beyond its 8 stay fewer than script's over ones),
	// at the within-share priority; her seventh waits, after script's two.
	var anns []Grant
	for id := uint64(40); id < 43; id++ {
		g := arriveOK(t, p, at(4*time.Second), userReq(id, "search", "ann"))
		if !g.Over || g.Priority != WithinShareBase {
			t.Fatalf("ann's %d: %+v, want over at %d", id, g, WithinShareBase)
		}
		anns = append(anns, g)
	}
	if _, w, out := p.Arrive(at(4*time.Second), userReq(43, "search", "ann")); out != Queued || w.Within || w.Over {
		t.Fatalf("ann's seventh: %v %+v, want queued", out, w)
	}
	// One of ann's finishes: her waiting request goes first, before
	// script's that waited longer (the team's order is its users' rank),
	// and script's stay.
	p.Release(at(5*time.Second), &anns[0], 1)
	verify(t, p)
	var order []uint64
	for {
		g, _, st := p.Dispatch(at(5*time.Second), 1)
		verify(t, p)
		if st != Dispatched {
			break
		}
		order = append(order, g.ID)
	}
	if fmt.Sprint(order) != "[43]" {
		t.Fatalf("dispatched %v, want ann's 43 alone", order)
	}
	if s := userStat(t, p, at(5*time.Second), "search", "script"); s.Waiting != 2 {
		t.Fatalf("script %+v, want 2 waiting", s)
	}
}

// TestUsersBounded: a team keeps at most MaxUsers user entries: a new
// user replaces the idle one of least usage, or counts as UserOther when
// every entry has requests; idle users go after UserIdle; a request
// without a user counts as UserNone; names are cut to MaxUserName.
func TestUsersBounded(t *testing.T) {
	p := usersPool(func(c *Config) { c.MaxUsers = 3; c.UserIdle = time.Minute })
	for k, u := range []string{"u1", "u2", "u3"} {
		g := arriveOK(t, p, at(0), userReq(uint64(k), "search", u))
		p.Release(at(0), &g, float64(10-k)) // u3 has the least usage
	}
	g := arriveOK(t, p, at(time.Second), userReq(10, "search", "u4"))
	names := func() (s []string) {
		for _, u := range p.teams[0].users {
			s = append(s, u.name)
		}
		return s
	}
	if fmt.Sprint(names()) != "[u1 u2 u4]" {
		t.Fatalf("users %v, want u3 replaced by u4", names())
	}
	// Every entry busy: u5 counts as UserOther.
	busy := []Grant{g}
	for k, u := range []string{"u1", "u2"} {
		busy = append(busy, arriveOK(t, p, at(time.Second), userReq(uint64(20+k), "search", u)))
	}
	if g := arriveOK(t, p, at(time.Second), userReq(30, "search", "u5")); g.User != UserOther {
		t.Fatalf("u5 counted as %q, want %q", g.User, UserOther)
	}
	if g := arriveOK(t, p, at(time.Second), userReq(31, "search", "")); g.User != UserOther {
		t.Fatalf("no user counted as %q, want %q (the team is full)", g.User, UserOther)
	}
	for k := range busy {
		p.Release(at(2*time.Second), &busy[k], 1)
	}
	// A minute after their latest requests, idle users are dropped.
	p.Heartbeat(at(2*time.Minute), 1)
	verify(t, p)
	if got := names(); len(got) != 1 || got[0] != UserOther {
		t.Fatalf("users %v after UserIdle, want only %s (in flight)", got, UserOther)
	}
	long := string(make([]byte, 100))
	for i := range len(long) {
		long = long[:i] + "x" + long[i+1:]
	}
	if g := arriveOK(t, p, at(3*time.Minute), userReq(40, "search", long)); len(g.User) != MaxUserName {
		t.Fatalf("user name of %d bytes, want %d", len(g.User), MaxUserName)
	}
	if g := arriveOK(t, p, at(3*time.Minute), userReq(41, "b", "")); g.User != UserNone {
		t.Fatalf("no user counted as %q, want %q", g.User, UserNone)
	}
}

// TestUsersHeal: a dead holder's requests stay in their user's counts as
// phantoms; when the phantoms expire, the user's counts follow the team's.
func TestUsersHeal(t *testing.T) {
	p := usersPool(func(c *Config) { c.RequestTimeout = time.Minute })
	for id := range uint64(3) {
		r := userReq(id, "search", "ann")
		r.Holder = 7
		arriveOK(t, p, at(0), r)
	}
	p.Heartbeat(at(20*time.Second), 1) // holder 7 presumed dead: phantoms
	verify(t, p)
	if s := userStat(t, p, at(20*time.Second), "search", "ann"); s.Within != 3 {
		t.Fatalf("ann %+v, want 3 within (phantoms)", s)
	}
	p.Heartbeat(at(2*time.Minute), 1) // the phantoms expire
	verify(t, p)
	if s := userStat(t, p, at(2*time.Minute), "search", "ann"); s.Within != 0 {
		t.Fatalf("ann %+v after the phantoms expired, want 0 within", s)
	}
}

// TestUsersUsage: the team's usage is the sum of its users' (entry
// penalties charged and settled to both), decayed alike.
func TestUsersUsage(t *testing.T) {
	p := usersPool(func(c *Config) { c.EntryPenalty = true })
	var gs []Grant
	for id := range uint64(12) {
		r := userReq(id, "search", []string{"ann", "bob", "cyd"}[id%3])
		r.Estimate = float64(5 + id)
		gs = append(gs, arriveOK(t, p, at(time.Duration(id)*time.Second), r))
	}
	sum := func() (float64, float64) {
		s := stat(t, p, time.Unix(0, p.now), "search")
		u := 0.0
		for _, x := range s.Users {
			u += x.Usage
		}
		return s.Usage, u
	}
	if team, users := sum(); !closeRel(team, users, 1e-12) {
		t.Fatalf("penalties: team %v, users %v", team, users)
	}
	for k := range gs {
		p.Release(at(time.Duration(20+k)*time.Second), &gs[k], float64(3*k))
		verify(t, p)
	}
	team, users := sum()
	if !closeRel(team, users, 1e-12) {
		t.Fatalf("settled: team %v, users %v", team, users)
	}
	for _, u := range p.teams[0].users {
		if u.penalty != 0 {
			t.Fatalf("user %q keeps a penalty %v", u.name, u.penalty)
		}
	}
}

// TestUsersOff: without the user level Request.User is ignored, grants
// carry no user, and the record has no user byte: it is the record of a
// pool that never saw one.
func TestUsersOff(t *testing.T) {
	a := usersPool(func(c *Config) { c.Users = false })
	b := usersPool(func(c *Config) { c.Users = false })
	for id := range uint64(20) {
		r := userReq(id, "search", "")
		ga, _, _ := a.Arrive(at(time.Second), r)
		r.User = fmt.Sprint("user-", id)
		gb, _, _ := b.Arrive(at(time.Second), r)
		if ga != gb || gb.User != "" {
			t.Fatalf("%+v / %+v", ga, gb)
		}
	}
	ra, _ := a.AppendBinary(nil)
	rb, _ := b.AppendBinary(nil)
	if string(ra) != string(rb) {
		t.Fatal("records differ")
	}
	// Turning the level off drops every user.
	p := usersPool(nil)
	arriveOK(t, p, at(0), userReq(1, "search", "ann"))
	cfg := p.config()
	cfg.Users = false
	p.Reconfigure(at(time.Second), cfg)
	verify(t, p)
	if len(p.teams[0].users) != 0 {
		t.Fatal("users kept without the user level")
	}
}

// userPools returns pools whose records exercise the users trailer: user
// shares, users of every flag, waiting requests with and without users,
// UserOther, a removed team still draining its users' requests.
func userPools() []*Pool {
	p := usersPool(func(c *Config) {
		c.EntryPenalty = true
		c.KVTokens = 16000
		c.Teams[0].Users = []UserShare{{"ann", 2}, {"zed", 0.5}}
		c.MaxUsers = 4
	})
	for id := range uint64(24) {
		r := userReq(id, []string{"search", "b", "c"}[id%3], []string{"ann", "bob", "", "cyd", "dan", "eve"}[id%6])
		r.Tokens = int64(100 * id)
		r.Estimate = float64(id)
		if g, _, out := p.Arrive(at(time.Duration(id)*time.Millisecond), r); out == Granted && id%4 == 0 {
			p.Release(at(time.Second), &g, float64(id))
		}
	}
	q := usersPool(nil)
	q.Arrive(at(0), userReq(1, "c", "ann"))
	cfg := q.config()
	cfg.Teams = cfg.Teams[:2] // c removed, its request still in flight
	q.Reconfigure(at(time.Second), cfg)
	return []*Pool{p, q, usersPool(nil)}
}

// FuzzDecodeUsers is FuzzDecode's property on records of pools with the
// user level.
func FuzzDecodeUsers(f *testing.F) {
	pools := userPools()
	seed, _ := pools[0].AppendBinary(nil)
	for _, p := range pools {
		b, _ := p.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, seed, data) })
}

// TestUserPoolsValid: the fuzz seeds are consistent pools.
func TestUserPoolsValid(t *testing.T) {
	for _, p := range userPools() {
		verify(t, p)
	}
}

// TestRandomUsers: random arrivals of many users of three teams,
// releases, dispatches, cancels, dead holders and time keep every
// invariant (verify after every operation: users' counts never above
// their team's, waiting counts, the record round trip); within share is
// granted only to a user below its portion; and once everything is
// released and the leases have run out, nothing is left in flight.
func TestRandomUsers(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 11))
		p := usersPool(func(c *Config) {
			c.MaxUsers = 1 + int(seed%5)
			c.EntryPenalty = seed%2 == 1
			c.KVTokens = int64(seed%3) * 6000
			c.HolderTimeout = 5 * time.Second
			c.RequestTimeout = time.Minute
			if seed%4 == 0 {
				c.Teams[0].Users = []UserShare{{"u1", 3}}
			}
		})
		now := at(0)
		var live []Grant
		for step := range 500 {
			op := r.IntN(12)
			switch {
			case op < 5:
				req := Request{Holder: uint32(r.IntN(3)), ID: uint64(step), Team: []string{"search", "b", "c", "x"}[r.IntN(4)],
					User: fmt.Sprint("u", r.IntN(8)), Class: Class(r.IntN(2)), Tokens: int64(r.IntN(3000)), Estimate: float64(r.IntN(20))}
				p.advance(now.UnixNano())
				i := p.acquireEntry(req.Team)
				known, below := false, false
				if k := p.teams[i].findUser(req.User); p.teams[i].configured && k >= 0 {
					known, below = true, p.teams[i].users[k].within < p.portion(i, k, p.now)
				}
				g, _, out := p.Arrive(now, req)
				if out == Granted {
					live = append(live, g)
					// Within share only for a user below its portion.
					if known && g.User == req.User && !g.Borrowing && !below {
						t.Fatalf("seed %d step %d: %+v within share at its portion", seed, step, g)
					}
				}
			case op < 8 && len(live) > 0:
				k := r.IntN(len(live))
				p.Release(now, &live[k], float64(r.IntN(50)))
				live = append(live[:k], live[k+1:]...)
				for {
					g, _, st := p.Dispatch(now, uint32(r.IntN(3)))
					if st != Dispatched {
						break
					}
					live = append(live, g)
				}
			case op == 8:
				p.Cancel(now, uint32(r.IntN(3)), uint64(r.IntN(step+1)))
			default:
				now = now.Add(time.Duration(r.IntN(4000)) * time.Millisecond)
				p.Heartbeat(now, uint32(r.IntN(3)))
			}
			verify(t, p)
		}
		for k := range live {
			p.Release(now, &live[k], 1)
		}
		p.Heartbeat(now.Add(10*time.Minute), 0)
		verify(t, p)
		for _, s := range p.Snapshot(now.Add(10 * time.Minute)) {
			for _, u := range s.Users {
				if u.Within+u.Over+u.Borrowing != 0 {
					t.Fatalf("seed %d: user %+v of %s still counts requests", seed, u, s.Team)
				}
			}
		}
	}
}

// TestUserRecordSize states the record's size over a day of 10, 1,000
// and 10,000 distinct users of one team (three requests each at random
// times, five seconds in flight; the pool of usersPool with the default
// MaxUsers and UserIdle), and checks that it stays bounded by MaxUsers:
// users idle for UserIdle are dropped, and a full team replaces its idle
// user of least usage.
func TestUserRecordSize(t *testing.T) {
	for _, n := range []int{10, 1000, 10000} {
		p := usersPool(nil)
		r := rand.New(rand.NewPCG(uint64(n), 3))
		type ev struct {
			at   time.Duration
			user int
		}
		var evs []ev
		for u := range n {
			for range 3 {
				evs = append(evs, ev{time.Duration(r.Int64N(int64(24 * time.Hour))), u})
			}
		}
		slices.SortStableFunc(evs, func(a, b ev) int { return cmp.Compare(a.at, b.at) })
		type open struct {
			g   Grant
			end time.Duration
		}
		var live []open
		most, mostUsers := 0, 0
		for k, e := range evs {
			for len(live) > 0 && live[0].end <= e.at {
				p.Release(at(live[0].end), &live[0].g, 20)
				live = live[1:]
			}
			g, _, out := p.Arrive(at(e.at), Request{Holder: 1, ID: uint64(k), Team: "search", User: fmt.Sprintf("user-%05d", e.user), Estimate: 20})
			if out == Granted {
				live = append(live, open{g, e.at + 5*time.Second})
			}
			b, _ := p.AppendBinary(nil)
			most = max(most, len(b))
			mostUsers = max(mostUsers, len(p.teams[0].users))
		}
		verify(t, p)
		t.Logf("%6d users a day: at most %d user entries, record at most %d bytes", n, mostUsers, most)
		if mostUsers > DefaultMaxUsers+1 {
			t.Fatalf("%d user entries, bound %d", mostUsers, DefaultMaxUsers+1)
		}
		// A user entry of a 10-byte name takes at most 12 + 8 + 8 + 10 +
		// 3 bytes; the rest of the record is under 300 bytes.
		if bound := 300 + mostUsers*41; most > bound {
			t.Fatalf("record of %d bytes, bound %d", most, bound)
		}
	}
}

// TestUserUsageSync: UserUsage reports every user's usage by UserKey and
// SetUserUsage sets it (as a replica merging the others' does); a user
// the team does not have is added idle while the team has room, never
// by evicting one; without the user level both do nothing.
func TestUserUsageSync(t *testing.T) {
	p := usersPool(func(c *Config) { c.MaxUsers = 2 })
	g := arriveOK(t, p, at(0), userReq(1, "search", "ann"))
	p.Release(at(0), &g, 5)
	u := p.UserUsage(at(0))
	if len(u) != 1 || u[UserKey("search", "ann")] != 5 {
		t.Fatalf("UserUsage = %v", u)
	}
	if team, user, ok := SplitUserKey(UserKey("search", "ann")); !ok || team != "search" || user != "ann" {
		t.Fatalf("SplitUserKey = %q %q %v", team, user, ok)
	}
	if _, _, ok := SplitUserKey("search"); ok {
		t.Fatal("a team's name split as a user key")
	}
	for _, c := range []struct {
		team, user string
		x          float64
		want       bool
	}{
		{"search", "ann", 50, true},
		{"search", "bob", 7, true},  // added, idle
		{"search", "cyd", 9, false}, // no room
		{"nope", "ann", 9, false},   // no such team
	} {
		if got := p.SetUserUsage(at(time.Second), c.team, c.user, c.x); got != c.want {
			t.Errorf("SetUserUsage(%s, %s) = %v, want %v", c.team, c.user, got, c.want)
		}
	}
	verify(t, p)
	u = p.UserUsage(at(time.Second))
	if len(u) != 2 || u[UserKey("search", "ann")] != 50 || u[UserKey("search", "bob")] != 7 {
		t.Fatalf("UserUsage = %v", u)
	}
	if s := userStat(t, p, at(time.Second), "search", "bob"); s.Active {
		t.Fatalf("a user added by SetUserUsage is active: %+v", s)
	}
	off := usersPool(func(c *Config) { c.Users = false })
	if off.SetUserUsage(at(0), "search", "ann", 1) || len(off.UserUsage(at(0))) != 0 {
		t.Fatal("users without the user level")
	}
}
