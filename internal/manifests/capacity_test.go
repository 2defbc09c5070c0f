package manifests

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/fairshare-wasm/fairshare/plugin"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
)

// capacityPath is envoy.yaml's plugin configuration with capacity_from on
// (engines "learned", through envoy.yaml's ORIGINAL_DST cluster).
const capacityPath = "../../testdata/plugin/capacity.json"

// originalDstHeader is the header an ORIGINAL_DST cluster with
// use_http_header reads when http_header_name is empty (Envoy's
// OriginalDstLbConfig), and capacity_from.header's default.
const originalDstHeader = "x-envoy-original-dst-host"

// capacityFromOf returns pools[i].capacity_from of a decoded plugin
// configuration, with the defaults the plugin applies (engines "cluster",
// header x-envoy-original-dst-host); ok false when the pool has none.
func capacityFromOf(cfg map[string]any, i int) (cluster, engines, header string, ok bool) {
	pools, _ := cfg["pools"].([]any)
	if i >= len(pools) {
		return "", "", "", false
	}
	cf, ok := pools[i].(map[string]any)["capacity_from"].(map[string]any)
	if !ok {
		return "", "", "", false
	}
	cluster, _ = cf["cluster"].(string)
	engines, header = "cluster", originalDstHeader
	if s, ok := cf["engines"].(string); ok {
		engines = s
	}
	if s, ok := cf["header"].(string); ok {
		header = s
	}
	return cluster, engines, header, true
}

// learnedCluster lists what an Envoy cluster lacks to carry the reads of
// engines "learned" with the address in header: ORIGINAL_DST with
// lb_policy CLUSTER_PROVIDED (Envoy refuses any other), use_http_header
// on and reading that header, a connect timeout and explicit circuit
// breakers.
func learnedCluster(cl *clusterv3.Cluster, header string) []string {
	var out []string
	if cl.GetType() != clusterv3.Cluster_ORIGINAL_DST {
		out = append(out, fmt.Sprintf("cluster %s type %v, want ORIGINAL_DST", cl.GetName(), cl.GetType()))
	}
	if cl.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		out = append(out, fmt.Sprintf("cluster %s lb_policy %v, want CLUSTER_PROVIDED", cl.GetName(), cl.GetLbPolicy()))
	}
	od := cl.GetOriginalDstLbConfig()
	if !od.GetUseHttpHeader() {
		out = append(out, fmt.Sprintf("cluster %s: original_dst_lb_config.use_http_header not true: the plugin's header would not choose the engine", cl.GetName()))
	}
	name := od.GetHttpHeaderName()
	if name == "" {
		name = originalDstHeader
	}
	if !strings.EqualFold(name, header) {
		out = append(out, fmt.Sprintf("cluster %s reads header %q, the plugin sets %q", cl.GetName(), name, header))
	}
	if cl.GetConnectTimeout() == nil {
		out = append(out, fmt.Sprintf("cluster %s: no connect_timeout", cl.GetName()))
	}
	if len(cl.GetCircuitBreakers().GetThresholds()) == 0 {
		out = append(out, fmt.Sprintf("cluster %s: no circuit_breakers", cl.GetName()))
	}
	return out
}

// capacityClusters lists what envoy.yaml lacks for a plugin configuration's
// capacity_from blocks: each names a cluster of envoy.yaml; with engines
// "learned" it is a learnedCluster; and no route sends client requests to
// it (an ORIGINAL_DST cluster with use_http_header routed to would let a
// client's header pick any address).
func capacityClusters(f *envoyFront, cfg map[string]any) []string {
	var out []string
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range f.bootstrap.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	routed := map[string]bool{}
	for _, c := range routeClusters(f) {
		routed[c] = true
	}
	pools, _ := cfg["pools"].([]any)
	for i := range pools {
		name, engines, header, ok := capacityFromOf(cfg, i)
		if !ok {
			continue
		}
		cl := clusters[name]
		if cl == nil {
			out = append(out, fmt.Sprintf("pools[%d].capacity_from.cluster %q is not a cluster of envoy.yaml", i, name))
			continue
		}
		if engines == "learned" {
			out = append(out, learnedCluster(cl, header)...)
			if routed[name] {
				out = append(out, fmt.Sprintf("a route sends client requests to %s: a client's %s would choose the address", name, header))
			}
		}
	}
	return out
}

// TestEnvoyCapacityFrom: testdata/plugin/capacity.json is envoy.yaml's
// plugin configuration with one capacity_from block (engines "learned"),
// which the plugin accepts, and envoy.yaml ships the ORIGINAL_DST cluster
// it reads through; each mistake below is caught.
func TestEnvoyCapacityFrom(t *testing.T) {
	data := readFile(t, capacityPath)
	if c := plugin.CheckConfig(data); len(c.Problems) > 0 {
		t.Fatalf("%s: the plugin refuses it: %v", capacityPath, c.Problems)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	d := jsonDiff("config", any(cfg), exampleConfig(t))
	sort.Strings(d)
	if len(d) != 1 || d[0] != "config.pools[0].capacity_from: only in the first" {
		t.Errorf("%s differs from %s by %q, want by pools[0].capacity_from only", capacityPath, examplePath, d)
	}
	if _, engines, _, _ := capacityFromOf(cfg, 0); engines != "learned" {
		t.Errorf("%s: capacity_from.engines %q, want \"learned\" (any number of engines behind the front door)", capacityPath, engines)
	}
	// The engine count changes C by max_num_seqs per engine core: with
	// envoy.yaml's one engine, C stays the configured capacity.
	pool := cfg["pools"].([]any)[0].(map[string]any)
	if got, want := pool["capacity_from"].(map[string]any)["max_num_seqs"], pool["capacity"]; got != want {
		t.Errorf("%s: capacity_from.max_num_seqs %v, want the one engine's capacity %v", capacityPath, got, want)
	}

	orig := string(readFile(t, envoyPath))
	f, err := loadEnvoy([]byte(orig))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range capacityClusters(f, cfg) {
		t.Errorf("envoy.yaml with %s: %s", capacityPath, p)
	}
	for _, c := range []struct{ old, new, want string }{
		{"  - name: vllm-engines\n", "  - name: vllm-engine\n", `capacity_from.cluster "vllm-engines" is not a cluster of envoy.yaml`},
		{"    type: ORIGINAL_DST\n", "    type: STATIC\n", "type STATIC, want ORIGINAL_DST"},
		{"      use_http_header: true\n", "      use_http_header: false\n", "use_http_header not true"},
		{"      use_http_header: true\n", "      use_http_header: true\n      http_header_name: x-engine\n", `reads header "x-engine"`},
		{"                  cluster: vllm-ondemand\n", "                  cluster: vllm-engines\n", "a route sends client requests to vllm-engines"},
	} {
		if strings.Count(orig, c.old) != 1 {
			t.Fatalf("envoy.yaml holds %q %d times, want once", c.old, strings.Count(orig, c.old))
		}
		f, err := loadEnvoy([]byte(strings.Replace(orig, c.old, c.new, 1)))
		if err != nil {
			t.Fatalf("%q -> %q: %v", c.old, c.new, err)
		}
		if got := strings.Join(capacityClusters(f, cfg), "; "); !strings.Contains(got, c.want) {
			t.Errorf("%q -> %q: problems %q, want one containing %q", c.old, c.new, got, c.want)
		}
	}
	// envoy.yaml's own configuration (capacity_from off) names no cluster
	// it lacks either.
	for _, p := range capacityClusters(f, f.config.(map[string]any)) {
		t.Errorf("envoy.yaml: %s", p)
	}
}

// kitCapacity lists what a kit lacks for a plugin configuration's
// capacity_from blocks: each names a cluster that an EnvoyFilter of the kit
// adds (a CLUSTER patch, ADD, in a context Istio inserts it in for this
// host: SIDECAR_OUTBOUND, SIDECAR_INBOUND or ANY on a sidecar, GATEWAY or
// ANY on a gateway; InsertedClusters in Istio's
// pilot/pkg/networking/core/envoyfilter/cluster_patch.go) on the plugin's
// pods, never one of Istio's own (inbound|…, outbound|…,
// PassthroughCluster: without use_http_header or per replica, an http_call
// gets no host or another replica); with engines "cluster" a STATIC
// cluster to the local vLLM (127.0.0.1 on its containerPort), with
// engines "learned" a learnedCluster.
func kitCapacity(k *kit, host pluginHost, gateway bool, cfg map[string]any, vllmPort int32) []string {
	var out []string
	added := map[string]*clusterv3.Cluster{}
	for _, o := range k.objs {
		ef, ok := o.obj.(*networkingv1alpha3.EnvoyFilter)
		if !ok || !host.reaches(ef.GetWorkloadSelector().GetLabels(), ef.GetTargetRefs()) {
			continue
		}
		cs, err := clusterPatches(ef)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		i := 0
		for _, p := range ef.GetConfigPatches() {
			if p.GetApplyTo() != networkingv1alpha3.EnvoyFilter_CLUSTER || p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_ADD {
				continue
			}
			c := cs[i]
			i++
			switch ctx := p.GetMatch().GetContext(); {
			case ctx == networkingv1alpha3.EnvoyFilter_ANY,
				!gateway && (ctx == networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND || ctx == networkingv1alpha3.EnvoyFilter_SIDECAR_INBOUND),
				gateway && ctx == networkingv1alpha3.EnvoyFilter_GATEWAY:
				added[c.GetName()] = c
			default:
				out = append(out, fmt.Sprintf("EnvoyFilter %s adds cluster %s in context %v, which Istio does not build for %s", o.meta.GetName(), c.GetName(), ctx, host))
			}
		}
	}
	pools, _ := cfg["pools"].([]any)
	for i := range pools {
		name, engines, header, ok := capacityFromOf(cfg, i)
		if !ok {
			continue
		}
		if strings.Contains(name, "|") || name == "PassthroughCluster" {
			out = append(out, fmt.Sprintf("pools[%d].capacity_from.cluster %q is Istio's own: ORIGINAL_DST without use_http_header (an http_call gets no host) or every replica's", i, name))
			continue
		}
		cl := added[name]
		if cl == nil {
			out = append(out, fmt.Sprintf("pools[%d].capacity_from.cluster %q is not a cluster an EnvoyFilter of the kit adds for %s", i, name, host))
			continue
		}
		if engines == "learned" {
			out = append(out, learnedCluster(cl, header)...)
			continue
		}
		var eps []string
		for _, l := range cl.GetLoadAssignment().GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				a := e.GetEndpoint().GetAddress().GetSocketAddress()
				eps = append(eps, fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue()))
			}
		}
		if want := fmt.Sprintf("127.0.0.1:%d", vllmPort); cl.GetType() != clusterv3.Cluster_STATIC || len(eps) != 1 || eps[0] != want {
			out = append(out, fmt.Sprintf("cluster %s: type %v endpoints %v, want STATIC with the local vLLM %s only (engines \"cluster\" reads the engine the balancer picks)", name, cl.GetType(), eps, want))
		}
		if len(cl.GetCircuitBreakers().GetThresholds()) == 0 || cl.GetConnectTimeout() == nil {
			out = append(out, fmt.Sprintf("cluster %s: want connect_timeout and circuit_breakers", name))
		}
	}
	return out
}

// TestKitsCapacityFrom: the sidecar kit reads C from its replica's vLLM
// through the cluster its EnvoyFilter adds; the gateway kit reads every
// engine (engines "learned") through the ORIGINAL_DST cluster its
// EnvoyFilter adds, as capacity.json does through envoy.yaml's (its
// replicas agree on C through etcd: TestGatewayKit); each mistake below is
// caught.
func TestKitsCapacityFrom(t *testing.T) {
	sidecar := func(t *testing.T, replace map[string]string) []string {
		k, err := loadKit(sidecarKitDir, replace)
		if err != nil {
			t.Fatal(err)
		}
		vllm := k.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
		_, port := checkVLLM(t, vllm)
		cfg := pluginConfigOf(t, k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin))
		if _, engines, _, ok := capacityFromOf(cfg, 0); !ok || engines != "cluster" {
			return []string{fmt.Sprintf("pools[0].capacity_from %v engines %q, want engines \"cluster\" (the one local engine)", ok, engines)}
		}
		return kitCapacity(k, pluginHost{deploy: vllm}, false, cfg, port)
	}
	for _, p := range sidecar(t, nil) {
		t.Errorf("sidecar kit: %s", p)
	}

	gateway := func(t *testing.T, replace map[string]string) []string {
		k, err := loadKit(gatewayKitDir, replace)
		if err != nil {
			t.Fatal(err)
		}
		gw := k.get(t, "Deployment", "llm-gateway").obj.(*appsv1.Deployment)
		cfg := pluginConfigOf(t, k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin))
		if _, engines, _, ok := capacityFromOf(cfg, 0); !ok || engines != "learned" {
			return []string{fmt.Sprintf("pools[0].capacity_from %v engines %q, want engines \"learned\" (every engine behind the gateway)", ok, engines)}
		}
		return kitCapacity(k, pluginHost{deploy: gw}, true, cfg, 0)
	}
	for _, p := range gateway(t, nil) {
		t.Errorf("gateway kit: %s", p)
	}

	const ef = "envoyfilter-engine-metrics.yaml"
	for _, c := range []struct {
		gateway        bool
		file, old, new string
		want           string
	}{
		{false, "wasmplugin.yaml", "cluster: fairshare-vllm-metrics", "cluster: inbound|8000||", `"inbound|8000||" is Istio's own`},
		{false, "wasmplugin.yaml", "cluster: fairshare-vllm-metrics", "cluster: vllm-metrics", `"vllm-metrics" is not a cluster an EnvoyFilter of the kit adds`},
		{false, ef, "port_value: 8000", "port_value: 8001", "want STATIC with the local vLLM 127.0.0.1:8000 only"},
		{false, ef, "context: SIDECAR_OUTBOUND", "context: GATEWAY", "in context GATEWAY, which Istio does not build"},
		{false, ef, "      app: vllm\n", "      app: vllm-other\n", "is not a cluster an EnvoyFilter of the kit adds"},
		{true, ef, "use_http_header: true", "use_http_header: false", "use_http_header not true"},
		{true, ef, "type: ORIGINAL_DST", "type: STRICT_DNS", "type STRICT_DNS, want ORIGINAL_DST"},
		{true, ef, "name: vllm-engines", "name: engines", `"vllm-engines" is not a cluster an EnvoyFilter of the kit adds`},
		{true, ef, "context: GATEWAY", "context: SIDECAR_OUTBOUND", "in context SIDECAR_OUTBOUND"},
		{true, "wasmplugin.yaml", "cluster: vllm-engines", "cluster: outbound|8000||vllm.llm-serving.svc.cluster.local", "is Istio's own"},
		{true, "wasmplugin.yaml", "cluster: vllm-engines", "cluster: PassthroughCluster", "is Istio's own"},
	} {
		dir, check := sidecarKitDir, sidecar
		if c.gateway {
			dir, check = gatewayKitDir, gateway
		}
		orig := string(readFile(t, dir+"/"+c.file))
		if strings.Count(orig, c.old) != 1 {
			t.Fatalf("%s/%s holds %q %d times, want once", dir, c.file, c.old, strings.Count(orig, c.old))
		}
		got := strings.Join(check(t, map[string]string{c.file: strings.Replace(orig, c.old, c.new, 1)}), "; ")
		if !strings.Contains(got, c.want) {
			t.Errorf("%s/%s %q -> %q: problems %q, want one containing %q", dir, c.file, c.old, c.new, got, c.want)
		}
	}
}
