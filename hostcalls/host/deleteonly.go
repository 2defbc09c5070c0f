package host

// DeleteOnly ends the stream with proxy_on_delete alone: no proxy_on_log,
// no proxy_on_done. Envoy never does this (it completes, logs and ends
// every stream before deleting it, see Complete); it is a test knob for a
// host that does, to show that a filter leaks nothing on_done would have
// released. Later events return Ended; after Complete (or DeleteOnly) it
// does nothing.
func (s *Stream) DeleteOnly() {
	s.lock()
	if s.complete {
		s.unlock()
		return
	}
	s.complete = true
	s.ended = true
	if s.created {
		s.call(cbDelete, 0, uint64(s.id))
		delete(s.vm.streams, s.id)
	}
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
