package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/bench/fairness/wasmgw"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// pluginGateway returns the constructor of the plugin column and its label:
// "wasm" builds ./cmd/plugin for wasip1 and runs it in the wazero host,
// "native" runs package fairshare directly.
// A prebuilt module can be named by wasmFile or the FAIRSHARE_WASM
// environment variable (as make test does).
func pluginGateway(kind, wasmFile string) (fairbench.NewGateway, string, error) {
	switch kind {
	case "native":
		return fairbench.NewNativePlugin, "native (package fairshare, no Wasm)", nil
	case "wasm":
		if wasmFile == "" {
			wasmFile = os.Getenv("FAIRSHARE_WASM")
		}
		var wasm []byte
		var err error
		if wasmFile != "" {
			wasm, err = os.ReadFile(wasmFile)
		} else {
			wasm, err = wasmbuild.Build(wasmbuild.PluginPackage)
		}
		if err != nil {
			return nil, "", err
		}
		mod, err := host.Compile(context.Background(), wasm)
		if err != nil {
			return nil, "", fmt.Errorf("compile plugin.wasm: %w", err)
		}
		return wasmgw.New(mod, wasmgw.DefaultVMs), fmt.Sprintf("wasm (plugin.wasm in the wazero host, %d VMs, virtual clock)", wasmgw.DefaultVMs), nil
	}
	return nil, "", fmt.Errorf("-plugin: unknown %q (wasm, native)", kind)
}
