package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// Route is one entry of the proxy's route table: a request whose header
// Header (lower case) has exactly the value Value goes to Upstream. It is
// Envoy's route with one header matcher
// (route.v3.HeaderMatcher{name, string_match: {exact}}), whose value, for
// a header sent several times, is the values joined with ","
// (envoyproxy/envoy at cb2a49b0, source/common/http/header_utility.h
// HeaderDataBaseImpl::matchesHeaders and header_utility.cc
// getAllOfHeaderAsString).
type Route struct {
	Header, Value string
	Upstream      *url.URL
}

// NewRouted is New with a route table: a request goes to the Upstream of
// the first route whose header matches, else to upstream (the catch-all
// route, prefix "/").
//
// The route is selected from the request headers as they reach the
// router, that is as the filter released them, exactly as Envoy selects
// it for a proxy-wasm filter (envoyproxy/envoy at cb2a49b0,
// source/common/http/conn_manager_impl.cc, source/common/router/router.cc,
// source/extensions/common/wasm/context.h):
//
//   - ActiveStream::decodeHeaders computes the route once, before the
//     filter chain (refreshCachedRoute), from the headers as received.
//   - Every request-header change a filter of ABI 0.2.1 or older makes
//     (add, replace, remove, set_pairs: Context::onHeadersModified) clears
//     that cached route (clearRouteCache). Since envoyproxy/envoy#36671 an
//     ABI above 0.2.1 would not clear it (it gets a clear_route_cache
//     foreign function instead); cpp-host knows no ABI above 0.2.1, and
//     neither does this host, so every change a module can make clears it.
//   - The router filter reads the route in its decodeHeaders
//     (callbacks_->routeSharedPtr(), recomputed there if cleared), which
//     runs when the headers reach it: at once if the filter continued in
//     on_request_headers, or when it continues a stopped request
//     (allow_on_headers_stop_iteration) from its body callback or a later
//     proxy_continue_stream. The route, and the upstream request, are then
//     fixed: after the headers have gone the filter can no longer change
//     them (BAD_ARGUMENT, the host's header rules), and after the response
//     headers Envoy blocks the route cache altogether (blockRouteCache).
//
// Either way the route is that of the headers the router receives: the
// arrival route when nothing changed them, the recomputed one otherwise.
// This proxy matches the table against exactly those headers
// (Stream.RequestHeaderMap once released), once per request.
func NewRouted(h *host.Host, upstream *url.URL, routes []Route) http.Handler {
	p := New(h, upstream).(*proxy)
	p.routes = routes
	return p
}

// route returns the upstream of the first route matching hdrs, the
// request headers as released to the router, else the catch-all upstream.
func (p *proxy) route(hdrs [][2]string) *url.URL {
	for i := range p.routes {
		r := &p.routes[i]
		v, ok := headerValue(hdrs, strings.ToLower(r.Header))
		if ok && v == r.Value {
			return r.Upstream
		}
	}
	return p.upstream
}

// headerValue is Envoy's value of header key for matching: every value
// of the key joined with ","; ok is false when the key is absent.
func headerValue(hdrs [][2]string, key string) (string, bool) {
	var vals []string
	for _, kv := range hdrs {
		if kv[0] == key {
			vals = append(vals, kv[1])
		}
	}
	return strings.Join(vals, ","), len(vals) > 0
}
