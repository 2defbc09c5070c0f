package manifests

// GIE's API types, as this package reads them. The Go module proxy refuses
// sigs.k8s.io/gateway-api-inference-extension (403), so the InferencePool
// and the EPP's EndpointPickerConfig are written here from their public
// definitions at kubernetes-sigs/gateway-api-inference-extension v1.5.0
// (df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849): the InferencePool from the CRD
// config/crd/bases/inference.networking.k8s.io_inferencepools.yaml (its
// openAPIV3Schema: field names, types, enums, bounds, required fields, the
// x-kubernetes-validations rules), the EndpointPickerConfig from
// apix/config/v1alpha1/endpointpickerconfig_types.go (the JSON names and
// types of its fields). Decoding is strict (kjson.UnmarshalStrict: unknown
// or misspelt fields and wrong types are errors) and validate checks the
// schema's remaining rules. Status is left out on purpose: a manifest must
// not carry one.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1 "istio.io/api/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// inferencePool is an InferencePool of inference.networking.k8s.io/v1.
type inferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              inferencePoolSpec `json:"spec"`
}

// inferencePoolSpec is the CRD's spec: required endpointPickerRef, selector
// and targetPorts.
type inferencePoolSpec struct {
	Selector          giePoolSelector `json:"selector"`
	TargetPorts       []giePort       `json:"targetPorts"`
	AppProtocol       string          `json:"appProtocol,omitempty"`
	EndpointPickerRef gieEPPRef       `json:"endpointPickerRef"`
}

// giePoolSelector selects the pool's pods by label (matchLabels only: the
// CRD has no matchExpressions).
type giePoolSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// giePort is a port number, 1–65535.
type giePort struct {
	Number int32 `json:"number"`
}

// gieEPPRef is the endpointPickerRef: the EPP's Service (kind defaults to
// Service) and its ext_proc port, and what the gateway does when the EPP
// cannot be reached.
type gieEPPRef struct {
	Group       *string  `json:"group,omitempty"`
	Kind        string   `json:"kind,omitempty"`
	Name        string   `json:"name"`
	Port        *giePort `json:"port,omitempty"`
	FailureMode string   `json:"failureMode,omitempty"`
}

// The CRD's patterns for a label value, an EPP kind and a group.
var (
	gieLabelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	gieKind       = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)
	gieGroup      = regexp.MustCompile(`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validate checks the CRD's rules beyond field names and types.
func (p *inferencePool) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	s := p.Spec
	if s.Selector.MatchLabels == nil {
		bad("spec.selector.matchLabels: required")
	}
	for k, v := range s.Selector.MatchLabels {
		if len(v) > 63 || !gieLabelValue.MatchString(v) {
			bad("spec.selector.matchLabels[%s]: %q is not a label value", k, v)
		}
	}
	if n := len(s.TargetPorts); n < 1 || n > 8 {
		bad("spec.targetPorts: %d items, want 1 to 8", n)
	}
	seen := map[int32]bool{}
	for i, tp := range s.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			bad("spec.targetPorts[%d].number: %d not in [1, 65535]", i, tp.Number)
		}
		if seen[tp.Number] {
			bad("spec.targetPorts[%d].number: %d: port number must be unique", i, tp.Number)
		}
		seen[tp.Number] = true
	}
	if a := s.AppProtocol; a != "" && a != "http" && a != "kubernetes.io/h2c" {
		bad("spec.appProtocol: %q, want http or kubernetes.io/h2c", a)
	}
	r := s.EndpointPickerRef
	if l := len(r.Name); l < 1 || l > 253 {
		bad("spec.endpointPickerRef.name: length %d not in [1, 253]", l)
	}
	if r.Group != nil && (len(*r.Group) > 253 || !gieGroup.MatchString(*r.Group)) {
		bad("spec.endpointPickerRef.group: %q is not a group", *r.Group)
	}
	if r.Kind != "" && (len(r.Kind) > 63 || !gieKind.MatchString(r.Kind)) {
		bad("spec.endpointPickerRef.kind: %q is not a kind", r.Kind)
	}
	if (r.Kind == "" || r.Kind == "Service") && r.Port == nil {
		bad("spec.endpointPickerRef: port is required when kind is 'Service' or unspecified (defaults to 'Service')")
	}
	if r.Port != nil && (r.Port.Number < 1 || r.Port.Number > 65535) {
		bad("spec.endpointPickerRef.port.number: %d not in [1, 65535]", r.Port.Number)
	}
	if f := r.FailureMode; f != "" && f != "FailOpen" && f != "FailClose" {
		bad("spec.endpointPickerRef.failureMode: %q, want FailOpen or FailClose", f)
	}
	return errors.Join(errs...)
}

// endpointPickerConfig is the EPP's configuration file
// (inference.networking.x-k8s.io/v1alpha1, kind EndpointPickerConfig).
type endpointPickerConfig struct {
	metav1.TypeMeta    `json:",inline"`
	FeatureGates       []string               `json:"featureGates,omitempty"`
	Plugins            []eppPluginSpec        `json:"plugins"`
	SchedulingProfiles []eppSchedulingProfile `json:"schedulingProfiles"`
	SaturationDetector *eppPluginRef          `json:"saturationDetector,omitempty"`
	DataLayer          *eppDataLayer          `json:"dataLayer,omitempty"`
	FlowControl        *eppFlowControl        `json:"flowControl,omitempty"`
	Parser             *eppPluginRef          `json:"parser,omitempty"`
}

// eppPluginSpec instantiates one plugin; its parameters are the plugin's
// own (free-form JSON).
type eppPluginSpec struct {
	Name       string         `json:"name,omitempty"`
	Type       string         `json:"type"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// eppSchedulingProfile names the plugins of one scheduling profile.
type eppSchedulingProfile struct {
	Name    string                `json:"name"`
	Plugins []eppSchedulingPlugin `json:"plugins"`
}

// eppSchedulingPlugin references a plugin, with a weight if it scores.
type eppSchedulingPlugin struct {
	PluginRef string   `json:"pluginRef"`
	Weight    *float64 `json:"weight,omitempty"`
}

// eppPluginRef references a plugin by name (saturationDetector, parser).
type eppPluginRef struct {
	PluginRef string `json:"pluginRef"`
}

// eppDataLayer lists the data layer's sources.
type eppDataLayer struct {
	Sources []struct {
		PluginRef  string         `json:"pluginRef"`
		Extractors []eppPluginRef `json:"extractors"`
	} `json:"sources"`
}

// eppFlowControl is the flowControl block (read only with the flowControl
// feature gate).
type eppFlowControl struct {
	MaxBytes                  *resource.Quantity `json:"maxBytes,omitempty"`
	MaxRequests               *resource.Quantity `json:"maxRequests,omitempty"`
	DefaultRequestTTL         *metav1.Duration   `json:"defaultRequestTTL,omitempty"`
	DefaultPriorityBand       *eppPriorityBand   `json:"defaultPriorityBand,omitempty"`
	PriorityBands             []eppPriorityBand  `json:"priorityBands,omitempty"`
	UsageLimitPolicyPluginRef string             `json:"usageLimitPolicyPluginRef,omitempty"`
}

// eppPriorityBand configures one priority band of the EPP's queues.
type eppPriorityBand struct {
	Priority          int                `json:"priority"`
	MaxBytes          *resource.Quantity `json:"maxBytes,omitempty"`
	MaxRequests       *resource.Quantity `json:"maxRequests,omitempty"`
	FairnessPolicyRef string             `json:"fairnessPolicyRef,omitempty"`
	OrderingPolicyRef string             `json:"orderingPolicyRef,omitempty"`
}

// decodeEndpointPickerConfig decodes an EPP configuration file strictly and
// checks that every plugin reference names a plugin it instantiates.
func decodeEndpointPickerConfig(data []byte) (*endpointPickerConfig, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var c endpointPickerConfig
	strictErrs, err := kjson.UnmarshalStrict(js, &c)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("EndpointPickerConfig: %w", strictErrs[0])
	}
	if c.APIVersion != "inference.networking.x-k8s.io/v1alpha1" || c.Kind != "EndpointPickerConfig" {
		return nil, fmt.Errorf("apiVersion %q kind %q, want inference.networking.x-k8s.io/v1alpha1 EndpointPickerConfig", c.APIVersion, c.Kind)
	}
	names := map[string]bool{}
	for i, p := range c.Plugins {
		if p.Type == "" {
			return nil, fmt.Errorf("plugins[%d].type: required", i)
		}
		name := p.Name
		if name == "" {
			name = p.Type
		}
		names[name] = true
	}
	var errs []error
	ref := func(path, r string) {
		if !names[r] {
			errs = append(errs, fmt.Errorf("%s: %q names no plugin of plugins", path, r))
		}
	}
	if len(c.SchedulingProfiles) == 0 {
		errs = append(errs, errors.New("schedulingProfiles: required"))
	}
	for i, sp := range c.SchedulingProfiles {
		for j, p := range sp.Plugins {
			ref(fmt.Sprintf("schedulingProfiles[%d].plugins[%d].pluginRef", i, j), p.PluginRef)
		}
	}
	if c.SaturationDetector != nil {
		ref("saturationDetector.pluginRef", c.SaturationDetector.PluginRef)
	}
	if c.Parser != nil {
		ref("parser.pluginRef", c.Parser.PluginRef)
	}
	return &c, errors.Join(errs...)
}

// TestInferencePoolKit: deploy/istio/inference-pool puts the plugin in
// front of a GIE InferencePool and its EPP at a Gateway API gateway. Every
// object decodes strictly (loadKit), and the objects agree: the plugin's
// policies reach the Gateway's pods, the plugin's team and the EPP's
// fairness ID come from one verified claim and the client cannot set the
// EPP's objective or model rewrite, the route sends to the pool, the pool
// names the EPP's Service and port and selects the example vLLM's pods on
// their port, the pool's capacity is the example vLLM's replicas x
// --max-num-seqs, the EPP is configured for this pool with its flow control
// off (the plugin holds).
func TestInferencePoolKit(t *testing.T) {
	k := mustLoadKit(t, inferencePoolKitDir)
	want := []string{
		"AuthorizationPolicy/fairshare-require-team", "ConfigMap/fairshare-stats", "ConfigMap/llama-8b-epp",
		"Deployment/llama-8b-epp", "DestinationRule/llama-8b-epp", "EnvoyFilter/fairshare-buffer-limit",
		"Gateway/llm-gateway", "HTTPRoute/llm", "InferencePool/llama-8b", "RequestAuthentication/fairshare-team",
		"Role/llama-8b-epp", "RoleBinding/llama-8b-epp", "Secret/fairshare-pull", "Service/llama-8b-epp",
		"ServiceAccount/llama-8b-epp", "WasmPlugin/fairshare",
	}
	if got := k.inventory(); !slices.Equal(got, want) {
		t.Errorf("inference-pool kit objects = %v, want %v", got, want)
	}
	gw := k.get(t, "Gateway", "llm-gateway").obj.(*gatewayv1.Gateway)
	cfg := checkKitCommon(t, k, pluginHost{gateway: gw}, kitOwn{capacity: true})
	if gw.Spec.GatewayClassName != "istio" {
		t.Errorf("Gateway class %q, want istio (Istio deploys and programs it)", gw.Spec.GatewayClassName)
	}
	ef := k.get(t, "EnvoyFilter", "").obj.(*networkingv1alpha3.EnvoyFilter)
	for _, p := range ef.GetConfigPatches() {
		if p.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_GATEWAY {
			t.Errorf("EnvoyFilter patch context %v, want GATEWAY", p.GetMatch().GetContext())
		}
	}

	// One identity: the claim that writes the plugin's team header writes
	// the EPP's fairness IDs, and the EPP's client-settable headers are
	// removed (written from a claim the AuthorizationPolicy does not
	// require, i.e. that the tokens do not carry).
	teamHeader, _ := cfg["team_header"].(string)
	ra := k.get(t, "RequestAuthentication", "").obj.(*securityv1.RequestAuthentication)
	for _, r := range ra.GetJwtRules() {
		from := map[string]string{}
		for _, h := range r.GetOutputClaimToHeaders() {
			from[strings.ToLower(h.GetHeader())] = h.GetClaim()
		}
		team := from[teamHeader]
		for _, h := range []string{"x-gateway-inference-fairness-id", "x-llm-d-inference-fairness-id"} {
			if from[h] != team {
				t.Errorf("jwtRule %s: %s from claim %q, want the team header's claim %q", r.GetIssuer(), h, from[h], team)
			}
		}
		for _, h := range []string{"x-gateway-inference-objective", "x-gateway-model-name-rewrite"} {
			if c, ok := from[h]; !ok || c == team {
				t.Errorf("jwtRule %s: %s is not written from a claim other than %q (got %q, %v): a client could set it", r.GetIssuer(), h, team, c, ok)
			}
		}
	}

	// The route: the Gateway's one rule sends everything to the pool.
	pool := k.get(t, "InferencePool", "").obj.(*inferencePool)
	rt := k.get(t, "HTTPRoute", "").obj.(*gatewayv1.HTTPRoute)
	if len(rt.Spec.ParentRefs) != 1 || string(rt.Spec.ParentRefs[0].Name) != gw.Name || rt.Spec.ParentRefs[0].Kind == nil || *rt.Spec.ParentRefs[0].Kind != "Gateway" {
		t.Errorf("HTTPRoute parentRefs %v, want the Gateway %s", rt.Spec.ParentRefs, gw.Name)
	}
	if len(rt.Spec.Rules) != 1 || len(rt.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("HTTPRoute: want one rule with one backendRef")
	}
	br := rt.Spec.Rules[0].BackendRefs[0]
	if br.Group == nil || *br.Group != "inference.networking.k8s.io" || br.Kind == nil || *br.Kind != "InferencePool" || string(br.Name) != pool.Name {
		t.Errorf("HTTPRoute backendRef %v, want the InferencePool %s (group inference.networking.k8s.io)", br, pool.Name)
	}
	if to := rt.Spec.Rules[0].Timeouts; to != nil && to.Request != nil {
		d, err := time.ParseDuration(string(*to.Request))
		if err != nil || d != 0 && d < requestTimeout(t, cfg) {
			t.Errorf("HTTPRoute timeouts.request %q, want none, 0s or >= request_timeout (%v)", *to.Request, err)
		}
	}

	// The pool selects the example vLLM's pods on their port, and the
	// plugin's capacity is that pool's (one gateway replica).
	vk := mustLoadKit(t, gatewayKitDir)
	vllm := vk.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	seqs, port := checkVLLM(t, vllm)
	if !podLabelsMatch(pool.Spec.Selector.MatchLabels, vllm) {
		t.Errorf("InferencePool selector %v does not select the example vLLM's pods %v", pool.Spec.Selector.MatchLabels, vllm.Spec.Template.Labels)
	}
	if len(pool.Spec.TargetPorts) != 1 || pool.Spec.TargetPorts[0].Number != port {
		t.Errorf("InferencePool targetPorts %v, want vLLM's port %d", pool.Spec.TargetPorts, port)
	}
	if c := capacityOf(t, cfg); vllm.Spec.Replicas == nil || c != int(*vllm.Spec.Replicas)*seqs {
		t.Errorf("pool capacity %d, want the example vLLM's replicas x --max-num-seqs %d (one gateway replica)", c, seqs)
	}

	// The EPP: its Service is the pool's endpointPickerRef, its pods serve
	// that port, it is told this pool, and it reads its configuration from
	// the ConfigMap it mounts, with flow control off.
	ref := pool.Spec.EndpointPickerRef
	svc := k.get(t, "Service", ref.Name).obj.(*corev1.Service)
	epp := k.get(t, "Deployment", "").obj.(*appsv1.Deployment)
	if !podLabelsMatch(svc.Spec.Selector, epp) {
		t.Errorf("Service %s selector %v does not select the EPP's pods %v", svc.Name, svc.Spec.Selector, epp.Spec.Template.Labels)
	}
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if ref.Port != nil && svc.Spec.Ports[i].Port == ref.Port.Number {
			svcPort = &svc.Spec.Ports[i]
		}
	}
	if svcPort == nil {
		t.Fatalf("Service %s has no port %v (the pool's endpointPickerRef)", svc.Name, ref.Port)
	}
	c := epp.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == svcPort.TargetPort.IntVal }) {
		t.Errorf("EPP container ports %v lack the ext_proc port %d", c.Ports, svcPort.TargetPort.IntVal)
	}
	arg := func(flag string) string {
		i := slices.Index(c.Args, flag)
		if i < 0 || i+1 >= len(c.Args) {
			t.Fatalf("EPP args %v: no %s", c.Args, flag)
		}
		return c.Args[i+1]
	}
	if arg("--pool-name") != pool.Name || arg("--pool-namespace") != pool.Namespace || arg("--pool-group") != "inference.networking.k8s.io" {
		t.Errorf("EPP args %v do not name the pool %s/%s", c.Args, pool.Namespace, pool.Name)
	}
	if epp.Spec.Template.Spec.ServiceAccountName != k.get(t, "ServiceAccount", "").meta.GetName() {
		t.Errorf("EPP serviceAccountName %q, want the kit's ServiceAccount", epp.Spec.Template.Spec.ServiceAccountName)
	}
	rb := k.get(t, "RoleBinding", "").obj.(*rbacv1.RoleBinding)
	role := k.get(t, "Role", rb.RoleRef.Name).obj.(*rbacv1.Role)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != epp.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("RoleBinding subjects %v, want the EPP's ServiceAccount", rb.Subjects)
	}
	for _, need := range []struct{ group, resource string }{{"", "pods"}, {"inference.networking.k8s.io", "inferencepools"}, {"inference.networking.x-k8s.io", "inferenceobjectives"}} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, need.group) && slices.Contains(r.Resources, need.resource) && slices.Contains(r.Verbs, "watch")
		}) {
			t.Errorf("Role %s does not let the EPP watch %s %q", role.Name, need.resource, need.group)
		}
	}
	file := arg("--config-file")
	dir, key, _ := strings.Cut(strings.TrimPrefix(file, "/"), "/")
	var cmName string
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/"+dir {
			for _, v := range epp.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
		}
	}
	cm := k.get(t, "ConfigMap", cmName).obj.(*corev1.ConfigMap)
	ec, err := decodeEndpointPickerConfig([]byte(cm.Data[key]))
	if err != nil {
		t.Fatalf("ConfigMap %s data[%s] (the EPP's --config-file %s): %v", cmName, key, file, err)
	}
	if slices.Contains(ec.FeatureGates, "flowControl") {
		t.Errorf("EPP featureGates %v enable flowControl: the kit's one holder is the plugin (README)", ec.FeatureGates)
	}

	// The gateway reaches the EPP over TLS without verifying its
	// self-signed certificate.
	dr := k.get(t, "DestinationRule", "").obj.(*networkingv1.DestinationRule)
	if dr.GetHost() != svc.Name+"."+svc.Namespace+".svc.cluster.local" || dr.GetTrafficPolicy().GetTls().GetMode() != networkingv1.ClientTLSSettings_SIMPLE {
		t.Errorf("DestinationRule host %q tls %v, want %s.%s.svc.cluster.local with SIMPLE TLS", dr.GetHost(), dr.GetTrafficPolicy().GetTls(), svc.Name, svc.Namespace)
	}
	wp := k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin)
	if wp.GetPhase() != extensionsv1alpha1.PluginPhase_STATS {
		t.Errorf("WasmPlugin phase %v: every phase runs before the pool's ext_proc, STATS after authn and authz", wp.GetPhase())
	}
}

// TestGIEDecodingRejectsMistakes: the InferencePool and EPP types are as
// strict as the API server's schema: each case changes one thing in one
// file of the inference-pool kit and loadKit must fail naming it.
func TestGIEDecodingRejectsMistakes(t *testing.T) {
	for _, c := range []struct {
		file, old, new string
		wantErr        string
	}{
		{"inferencepool.yaml", "targetPorts:", "targetPort:", `unknown field "spec.targetPort"`},
		{"inferencepool.yaml", "  - number: 8000", "  - number: \"8000\"", "spec.targetPorts"},
		{"inferencepool.yaml", "  - number: 8000", "  - number: 70000", "not in [1, 65535]"},
		{"inferencepool.yaml", "failureMode: FailOpen", "failureMode: FailOpn", "FailOpn"},
		{"inferencepool.yaml", "appProtocol: http", "appProtocol: grpc", `"grpc"`},
		{"inferencepool.yaml", "    port:\n      number: 9002\n", "", "port is required"},
		{"inferencepool.yaml", "kind: InferencePool", "kind: InferencePool\nstatus: {}", `unknown field "status"`},
		{"inferencepool.yaml", "apiVersion: inference.networking.k8s.io/v1", "apiVersion: inference.networking.x-k8s.io/v1alpha2", "not a kind the kits may use"},
		{"epp-configmap.yaml", "schedulingProfiles:", "schedulingProfile:", `unknown field "schedulingProfile"`},
		{"epp-configmap.yaml", "      - pluginRef: queue-scorer", "      - pluginRef: queue-scorr", `"queue-scorr" names no plugin`},
		{"epp-configmap.yaml", "        weight: 2\n      - pluginRef: kv", "        weight: two\n      - pluginRef: kv", "weight"},
		{"httproute.yaml", "backendRefs:", "backendRef:", `unknown field "spec.rules[0].backendRef"`},
		{"gateway.yaml", "gatewayClassName:", "gatewayClass:", `unknown field "spec.gatewayClass"`},
		{"gateway.yaml", `{"proxyStatsMatcher"`, `{"proxyStatMatcher"`, `unknown field "proxyStatMatcher"`},
		{"wasmplugin.yaml", "targetRefs:", "targetRefz:", `unknown field "targetRefz"`},
		{"epp-role.yaml", "verbs: [\"get\", \"watch\", \"list\"]\n- apiGroups: [\"inference.networking.k8s.io\"]", "verb: [\"get\", \"watch\", \"list\"]\n- apiGroups: [\"inference.networking.k8s.io\"]", `unknown field "rules[0].verb"`},
		{"epp-deployment.yaml", "serviceAccountName:", "serviceAccount_name:", `unknown field "spec.template.spec.serviceAccount_name"`},
	} {
		t.Run(c.file+"/"+c.new, func(t *testing.T) {
			orig := string(readFile(t, inferencePoolKitDir+"/"+c.file))
			if strings.Count(orig, c.old) != 1 {
				t.Fatalf("%s holds %q %d times, want once", c.file, c.old, strings.Count(orig, c.old))
			}
			_, err := loadKit(inferencePoolKitDir, map[string]string{c.file: strings.Replace(orig, c.old, c.new, 1)})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("loadKit(%s with %q -> %q) = %v, want an error containing %q", c.file, c.old, c.new, err, c.wantErr)
			}
		})
	}
}
