package fairbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Targets are a scenario's acceptance targets (the scenario file's
// "targets" section): which measures are checked, in which engine modes,
// against which limits. A nil field is a target the scenario does not
// have. FlowTargets and ReplicaTargets read them from here, never from
// the scenario's name, so a renamed scenario keeps its targets.
type Targets struct {
	// AloneP99VsAlone bounds the `alone` team's interactive p99 TTFT as a
	// multiple of its p99 when it runs alone under FCFS (at_most; needs
	// "alone").
	AloneP99VsAlone *Bound `json:"alone_p99_vs_alone,omitempty"`
	// WorstP99VsVTC bounds the worst p99 TTFT of any team and class as a
	// multiple of VTC's worst in the same mode (at_most).
	WorstP99VsVTC *Bound `json:"worst_p99_vs_vtc,omitempty"`
	// MaxShareError bounds the largest difference, in points, between a
	// saturated team's share of the service and its entitled share
	// (at_most).
	MaxShareError *Bound `json:"max_share_error_points,omitempty"`
	// Jain bounds Jain's index of the saturated teams (at_least).
	Jain *Bound `json:"jain,omitempty"`
	// AloneP99VsFCFS bounds the `alone` team's interactive p99 TTFT as a
	// multiple of its p99 under FCFS in the same run (at_most; needs
	// "alone").
	AloneP99VsFCFS *Bound `json:"alone_p99_vs_fcfs,omitempty"`
	// ServiceVsFCFS bounds the pool's service rate as a fraction of
	// FCFS's (at_least, or report).
	ServiceVsFCFS *Bound `json:"service_vs_fcfs,omitempty"`
	// WithinShareP50 bounds, in seconds, the within-share interactive p50
	// TTFT of the worst team (at_most).
	WithinShareP50 *Bound `json:"within_share_interactive_p50_s,omitempty"`
	// WithinShareP99VsFCFS bounds the within-share interactive p99 TTFT
	// of every team as a fraction of the team's interactive p99 under
	// FCFS in the same mode (at_most; the worst team is reported).
	WithinShareP99VsFCFS *Bound `json:"within_share_interactive_p99_vs_fcfs,omitempty"`
	// WorstP99VsEPP bounds the worst p99 TTFT of any team and class as a
	// multiple of the worst of each EPP column (epp-rr, epp-paf) in the
	// same mode (at_most; the larger ratio is reported).
	WorstP99VsEPP *Bound `json:"worst_p99_vs_epp,omitempty"`
	// ReservedP99VsBestPeer bounds the interactive p99 TTFT of every team
	// inside its reservation (a team the scenario does not list as
	// saturated) as a multiple of the best of the vtc, epp-rr and epp-paf
	// columns for that team in the same mode (at_most; the worst team is
	// reported).
	ReservedP99VsBestPeer *Bound `json:"reserved_p99_vs_best_peer,omitempty"`
	// ReservedP99VsFCFS bounds the interactive p99 TTFT of every team
	// inside its reservation as a fraction of its p99 under FCFS in the
	// same mode (at_most; the worst team is reported).
	ReservedP99VsFCFS *Bound `json:"reserved_p99_vs_fcfs,omitempty"`
	// ReplicaShareDifference bounds, in points, the largest difference
	// between a team's share of the service on several proxies and on
	// one (at_most; needs "gateway_replicas").
	ReplicaShareDifference *Bound `json:"replica_share_difference_points,omitempty"`
	// ReplicaAloneP99 bounds the `alone` team's interactive p99 TTFT on
	// several proxies as a multiple of its p99 on one (at_most; needs
	// "alone" and "gateway_replicas").
	ReplicaAloneP99 *Bound `json:"replica_alone_p99_vs_one,omitempty"`
	// EngineOffShareError bounds, in points, the largest difference
	// between a saturated team's share of the service and its entitled
	// share on the EngineOffColumn: the plugin with engine_priority "off"
	// in front of engines under FCFS, holding at the gateway alone
	// (at_most).
	EngineOffShareError *Bound `json:"engine_off_max_share_error_points,omitempty"`
	// CapacityFollow bounds, in seconds, how long the plugin column takes
	// to decide against the engines' new C after each change (at_most;
	// needs "capacity_from_engines"; elastic.go).
	CapacityFollow *Bound `json:"capacity_follow_s,omitempty"`
	// PhaseShareError bounds, in points, the largest share error of any
	// phase between capacity changes (at_most).
	PhaseShareError *Bound `json:"phase_share_error_points,omitempty"`
	// NothingLost bounds the requests the plugin counts in flight at the
	// end plus the tokens it charged and the responses did not report (or
	// the reverse) (at_most; needs "capacity_from_engines").
	NothingLost *Bound `json:"nothing_lost,omitempty"`
	// UsersLightP99VsAlone bounds, over the scenario's alone_users, the
	// largest ratio of a user's interactive p99 TTFT to the same user's
	// p99 in the alone-users run under FCFS (at_most; needs
	// "alone_users"; the worst user is reported).
	UsersLightP99VsAlone *Bound `json:"users_light_p99_vs_alone,omitempty"`
	// UsersTeamShareVsFlat bounds, in points, the largest difference
	// between a team's share of all the service (measured window) and its
	// share in the flat column of the same gateway (FlatColumn: the same
	// plugin configuration without user_header), over the teams that have
	// users (at_most; needs a workload with "user").
	UsersTeamShareVsFlat *Bound `json:"users_team_share_vs_flat_points,omitempty"`
	// UsersNothingLost bounds what the plugin lost once the run is over:
	// the requests it still counts in flight or waiting (beyond those
	// still open) plus the tokens it charged that the responses did not
	// report, or the reverse (Ledger.Lost; at_most; needs a workload with
	// "user").
	UsersNothingLost *Bound `json:"users_nothing_lost,omitempty"`
}

// Bound is the limit of one target. Exactly one of AtMost, AtLeast and
// Report is set, the one the target's kind takes.
type Bound struct {
	// AtMost is the largest value that holds.
	AtMost *float64 `json:"at_most,omitempty"`
	// AtLeast is the smallest value that holds.
	AtLeast *float64 `json:"at_least,omitempty"`
	// Report, if true, reports the value with no limit.
	Report bool `json:"report,omitempty"`
	// Modes are the engine modes ("vllm", "pr45561") the target is
	// checked in; empty: every mode.
	Modes []string `json:"modes,omitempty"`
}

// UnmarshalJSON decodes the targets section strictly: an unknown target
// or bound field is an error that names its path ("targets.jain.at_mots").
func (ts *Targets) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	known := map[string]bool{}
	t := reflect.TypeFor[Targets]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		path := "targets." + k
		if !known[k] {
			return fmt.Errorf("%s: unknown target", path)
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		var b Bound
		if err := dec.Decode(&b); err != nil {
			if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				return fmt.Errorf("%s.%s: unknown field", path, strings.Trim(f, `"`))
			}
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	type plain Targets
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	*ts = Targets(p)
	return nil
}

// in reports whether the bound applies in mode.
func (b *Bound) in(mode string) bool {
	return b != nil && (len(b.Modes) == 0 || slices.Contains(b.Modes, mode))
}

// limit returns the bound's limit and direction (0, false when it only
// reports).
func (b *Bound) limit() (float64, bool) {
	switch {
	case b.AtMost != nil:
		return *b.AtMost, true
	case b.AtLeast != nil:
		return *b.AtLeast, false
	}
	return 0, false
}

// validate checks the targets of s and calls bad with each problem's
// field path.
func (ts *Targets) validate(s *Scenario, bad func(path, format string, args ...any)) {
	const (
		atMost  = "at_most"
		atLeast = "at_least"
		report  = "report"
	)
	for _, k := range []struct {
		name  string
		b     *Bound
		takes []string
		needs string
	}{
		{"alone_p99_vs_alone", ts.AloneP99VsAlone, []string{atMost}, "alone"},
		{"worst_p99_vs_vtc", ts.WorstP99VsVTC, []string{atMost}, ""},
		{"max_share_error_points", ts.MaxShareError, []string{atMost}, ""},
		{"jain", ts.Jain, []string{atLeast}, ""},
		{"alone_p99_vs_fcfs", ts.AloneP99VsFCFS, []string{atMost}, "alone"},
		{"service_vs_fcfs", ts.ServiceVsFCFS, []string{atLeast, report}, ""},
		{"within_share_interactive_p50_s", ts.WithinShareP50, []string{atMost}, ""},
		{"within_share_interactive_p99_vs_fcfs", ts.WithinShareP99VsFCFS, []string{atMost}, ""},
		{"worst_p99_vs_epp", ts.WorstP99VsEPP, []string{atMost}, ""},
		{"replica_share_difference_points", ts.ReplicaShareDifference, []string{atMost}, "gateway_replicas"},
		{"replica_alone_p99_vs_one", ts.ReplicaAloneP99, []string{atMost}, "alone"},
		{"engine_off_max_share_error_points", ts.EngineOffShareError, []string{atMost}, ""},
		{"capacity_follow_s", ts.CapacityFollow, []string{atMost}, "capacity_from_engines"},
		{"phase_share_error_points", ts.PhaseShareError, []string{atMost}, ""},
		{"nothing_lost", ts.NothingLost, []string{atMost}, "capacity_from_engines"},
		{"users_light_p99_vs_alone", ts.UsersLightP99VsAlone, []string{atMost}, "alone_users"},
		{"users_team_share_vs_flat_points", ts.UsersTeamShareVsFlat, []string{atMost}, "users"},
		{"users_nothing_lost", ts.UsersNothingLost, []string{atMost}, "users"},
	} {
		if k.b == nil {
			continue
		}
		p := "targets." + k.name
		var set []string
		if k.b.AtMost != nil {
			set = append(set, atMost)
		}
		if k.b.AtLeast != nil {
			set = append(set, atLeast)
		}
		if k.b.Report {
			set = append(set, report)
		}
		if len(set) != 1 || !slices.Contains(k.takes, set[0]) {
			bad(p, "must set exactly one of %v, got %v", k.takes, set)
		}
		for i, m := range k.b.Modes {
			if !slices.Contains(Modes, m) {
				bad(fmt.Sprintf("%s.modes[%d]", p, i), "must be one of %v, got %q", Modes, m)
			}
		}
		switch {
		case k.needs == "alone" && s.Alone == "":
			bad(p, "needs the scenario's \"alone\" team")
		case k.needs == "gateway_replicas" && len(s.GatewayReplicas) == 0:
			bad(p, "needs the scenario's \"gateway_replicas\"")
		case k.needs == "capacity_from_engines" && !s.CapacityFromEngines:
			bad(p, "needs the scenario's \"capacity_from_engines\"")
		case k.needs == "alone_users" && len(s.AloneUsers) == 0:
			bad(p, "needs the scenario's \"alone_users\"")
		case k.needs == "users" && !s.HasUsers():
			bad(p, "needs a workload with a \"user\"")
		}
		if k.name == "replica_alone_p99_vs_one" && len(s.GatewayReplicas) == 0 {
			bad(p, "needs the scenario's \"gateway_replicas\"")
		}
	}
}
