// Command wasm-oci packs a Wasm plugin into an OCI image layout directory
// that oras, skopeo or crane can push to a registry, in a form Istio's
// WasmPlugin can pull (see package internal/oci for the two layouts).
//
//	go run ./cmd/wasm-oci -wasm plugin.wasm -out build/oci -tag 0.1.0
//	oras copy --from-oci-layout build/oci:0.1.0 ghcr.io/OWNER/fairshare:0.1.0
//
// It prints the manifest digest: the digest the registry will report for the
// tag, and (without its "sha256:" prefix) the value for WasmPlugin's sha256
// field.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/oci"
)

func main() {
	var (
		wasm    = flag.String("wasm", "plugin.wasm", "the Wasm module to pack")
		out     = flag.String("out", "build/oci", "the OCI image layout directory to write (created or added to)")
		tag     = flag.String("tag", "0.1.0", "the image tag (org.opencontainers.image.ref.name)")
		variant = flag.String("variant", string(oci.VariantOCI), `"oci" (Wasm artifact: config + raw module layer) or "compat" (one tar.gz layer holding plugin.wasm)`)
		rootIDs = flag.String("root-ids", "fairshare", "comma-separated root ids for the runtime config (oci variant)")
		abi     = flag.String("abi", "proxy_abi_version_0_2_1", "comma-separated proxy-wasm ABI versions for the runtime config (oci variant)")
		created = flag.String("created", "", "creation time to record (RFC 3339); empty records none, which keeps the digest reproducible")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: wasm-oci [flags]\n\nPacks a Wasm plugin into an OCI image layout and prints the manifest digest.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*wasm, *out, *tag, *variant, *rootIDs, *abi, *created); err != nil {
		fmt.Fprintln(os.Stderr, "wasm-oci:", err)
		os.Exit(1)
	}
}

func run(wasm, out, tag, variant, rootIDs, abi, created string) error {
	mod, err := os.ReadFile(wasm)
	if err != nil {
		return err
	}
	img := oci.Image{
		Module:      mod,
		Tag:         tag,
		Variant:     oci.Variant(variant),
		RootIDs:     split(rootIDs),
		ABIVersions: split(abi),
	}
	if created != "" {
		if img.Created, err = time.Parse(time.RFC3339, created); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	d, err := oci.Write(out, img)
	if err != nil {
		return err
	}
	// Read back what was written: digests, sizes and the module as Istio
	// extracts it.
	p, err := oci.Read(out, tag)
	if err != nil {
		return fmt.Errorf("reading back %s: %w", out, err)
	}
	if string(p.Module) != string(mod) {
		return fmt.Errorf("reading back %s: the module differs from %s", out, wasm)
	}
	fmt.Fprintf(os.Stderr, "wasm-oci: %s:%s (%s variant, module %d bytes)\n", out, tag, p.Variant, len(mod))
	fmt.Println(d.Digest)
	return nil
}

// split returns the comma-separated, non-empty parts of s.
func split(s string) []string {
	var parts []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}
