package hostcalls

import "unsafe"

// How the guest hands memory to the host (cpp-host wasm.h copyToPointerSize).
//
// A host function that returns data (a header value, a body, shared data)
// calls back into the guest's allocator export, copies the bytes into the
// block it gets, and writes the block's address and the size into two i32
// slots that the guest passed:
//
//	guest                         host
//	 ├─ beginCall()                │
//	 ├─ proxy_get_…(…, &retPtr, &retSize) ──►
//	 │                             ├─ proxy_on_memory_allocate(n) ─► allocate(n): block from the arena
//	 │                             ├─ copy n bytes into the block
//	 │                             ├─ retPtr = block (u32 LE), retSize = n (u32 LE)
//	 ◄─────────────────────────────┘
//	 └─ takeResult(retPtr, retSize): find the block by address, copy out
//
// Choices, and why:
//
//   - The return slots are package-level uint32 variables (retPtr, retSize,
//     ...), not locals: the host writes exactly 4 bytes, a Go pointer on wasm
//     is 8, and a global never moves (a local whose address is passed to a
//     wasmimport escapes to the heap anyway, costing one allocation per call).
//   - The guest never turns the integer the host wrote back into a Go pointer.
//     Every block handed out since the last beginCall is remembered in
//     allocated; takeResult looks the address up there, so the block is
//     reachable by the garbage collector from the moment it is handed out, and
//     an address the allocator did not hand out is reported as
//     ErrorStatusInvalidMemoryAccess instead of being read.
//   - The allocator bumps through a reusable arena and does not call the Go
//     allocator when the block fits (golang/go#78513: on cpp-host c4d7bb0…
//     beb8a4e, a garbage collection started inside proxy_on_memory_allocate
//     ends in poll_oneoff, which traps there with restricted_callback). The
//     arena starts at ArenaSize bytes; wrappers that know an upper bound of
//     the result (body reads with a max size) grow it before the host call,
//     outside the allocator. Only a result larger than the free arena falls
//     back to make([]byte, n) inside the allocator.
//   - Because the arena is reused by the next host call, results that lie in
//     it are copied out before the wrapper returns (strings are copied
//     anyway); an arena grown beyond ArenaSize for one result is instead
//     given to the caller whole, so a large body is neither copied twice nor
//     kept alive by the allocator.
//   - A caller that keeps a buffer from call to call can lend it for one
//     call (GetBufferBytesInto, GetSharedDataInto: beginCallInto): the
//     arena is that buffer for the call, the result is a slice of it and is
//     neither copied nor allocated, and the arena is given back after.
//
// The guest is single-threaded and the host calls the allocator only from
// inside a host function, so none of this state needs a lock. A callback the
// host re-enters from inside a host function (proxytest calls
// proxy_on_queue_ready from inside proxy_enqueue_shared_queue) may make host
// calls of its own, because the re-entering host functions return no data;
// Envoy never re-enters.

// ArenaSize is the initial size in bytes of the arena the allocator hands
// blocks out of (grown on demand, never shrunk).
const ArenaSize = 64 << 10

// maxReserve bounds how far a wrapper grows the arena ahead of a host call
// from a caller-supplied maximum size (GetHttpRequestBody(0, math.MaxInt32)
// must not allocate 2 GiB).
const maxReserve = 16 << 20

var (
	arena     []byte   // blocks come from arena[:arenaOff]
	arenaOff  int      // next free byte, 8-aligned
	allocated [][]byte // every block handed out since beginCall, in order
)

// Return slots of the host functions. See the comment above.
var (
	retPtr  uint32
	retSize uint32
	retU32  uint32 // cas, flags, ids, tokens, levels, status codes
	retU64  uint64 // metric values
)

// beginCall prepares the allocator for one host call that may return data:
// it forgets the blocks of the previous call, rewinds the arena and makes
// sure at least reserve bytes fit without the Go allocator. It also zeroes
// the return slots so that a host that writes nothing leaves ptr=0, size=0.
func beginCall(reserve int) {
	clear(allocated)
	allocated = allocated[:0]
	arenaOff = 0
	if reserve > maxReserve {
		reserve = maxReserve
	}
	if reserve < ArenaSize {
		reserve = ArenaSize
	}
	if len(arena) < reserve {
		arena = make([]byte, (reserve+7)&^7)
	}
	if cap(allocated) == 0 {
		allocated = make([][]byte, 0, 4)
	}
	retPtr, retSize, retU32, retU64 = 0, 0, 0, 0
}

// lent is true while the arena is memory the caller lent for one call
// (beginCallInto): a result in it belongs to the caller and is neither
// copied out nor taken from the allocator.
var lent bool

// beginCallInto is beginCall for one host call whose result the host
// writes into dst (the arena for that call). endCallInto must follow,
// restoring the arena; the result, if it lies in dst, is a slice of dst.
func beginCallInto(dst []byte) (saved []byte) {
	clear(allocated)
	allocated = allocated[:0]
	if cap(allocated) == 0 {
		allocated = make([][]byte, 0, 4)
	}
	saved = arena
	arena, arenaOff, lent = dst[:cap(dst)], 0, true
	retPtr, retSize, retU32, retU64 = 0, 0, 0, 0
	return saved
}

// endCallInto gives the arena back after a call begun with beginCallInto.
func endCallInto(saved []byte) { arena, arenaOff, lent = saved, 0, false }

// allocate is the body of proxy_on_memory_allocate: a block of size bytes
// that stays reachable until the next beginCall. Cost: O(1), no Go
// allocation when the block fits in the arena (and allocated has room).
func allocate(size uint32) []byte {
	n := int(size)
	var b []byte
	if arenaOff+n <= len(arena) {
		b = arena[arenaOff : arenaOff+n : arenaOff+n]
		arenaOff = (arenaOff + n + 7) &^ 7
		if arenaOff > len(arena) {
			arenaOff = len(arena)
		}
	} else {
		b = make([]byte, n)
	}
	allocated = append(allocated, b)
	return b
}

// blockAddr is the address of b's first byte as the host sees it; an empty
// block's address is the address it would have.
func blockAddr(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)])))
}

// inArena reports whether b lies inside the arena (and must be copied out).
func inArena(b []byte) bool {
	if len(arena) == 0 || cap(b) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&arena[0]))
	p := blockAddr(b)
	return p >= start && p < start+uintptr(len(arena))
}

// takeResult returns the size bytes the host wrote at ptr, which must be
// the address of a block handed out since beginCall. size 0 is an empty
// result whatever ptr is (cpp-host writes ptr=0, size=0 without allocating).
// The returned slice belongs to the caller.
func takeResult(ptr uintptr, size uint32) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	for _, b := range allocated {
		if cap(b) == 0 || blockAddr(b) != ptr {
			continue
		}
		if int(size) > cap(b) {
			return nil, ErrorStatusInvalidMemoryAccess
		}
		out := b[:size]
		if inArena(out) && !lent {
			if len(arena) > ArenaSize {
				// The arena was grown for this result (a body read with a
				// max size): hand it to the caller instead of copying, and
				// let the next beginCall start a fresh ArenaSize arena.
				arena, arenaOff = nil, 0
			} else {
				out = append([]byte(nil), out...)
			}
		}
		return out, nil
	}
	return nil, ErrorStatusInvalidMemoryAccess
}
