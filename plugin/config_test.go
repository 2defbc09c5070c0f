package plugin

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

func readExample(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/plugin/example.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseExample(t *testing.T) {
	c, err := parse(readExample(t))
	if err != nil {
		t.Fatalf("parse(example.json) = %v", err)
	}
	if c.teamHeader != "x-team" || c.classHeader != "x-request-class" || c.defaultClass != fairshare.Interactive {
		t.Errorf("headers/class = %q %q %v", c.teamHeader, c.classHeader, c.defaultClass)
	}
	if c.halfLife != 168*time.Hour || c.tick != time.Second || c.requestTimeout != 10*time.Minute || c.holderTimeout != 5*time.Second {
		t.Errorf("durations = %v %v %v %v", c.halfLife, c.tick, c.requestTimeout, c.holderTimeout)
	}
	if c.cost != (costWeights{1, 1, 2}) {
		t.Errorf("cost = %+v", c.cost)
	}
	if len(c.pools) != 1 {
		t.Fatalf("pools = %d, want 1", len(c.pools))
	}
	p := c.pools[0]
	want := []fairshare.TeamConfig{{Name: "search", Share: 0.5, Weight: 1}, {Name: "chat", Share: 0.3, Weight: 2}, {Name: "research", Share: 0.2, Weight: 1}}
	if p.name != "llama-8b" || p.capacity != 64 || len(p.models) != 1 || len(p.teams) != 3 {
		t.Fatalf("pool = %+v", p)
	}
	for i := range want {
		if !reflect.DeepEqual(p.teams[i], want[i]) {
			t.Errorf("team %d = %+v, want %+v", i, p.teams[i], want[i])
		}
	}
	cc := c.coreConfig(&c.pools[0])
	if cc.Capacity != 64 || !cc.EntryPenalty || cc.HolderTimeout != 5*time.Second {
		t.Errorf("coreConfig = %+v", cc)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := parse([]byte(`{"pools":[{"name":"p","capacity":4,"models":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	d := defaultConfig()
	if c.teamHeader != d.teamHeader || c.maxBodyBytes != DefaultMaxBodyBytes || c.casRetries != DefaultCASRetries ||
		c.holderTimeout != DefaultHolderTimeoutTicks*DefaultTick || c.failClosed || !c.responseHeaders ||
		c.statusPath != DefaultStatusPath || len(c.paths) != len(DefaultPaths) || c.statusPublic || c.rejectUnscheduled || c.defaultModel != "" || c.lowestUnknownModel || c.rejectUnknown || !c.entryPenalty ||
		c.shadow || c.shadowStrip {
		t.Errorf("defaults = %+v", c)
	}
	// holder_timeout follows tick when not set.
	c, err = parse([]byte(`{"tick":"200ms","pools":[{"name":"p","capacity":4,"models":["*"]}]}`))
	if err != nil || c.holderTimeout != time.Second {
		t.Errorf("holder timeout with tick 200ms = %v, %v; want 1s", c.holderTimeout, err)
	}
}

func TestParseProblems(t *testing.T) {
	pool := `{"name":"p","capacity":4,"models":["m"]}`
	tests := []struct {
		name string
		in   string
		want []string // substrings, each expected in one problem
	}{
		{"not json", `{`, []string{"$: not valid JSON"}},
		{"empty", ` `, []string{"$: empty"}},
		{"not object", `[1]`, []string{"$: must be a JSON object"}},
		{"no pools", `{}`, []string{"pools: required"}},
		{"unknown field", `{"colour":1,"pools":[` + pool + `]}`, []string{"colour: unknown field"}},
		{"bad types", `{"team_header":1,"entry_penalty":"yes","tick":5,"pools":[` + pool + `]}`,
			[]string{"team_header: must be a string", "entry_penalty: must be true or false", "tick: must be a string"}},
		{"bad duration", `{"half_life":"a week","request_timeout":"-1s","pools":[` + pool + `]}`,
			[]string{"half_life: must be a duration", "request_timeout: must be at least"}},
		{"bad enums", `{"default_class":"urgent","unknown_team":"allow","failure_mode":"maybe","pools":[` + pool + `]}`,
			[]string{"default_class: must be", "unknown_team: must be", "failure_mode: must be"}},
		{"share out of range", `{"pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":1.5},"b":{"share":0}}}]}`,
			[]string{"pools[0].teams.a.share: must be in (0, 1], got 1.5", "pools[0].teams.b.share: must be in (0, 1], got 0"}},
		{"shares above 1", `{"pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.6},"b":{"share":0.6}}}]}`,
			[]string{"pools[0].teams: shares sum to 1.2"}},
		{"capacity", `{"pools":[{"name":"p","capacity":0,"models":["m"]}]}`, []string{"pools[0].capacity: must be an integer in [1,"}},
		{"throughput", `{"pools":[{"name":"p","capacity":4,"throughput":0,"throughput_burst":"5s","models":["m"]},{"name":"q","capacity":4,"throughput":-3,"models":["n"]},{"name":"r","capacity":4,"throughput":"fast","throughput_burst":"0.5s","models":["o"]},{"name":"s","capacity":4,"throughput_burst":"10s","models":["k"]},{"name":"t","capacity":4,"throughput":100,"throughput":200,"models":["l"]}]}`,
			[]string{"pools[0].throughput_burst: needs throughput > 0", "pools[1].throughput: must be an integer in [0,", "pools[2].throughput: must be an integer, got a string",
				"pools[2].throughput_burst: must be at least 1s", "pools[3].throughput_burst: needs throughput", "pools[4].throughput: duplicate field"}},
		{"flow control", `{"max_queue_time":"soon","batch_aging":"-1s","queue_limit":-1,"team_queue_limit":1.5,"dispatch_tick":"0s","pools":[{"name":"p","capacity":1,"kv_tokens":-5,"models":["m"],"teams":{"a":{"share":0.5,"lending_limit":1.5,"borrowing_limit":-0.1}}}]}`,
			[]string{"max_queue_time: must be a duration", "batch_aging: must not be negative", "queue_limit: must be an integer in [0,", "team_queue_limit: must be an integer in [0,",
				"dispatch_tick: must be at least", "pools[0].kv_tokens: must be an integer in [0,", "pools[0].teams.a.lending_limit: must be in [0, 1]", "pools[0].teams.a.borrowing_limit: must be in [0, 1]"}},
		{"policies", `{"unscheduled":"drop","unknown_model":"allow","status_path":"/a//b","paths":["/v1/chat/%63ompletions"],"pools":[` + pool + `]}`,
			[]string{"unscheduled: must be", "unknown_model: must be", "status_path: must be a clean path", "paths[0]: must be a clean path"}},
		{"missing pool fields", `{"pools":[{}]}`, []string{"pools[0].name: required", "pools[0].capacity: required", "pools[0].models: required"}},
		{"duplicate pool", `{"pools":[` + pool + `,{"name":"p","capacity":1,"models":["n"]}]}`, []string{"pools[1].name: duplicate pool name"}},
		{"duplicate model", `{"pools":[` + pool + `,{"name":"q","capacity":1,"models":["m"]}]}`, []string{`pools[1].models[0]: duplicate model "m" (already in pools[0].models[0])`}},
		{"bad names", `{"pools":[{"name":"a.b","capacity":1,"models":["m"],"teams":{"x y":{"share":0.1},"_unknown":{"share":0.1}}}]}`,
			[]string{"pools[0].name: must be 1 to 64 characters of [A-Za-z0-9_-]", "pools[0].teams.x y: must be 1 to 64 characters of [A-Za-z0-9_-]", "pools[0].teams._unknown: \"_unknown\" is reserved"}},
		{"team fields", `{"pools":[{"name":"p","capacity":1,"models":["m"],"teams":{"a":{"weight":-1,"x":1}}}]}`,
			[]string{"pools[0].teams.a.weight: must be in (0, 1e6]", "pools[0].teams.a.x: unknown field", "pools[0].teams.a.share: required"}},
		{"duplicate field", `{"tick":"1s","tick":"2s","pools":[` + pool + `]}`, []string{"tick: duplicate field"}},
		{"holder timeout", `{"tick":"1s","holder_timeout":"1s","pools":[` + pool + `]}`, []string{"holder_timeout: must be at least two ticks"}},
		{"paths", `{"paths":["v1/x","/a?b","/a","/a"],"pools":[` + pool + `]}`, []string{"paths[0]: must be a path", "paths[1]: must be a path", "paths[3]: duplicate path"}},
		{"status path", `{"status_path":"/v1/completions","pools":[` + pool + `]}`, []string{"status_path: must differ"}},
		{"cost", `{"cost":{"prompt_token":-1,"other":1},"pools":[` + pool + `]}`, []string{"cost.prompt_token: must be in [0, 1e6]", "cost.other: unknown field"}},
		{"header", `{"class_header":"x bad","pools":[` + pool + `]}`, []string{"class_header: must be a header name"}},
		{"string lists", `{"paths":"/v1/x","pools":[{"name":"p","capacity":1,"models":"m"},{"name":"q","capacity":1,"models":["n",7,""]}]}`,
			[]string{"paths: must be an array of strings, got a string", "pools[0].models: must be an array of model names, got a string",
				"pools[1].models[1]: must be a string, got a number", "pools[1].models[2]: must not be empty"}},
		{"empty models", `{"pools":[{"name":"p","capacity":1,"models":[]}]}`, []string{"pools[0].models: must list at least one model"}},
		{"engine priority", `{"max_queue_time":"10s","pools":[{"name":"p","capacity":1,"models":["m"],"engine_priority":"maybe"},{"name":"q","capacity":1,"models":["n"],"engine_priority":0}]}`,
			[]string{`pools[0].engine_priority: must be "auto", "on" or "off", got "maybe"`, "pools[1].engine_priority: must be a string"}},
		{"engine priority off without holding", `{"pools":[` + pool + `,{"name":"q","capacity":1,"models":["n"],"engine_priority":"off"}]}`,
			[]string{`pools[1].engine_priority: "off" needs flow control`}},
		{"mode", `{"mode":"dry-run","shadow_strip_priority":"yes","pools":[` + pool + `]}`,
			[]string{`mode: must be "enforce" or "shadow", got "dry-run"`, "shadow_strip_priority: must be true or false"}},
		{"user header", `{"user_header":"x user","pools":[` + pool + `]}`, []string{`user_header: must be a header name, got "x user"`}},
		{"user header is the team header", `{"user_header":"X-Team","pools":[` + pool + `]}`, []string{`user_header: must differ from team_header ("x-team")`}},
		{"user header is the class header", `{"class_header":"x-class","user_header":"x-class","pools":[` + pool + `]}`, []string{`user_header: must differ from class_header ("x-class")`}},
		{"user header the plugin removes", `{"user_header":"x-fairshare-user","pools":[` + pool + `]}`, []string{`user_header: must not start with "x-fairshare-"`}},
		{"user fields without user_header", `{"user_from_body":true,"pools":[{"name":"p","capacity":4,"models":["m"],"max_users":8,"user_active":"5s","user_idle":"1m","teams":{"a":{"share":0.5,"users":{"u":2}}}}]}`,
			[]string{"user_from_body: needs user_header", "pools[0].max_users: needs user_header", "pools[0].user_active: needs user_header",
				"pools[0].user_idle: needs user_header", "pools[0].teams.a.users: needs user_header"}},
		{"user shares", `{"user_header":"x-user","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5,"users":{"zero":0,"neg":-1,"word":"x","big":2e6,"ok":1.5}},"b":{"share":0.1,"users":[1]}}}]}`,
			[]string{"pools[0].teams.a.users.zero: must be a share in (0, 1e6], got 0", "pools[0].teams.a.users.neg: must be a share in (0, 1e6], got -1",
				"pools[0].teams.a.users.word: must be a number, got a string", "pools[0].teams.a.users.big: must be a share in (0, 1e6], got 2e6",
				"pools[0].teams.b.users: must be an object of user name to share, got an array"}},
		{"user names", `{"user_header":"x-user","pools":[{"name":"p","capacity":4,"models":["m"],"teams":{"a":{"share":0.5,"users":{"":1,"` + strings.Repeat("u", 65) + `":1,"a b":1,"caf\u00e9":1,"_none":1,"_other":1,"dup":1,"dup":2}}}}]}`,
			[]string{"pools[0].teams.a.users.: a user name must not be empty",
				"pools[0].teams.a.users." + strings.Repeat("u", 65) + ": a user name must be 1 to 64 bytes of printable ASCII without spaces (0x21-0x7e), got 65 bytes, more than 64",
				"pools[0].teams.a.users.a b: a user name must be 1 to 64 bytes of printable ASCII without spaces (0x21-0x7e), got byte 0x20 at offset 1",
				"pools[0].teams.a.users.café: a user name must be 1 to 64 bytes of printable ASCII without spaces (0x21-0x7e), got byte 0xc3 at offset 3",
				`pools[0].teams.a.users._none: "_none" is reserved`, `pools[0].teams.a.users._other: "_other" is reserved`, "pools[0].teams.a.users.dup: duplicate field"}},
		{"user bounds", `{"user_header":"x-user","status_users":-1,"pools":[{"name":"p","capacity":4,"models":["m"],"max_users":0},{"name":"q","capacity":4,"models":["n"],"max_users":65537,"user_active":"0s"},{"name":"r","capacity":4,"models":["o"],"max_users":1.5,"user_active":"1m","user_idle":"30s"},{"name":"s","capacity":4,"models":["k"],"user_idle":"10s"}]}`,
			[]string{"status_users: must be an integer in [0, 65536], got -1", "pools[0].max_users: must be an integer in [1, 65536], got 0", "pools[1].max_users: must be an integer in [1, 65536], got 65537",
				"pools[1].user_active: must be at least 1s", "pools[2].max_users: must be an integer in [1, 65536], got 1.5",
				"pools[2].user_idle: must be at least user_active (1m0s), got 30s", "pools[3].user_idle: must be at least user_active (30s), got 10s"}},
		{"engine priority off, queue limit 0", `{"max_queue_time":"10s","queue_limit":0,"pools":[{"name":"q","capacity":1,"models":["n"],"engine_priority":"off"}]}`,
			[]string{`pools[0].engine_priority: "off" needs flow control`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("parse(%s) = nil error, want %q", tt.in, tt.want)
			}
			ce, ok := err.(*configError)
			if !ok {
				t.Fatalf("parse(%s) error %T, want *configError", tt.in, err)
			}
			for _, w := range tt.want {
				found := false
				for _, p := range ce.problems {
					if strings.Contains(p, w) {
						found = true
					}
				}
				if !found {
					t.Errorf("parse(%s) problems = %q, want one containing %q", tt.in, ce.problems, w)
				}
			}
			if len(ce.problems) < len(tt.want) {
				t.Errorf("parse(%s) = %d problems, want at least %d", tt.in, len(ce.problems), len(tt.want))
			}
		})
	}
}

// TestParseUsers: the user level's fields reach the core's configuration
// (Users, the bounds, the teams' user shares), with their defaults; without
// user_header the core's configuration is the one of a configuration that
// never heard of users (same value, same fingerprint).
func TestParseUsers(t *testing.T) {
	c, err := parse([]byte(`{"user_header":"X-User","user_from_body":true,"status_users":3,"pools":[
	  {"name":"p","capacity":8,"models":["m"],"max_users":16,"user_active":"5s","user_idle":"1m","teams":{"a":{"share":0.5,"users":{"alice":2,"bob":0.5}},"b":{"share":0.5}}},
	  {"name":"q","capacity":8,"models":["n"],"teams":{"a":{"share":1}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.userHeader != "x-user" || !c.userFromBody || c.statusUsers != 3 {
		t.Errorf("user_header %q, user_from_body %v, status_users %d; want x-user, true, 3", c.userHeader, c.userFromBody, c.statusUsers)
	}
	p := c.coreConfig(&c.pools[0])
	if !p.Users || p.MaxUsers != 16 || p.UserActive != 5*time.Second || p.UserIdle != time.Minute {
		t.Errorf("pool p core users %v max %d active %v idle %v; want true 16 5s 1m", p.Users, p.MaxUsers, p.UserActive, p.UserIdle)
	}
	if want := []fairshare.UserShare{{Name: "alice", Share: 2}, {Name: "bob", Share: 0.5}}; !reflect.DeepEqual(p.Teams[0].Users, want) || p.Teams[1].Users != nil {
		t.Errorf("team users %+v, %+v; want %+v and none", p.Teams[0].Users, p.Teams[1].Users, want)
	}
	q := c.coreConfig(&c.pools[1])
	if !q.Users || q.MaxUsers != DefaultMaxUsers || q.UserActive != DefaultUserActive || q.UserIdle != DefaultUserIdle {
		t.Errorf("pool q core users %v max %d active %v idle %v; want the defaults", q.Users, q.MaxUsers, q.UserActive, q.UserIdle)
	}
	// Off: user_header absent or "" leaves the core's configuration, and
	// so the record's fingerprint, as they were.
	const pools = `"pools":[{"name":"p","capacity":8,"models":["m"],"teams":{"a":{"share":0.5}}}]}`
	plain, err := parse([]byte(`{` + pools))
	if err != nil {
		t.Fatal(err)
	}
	off, err := parse([]byte(`{"user_header":"","status_users":4,` + pools))
	if err != nil {
		t.Fatal(err)
	}
	a, b := plain.coreConfig(&plain.pools[0]), off.coreConfig(&off.pools[0])
	if !reflect.DeepEqual(a, b) || a.Users || a.MaxUsers != 0 || a.UserActive != 0 || a.UserIdle != 0 || a.Teams[0].Users != nil {
		t.Errorf("users off: core config %+v, want %+v without any user field", b, a)
	}
	if plain.fingerprint() != off.fingerprint() {
		t.Errorf("users off: fingerprint %x, want %x", off.fingerprint(), plain.fingerprint())
	}
	on, err := parse([]byte(`{"user_header":"x-user",` + pools))
	if err != nil || on.fingerprint() == plain.fingerprint() {
		t.Errorf("users on: fingerprint %x equals the one without users (%v)", on.fingerprint(), err)
	}
}

func TestParseHeaderLowercase(t *testing.T) {
	c, err := parse([]byte(`{"team_header":"X-Tenant","pools":[{"name":"p","capacity":1,"models":["*"]}]}`))
	if err != nil || c.teamHeader != "x-tenant" {
		t.Errorf("team_header X-Tenant = %q, %v; want x-tenant", c.teamHeader, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(readExample(f))
	f.Add([]byte(`{"pools":[{"name":"p","capacity":4,"models":["*"],"teams":{"a":{"share":0.5}}}]}`))
	f.Add([]byte(`{"pools":[{"name":"p","capacity":-4,"models":[1],"teams":{"a":{"share":"x"}}}],"tick":"0s"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"user_header":"x-user","pools":[{"name":"p","capacity":4,"models":["*"],"max_users":2,"teams":{"a":{"share":0.5,"users":{"u":2}}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data)
		if err != nil {
			if _, ok := err.(*configError); !ok || len(err.(*configError).problems) == 0 {
				t.Fatalf("parse error %v has no problems", err)
			}
			return
		}
		// A configuration that passes validation satisfies its invariants.
		if len(c.pools) == 0 || c.tick < time.Millisecond || c.casRetries < 1 || c.maxBodyBytes < 1 {
			t.Fatalf("accepted invalid configuration %+v", c)
		}
		for _, p := range c.pools {
			if !validName(p.name) || p.capacity < 1 || len(p.models) == 0 {
				t.Fatalf("accepted invalid pool %+v", p)
			}
			sum := 0.0
			for _, tm := range p.teams {
				if !validName(tm.Name) || !(tm.Share > 0 && tm.Share <= 1) || !(tm.Weight > 0) {
					t.Fatalf("accepted invalid team %+v", tm)
				}
				sum += tm.Share
			}
			if sum > 1+1e-9 {
				t.Fatalf("accepted shares summing to %v", sum)
			}
			if (c.userHeader == "") != (c.coreConfig(&p).MaxUsers == 0) || p.maxUsers < 1 || p.userIdle < p.userActive {
				t.Fatalf("accepted invalid user bounds %+v (user_header %q)", p, c.userHeader)
			}
			for _, tm := range p.teams {
				for _, u := range tm.Users {
					if c.userHeader == "" || u.Name == "" || badUser(u.Name) != "" || !(u.Share > 0) {
						t.Fatalf("accepted invalid user %+v (user_header %q)", u, c.userHeader)
					}
				}
			}
		}
	})
}

func TestParseFlowControl(t *testing.T) {
	c, err := parse([]byte(`{"max_queue_time":"30s","queue_limit":64,"team_queue_limit":8,"dispatch_tick":"10ms",
	  "pools":[{"name":"p","capacity":4,"kv_tokens":65536,"models":["m"],"teams":{"a":{"share":0.5,"lending_limit":0.25},"b":{"share":0.5,"borrowing_limit":0}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	core := c.coreConfig(&c.pools[0])
	if !c.holding() || c.dispatchTick != 10*time.Millisecond || core.QueueLimit != 64 || core.TeamQueueLimit != 8 ||
		core.MaxQueueTime != 30*time.Second || core.KVTokens != 65536 || core.BatchAging != DefaultBatchAging {
		t.Errorf("core config %+v (holding %v, dispatch tick %v)", core, c.holding(), c.dispatchTick)
	}
	a, b := core.Teams[0], core.Teams[1]
	if a.LendingLimit == nil || *a.LendingLimit != 0.25 || a.BorrowingLimit != nil || b.BorrowingLimit == nil || *b.BorrowingLimit != 0 || b.LendingLimit != nil {
		t.Errorf("team limits: a %+v, b %+v", a, b)
	}
	// batch_aging reaches the core; "0s" is strict class order.
	for _, tc := range []struct {
		field string
		want  time.Duration
	}{{`"batch_aging":"750ms",`, 750 * time.Millisecond}, {`"batch_aging":"0s",`, 0}} {
		c, err = parse([]byte(`{"max_queue_time":"30s",` + tc.field + `"pools":[{"name":"p","capacity":4,"models":["m"]}]}`))
		if got := c.coreConfig(&c.pools[0]).BatchAging; err != nil || got != tc.want {
			t.Errorf("%s: core BatchAging = %v, want %v (%v)", tc.field, got, tc.want, err)
		}
	}
	// Holding off: no queue in the core, whatever queue_limit says, and no
	// aging (nothing waits).
	c, err = parse([]byte(`{"max_queue_time":"0s","queue_limit":64,"batch_aging":"3s","pools":[{"name":"p","capacity":4,"models":["m"]}]}`))
	if err != nil || c.holding() || c.coreConfig(&c.pools[0]).QueueLimit != 0 || c.coreConfig(&c.pools[0]).BatchAging != 0 {
		t.Errorf("max_queue_time 0s: holding %v, queue limit %d, batch aging %v (%v)", c.holding(), c.coreConfig(&c.pools[0]).QueueLimit, c.coreConfig(&c.pools[0]).BatchAging, err)
	}
}

// TestParseEnginePriority: engine_priority defaults to auto, takes on and
// off (off with holding), per pool.
func TestParseEnginePriority(t *testing.T) {
	c, err := parse([]byte(`{"max_queue_time":"10s","pools":[{"name":"a","capacity":1,"models":["m"]},{"name":"b","capacity":1,"models":["n"],"engine_priority":"on"},{"name":"c","capacity":1,"models":["o"],"engine_priority":"off"},{"name":"d","capacity":1,"models":["p"],"engine_priority":"auto"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []engineMode{engineAuto, engineOn, engineOff, engineAuto}
	for i, p := range c.pools {
		if p.engine != want[i] {
			t.Errorf("pool %s: engine %v, want %v", p.name, p.engine, want[i])
		}
	}
	if _, err := parse([]byte(`{"pools":[{"name":"a","capacity":1,"models":["m"],"engine_priority":"on"}]}`)); err != nil {
		t.Errorf("on without holding: %v, want accepted (the engine enforces)", err)
	}
}

// TestParseHoldHeaders: hold_headers is "off" (default) or "on", with no
// "auto" (the plugin cannot see Envoy's allow_on_headers_stop_iteration);
// "on" needs flow control; hold_headers_probe defaults to a second.
func TestParseHoldHeaders(t *testing.T) {
	const pools = `"pools":[{"name":"p","capacity":2,"models":["m"],"teams":{"a":{"share":0.5}}}]}`
	c, err := parse([]byte(`{"max_queue_time":"10s","hold_headers":"on",` + pools))
	if err != nil || !c.holdHeaders || c.holdHeadersProbe != DefaultHoldHeadersProbe {
		t.Fatalf("on: %+v %v", c.holdHeaders, err)
	}
	if c, err := parse([]byte(`{` + pools)); err != nil || c.holdHeaders {
		t.Fatalf("default: %v %v", c.holdHeaders, err)
	}
	for in, want := range map[string]string{
		`"hold_headers":"auto",`:                           `hold_headers: must be "off" or "on", got "auto"`,
		`"hold_headers":"on",`:                             `hold_headers: "on" needs flow control`,
		`"hold_headers":"on","max_queue_time":"0s",`:       `hold_headers: "on" needs flow control`,
		`"max_queue_time":"1s","hold_headers_probe":"0s",`: `hold_headers_probe`,
	} {
		_, err := parse([]byte(`{` + in + pools))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	if w := (&config{maxQueueTime: 5 * time.Minute, queueLimit: 1}).warnings(); len(w) != 1 || !strings.Contains(w[0], "stream_idle_timeout") {
		t.Errorf("warnings for 5m = %q", w)
	}
	if w := (&config{maxQueueTime: 4 * time.Minute, queueLimit: 1}).warnings(); len(w) != 0 {
		t.Errorf("warnings for 4m = %q", w)
	}
}
