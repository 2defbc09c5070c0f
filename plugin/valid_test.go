package plugin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestValidObject(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{" \n{\"a\" : [1, -2.5e+3, true, false, null, \"x\\u00e9\\n\", {\"b\":{}}, []]}\t", true},
		{`{"a":1}`, true},
		{`[]`, false},
		{`"x"`, false},
		{``, false},
		{`{`, false},
		{`{"a"}`, false},
		{`{"a":}`, false},
		{`{"a":1,}`, false},
		{`{"a":[1,]}`, false},
		{`{"a":01}`, false},
		{`{"a":1.}`, false},
		{`{"a":-}`, false},
		{`{"a":"\x"}`, false},
		{"{\"a\":\"\x01\"}", false},
		{`{"a":"\u12"}`, false},
		{`{"a":tru}`, false},
		{`{"a":1}{}`, false},
		{`{"a":[}`, false},
		{`{"a":{]}`, false},
		{`{1:2}`, false},
		{`{"a":1 "b":2}`, false},
		{`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, true},
	}
	for _, tt := range tests {
		if got := validObject([]byte(tt.in)); got != tt.want {
			t.Errorf("validObject(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzValidObject compares validObject with encoding/json.Valid.
func FuzzValidObject(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}],"n":1e3}`))
	f.Add([]byte(`{"a":[1,2,{"b":null}],"c":-0.5E-7}`))
	f.Add([]byte(` {"x":"\"\\\/\b\f\n\r\t"} `))
	f.Add([]byte(`{"m":[{"role":"user","content":"a\"b"},{"type":"x"},{"a":"b","c":1}],"o":{"k":"v"}}`))
	f.Add([]byte(`{"m":[{"a":"b",}]}`))
	f.Add([]byte(`{"m":[{"a":"b"},{"a":"b\u00zz"}]}`))
	f.Add([]byte(`{"m":[{"a":"b" }, {"a" :"b"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b) && bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
		type member struct{ key, raw string }
		var got []member
		ok := scanObject(b, func(key string, at, end int) { got = append(got, member{key, string(b[at:end])}) })
		if ok != want {
			t.Fatalf("validObject(%q) = %v, encoding/json says %v", b, ok, want)
		}
		if !ok {
			return
		}
		// The members are gjson's, in order.
		var exp []member
		gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
			exp = append(exp, member{k.Str, v.Raw})
			return true
		})
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("scanObject(%q) members %q, gjson %q", b, got, exp)
		}
	})
}
