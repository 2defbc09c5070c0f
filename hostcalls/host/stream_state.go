package host

// What a Stream has done so far, for tests and for the Handler. Every
// accessor locks the VM and returns copies.

func (s *Stream) read(f func()) {
	s.lock()
	f()
	s.unlock()
}

func clonePairs(p [][2]string) [][2]string {
	if p == nil {
		return nil
	}
	return append([][2]string(nil), p...)
}

// LocalReply returns the local reply the stream ended with, or nil.
func (s *Stream) LocalReply() *LocalReply {
	var lr *LocalReply
	s.read(func() { lr = s.local })
	return lr
}

// ResetReason returns why the stream was reset ("" if it was not).
func (s *Stream) ResetReason() string {
	var r string
	s.read(func() {
		if s.reset {
			r = s.resetWhy
		}
	})
	return r
}

// Ended reports whether the stream ended (local reply, reset, Complete).
func (s *Stream) Ended() bool {
	var e bool
	s.read(func() { e = s.ended })
	return e
}

// RequestHeaderMap returns the request headers as passed upstream, or nil
// if the filter has not let them through yet.
func (s *Stream) RequestHeaderMap() [][2]string {
	var m [][2]string
	s.read(func() { m = clonePairs(s.req.releasedHeaders) })
	return m
}

// ResponseHeaderMap returns the response headers as passed to the client,
// or nil if not yet.
func (s *Stream) ResponseHeaderMap() [][2]string {
	var m [][2]string
	s.read(func() { m = clonePairs(s.resp.releasedHeaders) })
	return m
}

// RequestTrailerMap returns the request trailers passed upstream.
func (s *Stream) RequestTrailerMap() [][2]string {
	var m [][2]string
	s.read(func() { m = clonePairs(s.req.releasedTrailers) })
	return m
}

// ResponseTrailerMap returns the response trailers passed to the client.
func (s *Stream) ResponseTrailerMap() [][2]string {
	var m [][2]string
	s.read(func() { m = clonePairs(s.resp.releasedTrailers) })
	return m
}

// ForwardedRequestBody returns the request body passed upstream so far.
func (s *Stream) ForwardedRequestBody() []byte {
	var b []byte
	s.read(func() { b = append([]byte(nil), s.req.out...) })
	return b
}

// ResponseOut returns the response body passed to the client so far.
func (s *Stream) ResponseOut() []byte {
	var b []byte
	s.read(func() { b = append([]byte(nil), s.resp.out...) })
	return b
}

// RequestDone and ResponseDone report whether end of stream was passed on
// in that direction.
func (s *Stream) RequestDone() bool {
	var d bool
	s.read(func() { d = s.req.eosOut })
	return d
}

// ResponseDone reports whether the response's end of stream was passed to
// the client.
func (s *Stream) ResponseDone() bool {
	var d bool
	s.read(func() { d = s.resp.eosOut })
	return d
}

// FilterState returns a copy of the stream's filter state (proxy_set_property
// stores under "wasm.<path>").
func (s *Stream) FilterState() map[string][]byte {
	out := map[string][]byte{}
	s.read(func() {
		for k, v := range s.fs {
			out[k] = append([]byte(nil), v...)
		}
	})
	return out
}

// progress is what the Handler needs after each event in one direction.
type progress struct {
	headersReleased bool
	headers         [][2]string
	data            []byte
	eos             bool
	trailers        [][2]string
	ended           bool
	local           *LocalReply
	reset           bool
}

// take returns the direction's progress and the data passed on since the
// last take. Unless keepBodies, taken data is dropped from the stream.
func (s *Stream) take(resp bool, sentHeaders bool) progress {
	var p progress
	s.read(func() {
		d := s.dir(resp)
		p.headersReleased = d.headersReleased
		if d.headersReleased && !sentHeaders {
			p.headers = clonePairs(d.releasedHeaders)
		}
		p.data = append([]byte(nil), d.out[d.outTaken:]...)
		if s.keepBodies {
			d.outTaken = len(d.out)
		} else {
			d.out = d.out[:0]
			d.outTaken = 0
		}
		p.eos = d.eosOut
		p.trailers = clonePairs(d.releasedTrailers)
		p.ended = s.ended
		p.local = s.local
		p.reset = s.reset
	})
	return p
}
