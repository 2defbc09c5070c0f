// Package plugin is the fair-share proxy-wasm HTTP filter: it decides the
// vLLM priority of every OpenAI-style completion request from its team's
// share of a GPU pool (package fairshare) and writes it into the request
// body, then charges the team the tokens the response reports.
//
// The request path, for a POST to one of the configured paths (compared
// after cleanPath: query dropped, escapes decoded, slashes merged, dot
// segments resolved, trailing slash dropped):
//
//	client ──► on_request_headers ──► on_request_body ─────────────────► vLLM
//	           team, class             buffer up to max_body_bytes         │
//	           strip x-fairshare-*,    pool = first pool listing model     │
//	           content-length          estimate; Arrive (read–decide–CAS  │
//	                                   on the pool's shared record)        │
//	                                   "priority": N written in the body   │
//	client ◄── on_response_body ◄── on_response_headers ◄─────────────────┘
//	           usage read from JSON    x-fairshare-team, -pool,
//	           or SSE (hidden usage    -priority, -borrowing
//	           chunk removed)
//	           Release(usage) at the end of the response, or on
//	           on_log/on_done with the best estimate (reset, abort, timeout),
//	           or on on_delete for a host that skips on_done
//
// The estimate is the prompt (bytes/4 of messages, prompt strings, input
// and instructions, each image, audio or video content part 1024 tokens,
// exact for token-id prompts) plus n × max_(completion_|output_)tokens for
// every prompt of a completions batch, saturating at 2^40 tokens; numbers
// are read as vLLM's lax pydantic models read them ("4096" counts) and
// "stream" as vLLM reads a bool ("true" and 1 count). A pooling request
// (embeddings, score, rerank, classify) is estimated at its body's bytes/4.
//
// Each pool lives in one shared-data record (key "<plugin_name>/fairshare/
// pool/<pool>/v<record version>") that every VM of every worker updates with
// compare-and-swap; see records. A request forwarded without a grant
// (failure_mode "open") is charged its usage all the same.
//
// Flow control (flow.go; max_queue_time > 0): a borrower that finds no
// room is held, its stream paused with its body buffered, and dispatched
// by its own VM in the pool's standing order when capacity frees, its
// priority decided then; see flow.go's picture. With hold_headers "on"
// on_request_headers returns Pause for every scheduled request, so under
// Envoy's allow_on_headers_stop_iteration the headers wait for the
// decision too (nothing upstream while held; the decision also goes into
// x-fairshare-team, -pool and -priority request headers); a stream that
// gets no body callback within hold_headers_probe (the host converted the
// pause) is continued by the tick and decided as without it.
//
// In mode "shadow" (shadow.go) the walk is the same but changes nothing
// upstream: no header removed or added, the body buffered and forwarded
// byte for byte, a borrower that finds no room granted at once
// (fairshare.Pool.ArriveShadow) instead of held, every error of the
// request path counted as would_refuse_<reason>_total instead of
// answered; the response carries x-fairshare-mode, -would-hold and
// -would-refuse with the usual decision headers. Unscheduled requests pass
// untouched unless shadow_strip_priority is true.
//
// Every other request with a body that vLLM could read as JSON is buffered
// and its top-level "priority" blanked out in place (unscheduled "strip")
// or refused (unscheduled "reject"): every request forwarded upstream
// carries the priority the plugin decided or none at all. Whether a body
// may be JSON is decided from the buffered body (its first four bytes, then
// its first byte that is not whitespace), never from where a chunk ends:
// nothing of it passes before that.
//
// Errors are answered with OpenAI-style JSON bodies: 401 without a team,
// 400 for a team, class or user header sent twice, 400 for a user name
// longer than 64 bytes or with a byte outside 0x21..0x7e, 403 for an unknown team with
// unknown_team "reject", 400 for an unknown class, a body that is not one
// UTF-8 JSON object or a request without a model (and no default_model),
// 404 for a model no pool lists (unknown_model "reject"), 413 beyond
// max_body_bytes, 500 when the body cannot be read or rewritten, 503 when
// the record cannot be updated and failure_mode is "closed". GET
// status_path answers a JSON snapshot of every pool, to a bearer token or
// with status_public, else 403.
//
// # Layout
//
// The files follow a request; each holds one phase, named for it:
//
//	vm.go          the VM and plugin contexts: OnPluginStart (configure, create or
//	               reconfigure the pool records), OnTick (dispatch, retries, heartbeats),
//	               the holder id, the per-pool state and team slots
//	stream.go      the stream context and its states (streamState), the free list
//	               (NewHttpContext, DeleteHttpContext), the header read buffer
//	request.go     the scheduled path, in order: on_request_headers (team, class),
//	               on_request_body (buffering), decide (pool, estimate, arrive, rewrite)
//	unscheduled.go any other request: sniff whether its body may be JSON, strip (or
//	               refuse) a client's priority
//	estimate.go    the whole token estimate: the prompt and completion tokens read from
//	               the body, the cost and KV demand, the completion means and their sharing
//	grant.go       the decision through the pool record (arrive) and, next to it, its
//	               end: release, charge, settle, the releases kept for retry, undo
//	flow.go        flow control: holding, dispatch, resume, wake-ups, expiry, cancel
//	spill.go       spill-over: a request that would be held moves to a fallback pool with room
//	               (TakeSpill) in its turn, after the requests held before it (spillHeads),
//	               and a held one later on the dispatch tick (respill), routed by
//	               x-fairshare-pool; spill_to's validation, counts, status
//	shadow.go      mode "shadow": decided and accounted, forwarded as sent, the would-be
//	               decision in response headers and counters
//	engine.go      engine_priority: whether the priority is written, the engine's
//	               refusal read from the response, the pool's switch and its mark
//	body.go        the request body: inspect (one pass over its members), rewrite, send
//	response.go    on_response_headers, on_response_body, on_response_trailers, on_done:
//	               usage read, finish (the release with usage or the best estimate)
//	usage.go       usage parsing: JSON responses, SSE streams (the hidden usage chunk)
//	users.go       users within teams: the user header and body member, its validation
//	               (config and request), x-fairshare-user and -over
//	status.go      the status endpoint: serveStatus, bearer, the JSON snapshot
//	store.go       the pool records in shared data: records.update (read, decode,
//	               change, encode, compare-and-swap, retry), updatePool (its one caller
//	               in the filter, with the CAS-retry, failure and log accounting),
//	               creation, configuration generations
//	errors.go      the OpenAI-style local replies (reply, tooMany) and their bodies
//	capacity.go    capacity_from: C and K read from the engines' /metrics by one poller VM
//	               per proxy, learnt engine addresses (upstream.address), SetCapacity
//	fleetcap.go    capacity_from with the cluster block: readings in the member reports,
//	               one agreed C and K for Rebalance (agreeCapacity), kept when etcd is lost
//	promtext.go    the engines' Prometheus text: vllm:cache_config_info and the gauges
//	latency.go     the latency histograms and token counters by pool, team and class
//	               (arrival, dispatch, first byte, end), Jain's fairness index
//	config.go, valid.go, path.go, metrics.go, cluster*.go, etcd.go, jsonpos.go, host.go
//	               configuration, validation, cleanPath, metric names, the cluster sync
//	               through etcd, JSON positions, the host's shared data and metrics
//
// A scheduled request's walk, callback by callback, with the file of each
// step:
//
//	on_request_headers   request.go   OnHttpRequestHeaders: status_path → serveStatus
//	                                  (status.go); not scheduled → stStrip
//	                                  (unscheduled.go); else team, class, headers removed
//	on_request_body      request.go   OnHttpRequestBody buffers to eos, then decide:
//	                     body.go        inspect (model, tokens, priorities)
//	                     request.go     poolFor
//	                     estimate.go    estimate (cost, KV demand)
//	                     grant.go       arrive → updatePool (store.go) → Pool.Arrive
//	                     spill.go       Queued: the held requests before it, then it, to a
//	                                    fallback with room (TakeSpill there)
//	                     flow.go        Queued: hold (dispatch and resume later, or expire)
//	                     body.go        writeBody: "priority" written, the body forwarded
//	on_response_headers  response.go  OnHttpResponseHeaders: x-fairshare-* headers
//	on_response_body     response.go  OnHttpResponseBody: usage (usage.go), finish at eos
//	                     grant.go       settle → release → updatePool → Pool.Release;
//	                     flow.go        dispatch of the held requests the release made room for
//	on_log / on_done     response.go  OnHttpStreamDone: a held stream cancelled (flow.go),
//	                                  an unfinished one finished with the best estimate
//	on_delete            stream.go    DeleteHttpContext: what on_done did not end is ended
//	                                  as it would have, the context kept for the next stream
//
// # Configuration
//
// The plugin configuration is one JSON object (testdata/plugin/example.json);
// unknown fields are errors (with the nearest known field at that path when
// one is within an edit or two, suggest.go) and every problem is reported
// with its field path. CheckConfig runs the same validation natively
// (fairshare-run -check). Fields and defaults:
//
//	team_header        "x-team"            request header naming the team
//	class_header       "x-request-class"   "interactive" or "batch"; anything else is 400
//	default_class      "interactive"       class without a class header
//	default_team       ""                  team without a team header ("": 401)
//	unknown_team       "borrow"            team missing from the pool: "borrow" (share 0) or "reject" (403)
//	user_header        ""                  request header naming the user within its team ("": the
//	                                       user level off; users.go); >64 bytes or outside 0x21..0x7e: 400
//	user_from_body     false               with user_header: a request without it takes the body's "user"
//	half_life          "168h"              usage half-life ("0s": no decay)
//	entry_penalty      true                charge the estimate while the request runs
//	cost               {1, 1, 2}           prompt_token, cached_prompt_token, completion_token weights
//	default_max_tokens 512                 completion estimate without max_(completion_)tokens
//	max_body_bytes     8388608             request body limit (413 beyond)
//	max_response_bytes 4194304             JSON response kept to read usage (beyond: usage is
//	                                       read from its last 64 KiB, else best estimate)
//	paths              DefaultPaths        scheduled POST paths (every vLLM endpoint taking priority)
//	unscheduled        "strip"             priority in other JSON bodies: "strip" or "reject" (400)
//	default_model      ""                  model of a scheduled request without one ("": 400)
//	unknown_model      "reject"            model of no pool: "reject" (404) or "lowest" (uncounted)
//	max_queue_time     "0s"                hold borrowers that find no room this long ("0s": off)
//	queue_limit        1024                held requests per pool (429 beyond)
//	team_queue_limit   0                   held requests per team (0: no limit)
//	hold_headers       "off"               "on": stop the headers until the decision, nothing upstream
//	                                       while held (Envoy >= 1.35 allow_on_headers_stop_iteration)
//	hold_headers_probe "1s"                "on", no body callback this long: continued, logged critical
//	mode               "enforce"           "shadow": decided and accounted, every request forwarded as
//	                                       sent, the would-be decision reported (shadow.go)
//	shadow_strip_priority false            "shadow": still blank out a client's priority in place
//	dispatch_tick      "20ms"              tick period while holding is on
//	batch_aging        "2s"                a held batch request counts as arrived this much later
//	                                       than an interactive one ("0s": interactive always first)
//	request_timeout    "10m"               how long a dead VM's requests stay counted (phantoms)
//	tick               "1s"                heartbeats, phantom expiry, gauges
//	holder_timeout     5 × tick            a VM not seen for this long is presumed dead
//	cas_retries        16                  compare-and-swap retries per record update
//	failure_mode       "open"              record unavailable: "open" forwards at the lowest
//	                                       borrowing priority, "closed" answers 503
//	response_headers   true                add x-fairshare-team, -pool, -priority, -borrowing
//	                                       (and -user, -over with user_header)
//	status_path        "/fairshare/status" GET answers the JSON status ("": disabled)
//	status_token       ""                  bearer token required by status_path
//	                                       ("Authorization: Bearer <token>", scheme in any case)
//	status_public      false               serve status_path without a token
//	status_users       10                  with user_header: users listed per team in the status
//	cluster            absent              share every pool with other proxies through etcd:
//	                                       {etcd_cluster, authority, key_prefix, replica,
//	                                       sync_interval, lease_ttl, timeout, authorization,
//	                                       safe_fraction} (README: Configuration)
//	pools              (required)          [{name, capacity, kv_tokens, throughput, throughput_burst,
//	                                       models, engine_priority, spill_to, capacity_from,
//	                                       max_users, user_active, user_idle,
//	                                       teams: {name: {share, weight, lending_limit, borrowing_limit,
//	                                       users: {user: share}}}}]
//	                                       max_users (256), user_active ("30s"), user_idle ("10m") and
//	                                       users need user_header: each team's reserved sequences are
//	                                       divided among its active users by share (users.go);
//	                                       throughput (cost units/s, 0: none) reserves the work: a
//	                                       team's request is within share while its work bucket
//	                                       (share × throughput, throughput_burst deep, "10s") has room;
//	                                       engine_priority "auto" (default), "on" or "off": see below;
//	                                       spill_to: fallback pools, in order (spill.go; needs hold_headers "on")
//	                                       capacity_from {cluster, engines, addresses, header, path,
//	                                       authority, interval, timeout, expire, max_num_seqs}: C and K
//	                                       from the engines, and X (throughput, when declared) from
//	                                       their token counters' saturated rate (capacity.go;
//	                                       README: Configuration)
//
// A pool's engine_priority says whether the decided priority is written
// into the body (engine.go): "on" always; "off" never (every priority
// member removed, as unscheduled "strip" does; reservations and borrowing
// are then enforced by holding alone, so "off" without flow control is a
// configuration error at pools[i].engine_priority); "auto" writes it until
// the engine answers a request with vLLM V0's 400 "Got priority N but
// Priority scheduling is not enabled.", then writes none for the pool on
// every VM (a mark in shared data, "<plugin_name>/fairshare/engine/<pool>",
// read before each write while the pool is in auto; it outlives VM
// restarts, and deploying "on" clears it), logs it once at critical level
// and replaces the refused client's body with an error saying what to
// change.
//
// Pool and team names are 1 to 64 characters of [A-Za-z0-9_-] (they are
// segments of metric names); shares are in (0, 1] and sum to at most 1 per
// pool; weight defaults to 1; models are unique across pools and "*"
// matches any model.
//
// # Metrics
//
// Names split by Envoy's tag extraction into pool, team, class and standing
// tags (see metrics.go):
//
//	fairshare.pool.<pool>.team.<team>.class.<class>.standing.<within|borrowing>.requests_total
//	fairshare.pool.<pool>.team.<team>.{borrowed_total, granted_saturated_total, in_flight, borrowing, reserved,
//	    usage (milli), rank, level_fairshare (milli), phantoms}
//	fairshare.pool.<pool>.team.<team>.{waiting, dispatched_total, queue_timeouts_total}
//	    (flow control)
//	fairshare.pool.<pool>.team.<team>.class.<class>.{queue_time_ms, first_byte_ms,
//	    upstream_first_byte_ms, total_time_ms (histograms, milliseconds), prompt_tokens_total,
//	    cached_tokens_total, completion_tokens_total}   (latency.go)
//	fairshare.pool.<pool>.team.<team>.class.<class>.{would_borrow_total, would_hold_total}
//	    (mode "shadow", shadow.go)
//	fairshare.pool.<pool>.team.<team>.share (normalised, milli)
//	fairshare.pool.<from>.team.<team>.to_pool.<to>.spilled_total   (spill.go)
//	fairshare.pool.<pool>.{fairness_jain (milli), saturated_teams}   (latency.go: Jain's
//	    index of the saturated teams' decayed usage over their shares, from the shared
//	    record: the same whichever VM writes it)
//	fairshare.pool.<pool>.{cas_retries_total, failures_total, failed_open_total,
//	    usage_missing_total, rejected_unknown_team_total, rejected_unavailable_total,
//	    rejected_queue_full_total, rejected_queue_timeout_total, in_flight, waiting, capacity,
//	    engine_priority (1: priorities written, 0: not), engine_priority_refused_total,
//	    kv_tokens, capacity_engines, capacity_read_failures_total (capacity_from),
//	    throughput (throughput)}
//	fairshare.pool.<pool>.team.<team>.{reserved_work, work_debt}   (throughput: the team's
//	    share of it in cost units/s, and the within-share work not yet paid for)
//	fairshare.pool.<pool>.team.<team>.{users_active, over}   (user_header: the team's users that
//	    count in its division, and its over requests in flight; no series per user)
//	fairshare[.pool.<pool>.team.<team>].would_refuse_<reason>_total   (mode "shadow": where
//	    rejected_<reason>_total is counted, a pool's reasons per team as well)
//	fairshare.{unscheduled_total, stripped_priority_total, rejected_<reason>_total,
//	    cluster_syncs_total, cluster_conflicts_total, cluster_failures_total}
//	    reasons: no_team, bad_class, bad_user, bad_body, body_too_large, no_model, unknown_model,
//	    duplicate_header, client_priority, body_read, rewrite, status_auth, status_method
//	    (body_read and rewrite count per pool once the request's pool is known)
//
// Teams missing from the configuration share one entry, named _unknown in
// metrics, the status endpoint and the x-fairshare-team headers.
//
// # Users within teams
//
// With user_header each team is divided among its users, the core's
// second level (fairshare's users.go): the team's reserved sequences are
// apportioned among its active users by their shares (the team's users
// object, 1 by default), a request of a user below its portion is within
// share (0/1), one of a user at it that finds a reserved sequence its
// teammates leave goes "over" (priority 2 to 9, counted as borrowing,
// never held), or, all of them taken, takes the sequence of a
// worse-ranked teammate's over request (over at 0/1), else it borrows
// as its team does. The user comes from
// user_header (or, with user_from_body, the body's "user"); a request
// without one counts as _none. users.go has the request path's picture.
// The response carries x-fairshare-user and x-fairshare-over; the
// status lists each team's first status_users users by standing.
// Without user_header nothing of this exists: the record, the status,
// the metrics and the headers are those of a configuration without it.
//
// # Several proxies, one pool
//
// With the cluster block, every proxy decides against its slice of each
// pool (fairshare.SetSlice; fairshare.SetSliceOf for a pool with
// capacity_from), with every team's loan (fairshare.SetLoans:
// within share whichever proxy a request reaches while the team is
// below its reservation across the pool), in its own shared data as
// before; one VM per
// proxy syncs the slices and the usage with etcd on its tick, through
// proxy_http_call on etcd's JSON gateway (cluster.go has the picture).
// Nothing on the request path waits for etcd. A pool with capacity_from
// divides the C and K the proxies agree on from the engine readings
// each publishes in its report (fleetcap.go has the picture and the
// rule), so the slices follow the engines as one proxy's C does; with
// throughput, X is agreed the same way from the engines' peaks each
// publishes, and every slice's rates follow its sequences of the agreed
// totals (fairshare.SetSliceOf).
//
// The package compiles natively too (hostcalls then reports
// ErrorUnimplemented), so its pure parts are unit-tested natively; the
// filter itself is tested through the built module in the wazero host
// (hostcalls/host) and in the SDK's proxytest host.
package plugin
