package host

import (
	"context"
	"strings"
	"testing"
)

// TestLifecycle: the canary and every worker VM run _initialize,
// on_context_create(root, 0), on_vm_start(root, len(vm config)) and
// on_configure(root, len(plugin config)) reading buffer 7 (only there).
func TestLifecycle(t *testing.T) {
	h := start(t, rawGuestPkg, Options{VMs: 3, VMConfig: []byte("vmcfg"), PluginConfig: []byte("tick_ms=0"), Transcript: true})
	want := []string{
		"--> _initialize()",
		"<--",
		"--> proxy_on_context_create(ctx=1,parent=0)",
		"<--",
		"--> proxy_on_vm_start(root=1,vm_config_size=5)",
		"==> proxy_get_buffer_bytes(type=6,start=0,max_size=5)",
		`<== OK data="vmcfg"`,
		`==> proxy_log(level=2,msg="vm_start config=vmcfg status=0")`,
		"<== OK",
		"<-- 1",
		"--> proxy_on_configure(root=1,config_size=9)",
		"==> proxy_get_buffer_bytes(type=7,start=0,max_size=9)",
		`<== OK data="tick_ms=0"`,
	}
	for i := 0; i < 3; i++ {
		tr := h.Transcript(i)
		if len(tr) < len(want) {
			t.Fatalf("VM %d transcript too short: %q", i, tr)
		}
		equal(t, "transcript head", tr[:len(want)], want)
	}
	// Canary first, then the workers, each started and configured once.
	var order []int
	for _, e := range h.Logs() {
		if strings.HasPrefix(e.Message, "configure") {
			order = append(order, e.VM)
		}
	}
	equal(t, "configure order", order, []int{CanaryVM, 0, 1, 2})
}

// TestStartFailsWhenConfigureFails: on_configure returning false fails
// Start (in the canary, before any worker).
func TestStartFailsWhenConfigureFails(t *testing.T) {
	_, err := module(t, rawGuestPkg).Start(context.Background(), Options{VMID: uniqueVMID(t), PluginConfig: []byte("fail=1")})
	if err == nil || !strings.Contains(err.Error(), "canary") || !strings.Contains(err.Error(), "proxy_on_configure returned false") {
		t.Fatalf("Start = %v, want a canary on_configure failure", err)
	}
	_, err = module(t, rawGuestPkg).Start(context.Background(), Options{VMID: uniqueVMID(t), VMConfig: []byte("fail")})
	if err == nil || !strings.Contains(err.Error(), "proxy_on_vm_start returned false") {
		t.Fatalf("Start = %v, want an on_vm_start failure", err)
	}
}
