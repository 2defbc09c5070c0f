package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
)

// defaultTimeScale is the simulator's wall-clock seconds per simulated
// second (1: real time).
const defaultTimeScale = 1.0

// upstream is where the proxy forwards: a real vLLM URL or the embedded
// simulator.
type upstream struct {
	url     *url.URL
	desc    string
	closeFn func()
	// simulated is true for the embedded simulator; the counters are then
	// kept from its records of finished requests.
	simulated   bool
	preemptions atomic.Int64 // preemptions of finished requests
	preemptedBy atomic.Int64 // of which of borrowers (priority ≥ 10)
	finished    atomic.Int64 // finished engine requests
}

// simLine summarises the simulator's preemptions ("" for a real vLLM).
func (u *upstream) simLine() string {
	if !u.simulated {
		return ""
	}
	return fmt.Sprintf("simulator: %d requests finished, %d preemptions (%d of borrowers)",
		u.finished.Load(), u.preemptions.Load(), u.preemptedBy.Load())
}

// close stops the simulator, if it is one. Safe on a nil or real upstream.
func (u *upstream) close() {
	if u != nil && u.closeFn != nil {
		u.closeFn()
		u.closeFn = nil
	}
}

// simEngine is the simulated engine of the demo: vllmsim.DemoConfig, one
// replica of Llama-3.1-8B on an H100 with the priority policy, 16 sequences
// and 1024 usable KV blocks of 16 tokens, so that the demo's flood fills
// the running set and preemption happens.
func simEngine() vllmsim.EngineConfig { return vllmsim.DemoConfig() }

// startSimulator starts the embedded simulated vLLM serving model on a free
// local port.
func startSimulator(model string, timeScale float64) (*upstream, error) {
	cfg := simEngine()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	up := &upstream{simulated: true}
	sim := vllmsim.NewServer(cfg, vllmsim.ServerOptions{Model: model, TimeScale: timeScale,
		OnRecord: func(r vllmsim.Record) {
			up.finished.Add(1)
			up.preemptions.Add(int64(r.Preemptions))
			if r.Priority >= borrowBase {
				up.preemptedBy.Add(int64(r.Preemptions))
			}
		}})
	hs := &http.Server{Handler: sim}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the proxy reports failed upstream requests
		}
	}()
	u := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	speed := ""
	if timeScale != 1 {
		speed = fmt.Sprintf(", time ×%g", timeScale)
	}
	up.url = u
	up.desc = fmt.Sprintf("simulated vLLM at %s (%s policy, max_num_seqs %d, %d KV blocks × %d tokens%s)",
		u, cfg.Policy, cfg.MaxNumSeqs, cfg.NumBlocks-1, cfg.BlockSize, speed)
	up.closeFn = func() {
		sim.Close() // ends the streams in flight
		hs.Close()
		<-served
	}
	return up, nil
}
