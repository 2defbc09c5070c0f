package fairbench

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// usersJSON is a scenario with users within team a, with workloads and
// top-level fields to fill in.
const usersJSON = `{"name": "u", "duration_s": 10, "teams": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
	"workloads": [%s], %s}`

// usersWorkload is a workload of team with user ("" for none).
func usersWorkload(team, user string) string {
	u := ""
	if user != "" {
		v, _ := json.Marshal(user)
		u = fmt.Sprintf(`"user": %s, `, v)
	}
	return fmt.Sprintf(`{"team": %q, %s"kind": "poisson", "rate": 1, "prompt": {"mean": 8}, "output": {"mean": 8}, "interactive": 1}`, team, u)
}

// TestUsersParsedStrictly: a workload's user must be a header token,
// alone_users must name users of one team each, once, and the users
// targets need users (and alone_users); each problem names its field.
func TestUsersParsedStrictly(t *testing.T) {
	ann, bob := usersWorkload("a", "ann"), usersWorkload("a", "bob")
	for _, c := range []struct {
		name, workloads, rest, want string
	}{
		{"space in user", usersWorkload("a", "ann lee"), `"seed": 1`, `workloads[0].user: must be a token`},
		{"control byte in user", usersWorkload("a", "ann\x01"), `"seed": 1`, `workloads[0].user: must be a token`},
		{"user too long", usersWorkload("a", strings.Repeat("x", 65)), `"seed": 1`, `workloads[0].user: must be a token`},
		{"unknown alone user", ann, `"alone_users": ["zed"]`, `alone_users[0]: unknown user "zed": no workload names it`},
		{"duplicate alone user", ann + "," + bob, `"alone_users": ["ann", "bob", "ann"]`, `alone_users[2]: duplicate user "ann"`},
		{"alone user in two teams", ann + "," + usersWorkload("b", "ann"), `"alone_users": ["ann"]`, `alone_users[0]: user "ann" is in teams a, b`},
		{"light p99 without alone_users", ann, `"targets": {"users_light_p99_vs_alone": {"at_most": 1.2}}`, `targets.users_light_p99_vs_alone: needs the scenario's "alone_users"`},
		{"share without users", usersWorkload("a", ""), `"targets": {"users_team_share_vs_flat_points": {"at_most": 1}}`, `targets.users_team_share_vs_flat_points: needs a workload with a "user"`},
		{"lost without users", usersWorkload("a", ""), `"targets": {"users_nothing_lost": {"at_most": 0}}`, `targets.users_nothing_lost: needs a workload with a "user"`},
		{"lost at least", ann, `"targets": {"users_nothing_lost": {"at_least": 0}}`, `targets.users_nothing_lost: must set exactly one of [at_most]`},
		{"light p99 reported", ann, `"alone_users": ["ann"], "targets": {"users_light_p99_vs_alone": {"report": true}}`, `targets.users_light_p99_vs_alone: must set exactly one of [at_most]`},
	} {
		_, err := ParseScenario([]byte(fmt.Sprintf(usersJSON, c.workloads, c.rest)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ParseScenario error = %v, want one containing %q", c.name, err, c.want)
		}
	}
	s, err := ParseScenario([]byte(fmt.Sprintf(usersJSON, bob+","+ann+","+usersWorkload("b", "")+","+ann,
		`"alone_users": ["ann"], "targets": {"users_light_p99_vs_alone": {"at_most": 1.2}, "users_team_share_vs_flat_points": {"at_most": 1}, "users_nothing_lost": {"at_most": 0}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Users(), []TeamUser{{"a", "ann"}, {"a", "bob"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Users() = %v, want %v (team order, then name; each once)", got, want)
	}
	if got := s.UsersTeams(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("UsersTeams() = %v, want [a]", got)
	}
	if !s.HasUsers() {
		t.Error("HasUsers() = false, want true")
	}
}

// usersScenario is two teams, a with a closed loop of user `script` and a
// Poisson stream each of users `ann` and `bob`, b with a closed loop and
// no user.
func usersScenario() *Scenario {
	d := LengthDist{Dist: DistExp, Mean: 64, Min: 4, Max: 256}
	return &Scenario{Name: "users", Seed: 3, Duration: 20, Warmup: 2, Capacity: 16, Engine: EngineSpec{Preset: "demo"},
		Teams: []TeamSpec{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		Workloads: []WorkloadSpec{
			{Team: "a", User: "script", Kind: KindClosed, Concurrency: 12, Prompt: d, Output: d, MaxTokens: 512, Interactive: 0.5},
			{Team: "a", User: "ann", Kind: KindPoisson, Rate: 2, Prompt: d, Output: d, MaxTokens: 512, Interactive: 1},
			{Team: "b", Kind: KindClosed, Concurrency: 12, Prompt: d, Output: d, MaxTokens: 512, Interactive: 0.5},
			{Team: "a", User: "bob", Kind: KindPoisson, Rate: 2, Prompt: d, Output: d, MaxTokens: 512, Interactive: 1},
		},
		AloneUsers: []string{"ann", "bob"}}
}

// TestAloneUsersReplayTheirRequests: the alone-users scenario keeps only
// the named users' workloads, and each draws the requests it draws in the
// whole scenario (the same arrivals, classes and lengths), though its
// index there differs.
func TestAloneUsersReplayTheirRequests(t *testing.T) {
	s := usersScenario()
	a := s.AloneUsersScenario()
	if len(a.Workloads) != 2 || a.Workloads[0].User != "ann" || a.Workloads[1].User != "bob" {
		t.Fatalf("alone-users workloads %+v, want ann's and bob's", a.Workloads)
	}
	type key struct {
		user           string
		at             time.Duration
		class          Class
		prompt, output int
	}
	pick := func(reqs []*Request) []key {
		var out []key
		for _, r := range reqs {
			out = append(out, key{r.User, r.Arrival, r.Class, r.Prompt, r.Output})
		}
		return out
	}
	want := pick(OpenLoopArrivals(s, 7))
	got := pick(OpenLoopArrivals(a, 7))
	if len(want) < 40 || !reflect.DeepEqual(got, want) {
		t.Errorf("alone-users arrivals (%d) differ from the scenario's (%d)", len(got), len(want))
	}
	if (&Scenario{Name: "x"}).AloneUsersScenario() != nil {
		t.Error("AloneUsersScenario of a scenario without alone_users: want nil")
	}
}

// TestUsersResults runs usersScenario under FCFS: every (team, user) has
// a result, the users of team a (all its workloads name one) split its
// service, their requests add up to the team's, and the team without
// users has none.
func TestUsersResults(t *testing.T) {
	s := usersScenario()
	res, err := Run(s, NewFCFS(), RunOptions{Mode: ModeVLLM})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Users) != 3 {
		t.Fatalf("Users = %+v, want script, ann and bob of team a", res.Users)
	}
	var share float64
	n := [2]int{}
	for i, want := range []string{"ann", "bob", "script"} {
		u := res.Users[i]
		if u.Team != "a" || u.User != want {
			t.Errorf("Users[%d] = %s/%s, want a/%s", i, u.Team, u.User, want)
		}
		if u.Service <= 0 || u.Class[Interactive].Requests == 0 || u.Class[Interactive].TTFTp99 < u.Class[Interactive].TTFTp50 {
			t.Errorf("user %s: %+v, want service, interactive requests and p99 >= p50", want, u)
		}
		share += u.TeamShare
		for k := range n {
			n[k] += u.Class[k].Requests
		}
	}
	if math.Abs(share-1) > 1e-9 {
		t.Errorf("users' shares of team a's service sum to %v, want 1", share)
	}
	a := res.Team("a")
	if n[0] != a.Class[0].Requests || n[1] != a.Class[1].Requests {
		t.Errorf("users' requests %v, team a's %d/%d: want equal", n, a.Class[0].Requests, a.Class[1].Requests)
	}
	if u := res.Users[2]; u.Class[Batch].Requests == 0 {
		t.Errorf("script: no batch request, want half of its closed loop")
	}
	if res.User("b", "") != nil || res.User("a", "zed") != nil {
		t.Error("User of an unknown user: want nil")
	}
	if res.Ledger != nil {
		t.Errorf("Ledger %+v under FCFS (no CapacityReporter), want nil", res.Ledger)
	}
}

// TestFlatColumn: the flat column of each plugin column, none for the
// others and for a flat column.
func TestFlatColumn(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plugin", "plugin-nousers"},
		{"plugin-3x", "plugin-nousers-3x"},
		{"plugin-nousers", ""},
		{"plugin-nousers-3x", ""},
		{"vtc", ""},
		{"native-flow", ""},
	} {
		if got := FlatColumn(c.in); got != c.want {
			t.Errorf("FlatColumn(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// usersResult returns a result of policy whose team a has service share
// teamShare and whose users ann and bob have interactive p99s annP99 and
// bobP99 (seconds).
func usersResult(policy string, teamShare, annP99, bobP99 float64) *Result {
	r := fakeResult(policy, 100, 0, 1, 1)
	r.Teams[0].ServiceShare, r.Teams[1].ServiceShare = teamShare, 1-teamShare
	for _, u := range []struct {
		name string
		p99  float64
	}{{"ann", annP99}, {"bob", bobP99}} {
		ur := UserResult{Team: "a", User: u.name}
		ur.Class[Interactive] = ClassResult{Requests: 10, TTFTp50: 10 * time.Millisecond, TTFTp99: time.Duration(u.p99 * float64(time.Second))}
		r.Users = append(r.Users, ur)
	}
	return r
}

// TestUsersTargets: the three users targets of a fake report, read from
// a scenario with users: the worst light user's p99 over its alone p99,
// the team's share against the flat column's, and the ledger; each
// missing where its reference is.
func TestUsersTargets(t *testing.T) {
	one2, one, zero := 1.2, 1.0, 0.0
	s := usersScenario()
	s.Targets = Targets{UsersLightP99VsAlone: &Bound{AtMost: &one2}, UsersTeamShareVsFlat: &Bound{AtMost: &one}, UsersNothingLost: &Bound{AtMost: &zero}}
	plug := usersResult("plugin", 0.50, 0.030, 0.050)
	plug.Ledger = &Ledger{InFlight: 1, Open: 0, ChargedPrompt: 10, ReportedPrompt: 10, ChargedCompletion: 7, ReportedCompletion: 9, Users: true, UsersInFlight: 2}
	flat := usersResult(NoUsersColumn, 0.515, 2, 3)
	alone := usersResult("fcfs", 1, 0.030, 0.040)
	rep := &Report{Scenario: s, Modes: []string{ModeVLLM},
		Results:   map[string][]*Result{ModeVLLM: {fakeResult("fcfs", 100, 0, 1, 1), fakeResult("vtc", 100, 0, 1, 1), plug}},
		Ablations: map[string][]*Result{ModeVLLM: {flat}}, AloneUsers: alone}
	type want struct {
		value  float64
		ok     bool
		detail string
	}
	check := func(name string, ts []Target, wants map[string]want) {
		t.Helper()
		if len(ts) != len(wants) {
			t.Errorf("%s: targets %v, want %d", name, ts, len(wants))
		}
		for _, tg := range ts {
			w, found := wants[tg.Name]
			if !found || math.Abs(tg.Value-w.value) > 1e-9 || tg.OK() != w.ok || tg.Detail != w.detail {
				t.Errorf("%s: %v (detail %q), want %+v (found %v)", name, tg, tg.Detail, w, found)
			}
		}
	}
	const p99, share, lost = "interactive p99 TTFT of a light user / alone, worst user", "team's service share with users − without (points)", "lost with users: requests left counted + tokens charged ≠ reported"
	check("plugin", UsersTargets(rep, ModeVLLM, "plugin"), map[string]want{
		p99:   {1.25, false, "`a/bob`"}, // bob 50 ms / 40 ms beats ann's 1.0
		share: {1.5, false, "`a`"},
		lost:  {5, false, ""}, // one request left counted by team a, two by its users, two completion tokens not charged
	})
	plug.Ledger = &Ledger{ChargedPrompt: 10, ReportedPrompt: 10, UsersInFlight: 4} // users off: their count means nothing
	plug.Teams[0].ServiceShare = 0.51
	plug.Users[1].Class[Interactive].TTFTp99 = 44 * time.Millisecond
	check("plugin, within bounds", UsersTargets(rep, ModeVLLM, "plugin"), map[string]want{
		p99:   {1.1, true, "`a/bob`"},
		share: {0.5, true, "`a`"},
		lost:  {0, true, ""},
	})
	// The flat column has no flat column and no ledger: the p99 only.
	check("flat", UsersTargets(rep, ModeVLLM, NoUsersColumn), map[string]want{p99: {75, false, "`a/bob`"}})
	// In FlowTargets, with the other targets of the scenario (none here).
	check("FlowTargets", FlowTargets(rep, "plugin"), map[string]want{p99: {1.1, true, "`a/bob`"}, share: {0.5, true, "`a`"}, lost: {0, true, ""}})
	rep.AloneUsers, rep.Ablations = nil, nil
	plug.Ledger = nil
	check("no references", UsersTargets(rep, ModeVLLM, "plugin"), nil)
	if ts := UsersTargets(rep, ModeVLLM, "plugin-3x"); ts != nil {
		t.Errorf("absent column: %v, want none", ts)
	}
}

// TestWriteUsers: the users tables of a fake report: one row per (team,
// user) with every column, the flat column next to the main ones, the
// alone run and the ratios, the team's share and the ledger.
func TestWriteUsers(t *testing.T) {
	s := usersScenario()
	plug := usersResult("plugin", 0.5, 0.030, 0.050)
	plug.Ledger = &Ledger{InFlight: 2, Open: 1, ChargedPrompt: 12, ReportedPrompt: 10, ChargedCompletion: 9, ReportedCompletion: 9, Users: true, UsersInFlight: 1}
	flatLedger := *plug.Ledger
	flatLedger.Users = false
	plug.Users[0].TeamShare = 0.125
	flat := usersResult(NoUsersColumn, 0.515, 2, 3)
	flat.Ledger = &flatLedger
	rep := &Report{Scenario: s, Modes: []string{ModeVLLM},
		Results:    map[string][]*Result{ModeVLLM: {usersResult("fcfs", 0.4, 4, 5), plug}},
		Ablations:  map[string][]*Result{ModeVLLM: {fakeResult("plugin-noflow", 100, 0, 1, 1), flat}},
		AloneUsers: usersResult("fcfs", 1, 0.030, 0.040)}
	var b strings.Builder
	rep.writeUsers(&b, ModeVLLM, rep.Results[ModeVLLM])
	out := b.String()
	for _, want := range []string{
		"| team | user | fcfs | plugin | plugin-nousers | alone (fcfs) | p99 ratio to alone |",
		"| a | ann | 0.01 / 4.00 | 0.01 / 0.03 | 0.01 / 2.00 | 0.01 / 0.03 | fcfs 133.33×, plugin 1.00×, plugin-nousers 66.67× |",
		"| a | script | — | — | — | | |",
		"| a | ann | 0.000 | 0.125 | 0.000 |",
		"| a | (team, of all service) | 0.400 | 0.500 | 0.515 |",
		"| measure | plugin | plugin-nousers |",
		"| requests left counted at the end, by the teams | 1 | 1 |",
		"| requests left counted at the end, by the users | 0 | — (no users) |",
		"| tokens charged − reported (prompt, completion) | 2, 0 | 2, 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("users tables:\n%s\nwant a line %q", out, want)
		}
	}
	if strings.Contains(out, "plugin-noflow") {
		t.Errorf("users tables:\n%s\nwant no plugin-noflow column (no flat column of its own)", out)
	}
	b.Reset()
	rep.Scenario = &Scenario{Name: "x", Teams: s.Teams}
	rep.writeUsers(&b, ModeVLLM, rep.Results[ModeVLLM])
	if b.Len() != 0 {
		t.Errorf("a scenario without users: %q, want no table", b.String())
	}
}
