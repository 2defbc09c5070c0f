// Package wasmbuild builds the project's Wasm modules for tests and
// benchmarks: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, once per
// package path and test binary. A module that cannot be built fails the test;
// it is never skipped (a missing plugin.wasm must not turn into a green run).
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
)

// PluginPackage is the package path of plugin.wasm's main package.
const PluginPackage = "./cmd/plugin"

var (
	mu    sync.Mutex
	built = map[string][]byte{}
	errs  = map[string]error{}
)

// Plugin returns the bytes of plugin.wasm built from the working tree. If the
// environment variable FAIRSHARE_WASM names a file, that file is used instead
// (make test builds the module once and passes it to every test binary).
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
// pkg (a path relative to the module root, such as "./cmd/plugin").
func Module(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := Build(pkg)
	if err != nil {
		tb.Fatalf("wasmbuild: %v", err)
	}
	return b
}

// Build builds the main package pkg (relative to the module root) for
// wasip1 as a reactor (c-shared) and returns the module's bytes. Results are
// cached for the life of the process.
func Build(pkg string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	if err, ok := errs[pkg]; ok {
		return nil, err
	}
	b, err := build(pkg)
	if err != nil {
		errs[pkg] = err
		return nil, err
	}
	built[pkg] = b
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
