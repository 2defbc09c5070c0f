package manifests

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyFront is what the tests need from envoy.yaml once it has decoded.
type envoyFront struct {
	bootstrap *bootstrapv3.Bootstrap
	hcm       *hcmv3.HttpConnectionManager
	wasm      *wasmv3.PluginConfig
	config    any // the plugin configuration, decoded JSON
}

// loadEnvoy decodes and validates an envoy.yaml (see decodeBootstrap), finds
// the fairshare filter and decodes the plugin configuration it carries,
// which must be JSON.
func loadEnvoy(data []byte) (*envoyFront, error) {
	b, err := decodeBootstrap(data)
	if err != nil {
		return nil, err
	}
	f := &envoyFront{bootstrap: b}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		return nil, fmt.Errorf("want one listener with one filter chain of one filter")
	}
	f.hcm = new(hcmv3.HttpConnectionManager)
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(f.hcm); err != nil {
		return nil, fmt.Errorf("listener filter: %w", err)
	}
	var w wasmhttpv3.Wasm
	if err := f.filter("envoy.filters.http.wasm", &w); err != nil {
		return nil, err
	}
	f.wasm = w.GetConfig()
	var sv wrapperspb.StringValue
	if err := f.wasm.GetConfiguration().UnmarshalTo(&sv); err != nil {
		return nil, fmt.Errorf("wasm configuration: %w", err)
	}
	if err := json.Unmarshal([]byte(sv.GetValue()), &f.config); err != nil {
		return nil, fmt.Errorf("wasm configuration is not JSON: %w", err)
	}
	return f, nil
}

// filter decodes the typed_config of the HTTP filter named name into m.
func (f *envoyFront) filter(name string, m proto.Message) error {
	for i, h := range f.hcm.GetHttpFilters() {
		if h.GetName() == name {
			if err := h.GetTypedConfig().UnmarshalTo(m); err != nil {
				return fmt.Errorf("http_filters[%d] %s: %w", i, name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("no http filter %s", name)
}

func TestEnvoyBootstrap(t *testing.T) {
	f, err := loadEnvoy(readFile(t, envoyPath))
	if err != nil {
		t.Fatalf("%s: %v", envoyPath, err)
	}

	// The walk reached (and so validated) every typed_config.
	wantTypes := []string{
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
		"envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
		"envoy.extensions.filters.http.wasm.v3.Wasm",
		"google.protobuf.StringValue",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
	}
	if got := anyTypes(f.bootstrap); !slices.Equal(got, wantTypes) {
		t.Errorf("typed_config types = %v, want %v", got, wantTypes)
	}

	admin := f.bootstrap.GetAdmin().GetAddress().GetSocketAddress()
	if got := fmt.Sprintf("%s:%d", admin.GetAddress(), admin.GetPortValue()); got != "127.0.0.1:9901" {
		t.Errorf("admin address = %s, want 127.0.0.1:9901", got)
	}
	l := f.bootstrap.GetStaticResources().GetListeners()[0]
	la := l.GetAddress().GetSocketAddress()
	if got := fmt.Sprintf("%s:%d", la.GetAddress(), la.GetPortValue()); got != "0.0.0.0:10000" {
		t.Errorf("listener address = %s, want 0.0.0.0:10000", got)
	}

	var names []string
	for _, h := range f.hcm.GetHttpFilters() {
		names = append(names, h.GetName())
	}
	// Decoder filters run in list order: the client's team header is
	// removed, then jwt_authn writes it from the token, then the plugin
	// reads it.
	want := []string{"envoy.filters.http.header_mutation", "envoy.filters.http.jwt_authn", "envoy.filters.http.wasm", "envoy.filters.http.router"}
	if !slices.Equal(names, want) {
		t.Errorf("http_filters = %v, want %v", names, want)
	}
	teamHeader, _ := f.config.(map[string]any)["team_header"].(string)
	var hm headermutationv3.HeaderMutation
	if err := f.filter("envoy.filters.http.header_mutation", &hm); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, m := range hm.GetMutations().GetRequestMutations() {
		if m.GetRemove() != "" {
			removed = append(removed, strings.ToLower(m.GetRemove()))
		}
	}
	if !slices.Contains(removed, teamHeader) {
		t.Errorf("header_mutation removes %v, want the team header %q", removed, teamHeader)
	}
	var ja jwtauthnv3.JwtAuthentication
	if err := f.filter("envoy.filters.http.jwt_authn", &ja); err != nil {
		t.Fatal(err)
	}
	var writers []string
	for name, p := range ja.GetProviders() {
		for _, c := range p.GetClaimToHeaders() {
			if strings.EqualFold(c.GetHeaderName(), teamHeader) {
				writers = append(writers, name+":"+c.GetClaimName())
			}
		}
		if p.GetForward() {
			t.Errorf("jwt provider %s forwards the token to vLLM", name)
		}
		if c := p.GetRemoteJwks().GetHttpUri().GetCluster(); c != "" && !slices.ContainsFunc(f.bootstrap.GetStaticResources().GetClusters(),
			func(cl *clusterv3.Cluster) bool { return cl.GetName() == c }) {
			t.Errorf("jwt provider %s fetches keys from cluster %q, which is not defined", name, c)
		}
	}
	if len(writers) != 1 {
		t.Errorf("jwt providers writing %s: %v, want exactly one", teamHeader, writers)
	}
	// Every route requires a token: a single rule on prefix "/" naming a
	// provider.
	if rs := ja.GetRules(); len(rs) != 1 || rs[0].GetMatch().GetPrefix() != "/" || ja.GetProviders()[rs[0].GetRequires().GetProviderName()] == nil {
		t.Errorf("jwt_authn rules = %v, want one rule requiring a provider on prefix /", rs)
	}

	// Path normalisation: the plugin matches paths exactly, so the path it
	// sees must be the one vLLM serves.
	if !f.hcm.GetNormalizePath().GetValue() || !f.hcm.GetMergeSlashes() ||
		f.hcm.GetPathWithEscapedSlashesAction() != hcmv3.HttpConnectionManager_REJECT_REQUEST {
		t.Errorf("path normalisation: normalize_path %v, merge_slashes %v, path_with_escaped_slashes_action %v; want true, true, REJECT_REQUEST",
			f.hcm.GetNormalizePath().GetValue(), f.hcm.GetMergeSlashes(), f.hcm.GetPathWithEscapedSlashesAction())
	}

	w := f.wasm
	vm := w.GetVmConfig()
	for _, c := range []struct{ field, got, want string }{
		{"name", w.GetName(), "fairshare"},
		{"root_id", w.GetRootId(), "fairshare"},
		{"vm_config.vm_id", vm.GetVmId(), "fairshare"},
		{"vm_config.runtime", vm.GetRuntime(), "envoy.wasm.runtime.v8"},
		{"vm_config.code.local.filename", vm.GetCode().GetLocal().GetFilename(), "plugin.wasm"},
		{"failure_policy", w.GetFailurePolicy().String(), wasmv3.FailurePolicy_FAIL_OPEN.String()},
	} {
		if c.got != c.want {
			t.Errorf("wasm %s = %q, want %q", c.field, c.got, c.want)
		}
	}

	// The embedded plugin configuration is the example one.
	d := jsonDiff("config", f.config, exampleConfig(t))
	sort.Strings(d)
	for _, line := range d {
		t.Errorf("envoy.yaml plugin configuration differs from %s: %s", examplePath, line)
	}

	// Envoy must let through what the plugin is configured to accept: a
	// body of max_body_bytes is buffered whole (else Envoy answers 413),
	// and a stream may last request_timeout.
	cfg := f.config.(map[string]any)
	maxBody, _ := cfg["max_body_bytes"].(float64)
	if got := l.GetPerConnectionBufferLimitBytes().GetValue(); float64(got) < maxBody {
		t.Errorf("listener per_connection_buffer_limit_bytes = %d, want >= max_body_bytes %v", got, maxBody)
	}
	reqTimeout, err := time.ParseDuration(fmt.Sprint(cfg["request_timeout"]))
	if err != nil {
		t.Fatalf("request_timeout: %v", err)
	}
	vhs := f.hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetRoutes()) != 2 {
		t.Fatalf("want one virtual host with two routes (spill-over, catch-all), got %v", vhs)
	}
	for _, rt := range vhs[0].GetRoutes() {
		if to := rt.GetRoute().GetTimeout().AsDuration(); to != 0 && to < reqTimeout {
			t.Errorf("route %s timeout = %v, want 0 (none) or >= request_timeout %v", rt.GetRoute().GetCluster(), to, reqTimeout)
		}
	}
	if r := vhs[0].GetRoutes()[1].GetRoute(); r.GetCluster() != "vllm" {
		t.Errorf("catch-all route cluster = %q, want vllm", r.GetCluster())
	}

	cs := f.bootstrap.GetStaticResources().GetClusters()
	if len(cs) != 5 || cs[0].GetName() != "vllm" || cs[1].GetName() != "vllm-ondemand" || cs[2].GetName() != "vllm-engines" || cs[3].GetName() != "jwks" || cs[4].GetName() != "etcd" {
		t.Fatalf("clusters = %v, want vllm, vllm-ondemand, vllm-engines, jwks and etcd", cs)
	}
	if cs[3].GetTransportSocket() == nil {
		t.Errorf("cluster jwks has no transport_socket: keys fetched without TLS")
	}
	eps := cs[0].GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster vllm endpoints = %v, want one", eps)
	}
	ua := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if got := fmt.Sprintf("%s:%d", ua.GetAddress(), ua.GetPortValue()); got != "127.0.0.1:8000" {
		t.Errorf("cluster vllm endpoint = %s, want 127.0.0.1:8000", got)
	}
}

// TestEnvoyBootstrapRejectsMistakes checks that the loader is strict: each
// case changes one thing in envoy.yaml that Envoy would reject (or that
// would break the plugin), and loading must fail.
func TestEnvoyBootstrapRejectsMistakes(t *testing.T) {
	orig := string(readFile(t, envoyPath))
	for _, c := range []struct {
		name, old, new string
		wantErr        string // a part of the error message that names the mistake
	}{
		{"misspelt bootstrap field", "stats_config:", "stats_confg:", `unknown field "stats_confg"`},
		{"misspelt field inside a typed_config", "root_id: fairshare", "root_idd: fairshare", `unknown field "root_idd"`},
		{"misspelt enum value", "failure_policy: FAIL_OPEN", "failure_policy: FAIL_OPN", "FAIL_OPN"},
		{"unknown typed_config type", "http.router.v3.Router", "http.router.v3.Routr", "v3.Routr"},
		{"deprecated field", "failure_policy: FAIL_OPEN", "fail_open: true", "fail_open: deprecated field"},
		{"validation rule inside a typed_config", "stat_prefix: fairshare", `stat_prefix: ""`, "HttpConnectionManager.StatPrefix"},
		{"validation rule in the bootstrap", "port_value: 10000", "port_value: 70000", "SocketAddress.PortValue"},
		{"plugin configuration not JSON", `"pools": [`, `"pools" [`, "not JSON"},
		{"misspelt field in jwt_authn", "claim_to_headers:", "claims_to_headers:", `unknown field "claims_to_headers"`},
		{"misspelt field in header_mutation", "request_mutations:", "request_mutation:", `unknown field "request_mutation"`},
		{"misspelt path normalisation enum", "path_with_escaped_slashes_action: REJECT_REQUEST", "path_with_escaped_slashes_action: REJECT", "REJECT"},
		{"validation rule inside jwt_authn", "header_name: x-team", `header_name: ""`, "JwtClaimToHeader.HeaderName"},
		{"validation rule inside the tls context", "san_type: DNS", "san_type: SAN_TYPE_UNSPECIFIED", "SanType"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.Count(orig, c.old) != 1 {
				t.Fatalf("envoy.yaml holds %q %d times, want once", c.old, strings.Count(orig, c.old))
			}
			_, err := loadEnvoy([]byte(strings.Replace(orig, c.old, c.new, 1)))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("loadEnvoy(envoy.yaml with %q -> %q) = %v, want an error containing %q", c.old, c.new, err, c.wantErr)
			}
		})
	}
}

// TestEnvoyEtcdCluster: the cluster block of testdata/plugin/cluster.json
// names a cluster that envoy.yaml defines.
func TestEnvoyEtcdCluster(t *testing.T) {
	f, err := loadEnvoy(readFile(t, envoyPath))
	if err != nil {
		t.Fatalf("%s: %v", envoyPath, err)
	}
	var cfg struct {
		Cluster struct {
			EtcdCluster string `json:"etcd_cluster"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(readFile(t, "../../testdata/plugin/cluster.json"), &cfg); err != nil {
		t.Fatal(err)
	}
	name := cfg.Cluster.EtcdCluster
	if name == "" || !slices.ContainsFunc(f.bootstrap.GetStaticResources().GetClusters(), func(cl *clusterv3.Cluster) bool { return cl.GetName() == name }) {
		t.Errorf("cluster.json's etcd_cluster %q is not a cluster of %s", name, envoyPath)
	}
}

// flowReadyFor is the longest max_queue_time envoy.yaml must be ready for,
// whatever its plugin configuration sets: the plugin's request_timeout
// (the fairness benchmark runs flow control at 600 s).
const flowReadyFor = 10 * time.Minute

// flowSettings lists what envoy.yaml lacks for flow control with its
// plugin configuration and any max_queue_time up to flowReadyFor, and for
// hold_headers "on": the connection manager's stream_idle_timeout above
// the hold, request_timeout 0 or above it, the vllm cluster's circuit
// breakers sized for held plus in-flight requests (with hold_headers
// "off" a held request holds an upstream request), and
// allow_on_headers_stop_iteration true.
func flowSettings(f *envoyFront) []string {
	var out []string
	cfg := f.config.(map[string]any)
	hold := flowReadyFor
	if d, err := time.ParseDuration(fmt.Sprint(cfg["max_queue_time"])); err == nil && d > hold {
		hold = d
	}
	idle := 5 * time.Minute // Envoy's default
	if f.hcm.StreamIdleTimeout != nil {
		idle = f.hcm.GetStreamIdleTimeout().AsDuration()
	}
	if idle != 0 && idle <= hold {
		out = append(out, fmt.Sprintf("stream_idle_timeout %v, want above max_queue_time %v", idle, hold))
	}
	if rt := f.hcm.GetRequestTimeout().AsDuration(); rt != 0 && rt <= hold {
		out = append(out, fmt.Sprintf("request_timeout %v, want 0 or above max_queue_time %v", rt, hold))
	}
	queue, _ := cfg["queue_limit"].(float64)
	pools, _ := cfg["pools"].([]any)
	need := 0.0
	for _, p := range pools {
		c, _ := p.(map[string]any)["capacity"].(float64)
		need += queue + c
	}
	// Every cluster a route sends to (vllm, and the spill-over fallback's)
	// may get a pool's held and in-flight requests.
	for _, name := range routeClusters(f) {
		var cl *clusterv3.Cluster
		for _, c := range f.bootstrap.GetStaticResources().GetClusters() {
			if c.GetName() == name {
				cl = c
			}
		}
		var th *clusterv3.CircuitBreakers_Thresholds
		for _, t := range cl.GetCircuitBreakers().GetThresholds() {
			if t.GetPriority() == corev3.RoutingPriority_DEFAULT {
				th = t
			}
		}
		for _, b := range []struct {
			name string
			v    *wrapperspb.UInt32Value
		}{{"max_requests", th.GetMaxRequests()}, {"max_pending_requests", th.GetMaxPendingRequests()}, {"max_connections", th.GetMaxConnections()}} {
			got := uint32(1024) // Envoy's default
			if b.v != nil {
				got = b.v.GetValue()
			}
			if float64(got) < need {
				out = append(out, fmt.Sprintf("cluster %s circuit_breakers %s %d, want >= held + in flight %v", name, b.name, got, need))
			}
		}
	}
	if !f.wasm.GetAllowOnHeadersStopIteration().GetValue() {
		out = append(out, "allow_on_headers_stop_iteration not true (hold_headers \"on\" needs it)")
	}
	return out
}

// TestEnvoyFlowControlSettings: envoy.yaml carries what flow control
// needs (flowSettings); each mistake below is caught.
func TestEnvoyFlowControlSettings(t *testing.T) {
	orig := string(readFile(t, envoyPath))
	f, err := loadEnvoy([]byte(orig))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range flowSettings(f) {
		t.Errorf("envoy.yaml: %s", p)
	}
	for _, c := range []struct{ old, new, want string }{
		{"          stream_idle_timeout: 900s\n", "", "stream_idle_timeout 5m0s"},
		{"stream_idle_timeout: 900s", "stream_idle_timeout: 600s", "stream_idle_timeout 10m0s"},
		{"request_timeout: 0s", "request_timeout: 300s", "request_timeout 5m0s"},
		{"max_requests: 2048\n    load_assignment:\n      cluster_name: vllm\n", "max_requests: 1024\n    load_assignment:\n      cluster_name: vllm\n", "cluster vllm circuit_breakers max_requests 1024"},
		{"max_requests: 2048\n    load_assignment:\n      cluster_name: vllm-ondemand\n", "max_requests: 1000\n    load_assignment:\n      cluster_name: vllm-ondemand\n", "cluster vllm-ondemand circuit_breakers max_requests 1000"},
		{"allow_on_headers_stop_iteration: true", "allow_on_headers_stop_iteration: false", "allow_on_headers_stop_iteration"},
		{`"max_queue_time": "30s"`, `"max_queue_time": "20m"`, "above max_queue_time 20m0s"},
	} {
		if strings.Count(orig, c.old) != 1 {
			t.Fatalf("envoy.yaml holds %q %d times, want once", c.old, strings.Count(orig, c.old))
		}
		f, err := loadEnvoy([]byte(strings.Replace(orig, c.old, c.new, 1)))
		if err != nil {
			t.Fatalf("%q -> %q: %v", c.old, c.new, err)
		}
		if got := strings.Join(flowSettings(f), "; "); !strings.Contains(got, c.want) {
			t.Errorf("%q -> %q: problems %q, want one containing %q", c.old, c.new, got, c.want)
		}
	}
}
