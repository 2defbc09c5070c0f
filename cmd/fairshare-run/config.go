package main

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/plugin"
	"github.com/tidwall/gjson"
)

// demoConfig is the plugin configuration used without -config: the example
// configuration (testdata/plugin/example.json) with two changes, listed
// in demoChanges: the pool's capacity is the simulated engine's
// max_num_seqs (16), so that the teams' reservations (search 8, chat 5,
// research 3) cover exactly what the engine runs at once; and the usage
// half-life is 10 minutes instead of a week, so that a 30-second demo moves
// the usage. Flow control is on as in the example (max_queue_time 30s), so
// a flooding team's borrowers wait at the gateway (the view's WAIT column)
// rather than in vLLM's queue.
//
//go:embed demo.json
var demoConfig []byte

// demoChanges are the fields of demo.json that differ from example.json, as
// the banner names them (a test checks the list against both files).
var demoChanges = []string{"half_life 10m", "pools[0].capacity 16"}

// demoConfigName names the embedded configuration in the output.
var demoConfigName = "embedded demo config (cmd/fairshare-run/demo.json: testdata/plugin/example.json with " +
	strings.Join(demoChanges, ", ") + ")"

// configView is what the runner reads from a plugin configuration: enough to
// send requests the plugin schedules, to size the local proxy and the
// simulator, and to label the view. The plugin itself parses and validates
// the configuration; this only reads it.
type configView struct {
	TeamHeader  string
	ClassHeader string
	// UserHeader is the plugin's user_header ("": the user level off):
	// the demo's clients then name their user in it.
	UserHeader   string
	UnknownTeam  string // "borrow" or "reject"
	HalfLife     string // as written, or the plugin's default
	MaxBodyBytes int    // the largest max_body_bytes (top level or a pool's)
	StatusPath   string // "" when the status endpoint is disabled
	StatusToken  string // bearer token of the status endpoint, if any
	// StatusPublic: the status endpoint answers without a token.
	StatusPublic bool
	Paths        []string
	Pools        []configPool
	// Flow is flow control as configured (max_queue_time, queue_limit).
	Flow flowControl
}

// configPool is one pool of the configuration.
type configPool struct {
	Name     string
	Capacity int
	Models   []string
	Teams    []configTeam // in the configuration's order
	// MetricsCluster is capacity_from.cluster ("" without capacity_from),
	// EngineSeqs its max_num_seqs, LearnedEngines its engines "learned"
	// (elastic.go).
	MetricsCluster string
	EngineSeqs     int
	LearnedEngines bool
	EngineHeader   string   // capacity_from.header ("": the default)
	SpillTo        []string // the pool's fallback pools (spill_to)
}

// configTeam is one team of a pool.
type configTeam struct {
	Name   string
	Share  float64
	Weight float64 // 0 when not set (the plugin's default is 1)
}

// readConfig reads the fields of a plugin configuration the runner needs,
// with the plugin's defaults (x-team, x-request-class, /fairshare/status,
// /v1/chat/completions, 8 MiB bodies, a 168h half-life). It fails on a
// document that is not JSON (naming the line and column, as the plugin
// does), not an object, or without a pool; everything else is left to the
// plugin.
func readConfig(b []byte) (configView, error) {
	c := configView{
		TeamHeader:   "x-team",
		ClassHeader:  "x-request-class",
		UnknownTeam:  "borrow",
		HalfLife:     plugin.DefaultHalfLife.String(),
		MaxBodyBytes: plugin.DefaultMaxBodyBytes,
		StatusPath:   statusPath,
		Paths:        []string{"/v1/chat/completions", "/v1/completions"},
	}
	if msg := plugin.JSONSyntaxError(b); msg != "" {
		return c, fmt.Errorf("config: %s", msg)
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return c, fmt.Errorf("config: not a JSON object")
	}
	if v := root.Get("team_header"); v.Type == gjson.String {
		c.TeamHeader = strings.ToLower(v.Str)
	}
	if v := root.Get("class_header"); v.Type == gjson.String {
		c.ClassHeader = strings.ToLower(v.Str)
	}
	if v := root.Get("user_header"); v.Type == gjson.String {
		c.UserHeader = strings.ToLower(v.Str)
	}
	if v := root.Get("unknown_team"); v.Type == gjson.String {
		c.UnknownTeam = v.Str
	}
	if v := root.Get("half_life"); v.Type == gjson.String {
		c.HalfLife = v.Str
	}
	if v := root.Get("max_body_bytes"); v.Type == gjson.Number && v.Int() > 0 {
		c.MaxBodyBytes = int(v.Int())
	}
	if v := root.Get("status_path"); v.Type == gjson.String {
		c.StatusPath = v.Str
	}
	if v := root.Get("status_token"); v.Type == gjson.String {
		c.StatusToken = v.Str
	}
	c.StatusPublic = root.Get("status_public").Type == gjson.True
	if v := root.Get("max_queue_time"); v.Type == gjson.String {
		c.Flow.MaxQueueTime, _ = time.ParseDuration(v.Str) // checked by the plugin's parser
	}
	queueLimit := int64(plugin.DefaultQueueLimit)
	if v := root.Get("queue_limit"); v.Type == gjson.Number {
		queueLimit = v.Int()
	}
	c.Flow.Shadow = root.Get("mode").Str == "shadow"
	c.Flow.On = c.Flow.MaxQueueTime > 0 && queueLimit > 0 && !c.Flow.Shadow
	if v := root.Get("paths"); v.IsArray() && len(v.Array()) > 0 {
		c.Paths = nil
		for _, p := range v.Array() {
			c.Paths = append(c.Paths, p.String())
		}
	}
	for _, p := range root.Get("pools").Array() {
		cp := configPool{Name: p.Get("name").String(), Capacity: int(p.Get("capacity").Int())}
		for _, m := range p.Get("models").Array() {
			cp.Models = append(cp.Models, m.String())
		}
		for _, f := range p.Get("spill_to").Array() {
			cp.SpillTo = append(cp.SpillTo, f.String())
		}
		p.Get("teams").ForEach(func(k, v gjson.Result) bool {
			cp.Teams = append(cp.Teams, configTeam{Name: k.String(), Share: v.Get("share").Float(), Weight: v.Get("weight").Float()})
			return true
		})
		if v := p.Get("max_body_bytes"); v.Type == gjson.Number {
			c.MaxBodyBytes = max(c.MaxBodyBytes, int(v.Int()))
		}
		readCapacityFrom(&cp, p)
		c.Pools = append(c.Pools, cp)
	}
	if len(c.Pools) == 0 {
		return c, fmt.Errorf("config: no pools")
	}
	return c, nil
}

// chatPath returns the chat completions path the plugin schedules (the
// first configured path ending in /chat/completions, else the first path).
func (c configView) chatPath() string {
	for _, p := range c.Paths {
		if strings.HasSuffix(p, "/chat/completions") {
			return p
		}
	}
	return c.Paths[0]
}

// model returns the model the demo sends: want if set, else the first
// pool's model (see configPool.model).
func (c configView) model(want string) string {
	if want != "" {
		return want
	}
	return c.Pools[0].model()
}

// model returns the model the demo sends to the pool: its first model that
// is not the wildcard "*", else defaultModel.
func (p configPool) model() string {
	for _, m := range p.Models {
		if m != "*" {
			return m
		}
	}
	return defaultModel
}

// defaultModel is the model served by the simulator and sent by the demo
// when neither the flag nor the configuration names one.
const defaultModel = "meta-llama/Llama-3.1-8B-Instruct"

// poolOf returns the pool serving model (or "*"), or the first pool.
func (c configView) poolOf(model string) configPool {
	for _, p := range c.Pools {
		for _, m := range p.Models {
			if m == model {
				return p
			}
		}
	}
	for _, p := range c.Pools {
		for _, m := range p.Models {
			if m == "*" {
				return p
			}
		}
	}
	return c.Pools[0]
}

// poolNamed returns the pool of that name (the zero pool if none).
func (c configView) poolNamed(name string) configPool {
	for _, p := range c.Pools {
		if p.Name == name {
			return p
		}
	}
	return configPool{}
}

// share returns the team's configured share in pool p (0 if absent).
func (p configPool) share(team string) float64 {
	for _, t := range p.Teams {
		if t.Name == team {
			return t.Share
		}
	}
	return 0
}

// newToken returns a random bearer token for the status endpoint.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withStatusToken returns the configuration b (a JSON object) with its
// status_token member set to token: the member removed wherever it is,
// then the new one added first.
func withStatusToken(b []byte, token string) []byte {
	return setMember(b, "status_token", gjson.AppendJSONString(nil, token))
}

// setMember returns the JSON object obj with its member name set to the
// JSON value raw: the member removed wherever it is, then the new one
// added first, the others kept in their order.
func setMember(obj []byte, name string, raw []byte) []byte {
	out := append([]byte{'{'}, gjson.AppendJSONString(nil, name)...)
	out = append(out, ':')
	out = append(out, raw...)
	gjson.ParseBytes(obj).ForEach(func(k, v gjson.Result) bool {
		if k.Str != name {
			out = append(out, ',')
			out = append(out, k.Raw...)
			out = append(out, ':')
			out = append(out, v.Raw...)
		}
		return true
	})
	return append(out, '}')
}

// configProblems is a configuration the plugin would refuse: every problem
// with its field path, one per line under the file's name.
type configProblems struct {
	name     string
	problems []string
}

func (e *configProblems) Error() string {
	n := "1 problem"
	if len(e.problems) != 1 {
		n = fmt.Sprintf("%d problems", len(e.problems))
	}
	return fmt.Sprintf("%s: invalid plugin configuration (%s; the plugin would refuse to start):\n  %s",
		e.name, n, strings.Join(e.problems, "\n  "))
}

// checkConfig validates the configuration b (named name in messages) with
// the plugin's parser, as the plugin does in proxy_on_configure.
func checkConfig(name string, b []byte) (plugin.ConfigCheck, error) {
	c := plugin.CheckConfig(b)
	if len(c.Problems) > 0 {
		return c, &configProblems{name: name, problems: c.Problems}
	}
	return c, nil
}

// checkFile is -check: it validates the configuration file and prints a
// one-line summary and the plugin's warnings, or returns every problem.
func checkFile(file string, out io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("-check: %w", err)
	}
	c, err := checkConfig(file, b)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: OK: %s\n", file, c.Summary)
	for _, w := range c.Warnings {
		fmt.Fprintf(out, "%s: warning: %s\n", file, w)
	}
	return nil
}
