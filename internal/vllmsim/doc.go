// Package vllmsim simulates vLLM V1 serving one model (under one or several
// served names): the scheduler of an engine core (token budget,
// max_num_seqs, KV blocks, fcfs and priority policies, preemption by
// recompute), a step-time model, and the OpenAI-compatible HTTP API with
// vLLM's JSON shapes, errors and metrics.
// The facts it follows were read from vLLM main at 9aaf83ef
// (vllm/v1/core/sched/scheduler.py, request_queue.py, v1/request.py,
// entrypoints/openai, v1/metrics/loggers.py); the code is the project's
// own.
//
// # Engine
//
// One step mirrors vLLM's Scheduler.schedule():
//
//   - the running requests go first, in admission order, each asking for
//     the rest of its known tokens (1 when decoding, a chunk when
//     prefilling) within the step's token budget (MaxBatchedTokens);
//   - if its KV blocks cannot be allocated, a victim is preempted until they
//     can: under Priority the running request with the largest (priority,
//     arrival) (the first in admission order on ties; its budget is refunded
//     if it was already scheduled), under FCFS the last admitted; the pass
//     stops if the victim is the request itself;
//   - only if nothing was preempted, waiting requests are admitted in queue
//     order (a heap by (priority, arrival, submission order) under Priority,
//     a deque under FCFS) while the budget lasts and the running set is below
//     MaxNumSeqs; a request is admitted only if its whole sequence fits in the
//     free blocks, and the first that does not stops admission (strict
//     head-of-line blocking);
//   - a waiting request never preempts a running one, unless
//     EngineConfig.WaitingPreempt selects PR #45561's or PR #54530's
//     behaviour at MaxNumSeqs;
//   - a preempted request frees its blocks, keeps its priority and arrival,
//     goes back to the waiting queue (front under FCFS) and, when
//     re-admitted, recomputes its prompt and the tokens it had generated;
//     usage counts each output token once;
//   - n > 1 is n engine requests that share priority and arrival.
//
// One block (vLLM's null block) is reserved, so NumBlocks−1 blocks are
// usable.
//
// # Prefix caching
//
// Off by default (EngineConfig.EnablePrefixCaching; vLLM turns it on by
// default): freed blocks are simply free and every prompt is computed. On,
// the engine caches full blocks as vLLM V1's automatic prefix caching does
// (block_pool.py, kv_cache_utils.py, kv_cache_manager.py,
// single_type_kv_cache_manager.py and sched/scheduler.py; files and commits
// in prefix.go):
//
//	block pool (NumBlocks; block 0 is the null block)
//	┌──┬──┬──┬──┬──┬──┬──┬──┬──┬──┬──┐
//	│∅ │h1│h2│h3│ 4│ 5│h6│h7│ 8│ 9│10│   hN: full block cached under hash N
//	└──┴──┴──┴──┴──┴──┴──┴──┴──┴──┴──┘
//	 held (ref ≥ 1): 1 2 3 4 (request A), 1 2 3 5 (request B shares 1–3)
//	 free queue, evicted from the head, freed blocks appended at the tail:
//	   head → 8 → 9 → 10 → 7 → 6 ← tail   (6, 7 keep their hashes: a hit
//	                                          takes them back out)
//	 hash → blocks: h1→1, h2→2, h3→3, h6→6, h7→7
//
// In the picture a request that held 6 then 7 has finished. The rules:
//
//   - A block's hash chains its parent block's hash with its tokens, for
//     full blocks only (the partial last block is never cached).
//   - A waiting request looks up its longest chain of cached blocks, capped
//     at num_tokens − 1 tokens (a fully cached prompt recomputes its last
//     block: hits are whole blocks), before its blocks are allocated. The
//     hits count as computed tokens: they shorten the prefill and the step
//     time. The whole sequence must still fit in the free blocks, counting
//     the hit blocks that are free as taken (they leave the free queue).
//   - A hit increments the block's refcount; a block with refcount > 0 is
//     never evicted. Blocks are cached when allocated, so a second request
//     with the same prompt admitted in the same step (n > 1 among them)
//     shares them.
//   - A finished, aborted or preempted request frees its blocks tail first:
//     they join the free queue's tail keeping their hashes, so the least
//     recently freed go first and a request's last blocks before its first.
//     Allocating a free block that has a hash evicts the hash. A preempted
//     request's resume may hit its own blocks.
//   - Record.CachedTokens is vLLM's num_cached_tokens (hits at the first
//     scheduling). vllm:prefix_cache_queries_total (tokens looked up) and
//     vllm:prefix_cache_hits_total count every lookup of requests never
//     preempted, also one that is then blocked (as vLLM's PrefixCacheStats);
//     they are exported, and cache_config_info says
//     enable_prefix_caching="True", only with caching on.
//
// Tokens are not real: a token is a 64-bit identity, and requests share a
// prefix as far as their identities agree. A Sim request names its content
// with Request.HashIDs (Mooncake-style ids, one per HashIDTokens = 512
// prompt tokens: token t is token t mod 512 of the block named
// HashIDs[t/512], so an engine block of any BlockSize hits exactly when all
// its tokens lie in the shared ids). Over HTTP the identities come from the
// request: "mock_hash_ids" (the same ids) if given, else a prompt of token
// ids (the ids), a text prompt (its bytes in 4-byte tokens, the mock's
// tokenizer), a chat prompt (per message a 16-byte header naming its role
// and its text, then a 12-byte generation prompt, in 4-byte tokens: exactly
// the mock's token count). Tokens past what the source names, and every
// generated token, are the request's own.
//
// A step lasts StepModel.Duration of the tokens it computes (defaults for
// Llama-3.1-8B on one H100: DefaultStepModel). Its tokens appear at its end.
//
// # Virtual time
//
// Sim runs replicas of the engine in a deterministic discrete-event loop;
// the caller schedules its own events in the same queue:
//
//	sim := vllmsim.NewSim(vllmsim.TestConfig(), 1, 42)
//	sim.At(sim.Now().Add(time.Second), func() {
//		sim.Submit(vllmsim.Request{Priority: -1, PromptTokens: 100, MaxTokens: 20},
//			vllmsim.Callbacks{OnFinish: func(r vllmsim.Record) {
//				fmt.Println(r.FinishReason, r.CompletionTokens, r.TTFT())
//			}})
//	})
//	sim.Run()
//	fmt.Println(sim.Stats().Preemptions)
//
// # Real time
//
// Server serves the same engines under the wall clock (scaled by
// ServerOptions.TimeScale) as an http.Handler:
//
//	srv := vllmsim.NewServer(vllmsim.DemoConfig(), vllmsim.ServerOptions{Replicas: 2, TimeScale: 0.1})
//	defer srv.Close()
//	http.ListenAndServe(":8000", srv)
//
// It answers POST /v1/chat/completions and /v1/completions (streaming with
// one SSE event per token, flushed as the engine produces it, usage chunks,
// data: [DONE]; or one JSON body), GET /v1/models, /health, /load,
// /version, /metrics (Prometheus text with vLLM's metric names and labels
// model_name and engine) and, with ServerOptions.Debug, /debug/records
// (Records as JSON). Bad input gets vLLM's status and OpenAI-style error
// body. A client that disconnects aborts its request in the engine. The
// response id is "chatcmpl-"/"cmpl-" plus the X-Request-Id header, the
// body's request_id, or a counter; records carry it as Record.ID.
//
// Mock-only request fields (real vLLM ignores unknown fields):
// "mock_eos_after": k ends each choice after k tokens with finish_reason
// "stop"; "mock_prompt_tokens": k sets each prompt's length;
// "mock_hash_ids": [ids] names each prompt's content for prefix caching
// (read only with caching on). Otherwise a
// prompt of token ids has its length, a text prompt ceil(bytes/4) tokens
// (chat: ceil(content bytes/4) + 3 + 4 per message), and the output length
// is min(max_completion_tokens ?? max_tokens ?? max_model_len − prompt,
// max_model_len − prompt) (completions: max_tokens defaults to 16). A prompt
// of max_model_len tokens or more is a 400. Every token is TokenText. With
// ServerOptions.EnablePromptTokensDetails (--enable-prompt-tokens-details)
// usage carries "prompt_tokens_details":{"cached_tokens":N} when N > 0: in
// the JSON body (else null there) and the include_usage chunk (else
// absent), never in continuous usage; N is the first prompt's (JSON) or the
// first output's (stream) Record.CachedTokens, as vLLM's
// final_res.num_cached_tokens and first-iteration num_cached_tokens.
package vllmsim
