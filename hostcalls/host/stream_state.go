package host

// What a Stream has done so far, for tests and for a front end (Take). Every
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

// Progress is what a front end (PickStream) needs after each event in
// one direction: what the filter has passed on so far and how the stream
// stands.
type Progress struct {
	HeadersReleased bool        // the headers were passed on
	Headers         [][2]string // the headers passed on (nil if not yet, or if sentHeaders)
	Data            []byte      // body bytes passed on since the last Take
	EOS             bool        // the end of stream was passed on
	Trailers        [][2]string // trailers passed on
	Ended           bool        // a local reply or a reset: no more callbacks but the end
	Local           *LocalReply // the local reply, if any
	Reset           bool        // the stream was reset
}

// Take returns the progress of the request (resp false) or response
// direction and the body passed on since the last Take (a copy). With
// sentHeaders the headers are not copied (the caller already sent them).
// For a stream of PickStream the data taken is dropped from the stream;
// otherwise it stays for ForwardedRequestBody and the like.
func (s *Stream) Take(resp bool, sentHeaders bool) Progress {
	var p Progress
	s.read(func() {
		d := s.dir(resp)
		p.HeadersReleased = d.headersReleased
		if d.headersReleased && !sentHeaders {
			p.Headers = clonePairs(d.releasedHeaders)
		}
		p.Data = append([]byte(nil), d.out[d.outTaken:]...)
		if s.keepBodies {
			d.outTaken = len(d.out)
		} else {
			d.out = d.out[:0]
			d.outTaken = 0
		}
		p.EOS = d.eosOut
		p.Trailers = clonePairs(d.releasedTrailers)
		p.Ended = s.ended
		p.Local = s.local
		p.Reset = s.reset
	})
	return p
}
