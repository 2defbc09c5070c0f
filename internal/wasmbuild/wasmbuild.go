// Package wasmbuild builds the project's Wasm modules for tests and
// benchmarks: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, once per
// package path and test binary, then the post-link step of make build
// (internal/wasmlink), so that tests run the modules as they ship. Raw and
// BuildRaw give the linker's output before the step. A module that cannot
// be built fails the test; it is never skipped (a missing plugin.wasm must
// not turn into a green run).
package wasmbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fairshare-wasm/fairshare/internal/wasmlink"
)

// PluginPackage is the package path of plugin.wasm's main package.
const PluginPackage = "./cmd/plugin"

var (
	mu    sync.Mutex
	raw   = map[string][]byte{} // the linker's output
	built = map[string][]byte{} // after wasmlink.Transform
	errs  = map[string]error{}  // of the build
	terrs = map[string]error{}  // of the post-link step
)

// Plugin returns the bytes of plugin.wasm built from the working tree. If the
// environment variable FAIRSHARE_WASM names a file, that file is used as it
// is (make test builds the module once, through the post-link step, and
// passes it to every test binary).
func Plugin(tb testing.TB) []byte {
	tb.Helper()
	if p := os.Getenv("FAIRSHARE_WASM"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatalf("wasmbuild: FAIRSHARE_WASM=%s: %v", p, err)
		}
		return b
	}
	return Module(tb, PluginPackage)
}

// Module returns the bytes of the Wasm module built from the main package at
// pkg (a path relative to the module root, such as "./cmd/plugin"), after
// the post-link step.
func Module(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := Build(pkg)
	if err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return b
}

// Raw returns the bytes the Go linker wrote for the main package at pkg,
// before the post-link step: for the tests that show what the step
// changes.
func Raw(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := BuildRaw(pkg)
	if err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return b
}

// Build builds the main package pkg (relative to the module root) for
// wasip1 as a reactor (c-shared), applies wasmlink.Transform and returns
// the module's bytes. Results are cached for the life of the process.
func Build(pkg string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	if err, ok := terrs[pkg]; ok {
		return nil, err
	}
	b, err := buildRaw(pkg)
	if err != nil {
		return nil, err
	}
	t, err := wasmlink.Transform(b)
	if err != nil {
		err = fmt.Errorf("post-link step for %s: %w", pkg, err)
		terrs[pkg] = err
		return nil, err
	}
	built[pkg] = t
	return t, nil
}

// BuildRaw is Build without the post-link step: the linker's output.
func BuildRaw(pkg string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	return buildRaw(pkg)
}

// buildRaw builds pkg once; mu is held.
func buildRaw(pkg string) ([]byte, error) {
	if err, ok := errs[pkg]; ok {
		return nil, err
	}
	if b, ok := raw[pkg]; ok {
		return b, nil
	}
	b, err := build(pkg)
	if err != nil {
		errs[pkg] = err
		return nil, err
	}
	raw[pkg] = b
	return b, nil
}

func build(pkg string) ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "wasmbuild")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "module.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build %s for wasip1: %v\n%s", pkg, err, stderr.String())
	}
	return os.ReadFile(out)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the fairshare module")
	}
	return filepath.Dir(gomod), nil
}
