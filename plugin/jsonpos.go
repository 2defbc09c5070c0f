package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// JSONSyntaxError describes where data stops being valid JSON, as
// "line L, column C: <encoding/json's message>", with L and C counted from 1
// and C in characters, pointing at the offending character (or just past
// the last one when the input ends early). It returns "" when data is valid
// JSON. The plugin uses it for a configuration that does not parse, so that
// Envoy's log names the position; cmd/fairshare-run uses it for -config.
// Cost: one pass of encoding/json over data.
func JSONSyntaxError(data []byte) string {
	var raw json.RawMessage
	err := json.Unmarshal(data, &raw)
	if err == nil {
		return ""
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err.Error()
	}
	// Offset is the number of bytes read when the error occurred: the
	// offending character is the last of them, except at the end of input.
	at := int(se.Offset)
	if at > 0 && at <= len(data) && se.Error() != "unexpected end of JSON input" {
		at--
	}
	at = min(max(at, 0), len(data))
	line := bytes.Count(data[:at], []byte("\n")) + 1
	col := utf8.RuneCount(data[bytes.LastIndexByte(data[:at], '\n')+1:at]) + 1
	return fmt.Sprintf("line %d, column %d: %s", line, col, se.Error())
}
