// Package manifests holds the tests that check the project's deployment
// manifests against the schemas of the software that reads them:
//
//   - envoy.yaml decodes into Envoy's v3 Bootstrap proto (go-control-plane
//     v1.40) with no unknown field, every typed_config in it resolves and
//     passes its proto validation rules, no deprecated field is set, the
//     plugin configuration it embeds equals testdata/plugin/example.json,
//     the client's team header is removed before jwt_authn writes it from a
//     claim, and paths are normalised;
//   - the stats_tags in envoy.yaml turn the plugin's metric names into the
//     tagged Prometheus series documented there, replaying Envoy's tag
//     extraction (every extractor on the original name, cuts applied once),
//     both for sample names and for every name the built plugin.wasm defines
//     when it runs with the example configuration;
//   - the Istio kits, deploy/istio/sidecar, deploy/istio/gateway and
//     deploy/istio/inference-pool: every file decodes strictly into its type
//     (Kubernetes kinds into k8s.io/api, Gateway and HTTPRoute into
//     sigs.k8s.io/gateway-api, GIE's InferencePool and the EPP's
//     EndpointPickerConfig into types written from GIE's CRD and config
//     types with the CRD's enums, bounds and required fields, Istio kinds
//     into metav1.ObjectMeta plus the istio.io/api spec, EnvoyFilter
//     listener patches into Envoy's Listener, the proxy.istio.io/config
//     annotation into Istio's ProxyConfig), and the objects agree: the plugin configuration is the example one
//     but for the user header every kit sets, selectors
//     reach the pods that run the plugin, the buffer limit covers
//     max_body_bytes, the JWT rules write the team header and the user
//     header (from another claim, so a client's copy is removed) and the
//     authorization policy refuses requests without the team's claim, the image is
//     pinned by digest with a pull secret for its registry, and the pool's
//     capacity is one replica's max_num_seqs (sidecar) or the whole pool's
//     C (gateway, whose replicas share it through the etcd the etcd kit's
//     ServiceEntry names, with a cluster block equal to cluster.json's
//     but for that address, reading C from the engines with vLLM's
//     --max-num-seqs); each kit's
//     bootstrap override carries envoy.yaml's stats_tags; in front of an
//     InferencePool, the plugin's team and the EPP's fairness ID come from
//     one claim, the route reaches the pool, the pool its EPP, and the EPP
//     holds nothing (the plugin's flow control is the one);
//   - every kit is a kustomization listing exactly its files, and
//     kustomize (sigs.k8s.io/kustomize/api) renders it and the plugin-only
//     overlay (the sidecar kit without its vLLM) into objects that decode
//     as strictly; the overlay's policies reach a vLLM patched as its
//     vllm-pod-patch.yaml says; the sidecar and gateway kits create their
//     Namespace, the plugin-only overlay and the inference-pool kit do not;
//   - the kind overlay (deploy/istio/kind) is the gateway kit with one
//     gateway replica in front of the vLLM simulator, its capacity the
//     simulator's max-num-seqs, without the cluster block, its plugin read from a file an init
//     container puts where istio-proxy mounts it, and tokens that verify
//     against the keys it carries; its smoke.sh parses (bash -n) and uses
//     the overlay's names and the plugin's header names;
//   - every PromQL expression of deploy/grafana/fairshare-dashboard.json
//     names a metric the built plugin.wasm defines (driven through every
//     path that defines one), as Prometheus sees it after envoy.yaml's
//     stats_tags, with labels its series carry, counters only under rate
//     and gauges never; and every such metric is on the dashboard.
//
// The package has no non-test code: it exists so that `go test ./...` fails
// when a manifest drifts from the schema or from the plugin's example config.
package manifests
