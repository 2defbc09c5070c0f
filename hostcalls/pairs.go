package hostcalls

import (
	"encoding/binary"
	"errors"
	"unsafe"
)

// Limits that proxy-wasm-cpp-host's PairsUtil enforces on a serialised map.
const (
	MaxPairs     = 1024
	MaxPairsSize = 1 << 20
)

// ErrBadPairs reports a serialised header map that does not follow the
// layout below. Envoy silently turns such a buffer into an empty map; the
// guest and the test host refuse it instead so that the bug shows.
var ErrBadPairs = errors.New("hostcalls: malformed header map serialisation")

// EncodePairs serialises a header map the way proxy-wasm exchanges it
// (little-endian):
//
//	u32 N | N × (u32 key_len, u32 value_len) | N × (key \0 value \0)
//
// An empty map encodes to nil (the host answers ptr=0, size=0).
// Cost: one allocation of the exact size.
func EncodePairs(pairs [][2]string) []byte {
	if len(pairs) == 0 {
		return nil
	}
	size := 4
	for _, p := range pairs {
		size += 8 + len(p[0]) + len(p[1]) + 2
	}
	buf := make([]byte, size)
	binary.LittleEndian.PutUint32(buf, uint32(len(pairs)))
	lens := buf[4:]
	data := buf[4+8*len(pairs):]
	for i, p := range pairs {
		binary.LittleEndian.PutUint32(lens[8*i:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(lens[8*i+4:], uint32(len(p[1])))
		n := copy(data, p[0])
		data[n] = 0
		data = data[n+1:]
		n = copy(data, p[1])
		data[n] = 0
		data = data[n+1:]
	}
	return buf
}

// DecodePairs parses the serialisation written by EncodePairs, as strictly as
// cpp-host's PairsUtil::toPairs: the buffer must end exactly after the last
// value's NUL, every NUL must be present, and at most MaxPairs pairs and
// MaxPairsSize bytes are accepted. An empty buffer is an empty map. It never
// panics, whatever the input. Cost: one allocation for the pairs and one
// per key and per value (the strings are copies; see decodePairsView).
func DecodePairs(buf []byte) ([][2]string, error) { return decodePairs(buf, false) }

// decodePairsView is DecodePairs whose keys and values are views of buf
// rather than copies: one allocation for the pairs and none per header.
// buf must belong to the caller and never change again (a result taken
// from the host, which takeResult hands over).
func decodePairsView(buf []byte) ([][2]string, error) { return decodePairs(buf, true) }

// bstr views b, which the caller owns and never changes again, as a string.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func decodePairs(buf []byte, view bool) ([][2]string, error) {
	return decodePairsInto(nil, buf, view)
}

// decodePairsInto is decodePairs that reuses dst's memory for the pairs
// when it has room (every pair is written: none is left from before).
func decodePairsInto(dst [][2]string, buf []byte, view bool) ([][2]string, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	if len(buf) < 4 || len(buf) > MaxPairsSize {
		return nil, ErrBadPairs
	}
	n := int(binary.LittleEndian.Uint32(buf))
	if n > MaxPairs || 4+8*n > len(buf) {
		return nil, ErrBadPairs
	}
	lens := buf[4 : 4+8*n]
	data := buf[4+8*n:]
	var pairs [][2]string
	if cap(dst) >= n {
		pairs = dst[:n]
	} else {
		pairs = make([][2]string, n)
	}
	for i := range pairs {
		for j := 0; j < 2; j++ {
			l := int(binary.LittleEndian.Uint32(lens[8*i+4*j:]))
			if l >= len(data) || data[l] != 0 {
				return nil, ErrBadPairs
			}
			switch {
			case l == 0:
				pairs[i][j] = ""
			case view:
				pairs[i][j] = bstr(data[:l])
			default:
				pairs[i][j] = string(data[:l])
			}
			data = data[l+1:]
		}
	}
	if len(data) != 0 {
		return nil, ErrBadPairs
	}
	return pairs, nil
}
