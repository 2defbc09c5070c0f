// Command wasmbench is a Wasm module (GOOS=wasip1 GOARCH=wasm,
// -buildmode=c-shared) that runs the fairshare decision loop inside Wasm,
// as the plugin does on every request: decode the pool record, decide
// (Acquire or Release) and encode the record again.
//
// The module exports (wasm.go, wasip1 only):
//
//	prepare(teams i32) i32        build the record of a pool of teams
//	                              teams; returns its size in bytes
//	acquire(n i32, within i32) i64  n decisions decode+Acquire+encode
//	                              (within 0: a borrowing team, else a team
//	                              with room); returns a checksum
//	release(n i32) i64            n decisions decode+Release+encode;
//	                              returns a checksum
//	codec(n i32) i64              n times decode+encode, no decision (the
//	                              baseline: two records alternate, so every
//	                              decode is a full one); returns a checksum
//	own(n i32) i64                n times decode+Acquire+encode then
//	                              decode+Release+encode, each decode
//	                              reading back the pool's own last write;
//	                              returns a checksum
//	arrive(n i32) i64             n decisions decode+Arrive+encode of a
//	                              borrower queued behind 64 waiting
//	                              requests on a full pool (flow control,
//	                              KV tokens); returns a checksum
//	dispatch(n i32) i64           n decisions decode+Dispatch+encode of the
//	                              head of those 64, which may go; returns
//	                              a checksum
//	floorbytes(n i32) i64         n times the sum of the record's bytes, the
//	                              simplest loop Go can write (no call, one
//	                              branch); returns the sum
//	floorvarint(n i32) i64        n times the record read as uvarints with
//	                              encoding/binary (a decoder's inner loop);
//	                              returns a checksum
//	floorfloat(n i32) i64         n times a decay and the least share/usage
//	                              over one value per team (a ranking's
//	                              inner loop); returns a checksum
//
// The floor exports are not decisions: they measure what wazero makes of
// the plainest Go code, so that the decision's Wasm/native ratio can be
// read against the ratio of code that has nothing left to take out.
//
// The same code builds natively (with an empty main), so that
// wasmbench_test.go runs both in one benchmark and reports the Wasm/native
// ratio measured in the same run.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// base is the time of the prepared record; decisions run 2 s later.
var base = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// state is the prepared record and the buffers every decision reuses.
var state struct {
	rec    []byte
	rec2   []byte // the pool of rec one second later
	buf    []byte
	pool   fairshare.Pool
	grant  fairshare.Grant
	borrow string // a team above its reservation
	within string // a team with room

	flowFull   []byte // a full pool with flow control and flowWaiting waiting
	flow       []byte // the same after one request finished
	flowHolder uint32 // the holder of the head of flow's queue, which may go

	floor []floorEntry // one per team, for floorFloat
}

// floorEntry is a team's figures in floorFloat.
type floorEntry struct {
	usage, share   float64
	held, reserved int32
}

// flowWaiting is the number of waiting requests in the flow record.
const flowWaiting = 64

// prepare builds the record of a pool of teams teams and min(teams, 16)
// holders of three teams each, every team with usage, one phantom group
// per ten teams, whose first team has used up its reservation (the pool of
// the fairshare package's benchmarks). It returns the record size.
func prepare(teams int) int {
	teams = max(teams, 1)
	cfg := fairshare.Config{Capacity: 4 * teams, HalfLife: time.Hour, EntryPenalty: true,
		HolderTimeout: 5 * time.Second, RequestTimeout: 10 * time.Minute}
	for i := range teams {
		cfg.Teams = append(cfg.Teams, fairshare.TeamConfig{Name: fmt.Sprintf("team-%03d", i), Share: 1 / float64(teams)})
	}
	p := fairshare.NewPool("llama-3-8b", cfg, base)
	for i := range teams {
		p.Charge(base, cfg.Teams[i].Name, float64(i)*1.7+0.3)
	}
	for k := range min(teams, 16) {
		id := uint32(k)*2654435761 + 12345
		for j := range 3 {
			p.Acquire(base.Add(time.Duration(k)*time.Millisecond), id, cfg.Teams[(k*7+j*13)%teams].Name, fairshare.Class(j%2), 1.5)
		}
	}
	for i := 0; i < teams; i += 10 {
		p.AddPhantoms(base.Add(time.Second), cfg.Teams[i].Name, 2, base.Add(time.Minute))
	}
	state.borrow, state.within = cfg.Teams[0].Name, cfg.Teams[teams-1].Name
	for range p.Reserved()[state.borrow] + 1 {
		state.grant = p.Acquire(base.Add(time.Second), 99, state.borrow, fairshare.Interactive, 2)
	}
	state.rec, _ = p.AppendBinary(nil)
	p.Heartbeat(base.Add(3*time.Second), 99)
	state.rec2, _ = p.AppendBinary(nil)
	prepareFlow(teams)
	state.floor = state.floor[:0]
	for i := range teams {
		state.floor = append(state.floor, floorEntry{usage: float64(i)*1.7 + 0.3, share: 1 / float64(teams), held: int32(i % 5), reserved: 4})
	}
	state.buf = make([]byte, 0, 2*max(len(state.rec), len(state.flowFull)))
	state.pool = fairshare.Pool{}
	return len(state.rec)
}

// prepareFlow builds the flow record: teams teams with a queue and a KV
// capacity (C = 4·teams, K = 8000·teams), every team at its reservation of
// 4 sequences (1500 tokens each) held by 16 holders, flowWaiting
// borrowers queued 1 ms apart, then one request finished, so that the
// head of the queue may go (the pool of the fairshare package's
// BenchmarkDispatch).
func prepareFlow(teams int) {
	cfg := fairshare.Config{Capacity: 4 * teams, KVTokens: int64(8000 * teams), HalfLife: time.Hour, EntryPenalty: true,
		HolderTimeout: time.Minute, RequestTimeout: 10 * time.Minute, QueueLimit: 1024, MaxQueueTime: time.Minute}
	for i := range teams {
		cfg.Teams = append(cfg.Teams, fairshare.TeamConfig{Name: fmt.Sprintf("team-%03d", i), Share: 1 / float64(teams)})
	}
	p := fairshare.NewPool("llama-3-8b", cfg, base)
	for i := range teams {
		p.Charge(base, cfg.Teams[i].Name, float64(i)*1.7+0.3)
	}
	id := uint64(0)
	var first fairshare.Grant
	for i := range teams {
		for j := range 4 {
			id++
			h := uint32((i*4+j)%16)*2654435761 + 12345
			g, _, _ := p.Arrive(base, fairshare.Request{Holder: h, ID: id, Team: cfg.Teams[i].Name, Class: fairshare.Class(j % 2), Tokens: 1500, Estimate: 1.5})
			if id == 1 {
				first = g
			}
		}
	}
	for k := range flowWaiting {
		id++
		h := uint32(k%16)*2654435761 + 12345
		p.Arrive(base.Add(time.Duration(k)*time.Millisecond), fairshare.Request{Holder: h, ID: id,
			Team: cfg.Teams[k*7%teams].Name, Class: fairshare.Class(k % 2), Tokens: int64(1000 + k), Estimate: 2.5})
	}
	state.flowFull, _ = p.AppendBinary(nil)
	p.Release(base.Add(time.Second), &first, 1)
	head, _ := p.Next(base.Add(time.Second))
	state.flowHolder = head.Holder
	state.flow, _ = p.AppendBinary(nil)
}

// arriveLoop runs n decisions decode + Arrive + encode of a borrower on
// the full flow record (it is queued) and returns a checksum of the
// outcomes and record sizes (-1 if a decode failed or the request was
// not queued).
func arriveLoop(n int) int64 {
	now := base.Add(time.Second)
	p := &state.pool
	var sum int64
	r := fairshare.Request{Holder: 12345, ID: 1 << 40, Team: "team-000", Class: fairshare.Batch, Tokens: 3000, Estimate: 2}
	for range n {
		if err := p.UnmarshalBinary(state.flowFull); err != nil {
			return -1
		}
		_, _, out := p.Arrive(now, r)
		if out != fairshare.Queued {
			return -1
		}
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(out) + int64(len(state.buf))
	}
	return sum
}

// dispatchLoop runs n decisions decode + Dispatch + encode of the head of
// the flow record's queue by its holder and returns a checksum of the
// priorities and record sizes (-1 if a decode failed or nothing was
// dispatched).
func dispatchLoop(n int) int64 {
	now := base.Add(time.Second)
	p := &state.pool
	var sum int64
	for range n {
		if err := p.UnmarshalBinary(state.flow); err != nil {
			return -1
		}
		g, _, st := p.Dispatch(now, state.flowHolder)
		if st != fairshare.Dispatched {
			return -1
		}
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(g.Priority) + int64(len(state.buf))
	}
	return sum
}

// acquireLoop runs n decisions decode + Acquire + encode on the prepared
// record and returns a checksum of the priorities and record sizes (-1 if
// a decode failed).
func acquireLoop(n int, within bool) int64 {
	team := state.borrow
	if within {
		team = state.within
	}
	now := base.Add(2 * time.Second)
	p := &state.pool
	var sum int64
	for range n {
		if err := p.UnmarshalBinary(state.rec); err != nil {
			return -1
		}
		g := p.Acquire(now, 99, team, fairshare.Interactive, 2)
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(g.Priority) + int64(len(state.buf))
	}
	return sum
}

// releaseLoop runs n decisions decode + Release + encode on the prepared
// record and returns a checksum of the record sizes (-1 if a decode or a
// Release failed).
func releaseLoop(n int) int64 {
	now := base.Add(2 * time.Second)
	p := &state.pool
	var sum int64
	for range n {
		if err := p.UnmarshalBinary(state.rec); err != nil {
			return -1
		}
		g := state.grant
		if !p.Release(now, &g, 3) {
			return -1
		}
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(len(state.buf))
	}
	return sum
}

// codecLoop decodes and encodes the prepared record n times, with no
// decision, and returns a checksum of the record sizes (-1 if a decode
// failed).
func codecLoop(n int) int64 {
	p := &state.pool
	var sum int64
	for i := range n {
		rec := state.rec
		if i&1 != 0 {
			rec = state.rec2
		}
		if err := p.UnmarshalBinary(rec); err != nil {
			return -1
		}
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(len(state.buf))
	}
	return sum
}

// ownLoop runs n pairs of decisions on the pool's own last write:
// decode + Acquire + encode, then decode + Release + encode of that
// request. It returns a checksum of the priorities and record sizes (-1
// if a decode or a Release failed).
func ownLoop(n int) int64 {
	now := base.Add(2 * time.Second)
	p := &state.pool
	state.buf = append(state.buf[:0], state.rec...)
	var sum int64
	for range n {
		if err := p.UnmarshalBinary(state.buf); err != nil {
			return -1
		}
		g := p.Acquire(now, 99, state.borrow, fairshare.Interactive, 2)
		state.buf, _ = p.AppendBinary(state.buf[:0])
		if err := p.UnmarshalBinary(state.buf); err != nil {
			return -1
		}
		if !p.Release(now, &g, 3) {
			return -1
		}
		state.buf, _ = p.AppendBinary(state.buf[:0])
		sum += int64(g.Priority) + int64(len(state.buf))
	}
	return sum
}

func main() {}

// floorBytes sums the prepared record's bytes n times.
func floorBytes(n int) int64 {
	var sum int64
	for range n {
		for _, c := range state.rec {
			sum += int64(c)
		}
	}
	return sum
}

// floorVarint reads the prepared record as a run of uvarints n times
// (a byte that ends no uvarint is skipped) and returns a checksum.
func floorVarint(n int) int64 {
	var sum int64
	for range n {
		b := state.rec
		for len(b) > 0 {
			v, k := binary.Uvarint(b)
			if k <= 0 {
				b = b[1:]
				continue
			}
			sum += int64(v & 0xff)
			b = b[k:]
		}
	}
	return sum
}

// floorFloat decays every team's usage by a factor and finds the team
// with room whose share/usage is least, n times; it returns the sum of
// the teams found.
func floorFloat(n int) int64 {
	var sum int64
	for k := range n {
		d := 0.9999 - float64(k&7)*1e-6
		best, bi := math.Inf(1), -1
		for i := range state.floor {
			e := &state.floor[i]
			lf := e.share / (e.usage*d + 1e-4)
			if e.held < e.reserved && lf < best {
				best, bi = lf, i
			}
		}
		sum += int64(bi)
	}
	return sum
}
