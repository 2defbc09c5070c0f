package trace

import (
	"fmt"
	"reflect"
	"testing"
)

// traces is the folder of the shipped windows.
const traces = "../../testdata/traces"

// shipped are the windows under testdata/traces, with the statistics their
// README states.
var shipped = []struct {
	file   string
	format Format
	rows   int
	stats  string
}{
	{"azure_code_540s_900s.csv", Azure, 3569, "3569 requests in 14m39.503s: 4.06/s, inter-arrival CV 16.23, 0 to 665 a minute; prompt mean 2014 (median 1445, p99 7436), output mean 27 (median 13, p99 232)"},
	{"azure_conv_1800s_900s.csv", Azure, 5769, "5769 requests in 14m59.648s: 6.41/s, inter-arrival CV 1.05, 309 to 507 a minute; prompt mean 1079 (median 851, p99 4624), output mean 172 (median 106, p99 561)"},
	{"mooncake_conversation_2940s_300s.jsonl", Mooncake, 1139, "1139 requests in 4m56.999s: 3.84/s, inter-arrival CV 3.24, 219 to 247 a minute; prompt mean 11609 (median 6350, p99 74322), output mean 328 (median 328, p99 1052)"},
}

func TestShippedWindows(t *testing.T) {
	for _, w := range shipped {
		t.Run(w.file, func(t *testing.T) {
			tr, err := Load(Spec{File: w.file, Format: w.format}, traces)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Rows != w.rows || len(tr.Requests) != w.rows || tr.Failed != 0 {
				t.Errorf("rows %d, requests %d, failed %d, want %d, %d, 0", tr.Rows, len(tr.Requests), tr.Failed, w.rows, w.rows)
			}
			if got := tr.Stats().String(); got != w.stats {
				t.Errorf("stats\n got %s\nwant %s", got, w.stats)
			}
		})
	}
}

func TestShippedWindowsDeterministic(t *testing.T) {
	specs := []Spec{
		{},
		{Start: 60, Duration: 120, TimeScale: 1.5, RateScale: 0.3, Every: 2, Offset: 1},
		{Start: 30, Duration: 200, RateScale: 2.4, Every: 3, Offset: 2},
	}
	for _, w := range shipped {
		for i, s := range specs {
			t.Run(fmt.Sprintf("%s/%d", w.file, i), func(t *testing.T) {
				s.File, s.Format = w.file, w.format
				a, err := Load(s, traces)
				if err != nil {
					t.Fatal(err)
				}
				b, err := Load(s, traces)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatal("two loads differ")
				}
				if len(a.Requests) == 0 {
					t.Fatal("no requests")
				}
				// The count scales as the package doc promises.
				n := (a.Window - s.Offset + s.every() - 1) / s.every()
				if ok, tol := within(len(a.Requests), n, s.rateScale()); !ok {
					t.Errorf("%d requests from %d rows at rate_scale %v, want within %.1f", len(a.Requests), n, s.rateScale(), tol)
				}
				for _, q := range a.Requests {
					if q.Arrival < 0 || (s.Duration > 0 && q.Arrival >= a.Span) {
						t.Fatalf("line %d copy %d arrives at %v, outside [0, %v)", q.Line, q.Copy, q.Arrival, a.Span)
					}
				}
			})
		}
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"missing file", Spec{File: "nope.csv", Format: Azure}, "nope.csv: open trace: open ../../testdata/traces/nope.csv: no such file or directory"},
		{"wrong format", Spec{File: "azure_code_540s_900s.csv", Format: Mooncake}, "azure_code_540s_900s.csv:1: not a JSON object: invalid character 'T' looking for beginning of value"},
		{"bad spec", Spec{File: "azure_code_540s_900s.csv", Format: Azure, RateScale: -1}, "trace.rate_scale: must be > 0, at most 100, got -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.spec, traces)
			if err == nil || err.Error() != c.want {
				t.Errorf("error\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

// TestBurstinessFigures pins the figures the package doc quotes.
func TestBurstinessFigures(t *testing.T) {
	cases := []struct {
		file string
		spec Spec
		cv   string
	}{
		{"azure_code_540s_900s.csv", Spec{}, "16.23"},
		{"azure_code_540s_900s.csv", Spec{RateScale: 0.5}, "11.59"},
		{"azure_code_540s_900s.csv", Spec{RateScale: 2}, "19.59"},
		{"azure_conv_1800s_900s.csv", Spec{}, "1.05"},
		{"azure_conv_1800s_900s.csv", Spec{Every: 2}, "0.76"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %+v", c.file, c.spec), func(t *testing.T) {
			c.spec.File, c.spec.Format = c.file, Azure
			tr, err := Load(c.spec, traces)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%.2f", tr.Stats().CV); got != c.cv {
				t.Errorf("CV %s, want %s", got, c.cv)
			}
		})
	}
}
