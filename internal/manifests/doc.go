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
//   - the two Istio kits, deploy/istio/sidecar and deploy/istio/gateway:
//     every file decodes strictly into its type (Kubernetes kinds into
//     k8s.io/api, Istio kinds into metav1.ObjectMeta plus the istio.io/api
//     spec, EnvoyFilter listener patches into Envoy's Listener, the
//     proxy.istio.io/config annotation into Istio's ProxyConfig), and the
//     objects agree: the plugin configuration is the example one, selectors
//     reach the pods that run the plugin, the buffer limit covers
//     max_body_bytes, the JWT rules write the team header and the
//     authorization policy refuses requests without that claim, the image is
//     pinned by digest with a pull secret for its registry, and the pool's
//     capacity is one replica's max_num_seqs (sidecar) or the pool's
//     capacity divided by the gateway replicas (gateway); each kit's
//     bootstrap override carries envoy.yaml's stats_tags;
//   - every PromQL expression of deploy/grafana/fairshare-dashboard.json
//     names a metric the built plugin.wasm defines (driven through every
//     path that defines one), as Prometheus sees it after envoy.yaml's
//     stats_tags, with labels its series carry, counters only under rate
//     and gauges never; and every such metric is on the dashboard.
//
// The package has no non-test code: it exists so that `go test ./...` fails
// when a manifest drifts from the schema or from the plugin's example config.
package manifests
