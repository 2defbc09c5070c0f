package vllmsim

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestSingleStreamDecode: one request decodes at about 165 tokens/s with
// the default constants (150–175 tok/s on one H100: 75 tok/s measured on
// an A100-40GB, scaled by memory bandwidth).
func TestSingleStreamDecode(t *testing.T) {
	sim := NewSim(DefaultConfig(), 1, 1)
	var rec Record
	sim.Submit(Request{PromptTokens: 100, MaxTokens: 1001}, Callbacks{OnFinish: func(r Record) { rec = r }})
	sim.Run()
	rate := 1000 / rec.Finished.Sub(rec.FirstToken).Seconds()
	if rate < 150 || rate > 180 {
		t.Errorf("single-stream decode = %.1f tok/s, want 150–180", rate)
	}
}

// TestManySequenceStep: 256 sequences at 1k context take about 25 ms per
// step, about 10k tokens/s.
func TestManySequenceStep(t *testing.T) {
	sim := NewSim(DefaultConfig(), 1, 1)
	var allFirst time.Time
	firsts := 0
	var times []time.Time
	for i := range 256 {
		sim.Submit(Request{PromptTokens: 1000, MaxTokens: 60}, Callbacks{
			OnFirstToken: func(_ int, at time.Time) {
				if firsts++; firsts == 256 {
					allFirst = at
				}
			},
			OnToken: func(_, k int, at time.Time) {
				if i == 0 && k > 40 {
					times = append(times, at)
				}
			},
		})
	}
	sim.Run()
	if allFirst.IsZero() || len(times) < 2 || times[0].Before(allFirst) {
		t.Fatalf("decode phase not reached: first tokens done %v, %d samples", allFirst, len(times))
	}
	step := times[len(times)-1].Sub(times[0]) / time.Duration(len(times)-1)
	tps := 256 / step.Seconds()
	if step < 18*time.Millisecond || step > 30*time.Millisecond || tps < 8000 || tps > 14000 {
		t.Errorf("256×1k decode step = %v (%.0f tok/s), want 18–30 ms, 8k–14k tok/s", step, tps)
	}
}

// TestPrefillChunk: an 8k-token prefill chunk takes about 0.2 s.
func TestPrefillChunk(t *testing.T) {
	sim := NewSim(DefaultConfig(), 1, 1)
	var rec Record
	sim.Submit(Request{PromptTokens: 8191, MaxTokens: 1}, Callbacks{OnFinish: func(r Record) { rec = r }})
	sim.Run()
	if d := rec.TTFT(); d < 150*time.Millisecond || d > 250*time.Millisecond {
		t.Errorf("8191-token prefill = %v, want 0.15–0.25 s", d)
	}
}

// TestSimAtAndCallbacks: caller events share the queue; callbacks see the
// admission, every token and the finish, in time order.
func TestSimAtAndCallbacks(t *testing.T) {
	sim := NewSim(TestConfig(), 1, 7)
	var log []string
	sim.At(SimEpoch.Add(time.Second), func() {
		log = append(log, fmt.Sprintf("submit %v", sim.Now().Sub(SimEpoch)))
		sim.Submit(Request{ID: "r", Priority: 3, PromptTokens: 10, MaxTokens: 3, N: 2}, Callbacks{
			OnAdmit:      func(c int, at time.Time) { log = append(log, fmt.Sprintf("admit %d", c)) },
			OnFirstToken: func(c int, at time.Time) { log = append(log, fmt.Sprintf("first %d", c)) },
			OnToken:      func(c, k int, at time.Time) { log = append(log, fmt.Sprintf("tok %d %d", c, k)) },
			OnFinish: func(r Record) {
				log = append(log, fmt.Sprintf("finish %d %s %d", r.Choice, r.FinishReason, r.CompletionTokens))
			},
		})
	})
	sim.Run()
	want := []string{"submit 1s", "admit 0", "admit 1",
		"first 0", "tok 0 1", "first 1", "tok 1 1",
		"tok 0 2", "tok 1 2",
		"tok 0 3", "finish 0 length 3", "tok 1 3", "finish 1 length 3"}
	if !reflect.DeepEqual(log, want) {
		t.Errorf("events =\n%q\nwant\n%q", log, want)
	}
	recs := sim.Records()
	if len(recs) != 2 || recs[0].Priority != 3 || !recs[0].Arrival.Equal(SimEpoch.Add(time.Second)) ||
		!recs[0].Arrival.Equal(recs[1].Arrival) {
		t.Errorf("records = %+v", recs)
	}
}

func TestSimEOSAndMaxTokens(t *testing.T) {
	cfg := TestConfig()
	tests := []struct {
		name       string
		req        Request
		wantTokens int
		wantReason string
	}{
		{"eos", Request{PromptTokens: 10, MaxTokens: 50, EOSAfter: 4}, 4, FinishStop},
		{"max", Request{PromptTokens: 10, MaxTokens: 5, EOSAfter: 9}, 5, FinishLength},
		{"eos-at-max", Request{PromptTokens: 10, MaxTokens: 5, EOSAfter: 5}, 5, FinishStop},
		{"model-len", Request{PromptTokens: 500, MaxTokens: 100}, cfg.MaxModelLen - 500, FinishLength},
		{"default", Request{PromptTokens: 500}, cfg.MaxModelLen - 500, FinishLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := NewSim(cfg, 1, 1)
			sim.Submit(tt.req, Callbacks{})
			sim.Run()
			r := sim.Records()[0]
			if r.CompletionTokens != tt.wantTokens || r.FinishReason != tt.wantReason {
				t.Errorf("got %d tokens %s, want %d %s", r.CompletionTokens, r.FinishReason, tt.wantTokens, tt.wantReason)
			}
		})
	}
}

// TestSimAbort: an aborted request frees its blocks at once and finishes
// with FinishAbort; a waiting one never gets admitted.
func TestSimAbort(t *testing.T) {
	sim := NewSim(TestConfig(), 1, 1)
	running := sim.Submit(Request{PromptTokens: 100, MaxTokens: 400}, Callbacks{})
	var waiting *Handle
	for range 4 {
		waiting = sim.Submit(Request{PromptTokens: 10, MaxTokens: 400}, Callbacks{})
	}
	sim.RunFor(100 * time.Millisecond)
	if sim.KVBlocksUsed(0) == 0 || sim.Waiting(0) != 1 {
		t.Fatalf("used %d blocks, %d waiting", sim.KVBlocksUsed(0), sim.Waiting(0))
	}
	before := sim.KVBlocksUsed(0)
	running.Abort()
	waiting.Abort()
	if got := sim.KVBlocksUsed(0); got >= before {
		t.Errorf("blocks used after abort = %d, was %d", got, before)
	}
	if !running.Done() || !waiting.Done() || sim.Waiting(0) != 0 {
		t.Fatalf("abort did not finish the requests")
	}
	sim.Run()
	for _, r := range sim.Records() {
		if r.ID == running.ID() && r.FinishReason != FinishAbort {
			t.Errorf("running record %+v", r)
		}
		if r.ID == waiting.ID() && (r.FinishReason != FinishAbort || !r.Admitted.IsZero()) {
			t.Errorf("waiting record %+v", r)
		}
	}
	if sim.KVBlocksUsed(0) != 0 {
		t.Errorf("blocks used at the end = %d", sim.KVBlocksUsed(0))
	}
}

// TestSimUsageExcludesRecompute: under preemption, every request still
// reports exactly its output tokens, while the engine computed more.
func TestSimUsageExcludesRecompute(t *testing.T) {
	cfg := tightConfig(Priority, 20)
	sim := NewSim(cfg, 1, 1)
	counts := map[string][]int{}
	for i := range 8 {
		id := fmt.Sprint(i)
		sim.Submit(Request{ID: id, Priority: int64(i % 3), PromptTokens: 60, MaxTokens: 60}, Callbacks{
			OnToken: func(_, k int, _ time.Time) { counts[id] = append(counts[id], k) },
		})
	}
	sim.Run()
	st := sim.Stats()
	if st.Preemptions == 0 {
		t.Fatalf("no preemption; make the engine tighter")
	}
	for _, r := range sim.Records() {
		if r.CompletionTokens != 60 || len(counts[r.ID]) != 60 || counts[r.ID][59] != 60 {
			t.Errorf("%s: usage %d tokens, %d token events", r.ID, r.CompletionTokens, len(counts[r.ID]))
		}
	}
	if st.ComputedTokens <= st.PromptTokens+st.CompletionTokens-8 {
		t.Errorf("computed %d tokens, no more than prompt+completion−1 per request (%d)", st.ComputedTokens, st.PromptTokens+st.CompletionTokens-8)
	}
}

// TestSimDeterministic: the same seed and calls give the same records.
func TestSimDeterministic(t *testing.T) {
	run := func() ([]Record, Stats) {
		sim := NewSim(tightConfig(Priority, 60), 2, 99)
		rng := sim.Rand()
		var submit func()
		n := 0
		submit = func() {
			sim.Submit(Request{Priority: int64(rng.IntN(3)), PromptTokens: 1 + rng.IntN(300), MaxTokens: 1 + rng.IntN(100)}, Callbacks{})
			if n++; n < 300 {
				sim.After(time.Duration(rng.ExpFloat64()*float64(20*time.Millisecond)), submit)
			}
		}
		sim.At(SimEpoch, submit)
		sim.Run()
		return sim.Records(), sim.Stats()
	}
	r1, s1 := run()
	r2, s2 := run()
	if !reflect.DeepEqual(r1, r2) || s1 != s2 {
		t.Errorf("two runs differ")
	}
	if len(r1) != 300 || s1.Preemptions == 0 {
		t.Errorf("%d records, %d preemptions", len(r1), s1.Preemptions)
	}
	if u := s1.SlotUtilisation(); u <= 0 || u > 1 {
		t.Errorf("slot utilisation %v", u)
	}
	if u := s1.KVUtilisation(); u <= 0 || u > 1 {
		t.Errorf("KV utilisation %v", u)
	}
}

// TestSimLeastOutstanding: requests spread over replicas.
func TestSimLeastOutstanding(t *testing.T) {
	sim := NewSim(TestConfig(), 3, 1)
	var hs []*Handle
	for range 6 {
		hs = append(hs, sim.Submit(Request{PromptTokens: 10, MaxTokens: 10}, Callbacks{}))
	}
	got := []int{}
	for _, h := range hs {
		got = append(got, h.Replica())
	}
	if want := []int{0, 1, 2, 0, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("replicas = %v, want %v", got, want)
	}
	sim.Run()
}
