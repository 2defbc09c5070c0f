package vllmsim_test

import (
	"fmt"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

// A batch fills the engine's four slots; an interactive request that
// arrives later waits for a free slot (no preemption on arrival), then is
// admitted ahead of the batch requests still queued.
func ExampleSim() {
	sim := vllmsim.NewSim(vllmsim.TestConfig(), 1, 1)
	var order []string
	submit := func(id string, prio int64, maxTokens int) {
		sim.Submit(vllmsim.Request{ID: id, Priority: prio, PromptTokens: 50, MaxTokens: maxTokens}, vllmsim.Callbacks{
			OnAdmit: func(int, time.Time) { order = append(order, id) },
			OnFinish: func(r vllmsim.Record) {
				if r.ID == "chat" {
					fmt.Printf("chat: queued %v, %d tokens, %s\n", r.QueueTime().Round(time.Millisecond), r.CompletionTokens, r.FinishReason)
				}
			},
		})
	}
	for i := range 6 {
		submit(fmt.Sprint("batch", i), 10, 100)
	}
	sim.At(sim.Now().Add(100*time.Millisecond), func() { submit("chat", 0, 10) })
	sim.Run()
	fmt.Println("admitted:", order)
	fmt.Println("preemptions:", sim.Stats().Preemptions)
	// Output:
	// chat: queued 513ms, 10 tokens, length
	// admitted: [batch0 batch1 batch2 batch3 chat batch4 batch5]
	// preemptions: 0
}
