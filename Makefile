# fairshare: build, test and run the proxy-wasm plugin. `make` lists the targets.
#
# Variables (make VAR=value target):
#   UPSTREAM  make run: a real OpenAI-compatible server (vLLM) instead of the simulator (-upstream)
#   CONFIG    make run: a plugin configuration file (-config); make check-config: the file to check
#   NO_LOAD   make run: non-empty to start without the demo load (-no-load)
#   REPLICAS  make run: N local proxies sharing every pool through an embedded etcd (-replicas)
#   RUN_ARGS  make run: more flags for cmd/fairshare-run
#   OCI_DIR, OCI_TAG, OCI_VARIANT   make oci: output layout, tag, variant (oci|compat)

GO          ?= go
WASM        := plugin.wasm
# The Go linker's output, before the post-link step (cmd/wasm-wasi) that
# gives plugin.wasm its own poll_oneoff, sched_yield, fd_fdstat_set_flags and
# fd_fdstat_get.
RAW_WASM    := build/plugin.raw.wasm
# The older host profiles (hostcalls/host Profile) under which make test runs
# the plugin's tests once more (the first run is under the newest,
# cpp-host-94091cd, Envoy ≥ 1.39): cpp-host-c4d7bb0 is Envoy 1.32.13–1.38,
# cpp-host-pre-c4d7bb0 Envoy 1.24–1.32.12. The two tests skipped run every
# profile themselves.
OLD_PROFILES := cpp-host-c4d7bb0 cpp-host-pre-c4d7bb0
PROFILE_SKIP := TestWasmLegacyWASISurvivesGC|TestWasmLoadsUnderEveryProfile
# staticcheck v0.8.2 is release 2026.2.2 (the proxy serves the v0.x tags only).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TOOLS       := $(CURDIR)/build/tools
OCI_DIR     ?= build/oci
OCI_TAG     ?= 0.1.0
OCI_VARIANT ?= oci

override RUN_ARGS += $(if $(UPSTREAM),-upstream=$(UPSTREAM)) $(if $(CONFIG),-config=$(CONFIG)) $(if $(NO_LOAD),-no-load) $(if $(REPLICAS),-replicas=$(REPLICAS))

# Packages that hold benchmarks (evaluated only by `make bench`).
BENCH_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' -E '^func Benchmark' . 2>/dev/null)))

.DEFAULT_GOAL := help
.PHONY: help build test run check-config bench check oci fairness clean build/fairshare-run

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build plugin.wasm (GOOS=wasip1, c-shared, then cmd/wasm-wasi) and print its size and SHA-256.
	@mkdir -p build
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(RAW_WASM) ./cmd/plugin
	$(GO) run ./cmd/wasm-wasi -in $(RAW_WASM) -out $(WASM)
	@echo "$(WASM): $$(wc -c < $(WASM)) bytes, sha256 $$(sha256sum $(WASM) | cut -d' ' -f1)"

test: build ## Run all tests against the built plugin.wasm, the plugin's again under each older host profile, then the race detector on the host and the core.
	FAIRSHARE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 ./...
	for p in $(OLD_PROFILES); do \
		echo "plugin tests under host profile $$p"; \
		FAIRSHARE_HOST_PROFILE=$$p FAIRSHARE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -skip '$(PROFILE_SKIP)' ./plugin/ || exit 1; \
	done
	FAIRSHARE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -race ./hostcalls/host/ ./hostcalls/host/proxy/ ./fairshare/

run: ## Run the local front door: proxy + vLLM simulator + demo load + live view (UPSTREAM=, CONFIG=, NO_LOAD=, REPLICAS=).
	@$(MAKE) --no-print-directory -j2 build build/fairshare-run
	FAIRSHARE_WASM=$(CURDIR)/$(WASM) ./build/fairshare-run $(RUN_ARGS)

check-config: ## Check a plugin configuration with the plugin's own parser, starting nothing (CONFIG=file.json).
	@if [ -z "$(CONFIG)" ]; then \
		echo "make check-config: no CONFIG: name the plugin configuration to check, e.g. make check-config CONFIG=testdata/plugin/example.json" >&2; \
		exit 2; \
	fi
	@$(MAKE) --no-print-directory build/fairshare-run
	./build/fairshare-run -check '$(CONFIG)'

# Built next to plugin.wasm (make -j2: the two compile for different targets),
# then run as a binary. On a terminal it makes itself the foreground process
# group, so Ctrl-C reaches it and not make: it prints its summary and make
# exits 0, without "*** [Makefile:NN: run] Interrupt". (A SIGINT sent to
# make itself, as `timeout -s INT` does, still makes GNU make report it.)
build/fairshare-run:
	$(GO) build -o $@ ./cmd/fairshare-run

bench: build ## Run the benchmarks (go test -bench) of every package that has some.
	FAIRSHARE_WASM=$(CURDIR)/$(WASM) $(GO) test -count=1 -run=NONE -bench=. -benchmem $(BENCH_PKGS)

check: ## gofmt, go vet and staticcheck (native, and wasip1 for the plugin's packages).
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./cmd/plugin ./plugin ./hostcalls
	GOBIN=$(TOOLS) $(GO) install $(STATICCHECK)
	$(TOOLS)/staticcheck ./...
# U1000 off for wasip1: staticcheck 2026.2 reports //go:wasmexport functions as unused.
	GOOS=wasip1 GOARCH=wasm $(TOOLS)/staticcheck -checks=inherit,-U1000 ./cmd/plugin ./plugin ./hostcalls

oci: build ## Pack plugin.wasm as an OCI image layout in build/oci (tag 0.1.0) and print the manifest digest.
	$(GO) run ./cmd/wasm-oci -wasm $(WASM) -out $(OCI_DIR) -tag $(OCI_TAG) -variant $(OCI_VARIANT)

fairness: build ## Run the fairness benchmark (bench/fairness) on the simulator.
	FAIRSHARE_WASM=$(CURDIR)/$(WASM) $(GO) run ./bench/fairness

clean: ## Remove plugin.wasm and build/ (raw module, OCI layout, tools).
	rm -f $(WASM)
	rm -rf build
