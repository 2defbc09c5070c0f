package plugin

import (
	"strings"
	"testing"
	"time"
)

func TestCapacityFromConfig(t *testing.T) {
	base := func(from string) string {
		return `{"pools":[{"name":"p","capacity":4,"models":["*"],"teams":{"a":{"share":0.5}},"capacity_from":` + from + `}]}`
	}
	c, err := parse([]byte(base(`{"cluster":"engines","engines":"learned","addresses":["10.0.0.5:8000","[fd00::5]:8000"],"interval":"2s"}`)))
	if err != nil {
		t.Fatal(err)
	}
	cf := c.pools[0].capFrom
	if cf == nil || cf.cluster != "engines" || cf.authority != "engines" || cf.expire != 6*time.Second || cf.maxNumSeqs != DefaultMaxNumSeqs ||
		len(cf.addresses) != 2 || cf.addresses[1] != "[fd00::5]:8000" || cf.header != "x-envoy-original-dst-host" || cf.path != "/metrics" {
		t.Fatalf("capacity_from = %+v", cf)
	}
	tests := []struct{ from, want string }{
		{`{}`, "pools[0].capacity_from.cluster: required"},
		{`{"cluster":"e","engines":"all"}`, `pools[0].capacity_from.engines: must be "cluster"`},
		{`{"cluster":"e","engines":"learned","addresses":["vllm-0:8000"]}`, "pools[0].capacity_from.addresses[0]: must be an IP address and port"},
		{`{"cluster":"e","addresses":["10.0.0.5:8000"]}`, `pools[0].capacity_from.addresses: needs engines "learned"`},
		{`{"cluster":"e","interval":"1s","expire":"500ms"}`, "pools[0].capacity_from.expire: must be at least interval"},
		{`{"cluster":"e","interval":"1s","timeout":"1s"}`, "pools[0].capacity_from.timeout: must be below interval"},
		{`{"cluster":"e","path":"metrics"}`, "pools[0].capacity_from.path: must be a path"},
		{`{"cluster":"e","max_num_seqs":0}`, "pools[0].capacity_from.max_num_seqs: must be an integer"},
		{`{"cluster":"e","poll":"1s"}`, "pools[0].capacity_from.poll: unknown field"},
		{`{"cluster":"e","intervall":"1s"}`, `pools[0].capacity_from.intervall: unknown field (did you mean "interval"?)`},
		{`"e"`, "pools[0].capacity_from: must be an object"},
	}
	for _, tt := range tests {
		_, err := parse([]byte(base(tt.from)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("capacity_from %s: %v, want %q", tt.from, err, tt.want)
		}
	}
	_, err = parse([]byte(`{"cluster":{"etcd_cluster":"etcd"},"pools":[{"name":"p","capacity":4,"models":["*"],"teams":{"a":{"share":0.5}},"capacity_from":{"cluster":"e"}}]}`))
	if err == nil || !strings.Contains(err.Error(), "pools[0].capacity_from: cannot be used with the cluster block") {
		t.Errorf("capacity_from with cluster: %v", err)
	}
}
