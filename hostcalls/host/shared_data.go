package host

import (
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// sharedStore is the shared data of one vm_id, used by every VM of every
// Host of the process with that vm_id (cpp-host keeps one process-wide map
// keyed by (vm_id, key)). It lives while some Host holds it; when the last
// one releases it, the vm_id's shared queues go too (shared_queue.go).
type sharedStore struct {
	vmID string
	refs int // guarded by storesMu

	mu   sync.Mutex
	cas  uint32
	data map[string]sharedValue
}

// sharedValue is a stored value. Its bytes are never changed in place (a
// set stores new ones), so a reader may keep them after unlocking.
type sharedValue struct {
	key   string // the map's key, so that a set of an existing key allocates none
	value []byte
	cas   uint32
}

var (
	storesMu sync.Mutex
	stores   = map[string]*sharedStore{}
)

func acquireStore(vmID string) *sharedStore {
	storesMu.Lock()
	defer storesMu.Unlock()
	s := stores[vmID]
	if s == nil {
		s = &sharedStore{vmID: vmID, data: map[string]sharedValue{}}
		stores[vmID] = s
	}
	s.refs++
	return s
}

func releaseStore(s *sharedStore) {
	storesMu.Lock()
	defer storesMu.Unlock()
	s.refs--
	if s.refs == 0 && stores[s.vmID] == s {
		delete(stores, s.vmID)
		deleteQueues(s.vmID)
	}
}

// nextCAS returns the next value of the store's CAS counter: it starts at 1
// and skips 0 on wrap. Caller holds mu.
func (s *sharedStore) nextCAS() uint32 {
	s.cas++
	if s.cas == 0 {
		s.cas = 1
	}
	return s.cas
}

// get returns the value of key and its cas. The value is the stored
// bytes, not a copy: the caller must not change them.
func (s *sharedStore) get(key []byte) ([]byte, uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[string(key)]
	if !ok {
		return nil, 0, false
	}
	return v.value, v.cas, true
}

// set applies Envoy's rules: a missing key is always set whatever cas; on
// an existing key cas 0 is unconditional and any other cas must equal the
// key's current cas, else CAS_MISMATCH. The store keeps value, which the
// caller must not change afterwards.
func (s *sharedStore) set(key []byte, value []byte, cas uint32) hostcalls.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[string(key)]
	if ok && cas != 0 && cas != v.cas {
		return hostcalls.StatusCASMismatch
	}
	k := v.key
	if !ok {
		k = string(key)
	}
	s.data[k] = sharedValue{key: k, value: value, cas: s.nextCAS()}
	return hostcalls.StatusOK
}

// SharedData returns a copy of the value stored under key in the Host's
// vm_id namespace, its cas, and whether the key exists.
func (h *Host) SharedData(key string) ([]byte, uint32, bool) {
	v, cas, ok := h.store.get([]byte(key))
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), v...), cas, true
}

// SetSharedData sets key with proxy_set_shared_data's rules (cas 0 on an
// existing key is unconditional) and returns the status a guest would get.
func (h *Host) SetSharedData(key string, value []byte, cas uint32) hostcalls.Status {
	return h.store.set([]byte(key), append([]byte(nil), value...), cas)
}

// SharedDataKeys returns the number of keys in the store.
func (h *Host) SharedDataKeys() int {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	return len(h.store.data)
}

// sharedDataFault asks Options.SharedDataFault whether the guest's
// shared-data call op on key fails: StatusOK (also without a hook) lets it
// run, any other status is the call's answer.
func (vm *VM) sharedDataFault(op string, key []byte) hostcalls.Status {
	f := vm.h.opts.SharedDataFault
	if f == nil {
		return hostcalls.StatusOK
	}
	return f(vm.index, op, string(key))
}

// proxyGetSharedData is proxy_get_shared_data(key_ptr, key_len, ret_ptr_ptr,
// ret_size_ptr, ret_cas_ptr) → status.
//
// Reads key from the vm_id's store. OK: the value is copied into guest
// memory allocated by the guest's allocator and its address, size and cas
// are written to the three slots; an empty value is ptr=0,size=0 with no
// allocation. NOT_FOUND: the key does not exist (slots untouched).
// INVALID_MEMORY_ACCESS: a pointer is out of range. With
// Options.SharedDataFault, the status the hook answers instead.
//
//	key_ptr            ret_ptr_ptr   ret_size_ptr  ret_cas_ptr
//	  |                   |             |             |
//	  v                   v             v             v
//	[ k e y ]  ...  [ ptr u32le ] [ size u32le ] [ cas u32le ]
//	                    |
//	                    +--> [ v a l u e ]   (allocated by the guest)
func proxyGetSharedData(vm *VM, mod api.Module, stack []uint64) {
	// A view of guest memory: used before copyOut runs the guest.
	key, ok := view(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		vm.traceRet(hostcalls.StatusInvalidMemoryAccess, "")
		return
	}
	if vm.tracing {
		vm.trace("==> %s(key=%q)", hostcalls.ProxyGetSharedData, key)
	}
	if st := vm.sharedDataFault(SharedDataGet, key); st != hostcalls.StatusOK {
		setStatus(stack, st)
		vm.traceRet(st, "")
		return
	}
	value, cas, found := vm.h.store.get(key)
	if !found {
		setStatus(stack, hostcalls.StatusNotFound)
		vm.traceRet(hostcalls.StatusNotFound, "")
		return
	}
	if !writeU32(mod, uint32(stack[4]), cas) {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		vm.traceRet(hostcalls.StatusInvalidMemoryAccess, "")
		return
	}
	st := vm.copyOut(mod, value, uint32(stack[2]), uint32(stack[3]))
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "value=%q cas=%d", value, cas)
	}
}

// proxySetSharedData is proxy_set_shared_data(key_ptr, key_len, value_ptr,
// value_len, cas) → status.
//
// Sets key in the vm_id's store to the value. OK: stored with the next
// value of the global CAS counter. A missing key is always set whatever
// cas; on an existing key cas=0 is unconditional. CAS_MISMATCH: the key
// exists and cas is neither 0 nor its current cas. INVALID_MEMORY_ACCESS.
// With Options.SharedDataFault, the status the hook answers instead
// (nothing is stored).
//
//	key_ptr              value_ptr
//	  |                    |
//	  v                    v
//	[ k e y ]   ...   [ v a l u e ]
func proxySetSharedData(vm *VM, mod api.Module, stack []uint64) {
	key, ok1 := view(mod, uint32(stack[0]), uint32(stack[1]))
	value, ok2 := read(mod, uint32(stack[2]), uint32(stack[3]))
	cas := uint32(stack[4])
	if !ok1 || !ok2 {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		vm.traceRet(hostcalls.StatusInvalidMemoryAccess, "")
		return
	}
	if vm.tracing {
		vm.trace("==> %s(key=%q,value=%q,cas=%d)", hostcalls.ProxySetSharedData, key, value, cas)
	}
	st := vm.sharedDataFault(SharedDataSet, key)
	if st == hostcalls.StatusOK {
		st = vm.h.store.set(key, value, cas)
	}
	setStatus(stack, st)
	vm.traceRet(st, "")
}
