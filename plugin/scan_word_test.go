package plugin

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// firstSpecial is the byte-by-byte definition that specials implements a
// word at a time: the index of the first '"', '\\' or control character of
// w, or 8.
func firstSpecial(w [8]byte) int {
	for i, c := range w {
		if c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return 8
}

func specialsIndex(w [8]byte) int {
	m := specials(binary.LittleEndian.Uint64(w[:]))
	if m == 0 {
		return 8
	}
	return bits.TrailingZeros64(m) >> 3
}

// TestSpecials checks specials against the byte loop: every byte value at
// every position over several backgrounds (plain ASCII, UTF-8 bytes, bytes
// just above the thresholds), then every pair of byte values in two
// positions, then random words.
func TestSpecials(t *testing.T) {
	check := func(w [8]byte) {
		t.Helper()
		if got, want := specialsIndex(w), firstSpecial(w); got != want {
			t.Fatalf("specials(%q) marks byte %d, want %d", w[:], got, want)
		}
	}
	for _, bg := range []byte{'a', ' ', '!', '#', ']', 0x80, 0xff, 0x21, 0x5d} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for i := range w {
					w[i] = bg
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	for c1 := 0; c1 < 256; c1++ {
		for c2 := 0; c2 < 256; c2++ {
			w := [8]byte{'x', byte(c1), 'x', 'x', byte(c2), 'x', 'x', 'x'}
			check(w)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}
