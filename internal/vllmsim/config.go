package vllmsim

import (
	"errors"
	"fmt"
	"time"
)

// Policy is the scheduling policy of an engine, as vLLM's --scheduling-policy.
type Policy string

// The two policies of vLLM V1.
const (
	// FCFS keeps the waiting queue in arrival order and ignores the request's
	// priority; the preemption victim is the most recently admitted request.
	FCFS Policy = "fcfs"
	// Priority orders the waiting queue by (priority, arrival, submission
	// order), lower first; the preemption victim is the running request with
	// the largest (priority, arrival).
	Priority Policy = "priority"
)

// WaitingPreempt selects whether a waiting request may preempt a running one
// when the running set is at MaxNumSeqs. vLLM main (2026-05) never does this
// (vllm-project/vllm issue #40004); the other modes implement open pull requests so that a
// benchmark can compare them. It has no effect under FCFS.
type WaitingPreempt string

// The waiting-preemption modes.
const (
	// WaitingPreemptOff is vLLM's behaviour: the waiting pass stops when the
	// running set holds MaxNumSeqs requests.
	WaitingPreemptOff WaitingPreempt = ""
	// WaitingPreempt45561 is PR #45561: when the running set is full and the
	// waiting head is strictly lower in (priority, arrival) than the running
	// request with the largest (priority, arrival) (first in admission order
	// on ties), that request is preempted (recompute, back to the waiting
	// queue, budget of this step refunded) and the head is admitted in the
	// same step. The simulator preempts only if the head's whole sequence
	// then fits in the free KV blocks, so that no request is evicted for a
	// head that would stay blocked.
	WaitingPreempt45561 WaitingPreempt = "45561"
	// WaitingPreempt54530 is PR #54530: as WaitingPreempt45561 but the head
	// must have a strictly lower priority number; arrival does not count, so
	// requests of equal priority never preempt each other.
	WaitingPreempt54530 WaitingPreempt = "54530"
)

// StepModel gives the duration of one engine step (one schedule() plus one
// forward pass) as a linear function of the work scheduled in it:
//
//	step = Base + PerPrefillToken·Σprefill tokens + PerDecodeSeq·#decode seqs
//	            + PerContextToken·Σcontext length of decode seqs
//
// A prefill token is any token computed in the step other than a decode
// (including the recompute of a resumed request). The defaults
// (DefaultStepModel) are for Llama-3.1-8B BF16 on one H100 SXM; for another
// model or GPU scale Base and PerPrefillToken with the compute cost and
// PerContextToken with the KV bytes per token over memory bandwidth.
type StepModel struct {
	// Base is the fixed cost of a step: scheduling, sampling, and reading the
	// weights once. Default 6 ms.
	Base time.Duration
	// PerPrefillToken is the cost of one prompt token. Default 25 µs.
	PerPrefillToken time.Duration
	// PerDecodeSeq is the extra cost of one decoding sequence. Default 15 µs.
	PerDecodeSeq time.Duration
	// PerContextToken is the attention cost per token of context of a
	// decoding sequence (KV read). Default 50 ns.
	PerContextToken time.Duration
}

// Default step constants, for Llama-3.1-8B BF16 on 1×H100 SXM (TP=1), from
// inference-sim/inference-sim's regressions fitted to vLLM on an H100
// (defaults.yaml at 3d79c654, sim/latency/latency.go) and vLLM's KV layout
// for that model: a 5.75–6.5 ms base in the fitted regressions, 17–35 µs
// per prefill token, 10–20 µs per decoding sequence, and 128 KiB of KV per
// token read at about 2.5 TB/s (≈0.05 µs per context token).
const (
	DefaultStepBase            = 6 * time.Millisecond
	DefaultStepPerPrefillToken = 25 * time.Microsecond
	DefaultStepPerDecodeSeq    = 15 * time.Microsecond
	DefaultStepPerContextToken = 50 * time.Nanosecond
)

// DefaultStepModel returns the step constants for an 8B model on one H100.
// With them a single stream decodes at about 166 tokens/s, 256 sequences at
// 1k context take about 23 ms per step (about 11k tokens/s), and an
// 8192-token prefill chunk takes about 0.21 s.
func DefaultStepModel() StepModel {
	return StepModel{
		Base:            DefaultStepBase,
		PerPrefillToken: DefaultStepPerPrefillToken,
		PerDecodeSeq:    DefaultStepPerDecodeSeq,
		PerContextToken: DefaultStepPerContextToken,
	}
}

// Duration returns the step time for prefillTokens prompt tokens and
// decodeSeqs decoding sequences whose contexts sum to contextTokens.
func (m StepModel) Duration(prefillTokens, decodeSeqs, contextTokens int) time.Duration {
	return m.Base + time.Duration(prefillTokens)*m.PerPrefillToken +
		time.Duration(decodeSeqs)*m.PerDecodeSeq +
		time.Duration(contextTokens)*m.PerContextToken
}

// EngineConfig configures one engine (one vLLM replica). The zero value is
// not valid; start from DefaultConfig, TestConfig or DemoConfig.
type EngineConfig struct {
	// Policy is FCFS or Priority.
	Policy Policy
	// MaxNumSeqs is the most requests in the running set (--max-num-seqs).
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one step
	// (--max-num-batched-tokens). Prompts longer than it are prefilled in
	// chunks (chunked prefill is always on).
	MaxBatchedTokens int
	// NumBlocks is num_gpu_blocks, the KV cache size in blocks. As in vLLM
	// one block is the reserved null block, so NumBlocks-1 are usable.
	NumBlocks int
	// BlockSize is the number of tokens per KV block (16 on CUDA).
	BlockSize int
	// MaxModelLen is the longest sequence (prompt + output) in tokens. It
	// must fit in the usable KV blocks.
	MaxModelLen int
	// WaitingPreempt enables preemption on behalf of a waiting request at
	// MaxNumSeqs (off in vLLM; see WaitingPreempt).
	WaitingPreempt WaitingPreempt
	// EnablePrefixCaching turns on automatic prefix caching
	// (--enable-prefix-caching; on by default in vLLM V1, off here so that
	// results without it stay as they were): full blocks keep their hash
	// after they are freed, least recently freed evicted first, and a
	// waiting request's cached prefix counts as computed before its blocks
	// are allocated. See the package documentation.
	EnablePrefixCaching bool
	// Step is the step-time model.
	Step StepModel
}

// DefaultConfig returns a production-like configuration
// for Llama-3.1-8B on one H100 (vLLM's API-server defaults on a ≥70 GiB GPU):
// priority policy, 1024 sequences, 8192 batched tokens, 29205 blocks of 16
// tokens (inference-sim's fitted KV capacity), max_model_len 8192.
func DefaultConfig() EngineConfig {
	return EngineConfig{
		Policy:           Priority,
		MaxNumSeqs:       1024,
		MaxBatchedTokens: 8192,
		NumBlocks:        29205,
		BlockSize:        16,
		MaxModelLen:      8192,
		Step:             DefaultStepModel(),
	}
}

// TestConfig returns a small test configuration: priority policy, 4
// sequences, 256 batched tokens, 64 blocks of 16 tokens, max_model_len 512,
// with the default step constants. It makes queueing and preemption happen
// with a handful of small requests.
func TestConfig() EngineConfig {
	return EngineConfig{
		Policy:           Priority,
		MaxNumSeqs:       4,
		MaxBatchedTokens: 256,
		NumBlocks:        64,
		BlockSize:        16,
		MaxModelLen:      512,
		Step:             DefaultStepModel(),
	}
}

// DemoConfig returns a small engine for demos where priority visibly
// matters: priority policy, 16 sequences, 2048 batched tokens, 1025 blocks of
// 16 tokens (16384 usable tokens, so 16 requests of about 1k tokens fill it),
// max_model_len 4096, default step constants.
func DemoConfig() EngineConfig {
	return EngineConfig{
		Policy:           Priority,
		MaxNumSeqs:       16,
		MaxBatchedTokens: 2048,
		NumBlocks:        1025,
		BlockSize:        16,
		MaxModelLen:      4096,
		Step:             DefaultStepModel(),
	}
}

// Validate reports every problem of c, joined, or nil.
func (c EngineConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("vllmsim: config.%s: "+format, append([]any{field}, args...)...))
	}
	switch c.Policy {
	case FCFS, Priority:
	default:
		bad("policy", "must be fcfs or priority, got %q", c.Policy)
	}
	switch c.WaitingPreempt {
	case WaitingPreemptOff, WaitingPreempt45561, WaitingPreempt54530:
	default:
		bad("waitingPreempt", "must be empty, 45561 or 54530, got %q", c.WaitingPreempt)
	}
	if c.MaxNumSeqs < 1 {
		bad("maxNumSeqs", "must be at least 1, got %d", c.MaxNumSeqs)
	}
	if c.MaxBatchedTokens < 1 {
		bad("maxBatchedTokens", "must be at least 1, got %d", c.MaxBatchedTokens)
	}
	if c.BlockSize < 1 {
		bad("blockSize", "must be at least 1, got %d", c.BlockSize)
	}
	if c.NumBlocks < 2 {
		bad("numBlocks", "must be at least 2, got %d", c.NumBlocks)
	}
	if c.MaxModelLen < 2 {
		bad("maxModelLen", "must be at least 2, got %d", c.MaxModelLen)
	}
	if c.BlockSize >= 1 && c.NumBlocks >= 2 && c.MaxModelLen > (c.NumBlocks-1)*c.BlockSize {
		bad("maxModelLen", "%d tokens do not fit in %d usable KV blocks of %d tokens",
			c.MaxModelLen, c.NumBlocks-1, c.BlockSize)
	}
	if c.Step.Base < 0 || c.Step.PerPrefillToken < 0 || c.Step.PerDecodeSeq < 0 || c.Step.PerContextToken < 0 {
		bad("step", "constants must not be negative, got %+v", c.Step)
	}
	if c.Step.Base == 0 && c.Step.PerPrefillToken == 0 && c.Step.PerDecodeSeq == 0 {
		bad("step", "a step must take time: set Base, PerPrefillToken or PerDecodeSeq")
	}
	return errors.Join(errs...)
}
