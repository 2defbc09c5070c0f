// Command plugin is plugin.wasm, the fair-share proxy-wasm filter. It only
// wires package plugin to the proxy-wasm ABI; build it with make build,
// which runs
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o build/plugin.raw.wasm ./cmd/plugin
//	go run ./cmd/wasm-wasi -in build/plugin.raw.wasm -out plugin.wasm
//
// (the second step gives the module the WASI functions older proxy-wasm
// hosts lack; see internal/wasmlink).
package main

import (
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/plugin"
)

// init registers the VM context; it makes no host call.
func init() { hostcalls.SetVMContext(plugin.NewVMContext()) }

// main is required by -buildmode=c-shared and never called.
func main() {}
