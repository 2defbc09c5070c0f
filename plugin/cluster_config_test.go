package plugin

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseCluster(t *testing.T) {
	c, err := parse([]byte(`{"cluster":{"etcd_cluster":"etcd"},"pools":[{"name":"p","capacity":4,"models":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := clusterConfig{etcd: "etcd", authority: "etcd", prefix: DefaultClusterPrefix, syncInterval: DefaultSyncInterval,
		leaseTTL: DefaultLeaseTTL, timeout: DefaultClusterTimeout, safeFraction: DefaultSafeFraction}
	if c.cluster == nil || *c.cluster != want {
		t.Fatalf("parse(cluster with etcd_cluster only) = %+v, want %+v", c.cluster, want)
	}
	c, err = parse([]byte(`{"cluster":{"etcd_cluster":"outbound|2379||etcd.db.svc.cluster.local","authority":"etcd.db",
		"key_prefix":"/gw/a","authorization":"tok","replica":"gw-1","sync_interval":"250ms","lease_ttl":"3s",
		"timeout":"100ms","safe_fraction":0},"pools":[{"name":"p","capacity":4,"models":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want = clusterConfig{etcd: "outbound|2379||etcd.db.svc.cluster.local", authority: "etcd.db", prefix: "/gw/a", auth: "tok",
		replica: "gw-1", syncInterval: 250 * time.Millisecond, leaseTTL: 3 * time.Second, timeout: 100 * time.Millisecond}
	if *c.cluster != want {
		t.Fatalf("parse(every cluster field) = %+v, want %+v", *c.cluster, want)
	}
	// Without the block nothing is shared.
	c, err = parse([]byte(`{"pools":[{"name":"p","capacity":4,"models":["*"]}]}`))
	if err != nil || c.cluster != nil {
		t.Fatalf("parse(no cluster) = %+v, %v; want no cluster", c.cluster, err)
	}
}

func TestParseClusterProblems(t *testing.T) {
	pool := `,"pools":[{"name":"p","capacity":4,"models":["*"]}]}`
	tests := []struct {
		in   string
		want []string
	}{
		{`{"cluster":"etcd"`, []string{"cluster: must be an object, got a string"}},
		{`{"cluster":{}`, []string{"cluster.etcd_cluster: required"}},
		{`{"cluster":{"etcd_cluster":""}`, []string{"cluster.etcd_cluster: must name the Envoy cluster"}},
		{`{"cluster":{"etcd_cluster":"e","key_prefix":"x/"}`, []string{`cluster.key_prefix: must start with "/"`}},
		{`{"cluster":{"etcd_cluster":"e","lease_ttl":"2500ms"}`, []string{"cluster.lease_ttl: must be whole seconds"}},
		{`{"cluster":{"etcd_cluster":"e","lease_ttl":"1s"}`, []string{"cluster.lease_ttl: must be at least 2s"}},
		{`{"cluster":{"etcd_cluster":"e","lease_ttl":"2s"}`, []string{"cluster.lease_ttl: must be at least three sync intervals (3s)"}},
		{`{"cluster":{"etcd_cluster":"e","timeout":"2s"}`, []string{"cluster.timeout: must not exceed sync_interval (1s)"}},
		{`{"cluster":{"etcd_cluster":"e","safe_fraction":1.5}`, []string{"cluster.safe_fraction: must be in [0, 1], got 1.5"}},
		{`{"cluster":{"etcd_cluster":"e","replica":"a/b"}`, []string{`cluster.replica: must be a non-empty name`}},
		{`{"cluster":{"etcd_cluster":"e","ttl":"3s"}`, []string{"cluster.ttl: unknown field"}},
		{`{"cluster":{"etcd_cluster":"e","sync_interval":"1ms"}`, []string{"cluster.sync_interval: must be at least 10ms"}},
	}
	for _, tt := range tests {
		_, err := parse([]byte(tt.in + pool))
		if err == nil {
			t.Errorf("parse(%s) = nil, want %q", tt.in, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("parse(%s) = %v, want a problem %q", tt.in, err, w)
			}
		}
	}
}

// TestParseClusterExample: testdata/plugin/cluster.json (example.json
// with a cluster block, the one envoy.yaml's comment points to) parses.
func TestParseClusterExample(t *testing.T) {
	b, err := os.ReadFile("../testdata/plugin/cluster.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := parse(b)
	if err != nil {
		t.Fatalf("parse(cluster.json) = %v", err)
	}
	if c.cluster == nil || c.cluster.etcd != "etcd" || c.cluster.syncInterval != time.Second || c.cluster.leaseTTL != 10*time.Second {
		t.Errorf("cluster.json cluster block = %+v", c.cluster)
	}
}
