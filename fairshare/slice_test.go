package fairshare

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func slicePool(t *testing.T) *Pool {
	t.Helper()
	p := NewPool("p", Config{Capacity: 20, KVTokens: 2000, QueueLimit: 50, Teams: []TeamConfig{
		{Name: "a", Share: 0.5}, {Name: "b", Share: 0.3}, {Name: "c", Share: 0.1},
	}}, time.Unix(0, 0))
	verify(t, p)
	return p
}

func TestPoolTotals(t *testing.T) {
	p := slicePool(t)
	if got, want := p.Totals(), totals3(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Totals() = %+v, want %+v", got, want)
	}
	// A slice does not change the totals.
	p.SetSlice(&Slice{Capacity: 3, Reserved: []int{1}})
	if got, want := p.Totals(), totals3(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Totals() under a slice = %+v, want %+v", got, want)
	}
}

// TestSetSliceDecides: a sliced pool grants within share up to the
// slice's reservation, borrowers up to the slice's capacity, and queues
// the rest; the record keeps the slice; nil gives the whole pool back.
func TestSetSliceDecides(t *testing.T) {
	now := time.Unix(0, 0)
	p := slicePool(t)
	s := Slice{Capacity: 4, KVTokens: 400, Reserved: []int{2, 1, 0}, ReservedTokens: []int64{200, 100, 0}}
	p.SetSlice(&s)
	verify(t, p)
	if got, ok := p.Slice(); !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("Slice() = %+v, %v, want %+v, true", got, ok, s)
	}
	var out []string
	for id, team := range []string{"a", "a", "a", "b", "c", "a"} {
		g, _, o := p.Arrive(now, Request{Holder: 1, ID: uint64(id), Team: team, Tokens: 50})
		out = append(out, fmt.Sprintf("%s:%v/%v", team, o, g.Borrowing))
		verify(t, p)
	}
	want := []string{"a:granted/false", "a:granted/false", "a:granted/true", "b:granted/false", "c:queued/false", "a:queued/false"}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("Arrive under slice %+v = %v, want %v", s, out, want)
	}
	demand, used := p.Report()
	if wantD := []int{4, 1, 1}; !reflect.DeepEqual(demand, wantD) {
		t.Errorf("Report() demand = %v, want %v", demand, wantD)
	}
	wantU := Slice{Capacity: 4, KVTokens: 200, Reserved: []int{2, 1, 0}, ReservedTokens: []int64{100, 50, 0}}
	if !reflect.DeepEqual(used, wantU) {
		t.Errorf("Report() used = %+v, want %+v", used, wantU)
	}

	// The record carries the slice.
	rec, _ := p.AppendBinary(nil)
	var q Pool
	if err := q.UnmarshalBinary(rec); err != nil {
		t.Fatal(err)
	}
	verify(t, &q)
	if got, ok := q.Slice(); !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded Slice() = %+v, %v, want %+v", got, ok, s)
	}

	// Back to the whole pool: the waiting requests go.
	p.SetSlice(nil)
	verify(t, p)
	if _, ok := p.Slice(); ok || p.Capacity() != 20 || !reflect.DeepEqual(p.Reserved(), map[string]int{"a": 10, "b": 6, "c": 2}) {
		t.Fatalf("after SetSlice(nil): capacity %d reserved %v, want the whole pool", p.Capacity(), p.Reserved())
	}
	if _, _, st := p.Dispatch(now, 1); st != Dispatched {
		t.Fatalf("Dispatch after SetSlice(nil) = %v, want dispatched", st)
	}
}

func TestSetSliceClamps(t *testing.T) {
	p := slicePool(t)
	// Beyond the pool, and reservations beyond the slice's capacity: cut
	// in proportion (15, 6, 2 into 20: 13.04, 5.22, 1.74, the unit left
	// to the largest remainder, c's).
	p.SetSlice(&Slice{Capacity: 99, KVTokens: 99999, Reserved: []int{15, 6, 2, 7}, ReservedTokens: []int64{-5, 600, 200}})
	verify(t, p)
	got, _ := p.Slice()
	want := Slice{Capacity: 20, KVTokens: 2000, Reserved: []int{13, 5, 2}, ReservedTokens: []int64{0, 600, 200}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Slice() = %+v, want %+v", got, want)
	}
}

// TestSetSliceReconfigure: a new configuration keeps the slice, each
// reservation with its team; a new team has none until the next slice.
func TestSetSliceReconfigure(t *testing.T) {
	p := slicePool(t)
	p.SetSlice(&Slice{Capacity: 6, KVTokens: 600, Reserved: []int{3, 2, 1}, ReservedTokens: []int64{300, 200, 100}})
	p.Reconfigure(time.Unix(1, 0), Config{Capacity: 20, KVTokens: 2000, QueueLimit: 50, Teams: []TeamConfig{
		{Name: "d", Share: 0.2}, {Name: "b", Share: 0.3}, {Name: "a", Share: 0.5},
	}})
	verify(t, p)
	got, ok := p.Slice()
	want := Slice{Capacity: 6, KVTokens: 600, Reserved: []int{0, 2, 3}, ReservedTokens: []int64{0, 200, 300}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Slice() after Reconfigure = %+v, %v, want %+v", got, ok, want)
	}
}

// TestLoansDecide: a loan (SetLoans) lets the team's own requests run
// within share beyond the slice's reservation, queued ones too once the
// team has room, and adds nothing for borrowers: they are held once the
// replica's requests in flight, the lent ones included, fill its slice;
// a held request goes within share once its team has a loan free. The
// record keeps the loans; a nil slice clears them.
func TestLoansDecide(t *testing.T) {
	now := time.Unix(0, 0)
	p := slicePool(t)
	s := Slice{Capacity: 3, KVTokens: 300, Reserved: []int{1, 0, 0}, ReservedTokens: []int64{100, 0, 0}}
	p.SetSlice(&s)
	p.SetLoans([]int{0, 2}, []int64{0, 200})
	verify(t, p)
	var out []string
	for id, team := range []string{"b", "b", "b", "a", "c"} {
		g, _, o := p.Arrive(now, Request{Holder: 1, ID: uint64(id), Team: team, Tokens: 50})
		out = append(out, fmt.Sprintf("%s:%v/%v", team, o, g.Borrowing))
		verify(t, p)
	}
	// b: two within share on its loan (slice reservation 0), its third
	// borrows (the slice's capacity 3 has room); a within its slice; c
	// borrows: held, the slice is full (b's lent requests count).
	want := []string{"b:granted/false", "b:granted/false", "b:granted/true", "a:granted/false", "c:queued/false"}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("Arrive under slice %+v and loans b 2 = %v, want %v", s, out, want)
	}
	if _, used := p.Report(); used.Reserved[1] != 2 {
		t.Errorf("Report() counts %d of b's requests within share, want its 2 lent", used.Reserved[1])
	}
	if st := stat(t, p, now, "b"); st.Lent != 2 || st.Reserved != 0 {
		t.Errorf("b's snapshot: reserved %d, lent %d; want 0 and 2", st.Reserved, st.Lent)
	}
	// c's held request: the next sync finds c below its reservation
	// across the pool and lends it one; the request is dispatched within
	// share, though the slice is still full.
	p.SetLoans([]int{0, 2, 1}, []int64{0, 200, 100})
	g, _, st := p.Dispatch(now, 1)
	if st != Dispatched || g.Team != "c" || g.Borrowing {
		t.Fatalf("Dispatch after c's loan = %v, team %q, borrowing %v; want c dispatched within share", st, g.Team, g.Borrowing)
	}
	verify(t, p)
	b, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	q := new(Pool)
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if seq, tok := q.LoansApplied(); !reflect.DeepEqual(seq, []int{0, 2, 1}) || !reflect.DeepEqual(tok, []int64{0, 200, 100}) {
		t.Errorf("decoded loans %v %v, want [0 2 1] [0 200 100]", seq, tok)
	}
	p.SetSlice(nil)
	if seq, _ := p.LoansApplied(); !reflect.DeepEqual(seq, []int{0, 0, 0}) {
		t.Errorf("loans after SetSlice(nil) = %v, want none", seq)
	}
	verify(t, p)
}

// TestTokenLoanDecides: a seat of the slice whose tokens are cut below
// what the team's next request needs sends that request borrowing
// tokens (its team's borrowing priority); a token loan alone, no
// sequence lent, makes it within share, and takes no sequence beyond
// the slice.
func TestTokenLoanDecides(t *testing.T) {
	now := time.Unix(0, 0)
	for _, loan := range []int64{0, 200} {
		p := slicePool(t)
		s := Slice{Capacity: 3, KVTokens: 300, Reserved: []int{2, 0, 0}, ReservedTokens: []int64{60, 0, 0}}
		p.SetSlice(&s)
		p.SetLoans(nil, []int64{loan, 0, 0})
		var got []string
		for id := range 3 {
			g, _, o := p.Arrive(now, Request{Holder: 1, ID: uint64(id), Team: "a", Tokens: 50})
			got = append(got, fmt.Sprintf("%v/%v/%v/%d", o, g.Borrowing, g.BorrowsTokens, g.Priority))
			verify(t, p)
		}
		// The first runs within share whatever its tokens (nothing of a's
		// is within share yet); the second needs 100 of a's 60 tokens:
		// borrowing tokens without the loan, within share with it. The
		// third is beyond a's two seats: it borrows either way.
		want := []string{"granted/false/false/0", "granted/false/true/10", "granted/true/false/10"}
		if loan > 0 {
			want[1] = "granted/false/false/0"
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("token loan %d: Arrive = %v, want %v", loan, got, want)
		}
		if st := stat(t, p, now, "a"); st.Lent != 0 {
			t.Errorf("token loan %d: a's sequence loan %d, want 0", loan, st.Lent)
		}
	}
}
