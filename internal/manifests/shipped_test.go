package manifests

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/plugin"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
)

// A shipped configuration is one a user starts from: every file of
// testdata/plugin, the embedded demo of make run, the configuration
// envoy.yaml carries, and every WasmPlugin's pluginConfig in the kits and
// overlays as kustomize renders them. Each must be one the plugin accepts
// with flow control on: the plugin's own default is max_queue_time "0s",
// and without flow control a flood's borrowers wait in vLLM's queue, where
// the benchmark's worst p99 is about ten times VTC's (README,
// Configuration).

// shippedFlowProblem returns why the configuration cfg (named name) is not
// fit to ship: refused by the plugin, or flow control off (the plugin's
// own verdict, plugin.CheckConfig's summary; mode "shadow" holds nothing);
// "" when it is.
func shippedFlowProblem(name string, cfg []byte) string {
	c := plugin.CheckConfig(cfg)
	switch {
	case len(c.Problems) > 0:
		return name + ": the plugin refuses it: " + strings.Join(c.Problems, "; ")
	case !strings.Contains(c.Summary, "; flow control on ("):
		return name + ": flow control is off (" + c.Summary + "); shipped configurations set max_queue_time \"30s\""
	case strings.Contains(c.Summary, "; mode shadow"):
		return name + ": mode shadow holds nothing, so flow control is off; shipped configurations enforce"
	}
	return ""
}

// shippedConfigs returns every shipped configuration by name.
func shippedConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	files, err := filepath.Glob("../../testdata/plugin/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata/plugin/*.json: %v (%d files)", err, len(files))
	}
	files = append(files, "../../cmd/fairshare-run/demo.json")
	for _, f := range files {
		out[strings.TrimPrefix(filepath.ToSlash(f), "../../")] = readFile(t, f)
	}
	f, err := loadEnvoy(readFile(t, envoyPath))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(f.config)
	if err != nil {
		t.Fatal(err)
	}
	out["envoy.yaml"] = js
	fsys := istioFS(t, nil)
	for _, dir := range append(append([]string(nil), kustomizedKits...), "plugin-only", "kind") {
		k, err := renderKit(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range k.objs {
			if o.kind != "WasmPlugin" {
				continue
			}
			js, err := o.obj.(*extensionsv1alpha1.WasmPlugin).GetPluginConfig().MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			out["deploy/istio/"+dir+" WasmPlugin/"+o.meta.GetName()] = js
		}
	}
	return out
}

// TestShippedConfigsHoldBorrowers: every shipped configuration is accepted
// by the plugin and has flow control on; and the check itself fails a
// configuration with flow control off, as cluster.json once shipped.
func TestShippedConfigsHoldBorrowers(t *testing.T) {
	cfgs := shippedConfigs(t)
	kits := 0
	for name, b := range cfgs {
		if strings.HasPrefix(name, "deploy/") {
			kits++
		}
		if p := shippedFlowProblem(name, b); p != "" {
			t.Error(p)
		}
	}
	// The sidecar, gateway and inference-pool kits and the plugin-only
	// and kind overlays each carry a WasmPlugin (the etcd kit none).
	if kits != 5 {
		t.Errorf("found %d WasmPlugins in the kits, want 5: %v", kits, cfgs)
	}

	example := string(readFile(t, examplePath))
	for _, c := range []struct{ name, cfg, want string }{
		{"off", strings.Replace(example, `"max_queue_time": "30s"`, `"max_queue_time": "0s"`, 1), "flow control is off"},
		{"absent", strings.Replace(example, `"max_queue_time": "30s",`, ``, 1), "flow control is off"},
		{"no queue", strings.Replace(example, `"queue_limit": 1024`, `"queue_limit": 0`, 1), "flow control is off"},
		{"shadow", strings.Replace(example, `"mode": "enforce"`, `"mode": "shadow"`, 1), "flow control is off"},
		{"refused", strings.Replace(example, `"share": 0.5`, `"share": 1.5`, 1), "the plugin refuses it"},
	} {
		if c.cfg == example {
			t.Fatalf("%s: the edit did not apply to %s", c.name, examplePath)
		}
		if got := shippedFlowProblem(c.name, []byte(c.cfg)); !strings.Contains(got, c.want) {
			t.Errorf("shippedFlowProblem(%s) = %q, want %q", c.name, got, c.want)
		}
	}
}
