package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// The local proxy's admin port (-admin, default 127.0.0.1:9901 as in
// envoy.yaml): GET /stats/prometheus answers the plugin's metrics in the
// Prometheus text format as Envoy's admin serves them with envoy.yaml's
// stats_tags, so that the PromQL of the README's metrics table and of
// deploy/grafana runs against make run as against a gateway:
//
//	fairshare.pool.llama-8b.team.search.class.interactive.first_byte_ms
//	  ──► fairshare_first_byte_ms_bucket{pool="llama-8b",team="search",class="interactive",le="100"} 41
//
// What is Envoy's here, as read in envoyproxy/envoy
// source/server/admin/prometheus_stats.cc (commit 051c84f73b) and
// source/common/stats/tag_producer_impl.cc: every stats_tags regex runs on
// the stat's original name, its first group is cut from the name (all cuts
// once, at the end) and its second is the tag's value; the guest's
// "wasmcustom." namespace is stripped without an "envoy_" prefix and every
// character outside [a-zA-Z0-9_] becomes '_' (a name starting with a digit
// is dropped); counters, then gauges, then histograms, each name one group
// under its "# TYPE" line, groups sorted by name, series by stat name, a
// blank line after each group; a histogram's buckets are Envoy's default
// bounds, then +Inf, _sum and _count. The tags are in the order of
// stats_tags. Envoy's histograms are cumulative over its flushes; the host
// keeps every sample, so the buckets here are exact.

// defaultAdmin is -admin's default: envoy.yaml's admin address.
const defaultAdmin = "127.0.0.1:9901"

// adminStatsPath is Envoy's admin path of the Prometheus output.
const adminStatsPath = "/stats/prometheus"

// statsTag is one stats_tags entry of envoy.yaml.
type statsTag struct {
	name string
	re   *regexp.Regexp
}

// statsTags are envoy.yaml's stats_tags, in its order (TestStatsTagsAsEnvoyYAML
// compares them with the file).
var statsTags = []statsTag{
	{"pool", regexp.MustCompile(`^(?:wasmcustom\.)?fairshare\.(pool\.([^.]+)\.)`)},
	{"team", regexp.MustCompile(`^(?:wasmcustom\.)?fairshare\.(?:pool\.[^.]+\.)?(team\.([^.]+)\.)`)},
	{"class", regexp.MustCompile(`^(?:wasmcustom\.)?fairshare\.(?:pool\.[^.]+\.)?(?:team\.[^.]+\.)?(class\.([^.]+)\.)`)},
	{"standing", regexp.MustCompile(`^(?:wasmcustom\.)?fairshare\.(?:pool\.[^.]+\.)?(?:team\.[^.]+\.)?(?:class\.[^.]+\.)?(standing\.([^.]+)\.)`)},
	{"to_pool", regexp.MustCompile(`^(?:wasmcustom\.)?fairshare\.(?:pool\.[^.]+\.)?(?:team\.[^.]+\.)?(to_pool\.([^.]+)\.)`)},
}

// envoyHistogramBuckets are Envoy's default histogram bucket bounds
// (source/common/stats/histogram_impl.cc, HistogramSettingsImpl::defaultBuckets).
var envoyHistogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

var promInvalid = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// tagMetric returns the Prometheus name and the label pairs Envoy gives a
// guest metric under statsTags; ok is false when Envoy drops it.
func tagMetric(name string) (prom, labels string, ok bool) {
	cut := make([]bool, len(name))
	var pairs []string
	for _, t := range statsTags {
		m := t.re.FindStringSubmatchIndex(name)
		if len(m) < 4 || m[2] < 0 || m[2] == m[3] {
			continue
		}
		v := name[m[2]:m[3]]
		if len(m) >= 6 && m[4] >= 0 && m[4] < m[5] {
			v = name[m[4]:m[5]]
		}
		pairs = append(pairs, t.name+`="`+v+`"`)
		for i := m[2]; i < m[3]; i++ {
			cut[i] = true
		}
	}
	var b strings.Builder
	for i := range len(name) {
		if !cut[i] {
			b.WriteByte(name[i])
		}
	}
	prom = promInvalid.ReplaceAllString(strings.TrimPrefix(b.String(), "wasmcustom."), "_")
	if prom == "" || prom[0] >= '0' && prom[0] <= '9' {
		return "", "", false
	}
	return prom, strings.Join(pairs, ","), true
}

// writeEnvoyPrometheus writes metrics as Envoy's /stats/prometheus does
// (see the file comment). Cost: O(n log n) in the metrics, plus every
// histogram's samples once per bucket.
func writeEnvoyPrometheus(w io.Writer, metrics []host.Metric) error {
	type series struct {
		stat, labels string
		m            *host.Metric
	}
	bw := bufio.NewWriter(w)
	for _, kind := range []struct {
		t    hostcalls.MetricType
		name string
	}{{hostcalls.MetricCounter, "counter"}, {hostcalls.MetricGauge, "gauge"}, {hostcalls.MetricHistogram, "histogram"}} {
		groups := map[string][]series{}
		for i := range metrics {
			m := &metrics[i]
			if m.Type != kind.t {
				continue
			}
			prom, labels, ok := tagMetric(m.Name)
			if !ok {
				continue
			}
			groups[prom] = append(groups[prom], series{m.Name, labels, m})
		}
		for _, n := range slices.Sorted(maps.Keys(groups)) {
			g := groups[n]
			slices.SortFunc(g, func(a, b series) int { return strings.Compare(a.stat, b.stat) })
			fmt.Fprintf(bw, "# TYPE %s %s\n", n, kind.name)
			for _, s := range g {
				if kind.t != hostcalls.MetricHistogram {
					fmt.Fprintf(bw, "%s{%s} %d\n", n, s.labels, s.m.Value)
					continue
				}
				le := s.labels
				if le != "" {
					le += ","
				}
				var sum float64
				for _, v := range s.m.Samples {
					sum += float64(v)
				}
				for _, bound := range envoyHistogramBuckets {
					c := 0
					for _, v := range s.m.Samples {
						if float64(v) <= bound {
							c++
						}
					}
					fmt.Fprintf(bw, "%s_bucket{%sle=\"%s\"} %d\n", n, le, strconv.FormatFloat(bound, 'f', -1, 64), c)
				}
				fmt.Fprintf(bw, "%s_bucket{%sle=\"+Inf\"} %d\n%s_sum{%s} %s\n%s_count{%s} %d\n",
					n, le, len(s.m.Samples), n, s.labels, strconv.FormatFloat(sum, 'f', -1, 64), n, s.labels, len(s.m.Samples))
			}
			bw.WriteString("\n")
		}
	}
	return bw.Flush()
}

// adminServer is one proxy's admin port.
type adminServer struct {
	addr   string
	server *http.Server
	served chan struct{}
}

// startAdmin serves h's metrics at listen's /stats/prometheus.
func startAdmin(listen string, h *host.Host, stderr io.Writer) (*adminServer, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("admin: %w (use -admin to choose another address, or -admin off)", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+adminStatsPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_ = writeEnvoyPrometheus(w, h.MetricList())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "fairshare-run's admin port serves GET "+adminStatsPath+" only", http.StatusNotFound)
	})
	a := &adminServer{addr: ln.Addr().String(), served: make(chan struct{}),
		server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(a.served)
		if err := a.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "fairshare-run: admin:", err)
		}
	}()
	return a, nil
}

// startAdmin starts the admin port of proxy i of the run at admin (with
// -replicas, proxy i's port is admin's plus i); none with "off".
func (p *proxy) startAdmin(admin string, i int, stderr io.Writer) error {
	if admin == "off" {
		return nil
	}
	listen, err := replicaListen(admin, i)
	if err != nil {
		return fmt.Errorf("-admin %q: want host:port or off", admin)
	}
	p.admin, err = startAdmin(listen, p.host, stderr)
	return err
}

// url is the admin's Prometheus endpoint.
func (a *adminServer) url() string { return "http://" + a.addr + adminStatsPath }

// close stops serving.
func (a *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.server.Shutdown(ctx); err != nil {
		a.server.Close()
	}
	<-a.served
}
