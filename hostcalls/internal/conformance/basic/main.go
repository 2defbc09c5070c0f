//go:build wasip1

// Command basic is the conformance module restricted to the host functions
// the SDK's proxytest emulator provides (script.Basic): it imports neither
// proxy_get_log_level, proxy_get_buffer_status, proxy_get_header_map_size
// nor proxy_get_status. See ../doc.go for the script format.
package main

import "github.com/fairshare-wasm/fairshare/hostcalls/internal/conformance/script"

func init() { script.Register(script.Basic()...) }

func main() {}
