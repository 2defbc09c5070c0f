package manifests

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairshare-wasm/fairshare/plugin"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	securityv1 "istio.io/api/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The kind overlay (deploy/istio/kind: the gateway kit on a laptop, in
// front of the vLLM simulator) and its smoke test, relative to this
// package's directory.
const (
	kindDir       = "../../deploy/istio/kind"
	kindSmoke     = kindDir + "/smoke.sh"
	vllmsimSource = "../../cmd/vllmsim/main.go"
)

// kindFarFuture is 2099-01-01T00:00:00Z: the kind tokens must not expire
// before it (they were signed once; the key is gone).
const kindFarFuture = 4070908800

// flagValue returns the value that follows flag in args ("" if absent).
func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// renderKind renders the kind overlay and returns it with its parts the
// tests read.
func renderKind(t *testing.T) (k *kit, gw, vllm *appsv1.Deployment, wp *extensionsv1alpha1.WasmPlugin, cfg map[string]any) {
	t.Helper()
	k, err := renderKit(istioFS(t, nil), "kind")
	if err != nil {
		t.Fatal(err)
	}
	gw = k.get(t, "Deployment", "llm-gateway").obj.(*appsv1.Deployment)
	vllm = k.get(t, "Deployment", "vllm").obj.(*appsv1.Deployment)
	wp = k.get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin)
	return k, gw, vllm, wp, pluginConfigOf(t, wp)
}

// TestKindOverlay: deploy/istio/kind renders the gateway kit with one
// gateway replica in front of one simulated engine, the plugin read from a
// file an init container puts where the istio-proxy container mounts it,
// and the same plugin configuration but for the pool's capacity and its
// capacity_from.max_num_seqs, both the simulator's max-num-seqs, and
// without the cluster block (one replica, no etcd); its tokens verify against the keys the
// RequestAuthentication carries and name the configuration's teams.
func TestKindOverlay(t *testing.T) {
	k, gw, vllm, wp, cfg := renderKind(t)
	var want []string
	for _, name := range mustLoadKit(t, gatewayKitDir).inventory() {
		if name != "Secret/fairshare-pull" {
			want = append(want, name)
		}
	}
	if got := k.inventory(); !slices.Equal(got, want) {
		t.Errorf("kind objects = %v, want the gateway kit's less its pull secret %v", got, want)
	}
	for _, o := range k.objs {
		if o.kind != "Namespace" && o.meta.GetNamespace() != "llm-serving" {
			t.Errorf("%s %s: namespace %q, want llm-serving", o.kind, o.meta.GetName(), o.meta.GetNamespace())
		}
	}

	// The plugin configuration is the gateway kit's but for the capacity,
	// the engines' max_num_seqs (checked below) and the cluster block: one
	// gateway replica owns the pool, and kind runs no etcd.
	base := pluginConfigOf(t, mustLoadKit(t, gatewayKitDir).get(t, "WasmPlugin", "fairshare").obj.(*extensionsv1alpha1.WasmPlugin))
	for _, d := range jsonDiff("pluginConfig", cfg, base) {
		if !strings.HasPrefix(d, "pluginConfig.pools[0].capacity:") && !strings.HasPrefix(d, "pluginConfig.pools[0].capacity_from.max_num_seqs:") &&
			d != "pluginConfig.cluster: only in the second" {
			t.Errorf("kind pluginConfig differs from the gateway kit's: %s", d)
		}
	}
	if _, ok := cfg["cluster"]; ok {
		t.Errorf("kind pluginConfig has a cluster block: no etcd runs in the overlay")
	}

	// The engine: the simulator, under priority scheduling, on the port the
	// Service targets, serving the pool's model, with no GPU asked for.
	if len(vllm.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("vllm containers = %d, want 1", len(vllm.Spec.Template.Spec.Containers))
	}
	eng := vllm.Spec.Template.Spec.Containers[0]
	if !slices.Equal(eng.Command, []string{"/vllmsim"}) {
		t.Errorf("vllm command = %v, want [/vllmsim]", eng.Command)
	}
	src := string(readFile(t, vllmsimSource))
	for _, a := range eng.Args {
		if name, ok := strings.CutPrefix(a, "-"); ok {
			if !regexp.MustCompile(`fs\.\w+\("` + regexp.QuoteMeta(name) + `"`).MatchString(src) {
				t.Errorf("vllm arg %s: not a flag of cmd/vllmsim", a)
			}
		}
	}
	if p := flagValue(eng.Args, "-policy"); p != "priority" {
		t.Errorf("vllmsim -policy %q, want priority (the plugin's priorities are honoured only then)", p)
	}
	if h := flagValue(eng.Args, "-host"); h != "0.0.0.0" {
		t.Errorf("vllmsim -host %q, want 0.0.0.0 (its default, 127.0.0.1, is unreachable from the gateway)", h)
	}
	svc := k.get(t, "Service", "vllm").obj.(*corev1.Service)
	if p := flagValue(eng.Args, "-port"); len(svc.Spec.Ports) != 1 || p != strconv.Itoa(svc.Spec.Ports[0].TargetPort.IntValue()) {
		t.Errorf("vllmsim -port %q, want the vllm Service's targetPort %v", p, svc.Spec.Ports)
	}
	pool := cfg["pools"].([]any)[0].(map[string]any)
	if m := flagValue(eng.Args, "-model"); !slices.Contains(pool["models"].([]any), any(m)) {
		t.Errorf("vllmsim -model %q, not among the pool's models %v", m, pool["models"])
	}
	if len(eng.Resources.Limits)+len(eng.Resources.Requests) != 0 {
		t.Errorf("vllm resources = %v, want none (no GPU in kind)", eng.Resources)
	}

	// C = engines x max-num-seqs, over one gateway replica.
	seqs, err := strconv.Atoi(flagValue(eng.Args, "-max-num-seqs"))
	if err != nil {
		t.Fatalf("vllmsim -max-num-seqs: %v", err)
	}
	if gw.Spec.Replicas == nil || *gw.Spec.Replicas != 1 || vllm.Spec.Replicas == nil {
		t.Fatalf("replicas: gateway %v, vllm %v, want one gateway replica and a vllm count", gw.Spec.Replicas, vllm.Spec.Replicas)
	}
	if c, want := capacityOf(t, cfg), int(*vllm.Spec.Replicas)*seqs; c != want {
		t.Errorf("pool capacity %d, want %d vllm replicas x -max-num-seqs %d = %d over one gateway", c, *vllm.Spec.Replicas, seqs, want)
	}
	// The pool reads C from the simulator, which exports no max_num_seqs.
	if cf, ok := pool["capacity_from"].(map[string]any); ok && cf["max_num_seqs"] != float64(seqs) {
		t.Errorf("capacity_from.max_num_seqs %v, want the simulator's -max-num-seqs %d", cf["max_num_seqs"], seqs)
	}

	// The module: the init container copies it from the image into a
	// volume, which istio-proxy mounts where the url points.
	const dockerfile = kindDir + "/Dockerfile"
	if !regexp.MustCompile(`(?m)^COPY plugin\.wasm vllmsim /$`).Match(readFile(t, dockerfile)) {
		t.Errorf("%s: no line COPY plugin.wasm vllmsim / (the paths the Deployments use)", dockerfile)
	}
	file, ok := strings.CutPrefix(wp.GetUrl(), "file://")
	if !ok || wp.GetImagePullSecret() != "" {
		t.Fatalf("WasmPlugin url %q, pull secret %q: want a file:// url and no secret", wp.GetUrl(), wp.GetImagePullSecret())
	}
	mountOf := func(c corev1.Container, volume string) string {
		for _, m := range c.VolumeMounts {
			if m.Name == volume {
				return m.MountPath
			}
		}
		return ""
	}
	var proxy *corev1.Container
	for i, c := range gw.Spec.Template.Spec.Containers {
		if c.Name == "istio-proxy" {
			proxy = &gw.Spec.Template.Spec.Containers[i]
		}
	}
	if proxy == nil || len(gw.Spec.Template.Spec.InitContainers) != 1 || len(gw.Spec.Template.Spec.Volumes) != 1 {
		t.Fatalf("gateway pod: want an istio-proxy container, one init container and one volume, got %+v", gw.Spec.Template.Spec)
	}
	init, vol := gw.Spec.Template.Spec.InitContainers[0], gw.Spec.Template.Spec.Volumes[0]
	if vol.EmptyDir == nil {
		t.Errorf("volume %s: want an emptyDir", vol.Name)
	}
	if init.Image != eng.Image || init.ImagePullPolicy != corev1.PullNever || eng.ImagePullPolicy != corev1.PullNever {
		t.Errorf("images: init %s (%s), vllm %s (%s), want one image loaded by kind (pull policy Never)", init.Image, init.ImagePullPolicy, eng.Image, eng.ImagePullPolicy)
	}
	if dst := mountOf(init, vol.Name); len(init.Command) != 3 || init.Command[0] != "cp" || init.Command[1] != "/plugin.wasm" || init.Command[2] != path.Join(dst, path.Base(file)) {
		t.Errorf("init command %v with %s at %q, want cp /plugin.wasm into the volume as %s", init.Command, vol.Name, dst, path.Base(file))
	}
	if m := mountOf(*proxy, vol.Name); m != path.Dir(file) {
		t.Errorf("istio-proxy mounts %s at %q, want %q, where the WasmPlugin's url %s points", vol.Name, m, path.Dir(file), wp.GetUrl())
	}

	// Identity: the tokens verify against the inline keys and name teams.
	ra := k.get(t, "RequestAuthentication", "fairshare-team").obj.(*securityv1.RequestAuthentication)
	if len(ra.GetJwtRules()) != 1 {
		t.Fatalf("jwtRules = %v, want one", ra.GetJwtRules())
	}
	rule := ra.GetJwtRules()[0]
	if rule.GetJwksUri() != "" || rule.GetJwks() == "" {
		t.Errorf("jwtRules[0]: jwksUri %q, want none and the keys inline (jwks)", rule.GetJwksUri())
	}
	hdr := rule.GetOutputClaimToHeaders()
	if len(hdr) != 2 || hdr[0].GetHeader() != cfg["team_header"] || hdr[0].GetClaim() != "team" ||
		hdr[1].GetHeader() != cfg["user_header"] || hdr[1].GetClaim() != "sub" {
		t.Errorf("outputClaimToHeaders = %v, want %v from the claim team and %v from sub", hdr, cfg["team_header"], cfg["user_header"])
	}
	teams := pool["teams"].(map[string]any)
	for _, name := range append(slices.Sorted(mapKeys(teams)), "no-team") {
		claims, err := verifyKindToken(readFile(t, kindDir+"/tokens/"+name+".jwt"), rule.GetJwks())
		if err != nil {
			t.Errorf("tokens/%s.jwt: %v", name, err)
			continue
		}
		wantTeam := any(name)
		if name == "no-team" {
			wantTeam = nil
		}
		if claims["iss"] != rule.GetIssuer() || !slices.Contains(rule.GetAudiences(), fmt.Sprint(claims["aud"])) || claims["team"] != wantTeam {
			t.Errorf("tokens/%s.jwt claims iss %v aud %v team %v, want iss %s, an aud of %v, team %v", name, claims["iss"], claims["aud"], claims["team"], rule.GetIssuer(), rule.GetAudiences(), wantTeam)
		}
		if sub, _ := claims["sub"].(string); sub == "" {
			t.Errorf("tokens/%s.jwt has no sub claim: its requests would count as the user _none", name)
		}
		if exp, _ := claims["exp"].(float64); exp < kindFarFuture {
			t.Errorf("tokens/%s.jwt exp %v, want one after 2099 (nobody can sign new ones)", name, claims["exp"])
		}
	}
}

// mapKeys returns m's keys.
func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// verifyKindToken checks a compact RS256 JWT against a JWKS (JSON) by its
// kid and returns its claims.
func verifyKindToken(token []byte, jwks string) (map[string]any, error) {
	parts := strings.Split(strings.TrimSpace(string(token)), ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%d parts, want 3", len(parts))
	}
	dec := func(i int, v any) ([]byte, error) {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err == nil && v != nil {
			err = json.Unmarshal(b, v)
		}
		return b, err
	}
	var head struct{ Alg, Kid string }
	if _, err := dec(0, &head); err != nil || head.Alg != "RS256" {
		return nil, fmt.Errorf("header %+v (%v), want alg RS256", head, err)
	}
	var set struct {
		Keys []struct{ Kty, Kid, N, E string }
	}
	if err := json.Unmarshal([]byte(jwks), &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	for _, k := range set.Keys {
		if k.Kid != head.Kid || k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || new(big.Int).SetBytes(e).Cmp(big.NewInt(math.MaxInt32)) > 0 {
			return nil, fmt.Errorf("jwks key %s: bad n or e", k.Kid)
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		sig, err := dec(2, nil)
		if err != nil {
			return nil, fmt.Errorf("signature: %w", err)
		}
		sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
			return nil, fmt.Errorf("signature: %w", err)
		}
		var claims map[string]any
		if _, err := dec(1, &claims); err != nil {
			return nil, fmt.Errorf("claims: %w", err)
		}
		return claims, nil
	}
	return nil, fmt.Errorf("no RSA key %q in the jwks", head.Kid)
}

// TestKindSmokeScript: deploy/istio/kind/smoke.sh parses (bash -n), and the
// names it uses are the overlay's (namespace, Deployments, Service and
// port, image, pool, model, team and user headers, teams and their tokens,
// the within-share team's token's subject) and the plugin's response headers, so that a rename fails here rather than on a
// laptop. Its borrower sends more requests than its reservation and fewer
// than the pool's capacity, so some borrow and none is held.
func TestKindSmokeScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash, needed to check smoke.sh: %v", err)
	}
	if out, err := exec.Command(bash, "-n", kindSmoke).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", kindSmoke, err, out)
	}
	script := string(readFile(t, kindSmoke))
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z_]*)=([^$\s]+)$`).FindAllStringSubmatch(script, -1) {
		vars[m[1]] = m[2]
	}
	k, gw, vllm, _, cfg := renderKind(t)
	pool := cfg["pools"].([]any)[0].(map[string]any)
	teams := pool["teams"].(map[string]any)
	svc := k.get(t, "Service", "llm-gateway").obj.(*corev1.Service)
	var svcPorts []string
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, strconv.Itoa(int(p.Port)))
	}
	eq := func(name, want string) {
		t.Helper()
		if got, ok := vars[name]; !ok || got != want {
			t.Errorf("smoke.sh %s=%q, want %q", name, got, want)
		}
	}
	eq("KIT", "deploy/istio/kind")
	eq("NAMESPACE", gw.Namespace)
	eq("GATEWAY_DEPLOYMENT", gw.Name)
	eq("VLLM_DEPLOYMENT", vllm.Name)
	eq("GATEWAY_SERVICE", svc.Name)
	if !slices.Contains(svcPorts, vars["GATEWAY_PORT"]) {
		t.Errorf("smoke.sh GATEWAY_PORT=%q, not a port of Service %s %v", vars["GATEWAY_PORT"], svc.Name, svcPorts)
	}
	eq("IMAGE", vllm.Spec.Template.Spec.Containers[0].Image)
	eq("POOL", fmt.Sprint(pool["name"]))
	if !slices.Contains(pool["models"].([]any), any(vars["MODEL"])) {
		t.Errorf("smoke.sh MODEL=%q, not among the pool's models %v", vars["MODEL"], pool["models"])
	}
	eq("TEAM_HEADER", fmt.Sprint(cfg["team_header"]))
	eq("USER_HEADER", fmt.Sprint(cfg["user_header"]))
	eq("HEADER_USER", plugin.HeaderUser)
	// The user the within-share check expects is its token's subject.
	ra := k.get(t, "RequestAuthentication", "fairshare-team").obj.(*securityv1.RequestAuthentication)
	if claims, err := verifyKindToken(readFile(t, kindDir+"/tokens/"+vars["WITHIN_TEAM"]+".jwt"), ra.GetJwtRules()[0].GetJwks()); err != nil {
		t.Errorf("tokens/%s.jwt: %v", vars["WITHIN_TEAM"], err)
	} else {
		eq("WITHIN_USER", fmt.Sprint(claims["sub"]))
	}
	eq("HEADER_TEAM", plugin.HeaderTeam)
	eq("HEADER_POOL", plugin.HeaderPool)
	eq("HEADER_PRIORITY", plugin.HeaderPriority)
	eq("HEADER_BORROWING", plugin.HeaderBorrowing)
	eq("HEADER_QUEUE_TIME", plugin.HeaderQueueTime)
	known := []string{plugin.HeaderTeam, plugin.HeaderPool, plugin.HeaderPriority, plugin.HeaderBorrowing, plugin.HeaderQueueTime,
		plugin.HeaderMode, plugin.HeaderWouldHold, plugin.HeaderWouldRefuse, plugin.HeaderSpilledFrom, plugin.HeaderUser, plugin.HeaderOver}
	for _, h := range regexp.MustCompile(`x-fairshare-[a-z-]+`).FindAllString(script, -1) {
		if !slices.Contains(known, h) {
			t.Errorf("smoke.sh names %s, not a header of the plugin", h)
		}
	}

	capacity := capacityOf(t, cfg)
	for _, name := range []string{"WITHIN_TEAM", "BORROWER"} {
		team, ok := teams[vars[name]].(map[string]any)
		if !ok {
			t.Errorf("smoke.sh %s=%q, not a team of the pool %v", name, vars[name], slices.Sorted(mapKeys(teams)))
			continue
		}
		share := team["share"].(float64)
		if name == "WITHIN_TEAM" && share*float64(capacity) < 1 {
			t.Errorf("smoke.sh WITHIN_TEAM %s reserves %.2f slots, want at least one (its request must go within share)", vars[name], share*float64(capacity))
		}
		if name == "BORROWER" {
			n, err := strconv.Atoi(vars["BORROWER_REQUESTS"])
			if rsv := int(math.Ceil(share * float64(capacity))); err != nil || n <= rsv || n >= capacity {
				t.Errorf("smoke.sh BORROWER_REQUESTS=%q, want more than %s's reservation (at most %d) and fewer than the capacity %d", vars["BORROWER_REQUESTS"], vars[name], rsv, capacity)
			}
		}
	}
	for _, tok := range regexp.MustCompile(`chat "[^"]+" ("?[\w$-]*"?) `).FindAllStringSubmatch(script, -1) {
		name := strings.Trim(tok[1], `"`)
		if v, ok := strings.CutPrefix(name, "$"); ok {
			name = vars[v]
		}
		if name == "" {
			continue // no token
		}
		if _, err := verifyKindToken(readFile(t, kindDir+"/tokens/"+name+".jwt"), k.get(t, "RequestAuthentication", "fairshare-team").obj.(*securityv1.RequestAuthentication).GetJwtRules()[0].GetJwks()); err != nil {
			t.Errorf("smoke.sh sends tokens/%s.jwt: %v", name, err)
		}
	}
}
