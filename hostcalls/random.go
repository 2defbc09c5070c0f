package hostcalls

import "math/rand/v2"

// RandomUint64 returns 64 random bits read from the host (WASI random_get)
// in the Wasm build, from math/rand/v2 natively or if the host fails the
// call. Unlike math/rand/v2 in the guest, whose source Go's runtime also
// draws from (a hash seed for every map it makes), what it returns depends
// only on the host's random source and on the calls made to it: an id
// drawn with it stays the same when the module's code makes more or fewer
// maps, so that a seeded host (the fairness benchmark) gives the same ids
// to every build.
func RandomUint64() uint64 {
	var b [8]byte
	if randomGet(b[:]) != nil {
		return rand.Uint64()
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
