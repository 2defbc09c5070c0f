// Package script is the interpreter of the conformance modules
// (hostcalls/internal/conformance and .../basic): a plugin whose every
// callback logs one line and then runs the host calls a JSON script lists,
// logging each call's arguments, results and status. See
// ../doc.go (package main of hostcalls/internal/conformance) for the script
// format and the transcript it produces.
package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Callback names: the keys of Script.On and Script.Return.
const (
	OnVMStart          = "vm_start"
	OnConfigure        = "configure"
	OnTick             = "tick"
	OnQueueReady       = "queue_ready"
	OnHTTPCallResponse = "http_call_response"
	OnRequestHeaders   = "request_headers"
	OnRequestBody      = "request_body"
	OnRequestTrailers  = "request_trailers"
	OnResponseHeaders  = "response_headers"
	OnResponseBody     = "response_body"
	OnResponseTrailers = "response_trailers"
	OnStreamDone       = "stream_done"
	OnPluginDone       = "plugin_done"
)

var callbacks = []string{OnVMStart, OnConfigure, OnTick, OnQueueReady, OnHTTPCallResponse,
	OnRequestHeaders, OnRequestBody, OnRequestTrailers, OnResponseHeaders, OnResponseBody,
	OnResponseTrailers, OnStreamDone, OnPluginDone}

// Script is the plugin configuration (and, for vm_start steps, the VM
// configuration) of a conformance module.
type Script struct {
	// On lists the steps to run in each callback, by callback name.
	On map[string][]Step `json:"on"`
	// Return overrides what a callback answers: the action of an HTTP
	// callback (default 0, Continue) or, for configure, vm_start and
	// plugin_done, 0 for false (default true).
	Return map[string]uint32 `json:"return"`
}

// Step is one host call. Call names the host function without its proxy_
// prefix; the other fields are its arguments (see doc.go for which call
// uses which).
type Step struct {
	Call     string      `json:"call"`
	Level    string      `json:"level,omitempty"`
	Msg      string      `json:"msg,omitempty"`
	Buffer   string      `json:"buffer,omitempty"`
	Map      string      `json:"map,omitempty"`
	Stream   string      `json:"stream,omitempty"`
	Metric   string      `json:"metric,omitempty"`
	Key      string      `json:"key,omitempty"`
	Value    string      `json:"value,omitempty"`
	Name     string      `json:"name,omitempty"`
	VMID     string      `json:"vm_id,omitempty"`
	Path     []string    `json:"path,omitempty"`
	Pairs    [][2]string `json:"pairs,omitempty"`
	Trailers [][2]string `json:"trailers,omitempty"`
	Start    int         `json:"start,omitempty"`
	Size     int         `json:"size,omitempty"`
	Max      *int        `json:"max,omitempty"`
	CAS      uint32      `json:"cas,omitempty"`
	N        int64       `json:"n,omitempty"`
	ID       *uint32     `json:"id,omitempty"`
	Status   uint32      `json:"status,omitempty"`
	Details  string      `json:"details,omitempty"`
	Body     string      `json:"body,omitempty"`
	GRPC     *int32      `json:"grpc,omitempty"`
	Upstream string      `json:"upstream,omitempty"`
	Timeout  uint32      `json:"timeout,omitempty"`
	Ctx      uint32      `json:"ctx,omitempty"`
	// Hash prints returned bytes as len=N fnv=<16 hex digits of FNV-1a 64>
	// instead of quoting them (for large bodies).
	Hash bool `json:"hash,omitempty"`
	// Repeat makes the value argument Value repeated Repeat times (when > 1).
	Repeat int `json:"repeat,omitempty"`
}

// value is the step's value argument: Value, Repeat times.
func (s Step) value() string {
	if s.Repeat > 1 {
		return strings.Repeat(s.Value, s.Repeat)
	}
	return s.Value
}

// valueArg formats the value argument like bytesResult formats results.
func (s Step) valueArg() string { return bytesResult(s, "value", []byte(s.value())) }

// Call runs one step: it returns the formatted arguments, the formatted
// results (empty if none) and the host's error.
type Call func(e *Env, s Step) (args, results string, err error)

// Family is a set of calls by name. A module includes only the families its
// main package passes to Register, so the host functions of the others are
// not imported (Go drops unused wasmimports).
type Family map[string]Call

// Env is the state steps share within one VM: ids remembered by name and
// the stream that issued the last http_call.
type Env struct {
	calls     Family
	queues    map[string]uint32
	lastQueue uint32
	metrics   map[string]uint32
	// callerCtx is the context that issued the last http_call.
	callerCtx uint32
	// script is the script of the running callback.
	script *Script
}

// Register installs the conformance plugin with the union of families as
// its vocabulary. Call it from the main package's init; it makes no host
// call.
func Register(families ...Family) {
	e := &Env{calls: Family{}, queues: map[string]uint32{}, metrics: map[string]uint32{}}
	for _, f := range families {
		for name, c := range f {
			e.calls[name] = c
		}
	}
	hostcalls.SetVMContext(&vmContext{env: e})
}

// Parse decodes and checks a script: unknown fields, unknown callbacks and
// calls the module does not include are errors.
func (e *Env) Parse(data []byte) (*Script, error) {
	var s Script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("script: %v", err)
	}
	known := map[string]bool{}
	for _, c := range callbacks {
		known[c] = true
	}
	for cb, steps := range s.On {
		if !known[cb] {
			return nil, fmt.Errorf("script: on.%s: unknown callback", cb)
		}
		for i, st := range steps {
			if _, ok := e.calls[st.Call]; !ok {
				return nil, fmt.Errorf("script: on.%s[%d].call: %q is not in this module", cb, i, st.Call)
			}
		}
	}
	for cb := range s.Return {
		if !known[cb] {
			return nil, fmt.Errorf("script: return.%s: unknown callback", cb)
		}
	}
	return &s, nil
}

// kept holds every byte slice and log line the module passed to the host
// (see hold).
var kept [][]byte

// hold keeps b reachable for the life of the VM and returns it. The SDK's
// proxytest emulator stores log messages, queue items, bodies, properties
// and local-response bodies as references into guest memory instead of
// copies, so memory the guest frees and reuses would change what that host
// reports. The test-only module therefore never lets such memory go; a
// plugin need not (Envoy and our host copy).
func hold(b []byte) []byte {
	kept = append(kept, b)
	return b
}

// keptLines holds every message the module logged (see hold).
var keptLines []string

// logLine logs line at info and keeps it (see hold).
func logLine(line string) {
	keptLines = append(keptLines, line)
	hostcalls.LogInfo(line)
}

// logCritical logs msg at critical and keeps it (see hold).
func logCritical(msg string) {
	keptLines = append(keptLines, msg)
	hostcalls.LogCritical(msg)
}

// run logs the callback's line and runs its steps.
func (e *Env) run(s *Script, callback, line string) {
	logLine(line)
	if s == nil {
		return
	}
	e.script = s
	for _, st := range s.On[callback] {
		args, results, err := e.calls[st.Call](e, st)
		if results != "" {
			results += " "
		}
		logLine(fmt.Sprintf("%s(%s) -> %sstatus=%s", st.Call, args, results, hostcalls.StatusOf(err)))
	}
}

// ret is the script's answer for callback, def if it sets none.
func ret(s *Script, callback string, def uint32) uint32 {
	if s == nil {
		return def
	}
	if v, ok := s.Return[callback]; ok {
		return v
	}
	return def
}

type vmContext struct {
	env *Env
}

// OnVMStart implements types.VMContext.
func (v *vmContext) OnVMStart(size int) types.OnVMStartStatus {
	var s *Script
	line := fmt.Sprintf("on_vm_start(vm_config_size=%d)", size)
	if size > 0 {
		data, err := hostcalls.GetVMConfiguration()
		if err == nil {
			s, err = v.env.Parse(data)
		}
		if err != nil {
			logLine(line)
			logCritical(err.Error())
			return false
		}
	}
	v.env.run(s, OnVMStart, line)
	return ret(s, OnVMStart, 1) != 0
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(id uint32) types.PluginContext {
	logLine(fmt.Sprintf("on_context_create(ctx=%d parent=0)", id))
	return &pluginContext{env: v.env, id: id}
}

type pluginContext struct {
	types.DefaultPluginContext
	env    *Env
	id     uint32
	script *Script
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(size int) types.OnPluginStartStatus {
	line := fmt.Sprintf("on_configure(ctx=%d config_size=%d)", p.id, size)
	data, err := hostcalls.GetPluginConfiguration()
	if err == nil {
		p.script, err = p.env.Parse(data)
	}
	if err != nil {
		logLine(line)
		logCritical(err.Error())
		return false
	}
	p.env.run(p.script, OnConfigure, line)
	return ret(p.script, OnConfigure, 1) != 0
}

// OnTick implements types.PluginContext.
func (p *pluginContext) OnTick() {
	p.env.run(p.script, OnTick, fmt.Sprintf("on_tick(ctx=%d)", p.id))
}

// OnQueueReady implements types.PluginContext.
func (p *pluginContext) OnQueueReady(queue uint32) {
	p.env.run(p.script, OnQueueReady, fmt.Sprintf("on_queue_ready(ctx=%d queue=%d)", p.id, queue))
}

// OnPluginDone implements types.PluginContext.
func (p *pluginContext) OnPluginDone() bool {
	p.env.run(p.script, OnPluginDone, fmt.Sprintf("on_done(ctx=%d)", p.id))
	return ret(p.script, OnPluginDone, 1) != 0
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	logLine(fmt.Sprintf("on_context_create(ctx=%d parent=%d)", id, p.id))
	return &httpContext{root: p, id: id}
}

type httpContext struct {
	root *pluginContext
	id   uint32
}

func (h *httpContext) cb(callback, line string) types.Action {
	h.root.env.run(h.root.script, callback, line)
	return types.Action(ret(h.root.script, callback, 0))
}

// OnHttpRequestHeaders implements types.HttpContext.
func (h *httpContext) OnHttpRequestHeaders(n int, eos bool) types.Action {
	return h.cb(OnRequestHeaders, fmt.Sprintf("on_request_headers(ctx=%d headers=%d eos=%t)", h.id, n, eos))
}

// OnHttpRequestBody implements types.HttpContext.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	return h.cb(OnRequestBody, fmt.Sprintf("on_request_body(ctx=%d size=%d eos=%t)", h.id, size, eos))
}

// OnHttpRequestTrailers implements types.HttpContext.
func (h *httpContext) OnHttpRequestTrailers(n int) types.Action {
	return h.cb(OnRequestTrailers, fmt.Sprintf("on_request_trailers(ctx=%d trailers=%d)", h.id, n))
}

// OnHttpResponseHeaders implements types.HttpContext.
func (h *httpContext) OnHttpResponseHeaders(n int, eos bool) types.Action {
	return h.cb(OnResponseHeaders, fmt.Sprintf("on_response_headers(ctx=%d headers=%d eos=%t)", h.id, n, eos))
}

// OnHttpResponseBody implements types.HttpContext.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	return h.cb(OnResponseBody, fmt.Sprintf("on_response_body(ctx=%d size=%d eos=%t)", h.id, size, eos))
}

// OnHttpResponseTrailers implements types.HttpContext.
func (h *httpContext) OnHttpResponseTrailers(n int) types.Action {
	return h.cb(OnResponseTrailers, fmt.Sprintf("on_response_trailers(ctx=%d trailers=%d)", h.id, n))
}

// OnHttpStreamDone implements types.HttpContext.
func (h *httpContext) OnHttpStreamDone() {
	h.cb(OnStreamDone, fmt.Sprintf("on_stream_done(ctx=%d)", h.id))
}

// Formatting helpers shared by the families.

func q(s string) string { return fmt.Sprintf("%q", s) }

func qb(b []byte) string { return fmt.Sprintf("%q", b) }

// bytesResult formats returned bytes as name="..." or, with s.Hash,
// name_len=N name_fnv=<hex>.
func bytesResult(s Step, name string, b []byte) string {
	if !s.Hash {
		return name + "=" + qb(b)
	}
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%s_len=%d %s_fnv=%016x", name, len(b), name, h.Sum64())
}

func pairsJSON(p [][2]string) string {
	if p == nil {
		p = [][2]string{}
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func maxOf(s Step) int {
	if s.Max == nil {
		return math.MaxInt32
	}
	return *s.Max
}

func maxArg(s Step) string {
	if s.Max == nil {
		return "max"
	}
	return fmt.Sprint(*s.Max)
}

func pathArg(p []string) string {
	if p == nil {
		p = []string{}
	}
	b, _ := json.Marshal(p)
	return string(b)
}
