package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/fairshare-wasm/fairshare/internal/etcdtest"
	"github.com/tidwall/gjson"
)

// Several proxies (-replicas N, make run REPLICAS=N): N local proxies, each
// its own host with its own shared data and VMs, share every pool through
// an etcd embedded in this process (the real etcd, one member), as gateway
// replicas do with the plugin's cluster block. The demo load is split
// unevenly between them (replicaWeights), so that the slices have demand to
// follow; the live view shows the pool as a whole (the replicas' statuses
// merged) and one line per replica with its slice.

// maxReplicas bounds -replicas.
const maxReplicas = 9

// Cluster settings the runner gives a configuration without a cluster
// block: quicker than the plugin's defaults, for a demo of seconds.
const runnerCluster = `{"etcd_cluster":"etcd","sync_interval":"250ms","lease_ttl":"2s","timeout":"200ms"}`

// replicaName is the cluster.replica of proxy i.
func replicaName(i int) string { return "r" + strconv.Itoa(i) }

// replicaWeights is how the demo load is split between n proxies, in
// tenths: 70/20/10 for three (a load balancer that favours one replica),
// even otherwise.
func replicaWeights(n int) []int {
	if n == 3 {
		return []int{7, 2, 1}
	}
	w := make([]int, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

// withCluster returns the configuration b for proxy replica: its cluster
// block (runnerCluster when it has none) with replica set; and the
// block's etcd_cluster, which the runner maps to its embedded etcd.
func withCluster(b []byte, replica string) ([]byte, string) {
	raw := runnerCluster
	if cl := gjson.GetBytes(b, "cluster"); cl.IsObject() {
		raw = cl.Raw
	}
	block := setMember([]byte(raw), "replica", gjson.AppendJSONString(nil, replica))
	return setMember(b, "cluster", block), gjson.GetBytes(block, "etcd_cluster").String()
}

// replicaListen is the listen address of proxy i: listen's port plus i (a
// port of 0 stays 0: any free port).
func replicaListen(listen string, i int) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("-listen %q: %w", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("-listen %q: port %q", listen, port)
	}
	if p == 0 || i == 0 {
		return listen, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i)), nil
}

// embeddedEtcd is the etcd the proxies share, with its data directory.
type embeddedEtcd struct {
	dir string
	srv *etcdtest.Server
}

// startEtcd starts a one-member etcd on free loopback ports, its data in a
// temporary directory removed by close.
func startEtcd() (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "fairshare-run-etcd-")
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	s, err := etcdtest.New(dir)
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return &embeddedEtcd{dir: dir, srv: s}, nil
}

func (e *embeddedEtcd) close() {
	e.srv.Stop()
	os.RemoveAll(e.dir)
}

// replicaStatus is one proxy's status: its slices.
type replicaStatus struct {
	Name   string
	Addr   string
	Weight int // tenths of the demo load it receives (0: not told)
	Pools  []statusPool
	Err    string
}

// replicaStatuses fetches every proxy's status.
func (r *runner) replicaStatuses(ctx context.Context) []replicaStatus {
	if len(r.proxies) < 2 || r.cfg.StatusPath == "" {
		return nil
	}
	w := replicaWeights(len(r.proxies))
	out := make([]replicaStatus, len(r.proxies))
	for i, p := range r.proxies {
		out[i] = replicaStatus{Name: replicaName(i), Addr: p.addr, Weight: w[i]}
		pools, err := fetchStatus(ctx, r.client, "http://"+p.addr+r.cfg.StatusPath, r.cfg.StatusToken)
		if err != nil {
			out[i].Err = err.Error()
			continue
		}
		out[i].Pools = pools
	}
	return out
}

// mergeStatus is the pool as a whole from the replicas' statuses: per pool
// and team the sums of capacities, reservations and requests; shares,
// usage, level fairshare and rank from the first replica that has the
// team (usage is global: every replica holds every replica's
// contributions).
func mergeStatus(rs []replicaStatus) []statusPool {
	var out []statusPool
	for _, r := range rs {
		for _, p := range r.Pools {
			k := -1
			for i := range out {
				if out[i].Name == p.Name {
					k = i
				}
			}
			if k < 0 {
				out = append(out, statusPool{Name: p.Name})
				k = len(out) - 1
			}
			m := &out[k]
			m.Capacity += p.Capacity
			for _, t := range p.Teams {
				mt := m.team(t.Team)
				if mt == nil {
					m.Teams = append(m.Teams, statusTeam{Team: t.Team, Share: t.Share, Weight: t.Weight,
						Usage: t.Usage, LevelFairshare: t.LevelFairshare, Rank: t.Rank})
					mt = &m.Teams[len(m.Teams)-1]
				}
				mt.Reserved += t.Reserved
				mt.InFlight += t.InFlight
				mt.Borrowing += t.Borrowing
				mt.Phantoms += t.Phantoms
				mt.Waiting += t.Waiting
			}
		}
	}
	return out
}

// renderReplicas writes one line per proxy: its address, its part of the
// load, and per pool its slice (capacity, every team's reservation and
// loan) and its requests in flight, every team's within share and
// borrowing (and held).
func renderReplicas(b *strings.Builder, prefix string, rs []replicaStatus) {
	for _, r := range rs {
		fmt.Fprintf(b, "%sreplica %s %s (%d0%% of the load):", prefix, r.Name, r.Addr, r.Weight)
		if r.Err != "" {
			fmt.Fprintf(b, " %s\n", r.Err)
			continue
		}
		for _, p := range r.Pools {
			n, _ := p.inFlight()
			var rsv, st []string
			for _, t := range p.Teams {
				if t.Share > 0 {
					x := fmt.Sprintf("%s %d", t.Team, t.Reserved)
					if t.Lent > 0 {
						x += fmt.Sprintf("+%d", t.Lent)
					}
					rsv = append(rsv, x)
				}
				if t.InFlight > 0 || t.Waiting > 0 {
					x := fmt.Sprintf("%s %d within, %d borrowing", t.Team, t.InFlight-t.Borrowing, t.Borrowing)
					if t.Waiting > 0 {
						x += fmt.Sprintf(", %d held", t.Waiting)
					}
					st = append(st, x)
				}
			}
			fmt.Fprintf(b, " pool %s slice %d (reserved+lent %s), in flight %d", p.Name, p.Capacity, strings.Join(rsv, ", "), n)
			if len(st) > 0 {
				fmt.Fprintf(b, " (%s)", strings.Join(st, "; "))
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
}
