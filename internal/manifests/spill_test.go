package manifests

import (
	"fmt"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/fairshare-wasm/fairshare/plugin"
)

// routeClusters are the clusters envoy.yaml's routes send to, in route
// order.
func routeClusters(f *envoyFront) []string {
	var out []string
	for _, vh := range f.hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			out = append(out, r.GetRoute().GetCluster())
		}
	}
	return out
}

// spillRoutes checks envoy.yaml's routes for spill-over: each route that
// matches a request header matches the plugin's routing header
// (plugin.HeaderPool) by exact value, comes before the catch-all (Envoy
// takes the first route that matches, so one after it is never reached),
// and sends to a defined cluster; the catch-all is last and has no header
// matcher. It returns the problems and the pools routed by header.
func spillRoutes(f *envoyFront) (problems []string, pools map[string]string) {
	pools = map[string]string{}
	clusters := map[string]bool{}
	for _, c := range f.bootstrap.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	vhs := f.hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 {
		return []string{fmt.Sprintf("%d virtual hosts, want 1", len(vhs))}, pools
	}
	rs := vhs[0].GetRoutes()
	for i, r := range rs {
		c := r.GetRoute().GetCluster()
		if !clusters[c] {
			problems = append(problems, fmt.Sprintf("route %d: cluster %q is not defined", i, c))
		}
		hs := r.GetMatch().GetHeaders()
		if len(hs) == 0 {
			if i != len(rs)-1 {
				problems = append(problems, fmt.Sprintf("route %d: a catch-all before route %d, which it hides", i, i+1))
			}
			continue
		}
		for _, h := range hs {
			exact := h.GetStringMatch().GetExact()
			switch {
			case h.GetName() != plugin.HeaderPool:
				problems = append(problems, fmt.Sprintf("route %d: matches header %q, the plugin routes by %s", i, h.GetName(), plugin.HeaderPool))
			case exact == "" || h.GetInvertMatch():
				problems = append(problems, fmt.Sprintf("route %d: %s must match one pool name exactly", i, h.GetName()))
			default:
				pools[exact] = c
			}
		}
		if r.GetMatch().GetPrefix() != "/" {
			problems = append(problems, fmt.Sprintf("route %d: prefix %q, want \"/\" (every scheduled path)", i, r.GetMatch().GetPrefix()))
		}
	}
	if len(rs) == 0 || len(rs[len(rs)-1].GetMatch().GetHeaders()) > 0 {
		problems = append(problems, "no catch-all route last")
	}
	return problems, pools
}

// TestEnvoySpillRoutes: envoy.yaml routes a request by the pool the
// plugin chose (x-fairshare-pool, added while the headers are held), the
// fallback pool llama-8b-ondemand to its own cluster, everything else to
// vllm; each mistake below is caught.
func TestEnvoySpillRoutes(t *testing.T) {
	orig := string(readFile(t, envoyPath))
	f, err := loadEnvoy([]byte(orig))
	if err != nil {
		t.Fatal(err)
	}
	problems, pools := spillRoutes(f)
	for _, p := range problems {
		t.Errorf("envoy.yaml: %s", p)
	}
	equalMap(t, pools, map[string]string{"llama-8b-ondemand": "vllm-ondemand"})
	var catchAll *routev3.Route
	if rs := f.hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes(); len(rs) > 0 {
		catchAll = rs[len(rs)-1]
	}
	if catchAll.GetRoute().GetCluster() != "vllm" {
		t.Errorf("catch-all cluster %q, want vllm", catchAll.GetRoute().GetCluster())
	}
	for _, c := range []struct{ old, new, want string }{
		{"- name: x-fairshare-pool\n", "- name: x-fairshare-poool\n", `matches header "x-fairshare-poool"`},
		{"cluster: vllm-ondemand\n", "cluster: vllm-od\n", `cluster "vllm-od" is not defined`},
		{"string_match: { exact: llama-8b-ondemand }", "string_match: { prefix: llama }", "must match one pool name exactly"},
	} {
		if strings.Count(orig, c.old) != 1 {
			t.Fatalf("envoy.yaml holds %q %d times, want once", c.old, strings.Count(orig, c.old))
		}
		f, err := loadEnvoy([]byte(strings.Replace(orig, c.old, c.new, 1)))
		if err != nil {
			t.Fatalf("%q -> %q: %v", c.old, c.new, err)
		}
		got, _ := spillRoutes(f)
		if s := strings.Join(got, "; "); !strings.Contains(s, c.want) {
			t.Errorf("%q -> %q: problems %q, want one containing %q", c.old, c.new, s, c.want)
		}
	}
	// The catch-all moved first hides the spill-over route.
	rs := f.hcm.GetRouteConfig().GetVirtualHosts()[0].Routes
	rs[0], rs[1] = rs[1], rs[0]
	got, _ := spillRoutes(f)
	if s := strings.Join(got, "; "); !strings.Contains(s, "a catch-all before route 1") {
		t.Errorf("catch-all first: problems %q", s)
	}
}

func equalMap(t *testing.T, got, want map[string]string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pools routed by header = %v, want %v", got, want)
	}
}
