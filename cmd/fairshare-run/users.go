package main

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// userTallies are the demo's figures per user of each team, as the
// clients saw them (the plugin's x-fairshare-priority, -borrowing and
// -over), for the summary's users lines: a team divided among its users
// (the plugin's user_header) shows there what each user got. Safe for
// concurrent use; the zero value is not usable: use newUserTallies.
type userTallies struct {
	mu sync.Mutex
	// by is pool/team → user → tally; order keeps the teams' first
	// appearance.
	by    map[string]map[string]*userTally
	order []string
}

// userTally is one user's requests: how many finished without an error,
// how many of them went within share, over and borrowing, and their
// TTFTs.
type userTally struct {
	done, within, over, borrowing int
	ttft                          []time.Duration
}

func newUserTallies() *userTallies { return &userTallies{by: map[string]map[string]*userTally{}} }

// add counts one finished request of user in team (its key, "pool/team"
// with several pools) with its result.
func (u *userTallies) add(team, user string, r result) {
	if u == nil || user == "" || r.Err != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	users, ok := u.by[team]
	if !ok {
		users = map[string]*userTally{}
		u.by[team] = users
		u.order = append(u.order, team)
	}
	t, ok := users[user]
	if !ok {
		t = &userTally{}
		users[user] = t
	}
	t.done++
	switch {
	case r.Over:
		t.over++
	case r.Borrowing:
		t.borrowing++
	default:
		t.within++
	}
	if r.HasTTFT {
		t.ttft = append(t.ttft, r.TTFT)
	}
}

// lines renders, per team, a line naming it and one line per user: its
// requests by standing and its TTFT p50, users by name; nil when no user
// sent anything.
func (u *userTallies) lines() []string {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, team := range u.order {
		users := u.by[team]
		out = append(out, fmt.Sprintf("users of %s (the clients' figures):", team))
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range users {
				if !yield(k) {
					return
				}
			}
		}) {
			t := users[name]
			p50, ok := percentile(t.ttft, 50)
			out = append(out, fmt.Sprintf("  %-10s %5d requests: %4d within, %4d over, %4d borrowing · TTFT p50 %s",
				name, t.done, t.within, t.over, t.borrowing, fmtDur(p50, ok)))
		}
	}
	return out
}
