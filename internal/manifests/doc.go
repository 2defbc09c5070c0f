// Package manifests holds the tests that check the project's deployment
// manifests against the schemas of the software that reads them:
//
//   - envoy.yaml decodes into Envoy's v3 Bootstrap proto (go-control-plane
//     v1.40) with no unknown field, every typed_config in it resolves and
//     passes its proto validation rules, no deprecated field is set, and the
//     plugin configuration it embeds equals testdata/plugin/example.json;
//   - the stats_tags in envoy.yaml turn the plugin's metric names into the
//     tagged Prometheus series documented there, replaying Envoy's tag
//     extraction (every extractor on the original name, cuts applied once),
//     both for sample names and for every name the built plugin.wasm defines
//     when it runs with the example configuration;
//   - deploy/wasmplugin.yaml decodes into Istio's WasmPlugin spec
//     (istio.io/api extensions/v1alpha1) with no unknown field and carries the
//     same plugin configuration; deploy/stats-bootstrap.yaml carries the same
//     stats_tags as envoy.yaml.
//
// The package has no non-test code: it exists so that `go test ./...` fails
// when a manifest drifts from the schema or from the plugin's example config.
package manifests
