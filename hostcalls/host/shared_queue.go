package host

import (
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// queue is a shared queue: registered by name within a vm_id, owned by
// the VM whose root context registered it last (cpp-host overwrites the
// owner on re-registration), which gets proxy_on_queue_ready.
type queue struct {
	token uint32
	owner *VM
	items [][]byte
}

// Queue tokens are process-wide so that a token resolved in another
// vm_id names one queue.
var (
	queuesMu    sync.Mutex
	queueTokens uint32
	queueByName = map[[2]string]*queue{}
	queueByID   = map[uint32]*queue{}
)

// proxy_register_shared_queue(name_ptr, name_len, ret_token_ptr) → status
//
// Registers the queue name in the VM's vm_id (or re-registers it: the
// token stays, the calling VM becomes the owner that receives
// proxy_on_queue_ready). OK: the token is written to ret_token_ptr.
// INVALID_MEMORY_ACCESS.
//
//	name_ptr         ret_token_ptr
//	  |                 |
//	  v                 v
//	[ n a m e ]  ... [ token u32le ]
func init() {
	registerEnv(hostcalls.ProxyRegisterSharedQueue, 3, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		name, ok := readString(mod, uint32(stack[0]), uint32(stack[1]))
		if !ok {
			setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
			return
		}
		vm.trace("==> %s(name=%q)", hostcalls.ProxyRegisterSharedQueue, name)
		queuesMu.Lock()
		k := [2]string{vm.h.opts.VMID, name}
		q := queueByName[k]
		if q == nil {
			queueTokens++
			q = &queue{token: queueTokens}
			queueByName[k] = q
			queueByID[q.token] = q
		}
		q.owner = vm
		token := q.token
		queuesMu.Unlock()
		st := hostcalls.StatusOK
		if !writeU32(mod, uint32(stack[2]), token) {
			st = hostcalls.StatusInvalidMemoryAccess
		}
		setStatus(stack, st)
		vm.traceRet(st, "token=%d", token)
	})
}

// proxy_resolve_shared_queue(vm_id_ptr, vm_id_len, name_ptr, name_len, ret_token_ptr) → status
//
// Finds the queue name registered in vm_id. OK: token written.
// NOT_FOUND: no such queue. INVALID_MEMORY_ACCESS.
//
//	vm_id_ptr        name_ptr        ret_token_ptr
//	  |                |                |
//	  v                v                v
//	[ v m _ i d ] .. [ n a m e ] ..  [ token u32le ]
func init() {
	registerEnv(hostcalls.ProxyResolveSharedQueue, 5, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		vmID, ok1 := readString(mod, uint32(stack[0]), uint32(stack[1]))
		name, ok2 := readString(mod, uint32(stack[2]), uint32(stack[3]))
		if !ok1 || !ok2 {
			setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
			return
		}
		vm.trace("==> %s(vm_id=%q,name=%q)", hostcalls.ProxyResolveSharedQueue, vmID, name)
		queuesMu.Lock()
		q := queueByName[[2]string{vmID, name}]
		queuesMu.Unlock()
		if q == nil {
			setStatus(stack, hostcalls.StatusNotFound)
			vm.traceRet(hostcalls.StatusNotFound, "")
			return
		}
		st := hostcalls.StatusOK
		if !writeU32(mod, uint32(stack[4]), q.token) {
			st = hostcalls.StatusInvalidMemoryAccess
		}
		setStatus(stack, st)
		vm.traceRet(st, "token=%d", q.token)
	})
}

// proxy_enqueue_shared_queue(token, data_ptr, data_len) → status
//
// Appends a copy of the data to the queue. OK: the owner VM gets
// proxy_on_queue_ready(root, token) after the current call returns (as
// Envoy posts it to the owner's thread). NOT_FOUND: no such token.
// INVALID_MEMORY_ACCESS.
//
//	data_ptr
//	  |
//	  v
//	[ d a t a ]
func init() {
	registerEnv(hostcalls.ProxyEnqueueSharedQueue, 3, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		token := uint32(stack[0])
		data, ok := read(mod, uint32(stack[1]), uint32(stack[2]))
		if !ok {
			setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
			return
		}
		vm.trace("==> %s(token=%d,data=%q)", hostcalls.ProxyEnqueueSharedQueue, token, data)
		queuesMu.Lock()
		q := queueByID[token]
		var owner *VM
		if q != nil {
			q.items = append(q.items, data)
			owner = q.owner
		}
		queuesMu.Unlock()
		if q == nil {
			setStatus(stack, hostcalls.StatusNotFound)
			vm.traceRet(hostcalls.StatusNotFound, "")
			return
		}
		if owner != nil {
			vm.deferred = append(vm.deferred, func() { owner.queueReady(token) })
		}
		setStatus(stack, hostcalls.StatusOK)
		vm.traceRet(hostcalls.StatusOK, "")
	})
}

// proxy_dequeue_shared_queue(token, ret_ptr_ptr, ret_size_ptr) → status
//
// Removes the oldest item. OK: copied out like shared data (empty item:
// ptr=0,size=0). EMPTY: the queue has no item. NOT_FOUND: no such token.
//
//	ret_ptr_ptr   ret_size_ptr
//	  |             |
//	  v             v
//	[ ptr u32le ] [ size u32le ]
//	   +--> [ i t e m ]  (allocated by the guest)
func init() {
	registerEnv(hostcalls.ProxyDequeueSharedQueue, 3, ret32, func(vm *VM, mod api.Module, stack []uint64) {
		token := uint32(stack[0])
		vm.trace("==> %s(token=%d)", hostcalls.ProxyDequeueSharedQueue, token)
		queuesMu.Lock()
		q := queueByID[token]
		var item []byte
		st := hostcalls.StatusOK
		switch {
		case q == nil:
			st = hostcalls.StatusNotFound
		case len(q.items) == 0:
			st = hostcalls.StatusEmpty
		default:
			item = q.items[0]
			q.items = q.items[1:]
		}
		queuesMu.Unlock()
		if st == hostcalls.StatusOK {
			st = vm.copyOut(mod, item, uint32(stack[1]), uint32(stack[2]))
			vm.traceRet(st, "data=%q", item)
		} else {
			vm.traceRet(st, "")
		}
		setStatus(stack, st)
	})
}

// queueReady delivers proxy_on_queue_ready(root, token) to the VM.
func (vm *VM) queueReady(token uint32) {
	vm.enter()
	if !vm.retired && !vm.closed && vm.failed == nil {
		vm.curID, vm.cur = rootContextID, nil
		vm.callback(hostcalls.ExportQueueReady, 0, rootContextID, uint64(token))
	}
	vm.exit()
}
