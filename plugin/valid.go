package plugin

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/tidwall/gjson"
)

// maxDepth bounds the nesting of a request body, as encoding/json does.
const maxDepth = 10000

// validObject reports whether b is exactly one JSON value (RFC 8259), an
// object, surrounded by optional whitespace. It is a single iterative pass
// without allocation for nesting up to 64 levels, written for the request
// path (in Wasm, gjson.ValidBytes costs three times as much as reading the
// members). Strings are not checked for valid UTF-8, as encoding/json.Valid
// does not.
func validObject(b []byte) bool { return scanObject(b, nil) }

// scanObject is validObject that also calls member, if not nil, for every
// member of the top-level object in order: its key (unescaped; it may refer
// to b's memory) and the span b[at:end] of its value.
func scanObject(b []byte, member func(key string, at, end int)) bool {
	if member == nil {
		return scanMembers(b, nil)
	}
	return scanMembers(b, func(key string, at, end int, _ bool) { member(key, at, end) })
}

// scanMembers is scanObject whose member callback is also told whether the
// value may hold a member named "type" at any depth (typed): false means
// that no key inside the value is "type", escaped or not, so that a reader
// looking for typed content parts can skip the value without a second pass
// over its bytes. The test costs a comparison per nested key.
func scanMembers(b []byte, member func(key string, at, end int, typed bool)) bool {
	var stackBuf [64]byte
	stack := stackBuf[:0]
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	n := len(b)
	var key string
	var esc bool
	valAt, pending, ks := 0, false, 0
	types, typesAt := 0, 0 // nested keys that may be "type"; their count at valAt
value:
	if len(stack) == 1 {
		valAt, pending, typesAt = i, true, types
	}
	if i >= n {
		return false
	}
	switch c := b[i]; {
	case c == '{':
		if len(stack) > 0 && len(stack) < maxDepth {
			// A nested object of string members without whitespace
			// (a chat message) is read by flatObject in one call.
			if end, t := flatObject(b, i); end > 0 {
				i, types = end, types+t
				goto after
			}
		}
		if i = i + 1; i >= n || b[i] <= ' ' {
			i = skipWS(b, i) // a call only when there may be whitespace
		}
		if i < n && b[i] == '}' {
			i++
			goto after
		}
		if len(stack) >= maxDepth {
			return false
		}
		stack = append(stack, '{')
		goto key
	case c == '[':
		if i = i + 1; i >= n || b[i] <= ' ' {
			i = skipWS(b, i) // a call only when there may be whitespace
		}
		if i < n && b[i] == ']' {
			i++
			goto after
		}
		if len(stack) >= maxDepth {
			return false
		}
		stack = append(stack, '[')
		goto value
	case c == '"':
		if i, _ = scanString(b, i+1); i < 0 {
			return false
		}
		goto after
	case c == 't':
		if i+4 > n || string(b[i:i+4]) != "true" {
			return false
		}
		i += 4
		goto after
	case c == 'f':
		if i+5 > n || string(b[i:i+5]) != "false" {
			return false
		}
		i += 5
		goto after
	case c == 'n':
		if i+4 > n || string(b[i:i+4]) != "null" {
			return false
		}
		i += 4
		goto after
	default:
		if i = scanNumber(b, i); i < 0 {
			return false
		}
		goto after
	}
key:
	if i >= n || b[i] != '"' {
		return false
	}
	ks = i
	if i, esc = scanString(b, i+1); i < 0 {
		return false
	}
	if len(stack) == 1 && member != nil {
		key = keyString(b[ks:i], esc)
	} else if esc || i-ks == len(`"type"`) && b[ks+1] == 't' && b[ks+2] == 'y' && b[ks+3] == 'p' && b[ks+4] == 'e' {
		// "type", or a key with an escape that may spell it.
		types++
	}
	if i >= n || b[i] <= ' ' {
		i = skipWS(b, i) // a call only when there may be whitespace
	}
	if i >= n || b[i] != ':' {
		return false
	}
	if i = i + 1; i >= n || b[i] <= ' ' {
		i = skipWS(b, i) // a call only when there may be whitespace
	}
	goto value
after:
	if pending && len(stack) == 1 {
		pending = false
		if member != nil {
			member(key, valAt, i, types > typesAt)
		}
	}
	if i >= n || b[i] <= ' ' {
		i = skipWS(b, i) // a call only when there may be whitespace
	}
	if len(stack) == 0 {
		return i == n
	}
	if i >= n {
		return false
	}
	switch top := stack[len(stack)-1]; b[i] {
	case ',':
		if i = i + 1; i >= n || b[i] <= ' ' {
			i = skipWS(b, i) // a call only when there may be whitespace
		}
		if top == '{' {
			goto key
		}
		goto value
	case '}':
		if top != '{' {
			return false
		}
	case ']':
		if top != '[' {
			return false
		}
	default:
		return false
	}
	stack = stack[:len(stack)-1]
	i++
	goto after
}

// flatObject reads the object at b[i] if it is {"key":"string",...}, with
// no whitespace and no other kind of value, and returns the index after it
// and the number of its keys that may be "type" (scanMembers' count); end
// is 0 if the object is not of that form or not valid (scanMembers then
// reads it the general way, which finds any error). In Wasm one call per
// chat message through this small function costs about two thirds of
// stepping through scanMembers' states.
func flatObject(b []byte, i int) (end, types int) {
	n := len(b)
	i++
	if i >= n || b[i] != '"' {
		return 0, 0
	}
	for {
		ks := i
		e, esc := scanString(b, i+1)
		if e < 0 {
			return 0, 0
		}
		if esc || e-ks == len(`"type"`) && b[ks+1] == 't' && b[ks+2] == 'y' && b[ks+3] == 'p' && b[ks+4] == 'e' {
			types++
		}
		if e+1 >= n || b[e] != ':' || b[e+1] != '"' {
			return 0, 0
		}
		if i, _ = scanString(b, e+2); i < 0 || i >= n {
			return 0, 0
		}
		switch b[i] {
		case '}':
			return i + 1, types
		case ',':
			if i++; i >= n || b[i] != '"' {
				return 0, 0
			}
		default:
			return 0, 0
		}
	}
}

// keyString returns the value of the JSON string q (with its quotes), which
// has an escape if esc.
func keyString(q []byte, esc bool) string {
	if !esc {
		return bstr(q[1 : len(q)-1])
	}
	return gjson.Parse(bstr(q)).Str
}

// skipWS skips JSON whitespace from i.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Word-at-a-time constants for scanString: lsb has the low bit of every
// byte set, msb the high bit.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specials returns 0 if none of the 8 bytes of v (read little-endian) is
// '"', '\\' or a control character (< 0x20), else a mask whose lowest set
// bit is the high bit of the first such byte. It is the classic "has a zero
// byte" test, (x - 0x01…) &^ x & 0x80…, applied to v XOR '"', v XOR '\\'
// and (as "has a byte below 0x20") to v itself: a borrow can only mark bytes
// above a true match, so the lowest mark is exact.
func specials(v uint64) uint64 {
	q := v ^ (lsb * '"')
	e := v ^ (lsb * '\\')
	return ((q-lsb)&^q | (e-lsb)&^e | (v-lsb*0x20)&^v) & msb
}

// scanString scans a string whose opening quote is at i-1 and returns the index
// after its closing quote, or -1, and whether the string has an escape.
//
// It reads 8 bytes at a time (specials) and jumps straight to the first
// quote, backslash or control character: in Wasm every taken branch of a
// byte loop is costly (about 7 ns a byte), and string contents are most of a
// chat request, so this makes validating and reading a body several times
// cheaper.
func scanString(b []byte, i int) (end int, esc bool) {
	for {
		// Two words per iteration while 16 bytes are left, read without
		// bounds checks (i+16 <= len(b) is checked): in Wasm this runs at
		// about 0.4 ns a byte against 0.6 for one checked word.
		if len(b) >= 16 {
			p := unsafe.Pointer(unsafe.SliceData(b))
			for i >= 0 && i <= len(b)-16 {
				v, w := *(*uint64)(unsafe.Add(p, i)), *(*uint64)(unsafe.Add(p, i+8))
				if specials(v)|specials(w) != 0 {
					break
				}
				i += 16
			}
		}
		for i+8 <= len(b) {
			if m := specials(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
		}
		for i < len(b) {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				goto special
			}
			i++
		}
		return -1, esc
	special: // b[i] is '"', '\\' or a control character
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc
		case c < 0x20:
			return -1, esc
		}
		esc = true
		if i+1 >= len(b) {
			return -1, esc
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if i+6 > len(b) {
				return -1, esc
			}
			for _, h := range b[i+2 : i+6] {
				if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
					return -1, esc
				}
			}
			i += 6
		default:
			return -1, esc
		}
	}
}

// scanNumber scans a number at i and returns the index after it, or -1.
func scanNumber(b []byte, i int) int {
	n := len(b)
	if i < n && b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case i < n && b[i] >= '1' && b[i] <= '9':
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < n && b[i] == '.' {
		i++
		if i >= n || b[i] < '0' || b[i] > '9' {
			return -1
		}
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= n || b[i] < '0' || b[i] > '9' {
			return -1
		}
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i
}
