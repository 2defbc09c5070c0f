package host

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// hostFunction is one row of the tables below: the ABI name a guest
// imports, its signature and the Go function that implements it. The
// function receives the calling VM (found by wrap from the call's
// context), the calling module (for its memory) and wazero's stack: the
// parameters on entry, the result in stack[0] on return.
type hostFunction struct {
	name            string
	params, results []api.ValueType
	fn              func(vm *VM, mod api.Module, stack []uint64)
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// i32s returns n i32 parameters.
func i32s(n int) []api.ValueType {
	p := make([]api.ValueType, n)
	for i := range p {
		p[i] = i32
	}
	return p
}

// ret32 is the one i32 result (a proxy-wasm status or a WASI errno) of
// nearly every host function.
var ret32 = []api.ValueType{i32}

// envFunctions is the "env" module: every proxy_* import of ABI 0.2.1 and
// the few extras Envoy exports. Each function lives in the file of its
// family, named after its ABI name (proxy_get_buffer_bytes is
// proxyGetBufferBytes in buffer.go) and documented there.
var envFunctions = [...]hostFunction{
	// log.go
	{name: hostcalls.ProxyLog, params: i32s(3), results: ret32, fn: proxyLog},
	{name: hostcalls.ProxyGetLogLevel, params: i32s(1), results: ret32, fn: proxyGetLogLevel},

	// clock.go, timer.go
	{name: "proxy_get_current_time_nanoseconds", params: i32s(1), results: ret32, fn: proxyGetCurrentTimeNanoseconds},
	{name: hostcalls.ProxySetTickPeriod, params: i32s(1), results: ret32, fn: proxySetTickPeriodMilliseconds},

	// context.go
	{name: hostcalls.ProxySetEffectiveContext, params: i32s(1), results: ret32, fn: proxySetEffectiveContext},
	{name: hostcalls.ProxyDone, params: nil, results: ret32, fn: proxyDone},
	{name: hostcalls.ProxyGetStatus, params: i32s(3), results: ret32, fn: proxyGetStatus},
	{name: "proxy_call_foreign_function", params: i32s(6), results: ret32, fn: proxyCallForeignFunction},
	{name: "proxy_grpc_call", params: i32s(12), results: ret32, fn: proxyGrpcCall},
	{name: "proxy_grpc_stream", params: i32s(9), results: ret32, fn: proxyGrpcStream},
	{name: "proxy_grpc_send", params: i32s(4), results: ret32, fn: proxyGrpcSend},
	{name: "proxy_grpc_cancel", params: i32s(1), results: ret32, fn: proxyGrpcCancel},
	{name: "proxy_grpc_close", params: i32s(1), results: ret32, fn: proxyGrpcClose},
	{name: "envoy_resolve_dns", params: i32s(3), results: ret32, fn: envoyResolveDNS},
	{name: "pthread_equal", params: i32s(2), results: ret32, fn: pthreadEqual},
	{name: "emscripten_notify_memory_growth", params: i32s(1), results: nil, fn: emscriptenNotifyMemoryGrowth},

	// buffer.go
	{name: hostcalls.ProxyGetBufferBytes, params: i32s(5), results: ret32, fn: proxyGetBufferBytes},
	{name: hostcalls.ProxyGetBufferStatus, params: i32s(3), results: ret32, fn: proxyGetBufferStatus},
	{name: hostcalls.ProxySetBufferBytes, params: i32s(5), results: ret32, fn: proxySetBufferBytes},

	// headers.go
	{name: hostcalls.ProxyGetHeaderMapPairs, params: i32s(3), results: ret32, fn: proxyGetHeaderMapPairs},
	{name: hostcalls.ProxySetHeaderMapPairs, params: i32s(3), results: ret32, fn: proxySetHeaderMapPairs},
	{name: hostcalls.ProxyGetHeaderMapSize, params: i32s(2), results: ret32, fn: proxyGetHeaderMapSize},
	{name: hostcalls.ProxyGetHeaderMapValue, params: i32s(5), results: ret32, fn: proxyGetHeaderMapValue},
	{name: hostcalls.ProxyAddHeaderMapValue, params: i32s(5), results: ret32, fn: proxyAddHeaderMapValue},
	{name: hostcalls.ProxyReplaceHeaderMapValue, params: i32s(5), results: ret32, fn: proxyReplaceHeaderMapValue},
	{name: hostcalls.ProxyRemoveHeaderMapValue, params: i32s(3), results: ret32, fn: proxyRemoveHeaderMapValue},

	// http.go
	{name: hostcalls.ProxySendLocalResponse, params: i32s(8), results: ret32, fn: proxySendLocalResponse},
	{name: hostcalls.ProxyContinueStream, params: i32s(1), results: ret32, fn: proxyContinueStream},
	{name: hostcalls.ProxyCloseStream, params: i32s(1), results: ret32, fn: proxyCloseStream},
	{name: hostcalls.ProxyHTTPCall, params: i32s(10), results: ret32, fn: proxyHTTPCall},

	// shared_data.go
	{name: hostcalls.ProxyGetSharedData, params: i32s(5), results: ret32, fn: proxyGetSharedData},
	{name: hostcalls.ProxySetSharedData, params: i32s(5), results: ret32, fn: proxySetSharedData},

	// shared_queue.go
	{name: hostcalls.ProxyRegisterSharedQueue, params: i32s(3), results: ret32, fn: proxyRegisterSharedQueue},
	{name: hostcalls.ProxyResolveSharedQueue, params: i32s(5), results: ret32, fn: proxyResolveSharedQueue},
	{name: hostcalls.ProxyEnqueueSharedQueue, params: i32s(3), results: ret32, fn: proxyEnqueueSharedQueue},
	{name: hostcalls.ProxyDequeueSharedQueue, params: i32s(3), results: ret32, fn: proxyDequeueSharedQueue},

	// metrics.go
	{name: hostcalls.ProxyDefineMetric, params: i32s(4), results: ret32, fn: proxyDefineMetric},
	{name: hostcalls.ProxyIncrementMetric, params: []api.ValueType{i32, i64}, results: ret32, fn: proxyIncrementMetric},
	{name: hostcalls.ProxyRecordMetric, params: []api.ValueType{i32, i64}, results: ret32, fn: proxyRecordMetric},
	{name: hostcalls.ProxyGetMetric, params: i32s(2), results: ret32, fn: proxyGetMetric},

	// properties.go
	{name: hostcalls.ProxyGetProperty, params: i32s(4), results: ret32, fn: proxyGetProperty},
	{name: hostcalls.ProxySetProperty, params: i32s(4), results: ret32, fn: proxySetProperty},
}

// wasiFunctions is the WASI of the host (wasi.go), exported under both
// wasi_snapshot_preview1 and wasi_unstable: every function some WASI
// profile provides. Which of them a Host accepts as imports is
// wasiProvides(Options.Profile, name) (profile.go); a profile that answers
// a function differently picks the variant inside that function
// (poll_oneoff: pollOneoffNosys or pollOneoffFixed). Every row is a plain value, so
// another set of WASI functions is a subset of this table, or a copy with
// one row's fn replaced (e.g. poll_oneoff by pollOneoffNosys).
var wasiFunctions = [...]hostFunction{
	{name: "args_get", params: i32s(2), results: ret32, fn: argsGet},
	{name: "args_sizes_get", params: i32s(2), results: ret32, fn: argsSizesGet},
	{name: "environ_get", params: i32s(2), results: ret32, fn: environGet},
	{name: "environ_sizes_get", params: i32s(2), results: ret32, fn: environSizesGet},
	{name: "clock_time_get", params: []api.ValueType{i32, i64, i32}, results: ret32, fn: clockTimeGet},
	{name: "clock_res_get", params: i32s(2), results: ret32, fn: clockResGet},
	{name: "random_get", params: i32s(2), results: ret32, fn: randomGet},
	{name: "fd_write", params: i32s(4), results: ret32, fn: fdWrite},
	{name: "fd_pwrite", params: []api.ValueType{i32, i32, i32, i64, i32}, results: ret32, fn: fdPwrite},
	{name: "fd_read", params: i32s(4), results: ret32, fn: fdRead},
	{name: "fd_seek", params: []api.ValueType{i32, i64, i32, i32}, results: ret32, fn: fdSeek},
	{name: "fd_close", params: i32s(1), results: ret32, fn: fdClose},
	{name: "fd_fdstat_get", params: i32s(2), results: ret32, fn: fdFdstatGet},
	{name: "fd_fdstat_set_flags", params: i32s(2), results: ret32, fn: fdFdstatSetFlags},
	{name: "fd_prestat_get", params: i32s(2), results: ret32, fn: fdPrestatGet},
	{name: "fd_prestat_dir_name", params: i32s(3), results: ret32, fn: fdPrestatDirName},
	{name: "path_open", params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, results: ret32, fn: pathOpen},
	{name: "sched_yield", params: nil, results: ret32, fn: schedYield},
	{name: "poll_oneoff", params: i32s(4), results: ret32, fn: pollOneoff},
	{name: "proc_exit", params: i32s(1), results: nil, fn: procExit},
}

// lookup returns the row of fns named name (a linear scan: it runs when a
// Host starts and in tests, never per call).
func lookup(fns []hostFunction, name string) (hostFunction, bool) {
	for _, f := range fns {
		if f.name == name {
			return f, true
		}
	}
	return hostFunction{}, false
}
