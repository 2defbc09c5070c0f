package hostcalls

import (
	"math/rand/v2"
	"testing"
)

// checkTable is the table's invariant checker: the count is the number of
// entries, and every entry is found from its home slot.
func checkTable(t *testing.T, tb *streamTable, want map[uint32]*httpContext) {
	t.Helper()
	n := 0
	for _, h := range tb.slots {
		if h != nil {
			n++
		}
	}
	if n != tb.n || tb.len() != len(want) {
		t.Fatalf("table holds %d entries, counts %d, want %d", n, tb.n, len(want))
	}
	for id, h := range want {
		if got := tb.get(id); got != h {
			t.Fatalf("get(%d) = %p, want %p", id, got, h)
		}
	}
}

// TestStreamTableMatchesMap runs random puts, removes and gets on a table
// and on a map, with ids in a sliding window (as a host numbers contexts)
// and ids anywhere (colliding in the low bits), and checks the invariant
// after every operation.
func TestStreamTableMatchesMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   func(r *rand.Rand, next uint32) uint32
	}{
		{"window", func(r *rand.Rand, next uint32) uint32 { return next - uint32(r.IntN(200)) }},
		{"colliding", func(r *rand.Rand, _ uint32) uint32 { return uint32(r.IntN(50)) << 6 }},
		{"anywhere", func(r *rand.Rand, _ uint32) uint32 { return r.Uint32() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var tb streamTable
			want := map[uint32]*httpContext{}
			next := uint32(1000)
			for op := 0; op < 20000; op++ {
				next++
				id := tc.id(r, next)
				switch r.IntN(3) {
				case 0:
					h := &httpContext{id: id}
					tb.put(h)
					want[id] = h
				case 1:
					got := tb.remove(id)
					if got != want[id] {
						t.Fatalf("remove(%d) = %p, want %p", id, got, want[id])
					}
					delete(want, id)
				default:
					if got := tb.get(id); got != want[id] {
						t.Fatalf("get(%d) = %p, want %p", id, got, want[id])
					}
				}
				if op%97 == 0 {
					checkTable(t, &tb, want)
				}
			}
			checkTable(t, &tb, want)
			for id := range want {
				tb.remove(id)
				delete(want, id)
				checkTable(t, &tb, want)
			}
		})
	}
}

func TestStreamTableZeroValue(t *testing.T) {
	var tb streamTable
	if tb.get(7) != nil || tb.remove(7) != nil || tb.len() != 0 {
		t.Errorf("an empty table found an entry")
	}
	h := &httpContext{id: 7}
	tb.put(h)
	tb.put(h)
	if tb.get(7) != h || tb.len() != 1 {
		t.Errorf("put twice: get(7) = %p, len %d, want %p and 1", tb.get(7), tb.len(), h)
	}
}
