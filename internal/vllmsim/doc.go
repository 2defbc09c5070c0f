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
// Prefix caching is not simulated: freed blocks are simply free, every
// prompt is computed, and cached_tokens is never reported. One block
// (vLLM's null block) is reserved, so NumBlocks−1 blocks are usable.
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
// "stop"; "mock_prompt_tokens": k sets each prompt's length. Otherwise a
// prompt of token ids has its length, a text prompt ceil(bytes/4) tokens
// (chat: ceil(content bytes/4) + 3 + 4 per message), and the output length
// is min(max_completion_tokens ?? max_tokens ?? max_model_len − prompt,
// max_model_len − prompt) (completions: max_tokens defaults to 16). A prompt
// of max_model_len tokens or more is a 400. Every token is TokenText.
package vllmsim
