package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadConfigDemo(t *testing.T) {
	c, err := readConfig(demoConfig)
	if err != nil {
		t.Fatalf("readConfig(demo.json): %v", err)
	}
	want := configView{
		TeamHeader:   "x-team",
		ClassHeader:  "x-request-class",
		UnknownTeam:  "borrow",
		HalfLife:     "10m",
		MaxBodyBytes: 8 << 20,
		StatusPath:   "/fairshare/status",
		Paths: []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/pooling", "/classify",
			"/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/invocations", "/inference/v1/generate"},
		Pools: []configPool{{
			Name: "llama-8b", Capacity: 16, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
			Teams: []configTeam{{"search", 0.5, 0}, {"chat", 0.3, 2}, {"research", 0.2, 0}},
		}},
		Flow: flowControl{On: true, MaxQueueTime: 30 * time.Second},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("readConfig(demo.json) =\n%+v\nwant\n%+v", c, want)
	}
	if got := c.model(""); got != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("model(\"\") = %q", got)
	}
	if got := c.chatPath(); got != "/v1/chat/completions" {
		t.Errorf("chatPath() = %q", got)
	}
}

// The embedded demo configuration is the example configuration with the
// changes demoChanges lists (and the banner prints), and no other: every
// field of both documents is compared.
func TestDemoConfigFollowsExample(t *testing.T) {
	ex, err := os.ReadFile("../../testdata/plugin/example.json")
	if err != nil {
		t.Fatalf("example configuration: %v", err)
	}
	var e, d any
	if err := json.Unmarshal(ex, &e); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(demoConfig, &d); err != nil {
		t.Fatal(err)
	}
	var got []string
	jsonDiff("", e, d, func(path string, v any) {
		b, _ := json.Marshal(v)
		got = append(got, path+" "+strings.Trim(string(b), `"`))
	})
	slices.Sort(got)
	want := slices.Sorted(slices.Values(demoChanges))
	if !slices.Equal(got, want) {
		t.Errorf("demo.json differs from example.json in %q; the banner says %q", got, want)
	}
	if !strings.Contains(demoConfigName, strings.Join(demoChanges, ", ")) {
		t.Errorf("banner name %q does not list the changes", demoConfigName)
	}
}

// jsonDiff calls fn with the path and b's value of every leaf where a and b
// (decoded JSON) differ, or that only one of them has.
func jsonDiff(path string, a, b any, fn func(path string, v any)) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			fn(path, b)
			return
		}
		for k := range av {
			jsonDiff(join(k), av[k], bv[k], fn)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				fn(join(k), bv[k])
			}
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			fn(path, b)
			return
		}
		for i := range av {
			jsonDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], fn)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			fn(path, b)
		}
	}
}

func TestReadConfigDefaultsAndErrors(t *testing.T) {
	c, err := readConfig([]byte(`{"team_header":"X-Tenant","pools":[{"name":"p","capacity":4,"models":["*"],"teams":{"a":{"share":1}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.TeamHeader != "x-tenant" || c.ClassHeader != "x-request-class" || c.StatusPath != "/fairshare/status" {
		t.Errorf("readConfig: headers %q %q, status %q", c.TeamHeader, c.ClassHeader, c.StatusPath)
	}
	if got := c.model(""); got != defaultModel {
		t.Errorf("model(\"\") with a wildcard pool = %q, want %q", got, defaultModel)
	}
	if got := c.poolOf("anything").Name; got != "p" {
		t.Errorf("poolOf = %q, want the wildcard pool", got)
	}
	c, err = readConfig([]byte(`{"status_path":"","status_token":"s3cret","pools":[{"name":"p","capacity":4,"models":["m"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.StatusPath != "" || c.StatusToken != "s3cret" {
		t.Errorf("readConfig: status path %q token %q, want \"\" and s3cret", c.StatusPath, c.StatusToken)
	}
	for _, bad := range []struct{ in, want string }{
		{``, "config: line 1, column 1: unexpected end of JSON input"},
		{`[]`, "config: not a JSON object"},
		{"{\n  \"pools\": [\n    {\"name\": \"p\",}\n  ]\n}", "config: line 3, column 18: invalid character '}' looking for beginning of object key string"},
		{`{"pools":[]}`, "config: no pools"},
	} {
		if _, err := readConfig([]byte(bad.in)); err == nil || err.Error() != bad.want {
			t.Errorf("readConfig(%q) = %v, want %s", bad.in, err, bad.want)
		}
	}
	c, err = readConfig([]byte(`{"max_body_bytes":1000,"pools":[{"name":"p","capacity":4,"models":["m"],"max_body_bytes":7340032},{"name":"q","capacity":1,"models":["n"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBodyBytes != 7<<20 || proxyBufferLimit(c) != 7<<20 {
		t.Errorf("max_body_bytes 1000 and a pool's 7 MiB: MaxBodyBytes %d, buffer limit %d; want the larger, 7 MiB", c.MaxBodyBytes, proxyBufferLimit(c))
	}
}

func TestPlanTeams(t *testing.T) {
	p := configPool{Teams: []configTeam{{"chat", 0.3, 0}, {"research", 0.2, 0}, {"search", 0.5, 0}}}
	got := planTeams(p, false)
	var names, classes []string
	for _, d := range got {
		names = append(names, d.Name)
		classes = append(classes, d.Class)
	}
	if want := []string{"search", "chat", "research"}; !reflect.DeepEqual(names, want) {
		t.Errorf("planTeams names = %v, want %v (by decreasing share)", names, want)
	}
	if want := []string{"interactive", "interactive", "batch"}; !reflect.DeepEqual(classes, want) {
		t.Errorf("planTeams classes = %v, want %v", classes, want)
	}
	if got[2].Think != 0 || float64(got[2].Workers) <= p.Teams[1].Share*16 {
		t.Errorf("the smallest team does not flood: %+v", got[2])
	}
	two := planTeams(configPool{Teams: []configTeam{{"a", 0.7, 0}, {"b", 0.3, 0}}}, false)
	if len(two) != 2 || two[0].Class != "interactive" || two[1].Class != "batch" {
		t.Errorf("planTeams(two teams) = %+v, want a steady interactive team and a flooding one", two)
	}
}

func TestDescribeLoad(t *testing.T) {
	got := describeLoad(demoTeams(), 40*time.Second)
	for _, want := range []string{"search 5 interactive clients;", "chat 4 interactive clients from 10s;", "research 28 batch clients from 2s (flooding)"} {
		if !strings.Contains(got, want) {
			t.Errorf("describeLoad() = %q, lacks %q", got, want)
		}
	}
	if got := describeLoad(demoTeams(), 10*time.Second); !strings.Contains(got, "research 28 batch clients from 500ms") {
		t.Errorf("describeLoad(10s) = %q, want research from 500ms", got)
	}
}

func TestWithStatusToken(t *testing.T) {
	got := withStatusToken([]byte(`{"a":1,"status_token":"","b":{"c":[2]}}`), "t0k")
	c, err := readConfig(append(got[:len(got)-1:len(got)-1], `,"pools":[{"name":"p","capacity":1}]}`...))
	if err != nil || c.StatusToken != "t0k" || strings.Count(string(got), "status_token") != 1 {
		t.Errorf("withStatusToken = %s (%+v, %v), want one status_token t0k", got, c, err)
	}
}
