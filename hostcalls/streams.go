package hostcalls

// streamTable holds the live stream entries by context id: open addressing
// with linear probing in a power-of-two slice, an entry's home slot being
// its id's low bits. A host numbers contexts from one counter (Envoy: one
// per VM), so the live streams are a window of nearly consecutive ids that
// fall into distinct slots: a lookup, an insertion and a deletion are a few
// loads and compares, where a map hashes the id and probes its groups (in
// Wasm several times the cost). The zero value is an empty table.
type streamTable struct {
	slots []*httpContext // nil: empty; len is 0 or a power of two
	n     int            // entries
}

// minStreamSlots is the first size of the slice.
const minStreamSlots = 64

// get returns the entry of id, or nil.
func (t *streamTable) get(id uint32) *httpContext {
	if t.n == 0 {
		return nil
	}
	mask := uint32(len(t.slots) - 1)
	for i := id & mask; ; i = (i + 1) & mask {
		h := t.slots[i]
		if h == nil || h.id == id {
			return h
		}
	}
}

// put stores h under h.id, replacing an entry of the same id.
func (t *streamTable) put(h *httpContext) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint32(len(t.slots) - 1)
	for i := h.id & mask; ; i = (i + 1) & mask {
		switch old := t.slots[i]; {
		case old == nil:
			t.slots[i] = h
			t.n++
			return
		case old.id == h.id:
			t.slots[i] = h
			return
		}
	}
}

// grow doubles the slice (or makes the first one) and stores the entries
// again.
func (t *streamTable) grow() {
	old := t.slots
	t.slots = make([]*httpContext, max(2*len(old), minStreamSlots))
	t.n = 0
	for _, h := range old {
		if h != nil {
			t.put(h)
		}
	}
}

// remove deletes the entry of id, if any, and returns it. The entries after
// it in its run move back into the hole (backward-shift deletion), so that
// every entry stays reachable from its home slot and no tombstone is left.
func (t *streamTable) remove(id uint32) *httpContext {
	if t.n == 0 {
		return nil
	}
	mask := uint32(len(t.slots) - 1)
	i := id & mask
	for ; ; i = (i + 1) & mask {
		h := t.slots[i]
		if h == nil {
			return nil
		}
		if h.id == id {
			break
		}
	}
	gone := t.slots[i]
	t.slots[i] = nil
	t.n--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		h := t.slots[j]
		if h == nil {
			return gone
		}
		// h stays where it is if its home slot k lies cyclically in
		// (i, j]: a probe from k reaches j without crossing the hole.
		k := h.id & mask
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i], t.slots[j] = h, nil
		i = j
	}
}

// len returns the number of entries.
func (t *streamTable) len() int { return t.n }
