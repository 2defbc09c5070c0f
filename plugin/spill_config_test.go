package plugin

import (
	"strings"
	"testing"
)

// TestParseSpillTo: spill_to names other pools, in order; a missing pool,
// the pool itself, a duplicate, a non-array and spill-over without
// hold_headers "on" are errors with their field paths.
func TestParseSpillTo(t *testing.T) {
	const flow = `"max_queue_time":"10s","hold_headers":"on",`
	c, err := parse([]byte(`{` + flow + `"pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":["c","b"]},
		{"name":"b","capacity":1,"models":["n"],"spill_to":["a"]},{"name":"c","capacity":1,"models":["o"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.pools[0].spillTo, ","); got != "c,b" || len(c.pools[2].spillTo) != 0 {
		t.Errorf("spill_to = %q, %v", got, c.pools[2].spillTo)
	}
	for cfg, want := range map[string][]string{
		`{` + flow + `"pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":["z","a","a"]}]}`: {
			`pools[0].spill_to[0]: no pool named "z"`, `pools[0].spill_to[1]: a pool cannot spill to itself`, `pools[0].spill_to[2]: duplicate fallback "a"`},
		`{` + flow + `"pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":"b"}]}`: {`pools[0].spill_to: must be an array of pool names, got a string`},
		`{` + flow + `"pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":[1]}]}`: {`pools[0].spill_to[0]: must be a string`},
		`{"max_queue_time":"10s","pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":["b"]},{"name":"b","capacity":1,"models":["n"]}]}`: {
			`pools[0].spill_to: needs hold_headers "on"`},
		`{` + flow + `"pools":[{"name":"a","capacity":1,"models":["m"],"spill_to":["b"]},{"name":"b","capacity":1,"models":["m"]}]}`: {
			`pools[1].models[0]: duplicate model "m"`},
	} {
		_, err := parse([]byte(cfg))
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want %q", cfg, err, w)
			}
		}
	}
}
