package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// runner holds everything a run started: the upstream (simulator or a real
// URL), the proxy and the client that talks to it.
type runner struct {
	opts   options
	out    io.Writer
	cfg    configView
	pool   configPool // the pool of the demo's model
	model  string
	base   string // the proxy's base URL
	client *http.Client

	configName   string
	upstreamDesc string
	upstream     *upstream
	proxy        *proxy
	closeOnce    sync.Once
}

// start starts the upstream and the proxy and prints what it started.
func start(ctx context.Context, o options, out, stderr io.Writer) (*runner, error) {
	r := &runner{opts: o, out: out}
	cfgBytes, name := demoConfig, demoConfigName
	if o.config != "" {
		b, err := os.ReadFile(o.config)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		cfgBytes, name = b, o.config
	}
	cfg, err := readConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	generated := ""
	if cfg.StatusPath != "" && cfg.StatusToken == "" && !cfg.StatusPublic {
		// The plugin's status endpoint is closed without a token: give it
		// one for this run, so that the live view (and the operator's
		// curl) can read it.
		generated = newToken()
		cfgBytes = withStatusToken(cfgBytes, generated)
		cfg.StatusToken = generated
	}
	r.cfg, r.configName = cfg, name
	r.model = cfg.model(o.model)
	r.pool = cfg.poolOf(r.model)

	wasm, err := os.ReadFile(o.wasm)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w (build it with `make build` or "+
			"`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm ./cmd/plugin`)", err)
	}

	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("-upstream %q: want an http(s) URL such as http://127.0.0.1:8000", o.upstream)
		}
		r.upstream = &upstream{url: u}
		r.upstreamDesc = "vLLM at " + u.String()
	} else {
		up, err := startSimulator(r.model, o.timeScale)
		if err != nil {
			return nil, err
		}
		r.upstream = up
		r.upstreamDesc = up.desc
	}

	p, err := startProxy(ctx, wasm, cfgBytes, o, r.upstream.url, stderr)
	if err != nil {
		r.upstream.close()
		return nil, err
	}
	r.proxy = p
	r.base = "http://" + p.addr
	r.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 256,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     30 * time.Second,
	}}

	fmt.Fprintf(out, "fairshare-run: plugin %s (%.1f MB) on %d VMs\n", o.wasm, float64(len(wasm))/1e6, o.vms)
	fmt.Fprintf(out, "config:   %s\n", name)
	fmt.Fprintf(out, "pool:     %s, capacity %d, model %s:%s\n", r.pool.Name, r.pool.Capacity, r.model, teamList(r.pool))
	fmt.Fprintf(out, "upstream: %s\n", r.upstreamDesc)
	switch {
	case generated != "":
		fmt.Fprintf(out, "proxy:    %s (status: %s%s, bearer token %s generated for this run)\n", r.base, r.base, cfg.StatusPath, generated)
	case cfg.StatusPath != "":
		fmt.Fprintf(out, "proxy:    %s (status: %s%s)\n", r.base, r.base, cfg.StatusPath)
	default:
		fmt.Fprintf(out, "proxy:    %s (status endpoint disabled)\n", r.base)
	}
	return r, nil
}

func teamList(p configPool) string {
	var b strings.Builder
	for _, t := range p.Teams {
		fmt.Fprintf(&b, " %s %s", t.Name, fmtShare(t.Share))
	}
	return b.String()
}

// close stops the proxy and the upstream. Safe to call twice.
func (r *runner) close() {
	r.closeOnce.Do(func() {
		r.client.CloseIdleConnections()
		r.proxy.close()
		r.upstream.close()
	})
}

// serveOnly prints how to try the proxy and waits for ctx.
func (r *runner) serveOnly(ctx context.Context) {
	team, class := "search", "interactive"
	if len(r.pool.Teams) > 0 {
		team = r.pool.Teams[0].Name
	}
	fmt.Fprintf(r.out, "\nno demo load; try (Ctrl-C stops):\n\n")
	fmt.Fprintf(r.out, "  curl -sN -D - %s%s -H 'content-type: application/json' -H '%s: %s' -H '%s: %s' \\\n"+
		"    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":32,\"stream\":true}'\n\n",
		r.base, r.cfg.chatPath(), r.cfg.TeamHeader, team, r.cfg.ClassHeader, class, r.model)
	switch {
	case r.cfg.StatusPath == "":
	case r.cfg.StatusToken != "":
		fmt.Fprintf(r.out, "  curl -s -H 'authorization: Bearer %s' %s%s\n\n", r.cfg.StatusToken, r.base, r.cfg.StatusPath)
	default:
		fmt.Fprintf(r.out, "  curl -s %s%s\n\n", r.base, r.cfg.StatusPath)
	}
	<-ctx.Done()
	fmt.Fprintln(r.out, "\nstopping")
}

// planTeams assigns the demo's roles to the pool's teams by decreasing share
// (ties by configuration order): steady interactive, late interactive,
// flooding batch. A pool of fewer teams gets the first roles; teams beyond
// three send nothing.
func planTeams(p configPool) []demoTeam {
	teams := slices.Clone(p.Teams)
	slices.SortStableFunc(teams, func(a, b configTeam) int { return cmp.Compare(b.Share, a.Share) })
	roles := demoTeams()
	var out []demoTeam
	for i, t := range teams {
		if i >= len(roles) {
			break
		}
		role := roles[i]
		if len(teams) >= 3 && i == len(roles)-1 || len(teams) < 3 && i == len(teams)-1 && i > 0 {
			role = roles[len(roles)-1] // the smallest share floods
		}
		role.Name = t.Name
		out = append(out, role)
	}
	return out
}

// demo runs the demo load with the live view, then prints the summary. It
// returns the summary (for tests).
func (r *runner) demo(ctx context.Context, live bool) summary {
	teams := planTeams(r.pool)
	start := time.Now()
	stats := map[string]*teamStats{}
	for _, t := range teams {
		stats[t.Name] = newTeamStats(t.Name, start)
	}
	fmt.Fprintf(r.out, "demo:     %s for %v\n", describeLoad(teams, r.opts.duration), r.opts.duration)
	fmt.Fprintln(r.out)

	stopLoad, cancelStop := context.WithTimeout(ctx, r.opts.duration)
	defer cancelStop()
	reqCtx, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	g := &loadGen{
		client: r.client,
		base:   r.base,
		stats:  stats,
		shape: requestShape{
			Path:        r.cfg.chatPath(),
			Model:       r.model,
			TeamHeader:  r.cfg.TeamHeader,
			ClassHeader: r.cfg.ClassHeader,
		},
	}
	g.run(stopLoad, reqCtx, teams, r.opts.duration)
	done := make(chan struct{})
	go func() { g.wait(); close(done) }()

	period := refreshLines
	var lv *liveView
	if live {
		period = refreshLive
		lv = &liveView{w: r.out}
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	phase := "demo load"
	interrupted := false
	draw := func() {
		f := r.frame(start, stats, teams, phase)
		if lv != nil {
			lv.draw(f)
		} else {
			var b strings.Builder
			renderLines(&b, f)
			io.WriteString(r.out, b.String())
		}
	}
	// Each event channel is set to nil once handled so a closed one does
	// not fire again.
	stopC, interruptC := stopLoad.Done(), ctx.Done()
	var drainC <-chan time.Time
	interrupt := func() {
		interrupted = true
		phase = "interrupted: cancelling requests in flight"
		cancelReq()
		stopC, interruptC, drainC = nil, nil, nil
	}
loop:
	for {
		select {
		case <-tick.C:
			draw()
		case <-interruptC:
			interrupt()
		case <-stopC:
			stopC = nil
			if ctx.Err() != nil {
				interrupt()
				continue
			}
			phase = "load stopped: draining requests in flight"
			drain := time.NewTimer(r.opts.drain)
			defer drain.Stop()
			drainC = drain.C
		case <-drainC:
			drainC = nil
			phase = "drain timeout: cancelling requests in flight"
			cancelReq()
		case <-done:
			break loop
		}
	}
	elapsed := time.Since(start)
	phase = "done"
	pools, statusErr := r.settledStatus()
	f := r.frameWith(start, stats, teams, phase, pools, statusErr)
	if lv != nil {
		lv.draw(f)
		lv.close()
	} else {
		var b strings.Builder
		renderLines(&b, f)
		io.WriteString(r.out, b.String())
	}
	s := summary{
		Elapsed:      elapsed,
		Upstream:     r.upstreamKind(),
		Config:       r.configKind(),
		Pools:        pools,
		StatusErr:    statusErr,
		Interrupted:  interrupted,
		UpstreamLine: r.upstream.simLine(),
	}
	if !r.opts.verbose {
		s.PluginLogs = r.proxy.logs.count()
	}
	now := time.Now()
	for _, t := range teams {
		v := stats[t.Name].view(now, 0, elapsed)
		v.Share = r.pool.share(t.Name)
		v.Status = statusOf(pools, r.pool.Name, t.Name)
		s.Teams = append(s.Teams, v)
		s.Classes = append(s.Classes, t.Class)
		if e := stats[t.Name].lastError(); e != "" {
			s.Errors = append(s.Errors, t.Name+": "+e)
		}
	}
	var b strings.Builder
	renderSummary(&b, s)
	io.WriteString(r.out, b.String())
	return s
}

// upstreamKind names the upstream in a few words for the summary.
func (r *runner) upstreamKind() string {
	if r.upstream.simulated {
		return "simulated vLLM"
	}
	return "vLLM at " + r.upstream.url.String()
}

// configKind names the configuration in a few words for the summary.
func (r *runner) configKind() string {
	if r.opts.config == "" {
		return "embedded demo config"
	}
	return r.opts.config
}

// settledStatus fetches the plugin's status after the load, retrying for up
// to two seconds until no request is in flight (cancelled streams are
// released when the proxy sees them end).
func (r *runner) settledStatus() ([]statusPool, string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		pools, err := r.status(ctx)
		cancel()
		if err != nil {
			return nil, err.Error()
		}
		busy := false
		for _, p := range pools {
			if n, _ := p.inFlight(); n > 0 {
				busy = true
			}
		}
		if !busy || time.Now().After(deadline) {
			return pools, ""
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// frame gathers the live figures, fetching the plugin's status.
func (r *runner) frame(start time.Time, stats map[string]*teamStats, teams []demoTeam, phase string) frame {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pools, err := r.status(ctx)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return r.frameWith(start, stats, teams, phase, pools, msg)
}

// status fetches the plugin's status snapshot through the proxy.
func (r *runner) status(ctx context.Context) ([]statusPool, error) {
	if r.cfg.StatusPath == "" {
		return nil, errNoStatus
	}
	return fetchStatus(ctx, r.client, r.base+r.cfg.StatusPath, r.cfg.StatusToken)
}

func (r *runner) frameWith(start time.Time, stats map[string]*teamStats, teams []demoTeam, phase string, pools []statusPool, statusErr string) frame {
	now := time.Now()
	f := frame{
		Elapsed:   now.Sub(start),
		Duration:  r.opts.duration,
		Phase:     phase,
		Pools:     poolsNamed(pools, r.pool.Name),
		StatusErr: statusErr,
		Upstream:  r.upstream.simLine(),
	}
	for _, t := range teams {
		v := stats[t.Name].view(now, viewWindow, f.Elapsed)
		v.Share = r.pool.share(t.Name)
		v.Class = t.Class
		v.Status = statusOf(pools, r.pool.Name, t.Name)
		f.Teams = append(f.Teams, v)
	}
	return f
}

// poolsNamed returns the pool called name, or every pool if none is.
func poolsNamed(pools []statusPool, name string) []statusPool {
	for _, p := range pools {
		if p.Name == name {
			return []statusPool{p}
		}
	}
	return pools
}

// statusOf returns a copy of the team's entry in the named pool, or nil.
func statusOf(pools []statusPool, pool, team string) *statusTeam {
	for i := range pools {
		if pools[i].Name == pool || len(pools) == 1 {
			if t := pools[i].team(team); t != nil {
				c := *t
				return &c
			}
		}
	}
	return nil
}

// describeLoad says in one line what each team sends.
func describeLoad(teams []demoTeam, d time.Duration) string {
	var parts []string
	for _, t := range teams {
		s := fmt.Sprintf("%s %d %s clients", t.Name, t.Workers, t.Class)
		if t.StartAt > 0 {
			s += " from " + time.Duration(t.StartAt*float64(d)).Round(100*time.Millisecond).String()
		}
		if t.Think == 0 {
			s += " (flooding)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
