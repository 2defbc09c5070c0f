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
		{`{"cluster":"e","engines":"learned","addresses":"10.0.0.5:8000"}`, `pools[0].capacity_from.addresses: must be an array of "ip:port" engine addresses, got a string`},
		{`{"cluster":"e","engines":"learned","addresses":[8000]}`, "pools[0].capacity_from.addresses[0]: must be a string, got a number"},
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
	// With the cluster block the fleet agrees on the engines' capacity
	// (fleetcap.go); the defaults (interval 5 s, expire 15 s) cover a
	// sync interval.
	if _, err = parse([]byte(`{"cluster":{"etcd_cluster":"etcd"},"pools":[{"name":"p","capacity":4,"models":["*"],"teams":{"a":{"share":0.5}},"capacity_from":{"cluster":"e"}}]}`)); err != nil {
		t.Errorf("capacity_from with cluster: %v", err)
	}
}

// A reading counts while it is fresh: not older than expire, not failed
// since; with none, the configured values apply.
func TestCapacitySumExpires(t *testing.T) {
	cf := &capacityFrom{expire: 6 * time.Second, maxNumSeqs: 8}
	now := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	s := &engineSet{engines: map[string]*engineEntry{
		"a": {read: at(time.Second), r: engineReading{cores: 1, kvTokens: 100}},
		"b": {read: at(7 * time.Second), r: engineReading{cores: 1, kvTokens: 200}},                        // stale
		"c": {read: at(3 * time.Second), fail: at(time.Second), r: engineReading{cores: 1, kvTokens: 400}}, // failed since
		"d": {read: at(2 * time.Second), r: engineReading{cores: 2, kvTokens: 800, maxNumSeqs: 16}},        // exports max_num_seqs
	}}
	if c, kv, n := sum(now, cf, 4, 50, s); c != 8+2*16 || kv != 900 || n != 3 {
		t.Fatalf("sum = %d, %d, %d; want C 40, K 900 from 3 cores (a and d)", c, kv, n)
	}
	later := now.Add(6 * time.Second) // a and d stale too (7 s, 8 s)
	if c, kv, n := sum(later, cf, 4, 50, s); c != 4 || kv != 50 || n != 0 {
		t.Fatalf("sum with every reading stale = %d, %d, %d; want the configured 4, 50", c, kv, n)
	}
}
