package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// hopHeaders are not forwarded (RFC 9110 §7.6.1), as Envoy strips them.
var hopHeaders = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "te": true, "upgrade": true, "trailer": true}

// chunkSize is the most the proxy reads from a body before handing the
// chunk to the filter.
const chunkSize = 32 << 10

// upstreamTransport is shared by every proxy so connections are reused.
// DisableCompression: Envoy forwards the request headers as the filter
// left them; net/http would otherwise add Accept-Encoding: gzip and
// decompress the response behind the filter's back.
var upstreamTransport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, ForceAttemptHTTP2: false, DisableCompression: true,
	ResponseHeaderTimeout: 0, IdleConnTimeout: 90 * time.Second}

// New returns a local proxy that puts h in front of upstream: each
// request runs on one VM (host.Options.Balance, Host.PickStream) through
// the filter callbacks like Envoy's HTTP connection manager, is forwarded
// with net/http, and the response is streamed back through the response
// callbacks chunk by chunk as it arrives (flushed after each chunk, so
// SSE streams). It honours local
// replies, header changes (no Content-Length after the filter removed it:
// chunked), rewritten bodies, client disconnects (the stream is reset:
// on_log, on_done and on_delete run) and upstream failures (a
// 503 "upstream connect error" reply that goes through the response
// callbacks as Envoy's router reply does; on_log, on_done, on_delete run).
// Request trailers from the client are not forwarded.
func New(h *host.Host, upstream *url.URL) http.Handler {
	return &proxy{h: h, upstream: upstream, client: &http.Client{Transport: upstreamTransport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// proxy is the http.Handler New returns.
type proxy struct {
	h        *host.Host
	upstream *url.URL
	routes   []Route // NewRouted's table, matched before upstream
	client   *http.Client
}

var errLocalReply = errors.New("proxy: stream ended by a local reply")

// ServeHTTP serves one request through a stream of the Host (see New).
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var s *host.Stream
	if p.h.EnterServe() {
		defer p.h.ExitServe() // after s.Complete
		s = p.h.PickStream()
	}
	if s == nil {
		writeLocalReply(w, &host.LocalReply{Status: 503, Body: []byte("host closed"), GRPCStatus: -1})
		return
	}
	defer s.Complete()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	hdrs := requestPairs(r)
	noBody := r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0
	s.RequestHeaders(hdrs, noBody)
	// The upstream request is opened only once the filter has released
	// the headers, as Envoy's router creates it at decodeHeaders. The
	// body is read into the filter from the start (Envoy reads it while
	// the headers are stopped: held by the filter manager, or delivered to
	// the filter under allow_on_headers_stop_iteration) and pumped into
	// a pipe that feeds the upstream request.
	pr, pw := io.Pipe()
	var upHeaders [][2]string
	if noBody {
		pw.Close()
		rp, ok := p.waitHeaders(ctx, s, false)
		if !ok {
			p.finish(w, s, rp, false)
			return
		}
		upHeaders = rp.Headers
	} else {
		released := make(chan struct{})
		go p.pumpRequest(ctx, cancel, r.Body, pw, s, released)
		select {
		case <-released:
		case <-ctx.Done():
		}
		upHeaders = s.RequestHeaderMap()
		if upHeaders == nil { // ended, or the client went away, before the headers went
			if r.Context().Err() != nil {
				s.Reset()
			}
			p.finish(w, s, s.Take(false, true), false)
			return
		}
	}
	up, err := p.upstreamRequest(ctx, upHeaders, pr, noBody)
	if err != nil {
		s.ResetWithReason("bad_request_headers")
		p.finish(w, s, s.Take(false, true), false)
		return
	}
	// The connection's remote address is the stream's upstream.address, as
	// Envoy's is the host its router chose (host.Stream.SetUpstreamAddress).
	var upstreamAddr atomic.Value
	up = up.WithContext(httptrace.WithClientTrace(up.Context(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		upstreamAddr.Store(ci.Conn.RemoteAddr().String())
	}}))
	resp, err := p.client.Do(up)
	if err != nil {
		pr.CloseWithError(err)
		if lr := s.LocalReply(); lr != nil || r.Context().Err() != nil {
			if r.Context().Err() != nil {
				s.Reset()
			}
			p.finish(w, s, s.Take(true, false), false)
			return
		}
		// Envoy's router answers an upstream failure with a 503 that goes
		// through the encoder filters.
		body := []byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: " + err.Error())
		s.ResponseHeaders([][2]string{{":status", "503"}, {"content-type", "text/plain"}, {"content-length", strconv.Itoa(len(body))}}, false)
		s.ResponseBody(body, true)
		p.respond(ctx, w, s, nil)
		return
	}
	defer resp.Body.Close()
	rh := [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}
	for k, vs := range resp.Header {
		lk := strings.ToLower(k)
		if hopHeaders[lk] {
			continue
		}
		for _, v := range vs {
			rh = append(rh, [2]string{lk, v})
		}
	}
	if resp.ContentLength > 0 && resp.Header.Get("Content-Length") == "" {
		rh = append(rh, [2]string{"content-length", strconv.FormatInt(resp.ContentLength, 10)})
	}
	respEOS := resp.ContentLength == 0 || r.Method == http.MethodHead || resp.StatusCode == 204 || resp.StatusCode == 304
	if a, ok := upstreamAddr.Load().(string); ok {
		s.SetUpstreamAddress(a)
	}
	s.ResponseHeaders(rh, respEOS)
	if respEOS {
		p.respond(ctx, w, s, nil)
		return
	}
	p.respond(ctx, w, s, resp)
}

// requestPairs builds Envoy's request header map from r.
func requestPairs(r *http.Request) [][2]string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	hdrs := [][2]string{{":authority", r.Host}, {":path", r.URL.RequestURI()}, {":method", r.Method}, {":scheme", scheme}}
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if hopHeaders[lk] || lk == "host" {
			continue
		}
		for _, v := range vs {
			hdrs = append(hdrs, [2]string{lk, v})
		}
	}
	if r.ContentLength > 0 && r.Header.Get("Content-Length") == "" {
		hdrs = append(hdrs, [2]string{"content-length", strconv.FormatInt(r.ContentLength, 10)})
	}
	if r.Header.Get("X-Request-Id") == "" {
		hdrs = append(hdrs, [2]string{"x-request-id", newRequestID()})
	}
	return hdrs
}

// waitHeaders waits until the direction's headers are passed on (true),
// or the stream ended or the client went away (false).
func (p *proxy) waitHeaders(ctx context.Context, s *host.Stream, resp bool) (host.Progress, bool) {
	for {
		pr := s.Take(resp, false)
		if pr.Ended || pr.Local != nil || pr.Reset {
			return pr, false
		}
		if pr.HeadersReleased {
			return pr, true
		}
		select {
		case <-s.Notify():
		case <-ctx.Done():
			s.Reset()
			return s.Take(resp, false), false
		}
	}
}

// pumpRequest reads the client body chunk by chunk into the filter and
// writes what it passes on into the upstream pipe. It closes released
// once the filter has released the request headers or the stream ended
// (whichever it sees first, after a body event or a notification: the
// headers a tick releases while the client is still sending are seen at
// the next chunk).
func (p *proxy) pumpRequest(ctx context.Context, cancel context.CancelFunc, body io.Reader, pw *io.PipeWriter, s *host.Stream, released chan struct{}) {
	announced := false
	announce := func(pr host.Progress) {
		if !announced && (pr.HeadersReleased || pr.Ended || pr.Local != nil || pr.Reset) {
			announced = true
			close(released)
		}
	}
	defer func() {
		if !announced {
			close(released)
		}
	}()
	announce(s.Take(false, true)) // headers released by on_request_headers
	buf := make([]byte, chunkSize)
	for {
		n, err := body.Read(buf)
		eof := err == io.EOF
		if err != nil && !eof {
			s.Reset()
			pw.CloseWithError(err)
			cancel()
			return
		}
		if n > 0 || eof {
			s.RequestBody(buf[:n], eof)
		}
		for {
			pr := s.Take(false, true)
			announce(pr)
			if pr.Local != nil || pr.Reset {
				pw.CloseWithError(errLocalReply)
				cancel()
				return
			}
			if len(pr.Data) > 0 {
				if _, werr := pw.Write(pr.Data); werr != nil {
					return
				}
			}
			if pr.EOS {
				pw.Close()
				return
			}
			if !eof {
				break
			}
			// End of the client body but the filter holds the rest:
			// wait for proxy_continue_stream or the end.
			select {
			case <-s.Notify():
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
		}
	}
}

// upstreamRequest builds the request sent upstream from the headers the
// filter passed on.
func (p *proxy) upstreamRequest(ctx context.Context, hdrs [][2]string, body io.Reader, noBody bool) (*http.Request, error) {
	var method, path, authority string
	hh := http.Header{}
	cl := int64(-1)
	for _, kv := range hdrs {
		switch kv[0] {
		case ":method":
			method = kv[1]
		case ":path":
			path = kv[1]
		case ":authority":
			authority = kv[1]
		case ":scheme":
		case "content-length":
			n, err := strconv.ParseInt(kv[1], 10, 64)
			if err == nil {
				cl = n
			}
		default:
			hh.Add(kv[0], kv[1])
		}
	}
	to := p.route(hdrs)
	u := *to
	ref, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, fmt.Errorf("proxy: bad :path %q: %w", path, err)
	}
	u.Path = strings.TrimSuffix(to.Path, "/") + ref.Path
	u.RawPath = ""
	u.RawQuery = ref.RawQuery
	if noBody {
		body = http.NoBody
		cl = 0
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header = hh
	req.Host = authority
	req.ContentLength = cl
	return req, nil
}

// respond streams the response through the filter to the client.
func (p *proxy) respond(ctx context.Context, w http.ResponseWriter, s *host.Stream, resp *http.Response) {
	rp, ok := p.waitHeaders(ctx, s, true)
	if !ok {
		p.finish(w, s, rp, false)
		return
	}
	writeResponseHeaders(w, rp.Headers)
	flusher, _ := w.(http.Flusher)
	write := func(pr host.Progress) bool {
		if len(pr.Data) > 0 {
			if _, err := w.Write(pr.Data); err != nil {
				s.Reset()
				return false
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !write(rp) {
		return
	}
	if resp != nil {
		buf := make([]byte, chunkSize)
		for {
			n, err := resp.Body.Read(buf)
			eof := err == io.EOF
			if err != nil && !eof {
				if ctx.Err() != nil {
					s.Reset()
				} else {
					s.ResetWithReason("upstream_reset_after_response_started")
				}
				panic(http.ErrAbortHandler)
			}
			if n > 0 || eof {
				if eof && len(resp.Trailer) > 0 {
					if n > 0 {
						s.ResponseBody(buf[:n], false)
					}
					var tr [][2]string
					for k, vs := range resp.Trailer {
						for _, v := range vs {
							tr = append(tr, [2]string{strings.ToLower(k), v})
						}
					}
					s.ResponseTrailers(tr)
				} else {
					s.ResponseBody(buf[:n], eof)
				}
			}
			pr := s.Take(true, true)
			if pr.Reset || pr.Local != nil {
				panic(http.ErrAbortHandler)
			}
			if !write(pr) {
				return
			}
			if eof {
				break
			}
		}
	}
	// The filter may still hold the end (StopIterationAndBuffer at eos):
	// wait for it to be passed on.
	for {
		pr := s.Take(true, true)
		if pr.Reset || pr.Local != nil {
			panic(http.ErrAbortHandler)
		}
		if !write(pr) {
			return
		}
		if pr.EOS {
			for _, kv := range pr.Trailers {
				w.Header().Set(http.TrailerPrefix+kv[0], kv[1])
			}
			return
		}
		select {
		case <-s.Notify():
		case <-ctx.Done():
			s.Reset()
			return
		}
	}
}

func writeResponseHeaders(w http.ResponseWriter, hdrs [][2]string) {
	status := 200
	hasCL := false
	for _, kv := range hdrs {
		switch kv[0] {
		case ":status":
			if n, err := strconv.Atoi(kv[1]); err == nil {
				status = n
			}
		default:
			if strings.HasPrefix(kv[0], ":") || hopHeaders[kv[0]] {
				continue
			}
			if kv[0] == "content-length" {
				hasCL = true
			}
			w.Header().Add(kv[0], kv[1])
		}
	}
	if !hasCL {
		w.Header().Del("Content-Length")
	}
	w.WriteHeader(status)
}

// finish answers a stream that ended before its response started: a local
// reply, or nothing (reset: the client connection is aborted).
func (p *proxy) finish(w http.ResponseWriter, s *host.Stream, pr host.Progress, _ bool) {
	lr := pr.Local
	if lr == nil {
		lr = s.LocalReply()
	}
	if lr == nil {
		panic(http.ErrAbortHandler)
	}
	writeLocalReply(w, lr)
}

func writeLocalReply(w http.ResponseWriter, lr *host.LocalReply) {
	for _, kv := range lr.Headers {
		if !strings.HasPrefix(kv[0], ":") && !hopHeaders[kv[0]] {
			w.Header().Add(kv[0], kv[1])
		}
	}
	if w.Header().Get("Content-Type") == "" && len(lr.Body) > 0 {
		w.Header().Set("Content-Type", "text/plain")
	}
	if lr.GRPCStatus >= 0 {
		w.Header().Set("Grpc-Status", strconv.Itoa(int(lr.GRPCStatus)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(lr.Body)))
	w.WriteHeader(lr.Status)
	w.Write(lr.Body)
}
