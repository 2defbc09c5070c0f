package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/fairshare-wasm/fairshare/hostcalls/host"
	hostproxy "github.com/fairshare-wasm/fairshare/hostcalls/host/proxy"
)

// proxy is the local proxy: plugin.wasm in the wazero host, served over
// HTTP on a local address.
type proxy struct {
	logs        *logSink
	addr        string
	bufferLimit int // bytes a request may buffer (Envoy's per_connection_buffer_limit_bytes)
	module      *host.Module
	host        *host.Host
	server      *http.Server
	served      chan struct{}
	admin       *adminServer // the admin port (admin.go), nil with -admin off
}

// startProxy compiles the plugin, starts o.vms VMs with the configuration
// and serves the host's handler, forwarding to upstream (or to the route of
// routes the request's released headers match, spill.go), on o.listen. A
// request may buffer bufferLimit bytes (413 beyond). obs, if not nil, sees
// every request first (-no-load's view).
//
// listen is the address to serve; vmid the host's shared-data namespace
// (each proxy of -replicas its own); clusters the http_call clusters (the
// embedded etcd, a capacity_from pool's engines), nil for none; originalDst
// the ORIGINAL_DST clusters (a capacity_from pool with engines "learned").
func startProxy(ctx context.Context, wasm, cfg []byte, o options, bufferLimit int, upstream *url.URL, routes []hostproxy.Route, obs *observer, stderr io.Writer,
	listen, vmid string, clusters, originalDst map[string]string) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w (use -listen to choose another address)", err)
	}
	m, err := host.Compile(ctx, wasm)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	opts := host.Options{
		VMs:          o.vms,
		VMID:         vmid,
		Clusters:     clusters,
		OriginalDst:  originalDst,
		PluginName:   "fairshare",
		RootID:       "fairshare",
		PluginConfig: cfg,
		ClusterName:  "vllm",
		LogLevel:     hostcalls.LogLevelWarn,
		BufferLimit:  bufferLimit,
		// As envoy.yaml sets it: hold_headers "on" (testdata/plugin/spill.json)
		// keeps the headers stopped until the decision, which routes.
		AllowOnHeadersStopIteration: true,
	}
	sink := &logSink{}
	if o.verbose {
		sink.forward = stderr
	}
	opts.Logger = slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := m.Start(ctx, opts)
	if err != nil {
		m.Close(context.Background())
		ln.Close()
		if l := sink.String(); l != "" {
			err = fmt.Errorf("%w; the plugin logged:\n%s", err, l)
		}
		return nil, fmt.Errorf("proxy: start plugin: %w", err)
	}
	var handler http.Handler = hostproxy.NewRouted(h, upstream, routes)
	if obs != nil {
		obs.next, handler = handler, obs
	}
	p := &proxy{
		logs:        sink,
		addr:        ln.Addr().String(),
		bufferLimit: bufferLimit,
		module:      m,
		host:        h,
		served:      make(chan struct{}),
		server: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          nil,
		},
	}
	go func() {
		defer close(p.served)
		if err := p.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "fairshare-run: proxy:", err)
		}
	}()
	return p, nil
}

// close stops serving (waiting up to 2 s for open requests) and closes the
// VMs.
func (p *proxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.server.Shutdown(ctx); err != nil {
		p.server.Close()
	}
	<-p.served
	if p.admin != nil {
		p.admin.close()
	}
	p.host.Close(context.Background())
	p.module.Close(context.Background())
}

// logSink keeps the plugin's warning and error lines (the first
// maxSinkLines) and forwards them to forward when set (-v). Safe for
// concurrent use.
type logSink struct {
	mu      sync.Mutex
	lines   []string
	dropped int
	forward io.Writer
}

const maxSinkLines = 50

// Write implements io.Writer for slog.
func (s *logSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lines) < maxSinkLines {
		s.lines = append(s.lines, strings.TrimRight(string(b), "\n"))
	} else {
		s.dropped++
	}
	if s.forward != nil {
		s.forward.Write(b)
	}
	return len(b), nil
}

// String returns the kept lines.
func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// count returns how many lines were logged.
func (s *logSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines) + s.dropped
}
