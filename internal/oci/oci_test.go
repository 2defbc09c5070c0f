package oci

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// module returns a fake Wasm module: the magic number and version, then n
// pseudo-random bytes.
func module(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := append([]byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}, make([]byte, n)...)
	for i := 8; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		variant        Variant
		wantConfigType string
		wantLayerTypes []string
	}{
		{VariantOCI, MediaTypeWasmConfig, []string{MediaTypeWasmConfig, MediaTypeWasmLayer}},
		{"", MediaTypeWasmConfig, []string{MediaTypeWasmConfig, MediaTypeWasmLayer}}, // the default
		{VariantCompat, MediaTypeImageConfig, []string{MediaTypeLayerTarGzip}},
	} {
		t.Run(string(c.variant), func(t *testing.T) {
			dir := t.TempDir()
			mod := module(100_000, 1)
			md, err := Write(dir, Image{Module: mod, Tag: "0.1.0", Variant: c.variant,
				RootIDs: []string{"fairshare"}, ABIVersions: []string{"proxy_abi_version_0_2_1"}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := Read(dir, "0.1.0")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p.Module, mod) {
				t.Errorf("Read module: %d bytes, differs from the %d written", len(p.Module), len(mod))
			}
			if p.Descriptor.Digest != md.Digest || p.Descriptor.Size != md.Size {
				t.Errorf("index.json entry = %s/%d, Write returned %s/%d", p.Descriptor.Digest, p.Descriptor.Size, md.Digest, md.Size)
			}
			if got := p.Descriptor.Annotations[AnnotationRefName]; got != "0.1.0" {
				t.Errorf("ref.name = %q, want 0.1.0", got)
			}
			if p.Manifest.Config.MediaType != c.wantConfigType {
				t.Errorf("config media type = %s, want %s", p.Manifest.Config.MediaType, c.wantConfigType)
			}
			var types []string
			for _, l := range p.Manifest.Layers {
				types = append(types, l.MediaType)
			}
			if strings.Join(types, " ") != strings.Join(c.wantLayerTypes, " ") {
				t.Errorf("layer media types = %v, want %v", types, c.wantLayerTypes)
			}
			if c.variant == VariantCompat {
				if p.Variant != VariantCompat || p.Manifest.Annotations[AnnotationVariant] != "compat" {
					t.Errorf("variant %s, annotation %q; want compat", p.Variant, p.Manifest.Annotations[AnnotationVariant])
				}
				return
			}
			if p.Variant != VariantOCI {
				t.Errorf("variant = %s, want oci", p.Variant)
			}
			if got := p.Manifest.Layers[1].Annotations[AnnotationTitle]; got != ModuleFileName {
				t.Errorf("module layer title = %q, want %s", got, ModuleFileName)
			}
			if p.Manifest.Layers[1].Size != int64(len(mod)) {
				t.Errorf("module layer size = %d, want %d", p.Manifest.Layers[1].Size, len(mod))
			}
			var rc RuntimeConfig
			if err := json.Unmarshal(p.Config, &rc); err != nil {
				t.Fatal(err)
			}
			if rc.Type != "envoy_proxy" || len(rc.Config.RootIDs) != 1 || rc.Config.RootIDs[0] != "fairshare" {
				t.Errorf("runtime config = %+v, want type envoy_proxy and root id fairshare", rc)
			}
		})
	}
}

// TestLayoutFiles checks the files a registry tool reads directly.
func TestLayoutFiles(t *testing.T) {
	dir := t.TempDir()
	md, err := Write(dir, Image{Module: module(10, 2), Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", b)
	}
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeImageIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index.json = %s", b)
	}
	if idx.Manifests[0].Digest != md.Digest || idx.Manifests[0].MediaType != MediaTypeImageManifest {
		t.Errorf("index.json manifest = %+v, want %+v", idx.Manifests[0], md)
	}
	// Every file under blobs/sha256 is named by its content's digest, and
	// there are exactly the manifest, the config (also a layer) and the module.
	ents, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 3 {
		t.Errorf("blobs/sha256 holds %d files, want 3", len(ents))
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if got := digest(b); got != "sha256:"+e.Name() {
			t.Errorf("blob %s has digest %s", e.Name(), got)
		}
	}
}

// TestDeterministic checks that the same input gives the same manifest
// digest (reproducible images), and that a different module does not.
func TestDeterministic(t *testing.T) {
	for _, v := range []Variant{VariantOCI, VariantCompat} {
		img := Image{Module: module(5000, 3), Tag: "x", Variant: v, RootIDs: []string{"fairshare"}}
		a, err := Write(t.TempDir(), img)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Write(t.TempDir(), img)
		if err != nil {
			t.Fatal(err)
		}
		if a.Digest != b.Digest {
			t.Errorf("%s: two writes of the same image: %s and %s", v, a.Digest, b.Digest)
		}
		img.Module = module(5000, 4)
		c, err := Write(t.TempDir(), img)
		if err != nil {
			t.Fatal(err)
		}
		if c.Digest == a.Digest {
			t.Errorf("%s: different modules, same manifest digest %s", v, a.Digest)
		}
		img.Created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		d, err := Write(t.TempDir(), img)
		if err != nil {
			t.Fatal(err)
		}
		if d.Digest == c.Digest {
			t.Errorf("%s: Created did not change the manifest digest", v)
		}
	}
}

// TestTags checks that tags accumulate in one layout and that writing a tag
// again replaces it.
func TestTags(t *testing.T) {
	dir := t.TempDir()
	m1, m2, m3 := module(100, 5), module(100, 6), module(100, 7)
	for _, w := range []struct {
		tag string
		mod []byte
		v   Variant
	}{{"a", m1, VariantOCI}, {"b", m2, VariantCompat}, {"a", m3, VariantOCI}} {
		if _, err := Write(dir, Image{Module: w.mod, Tag: w.tag, Variant: w.v}); err != nil {
			t.Fatal(err)
		}
	}
	for tag, want := range map[string][]byte{"a": m3, "b": m2} {
		p, err := Read(dir, tag)
		if err != nil {
			t.Fatalf("Read(%s): %v", tag, err)
		}
		if !bytes.Equal(p.Module, want) {
			t.Errorf("Read(%s) returned another module", tag)
		}
	}
	if _, err := Read(dir, "c"); err == nil {
		t.Errorf("Read(c) = nil error, want not found")
	}
}

// TestReadDetectsDamage checks that Read verifies what it reads.
func TestReadDetectsDamage(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(t *testing.T, dir string, m Manifest)
		wantErr string
	}{
		{"flipped byte in the module", func(t *testing.T, dir string, m Manifest) {
			p := blobPath(dir, m.Layers[1].Digest)
			b := readOrFail(t, p)
			b[len(b)/2] ^= 1
			writeOrFail(t, p, b)
		}, "content has digest"},
		{"truncated module", func(t *testing.T, dir string, m Manifest) {
			p := blobPath(dir, m.Layers[1].Digest)
			b := readOrFail(t, p)
			writeOrFail(t, p, b[:len(b)-1])
		}, "size"},
		{"missing config", func(t *testing.T, dir string, m Manifest) {
			if err := os.Remove(blobPath(dir, m.Config.Digest)); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"wrong layout version", func(t *testing.T, dir string, m Manifest) {
			writeOrFail(t, filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"2.0.0"}`))
		}, "imageLayoutVersion"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Write(dir, Image{Module: module(1000, 8), Tag: "t"}); err != nil {
				t.Fatal(err)
			}
			p, err := Read(dir, "t")
			if err != nil {
				t.Fatal(err)
			}
			c.damage(t, dir, p.Manifest)
			if _, err := Read(dir, "t"); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Read after %s = %v, want an error containing %q", c.name, err, c.wantErr)
			}
		})
	}
}

func TestWriteRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		img  Image
	}{
		{"not a Wasm module", Image{Module: []byte("#!/bin/sh\n"), Tag: "x"}},
		{"empty tag", Image{Module: module(1, 9), Tag: ""}},
		{"tag with a colon", Image{Module: module(1, 9), Tag: "a:b"}},
		{"unknown variant", Image{Module: module(1, 9), Tag: "x", Variant: "docker"}},
	} {
		if _, err := Write(t.TempDir(), c.img); err == nil {
			t.Errorf("Write(%s) = nil error, want an error", c.name)
		}
	}
}

func readOrFail(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeOrFail(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
