package wasmlink

import (
	"errors"
	"fmt"
)

// errShort is the error of a read past the end of its input.
var errShort = errors.New("unexpected end of input")

// A reader reads a Wasm binary's encodings from b, starting at off. Every
// read checks its bounds and returns an error, never panics.
type reader struct {
	b   []byte
	off int
}

func (r *reader) done() bool { return r.off >= len(r.b) }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n uint32) ([]byte, error) {
	if uint64(n) > uint64(len(r.b)-r.off) {
		return nil, errShort
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

// leb reads an unsigned LEB128 of at most bits bits.
func (r *reader) leb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits || (bits-shift < 7 && uint64(c&0x7f)>>(bits-shift) != 0) {
			return 0, fmt.Errorf("LEB128 at offset %d overflows %d bits", r.off-1, bits)
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.leb(32)
	return uint32(v), err
}

// sleb skips a signed LEB128 of at most bits bits (its value is never
// needed: the step copies such immediates as they are).
func (r *reader) sleb(bits uint) error {
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if shift >= bits {
			return fmt.Errorf("signed LEB128 at offset %d overflows %d bits", r.off-1, bits)
		}
		if c&0x80 == 0 {
			return nil
		}
	}
}

// count reads a vector's length and checks that the rest of the input can
// hold that many items of at least min bytes each, so that a forged length
// cannot make the step allocate without bound.
func (r *reader) count(min int) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(min) > uint64(len(r.b)-r.off) {
		return 0, fmt.Errorf("vector of %d items at offset %d is longer than its input", n, r.off)
	}
	return n, nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	return string(b), err
}

// appendU32 appends v as a canonical (shortest) unsigned LEB128.
func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}
