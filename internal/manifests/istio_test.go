package manifests

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	"sigs.k8s.io/yaml"
)

// decodeK8s reads a single-document Kubernetes manifest, checks its
// apiVersion and kind, and returns it as generic JSON values.
func decodeK8s(t *testing.T, path, apiVersion, kind string) map[string]any {
	t.Helper()
	js, err := yaml.YAMLToJSON(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if obj["apiVersion"] != apiVersion || obj["kind"] != kind {
		t.Fatalf("%s: apiVersion %v kind %v, want %s %s", path, obj["apiVersion"], obj["kind"], apiVersion, kind)
	}
	md, _ := obj["metadata"].(map[string]any)
	if md["name"] == nil || md["name"] == "" {
		t.Errorf("%s: metadata.name is empty", path)
	}
	for k := range obj {
		switch k {
		case "apiVersion", "kind", "metadata", "spec", "data":
		default:
			t.Errorf("%s: unexpected top-level field %q", path, k)
		}
	}
	return obj
}

// decodeWasmPlugin decodes the spec of a WasmPlugin manifest into Istio's
// WasmPlugin proto, rejecting unknown fields.
func decodeWasmPlugin(t *testing.T, spec any) (*extensionsv1alpha1.WasmPlugin, error) {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var wp extensionsv1alpha1.WasmPlugin
	if err := strict.Unmarshal(js, &wp); err != nil {
		return nil, err
	}
	return &wp, nil
}

func TestWasmPlugin(t *testing.T) {
	obj := decodeK8s(t, wasmPluginPath, "extensions.istio.io/v1alpha1", "WasmPlugin")
	wp, err := decodeWasmPlugin(t, obj["spec"])
	if err != nil {
		t.Fatalf("%s: spec: %v", wasmPluginPath, err)
	}
	if !strings.HasPrefix(wp.GetUrl(), "oci://") {
		t.Errorf("url = %q, want an oci:// image", wp.GetUrl())
	}
	if wp.GetPluginName() != "fairshare" {
		t.Errorf("pluginName = %q, want fairshare (the root_id the plugin registers)", wp.GetPluginName())
	}
	if wp.GetType() != extensionsv1alpha1.PluginType_HTTP {
		t.Errorf("type = %v, want HTTP", wp.GetType())
	}
	if wp.GetFailStrategy() != extensionsv1alpha1.FailStrategy_FAIL_OPEN {
		t.Errorf("failStrategy = %v, want FAIL_OPEN (as envoy.yaml's failure_policy)", wp.GetFailStrategy())
	}
	if wp.GetPhase() == extensionsv1alpha1.PluginPhase_UNSPECIFIED_PHASE {
		t.Errorf("phase is unset: Istio would put the filter last, after its own filters")
	}
	if len(wp.GetSelector().GetMatchLabels()) == 0 && len(wp.GetTargetRefs()) == 0 {
		t.Errorf("neither selector nor targetRefs: the plugin would apply to every proxy in the namespace")
	}

	// Istio hands pluginConfig to the plugin as JSON; it must be the
	// example configuration.
	js, err := wp.GetPluginConfig().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	d := jsonDiff("pluginConfig", got, exampleConfig(t))
	sort.Strings(d)
	for _, line := range d {
		t.Errorf("%s pluginConfig differs from %s: %s", wasmPluginPath, examplePath, line)
	}
}

// TestWasmPluginRejectsMistakes checks that the WasmPlugin decoding is
// strict, so that TestWasmPlugin would catch a misspelt field.
func TestWasmPluginRejectsMistakes(t *testing.T) {
	obj := decodeK8s(t, wasmPluginPath, "extensions.istio.io/v1alpha1", "WasmPlugin")
	for _, c := range []struct {
		name   string
		mutate func(spec map[string]any)
	}{
		{"misspelt field", func(s map[string]any) { s["pluginname"] = s["pluginName"]; delete(s, "pluginName") }},
		{"misspelt enum value", func(s map[string]any) { s["failStrategy"] = "FAIL_OPN" }},
		{"misspelt selector field", func(s map[string]any) { s["selector"] = map[string]any{"matchLabel": map[string]any{"a": "b"}} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			js, _ := json.Marshal(obj["spec"])
			var spec map[string]any
			if err := json.Unmarshal(js, &spec); err != nil {
				t.Fatal(err)
			}
			c.mutate(spec)
			if _, err := decodeWasmPlugin(t, spec); err == nil {
				t.Errorf("decodeWasmPlugin(spec with a %s) = nil error, want an error", c.name)
			}
		})
	}
}
