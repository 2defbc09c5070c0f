package manifests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// istioDir holds every kit; the kustomize tests copy it into an in-memory
// file system, so that a case can change one file.
const istioDir = "../../deploy/istio"

// kustomizedKits are the kit directories that are kustomizations of their
// own files.
var kustomizedKits = []string{"sidecar", "gateway", "inference-pool", "etcd"}

// istioFS returns deploy/istio as an in-memory file system rooted at
// /istio, with replace's contents (by path relative to deploy/istio)
// instead of the files'.
func istioFS(t *testing.T, replace map[string]string) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	root := filepath.FromSlash(istioDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if r, ok := replace[rel]; ok {
			data = []byte(r)
		}
		return mem.WriteFile(path.Join("/istio", rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// decodeKustomization decodes a kustomization.yaml strictly into
// kustomize's Kustomization type (kustomize itself ignores some unknown
// fields).
func decodeKustomization(data []byte) (*kustypes.Kustomization, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var k kustypes.Kustomization
	strictErrs, err := kjson.UnmarshalStrict(js, &k)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("Kustomization: %w", strictErrs[0])
	}
	if k.APIVersion != kustypes.KustomizationVersion || k.Kind != kustypes.KustomizationKind {
		return nil, fmt.Errorf("apiVersion %q kind %q, want %s %s", k.APIVersion, k.Kind, kustypes.KustomizationVersion, kustypes.KustomizationKind)
	}
	return &k, nil
}

// renderKit builds the kustomization in dir (relative to deploy/istio) of
// fsys as `kubectl apply -k` does (kustomize's default options: files only
// from inside the kustomization's root, bases by directory), checks the
// kustomization.yaml of it and of every base it names, and decodes every
// object rendered strictly (decodeObject).
func renderKit(fsys filesys.FileSystem, dir string) (*kit, error) {
	seen := map[string]bool{}
	var check func(dir string) error
	check = func(dir string) error {
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		data, err := fsys.ReadFile(path.Join("/istio", dir, kustomizationFile))
		if err != nil {
			return err
		}
		k, err := decodeKustomization(data)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", dir, kustomizationFile, err)
		}
		for _, r := range k.Resources {
			if fsys.IsDir(path.Join("/istio", dir, r)) {
				if err := check(path.Clean(path.Join(dir, r))); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := check(dir); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, path.Join("/istio", dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	k := &kit{dir: "kustomize build " + dir}
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		o, err := decodeObject(doc)
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: object %d: %w", dir, i, err)
		}
		o.file = fmt.Sprintf("rendered[%d]", i)
		k.objs = append(k.objs, o)
	}
	return k, nil
}

// TestKitsAreKustomizations: each kit's kustomization.yaml lists exactly
// the kit's manifests, and kustomize renders the objects the files hold.
func TestKitsAreKustomizations(t *testing.T) {
	fsys := istioFS(t, nil)
	for _, d := range kustomizedKits {
		t.Run(d, func(t *testing.T) {
			k, err := decodeKustomization(readFile(t, istioDir+"/"+d+"/"+kustomizationFile))
			if err != nil {
				t.Fatal(err)
			}
			files, err := filepath.Glob(filepath.Join(filepath.FromSlash(istioDir), d, "*.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, f := range files {
				if b := filepath.Base(f); b != kustomizationFile {
					want = append(want, b)
				}
			}
			got := slices.Sorted(slices.Values(k.Resources))
			if !slices.Equal(got, want) {
				t.Errorf("%s/%s resources = %v, want every manifest of the directory %v", d, kustomizationFile, got, want)
			}
			rendered, err := renderKit(fsys, d)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := rendered.inventory(), mustLoadKit(t, istioDir+"/"+d).inventory(); !slices.Equal(g, w) {
				t.Errorf("kustomize build %s = %v, want the files' %v", d, g, w)
			}
		})
	}
}

// TestPluginOnlyOverlay: deploy/istio/plugin-only renders the sidecar kit
// without its vLLM (no Deployment, no Service) and without its Namespace
// (the operator's vLLM already lives there: `kubectl delete -k` of the
// overlay must not delete it): the plugin and its policies only, each
// object decoded strictly, and those policies reach a vLLM whose pods carry
// what vllm-pod-patch.yaml gives them.
func TestPluginOnlyOverlay(t *testing.T) {
	k, err := renderKit(istioFS(t, nil), "plugin-only")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"AuthorizationPolicy/fairshare-require-team", "ConfigMap/fairshare-stats",
		"EnvoyFilter/fairshare-buffer-limit", "EnvoyFilter/fairshare-engine-metrics", "RequestAuthentication/fairshare-team",
		"Secret/fairshare-pull", "WasmPlugin/fairshare",
	}
	if got := k.inventory(); !slices.Equal(got, want) {
		t.Errorf("plugin-only objects = %v, want %v (the sidecar kit less its vLLM)", got, want)
	}

	// The operator's vLLM, as the patch leaves its pod template: the
	// overlay's plugin must reach it and find its stats annotations.
	js, err := yaml.YAMLToJSONStrict(readFile(t, pluginOnlyDir+"/vllm-pod-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patched appsv1.Deployment
	if errs, err := kjson.UnmarshalStrict(js, &patched); err != nil || len(errs) > 0 {
		t.Fatalf("vllm-pod-patch.yaml does not decode into a Deployment: %v %v", err, errs)
	}
	patched.Name = "your-vllm"
	checkKitCommon(t, k, pluginHost{deploy: &patched}, kitOwn{})
	example := mustLoadKit(t, sidecarKitDir).get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	for name, m := range map[string][2]map[string]string{
		"labels":      {patched.Spec.Template.Labels, example.Spec.Template.Labels},
		"annotations": {patched.Spec.Template.Annotations, example.Spec.Template.Annotations},
	} {
		for key, v := range m[1] {
			if m[0][key] != v {
				t.Errorf("vllm-pod-patch.yaml pod %s[%s] = %q, want the sidecar kit's %q", name, key, m[0][key], v)
			}
		}
	}
}

// TestKustomizeRejectsMistakes: each case changes one thing in one file
// under deploy/istio and building the kustomization must fail naming it.
func TestKustomizeRejectsMistakes(t *testing.T) {
	for _, c := range []struct {
		dir, file, old, new string
		wantErr             string
	}{
		{"plugin-only", "plugin-only/kustomization.yaml", "patches:", "patchs:", `unknown field "patchs"`},
		{"plugin-only", "plugin-only/kustomization.yaml", "- ../sidecar", "- ../sidecars", "sidecars"},
		{"plugin-only", "plugin-only/kustomization.yaml", "      name: vllm\n      namespace: llm-serving\n- patch", "      name: vlm\n      namespace: llm-serving\n- patch", "vlm"},
		{"plugin-only", "sidecar/wasmplugin.yaml", "pluginName:", "pluginname:", `unknown field "pluginname"`},
		{"plugin-only", "sidecar/kustomization.yaml", "resources:", "resource:", `unknown field "resource"`},
		{"inference-pool", "inference-pool/inferencepool.yaml", "targetPorts:", "targetPort:", `unknown field "spec.targetPort"`},
		{"inference-pool", "inference-pool/kustomization.yaml", "- httproute.yaml\n", "- httproutes.yaml\n", "httproutes.yaml"},
	} {
		t.Run(c.dir+"/"+c.file+"/"+c.new, func(t *testing.T) {
			orig := string(readFile(t, istioDir+"/"+c.file))
			if strings.Count(orig, c.old) != 1 {
				t.Fatalf("%s holds %q %d times, want once", c.file, c.old, strings.Count(orig, c.old))
			}
			_, err := renderKit(istioFS(t, map[string]string{c.file: strings.Replace(orig, c.old, c.new, 1)}), c.dir)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("renderKit(%s with %q -> %q) = %v, want an error containing %q", c.file, c.old, c.new, err, c.wantErr)
			}
		})
	}
}
