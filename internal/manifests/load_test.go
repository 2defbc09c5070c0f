package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Register the types that typed_config fields in envoy.yaml name, so
	// that protojson and anypb can resolve them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Paths of the files under test, relative to this package's directory.
const (
	envoyPath   = "../../envoy.yaml"
	examplePath = "../../testdata/plugin/example.json"
)

// strict decodes JSON into a proto: unknown fields and unknown Any types are
// errors, so a misspelt key fails instead of being dropped.
var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

// readFile returns the contents of path or fails the test.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeBootstrap reads an Envoy bootstrap written in YAML (or JSON) into
// the v3 Bootstrap proto, then validates the whole tree: see validateTree.
func decodeBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := strict.Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if err := validateTree(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface{ ValidateAll() error }

// validateTree runs the proto validation rules (ValidateAll) on root and on
// the message inside every google.protobuf.Any reachable from it, at any
// depth: PGV checks an Any's type URL but never looks inside it, so a
// typed_config would otherwise go unchecked. It also rejects deprecated
// fields, which Envoy warns about or, for some, refuses.
func validateTree(root proto.Message) error {
	var errs []error
	var walk func(m protoreflect.Message, path string)
	check := func(m proto.Message, path string) {
		if v, ok := m.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			}
		}
	}
	walk = func(m protoreflect.Message, path string) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				return
			}
			path += "<" + string(inner.ProtoReflect().Descriptor().FullName()) + ">"
			check(inner, path)
			walk(inner.ProtoReflect(), path)
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			p := path + "." + string(fd.Name())
			if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
				errs = append(errs, fmt.Errorf("%s: deprecated field", p))
			}
			switch {
			case fd.IsList() && fd.Message() != nil:
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()))
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message(), p)
			}
			return true
		})
	}
	check(root, "bootstrap")
	walk(root.ProtoReflect(), "bootstrap")
	return errors.Join(errs...)
}

// anyTypes lists the full names of the messages inside every Any reachable
// from m, in walk order.
func anyTypes(m proto.Message) []string {
	var names []string
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				return
			}
			names = append(names, string(inner.ProtoReflect().Descriptor().FullName()))
			walk(inner.ProtoReflect())
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return names
}

// exampleConfig returns testdata/plugin/example.json decoded into generic
// JSON values (maps, slices, float64, string, bool).
func exampleConfig(t *testing.T) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(readFile(t, examplePath), &v); err != nil {
		t.Fatalf("%s: %v", examplePath, err)
	}
	return v
}

// jsonDiff lists the paths at which a and b, both decoded by encoding/json
// into generic values, differ; nil means they hold the same JSON document
// (object key order and formatting do not matter).
func jsonDiff(path string, a, b any) []string {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var d []string
		for k, av := range a {
			bv, ok := bm[k]
			if !ok {
				d = append(d, fmt.Sprintf("%s.%s: only in the first", path, k))
				continue
			}
			d = append(d, jsonDiff(path+"."+k, av, bv)...)
		}
		for k := range bm {
			if _, ok := a[k]; !ok {
				d = append(d, fmt.Sprintf("%s.%s: only in the second", path, k))
			}
		}
		return d
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return []string{fmt.Sprintf("%s: %v vs %v", path, a, b)}
		}
		var d []string
		for i := range a {
			d = append(d, jsonDiff(fmt.Sprintf("%s[%d]", path, i), a[i], bl[i])...)
		}
		return d
	default:
		if !reflect.DeepEqual(a, b) {
			return []string{fmt.Sprintf("%s: %#v vs %#v", path, a, b)}
		}
		return nil
	}
}
