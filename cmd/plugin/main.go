// Command plugin is plugin.wasm, the fair-share proxy-wasm filter. It only
// wires package plugin to the proxy-wasm ABI; build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm ./cmd/plugin
package main

import (
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/plugin"
)

// init registers the VM context; it makes no host call.
func init() { hostcalls.SetVMContext(plugin.NewVMContext()) }

// main is required by -buildmode=c-shared and never called.
func main() {}
