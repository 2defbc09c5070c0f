package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"

	"github.com/tidwall/gjson"
)

// statusPath is the plugin's status endpoint, answered by the plugin itself
// (a local reply) on GET.
const statusPath = "/fairshare/status"

// statusTeam is one team of a pool in the plugin's status snapshot.
type statusTeam struct {
	Team           string
	Share          float64
	Weight         float64
	Reserved       int
	Lent           int // the team's loan at a proxy of a cluster
	InFlight       int
	Borrowing      int
	Usage          float64
	LevelFairshare float64
	Rank           int
	Phantoms       int
	Waiting        int // requests held at the gateway (flow control)
	// ReservedWork, WorkDebt and WorkBurst are the team's work
	// reservation (cost units per second), its debt and its bucket's
	// depth (cost units), in a pool with throughput (0 otherwise).
	ReservedWork        int64
	WorkDebt, WorkBurst float64
	// ActiveUsers, Over and Users are the team's users (with the
	// plugin's user_header): how many count in its division now, its
	// over requests in flight, and the users the status lists, best
	// standing first (nil without the user level).
	ActiveUsers, Over int
	Users             []statusUser
}

// statusUser is one user of a team in the plugin's status snapshot.
type statusUser struct {
	User    string
	Active  bool
	Portion int // its part of the team's reserved sequences now
	// Within, Over, Borrowing: its requests in flight of each standing;
	// Waiting: held at the gateway.
	Within, Over, Borrowing, Waiting int
}

// statusPool is one pool of the plugin's status snapshot.
type statusPool struct {
	Name     string
	Capacity int
	Teams    []statusTeam
	// Source is capacity_source: "engines (N)" or "config" for a pool
	// with capacity_from, "" otherwise.
	Source string
	// Throughput is the pool's work capacity in cost units per second (0:
	// no work resource).
	Throughput int64
	// Spill-over: the fallbacks and the requests moved to each, and those
	// moved here (absent when the pool neither spills nor is a fallback).
	Spill     bool // the status has the pool's spill-over fields
	SpillTo   []string
	SpilledTo []int64 // as SpillTo
	SpilledIn int64
}

// inFlight returns the requests in flight in the pool, phantoms included.
func (p statusPool) inFlight() (n, borrowing int) {
	for _, t := range p.Teams {
		n += t.InFlight + t.Phantoms
		borrowing += t.Borrowing
	}
	return n, borrowing
}

// team returns the pool's entry for name, or nil.
func (p *statusPool) team(name string) *statusTeam {
	for i := range p.Teams {
		if p.Teams[i].Team == name {
			return &p.Teams[i]
		}
	}
	return nil
}

// errNoStatus is the status error when the configuration disables the
// endpoint.
var errNoStatus = errors.New("status endpoint disabled (status_path is empty)")

// fetchStatus asks the plugin for its snapshot at statusURL (the proxy's
// address and the configured status_path), with the bearer token if the
// configuration sets one.
func fetchStatus(ctx context.Context, c *http.Client, statusURL, token string) ([]statusPool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, statusURL, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status: GET %s: %d %s", req.URL.Path, resp.StatusCode, truncate(string(b), 200))
	}
	return parseStatus(b)
}

// parseStatus decodes the status snapshot. It accepts the pools as an array
// of objects with a "name" (or "pool") or as an object keyed by pool name,
// at the top level or under "pools"; likewise the teams under "teams". It
// never panics on any input.
func parseStatus(b []byte) ([]statusPool, error) {
	if !gjson.ValidBytes(b) {
		return nil, fmt.Errorf("status: not JSON: %s", truncate(string(b), 200))
	}
	root := gjson.ParseBytes(b)
	pools := root.Get("pools")
	if !pools.Exists() {
		pools = root
	}
	var out []statusPool
	eachNamed(pools, []string{"name", "pool"}, func(name string, v gjson.Result) {
		if !v.IsObject() {
			return
		}
		p := statusPool{Name: name, Capacity: int(first(v, "capacity", "c").Int()), Source: v.Get("capacity_source").String(),
			Throughput: v.Get("throughput").Int(), SpilledIn: v.Get("spilled_in").Int(), Spill: v.Get("spilled_in").Exists()}
		for _, f := range v.Get("spill_to").Array() {
			p.SpillTo = append(p.SpillTo, f.String())
			p.SpilledTo = append(p.SpilledTo, v.Get("spilled_to").Get(gjson.Escape(f.String())).Int())
		}
		eachNamed(v.Get("teams"), []string{"team", "name"}, func(team string, t gjson.Result) {
			if !t.IsObject() {
				return
			}
			var users []statusUser
			for _, u := range t.Get("users").Array() {
				users = append(users, statusUser{User: u.Get("user").String(), Active: u.Get("active").Bool(), Portion: int(u.Get("portion").Int()),
					Within: int(u.Get("within").Int()), Over: int(u.Get("over").Int()), Borrowing: int(u.Get("borrowing").Int()), Waiting: int(u.Get("waiting").Int())})
			}
			p.Teams = append(p.Teams, statusTeam{
				ActiveUsers:    int(t.Get("active_users").Int()),
				Over:           int(t.Get("over").Int()),
				Users:          users,
				Team:           team,
				Share:          t.Get("share").Float(),
				Weight:         t.Get("weight").Float(),
				Reserved:       int(t.Get("reserved").Int()),
				Lent:           int(t.Get("lent").Int()),
				InFlight:       int(first(t, "in_flight", "inflight", "inFlight").Int()),
				Borrowing:      int(t.Get("borrowing").Int()),
				Usage:          t.Get("usage").Float(),
				LevelFairshare: levelFairshare(first(t, "level_fairshare", "levelFairshare", "lf")),
				Rank:           int(t.Get("rank").Int()),
				Phantoms:       int(t.Get("phantoms").Int()),
				Waiting:        int(t.Get("waiting").Int()),
				ReservedWork:   t.Get("reserved_work").Int(),
				WorkDebt:       t.Get("work_debt").Float(),
				WorkBurst:      t.Get("work_burst").Float(),
			})
		})
		out = append(out, p)
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("status: no pools in %s", truncate(string(b), 200))
	}
	return out, nil
}

// levelFairshare reads LF: the plugin writes null for an infinite LF (a team
// with a share and no usage).
func levelFairshare(v gjson.Result) float64 {
	if v.Exists() && v.Type == gjson.Null {
		return math.Inf(1)
	}
	return v.Float()
}

// eachNamed calls fn for every element of an array (its name read from the
// first of keys present) or every member of an object (its name the key), in
// array order or key order.
func eachNamed(v gjson.Result, keys []string, fn func(name string, v gjson.Result)) {
	switch {
	case v.IsArray():
		for _, e := range v.Array() {
			fn(first(e, keys...).String(), e)
		}
	case v.IsObject():
		m := v.Map()
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fn(k, m[k])
		}
	}
}

// first returns the first of keys present in v.
func first(v gjson.Result, keys ...string) gjson.Result {
	for _, k := range keys {
		if r := v.Get(k); r.Exists() {
			return r
		}
	}
	return gjson.Result{}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
