package plugin

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/fairshare-wasm/fairshare/hostcalls"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// Capacity from the engines (a pool's capacity_from block).
//
// A pool with capacity_from takes C and K (kv_tokens) from the vLLM
// engines that serve it instead of from its configuration: one VM per
// proxy, the poller (elected through the shared-data key
// <plugin>/fairshare/capacity, as the cluster sync elects its VM), reads
// every engine's /metrics with proxy_http_call each interval, keeps the
// readings in shared data (<plugin>/fairshare/capacity/<pool>) and, when
// the round's answers are in, applies the sum to the pool's record with
// SetCapacity and SetKVTokens (updatePool): requests in flight keep their
// standing, new ones are judged against the new reservations.
//
//	engines "cluster" (sidecar): one call per interval to the cluster: its
//	    load balancer picks the host, so it reads the one local engine
//	engines "learned" (gateway): one call per engine address, to an
//	    ORIGINAL_DST cluster (use_http_header) with the address in
//	    x-envoy-original-dst-host; the addresses are the static list and
//	    every upstream.address a served response named (on_response_headers)
//
//	tick ─▶ poller? ─▶ for each pool due: drop addresses neither read nor
//	        seen for expire ─▶ http_call each ─▶ answers recorded ─▶ last
//	        answer: C = Σ max_num_seqs × cores, K = Σ kv tokens over the
//	        readings not older than expire and not failed since; none: the
//	        configured capacity and kv_tokens ─▶ SetCapacity, SetKVTokens
//
// A pool that declares throughput (X, the work resource) takes X from
// the engines too: each reading of vLLM's token counters (promtext.go)
// against the engine's previous one gives the rate it served, in the
// pool's cost units per second,
//
//	rate = ((Δprompt − Δcached)·prompt_token + Δcached·cached_prompt_token
//	        + Δgeneration·completion_token) / Δt
//
// and only a rate measured while the engine was saturated (requests
// waiting at both readings) says what it can serve: the engine keeps a
// peak, max(rate, peak decayed with a half-life of 10 minutes), that
// otherwise only decays. X = Σ peak over the engines that count; while
// none has a peak, the configured throughput. A counter that went down
// (the engine restarted) gives no rate; a rate that is not a number,
// negative or above 2^40 is ignored with one warning per engine. A read
// never turns the work resource on (SetThroughput). With the cluster
// block the replicas agree on X from the peaks each publishes, as they
// agree on C and K (fleetcap.go, agreeThroughput).
//
// An engine whose read fails counts for nothing from that round on (the
// safe direction: C shrinks); its address is polled until it has been
// neither read nor seen for expire, then forgotten. A reading is never
// used older than expire, so a poller that stops leaves the pool on its
// last C only until the next poller (elected after three intervals)
// applies fresh readings or the configuration.

// Engine discovery modes.
const (
	enginesCluster = "cluster"
	enginesLearned = "learned"
)

// capacityFrom is a pool's capacity_from block.
type capacityFrom struct {
	cluster    string
	engines    string
	addresses  []string // static engine addresses ("ip:port"), learned mode
	header     string   // the ORIGINAL_DST cluster's header (learned mode)
	path       string
	authority  string
	interval   time.Duration
	timeout    time.Duration
	expire     time.Duration
	maxNumSeqs int // sequences per engine core when the engine does not say
}

// DefaultMaxNumSeqs is capacity_from.max_num_seqs by default: vLLM's
// --max-num-seqs default on GPUs.
const DefaultMaxNumSeqs = 256

func parseCapacityFrom(ps *problems, path string, v gjson.Result) *capacityFrom {
	if !v.IsObject() {
		ps.add(path, "must be an object, got %s", typeName(v))
		return nil
	}
	cf := &capacityFrom{engines: enginesCluster, header: "x-envoy-original-dst-host", path: "/metrics",
		interval: 5 * time.Second, timeout: time.Second, maxNumSeqs: DefaultMaxNumSeqs}
	seen := members(ps, path, v, func(key, fp string, f gjson.Result) bool {
		switch key {
		case "cluster":
			if s, ok := str(ps, fp, f); ok {
				if s == "" {
					ps.add(fp, "must name an Envoy cluster")
				}
				cf.cluster = s
			}
		case "engines":
			if s, ok := str(ps, fp, f); ok {
				if s != enginesCluster && s != enginesLearned {
					ps.add(fp, "must be \"cluster\" (one engine behind the cluster: a sidecar) or \"learned\" (every engine that served a request, through an ORIGINAL_DST cluster: a gateway), got %q", s)
				}
				cf.engines = s
			}
		case "addresses":
			strs(ps, fp, f, "\"ip:port\" engine addresses", func(ap, s string) {
				if addr, ok := engineAddress(s); ok {
					cf.addresses = append(cf.addresses, addr)
				} else {
					ps.add(ap, "must be an IP address and port (\"10.0.0.5:8000\", \"[fd00::5]:8000\"): the ORIGINAL_DST cluster takes no names, got %q", s)
				}
			})
		case "header":
			cf.header = headerName(ps, fp, f)
		case "path":
			if s, ok := str(ps, fp, f); ok {
				if !strings.HasPrefix(s, "/") {
					ps.add(fp, "must be a path starting with /, got %q", s)
				}
				cf.path = s
			}
		case "authority":
			if s, ok := str(ps, fp, f); ok {
				cf.authority = s
			}
		case "interval":
			cf.interval = duration(ps, fp, f, 100*time.Millisecond)
		case "timeout":
			cf.timeout = duration(ps, fp, f, time.Millisecond)
		case "expire":
			cf.expire = duration(ps, fp, f, time.Millisecond)
		case "max_num_seqs":
			cf.maxNumSeqs = integer(ps, fp, f, 1, 1<<20, DefaultMaxNumSeqs)
		default:
			ps.add(fp, "unknown field")
			ps.suggest(key, capacityFromFields)
		}
		return true
	})
	if !seen["cluster"] {
		ps.add(path+".cluster", "required: the Envoy cluster the engines' /metrics are read through")
	}
	if cf.authority == "" {
		cf.authority = cf.cluster
	}
	if !seen["expire"] {
		cf.expire = 3 * cf.interval
	} else if cf.expire > 0 && cf.expire < cf.interval {
		ps.add(path+".expire", "must be at least interval (%s), got %s", cf.interval, cf.expire)
	}
	if cf.timeout >= cf.interval && cf.interval > 0 {
		ps.add(path+".timeout", "must be below interval (%s), got %s", cf.interval, cf.timeout)
	}
	if cf.engines == enginesCluster && len(cf.addresses) > 0 {
		ps.add(path+".addresses", "needs engines \"learned\" (engines \"cluster\" reads the one engine the cluster picks)")
	}
	return cf
}

// engineAddress returns s as Envoy writes an address ("10.0.0.5:8000",
// "[fd00::5]:8000"), if it is an IP address and port.
func engineAddress(s string) (string, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return "", false
	}
	return ap.String(), true
}

// engineEntry is one engine's state in the shared readings.
type engineEntry struct {
	seen int64 // last named by a served response's upstream.address (unix ns)
	read int64 // last read (unix ns; 0: never)
	fail int64 // last failed read (unix ns; 0: never)
	err  string
	r    engineReading
	// peak is the engine's throughput (cost units per second) at peakAt,
	// decaying with throughputHalfLife (0: no saturated rate measured
	// yet); warned: an absurd rate was logged.
	peak   float64
	peakAt int64
	warned bool
}

// throughputHalfLife is the half-life of an engine's throughput peak: a
// peak measured once fades to half in 10 minutes unless a saturated
// reading measures it again.
const throughputHalfLife = 10 * time.Minute

// maxThroughput bounds a rate taken as an engine's throughput (cost
// units per second), as the core clamps X.
const maxThroughput = 1 << 40

// peakNow is the engine's throughput peak decayed to now (unix ns).
func (e *engineEntry) peakNow(now int64) float64 {
	if e.peak <= 0 || now <= e.peakAt {
		return max(e.peak, 0)
	}
	return e.peak * math.Exp2(-float64(now-e.peakAt)/float64(throughputHalfLife))
}

// tokenRate is the rate the engine served between two readings dt apart,
// in cost units per second: ok is false when there is none (a reading
// without token counters, dt ≤ 0, or a counter that went down: a
// restart). Hits above the prompt tokens of the interval (counted at
// another step) are taken as all of them cached.
func tokenRate(prev, cur engineReading, dt time.Duration, w costWeights) (rate float64, ok bool) {
	if !prev.tokens || !cur.tokens || dt <= 0 {
		return 0, false
	}
	dp, dg, dc := cur.promptTokens-prev.promptTokens, cur.genTokens-prev.genTokens, cur.cachedTokens-prev.cachedTokens
	if dp < 0 || dg < 0 || dc < 0 {
		return 0, false
	}
	dc = min(dc, dp)
	return ((dp-dc)*w.prompt + dc*w.cachedPrompt + dg*w.completion) / dt.Seconds(), true
}

// observe updates the engine's throughput peak with a new reading r at
// now, against its previous reading (e.r at e.read), before r replaces
// it: a saturated rate (requests waiting at both readings) raises the
// peak, any other reading lets it decay. It reports a rate it ignored as
// absurd (not a number, negative, above maxThroughput).
func (e *engineEntry) observe(now int64, r engineReading, w costWeights) (absurd bool) {
	peak := e.peakNow(now)
	if e.read > 0 {
		if rate, ok := tokenRate(e.r, r, time.Duration(now-e.read), w); ok {
			switch {
			case math.IsNaN(rate) || rate < 0 || rate > maxThroughput:
				absurd = true
			case r.waiting > 0 && e.r.waiting > 0:
				peak = max(peak, rate)
			}
		}
	}
	e.peak, e.peakAt = peak, now
	return absurd
}

// engineSet is a pool's engines and what was applied, in shared data.
type engineSet struct {
	engines map[string]*engineEntry
	source  string // "config" or "engines"
	n       int    // engine cores whose readings were applied
	c       int    // C applied
	kv      int64  // K applied
	x       int64  // X applied (throughput, cost units per second)
	xn      int    // engines whose peaks made X (0: the configured throughput)
	at      int64  // when applied (unix ns)
}

// capacityKey is the shared-data key of a pool's engine readings.
func capacityKey(plugin, pool string) string { return plugin + "/fairshare/capacity/" + pool }

// pollerKey is the shared-data key of the poller election.
func pollerKey(plugin string) string { return plugin + "/fairshare/capacity" }

// localEngine is the key of the one engine of engines "cluster".
const localEngine = "local"

func (s *engineSet) encode() []byte {
	b := []byte(`{"source":`)
	b = appendJSONString(b, s.source)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, int64(s.n), 10)
	b = append(b, `,"c":`...)
	b = strconv.AppendInt(b, int64(s.c), 10)
	b = append(b, `,"kv":`...)
	b = strconv.AppendInt(b, s.kv, 10)
	b = append(b, `,"x":`...)
	b = strconv.AppendInt(b, s.x, 10)
	b = append(b, `,"xn":`...)
	b = strconv.AppendInt(b, int64(s.xn), 10)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, s.at, 10)
	b = append(b, `,"engines":{`...)
	names := make([]string, 0, len(s.engines))
	for a := range s.engines {
		names = append(names, a)
	}
	slices.Sort(names)
	for i, a := range names {
		e := s.engines[a]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, a)
		b = append(b, `:{"seen":`...)
		b = strconv.AppendInt(b, e.seen, 10)
		b = append(b, `,"read":`...)
		b = strconv.AppendInt(b, e.read, 10)
		b = append(b, `,"fail":`...)
		b = strconv.AppendInt(b, e.fail, 10)
		b = append(b, `,"err":`...)
		b = appendJSONString(b, e.err)
		b = append(b, `,"cores":`...)
		b = strconv.AppendInt(b, int64(e.r.cores), 10)
		b = append(b, `,"kv":`...)
		b = strconv.AppendInt(b, e.r.kvTokens, 10)
		b = append(b, `,"seqs":`...)
		b = strconv.AppendInt(b, int64(e.r.maxNumSeqs), 10)
		b = append(b, `,"running":`...)
		b = strconv.AppendInt(b, int64(e.r.running), 10)
		b = append(b, `,"waiting":`...)
		b = strconv.AppendInt(b, int64(e.r.waiting), 10)
		b = append(b, `,"usage":`...)
		b = strconv.AppendFloat(b, e.r.usage, 'g', -1, 64)
		b = append(b, `,"asleep":`...)
		b = strconv.AppendInt(b, int64(e.r.asleep), 10)
		if e.r.tokens {
			b = append(b, `,"pt":`...)
			b = strconv.AppendFloat(b, e.r.promptTokens, 'g', -1, 64)
			b = append(b, `,"gt":`...)
			b = strconv.AppendFloat(b, e.r.genTokens, 'g', -1, 64)
			b = append(b, `,"ct":`...)
			b = strconv.AppendFloat(b, e.r.cachedTokens, 'g', -1, 64)
		}
		if e.peakAt != 0 {
			b = append(b, `,"peak":`...)
			b = strconv.AppendFloat(b, e.peak, 'g', -1, 64)
			b = append(b, `,"peak_at":`...)
			b = strconv.AppendInt(b, e.peakAt, 10)
		}
		if e.warned {
			b = append(b, `,"warned":true`...)
		}
		b = append(b, '}')
	}
	return append(b, `}}`...)
}

func decodeEngineSet(b []byte) *engineSet {
	s := &engineSet{engines: map[string]*engineEntry{}, source: sourceConfig}
	if !gjson.ValidBytes(b) {
		return s
	}
	r := gjson.ParseBytes(b)
	s.source, s.n, s.c, s.kv, s.at = r.Get("source").String(), int(r.Get("n").Int()), int(r.Get("c").Int()), r.Get("kv").Int(), r.Get("at").Int()
	s.x, s.xn = r.Get("x").Int(), int(r.Get("xn").Int())
	r.Get("engines").ForEach(func(k, v gjson.Result) bool {
		pt, gt, ct := v.Get("pt"), v.Get("gt"), v.Get("ct")
		s.engines[k.String()] = &engineEntry{seen: v.Get("seen").Int(), read: v.Get("read").Int(), fail: v.Get("fail").Int(), err: v.Get("err").String(),
			r: engineReading{cores: int(v.Get("cores").Int()), kvTokens: v.Get("kv").Int(), maxNumSeqs: int(v.Get("seqs").Int()),
				running: int(v.Get("running").Int()), waiting: int(v.Get("waiting").Int()), usage: v.Get("usage").Float(),
				asleep:       int(v.Get("asleep").Int()),
				promptTokens: pt.Float(), genTokens: gt.Float(), cachedTokens: ct.Float(), tokens: pt.Exists() || gt.Exists()},
			peak: v.Get("peak").Float(), peakAt: v.Get("peak_at").Int(), warned: v.Get("warned").Bool()}
		return true
	})
	return s
}

// Capacity sources, in status and metrics.
const (
	sourceConfig  = "config"
	sourceEngines = "engines"
)

// capacitySync is a VM's side of capacity_from.
type capacitySync struct {
	pc    *pluginContext
	polls map[string]*poolPoll // by pool name
	// published: when this VM last wrote an address it saw serve a
	// request, by pool and address.
	published map[string]int64
	leading   bool
	lastElect time.Time
}

// poolPoll is the poller's round of one pool.
type poolPoll struct {
	last    time.Time // when the round started
	pending int       // calls of the round under way
}

func newCapacitySync(pc *pluginContext) *capacitySync {
	return &capacitySync{pc: pc, polls: map[string]*poolPoll{}, published: map[string]int64{}}
}

// minInterval is the shortest capacity_from interval of the pools (0:
// none has capacity_from).
func (cs *capacitySync) minInterval() time.Duration {
	var d time.Duration
	for _, ps := range cs.pc.pools {
		if cf := ps.cfg.capFrom; cf != nil && (d == 0 || cf.interval < d) {
			d = cf.interval
		}
	}
	return d
}

// elect reports whether this VM polls: it holds the poller key (holder
// and when it last wrote it) or takes it from a VM that has not written
// it for three intervals.
func (cs *capacitySync) elect(now time.Time) bool {
	st := cs.pc.rs.st
	key := pollerKey(cs.pc.name)
	mine := strconv.FormatUint(uint64(cs.pc.holder), 16) + " " + strconv.FormatInt(now.UnixNano(), 10)
	v, cas, err := st.GetSharedData(key)
	switch {
	case errors.Is(err, types.ErrorStatusNotFound):
		created, err := cs.pc.rs.createIfAbsent(key, []byte(mine))
		cs.leading = err == nil && created
		return cs.leading
	case err != nil:
		cs.leading = false
		return false
	}
	holder, at, _ := strings.Cut(string(v), " ")
	atNs, _ := strconv.ParseInt(at, 10, 64)
	h, _ := strconv.ParseUint(holder, 16, 32)
	if uint32(h) != cs.pc.holder && now.UnixNano()-atNs < leaderStale*int64(cs.minInterval()) {
		cs.leading = false
		return false
	}
	cs.leading = st.SetSharedData(key, []byte(mine), cas) == nil
	return cs.leading
}

// tick runs on every tick of every VM: the poller starts the rounds that
// are due.
func (cs *capacitySync) tick(now time.Time) {
	iv := cs.minInterval()
	if iv == 0 {
		return
	}
	due := false
	for _, ps := range cs.pc.pools {
		if cf := ps.cfg.capFrom; cf != nil {
			pp := cs.poll(ps)
			if now.Sub(pp.last) >= cf.interval-cf.interval/8 {
				due = true
			}
		}
	}
	if !due {
		return
	}
	if !cs.leading || now.Sub(cs.lastElect) >= iv-iv/8 {
		cs.lastElect = now
		if !cs.elect(now) {
			return
		}
	}
	for _, ps := range cs.pc.pools {
		cf := ps.cfg.capFrom
		if cf == nil {
			continue
		}
		pp := cs.poll(ps)
		if now.Sub(pp.last) < cf.interval-cf.interval/8 {
			continue
		}
		if pp.pending > 0 && now.Sub(pp.last) < cf.timeout+cf.interval {
			continue // the last round is still waiting for answers
		}
		cs.round(now, ps, pp)
	}
}

func (cs *capacitySync) poll(ps *poolState) *poolPoll {
	pp := cs.polls[ps.cfg.name]
	if pp == nil {
		pp = &poolPoll{}
		cs.polls[ps.cfg.name] = pp
	}
	return pp
}

// round reads every engine of the pool once.
func (cs *capacitySync) round(now time.Time, ps *poolState, pp *poolPoll) {
	cf := ps.cfg.capFrom
	pp.last, pp.pending = now, 0
	var targets []string
	cs.change(ps, func(s *engineSet) {
		targets = targets[:0]
		if cf.engines == enginesCluster {
			targets = append(targets, localEngine)
			return
		}
		for _, a := range cf.addresses {
			if s.engines[a] == nil {
				s.engines[a] = &engineEntry{}
			}
		}
		for a, e := range s.engines {
			static := slices.Contains(cf.addresses, a)
			if !static && now.UnixNano()-max(e.seen, e.read) > int64(cf.expire) {
				delete(s.engines, a) // neither read nor seen for expire: gone
				continue
			}
			targets = append(targets, a)
		}
		slices.Sort(targets)
	})
	if len(targets) == 0 {
		cs.apply(now, ps)
		return
	}
	for _, a := range targets {
		pp.pending++
		addr := a
		hdrs := [][2]string{{":method", "GET"}, {":path", cf.path}, {":authority", cf.authority}, {"accept", "text/plain"}}
		if addr != localEngine {
			hdrs = append(hdrs, [2]string{cf.header, addr})
		}
		_, err := hostcalls.DispatchHttpCall(cf.cluster, hdrs, nil, nil, uint32(cf.timeout/time.Millisecond),
			func(numHeaders, bodySize, _ int) {
				status := 0
				if numHeaders > 0 {
					if h, err := hostcalls.GetHttpCallResponseHeaders(); err == nil {
						for _, kv := range h {
							if kv[0] == ":status" {
								status, _ = strconv.Atoi(kv[1])
								break
							}
						}
					}
				}
				var body []byte
				if status == 200 && bodySize > 0 && bodySize <= maxMetricsBytes {
					body, _ = hostcalls.GetHttpCallResponseBody(0, bodySize)
				}
				cs.answer(ps, pp, addr, status, bodySize, body)
			})
		if err != nil {
			pp.pending--
			cs.record(time.Now(), ps, addr, engineReading{}, "http_call to cluster "+strconv.Quote(cf.cluster)+": "+err.Error())
		}
	}
	if pp.pending == 0 {
		cs.apply(now, ps)
	}
}

// answer records one engine's answer and, with the round's last one,
// applies the readings.
func (cs *capacitySync) answer(ps *poolState, pp *poolPoll, addr string, status, size int, body []byte) {
	now := time.Now()
	var r engineReading
	var msg string
	switch {
	case status == 0:
		msg = "no answer (connection failed or timed out)"
	case status != 200:
		msg = "HTTP " + strconv.Itoa(status)
	case size > maxMetricsBytes:
		msg = "answer larger than 4 MiB"
	default:
		var err error
		if r, err = parseEngineMetrics(body); err != nil {
			msg = err.Error()
		}
	}
	cs.record(now, ps, addr, r, msg)
	if pp.pending > 0 {
		pp.pending--
	}
	if pp.pending == 0 {
		cs.apply(now, ps)
	}
}

// record stores one engine's reading (msg "") or failure. A failure
// that comes after its engine was forgotten (the answer of a read started
// before the round that dropped it) does not bring it back.
func (cs *capacitySync) record(now time.Time, ps *poolState, addr string, r engineReading, msg string) {
	warn := false
	cs.change(ps, func(s *engineSet) {
		warn = false
		e := s.engines[addr]
		if e == nil {
			if msg != "" && addr != localEngine {
				return
			}
			e = &engineEntry{}
			s.engines[addr] = e
		}
		if msg == "" {
			if e.observe(now.UnixNano(), r, cs.pc.cfg.cost) && !e.warned {
				e.warned, warn = true, true
			}
			e.read, e.r, e.err = now.UnixNano(), r, ""
		} else {
			e.fail, e.err = now.UnixNano(), msg
		}
	})
	if warn {
		hostcalls.LogWarnf("fairshare: pool %s: capacity_from: engine %s: its token counters give an absurd rate (not a number, negative or above 2^40 cost units/s): ignored, and not logged again for this engine", ps.cfg.name, addr)
	}
	if msg != "" {
		cs.pc.met.poolCounter(ps.cfg.name, mCapacityReadFailures, 1)
		hostcalls.LogDebugf("fairshare: pool %s: capacity_from: engine %s: %s", ps.cfg.name, addr, msg)
	}
}

// sum is the capacity the pool's fresh readings say: C, K and the number
// of engine cores (0: none fresh, the configuration applies): a vLLM
// server under data parallelism is several engine cores behind one
// address, each with its own cache_config_info series.
func sum(now time.Time, cf *capacityFrom, cfgC int, cfgKV int64, s *engineSet) (c int, kv int64, n int) {
	for _, e := range s.engines {
		if !fresh(now, cf, e) {
			continue
		}
		seqs := cf.maxNumSeqs
		if e.r.maxNumSeqs > 0 {
			seqs = e.r.maxNumSeqs
		}
		n += e.r.cores
		c = min(c+seqs*e.r.cores, 1<<20)
		kv = min(kv+e.r.kvTokens, 1<<40)
	}
	if n == 0 {
		return cfgC, cfgKV, 0
	}
	return c, kv, n
}

// fresh reports whether an engine's reading counts at now: read, not
// failed since, not older than expire, with an engine core awake.
func fresh(now time.Time, cf *capacityFrom, e *engineEntry) bool {
	return e.read > 0 && e.fail <= e.read && now.UnixNano()-e.read <= int64(cf.expire) && e.r.cores > 0
}

// throughputSum is the pool's X from the engines: the sum of the
// throughput peaks of the engines that count (decayed to now) and the
// number of engines with a peak; while none has one (a sum below one
// cost unit per second), the configured cfgX and 0.
func throughputSum(now time.Time, cf *capacityFrom, cfgX int64, s *engineSet) (x int64, n int) {
	var total float64
	for _, e := range s.engines {
		if !fresh(now, cf, e) {
			continue
		}
		if p := e.peakNow(now.UnixNano()); p > 0 {
			total += p
			n++
		}
	}
	if n == 0 || total < 1 {
		return cfgX, 0
	}
	return int64(min(math.Round(total), maxThroughput)), n
}

// apply makes the fresh readings (or the configuration) the pool's C and
// K, and X for a pool that declares throughput; with the cluster block it
// only records what this proxy read, which its next sync publishes (the
// fleet agrees on C, K and X there: fleetcap.go).
func (cs *capacitySync) apply(now time.Time, ps *poolState) {
	cf := ps.cfg.capFrom
	var c, n, xn int
	var kv, x int64
	fleet := cs.pc.cfg.fleetPool(ps.cfg)
	cs.change(ps, func(s *engineSet) {
		c, kv, n = sum(now, cf, ps.cfg.capacity, ps.cfg.kvTokens, s)
		x, xn = ps.cfg.throughput, 0
		if ps.cfg.throughput > 0 && !fleet {
			x, xn = throughputSum(now, cf, ps.cfg.throughput, s)
		}
		s.source, s.n, s.c, s.kv, s.x, s.xn, s.at = sourceConfig, n, c, kv, x, xn, now.UnixNano()
		if n > 0 {
			s.source = sourceEngines
		}
	})
	if fleet {
		// The replica's slice is Rebalance's, of the totals the fleet
		// agrees on from every replica's readings (fleetcap.go).
		return
	}
	var prevC int
	var prevKV, prevX int64
	err := cs.pc.updatePool(now, ps, "capacity_from apply", func(p *fairshare.Pool) {
		prevC, prevKV, prevX = p.Capacity(), p.KVTokens(), p.Throughput()
		if prevC != c {
			p.SetCapacity(c)
		}
		if prevKV != 0 && prevKV != kv {
			p.SetKVTokens(kv)
		}
		if ps.cfg.throughput > 0 && prevX != 0 && prevX != x {
			p.SetThroughput(x)
		}
	})
	if err != nil {
		return
	}
	if ps.cfg.throughput > 0 {
		if nowX := ps.rec.p.Throughput(); nowX != prevX {
			src := "configuration"
			if xn > 0 {
				src = "peaks of " + strconv.Itoa(xn) + " engines"
			}
			hostcalls.LogInfof("fairshare: pool %s: throughput %d -> %d cost units/s (from the %s)", ps.cfg.name, prevX, nowX, src)
		}
		cs.pc.met.poolGauge(ps.cfg.name, mThroughput, ps.rec.p.Throughput())
	}
	if prevC != c || (prevKV != 0 && prevKV != kv) {
		src := "configuration"
		if n > 0 {
			src = strconv.Itoa(n) + " engines"
		}
		hostcalls.LogInfof("fairshare: pool %s: capacity %d -> %d, kv_tokens %d -> %d (from the %s)", ps.cfg.name, prevC, c, prevKV, ps.rec.p.KVTokens(), src)
	}
	cs.pc.met.poolGauge(ps.cfg.name, mCapacity, int64(c))
	cs.pc.met.poolGauge(ps.cfg.name, mCapacityEngines, int64(n))
	cs.pc.met.poolGauge(ps.cfg.name, mKVTokens, ps.rec.p.KVTokens())
}

// change applies fn to the pool's engine set in shared data with
// compare-and-swap (retried as records are).
func (cs *capacitySync) change(ps *poolState, fn func(s *engineSet)) {
	st := cs.pc.rs.st
	key := capacityKey(cs.pc.name, ps.cfg.name)
	for attempt := 0; attempt <= cs.pc.rs.retries; attempt++ {
		v, cas, err := st.GetSharedData(key)
		var s *engineSet
		switch {
		case errors.Is(err, types.ErrorStatusNotFound):
			s, cas = decodeEngineSet(nil), 0
		case err != nil:
			return
		default:
			s = decodeEngineSet(v)
		}
		fn(s)
		err = st.SetSharedData(key, s.encode(), cas)
		if err == nil || !errors.Is(err, types.ErrorStatusCasMismatch) {
			return
		}
		backoff(attempt)
	}
}

// loadEngines reads a pool's engine set (nil when there is none).
func (cs *capacitySync) loadEngines(ps *poolState) *engineSet {
	v, _, err := cs.pc.rs.st.GetSharedData(capacityKey(cs.pc.name, ps.cfg.name))
	if err != nil {
		return nil
	}
	return decodeEngineSet(v)
}

// learn records that addr served a request of the pool (its response's
// upstream.address), at most once per interval per VM and address.
func (cs *capacitySync) learn(now time.Time, ps *poolState, addr string) {
	cf := ps.cfg.capFrom
	k := ps.cfg.name + "\x00" + addr
	if last, ok := cs.published[k]; ok && now.UnixNano()-last < int64(cf.interval) {
		return
	}
	a, ok := engineAddress(addr)
	if !ok {
		return // not an IP address and port (a pipe): the ORIGINAL_DST cluster cannot reach it
	}
	if len(cs.published) > 4096 {
		clear(cs.published)
	}
	cs.published[k] = now.UnixNano()
	cs.change(ps, func(s *engineSet) {
		e := s.engines[a]
		if e == nil {
			if len(s.engines) >= maxEngines {
				return
			}
			e = &engineEntry{}
			s.engines[a] = e
		}
		e.seen = now.UnixNano()
	})
}

// maxEngines bounds the engines of one pool.
const maxEngines = 1024

// learnEngine reads the upstream.address of a scheduled request's
// response for a pool whose engines are learned.
func (h *httpContext) learnEngine() {
	ps := h.pool
	if ps == nil || ps.cfg.capFrom == nil || ps.cfg.capFrom.engines != enginesLearned || h.pc.caps == nil {
		return
	}
	v, err := hostcalls.GetProperty([]string{"upstream", "address"})
	if err != nil || len(v) == 0 {
		return
	}
	h.pc.caps.learn(time.Now(), ps, string(v))
}

// capacityFrom reports whether a pool takes its capacity from the engines.
func (c *config) capacityFrom() bool {
	for i := range c.pools {
		if c.pools[i].capFrom != nil {
			return true
		}
	}
	return false
}

// capacityStatus is a capacity_from pool's part of the status document.
type capacityStatus struct {
	cf   *capacityFrom
	set  *engineSet // nil: never polled
	work bool       // the pool declares throughput: X's source and the engines' peaks are shown
	// fleetX, for a fleet pool, is what the fleet last agreed on (zero:
	// never synced): X's source is the agreement's.
	fleetX *agreed
}

// append appends ,"capacity_source":..,"engines":[...]: every engine with
// its address ("local" for engines "cluster"), whether its reading counts
// now, its KV tokens and engine cores, the scheduler gauges it reported,
// the age of its reading and its last error.
func (cs *capacityStatus) append(b []byte, now time.Time) []byte {
	s := cs.set
	if s == nil {
		s = decodeEngineSet(nil)
	}
	src := sourceConfig
	if s.source == sourceEngines {
		src = sourceEngines + " (" + strconv.Itoa(s.n) + ")"
	}
	b = append(b, `,"capacity_source":`...)
	b = gjson.AppendJSONString(b, src)
	if cs.work {
		src, xn := sourceConfig, s.xn
		if cs.fleetX != nil {
			xn = cs.fleetX.xn
		}
		if xn > 0 {
			src = sourceEngines + " (" + strconv.Itoa(xn) + ")"
		}
		b = append(b, `,"throughput_source":`...)
		b = gjson.AppendJSONString(b, src)
	}
	b = append(b, `,"engines":[`...)
	names := make([]string, 0, len(s.engines))
	for a := range s.engines {
		names = append(names, a)
	}
	slices.Sort(names)
	for i, a := range names {
		e := s.engines[a]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"address":`...)
		b = gjson.AppendJSONString(b, a)
		b = append(b, `,"counted":`...)
		b = strconv.AppendBool(b, fresh(now, cs.cf, e))
		b = appendIntField(b, "cores", e.r.cores)
		if e.r.asleep > 0 {
			b = appendIntField(b, "cores_asleep", e.r.asleep)
		}
		b = appendIntField(b, "kv_tokens", int(e.r.kvTokens))
		b = appendIntField(b, "running", e.r.running)
		b = appendIntField(b, "waiting", e.r.waiting)
		b = appendFloatField(b, "kv_cache_usage", e.r.usage)
		if cs.work {
			b = appendIntField(b, "throughput", int(math.Round(e.peakNow(now.UnixNano()))))
		}
		if e.read > 0 {
			b = appendFloatField(b, "read_age_seconds", float64(now.UnixNano()-e.read)/1e9)
		}
		if e.err != "" && e.fail > e.read {
			b = append(b, `,"error":`...)
			b = gjson.AppendJSONString(b, e.err)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
