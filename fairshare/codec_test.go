package fairshare

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// bigPool builds a pool of n teams and h holders, each holder with
// requests of three teams, every team with usage, some with phantoms.
func bigPool(n, h int) *Pool {
	cfg := Config{Capacity: 4 * n, HalfLife: time.Hour, EntryPenalty: true,
		HolderTimeout: 5 * time.Second, RequestTimeout: 10 * time.Minute}
	for i := range n {
		cfg.Teams = append(cfg.Teams, TeamConfig{Name: fmt.Sprintf("team-%03d", i), Share: 1 / float64(n)})
	}
	p := NewPool("llama-3-8b", cfg, base)
	for i := range n {
		p.Charge(base, cfg.Teams[i].Name, float64(i)*1.7+0.3)
	}
	for k := range h {
		id := uint32(k)*2654435761 + 12345
		for j := range 3 {
			p.Acquire(at(time.Duration(k)*time.Millisecond), id, cfg.Teams[(k*7+j*13)%n].Name, Class(j%2), 1.5)
		}
	}
	for i := 0; i < n; i += 10 {
		p.AddPhantoms(at(time.Second), cfg.Teams[i].Name, 2, at(time.Minute))
	}
	return p
}

// encWork is the record of workPools()'s first pool after mod.
func encWork(mod func(p *Pool)) []byte {
	p := workPools()[0]
	mod(p)
	p.invalidate()
	b, _ := p.AppendBinary(nil)
	return b
}

// workPools returns pools whose records carry the work resource: a pool
// of 32 teams with KV tokens and work, every team in debt, 128 requests
// in flight and 64 waiting with work demands; and the same pool sliced,
// with loans.
func workPools() []*Pool {
	mk := func() *Pool {
		p := queuePool(32, 64)
		cfg := p.config()
		cfg.Throughput, cfg.ThroughputBurst = 32000, 5*time.Second
		p.Reconfigure(at(time.Second), cfg)
		for i := range p.configured {
			p.teams[i].debt = float64(i+1) * 1.25
		}
		for k := range p.waits {
			p.waits[k].work = int64(300 + k)
		}
		return p
	}
	p, s := mk(), mk()
	tot := s.Totals()
	sl := tot.Whole
	sl.Capacity /= 2
	for i := range sl.Reserved {
		sl.Reserved[i] /= 2
	}
	s.SetSlice(&sl)
	s.SetLoans([]int{1, 2}, nil)
	// A slice of agreed totals on a record configured with a ceiling (a
	// fleet pool's), its rates following them (SetSliceOf).
	f := mk()
	cfg := f.config()
	cfg.Capacity, cfg.Throughput = 1<<20, 1<<40
	f.Reconfigure(at(2*time.Second), cfg)
	agreed := mk().Totals()
	agreed.Throughput = 48000
	fs := agreed.Whole
	fs.Capacity /= 3
	for i := range fs.Reserved {
		fs.Reserved[i] /= 3
	}
	f.SetSliceOf(agreed, &fs)
	f.SetLoans([]int{1, 2}, nil)
	return []*Pool{p, s, f}
}

// TestRecordSize: a pool of 100 teams and 64 holders encodes under 8 KiB;
// with flow control, every waiting request (a request id below 2^14, an
// estimate, a token demand below 2^21, arrivals 1 ms apart) takes at most
// 22 bytes, 24 with a work demand below 2^14; a team's debt takes 8.
func TestRecordSize(t *testing.T) {
	p := bigPool(100, 64)
	verify(t, p)
	b, _ := p.AppendBinary(nil)
	t.Logf("record of 100 teams, 64 holders (3 teams each), 10 phantom groups: %d bytes", len(b))
	if len(b) >= 8<<10 {
		t.Fatalf("record = %d bytes, want < 8 KiB", len(b))
	}
	q0 := queuePool(32, 0)
	r0, _ := q0.AppendBinary(nil)
	for _, w := range []int{64, 512} {
		q := queuePool(32, w)
		verify(t, q)
		r, _ := q.AppendBinary(nil)
		per := float64(len(r)-len(r0)) / float64(w)
		t.Logf("32 teams, 128 requests in flight with KV tokens, %d waiting: %d bytes (%d without the queue; %.1f bytes per waiting request)",
			w, len(r), len(r0), per)
		if per > 22 {
			t.Fatalf("%.1f bytes per waiting request, want at most 22", per)
		}
	}
	// The work resource: X and B in the static section, 8 bytes a debt,
	// 2 a work demand; nothing in a holder count or a phantom group.
	w := workPools()[0]
	verify(t, w)
	rw, _ := w.AppendBinary(nil)
	q := queuePool(32, 64)
	q.Reconfigure(at(time.Second), q.config()) // the same stamp as w's
	r, _ := q.AppendBinary(nil)
	t.Logf("the same with 64 waiting, X declared, 32 teams in debt, work demands of 300 to 363 units: %d bytes (%d without work)", len(rw), len(r))
	// X = 32000 twice (configured, live: 3 bytes each), B = 5 s (5
	// bytes).
	if want := len(r) + 11 + 8*32 + 2*64; len(rw) != want {
		t.Fatalf("record with work = %d bytes, want %d (%d + X, X, B + 8 per debt + 2 per work demand)", len(rw), want, len(r))
	}
}

// TestUnknownVersion: a record of any version but RecordVersion and
// version 6 (its subset) is refused, the earlier layouts' versions 1 to
// 5 included (the plugin keeps the version in the record's key, so it
// never reads one; see codec.go).
func TestUnknownVersion(t *testing.T) {
	good, _ := twoTeams(nil).AppendBinary(nil)
	for _, data := range [][]byte{nil, {}, {0}, {8}, append([]byte{99}, good[1:]...), append([]byte{8}, good[1:]...),
		append([]byte{1}, good[1:]...), append([]byte{2}, good[1:]...), append([]byte{3}, good[1:]...),
		append([]byte{4}, good[1:]...), append([]byte{5}, good[1:]...)} {
		var p Pool
		if err := p.UnmarshalBinary(data); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("UnmarshalBinary(% x) = %v, want ErrUnknownVersion", data, err)
		}
	}
}

// TestDecodeVersion6: a record version 6 wrote (the bytes of version 7
// without the slice's totals: version 7 writes them after its own
// version byte) decodes to the same pool; with flag bit 5, which version
// 6 never wrote, it still decodes, as version 7 reads it.
func TestDecodeVersion6(t *testing.T) {
	for _, p := range append(workPools(), twoTeams(nil), bigPool(8, 4)) {
		rec, _ := p.AppendBinary(nil)
		old := append([]byte{6}, rec[1:]...)
		var q Pool
		if err := q.UnmarshalBinary(old); err != nil {
			t.Fatalf("version-6 record: %v", err)
		}
		if a, b := dump(p), dump(&q); a != b {
			t.Errorf("version-6 record decodes to another pool:\n%s\n%s", a, b)
		}
		verify(t, &q)
	}
}

// TestDecodeMalformed: every truncation of a valid record, every single
// byte change and trailing garbage either decode to a valid pool or fail;
// none panics, and a failure leaves the pool empty and usable.
func TestDecodeMalformed(t *testing.T) {
	src := bigPool(8, 4)
	good, _ := src.AppendBinary(nil)
	var p Pool
	for n := range len(good) {
		if err := p.UnmarshalBinary(good[:n]); err == nil {
			t.Fatalf("UnmarshalBinary of %d of %d bytes succeeded", n, len(good))
		}
		if len(p.teams) != 0 || p.live[kindSeq] != 0 {
			t.Fatal("a failed decode left state behind")
		}
		verify(t, &p)
	}
	if err := p.UnmarshalBinary(append(append([]byte(nil), good...), 0)); err == nil {
		t.Fatal("UnmarshalBinary with a trailing byte succeeded")
	}
	for i := range good {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte(nil), good...)
			bad[i] ^= x
			if err := p.UnmarshalBinary(bad); err == nil {
				verify(t, &p)
			}
		}
	}
	g := p.Acquire(base, 1, "a", Interactive, 0)
	if !p.Release(base, &g, 1) {
		t.Fatal("pool unusable after a failed decode")
	}
}

// encQ returns the record of a small flow-control pool with two waiting
// requests, after mod; lenWait the length of its last waiting request
// when it is the only one.
func encQ(mod func(p *Pool)) []byte {
	p := queuePool(3, 2)
	mod(p)
	p.invalidate()
	b, _ := p.AppendBinary(nil)
	return b
}

func lenWait(rec []byte) int {
	var p Pool
	if err := p.UnmarshalBinary(rec); err != nil || len(p.waits) != 1 {
		panic("lenWait: want one waiting request")
	}
	q := p
	q.waits = nil
	q.invalidate()
	b, _ := q.AppendBinary(nil)
	return len(rec) - len(b)
}

func TestDecodeRejects(t *testing.T) {
	enc := func(mod func(p *Pool)) []byte {
		p := twoTeams(nil)
		p.Acquire(base, 1, "a", Interactive, 0)
		mod(p)
		b, _ := p.AppendBinary(nil)
		return b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"duplicate names", enc(func(p *Pool) { p.teams[1].name = "a" })},
		{"unknown team not last", enc(func(p *Pool) { p.teams[0].name = UnknownTeam; p.teams[0].configured = false; p.configured = 0 })},
		{"NaN usage", enc(func(p *Pool) { p.teams[0].usage = math.NaN() })},
		{"negative usage", enc(func(p *Pool) { p.teams[0].usage = -1 })},
		{"infinite share", enc(func(p *Pool) { p.teams[0].share = math.Inf(1) })},
		{"zero weight", enc(func(p *Pool) { p.teams[0].weight = 0 })},
		{"empty name", enc(func(p *Pool) { p.teams[1].name = "" })},
		{"infinite penalty", enc(func(p *Pool) { p.teams[0].penalty = math.Inf(1) })},
		{"epoch from the future", enc(func(p *Pool) { p.teams[0].epoch = 99 })},
		{"holder count of no team", enc(func(p *Pool) { p.holders[0].counts[0].team = 5 })},
		{"empty holder count", enc(func(p *Pool) { p.holders[0].counts[0].within[kindSeq] = 0 })},
		{"removed team with nothing in flight", enc(func(p *Pool) { p.teams[1].configured = false; p.configured = 1; p.teams[1].share = 0 })},
		{"huge team count", append([]byte{recordVersion, 0}, bytes.Repeat([]byte{0xff}, 30)...)},
		{"waiting requests out of order", encQ(func(p *Pool) { p.waits[0], p.waits[1] = p.waits[1], p.waits[0] })},
		{"waiting request after the stamp", encQ(func(p *Pool) { p.waits[0].arrival = p.now + 1; p.waits = p.waits[:1] })},
		{"waiting request past its deadline", encQ(func(p *Pool) { p.waits[0].arrival = p.now - int64(time.Hour) })},
		{"waiting request of a removed team", encQ(func(p *Pool) {
			p.teams[2].configured, p.configured, p.teams[2].share = false, 2, 0
			p.teams[2].within[kindSeq], p.teams[2].pWithin[kindSeq] = 1, 0
			p.waits[0].team = 2
		})},
		{"waiting tokens above K", encQ(func(p *Pool) { p.waits[0].tokens = p.total[kindTok] + 1 })},
		{"waiting request of no holder", func() []byte {
			b := encQ(func(p *Pool) { p.waits = p.waits[:1] })
			// The last request's holder index is the byte after the count.
			return append(append([]byte(nil), b[:len(b)-lenWait(b)]...), append([]byte{0x7f}, b[len(b)-lenWait(b)+1:]...)...)
		}()},
		{"negative lending limit", encQ(func(p *Pool) { p.teams[0].lend = -0.5 })},
		{"debt without a work resource", enc(func(p *Pool) { p.teams[0].debt = 5 })},
		{"NaN debt", encWork(func(p *Pool) { p.teams[0].debt = math.NaN() })},
		{"infinite debt", encWork(func(p *Pool) { p.teams[0].debt = math.Inf(1) })},
		{"negative debt", encWork(func(p *Pool) { p.teams[0].debt = -1 })},
		{"work without a burst", encWork(func(p *Pool) { p.burst = 0 })},
		{"work demand above 2^40", encWork(func(p *Pool) { p.waits[0].work = maxWork + 1 })},
	}
	for _, tt := range tests {
		var p Pool
		if err := p.UnmarshalBinary(tt.data); err == nil || errors.Is(err, ErrUnknownVersion) {
			t.Errorf("%s: UnmarshalBinary = %v, want a corruption error", tt.name, err)
		}
	}
}

// TestDecodeAllocationBound: counts that claim more entries than the input
// could hold are refused before anything is allocated.
func TestDecodeAllocationBound(t *testing.T) {
	var empty Pool
	static := empty.appendStatic(nil)
	static = static[:len(static)-1] // drop "0 entries"
	for _, claim := range []uint64{1 << 20, 1 << 40, math.MaxUint64} {
		s := appendUvarint(append([]byte(nil), static...), claim)
		s = append(s, bytes.Repeat([]byte{0}, 64)...)
		data := appendUvarint([]byte{recordVersion}, uint64(len(s)))
		data = append(data, s...)
		data = append(data, 0, 0, 0) // stamp, usage time, no holders
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var q Pool
		err := q.UnmarshalBinary(data)
		runtime.ReadMemStats(&ms1)
		if err == nil {
			t.Fatalf("claim of %d teams decoded", claim)
		}
		if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > uint64(64*len(data)+4096) {
			t.Fatalf("claim of %d teams allocated %d bytes for a %d-byte input", claim, alloc, len(data))
		}
	}
	// The same for holders and their counts.
	p := twoTeams(nil)
	good, _ := p.AppendBinary(nil)
	for _, claim := range []uint64{1 << 20, math.MaxUint64} {
		data := appendUvarint(append([]byte(nil), good[:len(good)-1]...), claim)
		var q Pool
		if err := q.UnmarshalBinary(data); err == nil {
			t.Fatalf("claim of %d holders decoded", claim)
		}
	}
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestDecodeReusesMemory: decoding a record whose names are unchanged into
// a reused pool allocates nothing, and neither does encoding into a reused
// buffer. Two records alternate, so every decode is a full one.
func TestDecodeReusesMemory(t *testing.T) {
	src := bigPool(32, 16)
	rec, _ := src.AppendBinary(nil)
	src.Heartbeat(at(time.Minute), 7)
	rec2, _ := src.AppendBinary(nil)
	var p Pool
	if err := p.UnmarshalBinary(rec); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 2*len(rec2))
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		in := rec
		if i++; i&1 == 0 {
			in = rec2
		}
		if err := p.UnmarshalBinary(in); err != nil {
			t.Fatal(err)
		}
		buf, _ = p.AppendBinary(buf[:0])
		if !bytes.Equal(buf, in) {
			t.Fatal("re-encoding differs from the record")
		}
	})
	if allocs != 0 {
		t.Fatalf("decode + encode allocates %v times, want 0", allocs)
	}
	// The same with flow control: tokens, limits and 512 waiting.
	qp := queuePool(32, 512)
	q1, _ := qp.AppendBinary(nil)
	qp.Heartbeat(at(time.Second), 12345)
	q2, _ := qp.AppendBinary(nil)
	var q Pool
	if err := q.UnmarshalBinary(q1); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, 0, 2*len(q2))
	allocs = testing.AllocsPerRun(100, func() {
		in := q1
		if i++; i&1 == 0 {
			in = q2
		}
		if err := q.UnmarshalBinary(in); err != nil {
			t.Fatal(err)
		}
		buf, _ = q.AppendBinary(buf[:0])
		if !bytes.Equal(buf, in) {
			t.Fatal("re-encoding differs from the record")
		}
	})
	if allocs != 0 {
		t.Fatalf("decode + encode of a queue allocates %v times, want 0", allocs)
	}
}

func TestRoundTripKeepsEverything(t *testing.T) {
	p := bigPool(10, 5)
	p.SetCapacity(17)
	p.Acquire(base, 3, "outsider", Batch, 4)
	b, _ := p.AppendBinary(nil)
	var q Pool
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if dump(p) != dump(&q) {
		t.Fatalf("round trip:\n%s\n%s", dump(p), dump(&q))
	}
	if q.name != "llama-3-8b" || q.Capacity() != 17 || q.config().Capacity != 40 || q.Fingerprint() != p.config().Fingerprint() {
		t.Fatalf("decoded name %q capacity %d config %+v", q.name, q.Capacity(), q.config())
	}
}

func FuzzDecode(f *testing.F) {
	seed, _ := bigPool(8, 4).AppendBinary(nil)
	for _, p := range []*Pool{twoTeams(nil), bigPool(8, 4), bigPool(3, 2), {}} {
		b, _ := p.AppendBinary(nil)
		f.Add(b)
	}
	limited := queuePool(4, 6)
	cfg := limited.config()
	cfg.Teams[0].LendingLimit, cfg.Teams[1].BorrowingLimit = Limit(0.5), Limit(0.25)
	limited.Reconfigure(at(time.Second), cfg)
	for _, p := range []*Pool{queuePool(3, 5), limited} {
		b, _ := p.AppendBinary(nil)
		f.Add(b)
	}
	// Version 5's resource list: every kind declared, in a slice with
	// loans, phantoms and holder counts carrying tokens; and the same
	// pool with KV tokens turned off (sequences alone).
	for _, p := range kindPools() {
		b, _ := p.AppendBinary(nil)
		f.Add(b)
	}
	// The work resource: debts, work demands, a slice's rates and loans.
	for _, p := range workPools() {
		b, _ := p.AppendBinary(nil)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, seed, data) })
}

// checkDecode is the property FuzzDecode and FuzzDecodeUsers check of a
// record data: it decodes as it does into a pool that decoded seed
// before, and a pool it decodes into is consistent (every invariant,
// the record round trip) and stays so under operations.
func checkDecode(t *testing.T, seed, data []byte) {
	{
		var p Pool
		err := p.UnmarshalBinary(data)
		// A pool that decoded another record before (its static section
		// cached) decodes data the same way.
		var r Pool
		r.UnmarshalBinary(seed)
		errR := r.UnmarshalBinary(data)
		if (err == nil) != (errR == nil) || err == nil && dump(&p) != dump(&r) {
			t.Fatalf("fresh decode: %v, reused decode: %v\n%s\n%s", err, errR, dump(&p), dump(&r))
		}
		if err != nil {
			return
		}
		verify(t, &p) // includes encode∘decode round trip
		// The static section declares the kinds the pool has, and a
		// record's per-kind values are those of its declared kinds.
		if d := p.declared(); !d.has(kindSeq) || d.has(kindTok) != (p.KVTokens() > 0) || d.has(kindWork) != (p.Throughput() > 0) {
			t.Fatalf("declared kinds %b with K = %d, X = %d", d, p.KVTokens(), p.Throughput())
		}
		// A decoded pool stays consistent under operations.
		g := p.Acquire(time.Unix(0, p.now), 1, "x", Interactive, 1)
		verify(t, &p)
		p.Release(time.Unix(0, p.now), &g, 1)
		verify(t, &p)
		g, _, _ = p.Arrive(time.Unix(0, p.now), Request{Holder: 2, ID: 1, Team: "x", Tokens: 10})
		verify(t, &p)
		p.Release(time.Unix(0, p.now), &g, 1)
		for {
			g, _, st := p.Dispatch(time.Unix(0, p.now), 2)
			verify(t, &p)
			if st != Dispatched {
				break
			}
			p.Release(time.Unix(0, p.now), &g, 1)
		}
		// And under a request of a user of a configured team.
		if p.configured > 0 {
			g, _, out := p.Arrive(time.Unix(0, p.now), Request{Holder: 3, ID: 1, Team: p.teams[0].name, User: "fuzz", Tokens: 5})
			verify(t, &p)
			if out == Granted {
				p.Release(time.Unix(0, p.now), &g, 2)
				verify(t, &p)
			}
		}
	}
}

// kindPools returns pools whose records exercise every part of version
// 5's per-kind encoding: a sliced pool of both kinds with loans, phantoms
// and holder counts carrying tokens and waiting token demands, and the
// same pool after a Reconfigure that removed its KV resource.
func kindPools() []*Pool {
	p := queuePool(3, 4)
	tot := p.Totals()
	s := tot.Whole
	s.Capacity, s.KVTokens = s.Capacity-2, s.KVTokens-500
	s.Reserved[0]--
	s.ReservedTokens[1] -= 300
	p.SetSlice(&s)
	p.SetLoans([]int{1, 2, 0}, []int64{700, 0, 1})
	p.AddPhantoms(at(2*time.Second), "team-000", 1, at(time.Minute))
	// A holder presumed dead: its counts, tokens included, become
	// phantoms.
	p.Heartbeat(at(2*time.Minute), 1)
	off := queuePool(3, 4)
	cfg := off.config()
	cfg.KVTokens = 0
	off.Reconfigure(at(time.Second), cfg)
	return []*Pool{p, off}
}

// TestKindsRecord: version 5 writes one value per declared kind, so a
// pool without a KV resource writes no token anywhere (its record is the
// same pool's with K > 0 less the tokens), and the sliced pool of both
// kinds round-trips with its loans and phantoms' tokens.
func TestKindsRecord(t *testing.T) {
	ps := kindPools()
	for _, p := range ps {
		verify(t, p)
	}
	kv, off := ps[0], ps[1]
	if !kv.sliced || kv.teams[0].lent[kindTok] != 700 || kv.teams[0].pWithin[kindTok]+kv.teams[0].pBorrowing[kindTok] == 0 {
		t.Fatalf("kindPools: the sliced pool lacks loans or phantom tokens:\n%s", dump(kv))
	}
	if d := off.declared(); d.has(kindTok) {
		t.Fatalf("declared() = %b after KVTokens 0", d)
	}
	for i := range off.teams {
		if u := off.teams[i].use(); u[kindTok] != 0 {
			t.Fatalf("entry %q keeps %d tokens in flight without a KV resource", off.teams[i].name, u[kindTok])
		}
	}
	b, _ := off.AppendBinary(nil)
	// The same pool with a token in one count would need the count's
	// amount bit; without a declared kind after sequences that bit is
	// corrupt.
	var q Pool
	if err := q.UnmarshalBinary(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	q.holders[0].counts[0].within[kindTok] = 5
	q.invalidate()
	bad, _ := q.AppendBinary(nil)
	if err := new(Pool).UnmarshalBinary(bad); err == nil {
		t.Fatalf("a record with tokens on a pool without a KV resource decoded")
	}
}

// TestDecoderUvarint: the decoder's varint reader agrees with
// encoding/binary on every input, overflow and truncation included.
func TestDecoderUvarint(t *testing.T) {
	inputs := [][]byte{
		{}, {0}, {1}, {0x7f}, {0x80}, {0x80, 0}, {0xff, 0x7f},
		bytes.Repeat([]byte{0xff}, 9), append(bytes.Repeat([]byte{0xff}, 9), 1), append(bytes.Repeat([]byte{0xff}, 9), 2),
		bytes.Repeat([]byte{0x80}, 11), append(bytes.Repeat([]byte{0x80}, 9), 0x80, 0),
	}
	for v := uint64(1); v != 0; v <<= 3 {
		inputs = append(inputs, binary.AppendUvarint(nil, v), binary.AppendUvarint(nil, v-1))
	}
	for _, in := range inputs {
		want, n := binary.Uvarint(in)
		d := decoder{b: in}
		got := d.uvarint()
		if n <= 0 {
			if d.err == nil {
				t.Errorf("uvarint(% x) = %d, want an error", in, got)
			}
			continue
		}
		if d.err != nil || got != want || d.off != n {
			t.Errorf("uvarint(% x) = %d (read %d, err %v), want %d (read %d)", in, got, d.off, d.err, want, n)
		}
	}
}

// TestDecodeOwnRecord: decoding the record a pool encoded last, when
// nothing changed it since, leaves it exactly as a fresh decode would;
// after any operation the same bytes decode in full, back to the record.
func TestDecodeOwnRecord(t *testing.T) {
	later := at(3 * time.Second)
	cfg := bigPool(8, 4).config()
	cfg.Teams = cfg.Teams[1:]
	ops := []struct {
		name string
		op   func(p *Pool, g *Grant)
	}{
		{"Acquire", func(p *Pool, g *Grant) { p.Acquire(later, 7, "team-001", Interactive, 1) }},
		{"TryAcquire", func(p *Pool, g *Grant) { p.TryAcquire(later, 7, "team-001", Batch, 1) }},
		{"Release", func(p *Pool, g *Grant) { p.Release(later, g, 1) }},
		{"Charge", func(p *Pool, g *Grant) { p.Charge(later, "team-004", 3) }},
		{"SetUsage", func(p *Pool, g *Grant) { p.SetUsage(later, "team-004", 3) }},
		{"Usage", func(p *Pool, g *Grant) { p.Usage(later) }},
		{"Snapshot", func(p *Pool, g *Grant) { p.Snapshot(later) }},
		{"Heartbeat", func(p *Pool, g *Grant) { p.Heartbeat(later, 5) }},
		{"AddPhantoms", func(p *Pool, g *Grant) { p.AddPhantoms(later, "team-001", 1, at(time.Hour)) }},
		{"Reconfigure", func(p *Pool, g *Grant) { p.Reconfigure(later, cfg) }},
		{"SetCapacity", func(p *Pool, g *Grant) { p.SetCapacity(99) }},
		{"Arrive", func(p *Pool, g *Grant) { p.Arrive(later, Request{Holder: 7, ID: 1, Team: "team-001", Tokens: 5}) }},
		{"Dispatch", func(p *Pool, g *Grant) { p.Dispatch(later, 5) }},
		{"Next", func(p *Pool, g *Grant) { p.Next(later) }},
		{"Cancel", func(p *Pool, g *Grant) { p.Cancel(later, 5, 1) }},
	}
	for _, tt := range ops {
		p := bigPool(8, 4)
		g := p.Acquire(at(2*time.Second), 5, "team-003", Batch, 2)
		rec, _ := p.AppendBinary(nil)
		var fresh Pool
		if err := fresh.UnmarshalBinary(rec); err != nil {
			t.Fatal(err)
		}
		want := dump(&fresh)
		if err := p.UnmarshalBinary(rec); err != nil || dump(p) != want {
			t.Fatalf("%s: own record decodes to %v\n%s\nwant\n%s", tt.name, err, dump(p), want)
		}
		tt.op(p, &g)
		if dump(p) == want {
			t.Fatalf("%s changed nothing", tt.name)
		}
		if err := p.UnmarshalBinary(rec); err != nil || dump(p) != want {
			t.Fatalf("%s: the record decodes to %v\n%s\nwant\n%s", tt.name, err, dump(p), want)
		}
		verify(t, p)
	}
}

// TestBatchAgingStaysLocal: the batch aging is not in the record, so a VM
// of a layout that does not know it reads the record of one that uses it:
// pools that differ only in it encode to the same bytes and fingerprint,
// and a record decoded into a pool keeps that pool's aging.
func TestBatchAgingStaysLocal(t *testing.T) {
	cfg := Config{Capacity: 4, Teams: []TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		QueueLimit: 8, MaxQueueTime: time.Minute}
	aged := cfg
	aged.BatchAging = 2 * time.Second
	if cfg.Fingerprint() != aged.Fingerprint() {
		t.Errorf("Fingerprint changes with BatchAging")
	}
	p, q := NewPool("p", cfg, base), NewPool("p", aged, base)
	for _, x := range []*Pool{p, q} {
		for i := range 6 {
			x.Arrive(base, Request{Holder: 1, ID: uint64(i + 1), Team: "a", Class: Class(i % 2)})
		}
	}
	bp, _ := p.AppendBinary(nil)
	bq, _ := q.AppendBinary(nil)
	if !bytes.Equal(bp, bq) {
		t.Fatalf("records differ with BatchAging:\n%x\n%x", bp, bq)
	}
	if err := q.UnmarshalBinary(bp); err != nil {
		t.Fatal(err)
	}
	if got := q.config().BatchAging; got != 2*time.Second {
		t.Errorf("BatchAging after decoding = %v, want the pool's own 2s", got)
	}
	q.SetBatchAging(-time.Second)
	if got := q.config().BatchAging; got != 0 {
		t.Errorf("SetBatchAging(-1s): BatchAging = %v, want 0", got)
	}
}

// TestDecodeFastMatchesGeneral: the fast paths of decoding (holders,
// entries' fixed-width fields) decode every record, valid or with bytes
// changed at random, exactly as the general path: the same error, or the
// same pool.
func TestDecodeFastMatchesGeneral(t *testing.T) {
	tokens := queuePool(3, 5)
	for i := range 4 {
		tokens.Arrive(at(time.Second), Request{Holder: uint32(7 + i), ID: uint64(100 + i), Team: "team-000", Tokens: 300, Estimate: 1})
	}
	var recs [][]byte
	for _, p := range []*Pool{bigPool(8, 4), bigPool(32, 16), bigPool(200, 40), queuePool(3, 5), tokens} {
		b, _ := p.AppendBinary(nil)
		recs = append(recs, b)
	}
	// Into a pool that decoded rec first, as a worker's does (the fast
	// paths need its buffers).
	decode := func(rec, data []byte, slow bool) (*Pool, error) {
		slowDecode = slow
		defer func() { slowDecode = false }()
		var p Pool
		if err := p.UnmarshalBinary(rec); err != nil {
			t.Fatal(err)
		}
		return &p, p.UnmarshalBinary(data)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	checked, fails := 0, 0
	for _, rec := range recs {
		for trial := range 3000 {
			data := slices.Clone(rec)
			for range trial % 4 {
				// Half in the holders, near the end of the record.
				i := rng.IntN(len(data))
				if rng.IntN(2) == 0 {
					i = len(data) - 1 - rng.IntN(min(len(data), 600))
				}
				switch rng.IntN(3) {
				case 0:
					data[i] ^= byte(1) << rng.IntN(8)
				case 1:
					data[i] = byte(rng.IntN(256))
				default:
					// Repeat the four bytes before i (a count, when
					// aligned on one).
					if i >= 4 && i+4 <= len(data) {
						copy(data[i:i+4], data[i-4:i])
					}
				}
			}
			fast, err := decode(rec, data, false)
			slow, errS := decode(rec, data, true)
			if err != errS || err == nil && (dump(fast) != dump(slow) || fast.genMin != slow.genMin) {
				t.Fatalf("fast path: %v, general: %v\n%s\n%s", err, errS, dump(fast), dump(slow))
			}
			checked++
			if err != nil {
				fails++
			}
		}
	}
	if fails == 0 || fails == checked {
		t.Fatalf("%d of %d records failed to decode: the mutations test nothing", fails, checked)
	}
}

// TestEqualWordsMatchesBytesEqual: equalWords (equalBytes in Wasm) agrees
// with bytes.Equal on random pairs, equal or differing in one byte
// anywhere, of every length up to 40.
func TestEqualWordsMatchesBytesEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 20000 {
		a := make([]byte, rng.IntN(41))
		for i := range a {
			a[i] = byte(rng.IntN(3))
		}
		b := slices.Clone(a)
		switch trial % 3 {
		case 1:
			if len(b) > 0 {
				b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			}
		case 2:
			b = b[:rng.IntN(len(b)+1)]
		}
		if got, want := equalWords(a, b), bytes.Equal(a, b); got != want || equalBytes(a, b) != want {
			t.Fatalf("%x vs %x: equalWords %v, bytes.Equal %v", a, b, got, want)
		}
	}
}
