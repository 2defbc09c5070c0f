package host

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Action is what the host did with a stream event after the filter
// callback returned (with Envoy's conversions applied).
type Action int

const (
	// Continue: the event (and anything buffered before it) was passed on.
	Continue Action = iota
	// StopIteration: trailers held until proxy_continue_stream; or, with
	// Options.AllowOnHeadersStopIteration, headers held while the body
	// callbacks go on (released with the body when the filter continues).
	StopIteration
	// StopAllIterationAndBuffer: headers held; the body is buffered by the
	// host, not delivered, until proxy_continue_stream; above the buffer
	// limit the stream gets a 413 (request) or 500 (response).
	StopAllIterationAndBuffer
	// StopAllIterationAndWatermark: headers held and the body too, with
	// flow control instead of a limit. A headers callback's
	// StopIteration(1) becomes this (ABI 0.2.x without
	// allow_on_headers_stop_iteration).
	StopAllIterationAndWatermark
	// StopIterationAndBuffer: the body so far is kept; the next body call
	// sees all of it. Above the buffer limit: 413 / 500.
	StopIterationAndBuffer
	// StopIterationAndWatermark: like StopIterationAndBuffer without the
	// limit (flow control).
	StopIterationAndWatermark
	// StopIterationNoBuffer: the chunk is neither passed on nor kept.
	StopIterationNoBuffer
	// Held: the filter was not called: the stream is stopped at headers
	// and the host holds the data.
	Held
	// Ended: the stream had already ended (local reply, reset, failed VM);
	// nothing was called.
	Ended
)

var actionNames = [...]string{"Continue", "StopIteration", "StopAllIterationAndBuffer", "StopAllIterationAndWatermark",
	"StopIterationAndBuffer", "StopIterationAndWatermark", "StopIterationNoBuffer", "Held", "Ended"}

// String returns the action's name.
func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// LocalReply is a response the stream ended with instead of the
// upstream's: from proxy_send_local_response, the buffer limit (413/500),
// or a failed VM (503).
type LocalReply struct {
	Status     int
	Details    string // response code details, spaces replaced by '_'
	Body       []byte
	Headers    [][2]string
	GRPCStatus int32 // -1: none
}

// direction is one side of a stream (request or response).
type direction struct {
	resp bool

	headers, trailers [][2]string
	headersSeen       bool // headers callback ran
	headersEOS        bool // the headers carried end of stream (no body, no trailers)
	headersMutable    bool // during the headers callback and while stopped there
	trailersMutable   bool
	headersReleased   bool // passed on (sent upstream / to the client)
	releasedHeaders   [][2]string
	stopAtHeaders     Action // 0 or StopAll*
	headersStopped    bool   // real StopIteration at headers (AllowOnHeadersStopIteration): body callbacks go on
	held              []byte // data held while stopped at headers
	heldTrailers      [][2]string
	heldEOS           bool
	buf               []byte // the body buffer the filter sees
	buffering         Action // 0 or StopIterationAndBuffer/Watermark
	inBody            bool
	trailersStopped   bool
	eosIn             bool // end of stream received from the driver
	out               []byte
	outTaken          int
	eosOut            bool // end of stream passed on
	releasedTrailers  [][2]string
	continuePending   bool
}

// Stream is one HTTP stream (one HTTP context) on one VM, driven
// synchronously: each method makes the filter calls Envoy would make for
// that event and returns when they are done. Methods lock the VM, so one
// VM runs one call at a time; a Stream may be driven from two goroutines
// (request and response sides), as the proxy package does.
type Stream struct {
	h        *Host
	vm       *VM
	id       uint32
	conn     uint64
	logPhase bool

	created  bool
	req      direction
	resp     direction
	pending  *LocalReply // send_local_response during the running callback
	local    *LocalReply
	reset    bool
	resetWhy string
	closeReq bool
	ended    bool // local reply or reset: no more callbacks but the end
	complete bool // Complete ran
	// logOwed: CompleteHTTP3 deleted the context and its proxy_on_log
	// waits for DeferredLog (the QUIC stream's last ACK).
	logOwed bool
	// fs is the filter state, nil until the first proxy_set_property.
	fs map[string][]byte
	// notify wakes the front end waiting on the stream (Notify); nil
	// (never signalled) for a stream not opened by PickStream.
	notify chan struct{}
	// keepBodies false (PickStream streams) drops passed-on data once taken.
	keepBodies bool
	// upstream is the address of the upstream host that serves the
	// stream (SetUpstreamAddress): the upstream.address property.
	upstream string
}

// SetUpstreamAddress says which upstream host the stream's request went
// to ("10.0.0.5:8000", "[::1]:8000": the host address's asString in
// Envoy): the upstream.address property answers it from then on, as
// Envoy's does once the router has chosen a host, and NOT_FOUND before.
func (s *Stream) SetUpstreamAddress(addr string) {
	s.lock()
	s.upstream = addr
	s.unlock()
}

// NewStream opens an HTTP stream on VM vm (0 ≤ vm < VMs). The HTTP
// context is created in the guest at the first event, as Envoy does.
func (h *Host) NewStream(vm int) *Stream {
	return h.newStream(h.vm(vm))
}

func (h *Host) newStream(vm *VM) *Stream {
	vm.mu.Lock()
	s := h.newStreamLocked(vm)
	vm.mu.Unlock()
	return s
}

// tryNewStream opens a stream for PickStream unless the VM was retired:
// it signals notify and does not keep the bodies it passed on.
func (h *Host) tryNewStream(vm *VM) *Stream {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.retired || vm.closed {
		return nil
	}
	s := h.newStreamLocked(vm)
	s.notify = make(chan struct{}, 1)
	s.keepBodies = false
	return s
}

// newStreamLocked makes a stream. Its notify channel is nil (signal does
// nothing) unless the caller, PickStream, waits on it.
func (h *Host) newStreamLocked(vm *VM) *Stream {
	id := vm.nextID
	vm.nextID++
	vm.active.Add(1)
	return &Stream{h: h, vm: vm, id: id, conn: h.connID.Add(1), resp: direction{resp: true}, keepBodies: true}
}

// ID returns the HTTP context id.
func (s *Stream) ID() uint32 { return s.id }

// VM returns the index of the stream's VM.
func (s *Stream) VM() int { return s.vm.index }

// Notify returns the channel that receives a value (at most one pending)
// after a change of the stream: something passed on, a local reply, a
// reset. Wait on it between Takes. Only a stream opened by PickStream is
// signalled; for others it is nil (blocks forever).
func (s *Stream) Notify() <-chan struct{} { return s.notify }

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// lock enters the VM; unlock leaves it and runs deferred work.
func (s *Stream) lock()   { s.vm.enter() }
func (s *Stream) unlock() { s.vm.exit() }

// ensureCreated calls proxy_on_context_create(id, root) once. Caller holds
// the VM.
func (s *Stream) ensureCreated() bool {
	if s.created {
		return true
	}
	s.created = true
	s.vm.streams[s.id] = s
	_, err := s.call(cbContextCreate, 0, uint64(s.id), rootContextID)
	return err == nil
}

// call runs a callback with this stream as the effective context; a trap
// ends the stream with 503 (fail closed).
func (s *Stream) call(id callbackID, def uint64, args ...uint64) (uint64, error) {
	s.vm.curID, s.vm.cur = s.id, s
	r, err := s.vm.callback(id, def, args...)
	s.vm.curID, s.vm.cur = rootContextID, nil
	if err != nil && !s.ended {
		s.endLocal(&LocalReply{Status: 503, Details: "wasm_fail_stream", Body: []byte("wasm_fail_stream"), GRPCStatus: -1})
	}
	return r, err
}

// ErrContinueInOwnCallback is the host error (Host.HostErrors) of a
// proxy_continue_stream made inside a filter callback of the same stream
// and direction (on_request_headers/body/trailers resuming the request,
// on_response_* the response). cpp-host defers the continue only until
// the VM call returns (addAfterVmCallAction, src/context.cc), so Envoy
// runs continueDecoding/continueEncoding (filter_manager.cc
// commonContinue) before the filter's result is recorded. When the filter
// is not yet stopped, a debug build aborts on ASSERT(!canIterate(),
// "Attempting to continue iteration while the IterationState is already
// Continue"); a release build resumes nothing, then records the pause the
// callback returns, and the stream stays paused with no continue pending:
// it hangs until a timeout. (Already stopped by an earlier callback, the
// buffered data is passed on and the returned pause stops the filter
// again: stuck as well.) The host records the error and drops the
// continue, leaving the stream as a release build does.
var ErrContinueInOwnCallback = errors.New("proxy_continue_stream inside the stream's own callback: Envoy asserts \"Attempting to continue iteration while the IterationState is already Continue\" (debug) or leaves the stream paused with no continue pending (release)")

// callDir runs one of direction d's filter callbacks. A
// proxy_continue_stream for d made during it is a host error
// (ErrContinueInOwnCallback) and is dropped, so a stop returned by the
// callback holds with nothing to resume it, as in a release build of
// Envoy.
func (s *Stream) callDir(d *direction, id callbackID, args ...uint64) (uint64, error) {
	pending := d.continuePending
	r, err := s.call(id, 0, args...)
	if d.continuePending && !pending {
		d.continuePending = false
		s.vm.trace("(proxy_continue_stream during the stream's own callback: host error, dropped)")
		s.h.hostError(s.vm.index, fmt.Errorf("stream %d %s: %w", s.id, dirName(d), ErrContinueInOwnCallback))
	}
	return r, err
}

// dirName is "request" or "response".
func dirName(d *direction) string {
	if d.resp {
		return "response"
	}
	return "request"
}

func (s *Stream) dir(resp bool) *direction {
	if resp {
		return &s.resp
	}
	return &s.req
}

// spareHeaders is the room lowerPairs leaves for headers that a filter
// adds, so that a few additions do not grow the map.
const spareHeaders = 8

// lowerPairs returns a copy of p with lower-cased keys.
func lowerPairs(p [][2]string) [][2]string {
	out := make([][2]string, len(p), len(p)+spareHeaders)
	for i, kv := range p {
		out[i] = [2]string{lowerString(kv[0]), kv[1]}
	}
	return out
}

// lowerString is strings.ToLower with the common case, a key with no
// upper-case letter and no byte beyond ASCII, checked inline.
func lowerString(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// RequestHeaders delivers the request headers (keys are lower-cased;
// pseudo-headers :method, :path, :authority, :scheme as Envoy has them)
// to proxy_on_request_headers. eos says the request has no body.
func (s *Stream) RequestHeaders(hdrs [][2]string, eos bool) Action {
	return s.headersEvent(false, hdrs, eos)
}

// ResponseHeaders delivers the response headers (with :status) to
// proxy_on_response_headers.
func (s *Stream) ResponseHeaders(hdrs [][2]string, eos bool) Action {
	return s.headersEvent(true, hdrs, eos)
}

// RequestBody delivers a request body chunk to proxy_on_request_body
// (unless the stream is stopped at headers: then the host holds it).
func (s *Stream) RequestBody(chunk []byte, eos bool) Action { return s.bodyEvent(false, chunk, eos) }

// ResponseBody delivers a response body chunk to proxy_on_response_body.
func (s *Stream) ResponseBody(chunk []byte, eos bool) Action { return s.bodyEvent(true, chunk, eos) }

// RequestTrailers delivers request trailers (ending the request) to
// proxy_on_request_trailers.
func (s *Stream) RequestTrailers(tr [][2]string) Action { return s.trailersEvent(false, tr) }

// ResponseTrailers delivers response trailers to proxy_on_response_trailers.
func (s *Stream) ResponseTrailers(tr [][2]string) Action { return s.trailersEvent(true, tr) }

func (s *Stream) headersEvent(resp bool, hdrs [][2]string, eos bool) Action {
	s.lock()
	defer s.unlock()
	d := s.dir(resp)
	if s.ended || s.complete || d.headersSeen {
		return Ended
	}
	d.headers = lowerPairs(hdrs)
	d.headersSeen = true
	d.eosIn = eos
	d.headersEOS = eos
	if !s.ensureCreated() {
		return Ended
	}
	d.headersMutable = true
	id := cbRequestHeaders
	if resp {
		id = cbResponseHeaders
	}
	r, err := s.callDir(d, id, uint64(s.id), uint64(len(d.headers)), b2u(eos))
	if err != nil || s.afterCallback() {
		d.headersMutable = false
		return Ended
	}
	var a Action
	switch uint32(r) {
	case 0, 2: // Continue, ContinueAndEndStream
		a = Continue
	case 1:
		if s.h.opts.AllowOnHeadersStopIteration {
			a = StopIteration
		} else {
			a = StopAllIterationAndWatermark // cpp-host's conversion
		}
	case 3:
		a = StopAllIterationAndBuffer
	default: // 4 and above
		a = StopAllIterationAndWatermark
	}
	switch a {
	case Continue:
		s.releaseHeaders(d)
	case StopIteration:
		d.headersStopped = true
	default:
		d.stopAtHeaders = a
	}
	s.applyResume()
	return a
}

// releaseHeaders passes the headers on and freezes them (Envoy forgets the
// header map pointer once the filter continues). The end of stream goes
// with them only if the headers carried it: a body or trailers that
// arrived while they were held still go through the filter first. Caller
// holds the VM.
func (s *Stream) releaseHeaders(d *direction) {
	d.headersStopped = false
	d.headersMutable = false
	d.headersReleased = true
	// Shared, not copied: once released the map is never changed again
	// (headersMutable is set only before the headers callback), and every
	// reader of releasedHeaders copies it.
	d.releasedHeaders = d.headers
	if d.headersEOS {
		d.eosOut = true
	}
	s.signal()
}

func (s *Stream) bodyEvent(resp bool, chunk []byte, eos bool) Action {
	s.lock()
	defer s.unlock()
	d := s.dir(resp)
	if s.ended || s.complete || !d.headersSeen || d.eosIn {
		return Ended
	}
	d.eosIn = eos
	if d.stopAtHeaders != 0 {
		d.held = append(d.held, chunk...)
		d.heldEOS = eos
		if d.stopAtHeaders == StopAllIterationAndBuffer && len(d.held) > s.h.opts.BufferLimit {
			s.tooLarge(d)
			return Ended
		}
		return Held
	}
	if d.trailersStopped {
		return Held
	}
	return s.deliverBody(d, chunk, eos)
}

// deliverBody runs the body callback over the buffered body plus chunk.
// Caller holds the VM.
func (s *Stream) deliverBody(d *direction, chunk []byte, eos bool) Action {
	if d.buffering != 0 {
		d.buf = append(d.buf, chunk...)
	} else {
		d.buf = append([]byte(nil), chunk...)
	}
	id := cbRequestBody
	if d.resp {
		id = cbResponseBody
	}
	d.inBody = true
	r, err := s.callDir(d, id, uint64(s.id), uint64(len(d.buf)), b2u(eos))
	d.inBody = false
	if err != nil || s.afterCallback() {
		return Ended
	}
	var a Action
	switch uint32(r) {
	case 0:
		a = Continue
	case 1:
		a = StopIterationAndBuffer
	case 2:
		a = StopIterationAndWatermark
	default:
		a = StopIterationNoBuffer
	}
	switch a {
	case Continue:
		d.buffering = 0
		s.passBuf(d, eos)
	case StopIterationNoBuffer:
		d.buffering = 0
		d.buf = nil
	default:
		d.buffering = a
		if a == StopIterationAndBuffer && len(d.buf) > s.h.opts.BufferLimit {
			s.tooLarge(d)
			return Ended
		}
	}
	s.applyResume()
	return a
}

// passBuf appends the body buffer to what the direction has passed on
// and empties it. The buffer is the host's own (a copy of the driver's
// chunks, or of the filter's bytes), so when nothing is waiting to be
// taken it becomes the passed-on data without a copy.
func (s *Stream) passBuf(d *direction, eos bool) {
	if d.headersStopped {
		s.releaseHeaders(d) // the headers go first, with the buffered body
	}
	if len(d.out) == 0 {
		d.out = d.buf
	} else {
		d.out = append(d.out, d.buf...)
	}
	d.buf = nil
	if eos {
		d.eosOut = true
	}
	s.signal()
}

func (s *Stream) trailersEvent(resp bool, tr [][2]string) Action {
	s.lock()
	defer s.unlock()
	d := s.dir(resp)
	if s.ended || s.complete || !d.headersSeen || d.eosIn {
		return Ended
	}
	d.eosIn = true
	d.trailers = lowerPairs(tr)
	if d.stopAtHeaders != 0 {
		d.heldEOS = true
		d.heldTrailers = d.trailers
		return Held
	}
	return s.deliverTrailers(d)
}

func (s *Stream) deliverTrailers(d *direction) Action {
	id := cbRequestTrailers
	if d.resp {
		id = cbResponseTrailers
	}
	d.trailersMutable = true
	r, err := s.callDir(d, id, uint64(s.id), uint64(len(d.trailers)))
	if err != nil || s.afterCallback() {
		d.trailersMutable = false
		return Ended
	}
	if uint32(r) == 0 {
		s.releaseTrailers(d)
		s.applyResume()
		return Continue
	}
	d.trailersStopped = true
	s.applyResume()
	return StopIteration
}

func (s *Stream) releaseTrailers(d *direction) {
	if d.headersStopped {
		s.releaseHeaders(d)
	}
	d.trailersMutable = false
	d.trailersStopped = false
	d.buffering = 0
	d.out = append(d.out, d.buf...)
	d.buf = nil
	d.releasedTrailers = append([][2]string(nil), d.trailers...)
	d.eosOut = true
	s.signal()
}

// afterCallback applies a send_local_response or close_stream made during
// the callback (the callback's result is then forced to stop) and reports
// whether the stream has ended. Caller holds the VM.
func (s *Stream) afterCallback() bool {
	if s.pending != nil {
		lr := s.pending
		s.pending = nil
		s.endLocal(lr)
	}
	if s.closeReq && !s.ended {
		s.abort("wasm_close_stream")
	}
	return s.ended
}

// endLocal ends the stream with a local reply; if the response headers
// were already passed on, Envoy cannot send it and resets the stream.
func (s *Stream) endLocal(lr *LocalReply) {
	if s.ended {
		return
	}
	s.ended = true
	if s.resp.headersReleased {
		s.reset, s.resetWhy = true, "local reply after response headers: "+lr.Details
	} else {
		s.local = lr
	}
	s.signal()
}

// tooLarge answers a buffer overflow: 413 for a request, 500 for a
// response (a reset if the response headers were already sent).
func (s *Stream) tooLarge(d *direction) {
	if d.resp {
		s.endLocal(&LocalReply{Status: 500, Details: "response_payload_too_large", Body: []byte("Internal Server Error"), GRPCStatus: -1})
	} else {
		s.endLocal(&LocalReply{Status: 413, Details: "request_payload_too_large", Body: []byte("Payload Too Large"), GRPCStatus: -1})
	}
}

// applyResume performs proxy_continue_stream calls made by callbacks (of
// this stream, or of the root context with this stream effective). Caller
// holds the VM.
func (s *Stream) applyResume() {
	for _, d := range []*direction{&s.req, &s.resp} {
		for d.continuePending && !s.ended {
			d.continuePending = false
			switch {
			case d.stopAtHeaders != 0:
				d.stopAtHeaders = 0
				s.releaseHeaders(d)
				if len(d.held) > 0 || (d.heldEOS && d.heldTrailers == nil) {
					held, eos := d.held, d.heldEOS && d.heldTrailers == nil
					d.held = nil
					s.deliverBody(d, held, eos)
				}
				if d.heldTrailers != nil && !s.ended {
					d.heldTrailers = nil
					s.deliverTrailers(d)
				}
			case d.trailersStopped:
				s.releaseTrailers(d)
			case d.buffering != 0:
				d.buffering = 0
				s.passBuf(d, d.eosIn && d.trailers == nil)
			case d.headersStopped:
				// Stopped at headers (real StopIteration) with no body
				// buffered yet: the headers go now, the body follows as
				// it arrives.
				s.releaseHeaders(d)
			}
		}
	}
}

// abort resets the stream (downstream disconnect, upstream reset): no
// further filter callbacks but the end (on_log, on_done, on_delete, run by
// Complete). Caller holds the VM.
func (s *Stream) abort(reason string) {
	s.reset = true
	s.resetWhy = reason
	s.ended = true
	s.signal()
}

// Reset resets the stream as a downstream disconnect does
// ("downstream_remote_disconnect"): no further filter callbacks but the
// end, which Complete runs (on_log, on_done, on_delete, as for any
// stream).
func (s *Stream) Reset() { s.ResetWithReason("downstream_remote_disconnect") }

// ResetWithReason resets the stream with the given reason (ResetReason).
func (s *Stream) ResetWithReason(reason string) {
	s.lock()
	if !s.complete && !s.reset {
		s.abort(reason)
	}
	s.unlock()
}

// Complete ends the stream as Envoy's doDeferredStreamDestroy does:
// proxy_on_log, then proxy_on_done, then proxy_on_delete, also for a
// stream that was reset (Envoy completes the request before it logs, so
// the wasm filter's access-log callback always runs; ActiveStream::
// completeRequest, FilterManager::log). Later events return Ended. Safe to
// call twice.
func (s *Stream) Complete() { s.end(endComplete) }

// endMode is how end ends a stream.
type endMode uint8

const (
	endComplete   endMode = iota // on_log, on_done, on_delete
	endDeleteOnly                // on_delete alone
	endDeferLog                  // on_done, on_delete; on_log at DeferredLog
)

// end ends the stream once: proxy_on_log and proxy_on_done before
// proxy_on_delete (endComplete), proxy_on_delete alone (endDeleteOnly),
// or proxy_on_done and proxy_on_delete with proxy_on_log owed to
// DeferredLog (endDeferLog); then the stream leaves its VM, and, unless
// a log is owed, it releases the VM (release).
func (s *Stream) end(mode endMode) {
	s.lock()
	if s.complete {
		s.unlock()
		return
	}
	s.complete = true
	s.ended = true
	if s.created {
		switch mode {
		case endComplete:
			s.callLog()
			s.call(cbDone, 1, uint64(s.id))
		case endDeferLog:
			s.call(cbDone, 1, uint64(s.id))
		}
		s.call(cbDelete, 0, uint64(s.id))
		delete(s.vm.streams, s.id)
		if mode == endDeferLog {
			s.logOwed = true
			s.unlock()
			s.signal()
			return
		}
	}
	s.release()
}

// callLog calls proxy_on_log with the log phase's header maps. Caller
// holds the VM.
func (s *Stream) callLog() {
	s.logPhase = true
	s.call(cbLog, 0, uint64(s.id))
	s.logPhase = false
}

// release takes the ended stream off its VM's count of open streams: the
// last stream of a retired VM shuts its root down. Caller holds the VM;
// release unlocks it.
func (s *Stream) release() {
	vm := s.vm
	closeNow := false
	if vm.active.Add(-1) == 0 && vm.retired {
		// The last stream released the plugin: the retired root shuts down.
		if !vm.shutdown {
			closeNow = vm.shutdownRoot()
		} else {
			closeNow = vm.rootGone
		}
	}
	s.unlock()
	if closeNow {
		vm.closeInstance(vm.ctx)
	}
	s.signal()
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
