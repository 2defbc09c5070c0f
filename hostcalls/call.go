package hostcalls

import (
	"math"
	"unsafe"
)

// Helpers shared by the typed wrappers of every family.

// strPtr is the address of s's bytes (nil for ""), for a host function that
// reads len(s) bytes there. A pointer passed to a wasmimport escapes, so s
// lives on the heap (or in the data segment) and cannot move during the call.
func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

// bytesPtr is the address of b's bytes (nil for an empty b).
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

// u32 clamps a non-negative int to the u32 range of the ABI (negative → 0).
func u32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

// returnedBytes finishes a host call that answered through retPtr/retSize.
func returnedBytes(st uint32) ([]byte, error) {
	if err := Status(st).Err(); err != nil {
		return nil, err
	}
	return takeResult(uintptr(retPtr), retSize)
}

// emptyMap is the serialisation of a map without pairs: u32 N=0.
var emptyMap = []byte{0, 0, 0, 0}

// encodeMap serialises pairs for a host function that reads a map. An empty
// map is sent as the 4-byte N=0 form rather than ptr=0, size=0: cpp-host
// parses both as an empty map, while the SDK's proxytest emulator panics on
// a zero-length map (internal.DeserializeMap).
func encodeMap(pairs [][2]string) []byte {
	if len(pairs) == 0 {
		return emptyMap
	}
	return EncodePairs(pairs)
}
