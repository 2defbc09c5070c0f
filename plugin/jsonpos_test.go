package plugin

import "testing"

func TestJSONSyntaxError(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"valid", `{"a": [1, 2]}`, ""},
		{"trailing comma", "{\n  \"pools\": [],\n  \"tick\": \"1s\",}\n", `line 3, column 16: invalid character '}' looking for beginning of object key string`},
		{"first line", `{"a" 1}`, `line 1, column 6: invalid character '1' after object key`},
		{"columns in characters", "{\n\"é\": 1 2}", `line 2, column 8: invalid character '2' after object key:value pair`},
		{"end of input", "{\n  \"a\": [1,\n", `line 3, column 1: unexpected end of JSON input`},
		{"empty", ``, `line 1, column 1: unexpected end of JSON input`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := JSONSyntaxError([]byte(tt.in)); got != tt.want {
				t.Errorf("JSONSyntaxError(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// A configuration that is not JSON names the line and column in the
// plugin's error, which Envoy logs when the plugin fails to start.
func TestParseNamesSyntaxErrorPosition(t *testing.T) {
	_, err := parse([]byte("{\n  \"tick\": \"1s\",\n  \"pools\": [}\n"))
	want := `plugin configuration: $: not valid JSON: line 3, column 13: invalid character '}' looking for beginning of value`
	if err == nil || err.Error() != want {
		t.Errorf("parse(bad JSON) = %v, want %s", err, want)
	}
}
