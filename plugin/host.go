package plugin

import (
	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// hostStore is the host's shared data (sharedStore).
type hostStore struct{}

func (hostStore) GetSharedData(key string) ([]byte, uint32, error) {
	return hostcalls.GetSharedData(key)
}

// GetSharedDataInto implements sharedStoreInto.
func (hostStore) GetSharedDataInto(dst []byte, key string) ([]byte, uint32, error) {
	return hostcalls.GetSharedDataInto(dst, key)
}

func (hostStore) SetSharedData(key string, value []byte, cas uint32) error {
	return hostcalls.SetSharedData(key, value, cas)
}

// hostMetrics is the host's metrics API (metricHost).
type hostMetrics struct{}

func (hostMetrics) defineMetric(kind metricKind, name string) (uint32, error) {
	return hostcalls.DefineMetric(hostcalls.MetricType(kind), name)
}

func (hostMetrics) incrementMetric(id uint32, delta int64) error {
	return hostcalls.IncrementMetric(id, delta)
}

func (hostMetrics) recordMetric(id uint32, value int64) error {
	return hostcalls.RecordMetric(id, uint64(value))
}
