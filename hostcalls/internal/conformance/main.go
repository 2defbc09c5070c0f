//go:build wasip1

package main

import "github.com/fairshare-wasm/fairshare/hostcalls/internal/conformance/script"

func init() { script.Register(script.All()...) }

func main() {}
