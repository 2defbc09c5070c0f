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

	"github.com/fairshare-wasm/fairshare/hostcalls/host"
)

// runner holds everything a run started: the upstream (simulator or a real
// URL), the proxy and the client that talks to it.
type runner struct {
	opts   options
	out    io.Writer
	cfg    configView
	plans  []poolPlan // the demo's load, per pool
	base   string     // the proxy's base URL
	client *http.Client
	obs    *observer // the figures of -no-load's traffic; nil in the demo

	configName string
	// generatedToken is the status token the runner gave a configuration
	// that had none (the plugin's status endpoint is closed without one).
	generatedToken string
	upstreamDesc   string
	upstream       *upstream
	proxy          *proxy   // proxies[0]
	proxies        []*proxy // -replicas: every proxy
	etcd           *embeddedEtcd
	closeOnce      sync.Once
	trace          *traceLoad // -trace: the replay, nil for the demo load
	// lat is the plugin's first-byte samples, read from every proxy's
	// host at each frame (latency.go).
	lat *pluginLatency
	// users are the demo's figures per user, with the plugin's
	// user_header (nil without it).
	users *userTallies
}

// poolPlan is the demo load of one pool: the model its requests name and
// the teams that send them.
type poolPlan struct {
	pool  configPool
	model string
	teams []demoTeam
}

// start starts the upstream and the proxy and prints what it started.
func start(ctx context.Context, o options, out, stderr io.Writer) (*runner, error) {
	r := &runner{opts: o, out: out, lat: newPluginLatency()}
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
	// The plugin's own validation, natively and before anything starts:
	// the plugin would refuse the same configuration in the proxy, behind
	// the host's error and after compiling the module.
	if _, err := checkConfig(name, cfgBytes); err != nil {
		return nil, err
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
	r.cfg, r.configName, r.generatedToken = cfg, name, generated
	r.plans = planPools(cfg, o.model)

	wasm, err := os.ReadFile(o.wasm)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w (build it with `make build`)", err)
	}

	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("-upstream %q: want an http(s) URL such as http://127.0.0.1:8000", o.upstream)
		}
		r.upstream = &upstream{url: u}
		r.upstreamDesc = "vLLM at " + u.String()
	}
	if o.tr.file != "" {
		if err := r.planTrace(o); err != nil {
			return nil, err
		}
	}
	if o.upstream == "" && len(o.engines) == 0 && cfg.capacityFrom() {
		o.engines = defaultEngines
		r.opts.engines = o.engines
	}
	if o.upstream == "" {
		up, err := startSimulator(cfg, o.timeScale, r.trace != nil && r.trace.Caching, o.engines)
		if err != nil {
			return nil, err
		}
		r.upstream = up
		r.upstreamDesc = up.desc
	}

	if o.noLoad {
		r.obs = newObserver(cfg, time.Now())
	}
	if err := r.startProxies(ctx, wasm, cfgBytes, o, stderr); err != nil {
		r.upstream.close()
		return nil, err
	}
	r.proxy = r.proxies[0]
	r.base = "http://" + r.proxy.addr
	r.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 256,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     30 * time.Second,
	}}
	r.banner(len(wasm))
	return r, nil
}

// planTrace loads -trace's window and makes it the load of one pool:
// -model's, else the first.
func (r *runner) planTrace(o options) error {
	p := r.plans[0]
	teams := traceTeamsOf(p.pool)
	if o.tr.teams != "" {
		teams, _ = parseTraceTeams(o.tr.teams) // checked by parseFlags
	}
	maxLen, scale := 0, 1.0
	if o.upstream == "" {
		maxLen, scale = poolEngine(p.pool.Capacity).MaxModelLen, o.timeScale
	}
	tl, err := loadTraceFile(o.tr, teams, scale, maxLen, o.upstream == "")
	if err != nil {
		return err
	}
	r.trace = tl
	p.teams = nil
	for _, t := range teams {
		p.teams = append(p.teams, demoTeam{Name: t.Name, Class: t.Class})
	}
	r.plans = []poolPlan{p}
	return nil
}

// startProxies starts the proxy, or with -replicas the embedded etcd and
// every proxy, each with its own cluster.replica.
func (r *runner) startProxies(ctx context.Context, wasm, cfgBytes []byte, o options, stderr io.Writer) error {
	if o.replicas == 1 {
		p, err := startProxy(ctx, wasm, cfgBytes, o, proxyBufferLimit(r.cfg), r.upstream.url, r.routes(), r.obs, stderr, o.listen, "fairshare", r.metricsClusters(false), r.metricsClusters(true))
		if err == nil {
			err = p.startAdmin(o.admin, 0, stderr)
		}
		if err != nil {
			if p != nil {
				p.close()
			}
			return err
		}
		r.proxies = []*proxy{p}
		return nil
	}
	e, err := startEtcd()
	if err != nil {
		return err
	}
	r.etcd = e
	for i := range o.replicas {
		cfg, cluster := withCluster(cfgBytes, replicaName(i))
		listen, err := replicaListen(o.listen, i)
		var p *proxy
		if err == nil {
			obs := r.obs // -no-load's figures: the traffic of the first proxy (the one its curl lines name)
			if i > 0 {
				obs = nil
			}
			p, err = startProxy(ctx, wasm, cfg, o, proxyBufferLimit(r.cfg), r.upstream.url, r.routes(), obs, stderr,
				listen, "fairshare-"+replicaName(i), map[string]string{cluster: e.srv.URL()}, nil)
			if err == nil {
				if err = p.startAdmin(o.admin, i, stderr); err != nil {
					p.close()
				}
			}
		}
		if err != nil {
			for _, q := range r.proxies {
				q.close()
			}
			e.close()
			return fmt.Errorf("replica %s: %w", replicaName(i), err)
		}
		r.proxies = append(r.proxies, p)
	}
	return nil
}

// banner prints what the run started and the configuration it runs: every
// setting the runner reads from it and every pool.
func (r *runner) banner(wasmSize int) {
	c := r.cfg
	fmt.Fprintf(r.out, "fairshare-run: plugin %s (%.1f MB) on %d VMs\n", r.opts.wasm, float64(wasmSize)/1e6, r.opts.vms)
	fmt.Fprintf(r.out, "config:   %s\n", r.configName)
	users := ""
	if c.UserHeader != "" {
		users = ", user header " + c.UserHeader
	}
	fmt.Fprintf(r.out, "settings: team header %s, class header %s%s, unknown teams %s, half_life %s, max_body_bytes %d, %s\n",
		c.TeamHeader, c.ClassHeader, users, c.UnknownTeam, c.HalfLife, c.MaxBodyBytes, c.Flow.header())
	for _, p := range c.Pools {
		fmt.Fprintf(r.out, "pool:     %s\n", describePool(p))
	}
	fmt.Fprintf(r.out, "upstream: %s\n", r.upstreamDesc)
	if len(r.opts.engines) > 0 && r.upstream.simulated && len(r.upstream.elastic) > 0 {
		fmt.Fprintf(r.out, "engines:  %s in service over time (-engines; the plugin's capacity_from reads them, the view's capacity follows)\n", describeEngines(r.opts.engines))
	}
	limit := fmt.Sprintf("buffer limit %d bytes = max_body_bytes", r.proxy.bufferLimit)
	switch {
	case r.generatedToken != "":
		fmt.Fprintf(r.out, "proxy:    %s (status: %s%s, bearer token %s generated for this run; %s)\n", r.base, r.base, c.StatusPath, r.generatedToken, limit)
	case c.StatusPath != "":
		fmt.Fprintf(r.out, "proxy:    %s (status: %s%s; %s)\n", r.base, r.base, c.StatusPath, limit)
	default:
		fmt.Fprintf(r.out, "proxy:    %s (status endpoint disabled; %s)\n", r.base, limit)
	}
	if a := r.proxy.admin; a != nil {
		more := ""
		if len(r.proxies) > 1 {
			more = "; each replica its own, on the next ports"
		}
		fmt.Fprintf(r.out, "admin:    %s (the plugin's metrics as Envoy's admin serves them, tagged as envoy.yaml's stats_tags tag them%s)\n", a.url(), more)
	}
	if len(r.proxies) > 1 {
		var names []string
		w := replicaWeights(len(r.proxies))
		for i, p := range r.proxies {
			names = append(names, fmt.Sprintf("%s http://%s (%d0%% of the load)", replicaName(i), p.addr, w[i]))
		}
		fmt.Fprintf(r.out, "replicas: %s, sharing every pool through the etcd embedded at %s\n", strings.Join(names, ", "), r.etcd.srv.URL())
	}
}

// describePool says in one line what a pool is: "llama-8b, capacity 16,
// models m: search 50%, chat 30% weight 2, research 20%".
func describePool(p configPool) string {
	var teams []string
	for _, t := range p.Teams {
		s := t.Name + " " + fmtShare(t.Share)
		if t.Weight != 0 {
			s += fmt.Sprintf(" weight %g", t.Weight)
		}
		teams = append(teams, s)
	}
	return fmt.Sprintf("%s, capacity %d, models %s: %s", p.Name, p.Capacity, strings.Join(p.Models, ", "), strings.Join(teams, ", "))
}

// proxyBufferLimit is the local proxy's per-request buffer limit (Envoy's
// per_connection_buffer_limit_bytes): the configuration's largest
// max_body_bytes, so that a body the plugin accepts is never cut by the
// proxy first, and one it refuses gets the plugin's JSON 413. Never below
// Envoy's default of 1 MiB.
func proxyBufferLimit(c configView) int {
	return max(c.MaxBodyBytes, host.DefaultBufferLimit)
}

// close stops the proxy and the upstream. Safe to call twice.
func (r *runner) close() {
	r.closeOnce.Do(func() {
		r.client.CloseIdleConnections()
		for _, p := range r.proxies {
			p.close()
		}
		if r.etcd != nil {
			r.etcd.close()
		}
		r.upstream.close()
	})
}

// planTeams assigns the demo's roles to the pool's teams by decreasing share
// (ties by configuration order): steady interactive, late interactive,
// flooding batch. A pool of fewer teams gets the first roles; teams beyond
// three send nothing. With users (the plugin's user_header) the steady
// team's load is its users' (demoUsers): one floods, three are light.
func planTeams(p configPool, users bool) []demoTeam {
	out := planRoles(p)
	if users && len(out) > 0 {
		out[0].Users = demoUsers(out[0])
	}
	return out
}

// planRoles is planTeams without users.
func planRoles(p configPool) []demoTeam {
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

// planPools plans the demo load: every pool of the configuration that is
// not another pool's fallback (spill_to), each with its model (see
// configPool.model) and planTeams scaled to its capacity; or,
// when model is set (-model), only the pool serving it, sending model.
func planPools(c configView, model string) []poolPlan {
	if model != "" {
		p := c.poolOf(model)
		return []poolPlan{{pool: p, model: model, teams: scaleTeams(planTeams(p, c.UserHeader != ""), p.Capacity)}}
	}
	var plans []poolPlan
	for _, p := range c.Pools {
		if c.isFallback(p.Name) {
			continue // idle but for what the others spill into it (spill.go)
		}
		plans = append(plans, poolPlan{pool: p, model: p.model(), teams: scaleTeams(planTeams(p, c.UserHeader != ""), p.Capacity)})
	}
	return plans
}

// demoCapacity is the capacity the demo's client counts are written for
// (demoTeams): the simulated engine's 16 sequences.
const demoCapacity = 16

// scaleTeams scales the clients of each team to a pool of the given
// capacity, so that the flood exceeds every pool and the steady teams stay
// within their shares: workers × capacity / 16, rounded, at least 1.
func scaleTeams(teams []demoTeam, capacity int) []demoTeam {
	out := slices.Clone(teams)
	scale := func(n int) int { return max(1, (n*capacity+demoCapacity/2)/demoCapacity) }
	for i := range out {
		out[i].Workers = scale(out[i].Workers)
		if len(out[i].Users) > 0 {
			out[i].Users = slices.Clone(out[i].Users)
			for k := range out[i].Users {
				out[i].Users[k].Workers = scale(out[i].Users[k].Workers)
			}
		}
	}
	return out
}

// row is one line of the live view and the summary: a team of a pool and
// the figures kept for it.
type row struct {
	pool  string
	team  string
	share float64 // configured share, 0 if the team is not configured
	class string  // the demo's request class, "" for observed traffic
	stats *teamStats
}

// demo runs the demo load with the live view, then prints the summary. It
// returns the summary (for tests).
func (r *runner) demo(ctx context.Context, live bool) summary {
	start := time.Now()
	var rows []row
	for _, p := range r.plans {
		if r.trace != nil {
			fmt.Fprintf(r.out, "load:     %s: %s, for at most %v\n", p.pool.Name, r.trace.describe(), r.opts.duration)
		} else {
			fmt.Fprintf(r.out, "demo:     %s: %s %s\n", p.pool.Name, describeLoad(p.teams, r.opts.duration), r.opts.describeEnd(r.opts.duration))
		}
		for _, t := range p.teams {
			rows = append(rows, row{pool: p.pool.Name, team: t.Name, share: p.pool.share(t.Name), class: t.Class, stats: newTeamStats(t.Name, start)})
		}
	}
	fmt.Fprintln(r.out)

	stopLoad, cancelStop, end := r.stopLoad(ctx, start, rows)
	defer cancelStop()
	go r.scaleEngines(stopLoad, r.opts.engines)
	reqCtx, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	var gens []*loadGen
	if r.cfg.UserHeader != "" {
		r.users = newUserTallies()
	}
	for _, p := range r.plans {
		stats := map[string]*teamStats{}
		for _, rw := range rows {
			if rw.pool == p.pool.Name {
				stats[rw.team] = rw.stats
			}
		}
		g := &loadGen{
			client:  r.client,
			bases:   r.bases(),
			weights: replicaWeights(len(r.proxies)),
			stats:   stats,
			users:   r.users,
			shape: requestShape{
				Path:        r.cfg.chatPath(),
				Model:       p.model,
				TeamHeader:  r.cfg.TeamHeader,
				ClassHeader: r.cfg.ClassHeader,
				UserHeader:  r.cfg.UserHeader,
			},
		}
		if len(r.plans) > 1 {
			g.pool = p.pool.Name
		}
		if r.trace != nil {
			g.runTrace(stopLoad, reqCtx, r.trace)
		} else {
			g.run(stopLoad, reqCtx, p.teams, r.opts.duration)
		}
		gens = append(gens, g)
	}
	done := make(chan struct{})
	go func() {
		for _, g := range gens {
			g.wait()
		}
		close(done)
	}()

	v := r.newView(live)
	tick := time.NewTicker(v.period)
	defer tick.Stop()
	phase := "demo load"
	interrupted := false
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
			v.draw(r.frame(start, r.opts.duration, rows, phase))
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
	return r.finish(start, r.opts.duration, rows, interrupted, v, end.result())
}

// finish draws the last frame with the plugin's settled status and prints
// the summary of rows; end is how the load stopped (loadEnd).
func (r *runner) finish(start time.Time, duration time.Duration, rows []row, interrupted bool, v *view, end loadStopped) summary {
	elapsed := time.Since(start)
	pools, statusErr := r.settledStatus()
	f := r.frameWith(start, duration, rows, "done", pools, statusErr)
	if len(r.proxies) > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		f.Replicas = r.replicaStatuses(ctx)
		cancel()
	}
	v.draw(f)
	v.close()
	s := summary{
		Elapsed:      elapsed,
		Upstream:     r.upstreamKind(),
		Config:       r.configKind(),
		Pools:        r.poolOrder(pools),
		StatusErr:    statusErr,
		Interrupted:  interrupted,
		UpstreamLine: r.upstream.simLine(),
		LoadUnmet:    end.unmet,
		UserLines:    r.users.lines(),
	}
	if r.trace != nil {
		s.TraceLine = r.trace.summaryLine()
	}
	s.Flow = r.cfg.Flow
	if r.upstream.simulated && r.trace == nil && r.obs == nil && !interrupted {
		s.Baseline = map[string]map[string]baselineTeam{}
		for _, p := range r.plans {
			s.Baseline[p.pool.Name] = fcfsBaseline(p, poolEngine(p.pool.Capacity), duration, max(end.ran, duration), r.opts.drain, r.opts.timeScale)
		}
	}
	if !r.opts.verbose {
		for _, p := range r.proxies {
			s.PluginLogs += p.logs.count()
		}
	}
	now := time.Now()
	r.pollLatency(now)
	for _, p := range r.cfg.Pools {
		if j := r.lat.jainOver(p.Name); j.All > 0 {
			if s.Jain == nil {
				s.Jain = map[string]jainSummary{}
			}
			s.Jain[p.Name] = j
		}
	}
	for _, rw := range rows {
		tv := rw.stats.view(now, 0, elapsed)
		r.label(&tv, rw, pools)
		r.lat.apply(&tv, rw.pool, rw.share > 0, now, 0)
		s.Teams = append(s.Teams, tv)
		s.Classes = append(s.Classes, orDash(rw.class))
		if e := rw.stats.lastError(); e != "" {
			s.Errors = append(s.Errors, tv.label()+": "+e)
		}
	}
	var b strings.Builder
	renderSummary(&b, s)
	io.WriteString(r.out, b.String())
	return s
}

// view draws frames: in place on a terminal (live), as lines otherwise.
type view struct {
	out    io.Writer
	live   *liveView // nil: lines
	period time.Duration
	// legend: lines only, the legend was printed (once, before the first
	// frame; the live view redraws it with every frame).
	legend bool
}

func (r *runner) newView(live bool) *view {
	if live {
		return &view{out: r.out, live: &liveView{w: r.out}, period: refreshLive}
	}
	return &view{out: r.out, period: refreshLines}
}

func (v *view) draw(f frame) {
	if v.live != nil {
		v.live.draw(f)
		return
	}
	var b strings.Builder
	if !v.legend {
		v.legend = true
		b.WriteString(f.Flow.header() + "\n")
		for _, l := range legend(f.Flow) {
			b.WriteString(l + "\n")
		}
	}
	renderLines(&b, f)
	io.WriteString(v.out, b.String())
}

func (v *view) close() {
	if v.live != nil {
		v.live.close()
	}
}

// serveOnly (-no-load) prints how to try the proxy, then shows the live view
// of whatever traffic arrives (the observer's figures and the plugin's
// status) until ctx is done, then the summary.
func (r *runner) serveOnly(ctx context.Context, live bool) summary {
	p := r.cfg.Pools[0]
	team, class := "search", "interactive"
	if len(p.Teams) > 0 {
		team = p.Teams[0].Name
	}
	fmt.Fprintf(r.out, "\nno demo load; try (Ctrl-C stops):\n\n")
	for _, p := range r.cfg.Pools {
		if len(p.Teams) > 0 {
			team = p.Teams[0].Name
		}
		fmt.Fprintf(r.out, "  curl -sN -D - %s%s -H 'content-type: application/json' -H '%s: %s' -H '%s: %s' \\\n"+
			"    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":32,\"stream\":true}'\n\n",
			r.base, r.cfg.chatPath(), r.cfg.TeamHeader, team, r.cfg.ClassHeader, class, p.model())
	}
	switch {
	case r.cfg.StatusPath == "":
	case r.cfg.StatusToken != "":
		fmt.Fprintf(r.out, "  curl -s -H 'authorization: Bearer %s' %s%s\n\n", r.cfg.StatusToken, r.base, r.cfg.StatusPath)
	default:
		fmt.Fprintf(r.out, "  curl -s %s%s\n\n", r.base, r.cfg.StatusPath)
	}
	start := r.obs.start
	v := r.newView(live)
	tick := time.NewTicker(v.period)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			v.draw(r.frame(start, 0, r.obs.rows(), "serving (no demo load)"))
		case <-ctx.Done():
			fmt.Fprintln(r.out, "\nstopping")
			return r.finish(start, 0, r.obs.rows(), false, v, loadStopped{})
		}
	}
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

// frame gathers the live figures of rows, fetching the plugin's status.
func (r *runner) frame(start time.Time, duration time.Duration, rows []row, phase string) frame {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var rs []replicaStatus
	var pools []statusPool
	var err error
	if len(r.proxies) > 1 && r.cfg.StatusPath != "" {
		rs = r.replicaStatuses(ctx)
		pools = mergeStatus(rs)
	} else {
		pools, err = r.status(ctx)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	f := r.frameWith(start, duration, rows, phase, pools, msg)
	f.Replicas = rs
	return f
}

// bases is every proxy's base URL.
func (r *runner) bases() []string {
	var b []string
	for _, p := range r.proxies {
		b = append(b, "http://"+p.addr)
	}
	return b
}

// status fetches the plugin's status snapshot through the proxy.
func (r *runner) status(ctx context.Context) ([]statusPool, error) {
	if r.cfg.StatusPath == "" {
		return nil, errNoStatus
	}
	if len(r.proxies) > 1 {
		rs := r.replicaStatuses(ctx)
		for _, x := range rs {
			if x.Err != "" {
				return nil, fmt.Errorf("replica %s: %s", x.Name, x.Err)
			}
		}
		return mergeStatus(rs), nil
	}
	return fetchStatus(ctx, r.client, r.base+r.cfg.StatusPath, r.cfg.StatusToken)
}

func (r *runner) frameWith(start time.Time, duration time.Duration, rows []row, phase string, pools []statusPool, statusErr string) frame {
	now := time.Now()
	f := frame{
		Elapsed:   now.Sub(start),
		Duration:  duration,
		Phase:     phase,
		Pools:     r.poolOrder(pools),
		StatusErr: statusErr,
		Upstream:  r.upstream.simLine(),
		Flow:      r.cfg.Flow,
	}
	r.pollLatency(now)
	for _, p := range r.cfg.Pools {
		if j, ok := r.lat.jainOf(p.Name); ok {
			if f.Jain == nil {
				f.Jain = map[string]jainReading{}
			}
			f.Jain[p.Name] = j
		}
	}
	for _, rw := range rows {
		v := rw.stats.view(now, viewWindow, f.Elapsed)
		r.label(&v, rw, pools)
		r.lat.apply(&v, rw.pool, rw.share > 0, now, viewWindow)
		f.Teams = append(f.Teams, v)
	}
	return f
}

// label fills the identity of a row's view: pool, team, share, class, the
// plugin's status of the team and, with several pools, a "pool/team" label.
func (r *runner) label(v *teamView, rw row, pools []statusPool) {
	v.Name, v.Pool, v.Share, v.Class = rw.team, rw.pool, rw.share, rw.class
	if len(r.cfg.Pools) > 1 {
		v.Label = rw.pool + "/" + rw.team
	}
	v.Status = statusOf(pools, rw.pool, rw.team)
}

// poolOrder returns the status's pools in the configuration's order, then
// any the configuration does not name.
func (r *runner) poolOrder(pools []statusPool) []statusPool {
	var out []statusPool
	for _, p := range r.cfg.Pools {
		for _, s := range pools {
			if s.Name == p.Name {
				out = append(out, s)
			}
		}
	}
	for _, s := range pools {
		if !slices.ContainsFunc(r.cfg.Pools, func(p configPool) bool { return p.Name == s.Name }) {
			out = append(out, s)
		}
	}
	return out
}

// statusOf returns a copy of the team's entry in the named pool, or nil.
func statusOf(pools []statusPool, pool, team string) *statusTeam {
	for i := range pools {
		if pools[i].Name == pool {
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
		if len(t.Users) > 0 {
			var us []string
			for _, u := range t.Users {
				w := fmt.Sprintf("%s %d", u.Name, u.Workers)
				if u.Think == 0 {
					w += " flooding"
				}
				us = append(us, w)
			}
			s = fmt.Sprintf("%s %s clients of users %s", t.Name, t.Class, strings.Join(us, ", "))
		}
		if t.StartAt > 0 {
			s += " from " + time.Duration(t.StartAt*float64(d)).Round(100*time.Millisecond).String()
		}
		if t.Think == 0 && len(t.Users) == 0 {
			s += " (flooding)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
