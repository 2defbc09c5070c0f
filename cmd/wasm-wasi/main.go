// Command wasm-wasi is the post-link step of make build: it replaces the
// wasi_snapshot_preview1 imports that older proxy-wasm hosts lack (or
// forbid during _initialize) with functions defined in the module
// (internal/wasmlink) and writes the result.
//
//	go run ./cmd/wasm-wasi -in build/plugin.raw.wasm -out plugin.wasm
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fairshare-wasm/fairshare/internal/wasmlink"
)

func main() {
	in := flag.String("in", "", "the Wasm module the Go linker wrote")
	out := flag.String("out", "", "where to write the transformed module")
	flag.Parse()
	if *in == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: wasm-wasi -in module.wasm -out module.wasm")
		os.Exit(2)
	}
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "wasm-wasi:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	t, err := wasmlink.Transform(b)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, t, 0o644)
}
