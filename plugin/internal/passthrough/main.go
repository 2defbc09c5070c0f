// Command passthrough is a proxy-wasm filter that does nothing: every
// callback continues. Built like plugin.wasm, it is the baseline of the
// plugin's request-path benchmarks (the cost of the host, the ABI and the Go
// runtime without any filter logic).
package main

import (
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

// NewHttpContext implements types.PluginContext.
func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }

func init() { hostcalls.SetVMContext(&vmContext{}) }

func main() {}
