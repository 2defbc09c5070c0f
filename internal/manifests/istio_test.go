package manifests

import (
	"encoding/json"
	"fmt"
	"github.com/fairshare-wasm/fairshare/plugin"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1 "istio.io/api/security/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The Istio deployment kits and the plugin-only overlay, relative to this
// package's directory.
// kustomizationFile is the kustomize entry point of a kit directory.
const kustomizationFile = "kustomization.yaml"

const (
	sidecarKitDir       = "../../deploy/istio/sidecar"
	gatewayKitDir       = "../../deploy/istio/gateway"
	etcdKitDir          = "../../deploy/istio/etcd"
	inferencePoolKitDir = "../../deploy/istio/inference-pool"
	pluginOnlyDir       = "../../deploy/istio/plugin-only"
)

// k8sKinds are the Kubernetes kinds a kit may hold that have a Go type, by
// "apiVersion kind", with a constructor of that type: the built-in kinds
// (k8s.io/api), the Gateway API's (sigs.k8s.io/gateway-api) and GIE's
// InferencePool (our reading of its CRD, gie_test.go: the Go module proxy
// refuses GIE's module).
var k8sKinds = map[string]func() metav1.Object{
	"v1 ConfigMap":                      func() metav1.Object { return new(corev1.ConfigMap) },
	"v1 Namespace":                      func() metav1.Object { return new(corev1.Namespace) },
	"v1 Secret":                         func() metav1.Object { return new(corev1.Secret) },
	"v1 Service":                        func() metav1.Object { return new(corev1.Service) },
	"v1 ServiceAccount":                 func() metav1.Object { return new(corev1.ServiceAccount) },
	"apps/v1 Deployment":                func() metav1.Object { return new(appsv1.Deployment) },
	"rbac.authorization.k8s.io/v1 Role": func() metav1.Object { return new(rbacv1.Role) },
	"rbac.authorization.k8s.io/v1 RoleBinding":     func() metav1.Object { return new(rbacv1.RoleBinding) },
	"gateway.networking.k8s.io/v1 Gateway":         func() metav1.Object { return new(gatewayv1.Gateway) },
	"gateway.networking.k8s.io/v1 HTTPRoute":       func() metav1.Object { return new(gatewayv1.HTTPRoute) },
	"inference.networking.k8s.io/v1 InferencePool": func() metav1.Object { return new(inferencePool) },
}

// schemaChecker is a decoded object that checks the rules its schema states
// beyond types and field names (enums, required fields, ranges): the CRD
// types written in this package implement it.
type schemaChecker interface {
	validate() error
}

// istioKinds are the Istio kinds a kit may hold, by "apiVersion kind", with
// a constructor of their spec's proto (istio.io/api).
var istioKinds = map[string]func() proto.Message{
	"extensions.istio.io/v1alpha1 WasmPlugin":  func() proto.Message { return new(extensionsv1alpha1.WasmPlugin) },
	"networking.istio.io/v1 Gateway":           func() proto.Message { return new(networkingv1.Gateway) },
	"networking.istio.io/v1 VirtualService":    func() proto.Message { return new(networkingv1.VirtualService) },
	"networking.istio.io/v1 DestinationRule":   func() proto.Message { return new(networkingv1.DestinationRule) },
	"networking.istio.io/v1 ServiceEntry":      func() proto.Message { return new(networkingv1.ServiceEntry) },
	"networking.istio.io/v1alpha3 EnvoyFilter": func() proto.Message { return new(networkingv1alpha3.EnvoyFilter) },
	"security.istio.io/v1 RequestAuthentication": func() proto.Message {
		return new(securityv1.RequestAuthentication)
	},
	"security.istio.io/v1 AuthorizationPolicy": func() proto.Message { return new(securityv1.AuthorizationPolicy) },
}

// kitObject is one Kubernetes object of a kit, decoded strictly.
type kitObject struct {
	file string        // file name inside the kit directory
	kind string        // the kind, e.g. WasmPlugin
	meta metav1.Object // name, namespace, labels, annotations
	// obj is the typed object: a k8s.io/api type (*appsv1.Deployment, ...)
	// or, for an Istio kind, the spec's istio.io/api proto.
	obj any
}

// kit is a directory of manifests, one object per file.
type kit struct {
	dir  string
	objs []kitObject
}

// decodeObject decodes one YAML manifest strictly: duplicate keys, unknown
// fields (at any depth, matched case-sensitively as the API server does) and
// unknown kinds are errors. Kubernetes kinds decode into their k8s.io/api
// type; Istio kinds into metav1.ObjectMeta plus their spec's proto.
func decodeObject(data []byte) (kitObject, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return kitObject{}, fmt.Errorf("yaml: %w", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return kitObject{}, fmt.Errorf("not an object: %w", err)
	}
	key := head.APIVersion + " " + head.Kind
	strictJSON := func(v any) error {
		strictErrs, err := kjson.UnmarshalStrict(js, v)
		if err != nil {
			return err
		}
		if len(strictErrs) > 0 {
			return fmt.Errorf("%s: %w", key, strictErrs[0])
		}
		return nil
	}
	if mk, ok := k8sKinds[key]; ok {
		obj := mk()
		if err := strictJSON(obj); err != nil {
			return kitObject{}, err
		}
		// Istio reads this annotation as a ProxyConfig in JSON; a misspelt
		// field there is silently ignored by nothing else. A Gateway's
		// infrastructure annotations reach the pods Istio deploys for it.
		switch o := obj.(type) {
		case *appsv1.Deployment:
			if pc, ok := o.Spec.Template.Annotations["proxy.istio.io/config"]; ok {
				if err := strict.Unmarshal([]byte(pc), new(meshv1alpha1.ProxyConfig)); err != nil {
					return kitObject{}, fmt.Errorf("%s: spec.template.metadata.annotations[proxy.istio.io/config]: %w", key, err)
				}
			}
		case *gatewayv1.Gateway:
			if inf := o.Spec.Infrastructure; inf != nil {
				if pc, ok := inf.Annotations["proxy.istio.io/config"]; ok {
					if err := strict.Unmarshal([]byte(pc), new(meshv1alpha1.ProxyConfig)); err != nil {
						return kitObject{}, fmt.Errorf("%s: spec.infrastructure.annotations[proxy.istio.io/config]: %w", key, err)
					}
				}
			}
		case *corev1.ConfigMap:
			// An EPP configuration held in a ConfigMap decodes strictly
			// too (gie_test.go).
			for name, v := range o.Data {
				if !strings.Contains(v, "kind: EndpointPickerConfig") {
					continue
				}
				if _, err := decodeEndpointPickerConfig([]byte(v)); err != nil {
					return kitObject{}, fmt.Errorf("%s: data[%s]: %w", key, name, err)
				}
			}
		}
		if v, ok := obj.(schemaChecker); ok {
			if err := v.validate(); err != nil {
				return kitObject{}, fmt.Errorf("%s: %w", key, err)
			}
		}
		return kitObject{kind: head.Kind, meta: obj, obj: obj}, nil
	}
	mk, ok := istioKinds[key]
	if !ok {
		return kitObject{}, fmt.Errorf("apiVersion %q kind %q: not a kind the kits may use", head.APIVersion, head.Kind)
	}
	var top struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       json.RawMessage   `json:"spec"`
	}
	if err := strictJSON(&top); err != nil {
		return kitObject{}, err
	}
	spec := mk()
	if err := strict.Unmarshal(top.Spec, spec); err != nil {
		return kitObject{}, fmt.Errorf("%s: spec: %w", key, err)
	}
	if ef, ok := spec.(*networkingv1alpha3.EnvoyFilter); ok {
		if err := checkListenerPatches(ef); err != nil {
			return kitObject{}, fmt.Errorf("%s: %w", key, err)
		}
		if _, err := clusterPatches(ef); err != nil {
			return kitObject{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	return kitObject{kind: head.Kind, meta: &top.Metadata, obj: spec}, nil
}

// checkListenerPatches decodes the value of every LISTENER patch of an
// EnvoyFilter strictly into Envoy's Listener proto: Istio keeps the value as
// a free-form Struct, so a misspelt Envoy field would otherwise pass.
func checkListenerPatches(ef *networkingv1alpha3.EnvoyFilter) error {
	for i, p := range ef.GetConfigPatches() {
		if p.GetApplyTo() != networkingv1alpha3.EnvoyFilter_LISTENER {
			continue
		}
		js, err := p.GetPatch().GetValue().MarshalJSON()
		if err != nil {
			return err
		}
		if err := strict.Unmarshal(js, new(listenerv3.Listener)); err != nil {
			return fmt.Errorf("spec.configPatches[%d].patch.value: %w", i, err)
		}
	}
	return nil
}

// clusterPatches decodes the value of every CLUSTER patch of an
// EnvoyFilter strictly into Envoy's Cluster proto and checks its
// validation rules (PGV), as envoy.yaml's clusters are: Istio keeps the
// value as a free-form Struct, so a misspelt field would otherwise pass.
// It returns the clusters of its ADD patches.
func clusterPatches(ef *networkingv1alpha3.EnvoyFilter) ([]*clusterv3.Cluster, error) {
	var added []*clusterv3.Cluster
	for i, p := range ef.GetConfigPatches() {
		if p.GetApplyTo() != networkingv1alpha3.EnvoyFilter_CLUSTER {
			continue
		}
		js, err := p.GetPatch().GetValue().MarshalJSON()
		if err != nil {
			return nil, err
		}
		c := new(clusterv3.Cluster)
		if err := strict.Unmarshal(js, c); err != nil {
			return nil, fmt.Errorf("spec.configPatches[%d].patch.value: %w", i, err)
		}
		if err := validateTree(c); err != nil {
			return nil, fmt.Errorf("spec.configPatches[%d].patch.value: %w", i, err)
		}
		if p.GetPatch().GetOperation() == networkingv1alpha3.EnvoyFilter_Patch_ADD {
			added = append(added, c)
		}
	}
	return added, nil
}

// listenerPatchValue returns the Listener of the EnvoyFilter's LISTENER
// patch (already checked by checkListenerPatches).
func listenerPatchValue(t *testing.T, ef *networkingv1alpha3.EnvoyFilter) *listenerv3.Listener {
	t.Helper()
	var found []*listenerv3.Listener
	for _, p := range ef.GetConfigPatches() {
		if p.GetApplyTo() != networkingv1alpha3.EnvoyFilter_LISTENER {
			continue
		}
		js, err := p.GetPatch().GetValue().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var l listenerv3.Listener
		if err := strict.Unmarshal(js, &l); err != nil {
			t.Fatal(err)
		}
		found = append(found, &l)
	}
	if len(found) != 1 {
		t.Fatalf("EnvoyFilter has %d LISTENER patches, want 1", len(found))
	}
	return found[0]
}

// loadKit decodes every .yaml file of dir (see decodeObject) but its
// kustomization.yaml (kustomize_test.go checks that one); replace maps a
// file name to contents used instead of the file's, for the mistake tests.
func loadKit(dir string, replace map[string]string) (*kit, error) {
	files, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .yaml files", dir)
	}
	k := &kit{dir: dir}
	for _, f := range files {
		name := filepath.Base(f)
		if name == kustomizationFile {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if r, ok := replace[name]; ok {
			data = []byte(r)
		}
		o, err := decodeObject(data)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
		}
		if o.meta.GetName() == "" {
			return nil, fmt.Errorf("%s/%s: metadata.name is empty", dir, name)
		}
		o.file = name
		k.objs = append(k.objs, o)
	}
	return k, nil
}

// mustLoadKit is loadKit that fails the test on an error.
func mustLoadKit(t *testing.T, dir string) *kit {
	t.Helper()
	k, err := loadKit(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// get returns the object of kind named name (any name if name is ""),
// failing the test unless there is exactly one.
func (k *kit) get(t *testing.T, kind, name string) kitObject {
	t.Helper()
	var found []kitObject
	for _, o := range k.objs {
		if o.kind == kind && (name == "" || o.meta.GetName() == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d objects of kind %s named %q, want 1", k.dir, len(found), kind, name)
	}
	return found[0]
}

// inventory lists the kit's objects as "Kind/name", sorted.
func (k *kit) inventory() []string {
	var s []string
	for _, o := range k.objs {
		s = append(s, o.kind+"/"+o.meta.GetName())
	}
	sort.Strings(s)
	return s
}

// pluginConfigOf returns the WasmPlugin's pluginConfig as generic JSON.
func pluginConfigOf(t *testing.T, wp *extensionsv1alpha1.WasmPlugin) map[string]any {
	t.Helper()
	js, err := wp.GetPluginConfig().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// vllmArg returns the value that follows flag in the container's args.
func vllmArg(t *testing.T, d *appsv1.Deployment, flag string) string {
	t.Helper()
	args := d.Spec.Template.Spec.Containers[0].Args
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("deployment %s: no %s in args %v", d.Name, flag, args)
	}
	return args[i+1]
}

// podLabelsMatch reports whether every label of sel is on the pod template
// of d (what a workload selector needs to reach d's pods).
func podLabelsMatch(sel map[string]string, d *appsv1.Deployment) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			return false
		}
	}
	return true
}

// digestURL is an OCI image URL pinned by manifest digest.
var digestURL = regexp.MustCompile(`^oci://([^/]+)/[^@:]+@sha256:[0-9a-f]{64}$`)

// pluginHost is where a kit runs the plugin: the pods of a Deployment the
// kit holds (the sidecar and gateway kits), or those Istio deploys for a
// Gateway API Gateway (the inference-pool kit).
type pluginHost struct {
	deploy  *appsv1.Deployment
	gateway *gatewayv1.Gateway
}

// String names the host in test messages.
func (h pluginHost) String() string {
	if h.deploy != nil {
		return "Deployment " + h.deploy.Name
	}
	return "Gateway " + h.gateway.Name
}

// reaches reports whether a policy with workload selector labels sel and
// targetRefs refs applies to the host's pods: a Deployment's by its pod
// labels (no targetRefs), a Gateway's by one targetRef naming it, or by the
// label Istio puts on the pods it deploys for it.
func (h pluginHost) reaches(sel map[string]string, refs []*typev1beta1.PolicyTargetReference) bool {
	if h.deploy != nil {
		return len(refs) == 0 && podLabelsMatch(sel, h.deploy)
	}
	if len(sel) > 0 {
		return len(refs) == 0 && len(sel) == 1 && sel[gatewayNameLabel] == h.gateway.Name
	}
	return len(refs) == 1 && refs[0].GetGroup() == gatewayv1.GroupName && refs[0].GetKind() == "Gateway" &&
		refs[0].GetName() == h.gateway.Name && refs[0].GetNamespace() == ""
}

// podAnnotations returns the annotations the host's pods carry.
func (h pluginHost) podAnnotations() map[string]string {
	if h.deploy != nil {
		return h.deploy.Spec.Template.Annotations
	}
	m := map[string]string{}
	if inf := h.gateway.Spec.Infrastructure; inf != nil {
		for k, v := range inf.Annotations {
			m[string(k)] = string(v)
		}
	}
	return m
}

// gatewayNameLabel is the label Istio sets on the pods of a Gateway it
// deploys (manifests/charts/istio-control/istio-discovery/files/
// kube-gateway.yaml at Istio 1.28.0).
const gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// kitOwn says where a kit's plugin configuration may differ from the
// example configuration; the caller checks each. Every kit may also read C
// from its engines (capacity_from: each kit's test checks the block
// against the cluster it ships).
type kitOwn struct {
	// capacity: pools[0].capacity is the kit's.
	capacity bool
	// cluster: the kit shares its pools through etcd (the cluster block).
	cluster bool
}

// checkKitCommon checks what every kit that runs the plugin shares; host is
// where the plugin runs, own where its configuration differs from the
// example configuration. It returns the plugin configuration.
func checkKitCommon(t *testing.T, k *kit, host pluginHost, own kitOwn) map[string]any {
	t.Helper()
	for _, o := range k.objs {
		if o.kind == "Namespace" {
			// The kit creates the namespace everything else lives in.
			if o.meta.GetName() != "llm-serving" {
				t.Errorf("%s: Namespace %q, want llm-serving, the kit's", o.file, o.meta.GetName())
			}
			continue
		}
		if o.meta.GetNamespace() != "llm-serving" {
			t.Errorf("%s: namespace %q, want llm-serving like the rest of the kit", o.file, o.meta.GetNamespace())
		}
	}

	// The WasmPlugin.
	wpo := k.get(t, "WasmPlugin", "fairshare")
	wp := wpo.obj.(*extensionsv1alpha1.WasmPlugin)
	m := digestURL.FindStringSubmatch(wp.GetUrl())
	if m == nil {
		t.Errorf("WasmPlugin url = %q, want oci://HOST/REPO@sha256:<64 hex> (pinned by digest)", wp.GetUrl())
	}
	for _, c := range []struct{ field, got, want string }{
		{"pluginName", wp.GetPluginName(), "fairshare"},
		{"type", wp.GetType().String(), "HTTP"},
		{"phase", wp.GetPhase().String(), "STATS"},
		{"failStrategy", wp.GetFailStrategy().String(), "FAIL_OPEN"},
	} {
		if c.got != c.want {
			t.Errorf("WasmPlugin %s = %q, want %q", c.field, c.got, c.want)
		}
	}
	if wp.GetTargetRef() != nil || !host.reaches(wp.GetSelector().GetMatchLabels(), wp.GetTargetRefs()) {
		t.Errorf("WasmPlugin selector %v targetRef %v targetRefs %v do not reach the pods of %s", wp.GetSelector().GetMatchLabels(), wp.GetTargetRef(), wp.GetTargetRefs(), host)
	}

	// Istio hands pluginConfig to the plugin as JSON; it is the example
	// configuration.
	cfg := pluginConfigOf(t, wp)
	d := jsonDiff("pluginConfig", any(cfg), exampleConfig(t))
	sort.Strings(d)
	for _, line := range d {
		if own.capacity && strings.HasPrefix(line, "pluginConfig.pools[0].capacity: ") ||
			own.cluster && line == "pluginConfig.cluster: only in the first" {
			continue
		}
		// A kit may read C from its engines (each kit's test checks the
		// block against the cluster it ships; the plugin must accept it).
		if line == "pluginConfig.pools[0].capacity_from: only in the first" {
			continue
		}
		// Every kit turns the user level on (the example leaves it off);
		// the JWT rules below must write the header it names.
		if line == "pluginConfig.user_header: only in the first" {
			continue
		}
		t.Errorf("%s pluginConfig differs from %s: %s", wpo.file, examplePath, line)
	}
	if js, err := json.Marshal(cfg); err != nil {
		t.Fatal(err)
	} else if c := plugin.CheckConfig(js); len(c.Problems) > 0 {
		t.Errorf("%s pluginConfig: the plugin refuses it: %v", wpo.file, c.Problems)
	}
	teamHeader, _ := cfg["team_header"].(string)
	maxBody, _ := cfg["max_body_bytes"].(float64)

	// The pull secret the WasmPlugin names holds credentials for its
	// registry.
	sec := k.get(t, "Secret", wp.GetImagePullSecret()).obj.(*corev1.Secret)
	if sec.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("secret %s: type %q, want %q", sec.Name, sec.Type, corev1.SecretTypeDockerConfigJson)
	}
	var dcj struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if errs, err := kjson.UnmarshalStrict([]byte(sec.StringData[corev1.DockerConfigJsonKey]), &dcj); err != nil || len(errs) > 0 {
		t.Errorf("secret %s: %s: %v %v", sec.Name, corev1.DockerConfigJsonKey, err, errs)
	}
	if m != nil {
		if _, ok := dcj.Auths[m[1]]; !ok {
			t.Errorf("secret %s: no auths entry for the image's registry %q (have %v)", sec.Name, m[1], dcj.Auths)
		}
	}

	// Identity: jwt_authn writes the team header from a claim, on the same
	// pods as the plugin.
	ra := k.get(t, "RequestAuthentication", "").obj.(*securityv1.RequestAuthentication)
	if !host.reaches(ra.GetSelector().GetMatchLabels(), ra.GetTargetRefs()) {
		t.Errorf("RequestAuthentication selector %v targetRefs %v do not reach the plugin's pods", ra.GetSelector().GetMatchLabels(), ra.GetTargetRefs())
	}
	if len(ra.GetJwtRules()) == 0 {
		t.Fatalf("RequestAuthentication has no jwtRules")
	}
	var claim string
	userHeader, _ := cfg["user_header"].(string)
	if userHeader == "" {
		t.Errorf("%s pluginConfig: no user_header: the kit's users are not divided", wpo.file)
	}
	for _, r := range ra.GetJwtRules() {
		if r.GetIssuer() == "" || r.GetJwksUri() == "" && r.GetJwks() == "" {
			t.Errorf("jwtRule %v: issuer and jwksUri (or jwks) must be set", r)
		}
		var n, nu int
		var userClaim string
		for _, h := range r.GetOutputClaimToHeaders() {
			if strings.EqualFold(h.GetHeader(), teamHeader) {
				n++
				if claim != "" && h.GetClaim() != claim {
					t.Errorf("jwtRules write %s from claims %q and %q", teamHeader, claim, h.GetClaim())
				}
				claim = h.GetClaim()
			}
			// The user header too is written from a claim, so that
			// jwt_authn removes a client's copy first: else a client
			// would pick its own user.
			if userHeader != "" && strings.EqualFold(h.GetHeader(), userHeader) {
				nu++
				userClaim = h.GetClaim()
			}
		}
		if n != 1 {
			t.Errorf("jwtRule %s: %d outputClaimToHeaders write %s, want 1", r.GetIssuer(), n, teamHeader)
		}
		if userHeader != "" && (nu != 1 || userClaim == "" || userClaim == claim) {
			t.Errorf("jwtRule %s: %d outputClaimToHeaders write %s (from %q), want 1, from a claim other than the team's %q", r.GetIssuer(), nu, userHeader, userClaim, claim)
		}
	}

	// Authorization: every rule that admits a request requires a verified
	// token carrying that claim.
	ap := k.get(t, "AuthorizationPolicy", "").obj.(*securityv1.AuthorizationPolicy)
	if !host.reaches(ap.GetSelector().GetMatchLabels(), ap.GetTargetRefs()) {
		t.Errorf("AuthorizationPolicy selector %v targetRefs %v do not reach the plugin's pods", ap.GetSelector().GetMatchLabels(), ap.GetTargetRefs())
	}
	if ap.GetAction() != securityv1.AuthorizationPolicy_ALLOW || len(ap.GetRules()) == 0 {
		t.Errorf("AuthorizationPolicy action %v with %d rules, want ALLOW with rules (anything else is denied)", ap.GetAction(), len(ap.GetRules()))
	}
	for i, r := range ap.GetRules() {
		if len(r.GetFrom()) == 0 {
			t.Errorf("AuthorizationPolicy rules[%d] has no from: it admits requests without a token", i)
		}
		for j, f := range r.GetFrom() {
			if len(f.GetSource().GetRequestPrincipals()) == 0 {
				t.Errorf("AuthorizationPolicy rules[%d].from[%d] has no requestPrincipals: it admits requests without a token", i, j)
			}
		}
		var hasClaim bool
		for _, c := range r.GetWhen() {
			hasClaim = hasClaim || c.GetKey() == "request.auth.claims["+claim+"]" && len(c.GetValues()) > 0
		}
		if !hasClaim {
			t.Errorf("AuthorizationPolicy rules[%d] does not require the claim %q that writes %s", i, claim, teamHeader)
		}
	}

	// The buffer limit lets a body of max_body_bytes through to the plugin.
	ef := k.get(t, "EnvoyFilter", "fairshare-buffer-limit").obj.(*networkingv1alpha3.EnvoyFilter)
	if !host.reaches(ef.GetWorkloadSelector().GetLabels(), ef.GetTargetRefs()) {
		t.Errorf("EnvoyFilter workloadSelector %v targetRefs %v do not reach the plugin's pods", ef.GetWorkloadSelector().GetLabels(), ef.GetTargetRefs())
	}
	limit := listenerPatchValue(t, ef).GetPerConnectionBufferLimitBytes().GetValue()
	if float64(limit) < maxBody {
		t.Errorf("EnvoyFilter per_connection_buffer_limit_bytes = %d, want >= max_body_bytes %v", limit, maxBody)
	}

	// The proxy's pods carry the stats tags and export the plugin's stats.
	ann := host.podAnnotations()
	cmName := ann["sidecar.istio.io/bootstrapOverride"]
	cm := k.get(t, "ConfigMap", cmName).obj.(*corev1.ConfigMap)
	checkStatsOverride(t, cm)
	var pc meshv1alpha1.ProxyConfig
	if err := strict.Unmarshal([]byte(ann["proxy.istio.io/config"]), &pc); err != nil {
		t.Errorf("%s: annotation proxy.istio.io/config: %v", host, err)
	}
	if !slices.Contains(pc.GetProxyStatsMatcher().GetInclusionPrefixes(), "wasmcustom.fairshare") {
		t.Errorf("%s: proxyStatsMatcher.inclusionPrefixes = %v, want wasmcustom.fairshare", host, pc.GetProxyStatsMatcher().GetInclusionPrefixes())
	}
	return cfg
}

// checkStatsOverride checks that a bootstrap-override ConfigMap decodes
// into the Bootstrap proto and carries envoy.yaml's stats_tags.
func checkStatsOverride(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	envoy, err := decodeBootstrap(readFile(t, envoyPath))
	if err != nil {
		t.Fatal(err)
	}
	js := cm.Data["custom_bootstrap.json"]
	if js == "" {
		t.Fatalf("ConfigMap %s: no data.custom_bootstrap.json", cm.Name)
	}
	override, err := decodeBootstrap([]byte(js))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	got, want := override.GetStatsConfig().GetStatsTags(), envoy.GetStatsConfig().GetStatsTags()
	if len(got) != len(want) {
		t.Fatalf("ConfigMap %s: %d stats_tags, envoy.yaml has %d", cm.Name, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("ConfigMap %s: stats_tags[%d] = %v, envoy.yaml has %v", cm.Name, i, got[i], want[i])
		}
	}
}

// capacityOf returns pools[0].capacity of a plugin configuration.
func capacityOf(t *testing.T, cfg map[string]any) int {
	t.Helper()
	pools, _ := cfg["pools"].([]any)
	if len(pools) != 1 {
		t.Fatalf("pluginConfig has %d pools, want 1", len(pools))
	}
	c, _ := pools[0].(map[string]any)["capacity"].(float64)
	return int(c)
}

// checkVLLM checks the vLLM Deployment: priority scheduling, and returns its
// --max-num-seqs and container port.
func checkVLLM(t *testing.T, d *appsv1.Deployment) (maxNumSeqs int, port int32) {
	t.Helper()
	if got := vllmArg(t, d, "--scheduling-policy"); got != "priority" {
		t.Errorf("vLLM --scheduling-policy %s, want priority (else vLLM ignores the priority fairshare writes)", got)
	}
	if _, err := fmt.Sscan(vllmArg(t, d, "--max-num-seqs"), &maxNumSeqs); err != nil {
		t.Fatalf("vLLM --max-num-seqs: %v", err)
	}
	ports := d.Spec.Template.Spec.Containers[0].Ports
	if len(ports) != 1 {
		t.Fatalf("vLLM container ports %v, want one", ports)
	}
	return maxNumSeqs, ports[0].ContainerPort
}

func TestSidecarKit(t *testing.T) {
	k := mustLoadKit(t, sidecarKitDir)
	want := []string{
		"AuthorizationPolicy/fairshare-require-team", "ConfigMap/fairshare-stats", "Deployment/vllm",
		"EnvoyFilter/fairshare-buffer-limit", "EnvoyFilter/fairshare-engine-metrics", "Namespace/llm-serving",
		"RequestAuthentication/fairshare-team", "Secret/fairshare-pull", "Service/vllm", "WasmPlugin/fairshare",
	}
	if got := k.inventory(); !slices.Equal(got, want) {
		t.Errorf("sidecar kit objects = %v, want %v", got, want)
	}
	vllm := k.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	cfg := checkKitCommon(t, k, pluginHost{deploy: vllm}, kitOwn{})
	seqs, port := checkVLLM(t, vllm)

	// One replica's max_num_seqs is the pool: the plugin sees only its
	// replica's requests.
	if c := capacityOf(t, cfg); c != seqs {
		t.Errorf("pool capacity %d, want the replica's --max-num-seqs %d", c, seqs)
	}
	wp := k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin)
	ms := wp.GetMatch()
	if len(ms) != 1 || ms[0].GetMode() != typev1beta1.WorkloadMode_SERVER || len(ms[0].GetPorts()) != 1 || ms[0].GetPorts()[0].GetNumber() != uint32(port) {
		t.Errorf("WasmPlugin match = %v, want inbound (SERVER) traffic on vLLM's port %d only", ms, port)
	}
	ef := k.get(t, "EnvoyFilter", "fairshare-buffer-limit").obj.(*networkingv1alpha3.EnvoyFilter)
	for _, p := range ef.GetConfigPatches() {
		if p.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_SIDECAR_INBOUND {
			t.Errorf("EnvoyFilter patch context %v, want SIDECAR_INBOUND (the listener that receives vLLM's traffic)", p.GetMatch().GetContext())
		}
	}
	svc := k.get(t, "Service", "vllm").obj.(*corev1.Service)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(port) {
		t.Errorf("Service vllm ports %v, want one targeting %d", svc.Spec.Ports, port)
	}
}

func TestGatewayKit(t *testing.T) {
	k := mustLoadKit(t, gatewayKitDir)
	want := []string{
		"AuthorizationPolicy/fairshare-require-team", "ConfigMap/fairshare-stats", "Deployment/llm-gateway",
		"Deployment/vllm", "DestinationRule/vllm", "EnvoyFilter/fairshare-buffer-limit", "EnvoyFilter/fairshare-engine-metrics", "Gateway/llm-gateway",
		"Namespace/llm-serving", "RequestAuthentication/fairshare-team", "Secret/fairshare-pull", "Service/llm-gateway", "Service/vllm",
		"VirtualService/vllm", "WasmPlugin/fairshare",
	}
	if got := k.inventory(); !slices.Equal(got, want) {
		t.Errorf("gateway kit objects = %v, want %v", got, want)
	}
	gw := k.get(t, "Deployment", "llm-gateway").obj.(*appsv1.Deployment)
	cfg := checkKitCommon(t, k, pluginHost{deploy: gw}, kitOwn{capacity: true, cluster: true})
	vllm := k.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	_, port := checkVLLM(t, vllm)

	// The gateway replicas act as one pool, its C read from the engines.
	for _, p := range gatewayFleet(t, k) {
		t.Error(p)
	}

	g := k.get(t, "Gateway", "").obj.(*networkingv1.Gateway)
	if !podLabelsMatch(g.GetSelector(), gw) {
		t.Errorf("Gateway selector %v does not select the gateway pods", g.GetSelector())
	}
	svc := k.get(t, "Service", "vllm").obj.(*corev1.Service)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(port) {
		t.Fatalf("Service vllm ports %v, want one targeting %d", svc.Spec.Ports, port)
	}
	host := svc.Name + "." + svc.Namespace + ".svc.cluster.local"
	vs := k.get(t, "VirtualService", "").obj.(*networkingv1.VirtualService)
	if !slices.Contains(vs.GetGateways(), k.get(t, "Gateway", "").meta.GetName()) {
		t.Errorf("VirtualService gateways %v do not name the Gateway", vs.GetGateways())
	}
	// The spill-over entries (match on the plugin's x-fairshare-pool,
	// exact), then the catch-all, last.
	hs := vs.GetHttp()
	if len(hs) == 0 {
		t.Fatalf("VirtualService: no http route")
	}
	for i, hr := range hs {
		if len(hr.GetRoute()) != 1 {
			t.Fatalf("VirtualService http[%d]: want one destination", i)
		}
		if to := hr.GetTimeout().AsDuration(); hr.GetTimeout() != nil && to < requestTimeout(t, cfg) {
			t.Errorf("VirtualService http[%d] timeout %v, want none or >= request_timeout", i, to)
		}
		if i == len(hs)-1 {
			if len(hr.GetMatch()) != 0 {
				t.Errorf("VirtualService: the last http route has a match: no catch-all")
			}
			continue
		}
		if len(hr.GetMatch()) != 1 || len(hr.GetMatch()[0].GetHeaders()) != 1 || hr.GetMatch()[0].GetHeaders()[plugin.HeaderPool].GetExact() == "" {
			t.Errorf("VirtualService http[%d]: want one match on %s (exact), got %v", i, plugin.HeaderPool, hr.GetMatch())
		}
	}
	route := hs[len(hs)-1]
	dst := route.GetRoute()[0].GetDestination()
	if dst.GetHost() != host || dst.GetPort().GetNumber() != uint32(svc.Spec.Ports[0].Port) {
		t.Errorf("VirtualService destination %s:%d, want %s:%d", dst.GetHost(), dst.GetPort().GetNumber(), host, svc.Spec.Ports[0].Port)
	}
	if to := route.GetTimeout().AsDuration(); route.GetTimeout() != nil && to < requestTimeout(t, cfg) {
		t.Errorf("VirtualService timeout %v, want none or >= request_timeout", to)
	}
	dr := k.get(t, "DestinationRule", "").obj.(*networkingv1.DestinationRule)
	if dr.GetHost() != host {
		t.Errorf("DestinationRule host %q, want %q", dr.GetHost(), host)
	}
	// A held request (hold_headers "off") holds an upstream request: the
	// breakers admit queue_limit per pool plus the capacity in flight.
	need := 0.0
	queue, _ := cfg["queue_limit"].(float64)
	for _, p := range cfg["pools"].([]any) {
		c, _ := p.(map[string]any)["capacity"].(float64)
		need += queue + c
	}
	cp := dr.GetTrafficPolicy().GetConnectionPool()
	for _, b := range []struct {
		name string
		v    int32
	}{{"tcp.maxConnections", cp.GetTcp().GetMaxConnections()}, {"http.http1MaxPendingRequests", cp.GetHttp().GetHttp1MaxPendingRequests()},
		{"http.http2MaxRequests", cp.GetHttp().GetHttp2MaxRequests()}} {
		got := b.v
		if got == 0 {
			got = 1024 // Envoy's default
		}
		if float64(got) < need {
			t.Errorf("DestinationRule connectionPool %s %d, want >= held + in flight %v", b.name, got, need)
		}
	}
	for _, o := range k.objs {
		if o.kind != "EnvoyFilter" {
			continue
		}
		for _, p := range o.obj.(*networkingv1alpha3.EnvoyFilter).GetConfigPatches() {
			if p.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_GATEWAY {
				t.Errorf("EnvoyFilter %s patch context %v, want GATEWAY", o.meta.GetName(), p.GetMatch().GetContext())
			}
		}
	}
}

// clusterPath is testdata/plugin/cluster.json: the example configuration
// with the cluster block.
const clusterPath = "../../testdata/plugin/cluster.json"

// gatewayFleet lists what the gateway kit k lacks for its replicas to act
// as one pool whose C is read from the engines: the cluster block, equal
// to cluster.json's but for the etcd it names, which must be the cluster
// Istio builds from the etcd kit's ServiceEntry (outbound|port||host) with
// host:port as the authority; pools[0].capacity the whole pool's C (vLLM
// replicas × --max-num-seqs: the replicas split it, and it is the fallback
// while no engine is read); and capacity_from reading every engine
// (engines "learned") with vLLM's --max-num-seqs as max_num_seqs (the
// cluster it reads through: TestKitsCapacityFrom).
func gatewayFleet(t *testing.T, k *kit) []string {
	t.Helper()
	gw := k.get(t, "Deployment", "llm-gateway").obj.(*appsv1.Deployment)
	vllm := k.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	seqs, _ := checkVLLM(t, vllm)
	if gw.Spec.Replicas == nil || vllm.Spec.Replicas == nil {
		return []string{"replicas must be set explicitly on both Deployments"}
	}
	r, vr := int(*gw.Spec.Replicas), int(*vllm.Spec.Replicas)
	cfg := pluginConfigOf(t, k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin))
	var out []string

	block, ok := cfg["cluster"].(map[string]any)
	if !ok {
		out = append(out, fmt.Sprintf("no cluster block: each of the %d gateway replicas would own the whole pool", r))
	} else {
		var want map[string]any
		if err := json.Unmarshal(readFile(t, clusterPath), &want); err != nil {
			t.Fatal(err)
		}
		for _, d := range jsonDiff("cluster", any(block), want["cluster"]) {
			if !strings.HasPrefix(d, "cluster.etcd_cluster: ") && !strings.HasPrefix(d, "cluster.authority: ") {
				out = append(out, fmt.Sprintf("cluster block differs from %s's: %s", clusterPath, d))
			}
		}
		se := mustLoadKit(t, etcdKitDir).get(t, "ServiceEntry", "etcd").obj.(*networkingv1.ServiceEntry)
		host, port := se.GetHosts()[0], se.GetPorts()[0].GetNumber()
		if got, want := block["etcd_cluster"], fmt.Sprintf("outbound|%d||%s", port, host); got != want {
			out = append(out, fmt.Sprintf("cluster.etcd_cluster %v is not %q, the cluster Istio builds from %s's ServiceEntry", got, want, etcdKitDir))
		}
		if got, want := block["authority"], fmt.Sprintf("%s:%d", host, port); got != want {
			out = append(out, fmt.Sprintf("cluster.authority %v, want %q (%s's ServiceEntry)", got, want, etcdKitDir))
		}
	}
	if c := capacityOf(t, cfg); c != vr*seqs {
		out = append(out, fmt.Sprintf("pool capacity %d, want the whole pool's C = %d vLLM replicas x --max-num-seqs %d = %d (the %d gateway replicas split it)",
			c, vr, seqs, vr*seqs, r))
	}
	if _, engines, _, ok := capacityFromOf(cfg, 0); !ok || engines != "learned" {
		out = append(out, fmt.Sprintf("pools[0].capacity_from %v engines %q, want engines \"learned\" (every vLLM replica that serves the gateway)", ok, engines))
	} else if n := cfg["pools"].([]any)[0].(map[string]any)["capacity_from"].(map[string]any)["max_num_seqs"]; n != float64(seqs) {
		out = append(out, fmt.Sprintf("pools[0].capacity_from.max_num_seqs %v, want vLLM's --max-num-seqs %d", n, seqs))
	}
	return out
}

// TestGatewayKitFleet: each mistake below in the gateway kit's fleet
// (the cluster block, the whole C, capacity_from) is caught.
func TestGatewayKitFleet(t *testing.T) {
	wp := string(readFile(t, gatewayKitDir+"/wasmplugin.yaml"))
	i, j := strings.Index(wp, "    cluster:\n"), strings.Index(wp, "    pools:\n")
	if i < 0 || j < i {
		t.Fatalf("wasmplugin.yaml: no cluster block before pools")
	}
	for _, c := range []struct {
		file, old, new string
		want           string
	}{
		{"wasmplugin.yaml", wp[i:j], "", "no cluster block"},
		{"wasmplugin.yaml", "      capacity: 128\n", "      capacity: 64\n", "want the whole pool's C = 2 vLLM replicas x --max-num-seqs 64 = 128"},
		{"vllm-deployment.yaml", "  replicas: 2\n", "  replicas: 3\n", "want the whole pool's C = 3 vLLM replicas"},
		{"wasmplugin.yaml", "etcd_cluster: outbound|2379||etcd.etcd.svc.cluster.local", "etcd_cluster: outbound|2379||etcd.default.svc.cluster.local", "the cluster Istio builds from"},
		{"wasmplugin.yaml", "authority: etcd.etcd.svc.cluster.local:2379", "authority: etcd.etcd.svc.cluster.local:2380", "cluster.authority"},
		{"wasmplugin.yaml", "      sync_interval: 1s\n", "      sync_interval: 2s\n", "cluster block differs from"},
		{"wasmplugin.yaml", "        max_num_seqs: 64\n", "        max_num_seqs: 32\n", "max_num_seqs 32, want vLLM's --max-num-seqs 64"},
		{"wasmplugin.yaml", "        engines: learned\n", "        engines: cluster\n", `want engines "learned"`},
	} {
		orig := string(readFile(t, gatewayKitDir+"/"+c.file))
		if strings.Count(orig, c.old) != 1 {
			t.Fatalf("%s holds %q %d times, want once", c.file, c.old, strings.Count(orig, c.old))
		}
		k, err := loadKit(gatewayKitDir, map[string]string{c.file: strings.Replace(orig, c.old, c.new, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(gatewayFleet(t, k), "; "); !strings.Contains(got, c.want) {
			t.Errorf("%s %q -> %q: problems %q, want one containing %q", c.file, c.old, c.new, got, c.want)
		}
	}
}

// TestKitsRejectMistakes checks that loading a kit is strict: each case
// misspells one thing in one file, and loadKit must fail naming it.
func TestKitsRejectMistakes(t *testing.T) {
	for _, c := range []struct {
		dir, file, old, new string
		wantErr             string
	}{
		{sidecarKitDir, "wasmplugin.yaml", "pluginName:", "pluginname:", `unknown field "pluginname"`},
		{sidecarKitDir, "wasmplugin.yaml", "mode: SERVER", "mode: SERVR", "SERVR"},
		{sidecarKitDir, "wasmplugin.yaml", "  namespace: llm-serving", "  namespce: llm-serving", `unknown field "metadata.namespce"`},
		{sidecarKitDir, "requestauthentication.yaml", "outputClaimToHeaders:", "outputClaimToHeader:", `unknown field "outputClaimToHeader"`},
		{sidecarKitDir, "authorizationpolicy.yaml", "requestPrincipals:", "requestPrincipal:", `unknown field "requestPrincipal"`},
		{sidecarKitDir, "envoyfilter-buffer.yaml", "applyTo: LISTENER", "applyTo: LISTNER", "LISTNER"},
		{sidecarKitDir, "vllm-deployment.yaml", "containerPort:", "containerport:", `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{sidecarKitDir, "vllm-service.yaml", "appProtocol:", "appProtocl:", `unknown field "spec.ports[0].appProtocl"`},
		{sidecarKitDir, "pull-secret.yaml", "stringData:", "stringdata:", `unknown field "stringdata"`},
		{sidecarKitDir, "stats-bootstrap.yaml", "kind: ConfigMap", "kind: ConfigMapp", `kind "ConfigMapp"`},
		{gatewayKitDir, "gateway.yaml", "servers:", "server:", `unknown field "server"`},
		{gatewayKitDir, "virtualservice.yaml", "gateways:", "gateway:", `unknown field "gateway"`},
		{gatewayKitDir, "destinationrule.yaml", "simple: LEAST_REQUEST", "simple: LEAST_REQUESTS", "LEAST_REQUESTS"},
		{gatewayKitDir, "envoyfilter-buffer.yaml", "context: GATEWAY", "contxt: GATEWAY", `unknown field "contxt"`},
		{gatewayKitDir, "gateway-deployment.yaml", "replicas: 2", "replica: 2", `unknown field "spec.replica"`},
		{gatewayKitDir, "wasmplugin.yaml", "imagePullSecret:", "imagePullSecrets:", `unknown field "imagePullSecrets"`},
		{gatewayKitDir, "requestauthentication.yaml", "jwksUri:", "jwks_url:", `unknown field "jwks_url"`},
		{gatewayKitDir, "wasmplugin.yaml", "kind: WasmPlugin", "kind: WasmPlugin\nstatus: {}", `unknown field "status"`},
		{gatewayKitDir, "envoyfilter-buffer.yaml", "per_connection_buffer_limit_bytes: 8388608", "per_connection_buffer_limit: 8388608", `unknown field "per_connection_buffer_limit"`},
		{gatewayKitDir, "gateway-deployment.yaml", `{"proxyStatsMatcher"`, `{"proxyStatMatcher"`, `unknown field "proxyStatMatcher"`},
		{sidecarKitDir, "envoyfilter-engine-metrics.yaml", "connect_timeout: 1s", "connect_timout: 1s", `unknown field "connect_timout"`},
		{gatewayKitDir, "envoyfilter-engine-metrics.yaml", "connect_timeout: 1s", "connect_timeout: 0s", "ConnectTimeout"},
		{gatewayKitDir, "envoyfilter-engine-metrics.yaml", "lb_policy: CLUSTER_PROVIDED", "lb_policy: CLUSTER_PROVIDE", "CLUSTER_PROVIDE"},
	} {
		t.Run(filepath.Base(c.dir)+"/"+c.file+"/"+c.new, func(t *testing.T) {
			orig := string(readFile(t, c.dir+"/"+c.file))
			if strings.Count(orig, c.old) != 1 {
				t.Fatalf("%s holds %q %d times, want once", c.file, c.old, strings.Count(orig, c.old))
			}
			_, err := loadKit(c.dir, map[string]string{c.file: strings.Replace(orig, c.old, c.new, 1)})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("loadKit(%s with %q -> %q) = %v, want an error containing %q", c.file, c.old, c.new, err, c.wantErr)
			}
		})
	}
}

// requestTimeout returns the plugin configuration's request_timeout.
func requestTimeout(t *testing.T, cfg map[string]any) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(fmt.Sprint(cfg["request_timeout"]))
	if err != nil {
		t.Fatalf("request_timeout: %v", err)
	}
	return d
}

// TestEtcdKit: the etcd kit declares one host and port, as HTTP, that
// the ServiceEntry and the DestinationRule agree on, and its README names
// the Envoy cluster Istio makes of them as the plugin's etcd_cluster.
func TestEtcdKit(t *testing.T) {
	k := mustLoadKit(t, etcdKitDir)
	if got, want := k.inventory(), []string{"DestinationRule/etcd", "ServiceEntry/etcd"}; !slices.Equal(got, want) {
		t.Errorf("etcd kit objects = %v, want %v", got, want)
	}
	se := k.get(t, "ServiceEntry", "etcd").obj.(*networkingv1.ServiceEntry)
	dr := k.get(t, "DestinationRule", "etcd").obj.(*networkingv1.DestinationRule)
	if len(se.GetHosts()) != 1 || len(se.GetPorts()) != 1 || se.GetPorts()[0].GetProtocol() != "HTTP" {
		t.Fatalf("ServiceEntry hosts %v ports %v, want one host and one HTTP port", se.GetHosts(), se.GetPorts())
	}
	host, port := se.GetHosts()[0], se.GetPorts()[0].GetNumber()
	if dr.GetHost() != host {
		t.Errorf("DestinationRule host %q, want the ServiceEntry's %q", dr.GetHost(), host)
	}
	readme := string(readFile(t, etcdKitDir+"/README.md"))
	if want := fmt.Sprintf(`"etcd_cluster": "outbound|%d||%s"`, port, host); !strings.Contains(readme, want) {
		t.Errorf("%s/README.md does not name the cluster %s", etcdKitDir, want)
	}
}
