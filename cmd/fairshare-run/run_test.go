package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairshare-wasm/fairshare/internal/vllmsim"
	"github.com/fairshare-wasm/fairshare/internal/wasmbuild"
)

// pluginFile writes the plugin built from the working tree to a temporary
// file (fairshare-run reads -wasm from disk). A plugin that cannot be built
// fails the test.
func pluginFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin.wasm")
	if err := os.WriteFile(path, wasmbuild.Plugin(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runShortDemo runs a short demo (startShortDemo) on the built plugin with
// more flags, and returns the runner (closed when t ends), the summary and
// the output.
func runShortDemo(t *testing.T, flags ...string) (*runner, summary, string) {
	t.Helper()
	r, out := startShortDemo(t, flags...)
	s, text := runDemo(t, r, out)
	return r, s, text
}

// startShortDemo starts the runner of a short demo (time scale 0.5, lines
// view) with more flags, without running the demo: a test can wrap
// r.client.Transport or set r.opts.pending first. Its load runs for at
// least 4 seconds, then until every team has completed a request
// (options.minDone), however slow the machine: what a test asserts does
// not depend on how much happened within a real-time window. The drain
// lets every request sent end: its 2 minutes, like the load's guard, are a
// guard against a hang, not a speed check (a shorter one would cancel the
// requests still running, and whether a team got one done would depend on
// the machine's speed).
func startShortDemo(t *testing.T, flags ...string) (*runner, *syncBuffer) {
	t.Helper()
	o, err := parseFlags(append([]string{
		"-wasm", pluginFile(t), "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-duration", "4s", "-drain", "2m", "-time-scale", "0.5", "-view", "lines",
	}, flags...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr syncBuffer
	r, err := start(context.Background(), o, &out, &stderr)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	r.opts.minDone = 1
	t.Cleanup(r.close)
	return r, &out
}

// runDemo runs the demo of r (started by startShortDemo or startRun) and
// returns the summary and the output. A load whose end condition
// (r.opts.minDone, r.opts.pending) never held fails the test, saying what
// never happened.
func runDemo(t *testing.T, r *runner, out *syncBuffer) (summary, string) {
	t.Helper()
	s := r.demo(context.Background(), isTerminal(out, r.opts.view))
	text := out.String()
	t.Logf("output:\n%s", text)
	if s.LoadUnmet != "" {
		t.Errorf("the demo's end condition never held: %s", s.LoadUnmet)
	}
	return s, text
}

// TestDemo runs the whole demo through the real plugin in the wazero host,
// in front of the simulator, with the compact (non-terminal) output, and
// checks what a user is meant to see: every team is served, the
// flooding team borrows (priority ≥ 10) while the within-share team's
// interactive requests run at priority 0 and go first (never held at the
// gateway while research's borrowers are, and ahead of every borrower
// waiting with them in vLLM's queue), the summary is printed, and nothing is
// left in flight in the plugin at the end. Orders and counts, not response
// times: which team is faster on a loaded machine is not the plugin's. The
// load runs until those counts can be seen (every team served, research
// done borrowing and held at the gateway as a borrower), not for a fixed
// time.
func TestDemo(t *testing.T) {
	r, out := startShortDemo(t)
	gw := &gatewayLog{held: map[string]int{}, sent: map[string]int{}, borrowersHeld: map[string]int{}}
	r.client.Transport = gatewayTransport{RoundTripper: r.client.Transport, header: r.cfg.TeamHeader, log: gw}
	r.opts.pending = func(teams []teamView) string {
		var p []string
		for _, v := range teams {
			if v.Name == "research" && v.DoneBorrow == 0 {
				p = append(p, "research to complete a borrowing request")
			}
		}
		gw.mu.Lock()
		if gw.borrowersHeld["research"] == 0 {
			p = append(p, "research's borrowers to be held at the gateway")
		}
		gw.mu.Unlock()
		return strings.Join(p, ", ")
	}
	s, text := runDemo(t, r, out)

	for _, want := range []string{"config:   embedded demo config", "upstream: simulated vLLM", "summary after", "TTFT p50",
		"flow control on (max_queue_time 30s)", "RSV reserved slots", "without the plugin: the same demo load"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(text, "\x1b[") {
		t.Errorf("non-terminal output has ANSI escape codes")
	}
	teams := map[string]teamView{}
	for _, v := range s.Teams {
		teams[v.Name] = v
		if v.Done == 0 {
			t.Errorf("team %s completed no request: %+v", v.Name, v)
		}
		if v.Errors > 0 {
			t.Errorf("team %s had %d errors (last: %v)", v.Name, v.Errors, s.Errors)
		}
		if v.Tokens == 0 {
			t.Errorf("team %s received no tokens", v.Name)
		}
		// The TTFT columns are the plugin's first_byte_ms, read from the
		// proxy's host.
		if !v.PluginTTFT || v.P50 <= 0 || v.P99 < v.P50 {
			t.Errorf("team %s: TTFT p50 %v p99 %v not from the plugin (plugin %v)", v.Name, v.P50, v.P99, v.PluginTTFT)
		}
	}
	search, research := teams["search"], teams["research"]
	if research.DoneBorrow == 0 || len(research.Prios) == 0 || slices.Max(research.Prios) < borrowBase {
		t.Errorf("research (flooding) did not borrow: %d of %d requests borrowed, priorities %v",
			research.DoneBorrow, research.Done, research.Prios)
	}
	if search.DoneBorrow != 0 || !slices.Equal(search.Prios, []int{0}) {
		t.Errorf("search (interactive, within share) got priorities %v with %d borrowing, want only 0 and none",
			search.Prios, search.DoneBorrow)
	}
	// Search goes first at the gateway: none of its requests was held,
	// while some of research's borrowers were (the pool was full).
	gw.mu.Lock()
	t.Logf("held at the gateway: search %d of %d, research %d of %d (%d borrowers)",
		gw.held["search"], gw.sent["search"], gw.held["research"], gw.sent["research"], gw.borrowersHeld["research"])
	if gw.sent["search"] == 0 || gw.held["search"] != 0 || gw.borrowersHeld["research"] == 0 {
		t.Errorf("held at the gateway: search %d of %d requests, research's borrowers %d; want search none and research some",
			gw.held["search"], gw.sent["search"], gw.borrowersHeld["research"])
	}
	gw.mu.Unlock()
	// And in vLLM's queue: no request was admitted while one of a more
	// urgent priority (search's 0 against research's borrowers') that
	// arrived before waited on the same engine.
	checkPriorityOrder(t, r.upstream.sims[0].Records())

	// The plugin's view after the run: the three teams, nothing in flight.
	if len(s.Pools) == 0 {
		t.Fatalf("no plugin status at the end: %s", s.StatusErr)
	}
	pools := settled(t, r)
	if len(pools) != 1 || pools[0].Name != "llama-8b" || len(pools[0].Teams) < 3 {
		t.Errorf("status has no pool llama-8b with the three teams: %+v", pools)
	}

	// The summary's latency lines: research's held borrowers have a queue
	// time, every team an end to end.
	if research.Queue.N == 0 || search.Total.N == 0 || research.Total.N == 0 {
		t.Errorf("summary latency: research queue %+v, end to end search %+v research %+v; want samples in each", research.Queue, search.Total, research.Total)
	}
	// The admin port the banner names serves the plugin's metrics as
	// Envoy's admin does, tagged: research's held requests are in its
	// queue-time histogram.
	a := r.proxy.admin
	if a == nil || !strings.Contains(text, "admin:    "+a.url()+" ") {
		t.Fatalf("the banner names no admin port (admin %v):\n%s", a, text)
	}
	resp, err := http.Get(a.url())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	held := regexp.MustCompile(`\nfairshare_queue_time_ms_count\{pool="llama-8b",team="research",class="batch"\} ([1-9]\d*)\n`)
	if resp.StatusCode != http.StatusOK || !held.Match(body) || !strings.Contains(string(body), "\n# TYPE fairshare_first_byte_ms histogram\n") {
		t.Errorf("GET %s = %d, want research's queue_time_ms count and the first_byte_ms histograms:\n%s", a.url(), resp.StatusCode, body)
	}
}

// settled polls the plugin's status until no request is in flight (the
// proxy releases a request when it sees its stream end, a moment after the
// client does) and returns it. A slot that is never released fails the
// test; the 2-minute deadline only stops a hung test.
func settled(t *testing.T, r *runner) []statusPool {
	t.Helper()
	hang := time.Now().Add(2 * time.Minute) // a guard against a hang, not a speed check
	for {
		pools, err := r.status(context.Background())
		if err != nil {
			t.Fatalf("status after the run: %v", err)
		}
		busy := false
		for _, p := range pools {
			if n, _ := p.inFlight(); n != 0 {
				busy = true
				if time.Now().After(hang) {
					t.Fatalf("pool %s has %d requests in flight after the run: %+v", p.Name, n, p.Teams)
				}
			}
		}
		if !busy {
			return pools
		}
		time.Sleep(20 * time.Millisecond) // polling, not a window
	}
}

// gatewayLog counts, by team, the demo's requests answered and those the
// plugin held at the gateway (x-fairshare-queue-time other than "0.000"),
// and the held ones that went at a borrower's priority.
type gatewayLog struct {
	mu                        sync.Mutex
	sent, held, borrowersHeld map[string]int
}

// gatewayTransport records every response's gateway headers in log.
type gatewayTransport struct {
	http.RoundTripper
	header string // the team header
	log    *gatewayLog
}

func (t gatewayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		team := req.Header.Get(t.header)
		t.log.mu.Lock()
		t.log.sent[team]++
		if q := resp.Header.Get("x-fairshare-queue-time"); q != "" && q != "0.000" {
			t.log.held[team]++
			if resp.Header.Get("x-fairshare-borrowing") == "true" {
				t.log.borrowersHeld[team]++
			}
		}
		t.log.mu.Unlock()
	}
	return resp, err
}

// checkPriorityOrder checks vLLM's priority order in the simulator's
// records: of two requests on one engine that waited at the same time, the
// more urgent (lower priority) was admitted no later. It logs how many
// pairs of a priority-0 request and a borrower waited together.
func checkPriorityOrder(t *testing.T, recs []vllmsim.Record) {
	t.Helper()
	contended := 0
	for _, a := range recs {
		for _, b := range recs {
			if a.Replica != b.Replica || a.Priority >= b.Priority || a.Admitted.IsZero() || b.Admitted.IsZero() ||
				!a.Arrival.Before(b.Admitted) || !b.Arrival.Before(a.Admitted) {
				continue // not waiting together
			}
			if a.Priority == 0 && b.Priority >= borrowBase {
				contended++
			}
			if b.Admitted.Before(a.Admitted) {
				t.Errorf("%s (priority %d) admitted at %v while %s (priority %d, arrived %v) waited until %v",
					b.ID, b.Priority, b.Admitted, a.ID, a.Priority, a.Arrival, a.Admitted)
			}
		}
	}
	t.Logf("vLLM's queue: %d records; %d pairs of a priority-0 request and a borrower waited together", len(recs), contended)
}

// servedBody is a response body that calls served once, at Close, if the
// stream it carried ended with "data: [DONE]" (a request the demo's client
// counts as done: it closes the body before it counts it).
type servedBody struct {
	io.ReadCloser
	seen   []byte
	served func()
}

func (b *servedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.seen = append(b.seen, p[:n]...)
	if len(b.seen) > 64 {
		b.seen = b.seen[len(b.seen)-64:]
	}
	return n, err
}

func (b *servedBody) Close() error {
	err := b.ReadCloser.Close()
	if bytes.Contains(b.seen, []byte("data: [DONE]")) {
		b.served()
	}
	return err
}

// servedTransport wraps every streamed response's body in a servedBody.
type servedTransport struct {
	http.RoundTripper
	served func()
}

func (t servedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &servedBody{ReadCloser: resp.Body, served: t.served}
	}
	return resp, err
}

// TestInterrupt cancels the run midway, as Ctrl-C does: run returns
// without error, says the summary was interrupted, and the plugin releases
// every cancelled request. It also runs the -upstream and -config paths: a
// simulator started apart stands for a real vLLM, and the configuration is
// the example file. The interrupt comes once the demo's client has been
// served a whole stream, however long that takes (not after a fixed time),
// long before the hour the demo is planned for.
func TestInterrupt(t *testing.T) {
	sim := vllmsim.NewServer(vllmsim.DemoConfig(), vllmsim.ServerOptions{})
	vllm := httptest.NewServer(sim)
	defer vllm.Close()
	defer sim.Close() // first: it ends the streams vllm.Close waits for
	o, err := parseFlags([]string{
		"-wasm", pluginFile(t), "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-duration", "1h", "-view", "lines",
		"-upstream", vllm.URL, "-config", "../../testdata/plugin/example.json",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr syncBuffer
	r, err := start(context.Background(), o, &out, &stderr)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer r.close()
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	r.client.Transport = servedTransport{RoundTripper: r.client.Transport, served: func() { once.Do(cancel) }}
	s := r.demo(ctx, false)
	if !s.Interrupted {
		t.Errorf("summary not marked interrupted")
	}
	for _, want := range []string{
		"config:   ../../testdata/plugin/example.json\n",
		"pool:     llama-8b, capacity 64,",
		"upstream: vLLM at " + vllm.URL + "\n",
		"summary interrupted after",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var served int
	for _, v := range s.Teams {
		served += v.Done
	}
	if served == 0 || len(sim.Records()) == 0 {
		t.Errorf("no request reached the upstream given by -upstream (%d done, %d records)", served, len(sim.Records()))
	}
	if s.Elapsed >= o.duration {
		t.Errorf("interrupted demo ran %v, its whole planned duration", s.Elapsed)
	}
	pools, err := r.status(context.Background())
	if err != nil {
		t.Fatalf("status after the interrupt: %v", err)
	}
	for _, p := range pools {
		if n, _ := p.inFlight(); n != 0 {
			t.Errorf("pool %s has %d requests in flight after the interrupt: %+v", p.Name, n, p.Teams)
		}
	}
}

// TestNoLoad runs the command with -no-load: it serves the proxy, prints
// how to try it, sends nothing itself, shows the traffic others send (a
// configured team within its share, a team the configuration does not
// name, borrowing) and returns cleanly with a summary when interrupted.
func TestNoLoad(t *testing.T) {
	var out syncBuffer
	wasm := pluginFile(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-wasm", wasm, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-no-load", "-view", "lines"}, &out, io.Discard)
	}()
	// Wait for the curl hint (the proxy is up once it is printed).
	hang := time.After(2 * time.Minute) // a guard against a hang, not a speed check
	for !strings.Contains(out.String(), "/fairshare/status\n\n") {
		select {
		case err := <-errc:
			t.Fatalf("run returned before the interrupt: %v\n%s", err, out.String())
		case <-hang:
			t.Fatalf("run printed no curl hint:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	base := regexp.MustCompile(`proxy:    (http://[0-9.:]+) `).FindStringSubmatch(out.String())
	if base == nil {
		t.Fatalf("no proxy address in:\n%s", out.String())
	}
	for _, team := range []string{"search", "search", "ops"} {
		body := `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"stream":true}`
		req, _ := http.NewRequest(http.MethodPost, base[1]+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-team", team)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("team %s: %d %s", team, resp.StatusCode, b)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run(-no-load) after Ctrl-C = %v, want nil", err)
	}
	text := out.String()
	for _, want := range []string{
		"no demo load", "curl -sN", "-H 'x-team: search'", "-H 'x-request-class: interactive'", "stopping",
		"] search    in flight   0 (within  0, borrowing   0)  priority 0 ",
		"] research  in flight   0 (within  0, borrowing   0)  priority - ",
		"summary after",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("-no-load output lacks %q:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`\n\[ *\d+s\] search .* done 2\n`).MatchString(text) {
		t.Errorf("-no-load view does not count search's 2 requests:\n%s", text)
	}
	// ops is not configured: its row is the plugin's shared entry, named
	// as the plugin's status and metrics name it.
	if !regexp.MustCompile(`\n\[ *\d+s\] _unknown .* priority [1-9]\d +.* done 1\n`).MatchString(text) || strings.Contains(text, "] ops ") {
		t.Errorf("-no-load view has no borrowing row _unknown for the unconfigured team ops:\n%s", text)
	}
	if !regexp.MustCompile(`\nsearch +- +2 +0 +2 +0  0 +16 `).MatchString(text) {
		t.Errorf("-no-load summary lacks search's 2 requests within share and their 16 tokens:\n%s", text)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.wasm != defaultWasm() || o.listen != defaultListen || o.vms != defaultVMs || o.duration != defaultDuration ||
		o.config != "" || o.upstream != "" || o.noLoad || o.view != "auto" {
		t.Errorf("defaults = %+v", o)
	}
	for _, bad := range [][]string{
		{"-vms", "0"}, {"-duration", "0s"}, {"-view", "fancy"}, {"-time-scale", "0"}, {"extra"}, {"-nope"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", bad)
		}
	}
	for _, bad := range [][]string{
		{"-trace-format", "azure"}, {"-trace", "x.csv"}, {"-trace", "x.csv", "-trace-format", "csv"},
		{"-trace", "x.csv", "-trace-format", "azure", "-trace-every", "2", "-trace-offset", "2"},
		{"-trace", "x.csv", "-trace-format", "azure", "-trace-teams", "a=0.5,b"},
		{"-trace", "x.csv", "-trace-format", "azure", "-trace-teams", "a=0,b=1"},
		{"-trace", "x.csv", "-trace-format", "azure", "-trace-teams", "a=1:bulk"},
		{"-trace", "x.csv", "-trace-format", "azure", "-no-load"},
		{"-trace", "x.csv", "-trace-format", "azure", "-trace-requests", "-1"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", bad)
		}
	}
	if _, err := parseFlags([]string{"-no-load", "-duration", "0s"}, io.Discard); err != nil {
		t.Errorf("-no-load needs no duration: %v", err)
	}
}

// TestDemoReplicas runs the demo on three proxies sharing the pool through
// the embedded etcd (-replicas 3): the load is split 70/20/10, the view
// shows every replica's slice, every team is served (the load runs until it
// is), and once the load is over the three slices add up to the pool, each
// proxy holding a part.
func TestDemoReplicas(t *testing.T) {
	r, s, text := runShortDemo(t, "-replicas", "3")
	for _, want := range []string{"replicas: r0 http://", "(70% of the load)", "replica r2 ", "summary after"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, tv := range s.Teams {
		if tv.Done == 0 {
			t.Errorf("team %s: no request done through three proxies", tv.Name)
		}
	}
	capacity := r.cfg.Pools[0].Capacity
	var rs []replicaStatus
	// The slices settle through etcd once the load is over; the 2 minutes
	// only stop a hung test (a guard, not a speed check).
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		rs = r.replicaStatuses(context.Background())
		sum, parts := 0, 0
		for _, x := range rs {
			if len(x.Pools) > 0 {
				sum += x.Pools[0].Capacity
				if x.Pools[0].Capacity > 0 {
					parts++
				}
			}
		}
		if sum == capacity && parts == 3 {
			return
		}
	}
	t.Errorf("slices after the load = %+v, want three parts adding up to %d", rs, capacity)
}

// TestTraceReplay replays the first 30 requests of the shipped Azure
// conversation window (ten times its speed) through the real plugin and
// the simulator, split among three teams: every request is answered, each
// team gets some, the batch team's requests go as batch, and the summary
// names the window and the rows sent. Bounded by requests, not by time.
func TestTraceReplay(t *testing.T) {
	file := filepath.Join("..", "..", "testdata", "traces", "azure_conv_1800s_900s.csv")
	_, s, text := runShortDemo(t, "-duration", "10m", "-drain", "1m", "-trace", file, "-trace-format", "azure",
		"-trace-time-scale", "0.1", "-trace-requests", "30", "-trace-teams", "search=0.5,chat=0.3,research=0.2:batch")
	done := 0
	for _, v := range s.Teams {
		done += v.Done
		if v.Done == 0 || v.Errors > 0 {
			t.Errorf("team %s: %d done, %d errors (%v)", v.Name, v.Done, v.Errors, s.Errors)
		}
	}
	if done != 30 || len(s.Teams) != 3 {
		t.Errorf("%d requests done over %d teams, want 30 over 3", done, len(s.Teams))
	}
	if !slices.Equal(s.Classes, []string{"interactive", "interactive", "batch"}) {
		t.Errorf("classes %v, want interactive, interactive, batch", s.Classes)
	}
	for _, want := range []string{"load:     ", "azure_conv_1800s_900s.csv (azure)", "30 of the window's 5769 rows sent (30 planned)", "time_scale 0.1", "inter-arrival CV"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(text, "mock_hash_ids") {
		t.Errorf("an Azure trace has no block ids, yet the summary says they were sent")
	}
}
