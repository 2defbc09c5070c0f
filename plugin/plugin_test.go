package plugin

import (
	"errors"
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// newTestPlugin returns a plugin context over st with the example
// configuration, as OnPluginStart builds it, and its metrics.
func newTestPlugin(t *testing.T, st sharedStore, failClosed bool) (*pluginContext, *fakeMetrics) {
	t.Helper()
	cfg, err := parse(readExample(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.failClosed = failClosed
	f := &fakeMetrics{}
	pc := &pluginContext{cfg: cfg, name: "test", holder: 1, met: newMetrics(f)}
	pc.rs = records{st: st, holder: 1, sentinel: sentinelKey("test", 1), retries: cfg.casRetries}
	for i := range pc.cfg.pools {
		p := &pc.cfg.pools[i]
		pc.pools = append(pc.pools, &poolState{cfg: p, rec: newRecord("test", p.name, cfg.coreConfig(p))})
	}
	return pc, f
}

func TestAcquireCountsAndFailures(t *testing.T) {
	pc, f := newTestPlugin(t, newEnvoyStore(), false)
	ps := pc.poolFor("meta-llama/Llama-3.1-8B-Instruct")
	g, err := pc.acquire(t0, ps, "chat", fairshare.Batch, 10)
	if err != nil || g.Priority != 1 || g.Borrowing {
		t.Fatalf("acquire = %+v, %v; want within share batch", g, err)
	}
	if v := f.value("fairshare.pool.llama-8b.team.chat.class.batch.standing.within.requests_total"); v != 1 {
		t.Errorf("requests_total = %d, want 1", v)
	}
	// Unknown teams borrow as "*", counted as _unknown.
	g, _ = pc.acquire(t0, ps, "nobody", fairshare.Interactive, 10)
	if !g.Borrowing || g.Team != fairshare.UnknownTeam {
		t.Errorf("unknown team grant = %+v", g)
	}
	if v := f.value("fairshare.pool.llama-8b.team._unknown.borrowed_total"); v != 1 {
		t.Errorf("borrowed_total of _unknown = %d, want 1", v)
	}

	for _, closed := range []bool{false, true} {
		st := newEnvoyStore()
		pc, f := newTestPlugin(t, st, closed)
		pc.pools[0].rec.key = recordKey("test", "p")
		pc.rs.retries = 2
		if _, err := pc.acquire(t0, pc.pools[0], "chat", fairshare.Interactive, 1); err != nil {
			t.Fatalf("first acquire (creates the record): %v", err)
		}
		// Every compare-and-swap now loses (failStore), as against VMs that
		// always write first.
		pc.rs.st = failStore{st, types.ErrorStatusCasMismatch}
		_, err := pc.acquire(t0, pc.pools[0], "chat", fairshare.Interactive, 1)
		if !errors.Is(err, errRetriesExhausted) {
			t.Fatalf("acquire against a contended record = %v, want errRetriesExhausted", err)
		}
		if v := f.value("fairshare.pool.llama-8b.failures_total"); v != 1 {
			t.Errorf("closed=%v: failures_total = %d, want 1", closed, v)
		}
		if v := f.value("fairshare.pool.llama-8b.cas_retries_total"); v != 2 {
			t.Errorf("closed=%v: cas_retries_total = %d, want 2", closed, v)
		}
		wantOpen := int64(1)
		if closed {
			wantOpen = -1 // never defined
		}
		if v := f.value("fairshare.pool.llama-8b.failed_open_total"); v != wantOpen {
			t.Errorf("closed=%v: failed_open_total = %d, want %d", closed, v, wantOpen)
		}
	}
	if p := failOpenPriority(fairshare.Batch); p != fairshare.BorrowBase+fairshare.MaxRank*fairshare.RankStep+1 {
		t.Errorf("failOpenPriority(batch) = %d", p)
	}
}

func TestPoolForAndPaths(t *testing.T) {
	cfg, err := parse([]byte(`{"paths":["/a"],"pools":[{"name":"p","capacity":1,"models":["x","y"]},{"name":"q","capacity":1,"models":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pc := &pluginContext{cfg: cfg}
	for i := range pc.cfg.pools {
		pc.pools = append(pc.pools, &poolState{cfg: &pc.cfg.pools[i]})
	}
	for model, want := range map[string]string{"x": "p", "y": "p", "z": "q", "": "q"} {
		if got := pc.poolFor(model); got == nil || got.cfg.name != want {
			t.Errorf("poolFor(%q) = %v, want %s", model, got, want)
		}
	}
	if !pc.scheduled("/a") || pc.scheduled("/b") || pc.scheduled("/a/") {
		t.Error("scheduled paths wrong")
	}
}
