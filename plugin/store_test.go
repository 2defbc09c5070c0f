package plugin

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// envoyStore is an in-memory shared-data store with Envoy's semantics
// (proxy-wasm-cpp-host src/shared_data.cc): one global cas counter starting at 1 and
// skipping 0, cas 0 unconditional on an existing key, a missing key always
// settable. proxytest switches to the SDK emulator's semantics instead:
// per-key cas+1 and cas 0 on an existing key a mismatch.
type envoyStore struct {
	mu        sync.Mutex
	m         map[string]envoyValue
	next      uint32
	proxytest bool
	sets      int
}

type envoyValue struct {
	v   []byte
	cas uint32
}

func newEnvoyStore() *envoyStore { return &envoyStore{m: map[string]envoyValue{}, next: 1} }

func (s *envoyStore) GetSharedData(key string) ([]byte, uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, 0, types.ErrorStatusNotFound
	}
	return append([]byte(nil), v.v...), v.cas, nil
}

func (s *envoyStore) SetSharedData(key string, value []byte, cas uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.m[key]
	if s.proxytest {
		if ok && prev.cas != cas {
			return types.ErrorStatusCasMismatch
		}
		s.m[key] = envoyValue{append([]byte(nil), value...), cas + 1}
		s.sets++
		return nil
	}
	if ok && cas != 0 && prev.cas != cas {
		return types.ErrorStatusCasMismatch
	}
	s.m[key] = envoyValue{append([]byte(nil), value...), s.next}
	s.next++
	if s.next == 0 {
		s.next = 1
	}
	s.sets++
	return nil
}

// hookStore runs hook before the n-th Set (1-based) it forwards.
type hookStore struct {
	sharedStore
	n, sets int
	hook    func()
}

func (h *hookStore) SetSharedData(key string, value []byte, cas uint32) error {
	h.sets++
	if h.sets == h.n && h.hook != nil {
		h.hook()
	}
	return h.sharedStore.SetSharedData(key, value, cas)
}

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func testCoreConfig(capacity int) fairshare.Config {
	return fairshare.Config{
		Capacity:       capacity,
		Teams:          []fairshare.TeamConfig{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.5}},
		HalfLife:       time.Hour,
		EntryPenalty:   true,
		HolderTimeout:  5 * time.Second,
		RequestTimeout: time.Minute,
	}
}

func newVM(st sharedStore, holder uint32, cfg fairshare.Config) (*records, *record) {
	rs := &records{st: st, holder: holder, sentinel: sentinelKey("test", holder), retries: 4}
	return rs, newRecord("test", "p", cfg)
}

// inFlight decodes the stored record and returns every team's in-flight
// count (phantoms included).
func inFlight(t *testing.T, st sharedStore, now time.Time) map[string]int {
	t.Helper()
	v, _, err := st.GetSharedData(recordKey("test", "p"))
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	var p fairshare.Pool
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatalf("decode record: %v", err)
	}
	out := map[string]int{}
	for _, s := range p.Snapshot(now) {
		out[s.Team] = s.InFlight + s.Phantoms
	}
	return out
}

func acquire(t *testing.T, rs *records, r *record, team string) fairshare.Grant {
	t.Helper()
	var g fairshare.Grant
	if _, err := rs.update(t0, r, func(p *fairshare.Pool) { g = p.Acquire(t0, rs.holder, team, fairshare.Interactive, 10) }); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return g
}

func TestUpdateCreatesMissingRecord(t *testing.T) {
	for _, proxytest := range []bool{false, true} {
		st := newEnvoyStore()
		st.proxytest = proxytest
		rs, r := newVM(st, 1, testCoreConfig(4))
		g := acquire(t, rs, r, "a")
		if g.Borrowing || g.Priority != 0 {
			t.Errorf("proxytest=%v: first request of a = %+v, want within share", proxytest, g)
		}
		if got := inFlight(t, st, t0)["a"]; got != 1 {
			t.Errorf("proxytest=%v: in flight a = %d, want 1", proxytest, got)
		}
	}
}

func TestCreateIfAbsentKeepsExistingRecord(t *testing.T) {
	st := newEnvoyStore()
	rsA, rA := newVM(st, 1, testCoreConfig(4))
	acquire(t, rsA, rA, "a")
	// VM B saw the record missing before A created it and now creates it:
	// the set must fail and A's request stay counted.
	rsB, rB := newVM(st, 2, testCoreConfig(4))
	if err := rsB.create(t0, rB); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := inFlight(t, st, t0)["a"]; got != 1 {
		t.Fatalf("after a racing create, in flight a = %d, want 1 (record overwritten)", got)
	}
	// Both VMs racing from an empty store: both see NotFound, A creates
	// and acquires between B's read and B's create.
	st = newEnvoyStore()
	hs := &hookStore{sharedStore: st, n: 1}
	rsA, rA = newVM(st, 1, testCoreConfig(4))
	rsB, rB = newVM(hs, 2, testCoreConfig(4))
	hs.hook = func() { acquire(t, rsA, rA, "a") } // before B's first set (its sentinel)
	acquire(t, rsB, rB, "b")
	if got := inFlight(t, st, t0); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("racing creation: in flight = %v, want a:1 b:1", got)
	}
}

func TestUpdateRetriesOnMismatch(t *testing.T) {
	st := newEnvoyStore()
	rsA, rA := newVM(st, 1, testCoreConfig(4))
	acquire(t, rsA, rA, "a")
	hs := &hookStore{sharedStore: st, n: 1}
	rsB, rB := newVM(hs, 2, testCoreConfig(4))
	hs.hook = func() { acquire(t, rsA, rA, "a") } // A writes between B's read and B's set
	var g fairshare.Grant
	retries, err := rsB.update(t0, rB, func(p *fairshare.Pool) { g = p.Acquire(t0, 2, "b", fairshare.Batch, 1) })
	if err != nil || retries != 1 {
		t.Fatalf("update = %d retries, %v; want 1, nil", retries, err)
	}
	if g.Priority != 1 || g.Holder != 2 {
		t.Errorf("grant = %+v, want within share batch of holder 2", g)
	}
	if got := inFlight(t, st, t0); got["a"] != 2 || got["b"] != 1 {
		t.Errorf("in flight = %v, want a:2 b:1", got)
	}
}

type failStore struct {
	*envoyStore
	setErr error
}

func (f failStore) SetSharedData(key string, value []byte, cas uint32) error {
	if key == recordKey("test", "p") {
		if _, _, err := f.envoyStore.GetSharedData(key); err == nil {
			return f.setErr
		}
	}
	return f.envoyStore.SetSharedData(key, value, cas)
}

func TestUpdateFailures(t *testing.T) {
	st := newEnvoyStore()
	rs0, r0 := newVM(st, 9, testCoreConfig(4))
	acquire(t, rs0, r0, "a")

	rs, r := newVM(failStore{st, types.ErrorStatusCasMismatch}, 1, testCoreConfig(4))
	retries, err := rs.update(t0, r, func(*fairshare.Pool) {})
	if !errors.Is(err, errRetriesExhausted) || retries != rs.retries {
		t.Errorf("always mismatching: update = %d, %v; want %d, errRetriesExhausted", retries, err, rs.retries)
	}
	rs, r = newVM(failStore{st, types.ErrorInternalFailure}, 1, testCoreConfig(4))
	if _, err := rs.update(t0, r, func(*fairshare.Pool) {}); !errors.Is(err, types.ErrorInternalFailure) {
		t.Errorf("failing store: update error = %v, want ErrorInternalFailure", err)
	}
}

func TestUpdateReconfigures(t *testing.T) {
	st := newEnvoyStore()
	rsA, rA := newVM(st, 1, testCoreConfig(4))
	gA := acquire(t, rsA, rA, "a")
	cfg2 := testCoreConfig(8)
	rsB, rB := newVM(st, 2, cfg2)
	acquire(t, rsB, rB, "a")
	v, _, _ := st.GetSharedData(recordKey("test", "p"))
	var p fairshare.Pool
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatal(err)
	}
	if p.Capacity() != 8 || p.Fingerprint() != cfg2.Fingerprint() {
		t.Errorf("after a VM with capacity 8: capacity %d, fingerprint match %v", p.Capacity(), p.Fingerprint() == cfg2.Fingerprint())
	}
	if got := inFlight(t, st, t0)["a"]; got != 2 {
		t.Errorf("in flight a = %d, want 2 (kept across reconfiguration)", got)
	}
	// A still runs the old configuration; releasing its grant works.
	if _, err := rsB.update(t0, rB, func(p *fairshare.Pool) { gc := gA; p.Release(t0, &gc, 5) }); err != nil {
		t.Fatal(err)
	}
	if got := inFlight(t, st, t0)["a"]; got != 1 {
		t.Errorf("in flight a after release = %d, want 1", got)
	}
}

func TestUnreadableRecordRebuilt(t *testing.T) {
	st := newEnvoyStore()
	if err := st.SetSharedData(recordKey("test", "p"), []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	rs, r := newVM(st, 1, testCoreConfig(4))
	var warned string
	rs.warn = func(s string) { warned = s }
	acquire(t, rs, r, "a")
	if warned == "" {
		t.Error("no warning for an unreadable record")
	}
	if got := inFlight(t, st, t0)["a"]; got != 1 {
		t.Errorf("in flight a = %d, want 1", got)
	}
}

// TestConcurrentVMs runs several VMs on real goroutines against one store:
// every acquire is matched by a release, so the record ends with nothing
// in flight and the usage of every consumption.
func TestConcurrentVMs(t *testing.T) {
	st := newEnvoyStore()
	const vms, reqs = 4, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	totalRetries := 0
	for v := 0; v < vms; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			rs, r := newVM(st, uint32(v+1), testCoreConfig(4))
			rs.retries = 1000
			team := []string{"a", "b"}[v%2]
			for i := 0; i < reqs; i++ {
				var g fairshare.Grant
				n, err := rs.update(t0, r, func(p *fairshare.Pool) { g = p.Acquire(t0, rs.holder, team, fairshare.Interactive, 1) })
				if err != nil {
					t.Error(err)
					return
				}
				m, err := rs.update(t0, r, func(p *fairshare.Pool) { gc := g; p.Release(t0, &gc, 1) })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				totalRetries += n + m
				mu.Unlock()
			}
		}(v)
	}
	wg.Wait()
	v, _, _ := st.GetSharedData(recordKey("test", "p"))
	var p fairshare.Pool
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, s := range p.Snapshot(t0) {
		if s.InFlight != 0 || s.Phantoms != 0 {
			t.Errorf("team %s in flight %d phantoms %d, want 0", s.Team, s.InFlight, s.Phantoms)
		}
		sum += s.Usage
	}
	if want := float64(vms * reqs); sum < want-1e-6 || sum > want+1e-6 {
		t.Errorf("usage sum = %v, want %v (no update lost)", sum, want)
	}
	t.Logf("%d VMs × %d requests: %d CAS retries", vms, reqs, totalRetries)
}

// TestConcurrentVMsUsers is TestConcurrentVMs with the user level: the
// VMs' requests name users of both teams (several users per VM, some
// shared between VMs) and the record ends with every user's counts at
// zero and the users' usage summing to their team's.
func TestConcurrentVMsUsers(t *testing.T) {
	st := newEnvoyStore()
	cfg := testCoreConfig(4)
	cfg.Users = true
	const vms, reqs = 4, 150
	var wg sync.WaitGroup
	for v := 0; v < vms; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			rs, r := newVM(st, uint32(v+1), cfg)
			rs.retries = 1000
			team := []string{"a", "b"}[v%2]
			var open []fairshare.Grant
			for i := 0; i < reqs; i++ {
				user := fmt.Sprintf("u%d", (v+i)%5)
				var g fairshare.Grant
				if _, err := rs.update(t0, r, func(p *fairshare.Pool) { g = p.AcquireUser(t0, rs.holder, team, user, fairshare.Interactive, 1) }); err != nil {
					t.Error(err)
					return
				}
				if g.User != user {
					t.Errorf("grant counted as user %q, want %q", g.User, user)
				}
				// Up to three in flight per VM, so that users go over
				// and borrow.
				if open = append(open, g); len(open) < 3 {
					continue
				}
				g, open = open[0], open[1:]
				if _, err := rs.update(t0, r, func(p *fairshare.Pool) { gc := g; p.Release(t0, &gc, 1) }); err != nil {
					t.Error(err)
					return
				}
			}
			for _, g := range open {
				if _, err := rs.update(t0, r, func(p *fairshare.Pool) { gc := g; p.Release(t0, &gc, 1) }); err != nil {
					t.Error(err)
				}
			}
		}(v)
	}
	wg.Wait()
	v, _, _ := st.GetSharedData(recordKey("test", "p"))
	var p fairshare.Pool
	if err := p.UnmarshalBinary(v); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Snapshot(t0) {
		usage := 0.0
		for _, u := range s.Users {
			if u.Within+u.Over+u.Borrowing+u.Waiting != 0 {
				t.Errorf("team %s user %s counts %+v after every release", s.Team, u.User, u)
			}
			usage += u.Usage
		}
		if s.InFlight != 0 || s.Phantoms != 0 || math.Abs(usage-s.Usage) > 1e-6 {
			t.Errorf("team %s in flight %d phantoms %d, users' usage %v of the team's %v", s.Team, s.InFlight, s.Phantoms, usage, s.Usage)
		}
		if s.Team != fairshare.UnknownTeam && s.Usage != float64(vms/2*reqs) {
			t.Errorf("team %s usage %v, want %d (no update lost)", s.Team, s.Usage, vms/2*reqs)
		}
	}
}

// TestOldGenerationDoesNotRevert: while a configuration change rolls out,
// VMs of the old configuration keep using the record without putting
// their configuration back; on equal start times the later start wins.
func TestOldGenerationDoesNotRevert(t *testing.T) {
	for _, startedB := range []int64{2, 1} {
		st := newEnvoyStore()
		rsA, rA := newVM(st, 1, testCoreConfig(4))
		rsA.plugin, rsA.gen = "test", generation{started: 1, fp: 100}
		if err := rsA.publish(); err != nil {
			t.Fatal(err)
		}
		gA := acquire(t, rsA, rA, "a")
		rsB, rB := newVM(st, 2, testCoreConfig(8))
		rsB.plugin, rsB.gen = "test", generation{started: startedB, fp: 200}
		if err := rsB.publish(); err != nil {
			t.Fatal(err)
		}
		acquire(t, rsB, rB, "b")
		if _, err := rsA.update(t0, rA, func(p *fairshare.Pool) { gc := gA; p.Release(t0, &gc, 1) }); err != nil {
			t.Fatal(err)
		}
		v, _, _ := st.GetSharedData(recordKey("test", "p"))
		var p fairshare.Pool
		if err := p.UnmarshalBinary(v); err != nil {
			t.Fatal(err)
		}
		if p.Capacity() != 8 {
			t.Errorf("B started at %d: capacity after the old VM's release = %d, want 8 (new configuration kept)", startedB, p.Capacity())
		}
		// A VM of the old configuration starting again does not take over.
		if startedB == 2 {
			rsC, _ := newVM(st, 3, testCoreConfig(4))
			rsC.plugin, rsC.gen = "test", generation{started: 1, fp: 100}
			if err := rsC.publish(); err != nil || rsC.current() {
				t.Errorf("an older generation became current (%v)", err)
			}
		}
	}
}
