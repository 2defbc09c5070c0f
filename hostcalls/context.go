package hostcalls

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Dispatch of the host's callbacks to the SDK's context interfaces.
//
// The host names every context by a u32 id. proxy_on_context_create(id, 0)
// creates a root context (types.PluginContext, from VMContext.NewPluginContext);
// proxy_on_context_create(id, root) creates an HTTP stream context
// (types.HttpContext, from the root's NewHttpContext). Both live in tables
// keyed by id until proxy_on_delete(id): roots in a map, streams in a
// streamTable.
//
// The end of an HTTP stream is signalled three times; Envoy's order is
// proxy_on_log, proxy_on_done, proxy_on_delete (Envoy conn_manager_impl.cc), the
// spec's is on_done before on_log, and proxytest calls only proxy_on_log.
// HttpContext.OnHttpStreamDone runs exactly once, at whichever of on_log and
// on_done comes first; on_delete drops the context. For a root context,
// on_done calls PluginContext.OnPluginDone and returns its answer.
//
// The id of the context whose callback is running is kept in current (0
// outside callbacks); SetEffectiveContext changes it along with the host's.
// Callbacks for unknown ids are ignored and answer Continue / false.
// On an HTTP/3 downstream Envoy calls proxy_on_log after proxy_on_delete
// (host.Stream.CompleteHTTP3 says where): the id is unknown by then and
// the call is ignored; every lookup compares the entry's id, so it cannot
// reach an entry reused for a newer stream.
//
// Per request the dispatcher allocates nothing once warm, and looks
// nothing up in a map: the stream entry last looked up is remembered (a
// stream's callbacks come one after the other), and so is the root last
// looked up (a VM usually has one); an entry deleted is kept for the next
// stream (at most maxFree of them). A PluginContext that implements
// HttpContextDeleter learns of each of its streams' proxy_on_delete, after
// which no callback reaches the stream's context, so that the plugin may
// reuse it too.

var vm = struct {
	ctx   types.VMContext
	roots map[uint32]*rootContext
	https streamTable
	// current is the context id of the running callback or the id last
	// passed to SetEffectiveContext.
	current uint32
	// calls are the pending DispatchHttpCall callbacks by token.
	calls map[uint32]httpCall
	// last is the stream entry last looked up (nil: none), lastRoot the
	// root (nil: none; when set it is in roots), free the deleted stream
	// entries kept for new streams.
	last     *httpContext
	lastRoot *rootContext
	free     []*httpContext
}{
	roots: map[uint32]*rootContext{},
	calls: map[uint32]httpCall{},
}

type rootContext struct {
	ctx types.PluginContext
	id  uint32
	del HttpContextDeleter // ctx's, or nil
}

type httpContext struct {
	ctx  types.HttpContext // nil: the root context declined the stream; callbacks pass through
	id   uint32
	root uint32
	done bool               // OnHttpStreamDone has run
	del  HttpContextDeleter // the root's, when it made ctx
}

// maxFree bounds the deleted stream entries kept for new streams.
const maxFree = 64

// HttpContextDeleter is implemented by a PluginContext that wants to know
// when the host deletes one of its streams (proxy_on_delete, a stream's
// last callback): DeleteHttpContext runs once per stream, with the context
// its NewHttpContext returned (not for a stream it declined with nil),
// after the stream has left the dispatcher, so that no callback reaches
// ctx afterwards and it may serve another stream. It must make no host
// call (the host is deleting the context).
type HttpContextDeleter interface {
	DeleteHttpContext(ctx types.HttpContext)
}

type httpCall struct {
	root     uint32
	callback func(numHeaders, bodySize, numTrailers int)
}

// SetVMContext registers the plugin's VM context. Call it once, from an
// init function or from main (which never runs in a reactor): the host calls
// proxy_on_context_create and proxy_on_vm_start only after the module's
// initialisation. It makes no host call. A later call replaces the context
// for roots created afterwards.
func SetVMContext(ctx types.VMContext) {
	vm.ctx = ctx
}

// CurrentContextID returns the id of the context whose callback is running
// (or the one last set with SetEffectiveContext), 0 outside callbacks.
func CurrentContextID() uint32 { return vm.current }

// enter makes id the current context and returns the previous one for leave.
func enter(id uint32) uint32 {
	prev := vm.current
	vm.current = id
	return prev
}

func leave(prev uint32) { vm.current = prev }

func onContextCreate(id, parent uint32) {
	defer leave(enter(id))
	if parent == 0 {
		vmctx := vm.ctx
		if vmctx == nil {
			vmctx = &types.DefaultVMContext{}
		}
		pc := vmctx.NewPluginContext(id)
		if pc == nil {
			pc = &types.DefaultPluginContext{}
		}
		r := &rootContext{ctx: pc, id: id}
		r.del, _ = pc.(HttpContextDeleter)
		vm.roots[id] = r
		vm.lastRoot = r
		return
	}
	var h *httpContext
	if n := len(vm.free); n > 0 {
		h = vm.free[n-1]
		vm.free[n-1] = nil
		vm.free = vm.free[:n-1]
		*h = httpContext{id: id, root: parent}
	} else {
		h = &httpContext{id: id, root: parent}
	}
	if r := rootCtx(parent); r != nil {
		h.ctx = r.ctx.NewHttpContext(id)
		if h.ctx != nil {
			h.del = r.del
		}
	}
	if vm.last != nil && vm.last.id == id {
		vm.last = nil // replaced
	}
	vm.https.put(h)
}

// rootCtx returns the root context of id, or nil: vm.lastRoot when it is
// id's, or when it is the only root and so id has none.
func rootCtx(id uint32) *rootContext {
	if r := vm.lastRoot; r != nil {
		if r.id == id {
			return r
		}
		if len(vm.roots) == 1 {
			return nil
		}
	}
	r := vm.roots[id]
	if r != nil {
		vm.lastRoot = r
	}
	return r
}

func onVMStart(root, size uint32) bool {
	defer leave(enter(root))
	vmctx := vm.ctx
	if vmctx == nil {
		return true
	}
	return bool(vmctx.OnVMStart(int(size)))
}

func onConfigure(root, size uint32) bool {
	defer leave(enter(root))
	r := rootCtx(root)
	if r == nil {
		return false
	}
	return bool(r.ctx.OnPluginStart(int(size)))
}

func onTick(root uint32) {
	defer leave(enter(root))
	if r := rootCtx(root); r != nil {
		r.ctx.OnTick()
	}
}

func onQueueReady(root, queue uint32) {
	defer leave(enter(root))
	if r := rootCtx(root); r != nil {
		r.ctx.OnQueueReady(queue)
	}
}

func onHTTPCallResponse(root, token, numHeaders, bodySize, numTrailers uint32) {
	defer leave(enter(root))
	c, ok := vm.calls[token]
	if !ok {
		return
	}
	delete(vm.calls, token)
	if c.callback != nil {
		c.callback(int(numHeaders), int(bodySize), int(numTrailers))
	}
}

// stream returns the HttpContext of id, or nil for an unknown or declined
// stream (whose callbacks answer Continue).
func stream(id uint32) types.HttpContext {
	if h := lookup(id); h != nil {
		return h.ctx
	}
	return nil
}

// lookup returns the stream entry of id, or nil: vm.last when it is id's.
func lookup(id uint32) *httpContext {
	if h := vm.last; h != nil && h.id == id {
		return h
	}
	h := vm.https.get(id)
	if h != nil {
		vm.last = h
	}
	return h
}

func onRequestHeaders(id, n uint32, eos bool) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpRequestHeaders(int(n), eos)
	}
	return types.ActionContinue
}

func onRequestBody(id, size uint32, eos bool) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpRequestBody(int(size), eos)
	}
	return types.ActionContinue
}

func onRequestTrailers(id, n uint32) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpRequestTrailers(int(n))
	}
	return types.ActionContinue
}

func onResponseHeaders(id, n uint32, eos bool) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpResponseHeaders(int(n), eos)
	}
	return types.ActionContinue
}

func onResponseBody(id, size uint32, eos bool) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpResponseBody(int(size), eos)
	}
	return types.ActionContinue
}

func onResponseTrailers(id, n uint32) types.Action {
	defer leave(enter(id))
	if h := stream(id); h != nil {
		return h.OnHttpResponseTrailers(int(n))
	}
	return types.ActionContinue
}

// streamDone runs OnHttpStreamDone once per stream.
func streamDone(id uint32) {
	h := lookup(id)
	if h == nil || h.done {
		return
	}
	h.done = true
	if h.ctx != nil {
		h.ctx.OnHttpStreamDone()
	}
}

func onLog(id uint32) {
	defer leave(enter(id))
	streamDone(id)
}

func onDone(id uint32) bool {
	defer leave(enter(id))
	if r := rootCtx(id); r != nil {
		return r.ctx.OnPluginDone()
	}
	streamDone(id)
	return true
}

func onDelete(id uint32) {
	if h := lookup(id); h != nil {
		vm.https.remove(id)
		vm.last = nil
		if h.del != nil {
			h.del.DeleteHttpContext(h.ctx)
		}
		if len(vm.free) < maxFree {
			*h = httpContext{}
			vm.free = append(vm.free, h)
		}
	}
	if r := rootCtx(id); r != nil {
		delete(vm.roots, id)
		if vm.lastRoot == r {
			vm.lastRoot = nil
		}
		for token, c := range vm.calls {
			if c.root == id {
				delete(vm.calls, token)
			}
		}
	}
	if vm.current == id {
		vm.current = 0
	}
}

// rootOf returns the root context id of the current context: itself for a
// root, its parent for a stream, 0 if unknown.
func rootOf(id uint32) uint32 {
	if rootCtx(id) != nil {
		return id
	}
	if h := lookup(id); h != nil {
		return h.root
	}
	return 0
}
