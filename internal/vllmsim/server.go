package vllmsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultModel is the model name a Server serves when ServerOptions.Model
// is empty.
const DefaultModel = "meta-llama/Llama-3.1-8B-Instruct"

// maxBodyBytes bounds a request body (a larger one is a 400).
const maxBodyBytes = 64 << 20

// ServerOptions configure a Server.
type ServerOptions struct {
	// Model is the served model name (the "model" the API accepts); empty
	// means DefaultModel.
	Model string
	// Models are further names the same engines answer to, as vLLM's
	// --served-model-name does with several names: a request naming any of
	// them is served, and its response echoes the name it asked for. "*"
	// (a simulator extension) answers to every name. GET /v1/models lists
	// Model, then Models without "*".
	Models []string
	// Replicas is the number of engines behind the one handler, balanced by
	// least outstanding engine requests (lowest index on ties); 0 means 1.
	Replicas int
	// TimeScale is wall seconds per model second: each step sleeps its
	// modelled duration × TimeScale, and the model clock (record times,
	// metrics, "created") runs 1/TimeScale as fast as the wall clock. 0 means
	// 1 (real time); 0.01 runs 100× faster.
	TimeScale float64
	// LegacyV0PriorityError answers a non-zero priority under FCFS with V0's
	// 400 "Got priority N but Priority scheduling is not enabled." (V1
	// ignores it, which is the default).
	LegacyV0PriorityError bool
	// Debug serves GET /debug/records: the records so far, as JSON.
	Debug bool
	// OnRecord, if set, is called with each record as an engine request
	// finishes, from an engine or handler goroutine; it must not block.
	OnRecord func(Record)
	// EnablePromptTokensDetails is vLLM's --enable-prompt-tokens-details:
	// usage carries "prompt_tokens_details": {"cached_tokens": N} when N,
	// the prompt tokens found in the prefix cache, is not zero (the JSON
	// response and the include_usage chunk; not continuous usage). Without
	// it, or with N zero, the JSON response has "prompt_tokens_details":
	// null and the usage chunk none. N is non-zero only with
	// EngineConfig.EnablePrefixCaching.
	EnablePromptTokensDetails bool
	// MaxRecords, if positive, bounds the records kept for Records and
	// /debug/records to about the most recent MaxRecords (older ones are
	// dropped in batches); 0 keeps all.
	MaxRecords int
}

// Server is a pool of engines under the real clock behind one OpenAI-style
// HTTP API (an http.Handler): POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models, /health, /metrics, /load, /version and,
// with Debug, /debug/records. A non-streaming response carries the
// endpoint-load-metrics header when the request asks for it with
// endpoint-load-metrics-format: TEXT (or JSON). Each engine runs its step loop on its own goroutine.
// Methods are safe for concurrent use.
type Server struct {
	cfg       EngineConfig
	opts      ServerOptions
	reps      []*replica
	wallStart time.Time
	created   func() int64 // "created" field; tests replace it
	ids       atomic.Uint64
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	recMu   sync.Mutex
	records []Record

	// active is the number of replicas in service (SetActive): new
	// requests go to the first active ones, and /metrics shows only them.
	active atomic.Int64

	// gate, if set (tests), is called by each engine loop, without its
	// lock, before every step that has work: it returns when the step may
	// run, so a test can hold the engines still while it arranges
	// arrivals.
	gate func()
}

type replica struct {
	mu   sync.Mutex
	eng  *engine
	wake chan struct{}
	out  atomic.Int64 // outstanding engine requests
}

// NewServer starts the engines of a Server. It panics if cfg is invalid or
// TimeScale is negative, infinite or NaN (validate flags with EngineConfig.Validate first).
// Call Close to stop the engines.
func NewServer(cfg EngineConfig, opts ServerOptions) *Server {
	return newServer(cfg, opts, nil)
}

// newServer is NewServer with the engine loops' gate (Server.gate).
func newServer(cfg EngineConfig, opts ServerOptions, gate func()) *Server {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if !(opts.TimeScale >= 0) || math.IsInf(opts.TimeScale, 1) {
		panic(fmt.Sprintf("vllmsim: NewServer: TimeScale must not be negative, got %v", opts.TimeScale))
	}
	if opts.TimeScale == 0 {
		opts.TimeScale = 1
	}
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	opts.Replicas = max(opts.Replicas, 1)
	s := &Server{cfg: cfg, opts: opts, wallStart: time.Now(), done: make(chan struct{}), gate: gate}
	s.created = func() int64 { return s.Now().Unix() }
	s.active.Store(int64(opts.Replicas))
	for i := range opts.Replicas {
		r := &replica{eng: newEngine(cfg, i), wake: make(chan struct{}, 1)}
		s.reps = append(s.reps, r)
		s.wg.Add(1)
		go s.loop(r)
	}
	return s
}

// Now returns the model clock: the wall clock at NewServer plus the wall
// time since then divided by TimeScale.
func (s *Server) Now() time.Time {
	return s.wallStart.Add(time.Duration(float64(time.Since(s.wallStart)) / s.opts.TimeScale))
}

// Close stops the engines; requests in flight are not answered further.
// It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.wg.Wait()
}

// Replicas returns the number of engines.
func (s *Server) Replicas() int { return len(s.reps) }

// SetActive puts the first n replicas in service (n clamped to [1,
// Replicas]): an engine out of service gets no new request, finishes what
// it runs and is absent from /metrics, as a vLLM server scaled away; one
// put back starts from its state then. It returns the previous count.
func (s *Server) SetActive(n int) int {
	return int(s.active.Swap(int64(min(max(n, 1), len(s.reps)))))
}

// SetSleepLevel puts replica r's engine to sleep at level (1, 2) or
// wakes it (0), as far as /metrics shows it (Sim.SetSleepLevel): its
// vllm:engine_sleep_state series say so while it stays in service.
func (s *Server) SetSleepLevel(r, level int) {
	s.reps[r].mu.Lock()
	defer s.reps[r].mu.Unlock()
	s.reps[r].eng.sleep = min(max(level, 0), 2)
}

// Active returns the number of replicas in service.
func (s *Server) Active() int { return int(s.active.Load()) }

// Running returns the number of running requests of replica r.
func (s *Server) Running(r int) int {
	s.reps[r].mu.Lock()
	defer s.reps[r].mu.Unlock()
	return len(s.reps[r].eng.running)
}

// Waiting returns the number of waiting requests of replica r.
func (s *Server) Waiting(r int) int {
	s.reps[r].mu.Lock()
	defer s.reps[r].mu.Unlock()
	return s.reps[r].eng.waiting.len()
}

// KVBlocksUsed returns the KV blocks in use on replica r.
func (s *Server) KVBlocksUsed(r int) int {
	s.reps[r].mu.Lock()
	defer s.reps[r].mu.Unlock()
	return s.reps[r].eng.used
}

// Records returns a copy of the records of the finished engine requests, in
// the order they finished.
func (s *Server) Records() []Record {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	return append([]Record(nil), s.records...)
}

// loop is the engine core loop of one replica.
func (s *Server) loop(r *replica) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		r.mu.Lock()
		if !r.eng.hasWork() {
			r.mu.Unlock()
			select {
			case <-r.wake:
				continue
			case <-s.done:
				return
			}
		}
		if s.gate != nil {
			r.mu.Unlock()
			s.gate()
			r.mu.Lock()
		}
		dt, ok := r.eng.schedule(s.Now())
		evs := r.eng.takeEvents(nil)
		r.mu.Unlock()
		s.dispatch(evs)
		if !ok {
			// Nothing schedulable although work is queued: wait for a change.
			select {
			case <-r.wake:
			case <-s.done:
				return
			}
			continue
		}
		wall := time.Duration(float64(dt) * s.opts.TimeScale)
		timer.Reset(wall)
		select {
		case <-timer.C:
		case <-s.done:
			timer.Stop()
			return
		}
		r.mu.Lock()
		r.eng.apply(s.Now())
		evs = r.eng.takeEvents(nil)
		r.mu.Unlock()
		s.dispatch(evs)
	}
}

// dispatch delivers engine events to their calls.
func (s *Server) dispatch(evs []event) {
	for i := range evs {
		ev := evs[i]
		c := ev.s.owner.(*call)
		if ev.kind == evFinish {
			c.rep.out.Add(-1)
			s.recMu.Lock()
			s.records = append(s.records, *ev.rec)
			if m := s.opts.MaxRecords; m > 0 && len(s.records) >= 2*m {
				s.records = append(s.records[:0:0], s.records[len(s.records)-m:]...)
			}
			s.recMu.Unlock()
			if s.opts.OnRecord != nil {
				s.opts.OnRecord(*ev.rec)
			}
		}
		c.deliver(ev)
	}
}

// call is one API request in flight: its engine requests and the events
// they produced that the handler has not consumed yet.
type call struct {
	rep    *replica
	seqs   []*seq
	mu     sync.Mutex
	events []event
	notify chan struct{}
}

func (c *call) deliver(ev event) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *call) take(buf []event) []event {
	c.mu.Lock()
	buf = append(buf[:0], c.events...)
	c.events = c.events[:0]
	c.mu.Unlock()
	return buf
}

// submit enqueues the engine requests of req on the least loaded replica.
func (s *Server) submit(req *apiRequest, id string) *call {
	rep := s.reps[0]
	for _, r := range s.reps[1:s.Active()] {
		if r.out.Load() < rep.out.Load() {
			rep = r
		}
	}
	c := &call{rep: rep, notify: make(chan struct{}, 1)}
	for pi, p := range req.prompts {
		for j := range req.n {
			sq := &seq{owner: c, id: id, choice: pi*req.n + j, priority: req.priority,
				prompt: p, maxOut: req.maxOut[pi], eosAfter: req.eosAfter}
			if req.idents != nil {
				sq.ident = req.idents[pi]
			}
			c.seqs = append(c.seqs, sq)
		}
	}
	rep.out.Add(int64(len(c.seqs)))
	rep.mu.Lock()
	now := s.Now()
	for _, sq := range c.seqs {
		sq.owner = c
		rep.eng.add(sq, now)
	}
	rep.mu.Unlock()
	select {
	case rep.wake <- struct{}{}:
	default:
	}
	return c
}

// abort aborts the unfinished engine requests of c.
// next waits for c's next events and appends them to buf[:0]. It reports
// false, after aborting the request in the engine, when the client went
// away, and false when the server is closing.
func (s *Server) next(r *http.Request, c *call, buf []event) ([]event, bool) {
	select {
	case <-c.notify:
	case <-r.Context().Done():
		s.abort(c)
		return buf, false
	case <-s.done:
		return buf, false
	}
	return c.take(buf), true
}

func (s *Server) abort(c *call) {
	c.rep.mu.Lock()
	now := s.Now()
	for _, sq := range c.seqs {
		c.rep.eng.abort(sq, now)
	}
	evs := c.rep.eng.takeEvents(nil)
	c.rep.mu.Unlock()
	s.dispatch(evs)
	select {
	case c.rep.wake <- struct{}{}:
	default:
	}
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	method := func(m string) bool {
		if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
			return true
		}
		w.Header().Set("Allow", m)
		writeJSON(w, http.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
		return false
	}
	switch path {
	case "/v1/chat/completions", "/v1/completions":
		if method(http.MethodPost) {
			s.serveGenerate(w, r, path == "/v1/chat/completions")
		}
	case "/v1/models":
		if method(http.MethodGet) {
			s.serveModels(w)
		}
	case "/health":
		if method(http.MethodGet) {
			w.WriteHeader(http.StatusOK)
		}
	case "/metrics":
		if method(http.MethodGet) {
			s.serveMetrics(w)
		}
	case "/load":
		if method(http.MethodGet) {
			var n int64
			for _, rep := range s.reps {
				n += rep.out.Load()
			}
			writeJSON(w, http.StatusOK, []byte(fmt.Sprintf(`{"server_load":%d}`, n)))
		}
	case "/version":
		if method(http.MethodGet) {
			writeJSON(w, http.StatusOK, []byte(`{"version":"vllmsim"}`))
		}
	case "/debug/records":
		if s.opts.Debug && method(http.MethodGet) {
			b, _ := json.Marshal(s.Records())
			writeJSON(w, http.StatusOK, b)
			return
		}
		if !s.opts.Debug {
			writeJSON(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
		}
	default:
		writeJSON(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) serveModels(w http.ResponseWriter) {
	created := s.created()
	root := jsonString(s.opts.Model)
	var data []string
	for _, name := range s.servedNames() {
		m := jsonString(name)
		data = append(data, fmt.Sprintf(`{"id":%s,"object":"model","created":%d,"owned_by":"vllm","root":%s,"parent":null,"max_model_len":%d,"permission":[{"id":"modelperm-0","object":"model_permission","created":%d,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}`,
			m, created, root, s.cfg.MaxModelLen, created))
	}
	writeJSON(w, http.StatusOK, []byte(`{"object":"list","data":[`+strings.Join(data, ",")+`]}`))
}

// servedNames returns Model then Models, without "*" and duplicates.
func (s *Server) servedNames() []string {
	names := []string{s.opts.Model}
	for _, m := range s.opts.Models {
		if m != "*" && !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	return names
}

// Serves reports whether the server answers to model: Model, one of Models,
// or any name when Models holds "*".
func (s *Server) Serves(model string) bool {
	return model == s.opts.Model || slices.Contains(s.opts.Models, model) || slices.Contains(s.opts.Models, "*")
}

func (s *Server) serveMetrics(w http.ResponseWriter) {
	snaps := make([]metricsSnapshot, s.Active())
	for i, r := range s.reps[:len(snaps)] {
		r.mu.Lock()
		snaps[i] = r.eng.snapshot()
		r.mu.Unlock()
	}
	var b bytes.Buffer
	writeMetrics(&b, s.opts.Model, s.cfg, snaps)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	select {
	case <-s.done:
		writeJSON(w, http.StatusServiceUnavailable, (&apiError{status: 503, typ: "ServiceUnavailableError",
			message: "The server is shutting down."}).body())
		return
	default:
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		e := validationError("json_invalid", "0", "JSON decode error", "{}")
		writeJSON(w, e.status, e.body())
		return
	}
	req, aerr := parseRequest(chat, r.Header.Get("Content-Type"), body, parseOptions{
		model: s.opts.Model, serves: s.Serves, maxModelLen: s.cfg.MaxModelLen, policy: s.cfg.Policy,
		legacyV0: s.opts.LegacyV0PriorityError, caching: s.cfg.EnablePrefixCaching})
	if aerr != nil {
		writeJSON(w, aerr.status, aerr.body())
		return
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	// vLLM's id: the X-Request-Id header, else the body's request_id, else
	// a fresh one (here a counter).
	base := r.Header.Get("X-Request-Id")
	if base == "" {
		base = req.requestID
	}
	if base == "" {
		base = fmt.Sprintf("%032x", s.ids.Add(1))
	}
	id := prefix + base
	rw := &responseWriter{chat: chat, id: jsonString(id), model: jsonString(req.model), created: s.created(), req: req,
		details: s.opts.EnablePromptTokensDetails}
	c := s.submit(req, id)
	if req.stream {
		s.stream(w, r, c, rw)
		return
	}
	recs := make([]Record, len(c.seqs))
	left := len(c.seqs)
	var buf []event
	for left > 0 {
		var ok bool
		if buf, ok = s.next(r, c, buf); !ok {
			return
		}
		for _, ev := range buf {
			if ev.kind == evFinish {
				recs[ev.s.choice] = *ev.rec
				left--
			}
		}
	}
	if f := strings.ToUpper(r.Header.Get("endpoint-load-metrics-format")); f == "TEXT" || f == "JSON" {
		w.Header().Set("endpoint-load-metrics", c.rep.loadReport(f))
	}
	// vLLM reports final_res.num_cached_tokens: the first prompt's.
	rw.cached = recs[0].CachedTokens
	writeJSON(w, http.StatusOK, rw.full(recs))
}

// loadReport is vLLM's per-response ORCA load report (orca_metrics.py): TEXT
// "named_metrics.kv_cache_usage_perc=…, named_metrics.num_requests_waiting=…"
// or the same named metrics as JSON.
func (r *replica) loadReport(format string) string {
	r.mu.Lock()
	kv := float64(r.eng.used) / float64(r.eng.usable)
	waiting := float64(r.eng.waiting.len())
	r.mu.Unlock()
	if format == "JSON" {
		return fmt.Sprintf(`JSON {"named_metrics": {"kv_cache_usage_perc": %s, "num_requests_waiting": %s}}`, pyFloat(kv), pyFloat(waiting))
	}
	return fmt.Sprintf("TEXT named_metrics.kv_cache_usage_perc=%s, named_metrics.num_requests_waiting=%s", pyFloat(kv), pyFloat(waiting))
}

// stream writes one SSE event per token as the engine produces it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *call, rw *responseWriter) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	left := len(c.seqs)
	tokens := make([]int, len(c.seqs))
	first := true
	var buf []event
	var out bytes.Buffer
	for left > 0 {
		var ok bool
		if buf, ok = s.next(r, c, buf); !ok {
			return
		}
		for _, ev := range buf {
			switch ev.kind {
			case evToken:
				out.Reset()
				if first && rw.chat {
					for i := range c.seqs {
						rw.roleChunk(&out, i)
					}
				}
				if first {
					// vLLM takes num_cached_tokens from the first output;
					// it was set at admission, before this event.
					rw.cached = ev.s.cachedTokens
				}
				first = false
				tokens[ev.s.choice] = ev.k
				rw.tokenChunk(&out, ev.s.choice, ev.k, ev.reason)
				if _, err := w.Write(out.Bytes()); err != nil {
					s.abort(c)
					return
				}
				if fl != nil {
					fl.Flush()
				}
			case evFinish:
				left--
			}
		}
	}
	out.Reset()
	if rw.req.includeUsage {
		rw.usageChunk(&out, tokens)
	}
	out.WriteString("data: [DONE]\n\n")
	w.Write(out.Bytes())
	if fl != nil {
		fl.Flush()
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
