// Package etcdtest runs a real single-node etcd in the test's process
// (go.etcd.io/etcd/server/v3/embed) for the tests and the local runner that
// share a pool between proxies. It is native code only: nothing of etcd
// is linked into plugin.wasm, which reaches etcd through its JSON gRPC
// gateway with proxy_http_call.
//
// A Server keeps its data directory and ports across Stop and Start, so
// a test can restart etcd and find its keys (and its leases, whose TTLs
// etcd renews on restart) where it left them.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Server is one embedded etcd member. The zero value is not usable; call
// New. Its methods are not safe for concurrent use.
type Server struct {
	dir     string
	name    string
	client  url.URL
	peer    url.URL
	initial string // the initial cluster ("name=peer,..."); "" for a single member
	etcd    *embed.Etcd
	started bool
}

// New returns a stopped server whose data lives under dir (created if
// missing) and whose client and peer URLs are two free loopback ports
// chosen now.
func New(dir string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	c, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := freePort()
	if err != nil {
		return nil, err
	}
	return &Server{
		dir:    dir,
		name:   "fairshare-test",
		client: url.URL{Scheme: "http", Host: c},
		peer:   url.URL{Scheme: "http", Host: p},
	}, nil
}

// Started starts a single-node etcd in t's temporary directory for the
// test t, stopped when t ends; it fails t if etcd does not start.
func Started(t testing.TB) *Server {
	t.Helper()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NewCluster returns n stopped servers that form one etcd cluster, each
// with its data under dir/member-i. Start them together (StartAll): a
// member is ready only once a quorum is up.
func NewCluster(dir string, n int) ([]*Server, error) {
	var ss []*Server
	var initial []string
	for i := range n {
		s, err := New(filepath.Join(dir, fmt.Sprintf("member-%d", i)))
		if err != nil {
			return nil, err
		}
		s.name = fmt.Sprintf("member-%d", i)
		initial = append(initial, s.name+"="+s.peer.String())
		ss = append(ss, s)
	}
	for _, s := range ss {
		s.initial = strings.Join(initial, ",")
	}
	return ss, nil
}

// StartAll starts the servers concurrently and waits for all of them.
func StartAll(ss []*Server) error {
	errs := make(chan error, len(ss))
	for _, s := range ss {
		go func() { errs <- s.Start() }()
	}
	var first error
	for range ss {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// freePort returns a loopback host:port that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("etcdtest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// URL returns the client URL (http://127.0.0.1:port): the gRPC gateway
// answers JSON under /v3/ there.
func (s *Server) URL() string { return s.client.String() }

// Start starts etcd and waits until it serves (at most a minute). It
// fails when the server is already started.
func (s *Server) Start() error {
	if s.started {
		return fmt.Errorf("etcdtest: already started")
	}
	cfg := embed.NewConfig()
	cfg.Name = s.name
	cfg.Dir = filepath.Join(s.dir, "data")
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.Name + "=" + s.peer.String()
	if s.initial != "" {
		cfg.InitialCluster = s.initial
	}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(s.dir, "etcd.log")}
	cfg.UnsafeNoFsync = true // tests: durability across a machine crash is not tested
	cfg.EnableGRPCGateway = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		e.Close()
		return fmt.Errorf("etcdtest: not ready after a minute")
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdtest: %w", err)
	}
	s.etcd, s.started = e, true
	return nil
}

// Stop stops etcd, keeping its data for a later Start. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	if !s.started {
		return
	}
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	s.etcd, s.started = nil, false
}

// IsLeader reports whether the server is started and the Raft leader of
// its cluster.
func (s *Server) IsLeader() bool {
	return s.started && s.etcd.Server.Leader() == s.etcd.Server.MemberID()
}
