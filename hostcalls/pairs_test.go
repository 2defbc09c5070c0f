package hostcalls

import (
	"slices"
	"testing"
)

// TestDecodePairsView checks that the view decoder reads every
// serialisation exactly as DecodePairs does, and refuses the same ones.
func TestDecodePairsView(t *testing.T) {
	good := EncodePairs([][2]string{{":path", "/v1/chat/completions"}, {"x-team", "a"}, {"empty", ""}, {"", "v"}})
	tests := []struct {
		name string
		buf  []byte
	}{
		{"map", good},
		{"empty", nil},
		{"n=0", []byte{0, 0, 0, 0}},
		{"truncated", good[:len(good)-1]},
		{"missing NUL", append(append([]byte(nil), good[:len(good)-1]...), 'x')},
		{"trailing byte", append(append([]byte(nil), good...), 0)},
		{"too many pairs", []byte{0xff, 0xff, 0, 0}},
	}
	for _, tt := range tests {
		want, werr := DecodePairs(tt.buf)
		got, gerr := decodePairsView(append([]byte(nil), tt.buf...))
		if !slices.Equal(got, want) || (gerr == nil) != (werr == nil) {
			t.Errorf("%s: decodePairsView = %q, %v; DecodePairs = %q, %v", tt.name, got, gerr, want, werr)
		}
	}
}

// TestDecodePairsViewAllocs states the allocations of decoding a request's
// headers: one for the pairs, none per header (DecodePairs copies every
// key and value but one-byte ones, which Go does not allocate).
func TestDecodePairsViewAllocs(t *testing.T) {
	buf := EncodePairs([][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"content-type", "application/json"},
		{"content-length", "1024"}, {"x-team", "a"}, {"user-agent", "go"}})
	if got := testing.AllocsPerRun(100, func() { _, _ = decodePairsView(buf) }); got != 1 {
		t.Errorf("decodePairsView of 6 headers: %v allocations, want 1", got)
	}
	if got := testing.AllocsPerRun(100, func() { _, _ = DecodePairs(buf) }); got < 6 {
		t.Errorf("DecodePairs of 6 headers: %v allocations, want a copy per header", got)
	}
}

// TestDecodePairsInto checks that decoding into reused pairs reads every
// map as DecodePairs does, leaves nothing of the previous map (an empty
// key or value reads as "", not as what the slot held), and allocates
// nothing when the pairs have room.
func TestDecodePairsInto(t *testing.T) {
	first := EncodePairs([][2]string{{":path", "/v1/chat/completions"}, {"x-team", "a"}, {"x-class", "batch"}})
	second := EncodePairs([][2]string{{"", "v"}, {"x-team", ""}})
	dst, err := decodePairsInto(nil, first, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePairsInto(dst[:0], second, true)
	want, _ := DecodePairs(second)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("decodePairsInto over a previous map = %q, %v; want %q", got, err, want)
	}
	if &got[0] != &dst[0] {
		t.Error("decodePairsInto did not reuse pairs with room")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = decodePairsInto(dst[:0], first, true) }); n != 0 {
		t.Errorf("decodePairsInto with room: %v allocations, want 0", n)
	}
}
