package host

import (
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// queue is a shared queue, as cpp-host's SharedQueue keeps it
// (src/shared_queue.cc): registered by (vm_id, name), owned by the VM
// whose context registered it last (a re-registration keeps the token and
// the items and moves the owner), which gets proxy_on_queue_ready on its
// root context. Any VM of any vm_id that knows the token may enqueue and
// dequeue.
type queue struct {
	token uint32
	vmID  string
	owner *VM
	items [][]byte
}

// Queue tokens are process-wide, as cpp-host's one global SharedQueue
// hands them out, so that a token resolved in another vm_id names one
// queue. A vm_id's queues are deleted with its shared-data store (when
// the last Host with that vm_id closes), as cpp-host deletes them when the
// last VM of the vm_id goes (SharedQueue::deleteByVmId).
var (
	queuesMu    sync.Mutex
	queueTokens uint32
	queueByName = map[[2]string]*queue{}
	queueByID   = map[uint32]*queue{}
)

// nextQueueToken returns an unused token, never 0 (cpp-host
// SharedQueue::nextQueueToken). Caller holds queuesMu.
func nextQueueToken() uint32 {
	for {
		queueTokens++
		if queueTokens != 0 && queueByID[queueTokens] == nil {
			return queueTokens
		}
	}
}

// deleteQueues forgets every queue registered in vmID: later enqueues and
// dequeues with their tokens answer NOT_FOUND.
func deleteQueues(vmID string) {
	queuesMu.Lock()
	defer queuesMu.Unlock()
	for k, q := range queueByName {
		if k[0] == vmID {
			delete(queueByName, k)
			delete(queueByID, q.token)
		}
	}
}

// proxyRegisterSharedQueue is proxy_register_shared_queue(name_ptr,
// name_len, ret_token_ptr) → status.
//
// Registers the queue name in the VM's vm_id (or re-registers it: the
// token and the items stay, the calling VM becomes the owner that receives
// proxy_on_queue_ready on its root context, whichever context registers).
// Every worker VM of a plugin runs the same code, so a name registered by
// all of them ends up owned by the last one: a VM that wants to be woken
// registers a name of its own. OK: the token is written to ret_token_ptr.
// INVALID_MEMORY_ACCESS.
//
//	name_ptr         ret_token_ptr
//	  |                 |
//	  v                 v
//	[ n a m e ]  ... [ token u32le ]
func proxyRegisterSharedQueue(vm *VM, mod api.Module, stack []uint64) {
	name, ok := readString(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing {
		vm.trace("==> %s(name=%q)", hostcalls.ProxyRegisterSharedQueue, name)
	}
	queuesMu.Lock()
	k := [2]string{vm.h.opts.VMID, name}
	q := queueByName[k]
	if q == nil {
		q = &queue{token: nextQueueToken(), vmID: k[0]}
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
	if vm.tracing {
		vm.traceRet(st, "token=%d", token)
	}
}

// proxyResolveSharedQueue is proxy_resolve_shared_queue(vm_id_ptr,
// vm_id_len, name_ptr, name_len, ret_token_ptr) → status.
//
// Finds the queue name registered in vm_id; an empty vm_id means the
// calling VM's own (cpp-host ContextBase::lookupSharedQueue). OK: token
// written. NOT_FOUND: no such queue. INVALID_MEMORY_ACCESS.
//
//	vm_id_ptr        name_ptr        ret_token_ptr
//	  |                |                |
//	  v                v                v
//	[ v m _ i d ] .. [ n a m e ] ..  [ token u32le ]
func proxyResolveSharedQueue(vm *VM, mod api.Module, stack []uint64) {
	vmID, ok1 := readString(mod, uint32(stack[0]), uint32(stack[1]))
	name, ok2 := readString(mod, uint32(stack[2]), uint32(stack[3]))
	if !ok1 || !ok2 {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing {
		vm.trace("==> %s(vm_id=%q,name=%q)", hostcalls.ProxyResolveSharedQueue, vmID, name)
	}
	if vmID == "" {
		vmID = vm.h.opts.VMID
	}
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
	if vm.tracing {
		vm.traceRet(st, "token=%d", q.token)
	}
}

// proxyEnqueueSharedQueue is proxy_enqueue_shared_queue(token, data_ptr,
// data_len) → status.
//
// Appends a copy of the data to the queue. OK: the owner VM gets
// proxy_on_queue_ready(root, token) once the calling callback has returned
// and the calling VM is unlocked, never inside this call (Envoy posts it
// to the owner's dispatcher: cpp-host SharedQueue::enqueue →
// call_on_thread), also when the owner is the calling VM. The
// notification is dropped if the owner's root context is gone (deleted
// after a reconfiguration), its instance closed, or it has
// failed by then (cpp-host finds no Wasm or no root context on that
// thread); the item stays queued and enqueue still answers OK. NOT_FOUND:
// no such token (never registered, or its vm_id is gone).
// INVALID_MEMORY_ACCESS.
//
//	data_ptr
//	  |
//	  v
//	[ d a t a ]
func proxyEnqueueSharedQueue(vm *VM, mod api.Module, stack []uint64) {
	token := uint32(stack[0])
	data, ok := read(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing {
		vm.trace("==> %s(token=%d,data=%q)", hostcalls.ProxyEnqueueSharedQueue, token, data)
	}
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
}

// proxyDequeueSharedQueue is proxy_dequeue_shared_queue(token, ret_ptr_ptr,
// ret_size_ptr) → status.
//
// Removes the oldest item. OK: copied out like shared data (empty item:
// ptr=0,size=0). EMPTY: the queue has no item. NOT_FOUND: no such token.
//
//	ret_ptr_ptr   ret_size_ptr
//	  |             |
//	  v             v
//	[ ptr u32le ] [ size u32le ]
//	   +--> [ i t e m ]  (allocated by the guest)
func proxyDequeueSharedQueue(vm *VM, mod api.Module, stack []uint64) {
	token := uint32(stack[0])
	if vm.tracing {
		vm.trace("==> %s(token=%d)", hostcalls.ProxyDequeueSharedQueue, token)
	}
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
		if vm.tracing {
			vm.traceRet(st, "data=%q", item)
		}
	} else {
		vm.traceRet(st, "")
	}
	setStatus(stack, st)
}

// queueReady delivers proxy_on_queue_ready(root, token) to the VM with the
// root context effective, unless its root context was deleted, the VM
// closed or failed. A retired VM still waiting for proxy_done is notified.
func (vm *VM) queueReady(token uint32) {
	vm.enter()
	if !vm.rootGone && !vm.closed && vm.failed == nil {
		vm.curID, vm.cur = rootContextID, nil
		vm.callback(cbQueueReady, 0, rootContextID, uint64(token))
	}
	vm.exit()
}
