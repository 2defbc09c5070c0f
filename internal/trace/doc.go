// Package trace reads public LLM inference traces into one request stream
// for the fairness benchmark and the local runner: each row of a
// trace becomes a [Request] with its arrival time, prompt and output
// lengths and, where the trace has them, its team, class and prefix block
// ids.
//
// # Formats
//
//   - azure: the Azure LLM inference trace 2023 (Azure/AzurePublicDataset,
//     data/AzureLLMInferenceTrace_{code,conv}.csv). CSV with the header
//     TIMESTAMP,ContextTokens,GeneratedTokens; TIMESTAMP like
//     2023-11-16 18:17:03.9799600 (any fraction, read as UTC; a zone suffix
//     or a T separator is also accepted), times relative to the first row.
//     No team, class or prefix structure.
//   - burstgpt: BurstGPT (HPMLL/BurstGPT, data/BurstGPT_*.csv). CSV with
//     the header Timestamp,Model,Request tokens,Response tokens,Total
//     tokens,Log Type (the newer releases' Session ID and Elapsed time
//     columns are accepted too); Timestamp in seconds from the trace's
//     start. Rows with 0 response tokens are the requests that failed (the
//     dataset's README; its "without_fails" files are the same traces
//     without them). They are dropped, not replayed, and counted in
//     [Trace.Failed]: a failed request's cost in the real service is
//     unknown (it may have been refused before any prefill), and replaying
//     it as a request that generates nothing would invent a cost. Model and
//     Log Type are not used.
//   - mooncake: the Mooncake traces (kvcache-ai/Mooncake,
//     FAST25-release/traces/*.jsonl). One JSON object a line: timestamp
//     (milliseconds), input_length, output_length, hash_ids (exactly one id
//     per started 512-token block of the prompt, as in every row of the
//     FAST'25 traces). Other fields are ignored.
//   - jsonl: the project's own, below.
//
// # The jsonl format
//
// One JSON object a line, blank lines skipped, unknown fields an error:
//
//	{"arrival_s": 1.25, "team": "a", "class": "interactive", "prompt_tokens": 900, "output_tokens": 120, "blocks": [7, 8]}
//
// arrival_s (seconds, ≥ 0), team (a non-empty token), class ("interactive"
// or "batch"), prompt_tokens and output_tokens are required; blocks, the
// prompt's prefix block ids of [BlockTokens] tokens each (at most one per
// started block, so a file may name only the shared part of a prompt), is
// optional.
//
// # Errors
//
// Token counts are integers in [0, 2^30]. A malformed row is an error that
// names the file, line and field, as in
//
//	conv.csv:17: GeneratedTokens: "x" is not a non-negative integer
//
// and every row of the file is checked, inside the window or not.
//
// # Options
//
// A [Spec] (the "trace" object of a scenario file) selects and shapes the
// stream. Read applies its options in this order:
//
//  1. The rows are sorted by time (stably, so ties keep file order); the
//     earliest row is the trace's origin (for sorted traces, its first row).
//  2. start_s and duration_s cut the window [start_s, start_s+duration_s)
//     in trace seconds after the origin (duration_s 0: to the end).
//  3. every and offset take the window's rows number offset,
//     offset+every, offset+2·every, …: specs that differ only in offset
//     take disjoint rows, and the offsets 0…every−1 together take all of
//     them, so one trace can feed several teams.
//  4. rate_scale thins or thickens what is left (see below).
//  5. Arrivals are measured from the window's start and stretched by
//     time_scale (2: twice as slow, so half the rate).
//
// # rate_scale
//
// Each row gets a number u(line, k) in [0, 1) from a fixed hash (the
// splitmix64 finaliser) of its source line and k; nothing else. A row makes
// ⌊rate_scale⌋ requests, plus one when u(line, 0) is below the fractional
// part of rate_scale: below 1 that thins (a row is kept with probability
// rate_scale), above 1 it thickens. The count is therefore
// n·⌊r⌋ + B where B is a sum of n hash draws with mean n·f (f the
// fractional part): within 4·√(n·f·(1−f)) + 1 of n·r, as the tests check.
// A row's k-th extra copy arrives u(line, k) of the way from the row to the
// next row taken (the last row: to the window's end), so copies fill the
// gaps instead of stacking on the original and the per-minute shape of the
// window is kept. Copy k's block ids are the original ids remapped into a
// space of copy k's own (a hash of the id and k): copies share prefixes
// among themselves as the originals do, never with the originals (a
// thickened trace has more users, not the same user twice). Because
// decisions hang on the line number only, a row is kept or copied the same
// way whatever the window, and two specs that differ only in offset thin
// disjoint rows.
//
// What the options do to burstiness (measured on the shipped windows): the
// hash thinning acts as independent thinning, so a Poisson stream stays
// Poisson and a bursty one keeps its per-minute shape at the lower rate
// (its inter-arrival CV² moves towards 1, to p·CV² + 1 − p for a renewal
// stream: the Azure code window's 16.2 becomes 11.6 at rate_scale 0.5). Taking every n-th row
// instead smooths each part: its gaps are sums of n gaps of the trace, so a
// Poisson trace's CV falls to about 1/√n (the Azure conversation window's
// 1.05 becomes 0.76 with every 2). Thickening multiplies the per-minute
// counts by ⌊rate_scale⌋ exactly (plus the hashed fraction) and raises the
// CV somewhat (splitting a gap at a uniform point keeps its length but
// shortens the mean gap more than the long ones: 16.2 becomes 19.6 at
// rate_scale 2). Reports should quote [Summarize] of the stream replayed,
// not of the source.
//
// # Determinism
//
// Read's result depends only on the bytes of the file and the spec: no
// clock, no random source, no map order. The same input and spec give
// identical requests, sorted by arrival, then source line, then copy.
//
// [Summarize] reports what a stream is (count, rate, inter-arrival
// coefficient of variation, per-minute extremes, token percentiles), so a
// report can say which window it replayed.
package trace
