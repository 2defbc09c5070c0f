package host

// DeleteOnly ends the stream with proxy_on_delete alone: no proxy_on_log,
// no proxy_on_done. Envoy never does this (it completes, logs and ends
// every stream before deleting it, see Complete); it is a test knob for a
// host that does, to show that a filter leaks nothing on_done would have
// released. Later events return Ended; after Complete (or DeleteOnly) it
// does nothing.
func (s *Stream) DeleteOnly() { s.end(endDeleteOnly) }
