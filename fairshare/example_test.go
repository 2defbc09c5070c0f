package fairshare_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func ExamplePool_Reserved() {
	// The seed's example: rounding up would promise 9 + 2 = 11 > C slots;
	// the largest-remainder method reserves 8 + 2.
	p := fairshare.NewPool("p", fairshare.Config{Capacity: 10, Teams: []fairshare.TeamConfig{
		{Name: "a", Share: 0.8125}, {Name: "b", Share: 0.1875}}}, t0)
	r := p.Reserved()
	fmt.Println(r["a"], r["b"])
	// Output: 8 2
}

func ExamplePool_Acquire() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity: 10,
		Teams: []fairshare.TeamConfig{
			{Name: "search", Share: 0.5},
			{Name: "chat", Share: 0.3},
			{Name: "labs", Share: 0.2},
		},
		HalfLife: time.Hour,
	}, t0)
	// Past consumption, decayed: search 50, chat 10, labs 40 (cost units).
	p.SetUsage(t0, "search", 50)
	p.SetUsage(t0, "chat", 10)
	p.SetUsage(t0, "labs", 40)
	const vm = 7 // the holder: one Wasm VM
	for i := range 6 {
		g := p.Acquire(t0, vm, "search", fairshare.Interactive, 1)
		fmt.Printf("search #%d: priority %d borrowing %v\n", i+1, g.Priority, g.Borrowing)
	}
	g := p.Acquire(t0, vm, "labs", fairshare.Batch, 1)
	fmt.Println("labs batch:", g.Priority, g.Borrowing)
	g = p.Acquire(t0, vm, "somebody", fairshare.Interactive, 1)
	fmt.Println("unknown team:", g.Team, g.Priority, g.Borrowing)
	// Output:
	// search #1: priority 0 borrowing false
	// search #2: priority 0 borrowing false
	// search #3: priority 0 borrowing false
	// search #4: priority 0 borrowing false
	// search #5: priority 0 borrowing false
	// search #6: priority 20 borrowing true
	// labs batch: 1 false
	// unknown team: * 40 true
}

// Example_entryPenalty: with EntryPenalty, each request's estimate counts
// in its team's usage at once, so a burst ranks the team down as it comes.
func Example_entryPenalty() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity: 10,
		Teams: []fairshare.TeamConfig{
			{Name: "search", Share: 0.5},
			{Name: "chat", Share: 0.3},
			{Name: "labs", Share: 0.2},
		},
		HalfLife:     time.Hour,
		EntryPenalty: true,
	}, t0)
	p.SetUsage(t0, "search", 50)
	p.SetUsage(t0, "chat", 10)
	p.SetUsage(t0, "labs", 40)
	var burst []fairshare.Grant
	for range 12 {
		burst = append(burst, p.Acquire(t0, 7, "search", fairshare.Interactive, 10))
	}
	var prios []string
	for i, g := range burst {
		prios = append(prios, fmt.Sprintf("%d:%d", i+1, g.Priority))
	}
	fmt.Println(strings.Join(prios, " "))
	// The requests finish an hour later, each having consumed 4: the
	// penalties are settled and search's usage is 50 and 12 × 4 decayed
	// over one half-life.
	for i := range burst {
		p.Release(t0.Add(time.Hour), &burst[i], 4)
	}
	usage, _ := p.Usage(t0.Add(time.Hour))
	fmt.Printf("search usage %.1f\n", usage["search"])
	// Output:
	// 1:0 2:0 3:0 4:0 5:0 6:20 7:30 8:30 9:30 10:30 11:30 12:30
	// search usage 73.0
}

// Example_leases: a holder (one Wasm VM) that stops heartbeating leaves
// phantoms that hold its slots until the request timeout, then free them.
func Example_leases() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity:       2,
		Teams:          []fairshare.TeamConfig{{Name: "search", Share: 1}},
		HolderTimeout:  3 * time.Second,
		RequestTimeout: time.Minute,
	}, t0)
	p.Acquire(t0, 7, "search", fairshare.Interactive, 1)
	p.Acquire(t0, 7, "search", fairshare.Interactive, 1)
	// VM 8 heartbeats; VM 7 has died.
	for s := 1; s <= 5; s++ {
		p.Heartbeat(t0.Add(time.Duration(s)*time.Second), 8)
	}
	show := func(d time.Duration) {
		s := p.Snapshot(t0.Add(d))[0]
		_, ok := p.TryAcquire(t0.Add(d), 8, "search", fairshare.Interactive, 1)
		fmt.Printf("+%v: in flight %d, phantoms %d, TryAcquire %v\n", d, s.InFlight, s.Phantoms, ok)
	}
	show(5 * time.Second)
	show(63 * time.Second)
	// Output:
	// +5s: in flight 0, phantoms 2, TryAcquire false
	// +1m3s: in flight 0, phantoms 0, TryAcquire true
}

// Example_flowControl: a borrower is held while the pool is full, and
// dispatched within share once its team has dropped back into its
// reservation; another holder is told whose turn it is.
func Example_flowControl() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity:     2,
		Teams:        []fairshare.TeamConfig{{Name: "search", Share: 0.5}, {Name: "chat", Share: 0.5}},
		QueueLimit:   16,
		MaxQueueTime: 30 * time.Second,
	}, t0)
	const vm1, vm2 = 1, 2 // two Wasm VMs sharing the record
	show := func(who string, g fairshare.Grant, w fairshare.Waiting, out fairshare.Outcome) {
		if out == fairshare.Granted {
			fmt.Printf("%s: %v, priority %d, borrowing %v\n", who, out, g.Priority, g.Borrowing)
		} else {
			fmt.Printf("%s: %v until +%v\n", who, out, time.Duration(w.Deadline-t0.UnixNano()))
		}
	}
	g1, w, out := p.Arrive(t0, fairshare.Request{Holder: vm1, ID: 1, Team: "search"})
	show("search #1", g1, w, out)
	g, w, out := p.Arrive(t0, fairshare.Request{Holder: vm1, ID: 2, Team: "search"})
	show("search #2", g, w, out)
	g, w, out = p.Arrive(t0, fairshare.Request{Holder: vm1, ID: 3, Team: "search"})
	show("search #3", g, w, out)
	g, w, out = p.Arrive(t0, fairshare.Request{Holder: vm2, ID: 1, Team: "chat"})
	show("chat #1", g, w, out)
	// search #1 finishes on VM 1 one second later: its waiting request
	// is within share again. VM 2 ticks first and is told to wake VM 1.
	now := t0.Add(time.Second)
	p.Release(now, &g1, 1)
	_, head, st := p.Dispatch(now, vm2)
	fmt.Printf("VM 2 Dispatch: %v (holder %d, request %d)\n", st, head.Holder, head.ID)
	g, _, st = p.Dispatch(now, vm1)
	fmt.Printf("VM 1 Dispatch: %v request %d, priority %d, borrowing %v, waited %v\n",
		st, g.ID, g.Priority, g.Borrowing, time.Duration(g.At-g.Arrived))
	// Output:
	// search #1: granted, priority 0, borrowing false
	// search #2: granted, priority 10, borrowing true
	// search #3: queued until +30s
	// chat #1: granted, priority 0, borrowing false
	// VM 2 Dispatch: elsewhere (holder 1, request 3)
	// VM 1 Dispatch: dispatched request 3, priority 0, borrowing false, waited 1s
}

// Example_kvTokens: with a KV capacity, a request of few sequences but
// long prompts is held when the cache, not the sequence slots, is full;
// a lending limit keeps part of a reservation free for its owner.
func Example_kvTokens() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity: 8,
		KVTokens: 16000,
		Teams: []fairshare.TeamConfig{
			{Name: "rag", Share: 0.5},
			{Name: "chat", Share: 0.5, LendingLimit: fairshare.Limit(0.5)},
		},
		QueueLimit: 16,
	}, t0)
	for _, r := range []fairshare.Request{
		{Holder: 1, ID: 1, Team: "rag", Tokens: 6000},
		{Holder: 1, ID: 2, Team: "rag", Tokens: 6000}, // rag's sequence, beyond its 8000 tokens
		{Holder: 1, ID: 3, Team: "rag", Tokens: 3000}, // chat keeps 4000 of its 8000
		{Holder: 2, ID: 1, Team: "chat", Tokens: 3000},
	} {
		g, _, out := p.Arrive(t0, r)
		fmt.Printf("%s %d tokens: %v, borrowing %v, tokens borrowed %v, priority %d\n", r.Team, r.Tokens, out, g.Borrowing, g.BorrowsTokens, g.Priority)
	}
	var tokens int64
	sequences := 0
	for _, s := range p.Snapshot(t0) {
		tokens += s.InFlightTokens
		sequences += s.InFlight
	}
	fmt.Println("tokens in flight:", tokens, "of 16000 - sequences:", sequences, "of", p.Capacity())
	// Output:
	// rag 6000 tokens: granted, borrowing false, tokens borrowed false, priority 0
	// rag 6000 tokens: granted, borrowing false, tokens borrowed true, priority 10
	// rag 3000 tokens: queued, borrowing false, tokens borrowed false, priority 0
	// chat 3000 tokens: granted, borrowing false, tokens borrowed false, priority 0
	// tokens in flight: 15000 of 16000 - sequences: 3 of 8
}

// Example_throughput: a throughput reservation. The pool serves X = 1000
// cost units a second; batch and chat reserve half each, as a rate with a
// bucket of 2 s. batch's requests cost 400 units each: its bucket (1000)
// holds two and a half, so its third request borrows, although it has
// seats to spare; chat's, cheap, stay within share. As time passes the
// debt pays down at 500 units a second and batch is within share again,
// and Release settles the debt to what a request really cost.
func Example_throughput() {
	p := fairshare.NewPool("llama-8b", fairshare.Config{
		Capacity:        32,
		Throughput:      1000,
		ThroughputBurst: 2 * time.Second,
		Teams:           []fairshare.TeamConfig{{Name: "batch", Share: 0.5}, {Name: "chat", Share: 0.5}},
	}, t0)
	const vm = 1
	var gs []fairshare.Grant
	for i := range 3 {
		g := p.Acquire(t0, vm, "batch", fairshare.Batch, 400)
		gs = append(gs, g)
		fmt.Printf("batch #%d: borrowing %v, work charged %v\n", i+1, g.Borrowing, g.Work)
	}
	g := p.Acquire(t0, vm, "chat", fairshare.Interactive, 30)
	fmt.Println("chat: borrowing", g.Borrowing)
	debt := func(at time.Time) float64 { return p.Snapshot(at)[0].WorkDebt }
	fmt.Println("batch's debt:", debt(t0), "of", p.Snapshot(t0)[0].WorkBurst)
	fmt.Println("after 1 s:", debt(t0.Add(time.Second)))
	g = p.Acquire(t0.Add(time.Second), vm, "batch", fairshare.Batch, 400)
	fmt.Println("batch #4 after 1 s: borrowing", g.Borrowing)
	// The first request cost 100 units, not 400: 300 back.
	p.Release(t0.Add(time.Second), &gs[0], 100)
	fmt.Println("after its release:", debt(t0.Add(time.Second)))
	// Output:
	// batch #1: borrowing false, work charged 400
	// batch #2: borrowing false, work charged 400
	// batch #3: borrowing true, work charged 0
	// chat: borrowing false
	// batch's debt: 800 of 1000
	// after 1 s: 300
	// batch #4 after 1 s: borrowing false
	// after its release: 400
}
