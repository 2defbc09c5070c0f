package hostcalls

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

// proxy_define_metric(type, name_ptr, name_len, ret_id_ptr) → status
//
//	name_ptr   ──► [ name_len bytes ]    (read)
//	ret_id_ptr ──► [ u32 LE metric id ]  (written)
//
// Envoy registers the name as "wasmcustom.<name>", process-wide: every VM
// that defines the same name shares the metric. Results: OK; BAD_ARGUMENT for
// an unknown type. Ids may be 0 (proxytest starts there).
//
// proxy_increment_metric(metric_id, delta i64) → status
// proxy_record_metric(metric_id, value i64) → status
//
// No memory. Envoy: a counter's increment needs delta > 0 (else BAD_ARGUMENT)
// and its record adds; a gauge's record sets and increment adds a signed
// delta; a histogram only records. NOT_FOUND for an unknown id.
//
// proxy_get_metric(metric_id, ret_value_ptr) → status
//
//	ret_value_ptr ──► [ u64 LE value ]   (written)
//
// BAD_ARGUMENT for a histogram; NOT_FOUND for an unknown id.

// DefineMetric defines a metric of type mt named name and returns its id.
func DefineMetric(mt MetricType, name string) (uint32, error) {
	beginCall(0)
	if err := Status(proxyDefineMetric(uint32(mt), strPtr(name), u32(len(name)), &retU32)).Err(); err != nil {
		return 0, err
	}
	return retU32, nil
}

// IncrementMetric adds delta to metric id.
func IncrementMetric(id uint32, delta int64) error {
	return Status(proxyIncrementMetric(id, delta)).Err()
}

// RecordMetric records value on metric id.
func RecordMetric(id uint32, value uint64) error {
	return Status(proxyRecordMetric(id, value)).Err()
}

// GetMetric returns the value of metric id.
func GetMetric(id uint32) (uint64, error) {
	beginCall(0)
	if err := Status(proxyGetMetric(id, &retU64)).Err(); err != nil {
		return 0, err
	}
	return retU64, nil
}

// metric is the state the three metric types share: the host's id, and the
// definition's error. defined is false in the zero value.
type metric struct {
	id      uint32
	err     error
	defined bool
}

func define(mt MetricType, name string) metric {
	id, err := DefineMetric(mt, name)
	return metric{id: id, err: err, defined: err == nil}
}

// check returns the definition's error, or types.ErrorStatusNotFound for a
// zero value that was never defined.
func (m metric) check() error {
	if m.defined {
		return nil
	}
	if m.err != nil {
		return m.err
	}
	return types.ErrorStatusNotFound
}

// Counter is a counter metric defined with DefineCounterMetric. In the zero
// value every method returns types.ErrorStatusNotFound without a host call.
type Counter struct{ m metric }

// DefineCounterMetric defines the counter name. The definition's error, if
// any, is kept and returned by every method (and by Err), so a plugin can
// define its metrics in OnPluginStart and check Err once.
func DefineCounterMetric(name string) Counter { return Counter{define(MetricCounter, name)} }

// Err returns the error of the counter's definition.
func (c Counter) Err() error { return c.m.check() }

// ID returns the host's id of the counter.
func (c Counter) ID() uint32 { return c.m.id }

// Increment adds delta (> 0 in Envoy) to the counter.
func (c Counter) Increment(delta uint64) error {
	if err := c.m.check(); err != nil {
		return err
	}
	return IncrementMetric(c.m.id, int64(delta))
}

// Value returns the counter's value, 0 if it cannot be read (see Get).
func (c Counter) Value() uint64 {
	v, _ := c.Get()
	return v
}

// Get returns the counter's value.
func (c Counter) Get() (uint64, error) {
	if err := c.m.check(); err != nil {
		return 0, err
	}
	return GetMetric(c.m.id)
}

// Gauge is a gauge metric defined with DefineGaugeMetric. In the zero value
// every method returns types.ErrorStatusNotFound without a host call.
type Gauge struct{ m metric }

// DefineGaugeMetric defines the gauge name (errors as DefineCounterMetric).
func DefineGaugeMetric(name string) Gauge { return Gauge{define(MetricGauge, name)} }

// Err returns the error of the gauge's definition.
func (g Gauge) Err() error { return g.m.check() }

// ID returns the host's id of the gauge.
func (g Gauge) ID() uint32 { return g.m.id }

// Add adds the signed delta to the gauge (proxy_increment_metric).
func (g Gauge) Add(delta int64) error {
	if err := g.m.check(); err != nil {
		return err
	}
	return IncrementMetric(g.m.id, delta)
}

// Record sets the gauge to value (proxy_record_metric). Several VMs
// recording the same gauge overwrite each other.
func (g Gauge) Record(value int64) error {
	if err := g.m.check(); err != nil {
		return err
	}
	return RecordMetric(g.m.id, uint64(value))
}

// Value returns the gauge's value, 0 if it cannot be read (see Get).
func (g Gauge) Value() int64 {
	v, _ := g.Get()
	return v
}

// Get returns the gauge's value.
func (g Gauge) Get() (int64, error) {
	if err := g.m.check(); err != nil {
		return 0, err
	}
	v, err := GetMetric(g.m.id)
	return int64(v), err
}

// Histogram is a histogram metric defined with DefineHistogramMetric. In the
// zero value Record returns types.ErrorStatusNotFound without a host call.
type Histogram struct{ m metric }

// DefineHistogramMetric defines the histogram name (errors as
// DefineCounterMetric).
func DefineHistogramMetric(name string) Histogram { return Histogram{define(MetricHistogram, name)} }

// Err returns the error of the histogram's definition.
func (h Histogram) Err() error { return h.m.check() }

// ID returns the host's id of the histogram.
func (h Histogram) ID() uint32 { return h.m.id }

// Record records value in the histogram.
func (h Histogram) Record(value uint64) error {
	if err := h.m.check(); err != nil {
		return err
	}
	return RecordMetric(h.m.id, value)
}
