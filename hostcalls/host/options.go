package host

import (
	"log/slog"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Balance selects how PickStream (the proxy) picks a VM for a request.
type Balance int

const (
	// LeastBusy picks the VM with the fewest active streams, ties broken
	// round-robin. The zero value.
	LeastBusy Balance = iota
	// RoundRobin picks VMs in turn.
	RoundRobin
)

// DefaultBufferLimit is Envoy's default per_connection_buffer_limit_bytes
// (1 MiB): the most a filter may buffer before 413 (request) or 500
// (response).
const DefaultBufferLimit = 1 << 20

// Options configures Module.Start. The zero value starts one worker VM with
// empty configurations, ProfileCppHost94091cd and the real clock.
type Options struct {
	// VMs is the number of worker VMs (Envoy's --concurrency); 0 means 1.
	// A canary VM is also started, configured and discarded before them.
	VMs int
	// VMID is vm_config.vm_id: the shared-data and shared-queue namespace.
	// Every Host of the process with the same VMID shares one store, as
	// every VM of an Envoy process with the same vm_id does.
	VMID string
	// PluginName is the plugin_name property (Istio: "<ns>.<name>").
	PluginName string
	// RootID is the plugin_root_id property (Istio: WasmPlugin pluginName).
	RootID string
	// PluginConfig is the PLUGIN_CONFIGURATION buffer (type 7) read in
	// proxy_on_configure.
	PluginConfig []byte
	// VMConfig is the VM_CONFIGURATION buffer (type 6) read in
	// proxy_on_vm_start.
	VMConfig []byte
	// Env is the guest's environment (vm_config.environment_variables).
	Env map[string]string
	// Clock is the time source; nil means RealClock{}.
	Clock Clock
	// Profile selects the cpp-host (and so the Envoy releases) emulated
	// where they differ: the WASI functions, poll_oneoff, the calls allowed
	// during _initialize and allocation (profile.go). The zero value is
	// ProfileCppHost94091cd (Envoy ≥ 1.39).
	Profile Profile
	// Seed, if non-zero, makes random_get deterministic (a per-VM stream
	// derived from Seed and the VM index); 0 uses crypto/rand.
	Seed uint64
	// Clusters maps proxy_http_call cluster names to base URLs
	// ("http://127.0.0.1:8080"). An unknown cluster is BAD_ARGUMENT.
	Clusters map[string]string
	// OriginalDst names clusters of type ORIGINAL_DST with
	// original_dst_lb_config.use_http_header, each with its header
	// ("": x-envoy-original-dst-host): a proxy_http_call to one goes to
	// the address in the call's header (see proxyHTTPCall).
	OriginalDst map[string]string
	// HTTPCallsOnWait keeps every http_call answer until Host.Wait, which
	// delivers them in the order the calls were made: on a VirtualClock
	// the answers then come at the same point of every run, where Envoy
	// delivers each on its event loop when it arrives (a test and
	// benchmark hook; the calls themselves still run in real time).
	HTTPCallsOnWait bool
	// ClusterName and RouteName are the xds.cluster_name and
	// xds.route_name properties of every stream.
	ClusterName, RouteName string
	// BufferLimit is per_connection_buffer_limit_bytes; 0 means
	// DefaultBufferLimit.
	BufferLimit int
	// AllowOnHeadersStopIteration is Envoy's (≥ 1.35) PluginConfig field
	// allow_on_headers_stop_iteration (cpp-host 7a212bc). False, the
	// default: a headers callback's StopIteration(1) is converted to
	// StopAllIterationAndWatermark (cpp-host
	// convertVmCallResultToFilterHeadersStatus) and the body callbacks
	// wait for proxy_continue_stream. True: it is a real StopIteration:
	// the headers stay unreleased (and mutable by the filter) while the
	// body callbacks are delivered, until the filter continues (Continue
	// from a body or trailers callback, or proxy_continue_stream from a
	// later callback); then the headers and the buffered body are passed
	// on together (Envoy's commonHandleAfterDataCallback / commonContinue).
	AllowOnHeadersStopIteration bool
	// LogLevel is what proxy_get_log_level answers; proxy_log below it is
	// dropped. The zero value (LogTrace) keeps everything.
	LogLevel hostcalls.LogLevel
	// Logger, if set, also receives every guest log line.
	Logger *slog.Logger
	// Transcript records, per VM, every host call and callback
	// (Host.Transcript). It costs a formatted string per call.
	Transcript bool
	// TranscriptWASI adds the WASI calls to the transcript (they are
	// many: the Go runtime reads the clock and random bytes often).
	TranscriptWASI bool
	// Balance selects how PickStream (the proxy) picks VMs.
	Balance Balance
	// SharedDataFault, if set, is a fault-injection hook that Envoy does
	// not have: it is called before every proxy_get_shared_data (op
	// SharedDataGet) and proxy_set_shared_data (op SharedDataSet) a guest
	// makes, with the index of the calling VM (CanaryVM for the canary)
	// and the key. StatusOK lets the call run; any other status is
	// returned to the guest instead and the store is neither read nor
	// written. StatusCASMismatch on SharedDataSet models a writer that
	// loses every compare-and-swap race (exhausted retries);
	// StatusInternalFailure, for example, a failing store. Host.SharedData
	// and Host.SetSharedData are not affected. It runs on the calling VM's
	// goroutine, on several VMs at once, so it must be safe for concurrent
	// use and must not call into the Host. A panic in it traps the guest
	// call that made the shared-data call, which fails the VM: a way for
	// tests to kill one VM at a chosen point.
	SharedDataFault func(vm int, op, key string) hostcalls.Status
	// BufferFault, if set, is a fault-injection hook that Envoy does not
	// have: it is called before every proxy_set_buffer_bytes a guest makes
	// on a buffer it may write, with the index of the calling VM and the
	// buffer type. StatusOK lets the call run; any other status is
	// returned to the guest instead and the buffer is left as it was (a
	// host that refuses a body rewrite). The same rules as for
	// SharedDataFault apply: safe for concurrent use, no call into the
	// Host.
	BufferFault func(vm int, t hostcalls.BufferType) hostcalls.Status
}

// The operations passed to Options.SharedDataFault.
const (
	// SharedDataGet is proxy_get_shared_data.
	SharedDataGet = "get"
	// SharedDataSet is proxy_set_shared_data.
	SharedDataSet = "set"
)

func (o *Options) defaults() {
	if o.VMs <= 0 {
		o.VMs = 1
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	if o.BufferLimit <= 0 {
		o.BufferLimit = DefaultBufferLimit
	}
}
