package hostcalls

import (
	"bytes"
	"errors"
	"testing"
)

// fakeHostWrite plays the host returning data: allocate n bytes through the
// guest's allocator, copy data in, and return the address it would write to
// the guest's ret_ptr slot.
func fakeHostWrite(data []byte) uintptr {
	b := allocate(uint32(len(data)))
	copy(b[:len(data)], data)
	return blockAddr(b)
}

func TestAllocatorResultRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		reserve int
		size    int
	}{
		{"empty", 0, 0},
		{"small", 0, 10},
		{"fills the arena", 0, ArenaSize},
		{"larger than the arena: fallback", 0, ArenaSize + 1},
		{"reserved ahead", 3 * ArenaSize, 3 * ArenaSize},
		{"reserve above the cap is ignored", maxReserve + 1, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			beginCall(tt.reserve)
			data := bytes.Repeat([]byte{0xab}, tt.size)
			ptr := fakeHostWrite(data)
			got, err := takeResult(ptr, uint32(tt.size))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("takeResult = %d bytes, %v; want %d bytes", len(got), err, tt.size)
			}
			// The result must not alias the arena: the next call reuses it.
			beginCall(0)
			fakeHostWrite(bytes.Repeat([]byte{0xcd}, tt.size))
			if !bytes.Equal(got, data) {
				t.Errorf("result changed after the next host call")
			}
		})
	}
}

func TestAllocatorDoesNotGrowArenaInside(t *testing.T) {
	beginCall(0)
	before := &arena[0]
	fakeHostWrite(make([]byte, len(arena)+1)) // fallback block
	if &arena[0] != before {
		t.Errorf("the allocator replaced the arena; it must grow only in beginCall")
	}
	if len(allocated) != 1 || inArena(allocated[0]) {
		t.Errorf("a block larger than the arena must come from the fallback")
	}
}

func TestAllocatorSeveralBlocksPerCall(t *testing.T) {
	beginCall(0)
	a := fakeHostWrite([]byte("first"))
	b := fakeHostWrite([]byte("second"))
	if a%8 != 0 || b%8 != 0 {
		t.Errorf("blocks not 8-aligned: %#x %#x", a, b)
	}
	for _, c := range []struct {
		ptr  uintptr
		want string
	}{{a, "first"}, {b, "second"}} {
		got, err := takeResult(c.ptr, uint32(len(c.want)))
		if err != nil || string(got) != c.want {
			t.Errorf("takeResult(%#x) = %q, %v; want %q", c.ptr, got, err, c.want)
		}
	}
}

func TestTakeResultRejectsForeignPointers(t *testing.T) {
	beginCall(0)
	ptr := fakeHostWrite([]byte("abc"))
	tests := []struct {
		name string
		ptr  uintptr
		size uint32
	}{
		{"not handed out", ptr + 8, 3},
		{"larger than the block", ptr, 4},
		{"zero address", 0, 3},
	}
	for _, tt := range tests {
		if _, err := takeResult(tt.ptr, tt.size); !errors.Is(err, ErrorStatusInvalidMemoryAccess) {
			t.Errorf("%s: takeResult = %v, want ErrorStatusInvalidMemoryAccess", tt.name, err)
		}
	}
	// A block from a previous call is forgotten by beginCall.
	beginCall(0)
	if _, err := takeResult(ptr, 3); !errors.Is(err, ErrorStatusInvalidMemoryAccess) {
		t.Errorf("stale block: takeResult = %v, want ErrorStatusInvalidMemoryAccess", err)
	}
	// size 0 is an empty result whatever the address (cpp-host writes 0, 0).
	if b, err := takeResult(12345, 0); b != nil || err != nil {
		t.Errorf("takeResult(_, 0) = %v, %v; want nil, nil", b, err)
	}
}

func TestBeginCallZeroesReturnSlots(t *testing.T) {
	retPtr, retSize, retU32, retU64 = 1, 2, 3, 4
	beginCall(0)
	if retPtr != 0 || retSize != 0 || retU32 != 0 || retU64 != 0 {
		t.Errorf("slots = %d %d %d %d, want zeros", retPtr, retSize, retU32, retU64)
	}
}

func BenchmarkAllocateSmall(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		beginCall(0)
		allocate(64)
	}
}

func TestAllocatorGivesAwayGrownArena(t *testing.T) {
	beginCall(4 * ArenaSize)
	data := bytes.Repeat([]byte{7}, 3*ArenaSize)
	got, err := takeResult(fakeHostWrite(data), uint32(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("takeResult = %d bytes, %v", len(got), err)
	}
	if len(arena) != 0 {
		t.Errorf("the grown arena (%d bytes) is still the allocator's", len(arena))
	}
	beginCall(0)
	if len(arena) != ArenaSize {
		t.Errorf("next arena %d bytes, want ArenaSize", len(arena))
	}
	fakeHostWrite(bytes.Repeat([]byte{9}, 100))
	if !bytes.Equal(got, data) {
		t.Errorf("result changed after the next host call")
	}
}

// TestAllocatorLentMemory checks a call begun with beginCallInto: the result
// is written into the caller's memory and handed back without a copy or an
// allocation, the arena of other calls is untouched, and a result that does
// not fit is still returned whole.
func TestAllocatorLentMemory(t *testing.T) {
	beginCall(0)
	own := &arena[0]
	dst := make([]byte, 0, 3*ArenaSize)
	for _, size := range []int{10, 3 * ArenaSize, 3*ArenaSize + 1} {
		data := bytes.Repeat([]byte{0xab}, size)
		saved := beginCallInto(dst)
		ptr := fakeHostWrite(data)
		got, err := takeResult(ptr, uint32(size))
		endCallInto(saved)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: takeResult = %d bytes, %v", size, len(got), err)
		}
		if in := &got[0] == &dst[:1][0]; in != (size <= cap(dst)) {
			t.Errorf("size %d: result in the lent memory = %v, want %v", size, in, size <= cap(dst))
		}
		beginCall(0)
		if &arena[0] != own {
			t.Errorf("size %d: the arena was replaced by a call into lent memory", size)
		}
	}
	data := bytes.Repeat([]byte{1}, 2*ArenaSize)
	got := testing.AllocsPerRun(100, func() {
		saved := beginCallInto(dst)
		b := allocate(uint32(len(data)))
		copy(b, data)
		_, _ = takeResult(blockAddr(b), uint32(len(data)))
		endCallInto(saved)
	})
	if got != 0 {
		t.Errorf("a 128 KiB result into lent memory: %v allocations, want 0", got)
	}
}
