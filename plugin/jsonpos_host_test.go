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
