package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// sharedStore is the proxy-wasm shared-data API the pool records live in,
// with Envoy's semantics: Get of a missing key returns
// types.ErrorStatusNotFound; Set of a missing key always succeeds; Set of an
// existing key with a cas other than the key's current one returns
// types.ErrorStatusCasMismatch (cas 0 is unconditional in Envoy, so the
// plugin never writes an existing key with cas 0).
type sharedStore interface {
	GetSharedData(key string) (value []byte, cas uint32, err error)
	SetSharedData(key string, value []byte, cas uint32) error
}

// sharedStoreInto is a sharedStore that can read a value into memory the
// caller lends (hostcalls.GetSharedDataInto), so that reading a record
// allocates nothing.
type sharedStoreInto interface {
	GetSharedDataInto(dst []byte, key string) (value []byte, cas uint32, err error)
}

// errRetriesExhausted reports that every compare-and-swap attempt lost
// against concurrent updates.
var errRetriesExhausted = errors.New("fairshare: compare-and-swap retries exhausted")

// recordKey is the shared-data key of a pool's record:
// "<plugin>/fairshare/pool/<pool>/v<record version>". Istio gives every
// plugin of a proxy one shared-data namespace, so keys are prefixed with the
// plugin's name. The record layout's version is part of the key so that,
// during a rolling upgrade across layouts, old and new VMs each keep their
// own record instead of resetting the other's as unreadable.
func recordKey(plugin, pool string) string {
	return plugin + "/fairshare/pool/" + pool + "/v" + strconv.Itoa(fairshare.RecordVersion)
}

// sentinelKey is the per-VM key written to obtain a cas value that no
// other key holds (see records.create).
func sentinelKey(plugin string, holder uint32) string {
	return plugin + "/fairshare/holder/" + strconv.FormatUint(uint64(holder), 16)
}

// record is this VM's handle on one pool's shared record: the key, the
// configuration this VM applies, and scratch memory reused by every update.
type record struct {
	name string
	key  string
	cfg  fairshare.Config
	fp   uint64
	// fleet, for a fleet pool (fleetcap.go), is the totals its slices
	// divide until the fleet agrees on them: the configured capacity,
	// kv_tokens and throughput (cfg is the ceiling); nil otherwise.
	fleet *fairshare.Totals
	p     *fairshare.Pool // decode target, reused
	buf   []byte          // encode buffer, reused
	rbuf  []byte          // read buffer, reused (get)
}

// get reads r's record, into r.rbuf's memory when the store can. The value
// is valid until the next get of r: update decodes it (the decoder keeps
// no reference to it) before anything else reads the record.
func (rs *records) get(r *record) ([]byte, uint32, error) {
	if !rs.asserted {
		// Once: an interface assertion looks its table up on every call.
		rs.into, _ = rs.st.(sharedStoreInto)
		rs.asserted = true
	}
	si := rs.into
	if si == nil {
		return rs.st.GetSharedData(r.key)
	}
	if r.rbuf == nil {
		r.rbuf = make([]byte, 0, recordReadBuffer)
	}
	v, cas, err := si.GetSharedDataInto(r.rbuf, r.key)
	if cap(v) > cap(r.rbuf) && cap(v) <= keepBuffer {
		r.rbuf = v[:0]
	}
	return v, cas, err
}

// recordReadBuffer is the first size of a record's read buffer: the size of
// the allocator's own arena, so that, as before, a record up to 64 KiB is
// never allocated inside proxy_on_memory_allocate (RATIONALE.md, the guest
// allocator); a larger one is, once, and its buffer is kept.
const recordReadBuffer = hostcalls.ArenaSize

// newRecord returns the handle of pool name with configuration cfg.
func newRecord(plugin, name string, cfg fairshare.Config) *record {
	return &record{name: name, key: recordKey(plugin, name), cfg: cfg, fp: cfg.Fingerprint(), p: new(fairshare.Pool)}
}

// records runs read–decide–compare-and-swap updates on pool records; the
// filter changes a record only through pluginContext.updatePool.
type records struct {
	st       sharedStore
	into     sharedStoreInto // st as a sharedStoreInto, or nil (set by get)
	asserted bool            // into is set
	holder   uint32
	sentinel string
	retries  int          // compare-and-swap retries allowed per update
	warn     func(string) // logs a warning (record rebuilt)
	// plugin and gen identify this VM's configuration generation (see
	// publish); with plugin "" every VM applies its configuration.
	plugin string
	gen    generation
	// sliced: the pools are shared with other proxies (the cluster
	// block): a new record starts with an empty slice and the first
	// loans, taken up at the first sync; without it a sliced record returns to the whole pool.
	sliced bool
}

// newPool returns a new pool of r's configuration, with an empty slice
// when the pools are shared.
func (rs *records) newPool(now time.Time, r *record) *fairshare.Pool {
	p := fairshare.NewPool(r.name, r.cfg, now)
	if rs.sliced {
		joinSlice(p, r.fleet)
	}
	return p
}

// joinSlice gives p what a replica decides against before its first
// sync: an empty slice and the first loans (fairshare.FirstLoans), of
// the totals fleet for a fleet pool (SetSliceOf: the loans' work follows
// them, not the record's ceiling), else of the record's.
func joinSlice(p *fairshare.Pool, fleet *fairshare.Totals) {
	if fleet != nil {
		p.SetSliceOf(*fleet, &fairshare.Slice{})
		seq, tok := fairshare.FirstLoans(*fleet)
		p.SetLoans(seq, tok)
		return
	}
	p.SetSlice(&fairshare.Slice{})
	seq, tok := fairshare.FirstLoans(p.Totals())
	p.SetLoans(seq, tok)
}

// reconcile applies this VM's configuration to a decoded record when it
// differs and this VM's generation is the newest: its pool configuration,
// and whether the pool is shared (sliced); and, always, this VM's batch
// aging, which the record does not keep.
func (rs *records) reconcile(now time.Time, r *record) {
	// The batch aging is this VM's, never the record's (see
	// fairshare.Config.BatchAging).
	r.p.SetBatchAging(r.cfg.BatchAging)
	fp, sliced := r.p.Fingerprint() != r.fp, r.p.Sliced() != rs.sliced
	if !fp && !sliced || !rs.current() {
		return
	}
	if fp {
		r.p.Reconfigure(now, r.cfg)
	}
	if sliced {
		if rs.sliced {
			joinSlice(r.p, r.fleet)
		} else {
			r.p.SetSlice(nil)
		}
	}
}

// spinSink keeps the backoff spin from being optimised away.
//
//lint:ignore U1000 written only, on purpose: it is the spin loop's side effect
var spinSink uint32

// backoff spins for a random, exponentially growing number of iterations:
// a Wasm callback cannot sleep, and a short random delay is enough to
// de-synchronise VMs on other threads that collided on the same record.
func backoff(attempt int) {
	if attempt > 8 {
		attempt = 8
	}
	n := rand.Uint32N(32 << attempt)
	for i := uint32(0); i < n; i++ {
		spinSink += i
	}
}

// load decodes r's record into r.p as stored, with this VM's configuration
// applied if it differs and is the newest (not written back). A missing record loads as a
// new pool. It returns the record's cas (0 when missing).
func (rs *records) load(now time.Time, r *record) (uint32, error) {
	v, cas, err := rs.st.GetSharedData(r.key)
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		r.p = rs.newPool(now, r)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("fairshare: get %s: %w", r.key, err)
	}
	if err := r.p.UnmarshalBinary(v); err != nil {
		if rs.warn != nil {
			rs.warn(fmt.Sprintf("fairshare: record %s unreadable (%v): rebuilt empty", r.key, err))
		}
		r.p = rs.newPool(now, r)
	} else {
		rs.reconcile(now, r)
	}
	return cas, nil
}

// update applies fn to the current state of r's record and writes it back
// with compare-and-swap: read (value, cas), decode, apply this VM's
// configuration if the record's differs and this VM's is the newest (see
// publish), apply fn, encode, set with that cas. On a mismatch it retries, after a short random spin, up to
// rs.retries times; a missing record is first created (create). fn may run
// once per attempt and must only change p and its own result variables,
// which the last (successful) run leaves behind. It returns the number of
// retries; err is errRetriesExhausted or a shared-data error.
func (rs *records) update(now time.Time, r *record, fn func(p *fairshare.Pool)) (retries int, err error) {
	created := false
	for attempt := 0; ; attempt++ {
		v, cas, gerr := rs.get(r)
		if gerr != nil && errors.Is(gerr, types.ErrorStatusNotFound) && !created {
			created = true
			if err := rs.create(now, r); err != nil {
				return retries, err
			}
			attempt--
			continue
		}
		if gerr != nil {
			return retries, fmt.Errorf("fairshare: get %s: %w", r.key, gerr)
		}
		if err := r.p.UnmarshalBinary(v); err != nil {
			if rs.warn != nil {
				rs.warn(fmt.Sprintf("fairshare: record %s unreadable (%v): rebuilt empty", r.key, err))
			}
			r.p = rs.newPool(now, r)
		} else {
			rs.reconcile(now, r)
		}
		fn(r.p)
		r.buf, err = r.p.AppendBinary(r.buf[:0])
		if err != nil {
			return retries, fmt.Errorf("fairshare: encode %s: %w", r.key, err)
		}
		serr := rs.st.SetSharedData(r.key, r.buf, cas)
		if serr == nil {
			return retries, nil
		}
		if !errors.Is(serr, types.ErrorStatusCasMismatch) {
			return retries, fmt.Errorf("fairshare: set %s: %w", r.key, serr)
		}
		if attempt >= rs.retries {
			return retries, errRetriesExhausted
		}
		retries++
		backoff(attempt)
	}
}

// updatePool is the one way the plugin changes a pool's record: it runs
// records.update with change (read the record, decode it, apply change,
// encode it, compare-and-swap it, retried on a lost swap) and its
// accounting, the same for every caller: the compare-and-swap retries
// counted in cas_retries_total, and a failure (a shared-data error, or
// every retry lost) counted in failures_total and logged as a warning
// naming the pool and op. It returns that failure.
//
// change runs once per attempt and must only change p and the caller's
// result variables (see records.update). Callers pass a function literal
// that does not escape: neither updatePool nor records.update keeps it,
// so its captured variables stay on the caller's stack and an update
// allocates nothing.
func (pc *pluginContext) updatePool(now time.Time, ps *poolState, op string, change func(p *fairshare.Pool)) error {
	retries, err := pc.rs.update(now, ps.rec, change)
	pc.met.poolCounter(ps.cfg.name, mCASRetries, int64(retries))
	if err != nil {
		pc.met.poolCounter(ps.cfg.name, mFailures, 1)
		hostcalls.LogWarnf("fairshare: pool %s: %s: %v", ps.cfg.name, op, err)
	}
	return err
}

// create writes a new record for r if none exists (createIfAbsent).
func (rs *records) create(now time.Time, r *record) error {
	p := rs.newPool(now, r)
	b, err := p.AppendBinary(nil)
	if err != nil {
		return fmt.Errorf("fairshare: encode %s: %w", r.key, err)
	}
	_, err = rs.createIfAbsent(r.key, b)
	return err
}

// createIfAbsent sets key to value if the key does not exist, safely when
// several VMs race to do so, and reports whether it did. The ABI has no
// create-if-absent (a missing key is always settable), so it writes this
// VM's sentinel key, reads the cas c Envoy gave that write, and sets key with
// cas c: Envoy's cas values come from one global counter, one per successful
// set, so no existing key can carry c and the set fails with CAS_MISMATCH if
// another VM created key first. The SDK's proxytest host numbers cas per key
// instead; there the protocol still creates a missing key but cannot detect
// a concurrent creation, which a single-VM emulator never has.
func (rs *records) createIfAbsent(key string, value []byte) (bool, error) {
	_, c, err := rs.st.GetSharedData(rs.sentinel)
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		c = 0
	case err != nil:
		return false, fmt.Errorf("fairshare: get %s: %w", rs.sentinel, err)
	}
	var hb [4]byte
	binary.BigEndian.PutUint32(hb[:], rs.holder)
	if err := rs.st.SetSharedData(rs.sentinel, hb[:], c); err != nil {
		return false, fmt.Errorf("fairshare: set %s: %w", rs.sentinel, err)
	}
	if _, c, err = rs.st.GetSharedData(rs.sentinel); err != nil {
		return false, fmt.Errorf("fairshare: get %s: %w", rs.sentinel, err)
	}
	err = rs.st.SetSharedData(key, value, c)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return false, nil
	}
	return false, fmt.Errorf("fairshare: create %s: %w", key, err)
}

// Configuration generations. When the configuration changes, Envoy (and
// Istio, on every WasmPlugin change) starts new VMs while the old ones
// drain their streams. Each VM applies its configuration to a record whose
// fingerprint differs, so without an order an old VM releasing a request
// would put its configuration back. The key generationKey holds the start
// time and fingerprint of the newest configuration started: a VM applies
// its configuration only if it is that one, or newer.

// generationKey is the shared-data key of the newest configuration.
func generationKey(plugin string) string { return plugin + "/fairshare/config" }

// generation is a configuration's start time (unix ns) and fingerprint.
type generation struct {
	started int64
	fp      uint64
}

func (g generation) encode() []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(g.started))
	binary.BigEndian.PutUint64(b[8:], g.fp)
	return b[:]
}

func decodeGeneration(b []byte) (generation, bool) {
	if len(b) != 16 {
		return generation{}, false
	}
	return generation{int64(binary.BigEndian.Uint64(b[:8])), binary.BigEndian.Uint64(b[8:])}, true
}

// publish records rs.gen as the newest configuration unless a newer one
// (started later) is stored; on equal start times the later writer wins.
func (rs *records) publish() error {
	key := generationKey(rs.plugin)
	for attempt := 0; attempt <= rs.retries; attempt++ {
		v, cas, err := rs.st.GetSharedData(key)
		if errors.Is(err, types.ErrorStatusNotFound) {
			ok, err := rs.createIfAbsent(key, rs.gen.encode())
			if err != nil || ok {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("fairshare: get %s: %w", key, err)
		}
		if g, ok := decodeGeneration(v); ok && (g.fp == rs.gen.fp || g.started > rs.gen.started) {
			return nil
		}
		err = rs.st.SetSharedData(key, rs.gen.encode(), cas)
		if err == nil {
			return nil
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return fmt.Errorf("fairshare: set %s: %w", key, err)
		}
		backoff(attempt)
	}
	return errRetriesExhausted
}

// current reports whether this VM's configuration is the newest one (or
// the generation key cannot be read, in which case the VM applies its own).
func (rs *records) current() bool {
	if rs.plugin == "" {
		return true
	}
	v, _, err := rs.st.GetSharedData(generationKey(rs.plugin))
	if err != nil {
		return true
	}
	g, ok := decodeGeneration(v)
	return !ok || g.fp == rs.gen.fp || g.started < rs.gen.started
}
