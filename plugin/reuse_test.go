package plugin

import (
	"reflect"
	"testing"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// TestStreamContextReuse checks that a stream context the host deleted
// serves the next stream as a new one would, and that one a queue still
// holds is never handed out again.
func TestStreamContextReuse(t *testing.T) {
	pc := &pluginContext{}
	h := pc.NewHttpContext(5).(*httpContext)
	h.state, h.team, h.prio, h.borrowing, h.status = stDone, "a", 7, true, 200
	h.grant = fairshare.Grant{Team: "a", Priority: 7}
	h.resp = []byte("{}")
	h.scan.seen = 3
	pc.DeleteHttpContext(h)
	got := pc.NewHttpContext(6).(*httpContext)
	if got != h {
		t.Fatalf("NewHttpContext after a delete made a new context, want the deleted one reused")
	}
	if want := (&httpContext{pc: pc, ctxID: 6}); !reflect.DeepEqual(got, want) {
		t.Errorf("reused context = %+v, want %+v", *got, *want)
	}

	held := pc.NewHttpContext(7).(*httpContext)
	held.state = stHeld
	pc.DeleteHttpContext(held)
	if next := pc.NewHttpContext(8); next == held {
		t.Errorf("a held stream's context was handed out again")
	}
}
