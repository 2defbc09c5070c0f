// Package oci writes and reads a Wasm plugin as an OCI image layout: a
// directory with an oci-layout file, an index.json and content-addressed
// blobs under blobs/sha256/, as the OCI image-layout spec v1.0 describes.
// Standard tools push such a directory to any registry:
//
//	oras copy --from-oci-layout build/oci:0.1.0 ghcr.io/OWNER/fairshare:0.1.0
//	skopeo copy oci:build/oci:0.1.0 docker://ghcr.io/OWNER/fairshare:0.1.0
//
// and Istio's WasmPlugin pulls it with url: oci://ghcr.io/OWNER/fairshare:0.1.0.
//
// Istio's image fetcher (istio/istio pkg/wasm/imagefetcher.go) accepts two
// layouts of a Wasm image, both written here:
//
//   - VariantOCI (the "oci" variant of the solo-io Wasm image spec): a manifest
//     whose config has media type application/vnd.module.wasm.config.v1+json,
//     and exactly two layers: that same runtime config, and the raw module with
//     media type application/vnd.module.wasm.content.layer.v1+wasm. Istio
//     rejects this variant unless it has exactly two layers ("number of layers
//     must be 2"), so a manifest with the module as its only layer does not
//     load.
//   - VariantCompat (the "compat" variant): an ordinary image whose single
//     layer (application/vnd.oci.image.layer.v1.tar+gzip) is a tar holding
//     plugin.wasm; docker, podman and crane handle it like any image.
//
// Write is deterministic: the same module, tag and options give the same
// bytes and the same manifest digest. Read checks every digest and size it
// follows and extracts the module the way Istio does.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// Media types and annotation keys used in the layout.
const (
	MediaTypeImageIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeImageManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeImageConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerTarGzip  = "application/vnd.oci.image.layer.v1.tar+gzip"
	// MediaTypeWasmConfig is the runtime config of the "oci" Wasm variant.
	MediaTypeWasmConfig = "application/vnd.module.wasm.config.v1+json"
	// MediaTypeWasmLayer is the raw Wasm module of the "oci" Wasm variant.
	MediaTypeWasmLayer = "application/vnd.module.wasm.content.layer.v1+wasm"

	// AnnotationTitle names a layer's file (oras uses it as the file name).
	AnnotationTitle = "org.opencontainers.image.title"
	// AnnotationRefName is the tag of a manifest in index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationCreated is the creation time of the image (RFC 3339).
	AnnotationCreated = "org.opencontainers.image.created"
	// AnnotationVariant marks a compat image (spec-compat.md).
	AnnotationVariant = "module.wasm.image/variant"

	// ImageLayoutVersion is the content of the oci-layout file.
	ImageLayoutVersion = "1.0.0"
	// ModuleFileName is the module's name: the layer title of the oci
	// variant, the file inside the compat variant's tar.
	ModuleFileName = "plugin.wasm"
	// RuntimeConfigFileName is the title of the runtime config layer.
	RuntimeConfigFileName = "runtime-config.json"
)

// Variant selects the image layout; see the package doc.
type Variant string

// The variants Istio's image fetcher accepts.
const (
	VariantOCI    Variant = "oci"
	VariantCompat Variant = "compat"
)

// Descriptor points at a blob (OCI image-spec descriptor).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Index is an OCI image index (index.json of a layout).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []Descriptor `json:"manifests"`
}

// RuntimeConfig is the config blob of the "oci" Wasm variant (solo-io
// spec.md): the runtime type, the ABI versions the module speaks and its
// root ids. Istio does not read it; it documents the module.
type RuntimeConfig struct {
	Type        string   `json:"type"`
	ABIVersions []string `json:"abiVersions"`
	Config      struct {
		RootIDs []string `json:"rootIds"`
	} `json:"config"`
}

// Image is what Write packs.
type Image struct {
	// Module is the Wasm module; it must start with the Wasm magic number.
	Module []byte
	// Tag names the manifest in index.json (org.opencontainers.image.ref.name).
	Tag string
	// Variant is VariantOCI if empty.
	Variant Variant
	// RootIDs and ABIVersions fill the runtime config of VariantOCI.
	RootIDs, ABIVersions []string
	// Created, if not zero, is recorded as the manifest's
	// org.opencontainers.image.created annotation (and changes its digest).
	Created time.Time
}

var (
	wasmMagic = []byte{0x00, 'a', 's', 'm'}
	// tagRE is the OCI distribution spec's tag grammar.
	tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Write packs img into the OCI image layout at dir, creating dir if needed.
// If dir already holds a layout, the new manifest is added to its index.json
// and replaces any manifest with the same tag; blobs are shared by content.
// It returns the manifest's descriptor (its Digest is what a registry
// reports for the pushed tag).
func Write(dir string, img Image) (Descriptor, error) {
	if !bytes.HasPrefix(img.Module, wasmMagic) {
		return Descriptor{}, errors.New("oci: module does not start with the Wasm magic number")
	}
	if !tagRE.MatchString(img.Tag) {
		return Descriptor{}, fmt.Errorf("oci: invalid tag %q", img.Tag)
	}
	variant := img.Variant
	if variant == "" {
		variant = VariantOCI
	}

	var blobs [][]byte
	add := func(mediaType string, b []byte, annotations map[string]string) Descriptor {
		blobs = append(blobs, b)
		return Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b)), Annotations: annotations}
	}
	m := Manifest{SchemaVersion: 2, MediaType: MediaTypeImageManifest}
	switch variant {
	case VariantOCI:
		var rc RuntimeConfig
		rc.Type = "envoy_proxy"
		rc.ABIVersions = nonNil(img.ABIVersions)
		rc.Config.RootIDs = nonNil(img.RootIDs)
		cfg, err := json.Marshal(rc)
		if err != nil {
			return Descriptor{}, err
		}
		m.Config = add(MediaTypeWasmConfig, cfg, nil)
		m.Layers = []Descriptor{
			add(MediaTypeWasmConfig, cfg, map[string]string{AnnotationTitle: RuntimeConfigFileName}),
			add(MediaTypeWasmLayer, img.Module, map[string]string{AnnotationTitle: ModuleFileName}),
		}
	case VariantCompat:
		tgz, diffID, err := tarGz(ModuleFileName, img.Module)
		if err != nil {
			return Descriptor{}, err
		}
		cfg, err := json.Marshal(map[string]any{
			"architecture": "wasm",
			"os":           "wasip1",
			"config":       map[string]any{},
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		})
		if err != nil {
			return Descriptor{}, err
		}
		m.Config = add(MediaTypeImageConfig, cfg, nil)
		m.Layers = []Descriptor{add(MediaTypeLayerTarGzip, tgz, nil)}
		m.Annotations = map[string]string{AnnotationVariant: string(VariantCompat)}
	default:
		return Descriptor{}, fmt.Errorf("oci: unknown variant %q", variant)
	}
	if !img.Created.IsZero() {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[AnnotationCreated] = img.Created.UTC().Format(time.RFC3339)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return Descriptor{}, err
	}
	md := add(MediaTypeImageManifest, mb, nil)
	md.Annotations = map[string]string{AnnotationRefName: img.Tag}

	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	for _, b := range blobs {
		if err := writeFile(blobPath(dir, digest(b)), b); err != nil {
			return Descriptor{}, err
		}
	}
	idx := Index{SchemaVersion: 2, MediaType: MediaTypeImageIndex}
	if old, err := os.ReadFile(filepath.Join(dir, "index.json")); err == nil {
		if err := json.Unmarshal(old, &idx); err != nil {
			return Descriptor{}, fmt.Errorf("oci: existing index.json: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Descriptor{}, fmt.Errorf("oci: %w", err)
	}
	kept := idx.Manifests[:0]
	for _, d := range idx.Manifests {
		if d.Annotations[AnnotationRefName] != img.Tag {
			kept = append(kept, d)
		}
	}
	idx.Manifests = append(kept, md)
	ib, err := json.Marshal(idx)
	if err != nil {
		return Descriptor{}, err
	}
	layout, _ := json.Marshal(map[string]string{"imageLayoutVersion": ImageLayoutVersion})
	if err := writeFile(filepath.Join(dir, "oci-layout"), layout); err != nil {
		return Descriptor{}, err
	}
	if err := writeFile(filepath.Join(dir, "index.json"), ib); err != nil {
		return Descriptor{}, err
	}
	return md, nil
}

// Pulled is what Read found in a layout.
type Pulled struct {
	// Descriptor is the manifest's entry in index.json.
	Descriptor Descriptor
	Manifest   Manifest
	// Config is the config blob.
	Config []byte
	// Variant is the variant the manifest was recognised as.
	Variant Variant
	// Module is the Wasm module, extracted as Istio extracts it.
	Module []byte
}

// Read opens the layout at dir, finds the manifest tagged tag, checks the
// digest and size of every blob it reads, and extracts the module with the
// rules of Istio's image fetcher: a manifest with exactly one
// tar+gzip layer is the compat variant (the module is the tar's
// plugin.wasm); otherwise it must have exactly two layers, one of which has
// the Wasm layer media type.
func Read(dir, tag string) (*Pulled, error) {
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &layout); err != nil || layout.Version != ImageLayoutVersion {
		return nil, fmt.Errorf("oci: oci-layout: want imageLayoutVersion %s, got %q (%v)", ImageLayoutVersion, b, err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	var idx Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("oci: index.json: %w", err)
	}
	if idx.SchemaVersion != 2 {
		return nil, fmt.Errorf("oci: index.json: schemaVersion %d, want 2", idx.SchemaVersion)
	}
	var found []Descriptor
	for _, d := range idx.Manifests {
		if d.Annotations[AnnotationRefName] == tag {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("oci: index.json: %d manifests tagged %q, want 1", len(found), tag)
	}
	p := &Pulled{Descriptor: found[0]}
	if p.Descriptor.MediaType != MediaTypeImageManifest {
		return nil, fmt.Errorf("oci: manifest media type %q, want %s", p.Descriptor.MediaType, MediaTypeImageManifest)
	}
	mb, err := readBlob(dir, p.Descriptor)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(mb, &p.Manifest); err != nil {
		return nil, fmt.Errorf("oci: manifest: %w", err)
	}
	if p.Manifest.SchemaVersion != 2 || p.Manifest.MediaType != MediaTypeImageManifest {
		return nil, fmt.Errorf("oci: manifest: schemaVersion %d mediaType %q, want 2 and %s",
			p.Manifest.SchemaVersion, p.Manifest.MediaType, MediaTypeImageManifest)
	}
	if p.Config, err = readBlob(dir, p.Manifest.Config); err != nil {
		return nil, err
	}
	layers := make([][]byte, len(p.Manifest.Layers))
	for i, d := range p.Manifest.Layers {
		if layers[i], err = readBlob(dir, d); err != nil {
			return nil, err
		}
	}
	ls := p.Manifest.Layers
	switch {
	case len(ls) == 1 && ls[0].MediaType == MediaTypeLayerTarGzip:
		p.Variant = VariantCompat
		p.Module, err = untarGz(layers[0], ModuleFileName)
	case len(ls) == 2:
		p.Variant = VariantOCI
		err = fmt.Errorf("oci: no layer of media type %s", MediaTypeWasmLayer)
		for i, d := range ls {
			if d.MediaType == MediaTypeWasmLayer {
				p.Module, err = layers[i], nil
				break
			}
		}
	default:
		err = fmt.Errorf("oci: %d layers: Istio wants one %s layer or two layers", len(ls), MediaTypeLayerTarGzip)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// digest returns the OCI digest of b ("sha256:" and 64 hex digits).
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blobPath is where the blob with digest d lives in the layout at dir.
func blobPath(dir, d string) string {
	return filepath.Join(dir, "blobs", "sha256", d[len("sha256:"):])
}

// readBlob reads the blob d points at and checks its size and digest.
func readBlob(dir string, d Descriptor) ([]byte, error) {
	if len(d.Digest) < 7 || d.Digest[:7] != "sha256:" || !hexRE.MatchString(d.Digest[7:]) {
		return nil, fmt.Errorf("oci: digest %q: want sha256: and 64 lowercase hex digits", d.Digest)
	}
	b, err := os.ReadFile(blobPath(dir, d.Digest))
	if err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("oci: blob %s: size %d, descriptor says %d", d.Digest, len(b), d.Size)
	}
	if got := digest(b); got != d.Digest {
		return nil, fmt.Errorf("oci: blob %s: content has digest %s", d.Digest, got)
	}
	return b, nil
}

// writeFile writes b to path through a temporary file and a rename, so a
// reader never sees half a file.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("oci: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("oci: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("oci: %w", err)
	}
	return nil
}

// tarGz returns a gzip-compressed tar holding one file, name, with content
// b, and the digest of the uncompressed tar (the image config's diff_id).
// Times, owners and the gzip header are fixed, so the output depends on
// name and b only.
func tarGz(name string, b []byte) (tgz []byte, diffID string, err error) {
	var t bytes.Buffer
	tw := tar.NewWriter(&t)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o644,
		Size:     int64(len(b)),
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, "", fmt.Errorf("oci: tar: %w", err)
	}
	if _, err := tw.Write(b); err != nil {
		return nil, "", fmt.Errorf("oci: tar: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("oci: tar: %w", err)
	}
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	if _, err := zw.Write(t.Bytes()); err != nil {
		return nil, "", fmt.Errorf("oci: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("oci: gzip: %w", err)
	}
	return z.Bytes(), digest(t.Bytes()), nil
}

// untarGz returns the content of the file called name in a gzip-compressed
// tar.
func untarGz(tgz []byte, name string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("oci: layer: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("oci: layer: no %s", name)
		}
		if err != nil {
			return nil, fmt.Errorf("oci: layer: %w", err)
		}
		if filepath.Base(h.Name) == name {
			return io.ReadAll(tr)
		}
	}
}

// nonNil returns s, or an empty slice if s is nil (so JSON has [] not null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
