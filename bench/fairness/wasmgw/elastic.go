package wasmgw

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// Capacity from the engines (a scenario's capacity_from_engines): the
// plugin's pool has capacity_from with engines "learned" through the
// ORIGINAL_DST cluster EnginesCluster, and the gateway is the engines'
// network: every active replica's /metrics is served on a loopback
// address of its own, the requests a replica serves carry that address
// as their upstream.address, and a removed replica's server is closed.
// The host's clock waits for the plugin's reads (Host.Wait after every
// move of the clock), so the run stays deterministic: the reads happen
// in real time, but the simulation does not move meanwhile.

// EnginesCluster is the ORIGINAL_DST cluster the plugin reads the
// engines through.
const EnginesCluster = "engines"

// EngineInterval is capacity_from.interval in the benchmark's
// configuration (virtual time).
const EngineInterval = "2s"

// engineServer is one replica's /metrics.
type engineServer struct {
	srv  *httptest.Server
	addr string // as upstream.address writes it: "127.0.0.1:port"
}

// capacityFromJSON is the pool's capacity_from block for scenario s.
func capacityFromJSON(s *fairbench.Scenario) (string, error) {
	e, err := fairbench.EngineConfig(s, fairbench.EnginePriority, fairbench.ModeVLLM)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`"capacity_from":{"cluster":%q,"engines":"learned","interval":%q,"timeout":"1s","max_num_seqs":%d},`,
		EnginesCluster, EngineInterval, e.MaxNumSeqs), nil
}

// syncEngines starts the server of every replica that joined the pool and
// closes the server of every replica that left it.
func (g *Gateway) syncEngines() {
	ev := g.engines
	for i := range ev.EngineReplicas() {
		if i >= len(g.servers) {
			g.servers = append(g.servers, nil)
		}
		up := ev.EngineUp(i)
		switch es := g.servers[i]; {
		case up && es == nil:
			i := i
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" {
					http.NotFound(w, r)
					return
				}
				var b bytes.Buffer
				ev.WriteEngineMetrics(&b, i)
				w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
				_, _ = w.Write(b.Bytes())
			}))
			g.servers[i] = &engineServer{srv: srv, addr: strings.TrimPrefix(srv.URL, "http://")}
		case !up && es != nil:
			es.srv.Close()
			g.servers[i] = nil
		}
	}
}

// engineAddr is replica i's address ("" when it has no server).
func (g *Gateway) engineAddr(i int) string {
	if i < len(g.servers) && g.servers[i] != nil {
		return g.servers[i].addr
	}
	return ""
}

// closeEngines closes every replica's server.
func (g *Gateway) closeEngines() {
	for _, es := range g.servers {
		if es != nil {
			es.srv.Close()
		}
	}
	g.servers = nil
}

// recordKey is the shared-data key of the benchmark's pool record.
func recordKey() string {
	return "fairshare/fairshare/pool/bench/v" + strconv.Itoa(fairshare.RecordVersion)
}

// record decodes the benchmark pool's record (nil if it cannot).
func (g *Gateway) record() *fairshare.Pool {
	if g.h == nil {
		return nil
	}
	v, _, ok := g.h.SharedData(recordKey())
	if !ok {
		return nil
	}
	p := new(fairshare.Pool)
	if p.UnmarshalBinary(v) != nil {
		return nil
	}
	return p
}

// DecidedCapacity implements fairbench.CapacityReporter: the C of the
// pool's record, which every VM decides against; on several proxies the
// C their fleet agreed on, if every proxy agrees (-1 while they do not).
func (g *Gateway) DecidedCapacity() int {
	if g.cl != nil {
		return g.cl.decided()
	}
	if p := g.record(); p != nil {
		return p.Capacity()
	}
	return 0
}

// Ledger implements fairbench.CapacityReporter: the requests the record
// counts in flight (phantoms included) or waiting, and the prompt and
// completion tokens of the plugin's token counters.
func (g *Gateway) Ledger() (inFlight int, prompt, completion int64) {
	if g.cl != nil {
		g.sync()
		return g.cl.ledger()
	}
	if g.h == nil {
		return 0, 0, 0
	}
	g.sync()
	return hostLedger(g.h, g.clock.Now())
}

// UserLedger implements fairbench.UserCounter: the requests the
// record's user entries count in flight or waiting, summed over the
// teams (and the proxies), and whether the configuration has
// user_header.
func (g *Gateway) UserLedger() (inFlight int, on bool) {
	on = !g.opt.NoUsers && g.s.HasUsers()
	if g.cl != nil {
		g.sync()
		for i, h := range g.cl.hs {
			inFlight += hostUsers(h, g.cl.clocks[i].Now())
		}
		return inFlight, on
	}
	if g.h == nil {
		return 0, on
	}
	g.sync()
	return hostUsers(g.h, g.clock.Now()), on
}

// hostUsers is what one host's user entries count in flight or waiting
// at now, its clock's time.
func hostUsers(h *host.Host, now time.Time) int {
	v, _, ok := h.SharedData(recordKey())
	if !ok {
		return 0
	}
	p := new(fairshare.Pool)
	if p.UnmarshalBinary(v) != nil {
		return 0
	}
	n := 0
	for _, st := range p.Snapshot(now) {
		for _, u := range st.Users {
			n += u.Within + u.Over + u.Borrowing + u.Waiting
		}
	}
	return n
}

// hostLedger is one host's ledger (Gateway.Ledger) at now, its clock's
// time.
func hostLedger(h *host.Host, now time.Time) (inFlight int, prompt, completion int64) {
	if v, _, ok := h.SharedData(recordKey()); ok {
		p := new(fairshare.Pool)
		if p.UnmarshalBinary(v) == nil {
			for _, st := range p.Snapshot(now) {
				inFlight += st.InFlight + st.Phantoms + st.Waiting
			}
		}
	}
	for name, m := range h.Metrics() {
		if !strings.HasPrefix(name, "fairshare.pool.bench.team.") {
			continue
		}
		switch {
		case strings.HasSuffix(name, ".prompt_tokens_total"):
			prompt += m.Value
		case strings.HasSuffix(name, ".completion_tokens_total"):
			completion += m.Value
		}
	}
	return inFlight, prompt, completion
}

// stepTo moves the host's clock to t one tick period of the plugin at a
// time, and after each step delivers the answers of the reads that
// step's ticks started (Host.Wait with Options.HTTPCallsOnWait): an
// answer comes at the instant of its read, after every VM's tick of that
// instant, in every run alike.
func (g *Gateway) stepTo(t time.Time) {
	step := Tick
	if g.opt.Flow != nil {
		step = min(step, g.opt.Flow.tick())
	}
	for {
		d := t.Sub(g.clock.Now())
		if d <= 0 {
			return
		}
		g.h.Advance(min(d, step))
		g.h.Wait()
	}
}
