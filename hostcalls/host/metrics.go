package host

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Metric is a snapshot of one metric defined by the guest. Metrics are per
// Host (process-wide in Envoy): every VM defining the same name and type
// shares one.
type Metric struct {
	Name string
	Type hostcalls.MetricType
	// Value is the counter's count or the gauge's value (a gauge may be
	// negative); 0 for a histogram.
	Value int64
	// Samples are a histogram's recorded values, in order.
	Samples []uint64
}

type metricStore struct {
	mu     sync.Mutex
	byName map[string]uint32 // name + "\x00" + type
	list   []*Metric         // id-1 → metric
}

func newMetricStore() *metricStore { return &metricStore{byName: map[string]uint32{}} }

// maxHistogramSamples bounds the samples kept per histogram.
const maxHistogramSamples = 1 << 16

func (s *metricStore) define(t hostcalls.MetricType, name string) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fmt.Sprintf("%s\x00%d", name, t)
	if id, ok := s.byName[k]; ok {
		return id
	}
	s.list = append(s.list, &Metric{Name: name, Type: t})
	id := uint32(len(s.list))
	s.byName[k] = id
	return id
}

func (s *metricStore) lookup(id uint32) *Metric {
	if id == 0 || int(id) > len(s.list) {
		return nil
	}
	return s.list[id-1]
}

// increment: counter needs delta > 0; gauge adds delta; histogram refuses.
func (s *metricStore) increment(id uint32, delta int64) hostcalls.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.lookup(id)
	switch {
	case m == nil:
		return hostcalls.StatusNotFound
	case m.Type == hostcalls.MetricCounter:
		if delta <= 0 {
			return hostcalls.StatusBadArgument
		}
		m.Value += delta
	case m.Type == hostcalls.MetricGauge:
		m.Value += delta
	default:
		return hostcalls.StatusBadArgument
	}
	return hostcalls.StatusOK
}

// record: counter adds, gauge sets, histogram records a sample.
func (s *metricStore) record(id uint32, v uint64) hostcalls.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.lookup(id)
	switch {
	case m == nil:
		return hostcalls.StatusNotFound
	case m.Type == hostcalls.MetricCounter:
		m.Value += int64(v)
	case m.Type == hostcalls.MetricGauge:
		m.Value = int64(v)
	default:
		if len(m.Samples) >= maxHistogramSamples {
			m.Samples = append(m.Samples[:0], m.Samples[maxHistogramSamples/2:]...)
		}
		m.Samples = append(m.Samples, v)
	}
	return hostcalls.StatusOK
}

func (s *metricStore) get(id uint32) (uint64, hostcalls.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.lookup(id)
	switch {
	case m == nil:
		return 0, hostcalls.StatusNotFound
	case m.Type == hostcalls.MetricHistogram:
		return 0, hostcalls.StatusBadArgument
	}
	return uint64(m.Value), hostcalls.StatusOK
}

// Metrics returns a snapshot of every metric by name. A name defined with
// two types appears under the last-defined one; use MetricList for all.
func (h *Host) Metrics() map[string]Metric {
	out := map[string]Metric{}
	for _, m := range h.MetricList() {
		out[m.Name] = m
	}
	return out
}

// MetricList returns a snapshot of every metric in definition order.
func (h *Host) MetricList() []Metric {
	s := h.metrics
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Metric, len(s.list))
	for i, m := range s.list {
		out[i] = *m
		out[i].Samples = append([]uint64(nil), m.Samples...)
	}
	return out
}

// envoyHistogramBuckets are Envoy's default histogram bucket bounds.
var envoyHistogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// PrometheusName returns the name Envoy's Prometheus output gives a guest
// metric: Envoy registers it as "wasmcustom.<name>" and strips that
// prefix again without adding "envoy_", then replaces every character
// outside [a-zA-Z0-9_] (':' included) with '_'. It returns "" when Envoy
// does not export the metric: the sanitised name is empty or starts with
// a digit.
func PrometheusName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || (out[0] >= '0' && out[0] <= '9') {
		return ""
	}
	return out
}

// WritePrometheus writes every metric Envoy would export (see
// PrometheusName) in the Prometheus text format, sorted by name: counters
// and gauges as single samples, histograms with Envoy's default buckets,
// _sum and _count.
func (h *Host) WritePrometheus(w io.Writer) error {
	ms := h.MetricList()
	sort.SliceStable(ms, func(i, j int) bool { return PrometheusName(ms[i].Name) < PrometheusName(ms[j].Name) })
	bw := bufio.NewWriter(w)
	for _, m := range ms {
		name := PrometheusName(m.Name)
		if name == "" {
			continue
		}
		switch m.Type {
		case hostcalls.MetricCounter:
			fmt.Fprintf(bw, "# TYPE %s counter\n%s %d\n", name, name, m.Value)
		case hostcalls.MetricGauge:
			fmt.Fprintf(bw, "# TYPE %s gauge\n%s %d\n", name, name, m.Value)
		default:
			fmt.Fprintf(bw, "# TYPE %s histogram\n", name)
			var sum float64
			for _, v := range m.Samples {
				sum += float64(v)
			}
			for _, le := range envoyHistogramBuckets {
				n := 0
				for _, v := range m.Samples {
					if float64(v) <= le {
						n++
					}
				}
				fmt.Fprintf(bw, "%s_bucket{le=\"%s\"} %d\n", name, formatFloat(le), n)
			}
			fmt.Fprintf(bw, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", name, len(m.Samples), name, formatFloat(sum), name, len(m.Samples))
		}
	}
	return bw.Flush()
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%g", f)
}

// proxyDefineMetric is proxy_define_metric(type, name_ptr, name_len,
// ret_id_ptr) → status.
//
// Defines (or finds: same name and type give the same id) a metric. OK:
// the id is written. BAD_ARGUMENT: type is not 0..2.
// INVALID_MEMORY_ACCESS.
//
//	name_ptr          ret_id_ptr
//	  |                 |
//	  v                 v
//	[ n a m e ]  ...  [ id u32le ]
func proxyDefineMetric(vm *VM, mod api.Module, stack []uint64) {
	t := hostcalls.MetricType(uint32(stack[0]))
	name, ok := readString(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		setStatus(stack, hostcalls.StatusInvalidMemoryAccess)
		return
	}
	if vm.tracing {
		vm.trace("==> %s(type=%d,name=%q)", hostcalls.ProxyDefineMetric, t, name)
	}
	if t > hostcalls.MetricHistogram {
		setStatus(stack, hostcalls.StatusBadArgument)
		vm.traceRet(hostcalls.StatusBadArgument, "")
		return
	}
	id := vm.h.metrics.define(t, name)
	st := hostcalls.StatusOK
	if !writeU32(mod, uint32(stack[3]), id) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if vm.tracing {
		vm.traceRet(st, "id=%d", id)
	}
}

// proxyIncrementMetric is proxy_increment_metric(id, i64 delta) → status.
//
// Counter: delta must be > 0 (else BAD_ARGUMENT). Gauge: adds delta
// (may be negative). Histogram: BAD_ARGUMENT. NOT_FOUND: unknown id. No
// memory is touched.
func proxyIncrementMetric(vm *VM, _ api.Module, stack []uint64) {
	id, delta := uint32(stack[0]), int64(stack[1])
	if vm.tracing {
		vm.trace("==> %s(id=%d,delta=%d)", hostcalls.ProxyIncrementMetric, id, delta)
	}
	st := vm.h.metrics.increment(id, delta)
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyRecordMetric is proxy_record_metric(id, i64 value) → status.
//
// Counter: ADDS value (Envoy). Gauge: sets it. Histogram: records a
// sample. NOT_FOUND: unknown id. No memory is touched.
func proxyRecordMetric(vm *VM, _ api.Module, stack []uint64) {
	id, v := uint32(stack[0]), stack[1]
	if vm.tracing {
		vm.trace("==> %s(id=%d,value=%d)", hostcalls.ProxyRecordMetric, id, v)
	}
	st := vm.h.metrics.record(id, v)
	setStatus(stack, st)
	vm.traceRet(st, "")
}

// proxyGetMetric is proxy_get_metric(id, ret_u64_ptr) → status.
//
// OK: the value is written as u64 LE. BAD_ARGUMENT: a histogram.
// NOT_FOUND: unknown id. INVALID_MEMORY_ACCESS.
//
//	ret_u64_ptr
//	  |
//	  v
//	[ value u64le ]
func proxyGetMetric(vm *VM, mod api.Module, stack []uint64) {
	id := uint32(stack[0])
	if vm.tracing {
		vm.trace("==> %s(id=%d)", hostcalls.ProxyGetMetric, id)
	}
	v, st := vm.h.metrics.get(id)
	if st == hostcalls.StatusOK && !mod.Memory().WriteUint64Le(uint32(stack[1]), v) {
		st = hostcalls.StatusInvalidMemoryAccess
	}
	setStatus(stack, st)
	if st == hostcalls.StatusOK {
		if vm.tracing {
			vm.traceRet(st, "value=%d", v)
		}
	} else {
		vm.traceRet(st, "")
	}
}
