package plugin

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Defaults of the cluster block (one pool across several proxies).
const (
	// DefaultClusterPrefix is the etcd key prefix (cluster.key_prefix).
	DefaultClusterPrefix = "/fairshare"
	// DefaultSyncInterval is how often a proxy syncs its slices with etcd
	// (cluster.sync_interval).
	DefaultSyncInterval = time.Second
	// DefaultLeaseTTL is the TTL of a proxy's etcd lease
	// (cluster.lease_ttl): a proxy that stops syncing loses its slices
	// this long after its last keepalive.
	DefaultLeaseTTL = 10 * time.Second
	// DefaultClusterTimeout bounds every call to etcd (cluster.timeout).
	DefaultClusterTimeout = 500 * time.Millisecond
	// DefaultSafeFraction is the part of an even share of the pool a
	// proxy cut off from etcd keeps once its lease would have expired
	// (cluster.safe_fraction); it is the overshoot of a long partition.
	DefaultSafeFraction = 0.5
)

// clusterConfig is the validated cluster block: the etcd that the
// proxies sharing the pools sync through.
type clusterConfig struct {
	etcd         string // Envoy cluster name of etcd's client port
	authority    string // :authority of the calls
	prefix       string // key prefix, without a trailing slash
	auth         string // Authorization header value ("": none)
	replica      string // this proxy's ID ("": random)
	syncInterval time.Duration
	leaseTTL     time.Duration
	timeout      time.Duration
	safeFraction float64
}

// parseCluster reads the cluster block at path.
func parseCluster(ps *problems, path string, v gjson.Result) *clusterConfig {
	if !v.IsObject() {
		ps.add(path, "must be an object, got %s", typeName(v))
		return nil
	}
	c := &clusterConfig{prefix: DefaultClusterPrefix, syncInterval: DefaultSyncInterval,
		leaseTTL: DefaultLeaseTTL, timeout: DefaultClusterTimeout, safeFraction: DefaultSafeFraction}
	seen := members(ps, path, v, func(key, p string, f gjson.Result) bool {
		switch key {
		case "etcd_cluster":
			if s, ok := str(ps, p, f); ok {
				if s == "" {
					ps.add(p, "must name the Envoy cluster of etcd's client port")
				}
				c.etcd = s
			}
		case "authority":
			if s, ok := str(ps, p, f); ok {
				c.authority = s
			}
		case "key_prefix":
			if s, ok := str(ps, p, f); ok {
				if !strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") {
					ps.add(p, "must start with \"/\" and not end with one, got %q", s)
				}
				c.prefix = s
			}
		case "authorization":
			if s, ok := str(ps, p, f); ok {
				c.auth = s
			}
		case "replica":
			if s, ok := str(ps, p, f); ok {
				if s == "" || strings.ContainsAny(s, "/ ") {
					ps.add(p, "must be a non-empty name without \"/\" or spaces, got %q", s)
				}
				c.replica = s
			}
		case "sync_interval":
			c.syncInterval = duration(ps, p, f, 10*time.Millisecond)
		case "lease_ttl":
			c.leaseTTL = duration(ps, p, f, 2*time.Second)
			if c.leaseTTL%time.Second != 0 {
				ps.add(p, "must be whole seconds (etcd's lease TTL), got %q", f.Str)
			}
		case "timeout":
			c.timeout = duration(ps, p, f, time.Millisecond)
		case "safe_fraction":
			if x, ok := number(ps, p, f, c.safeFraction); ok {
				if x < 0 || x > 1 {
					ps.add(p, "must be in [0, 1], got %s", f.Raw)
				}
				c.safeFraction = x
			}
		default:
			ps.add(p, "unknown field")
			ps.suggest(key, clusterFields)
		}
		return true
	})
	if !seen["etcd_cluster"] {
		ps.add(path+".etcd_cluster", "required: the Envoy cluster of etcd's client port")
	}
	if c.authority == "" {
		c.authority = c.etcd
	}
	if c.syncInterval > 0 && c.leaseTTL > 0 && c.leaseTTL < 3*c.syncInterval {
		ps.add(path+".lease_ttl", "must be at least three sync intervals (%s), got %s", 3*c.syncInterval, c.leaseTTL)
	}
	if c.timeout > 0 && c.syncInterval > 0 && c.timeout > c.syncInterval {
		ps.add(path+".timeout", "must not exceed sync_interval (%s), got %s", c.syncInterval, c.timeout)
	}
	return c
}
