// Command vllmsim serves the vLLM V1 simulator (internal/vllmsim) as an
// OpenAI-compatible HTTP server: POST /v1/chat/completions and
// /v1/completions, GET /v1/models, /health, /metrics.
//
//	vllmsim -preset demo -policy priority -replicas 2 -time-scale 0.1 -port 8000
//
// A preset (default: 8B on one H100; test; demo) gives the engine knobs;
// each knob flag overrides it when given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	preset := fs.String("preset", "default", "engine preset: default (8B on 1×H100), test or demo")
	model := fs.String("model", vllmsim.DefaultModel, "served model name")
	policy := fs.String("policy", "", "scheduling policy: fcfs or priority (preset: priority)")
	maxSeqs := fs.Int("max-num-seqs", 0, "max running requests per engine")
	maxTokens := fs.Int("max-num-batched-tokens", 0, "token budget per step")
	numBlocks := fs.Int("num-blocks", 0, "KV cache blocks (num_gpu_blocks, one is the null block)")
	blockSize := fs.Int("block-size", 0, "tokens per KV block")
	maxModelLen := fs.Int("max-model-len", 0, "longest sequence in tokens")
	preemptWaiting := fs.String("preempt-waiting", "off", "waiting request may preempt at max_num_seqs: off, 45561 (PR #45561) or 54530 (PR #54530)")
	stepBase := fs.Duration("step-base", 0, "step model: fixed cost per step (preset: 6ms)")
	stepPrefill := fs.Duration("step-prefill-token", 0, "step model: cost per prefill token (preset: 25µs)")
	stepDecode := fs.Duration("step-decode-seq", 0, "step model: cost per decoding sequence (preset: 15µs)")
	stepContext := fs.Duration("step-context-token", 0, "step model: cost per context token of a decoding sequence (preset: 50ns)")
	replicas := fs.Int("replicas", 1, "engines behind the one address (least outstanding requests)")
	timeScale := fs.Float64("time-scale", 1, "wall seconds per model second (0.1 runs 10× faster)")
	host := fs.String("host", "127.0.0.1", "listen host")
	port := fs.Int("port", 8000, "listen port")
	debug := fs.Bool("debug", false, "serve GET /debug/records")
	legacy := fs.Bool("legacy-v0-priority-error", false, "answer a priority under fcfs with V0's 400")
	prefixCaching := fs.Bool("enable-prefix-caching", false, "automatic prefix caching (vLLM's default is on; off here)")
	promptDetails := fs.Bool("enable-prompt-tokens-details", false, "report usage.prompt_tokens_details.cached_tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("vllmsim: unexpected arguments %q", fs.Args())
	}

	var cfg vllmsim.EngineConfig
	switch *preset {
	case "default":
		cfg = vllmsim.DefaultConfig()
	case "test":
		cfg = vllmsim.TestConfig()
	case "demo":
		cfg = vllmsim.DemoConfig()
	default:
		return fmt.Errorf("vllmsim: -preset: want default, test or demo, got %q", *preset)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["policy"] {
		cfg.Policy = vllmsim.Policy(*policy)
	}
	overrideInt := func(name string, v int, dst *int) {
		if set[name] {
			*dst = v
		}
	}
	overrideInt("max-num-seqs", *maxSeqs, &cfg.MaxNumSeqs)
	overrideInt("max-num-batched-tokens", *maxTokens, &cfg.MaxBatchedTokens)
	overrideInt("num-blocks", *numBlocks, &cfg.NumBlocks)
	overrideInt("block-size", *blockSize, &cfg.BlockSize)
	overrideInt("max-model-len", *maxModelLen, &cfg.MaxModelLen)
	overrideDur := func(name string, v time.Duration, dst *time.Duration) {
		if set[name] {
			*dst = v
		}
	}
	overrideDur("step-base", *stepBase, &cfg.Step.Base)
	overrideDur("step-prefill-token", *stepPrefill, &cfg.Step.PerPrefillToken)
	overrideDur("step-decode-seq", *stepDecode, &cfg.Step.PerDecodeSeq)
	overrideDur("step-context-token", *stepContext, &cfg.Step.PerContextToken)
	cfg.EnablePrefixCaching = *prefixCaching
	if *preemptWaiting != "off" {
		cfg.WaitingPreempt = vllmsim.WaitingPreempt(*preemptWaiting)
	}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if *replicas < 1 {
		errs = append(errs, fmt.Errorf("vllmsim: -replicas: must be at least 1, got %d", *replicas))
	}
	if !(*timeScale > 0) {
		errs = append(errs, fmt.Errorf("vllmsim: -time-scale: must be positive, got %v", *timeScale))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	srv := vllmsim.NewServer(cfg, vllmsim.ServerOptions{Model: *model, Replicas: *replicas, TimeScale: *timeScale,
		Debug: *debug, LegacyV0PriorityError: *legacy, EnablePromptTokensDetails: *promptDetails})
	defer srv.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	log.Printf("vllmsim: serving %s on http://%s (policy %s, %d replica(s), max_num_seqs %d, %d blocks of %d, time scale %g)",
		*model, ln.Addr(), cfg.Policy, *replicas, cfg.MaxNumSeqs, cfg.NumBlocks, cfg.BlockSize, *timeScale)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
