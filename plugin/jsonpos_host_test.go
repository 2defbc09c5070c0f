package plugin_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// TestWasmConfigSyntaxErrorLogged: the built plugin refuses a configuration
// with a JSON syntax error and its log line (what Envoy prints) names the
// line and column.
func TestWasmConfigSyntaxErrorLogged(t *testing.T) {
	var logs bytes.Buffer
	_, err := compiled(t).Start(context.Background(), host.Options{
		Profile:      hostProfile,
		PluginName:   pluginName,
		VMID:         "syntax-error",
		PluginConfig: []byte("{\n  \"tick\": \"1s\",\n  \"pools\": [}\n"),
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err == nil {
		t.Fatal("start with a configuration that is not JSON succeeded")
	}
	want := `not valid JSON: line 3, column 13: invalid character '}' looking for beginning of value`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("plugin log lacks %q:\n%s", want, logs.String())
	}
}

// TestWasmMisspeltFieldSuggested: the built plugin refuses a configuration
// with misspelt fields at every level, and its log names each with its path
// and the field meant; a field near to none gets no guess.
func TestWasmMisspeltFieldSuggested(t *testing.T) {
	var logs bytes.Buffer
	_, err := compiled(t).Start(context.Background(), host.Options{
		Profile:    hostProfile,
		PluginName: pluginName,
		VMID:       "misspelt",
		PluginConfig: []byte(`{"max_queue_tme":"30s","maxBodyBytes":1024,"colour":"red",
			"cost":{"prompt_tokens":1},
			"pools":[{"name":"p","capacty":4,"models":["m"],"teams":{"a":{"shar":0.5}}}]}`),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err == nil {
		t.Fatal("start with misspelt fields succeeded")
	}
	for _, want := range []string{
		`max_queue_tme: unknown field (did you mean \"max_queue_time\"?)`,
		`maxBodyBytes: unknown field (did you mean \"max_body_bytes\"?)`,
		`cost.prompt_tokens: unknown field (did you mean \"prompt_token\"?)`,
		`pools[0].capacty: unknown field (did you mean \"capacity\"?)`,
		`pools[0].teams.a.shar: unknown field (did you mean \"share\"?)`,
		`colour: unknown field"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("plugin log lacks %s:\n%s", want, logs.String())
		}
	}
}
