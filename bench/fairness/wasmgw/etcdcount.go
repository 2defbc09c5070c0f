package wasmgw

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
)

// etcdCounter stands between the proxies of one cluster run and etcd: it
// forwards every call and counts the calls and their bytes (request and
// response bodies), so that a run reports what its syncs cost.
type etcdCounter struct {
	url   string
	srv   *http.Server
	calls atomic.Int64
	bytes atomic.Int64
}

// newEtcdCounter starts a counter in front of the etcd at target, on a
// free local port.
func newEtcdCounter(target string) (*etcdCounter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("etcd url %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &etcdCounter{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		c.bytes.Add(int64(len(b)))
		r.Body = io.NopCloser(bytes.NewReader(b))
		return err
	}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.calls.Add(1)
		if r.ContentLength > 0 {
			c.bytes.Add(r.ContentLength)
		}
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(ln)
	return c, nil
}

// counts returns the calls forwarded so far and their bytes.
func (c *etcdCounter) counts() (calls, bytes int64) { return c.calls.Load(), c.bytes.Load() }

func (c *etcdCounter) close() { c.srv.Close() }
