package main

import (
	"os"
	"reflect"
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
		TeamHeader:  "x-team",
		ClassHeader: "x-request-class",
		StatusPath:  "/fairshare/status",
		Paths: []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/pooling", "/classify",
			"/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/invocations", "/inference/v1/generate"},
		Pools: []configPool{{
			Name: "llama-8b", Capacity: 16, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
			Teams: []configTeam{{"search", 0.5}, {"chat", 0.3}, {"research", 0.2}},
		}},
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

// The embedded demo configuration is the example configuration with only
// the capacity and the half-life changed.
func TestDemoConfigFollowsExample(t *testing.T) {
	ex, err := os.ReadFile("../../testdata/plugin/example.json")
	if err != nil {
		t.Fatalf("example configuration: %v", err)
	}
	e, err := readConfig(ex)
	if err != nil {
		t.Fatalf("readConfig(example.json): %v", err)
	}
	d, _ := readConfig(demoConfig)
	e.Pools[0].Capacity = d.Pools[0].Capacity
	if !reflect.DeepEqual(e, d) {
		t.Errorf("demo config differs from example.json beyond the capacity:\nexample %+v\ndemo    %+v", e, d)
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
	for _, bad := range []string{``, `[]`, `{`, `{"pools":[]}`} {
		if _, err := readConfig([]byte(bad)); err == nil {
			t.Errorf("readConfig(%q) = nil error", bad)
		}
	}
}

func TestPlanTeams(t *testing.T) {
	p := configPool{Teams: []configTeam{{"chat", 0.3}, {"research", 0.2}, {"search", 0.5}}}
	got := planTeams(p)
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
	two := planTeams(configPool{Teams: []configTeam{{"a", 0.7}, {"b", 0.3}}})
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
