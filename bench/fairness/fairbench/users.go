package fairbench

import (
	"fmt"
	"math"
	"strings"
)

// Users within teams (a workload's "user", scenario S10): the requests of
// such a workload carry the user in the x-user header, which the plugin
// column reads (its user_header) to divide the team's reservation among
// the team's active users; every other gateway ignores it. The report
// then has a table per (team, user), the flat column (FlatColumn) runs
// the same plugin configuration without user_header, and the users
// targets compare them:
//
//	pool C = 16         search 0.5 (8)                    b 0.3    c 0.2
//	plugin          script │ ann │ bob │ cyd               flat     flat
//	                (the 8 divided among the active users)
//	plugin-nousers  one team of 8: ann's request counts against script's flood
//
// With alone_users, the named users' workloads also run alone under
// FCFS (Report.AloneUsers) for the "ratio to alone" column, replaying
// the requests they send in the scenario.

// NoUsersColumn is the name of the plugin column without user_header:
// the flat column of "plugin" (FlatColumn).
const NoUsersColumn = "plugin-nousers"

// FlatColumn returns the name of the flat column of a plugin column: the
// same configuration without user_header ("plugin" → "plugin-nousers",
// "plugin-3x" → "plugin-nousers-3x"), or "" for a column that is not the
// plugin's or is a flat column itself.
func FlatColumn(policy string) string {
	rest, ok := strings.CutPrefix(policy, "plugin")
	if !ok || strings.HasPrefix(policy, NoUsersColumn) {
		return ""
	}
	return NoUsersColumn + rest
}

// userTeam returns the team of user u (the team of the workloads that
// name it; validation makes it one), or "".
func (s *Scenario) userTeam(u string) string {
	for _, w := range s.Workloads {
		if w.User == u {
			return w.Team
		}
	}
	return ""
}

// UsersTargets returns the users targets of the named column of rep in
// mode, as the scenario's targets section names them (none if the column
// or a reference is missing), in this order:
//
//   - users_light_p99_vs_alone: the largest ratio, over alone_users, of a
//     user's interactive p99 TTFT to its p99 in the alone-users run
//     (S10: at most 1.2×), with the worst user;
//   - users_team_share_vs_flat_points: the largest difference, over the
//     teams that have users, between a team's share of all the service
//     and its share in the column's FlatColumn, in points (S10: at most
//     1), with its team;
//   - users_nothing_lost: Ledger.Lost of the column (S10: 0).
func UsersTargets(rep *Report, mode, policy string) []Target {
	s := rep.Scenario
	ts := s.Targets
	col := rep.Column(mode, policy)
	if col == nil {
		return nil
	}
	var out []Target
	add := func(name string, v float64, b *Bound, format, detail string) {
		lim, atMost := b.limit()
		out = append(out, Target{Scenario: s.Name, Mode: mode, Name: name, Value: v, Limit: lim, AtMost: atMost, Format: format, Detail: detail})
	}
	if b := ts.UsersLightP99VsAlone; b.in(mode) && rep.AloneUsers != nil {
		worst, who := -1.0, ""
		for _, u := range s.AloneUsers {
			team := s.userTeam(u)
			a, p := rep.AloneUsers.User(team, u), col.User(team, u)
			if a == nil || p == nil || a.Class[Interactive].TTFTp99 <= 0 || p.Class[Interactive].Requests == 0 {
				continue
			}
			if r := p.Class[Interactive].TTFTp99.Seconds() / a.Class[Interactive].TTFTp99.Seconds(); r > worst {
				worst, who = r, "`"+team+"/"+u+"`"
			}
		}
		if who != "" {
			add("interactive p99 TTFT of a light user / alone, worst user", worst, b, "%.2f×", who)
		}
	}
	if b := ts.UsersTeamShareVsFlat; b.in(mode) {
		if flat := rep.Column(mode, FlatColumn(policy)); flat != nil {
			worst, team := -1.0, ""
			for _, t := range s.UsersTeams() {
				c, f := col.Team(t), flat.Team(t)
				if c == nil || f == nil {
					continue
				}
				if d := 100 * math.Abs(c.ServiceShare-f.ServiceShare); d > worst {
					worst, team = d, t
				}
			}
			if team != "" {
				add("team's service share with users − without (points)", worst, b, "%.2f", "`"+team+"`")
			}
		}
	}
	if b := ts.UsersNothingLost; b.in(mode) && col.Ledger != nil {
		add("lost with users: requests left counted + tokens charged ≠ reported", float64(col.Ledger.Lost()), b, "%.0f", "")
	}
	return out
}

// usersColumns returns the columns of the users tables: the main columns
// rs, then, in their order, the ablation columns of mode that are a flat
// column (NoUsersColumn, "plugin-nousers-3x") or a plugin column whose
// flat column ran ("plugin-3x").
func (rep *Report) usersColumns(mode string, rs []*Result) []*Result {
	cols := append([]*Result(nil), rs...)
	for _, r := range rep.Ablations[mode] {
		if r == nil {
			continue
		}
		if f := FlatColumn(r.Policy); strings.HasPrefix(r.Policy, NoUsersColumn) || (f != "" && rep.Column(mode, f) != nil) {
			cols = append(cols, r)
		}
	}
	return cols
}

// writeUsers writes, for a scenario with users within teams, the users
// tables of one mode: every (team, user)'s interactive TTFT p50 / p99
// (with the alone-users run and the ratio to it), its share of its
// team's service, each team's share of all service, and the plugin's
// ledger.
func (rep *Report) writeUsers(b *strings.Builder, mode string, rs []*Result) {
	s := rep.Scenario
	users := s.Users()
	if len(users) == 0 || len(rs) == 0 {
		return
	}
	cols := rep.usersColumns(mode, rs)
	b.WriteString("### Users within teams\n\n")
	fmt.Fprintf(b, "The requests of a workload with a `user` carry it in `x-user`. The `plugin` column reads it (`user_header`): a team's reservation is divided among its active users. `%s` is the same plugin configuration without `user_header` (the team is flat); the other gateways ignore the header.\n\n", NoUsersColumn)
	b.WriteString("#### Interactive TTFT p50 / p99 per user (s)\n\n")
	var extra []string
	if rep.AloneUsers != nil {
		extra = []string{"alone (fcfs)", "p99 ratio to alone"}
	}
	header(b, []string{"team", "user"}, cols, extra...)
	for _, tu := range users {
		fmt.Fprintf(b, "| %s | %s |", tu.Team, tu.User)
		for _, r := range cols {
			u := r.User(tu.Team, tu.User)
			if u == nil || u.Class[Interactive].Requests == 0 {
				b.WriteString(" — |")
				continue
			}
			c := u.Class[Interactive]
			cell := secs(c.TTFTp50) + " / " + secs(c.TTFTp99)
			if c.Unfinished > 0 {
				cell += fmt.Sprintf(" (%d unf.)", c.Unfinished)
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		if rep.AloneUsers != nil {
			a := rep.AloneUsers.User(tu.Team, tu.User)
			if a == nil || a.Class[Interactive].Requests == 0 {
				b.WriteString(" | |")
			} else {
				ac := a.Class[Interactive]
				fmt.Fprintf(b, " %s / %s |", secs(ac.TTFTp50), secs(ac.TTFTp99))
				var ratios []string
				for _, r := range cols {
					if u := r.User(tu.Team, tu.User); u != nil && u.Class[Interactive].Requests > 0 {
						ratios = append(ratios, fmt.Sprintf("%s %.2f×", r.Policy, u.Class[Interactive].TTFTp99.Seconds()/ac.TTFTp99.Seconds()))
					}
				}
				fmt.Fprintf(b, " %s |", strings.Join(ratios, ", "))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n#### Service share within the team (measured window)\n\n")
	b.WriteString("Each user's service (in + 2·out) over its team's; the last rows are each team with users' share of all service.\n\n")
	header(b, []string{"team", "user"}, cols)
	for _, tu := range users {
		fmt.Fprintf(b, "| %s | %s |", tu.Team, tu.User)
		for _, r := range cols {
			if u := r.User(tu.Team, tu.User); u != nil {
				fmt.Fprintf(b, " %.3f |", u.TeamShare)
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	for _, t := range s.UsersTeams() {
		fmt.Fprintf(b, "| %s | (team, of all service) |", t)
		for _, r := range cols {
			if tr := r.Team(t); tr != nil {
				fmt.Fprintf(b, " %.3f |", tr.ServiceShare)
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	var ledgers []*Result
	for _, r := range cols {
		if r.Ledger != nil {
			ledgers = append(ledgers, r)
		}
	}
	if len(ledgers) == 0 {
		return
	}
	b.WriteString("#### What the plugin counted at the end\n\n")
	header(b, []string{"measure"}, ledgers)
	fmt.Fprintf(b, "| requests left counted at the end, by the teams |")
	for _, r := range ledgers {
		fmt.Fprintf(b, " %d |", r.Ledger.InFlight-r.Ledger.Open)
	}
	fmt.Fprintf(b, "\n| requests left counted at the end, by the users |")
	for _, r := range ledgers {
		if r.Ledger.Users {
			fmt.Fprintf(b, " %d |", r.Ledger.UsersInFlight-r.Ledger.Open)
		} else {
			b.WriteString(" — (no users) |")
		}
	}
	b.WriteString("\n| tokens charged − reported (prompt, completion) |")
	for _, r := range ledgers {
		fmt.Fprintf(b, " %d, %d |", r.Ledger.ChargedPrompt-r.Ledger.ReportedPrompt, r.Ledger.ChargedCompletion-r.Ledger.ReportedCompletion)
	}
	b.WriteString("\n\n")
}
