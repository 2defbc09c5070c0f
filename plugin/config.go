package plugin

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairshare-wasm/fairshare/fairshare"
	"github.com/tidwall/gjson"
)

// Defaults of the plugin configuration. Every field the operator leaves out
// takes the value named here; the README's configuration table lists them.
const (
	// DefaultTeamHeader is the request header naming the team (team_header).
	DefaultTeamHeader = "x-team"
	// DefaultClassHeader is the request header naming the class (class_header).
	DefaultClassHeader = "x-request-class"
	// DefaultClassName is the class of a request without a class header
	// (default_class).
	DefaultClassName = "interactive"
	// DefaultUnknownTeam is what happens to a team missing from a pool
	// (unknown_team): "borrow" (share 0) or "reject" (403).
	DefaultUnknownTeam = "borrow"
	// DefaultHalfLife is the half-life of the decayed usage (half_life).
	DefaultHalfLife = 168 * time.Hour
	// DefaultEntryPenalty charges a request's estimate while it runs
	// (entry_penalty).
	DefaultEntryPenalty = true
	// DefaultPromptTokenCost is the cost of one uncached prompt token
	// (cost.prompt_token).
	DefaultPromptTokenCost = 1.0
	// DefaultCachedPromptTokenCost is the cost of one prompt token served
	// from vLLM's prefix cache (cost.cached_prompt_token).
	DefaultCachedPromptTokenCost = 1.0
	// DefaultCompletionTokenCost is the cost of one generated token
	// (cost.completion_token).
	DefaultCompletionTokenCost = 2.0
	// DefaultMaxTokens is the completion estimate of a request without
	// max_completion_tokens or max_tokens (default_max_tokens).
	DefaultMaxTokens = 512
	// DefaultMaxBodyBytes bounds the buffered request body (max_body_bytes);
	// larger bodies get 413.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxResponseBytes bounds the copy of a non-streaming response
	// kept to read its usage (max_response_bytes); beyond it the request is
	// charged its best estimate.
	DefaultMaxResponseBytes = 4 << 20
	// DefaultRequestTimeout is how long a request of a dead holder is still
	// counted in flight (request_timeout).
	DefaultRequestTimeout = 10 * time.Minute
	// DefaultTick is the tick period: heartbeats, phantom expiry, gauges
	// (tick).
	DefaultTick = time.Second
	// DefaultHolderTimeoutTicks: a holder not seen for this many ticks is
	// presumed dead (holder_timeout defaults to this many ticks).
	DefaultHolderTimeoutTicks = 5
	// DefaultCASRetries bounds the retries of one read–decide–compare-and-
	// swap update of a pool record (cas_retries).
	DefaultCASRetries = 16
	// DefaultFailureMode is what happens when the shared record cannot be
	// updated (failure_mode): "open" forwards at the lowest borrowing
	// priority, "closed" answers 503.
	DefaultFailureMode = "open"
	// DefaultResponseHeaders adds the x-fairshare-* response headers
	// (response_headers).
	DefaultResponseHeaders = true
	// DefaultStatusPath is where GET answers the JSON status (status_path;
	// "" disables it). It answers only with status_token or status_public.
	DefaultStatusPath = "/fairshare/status"
	// DefaultMaxQueueTime is how long a borrower that finds the pool full is
	// held at the gateway before a 429 (max_queue_time). Zero, the default
	// for now, turns holding off: borrowers are forwarded at once at their
	// borrowing priority. Set it (e.g. "30s") to turn flow control on.
	DefaultMaxQueueTime = 0
	// DefaultHoldHeaders is hold_headers: "off" lets a scheduled request's
	// headers go upstream at once (the body is held); "on" stops them in
	// on_request_headers until the decision, so a held request has
	// nothing upstream. "on" needs Envoy ≥ 1.35 with the PluginConfig's
	// allow_on_headers_stop_iteration: true, which the plugin cannot see
	// from inside (hold_headers_probe is the safety net).
	DefaultHoldHeaders = "off"
	// DefaultHoldHeadersProbe bounds how long a request stopped at its
	// headers (hold_headers "on") may go without a body callback before
	// the plugin concludes that the host converted the stop (no
	// allow_on_headers_stop_iteration), continues it and logs the setting
	// to fix once at critical level (hold_headers_probe).
	DefaultHoldHeadersProbe = time.Second
	// maxStreamIdle is Envoy's default HCM stream_idle_timeout: a held
	// stream sees no events, so a longer max_queue_time needs it raised.
	maxStreamIdle = 5 * time.Minute
	// DefaultBatchAging is how much later than an interactive request a
	// held batch request of the same standing counts as arrived
	// (batch_aging; fairshare.Config.BatchAging): it yields to interactive
	// requests that arrive up to this long after it, not to later ones.
	// "0s" never ages (interactive first, whatever the wait).
	DefaultBatchAging = 2 * time.Second
	// DefaultQueueLimit bounds the requests waiting in a pool
	// (queue_limit); beyond it, 429.
	DefaultQueueLimit = 1024
	// DefaultDispatchTick is the tick period of a VM that holds requests
	// (dispatch_tick): a request waits at most this long after capacity
	// frees when no release wakes its VM at once.
	DefaultDispatchTick = 20 * time.Millisecond
	// DefaultUnscheduled is what happens to a top-level "priority" in the
	// JSON body of a request the plugin does not schedule (unscheduled):
	// "strip" removes it, "reject" answers 400.
	DefaultUnscheduled = "strip"
	// DefaultUnknownModel is what happens to a request whose model no pool
	// lists (unknown_model): "reject" answers 404, "lowest" forwards it,
	// uncounted, at the lowest borrowing priority.
	DefaultUnknownModel = "reject"
	// DefaultMode is mode: "enforce" schedules requests; "shadow" decides
	// and accounts them as enforce mode does but forwards every request as
	// the client sent it, reporting what it would have done (shadow.go).
	DefaultMode = modeEnforce
	// DefaultShadowStripPriority is shadow_strip_priority: in shadow mode
	// a client's priority is left in the body unless the operator opts in.
	DefaultShadowStripPriority = false
	// DefaultUserHeader is user_header, the request header naming the
	// user within its team: "" turns the user level off (users.go).
	DefaultUserHeader = ""
	// DefaultUserFromBody is user_from_body: without it a request that
	// names no user in user_header counts as fairshare.UserNone, whatever
	// its body's "user" says.
	DefaultUserFromBody = false
	// DefaultStatusUsers is status_users: the users per team the status
	// endpoint lists, best standing first.
	DefaultStatusUsers = 10
	// DefaultMaxUsers bounds the user entries of a team (a pool's
	// max_users; fairshare.Config.MaxUsers).
	DefaultMaxUsers = fairshare.DefaultMaxUsers
	// DefaultUserActive is a pool's user_active: how long after its
	// latest request a user still counts in its team's division
	// (fairshare.Config.UserActive).
	DefaultUserActive = fairshare.DefaultUserActive
	// DefaultUserIdle is a pool's user_idle: how long after its latest
	// request an idle user is dropped with its usage
	// (fairshare.Config.UserIdle).
	DefaultUserIdle = fairshare.DefaultUserIdle
)

// The modes.
const (
	modeEnforce = "enforce"
	modeShadow  = "shadow"
)

// DefaultPaths are the request paths scheduled when paths is not set:
// every endpoint of vLLM's OpenAI-compatible server whose request body
// takes a "priority" that reaches the engine (generation, pooling, scoring,
// the SageMaker entry point and the tokens-in generate API).
var DefaultPaths = []string{
	"/v1/chat/completions", "/v1/completions", "/v1/responses",
	"/v1/embeddings", "/pooling", "/classify",
	"/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
	"/invocations", "/inference/v1/generate",
}

// poolingPaths are the default paths whose requests generate nothing: their
// estimate is the prompt alone.
var poolingPaths = []string{"/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}

// Policies for requests the plugin does not schedule.
const (
	unscheduledStrip  = "strip"
	unscheduledReject = "reject"
	unknownModelRej   = "reject"
	unknownModelLow   = "lowest"
)

// Failure modes.
const (
	failOpen   = "open"
	failClosed = "closed"
)

// config is the validated plugin configuration.
type config struct {
	teamHeader, classHeader string
	defaultClass            fairshare.Class
	defaultTeam             string
	rejectUnknown           bool
	halfLife                time.Duration
	entryPenalty            bool
	cost                    costWeights
	defaultMaxTokens        int
	maxBodyBytes            int
	maxResponseBytes        int
	paths                   []string
	requestTimeout          time.Duration
	tick                    time.Duration
	holderTimeout           time.Duration
	casRetries              int
	failClosed              bool
	responseHeaders         bool
	statusPath, statusToken string
	statusPublic            bool
	// rejectUnscheduled: a priority in the body of an unscheduled request
	// is answered 400 instead of being stripped.
	rejectUnscheduled bool
	// defaultModel routes a scheduled request without a model; "" answers
	// 400.
	defaultModel string
	// lowestUnknownModel forwards a request whose model no pool lists at
	// the lowest borrowing priority instead of answering 404.
	lowestUnknownModel bool
	// maxQueueTime bounds how long a borrower is held at the gateway
	// (0: holding off); queueLimit and teamQueueLimit bound the waiting
	// requests of a pool and of a team (0: no team limit).
	maxQueueTime   time.Duration
	queueLimit     int
	teamQueueLimit int
	// holdHeaders stops a scheduled request's headers until the decision
	// (hold_headers "on"); holdHeadersProbe bounds the wait for its first
	// body callback (the host may convert the stop, flow.go probe).
	holdHeaders      bool
	holdHeadersProbe time.Duration
	// batchAging is how much later a held batch request counts as
	// arrived (fairshare.Config.BatchAging).
	batchAging time.Duration
	// dispatchTick is the tick period while this VM holds requests.
	dispatchTick time.Duration
	// shadow is mode "shadow" (shadow.go): decided and accounted, every
	// request forwarded as the client sent it; shadowStrip
	// (shadow_strip_priority) still removes a client's priority there.
	shadow, shadowStrip bool
	// cluster, when set, shares every pool with the other proxies that
	// sync through the same etcd (cluster.go).
	cluster *clusterConfig
	// userHeader names the user within its team ("": the user level is
	// off, users.go); userFromBody takes the body's "user" of a request
	// without one; statusUsers is how many users per team the status
	// lists.
	userHeader   string
	userFromBody bool
	statusUsers  int
	pools        []poolConfig
}

// costWeights are the cost units of one token of each kind.
type costWeights struct {
	prompt, cachedPrompt, completion float64
}

// poolConfig is one pool of the configuration.
type poolConfig struct {
	name     string
	capacity int
	kvTokens int64 // KV capacity in tokens; 0: sequences only
	// throughput is the pool's work capacity in cost units per second
	// (0: no work resource), throughputBurst its bucket depth (0: the
	// core's default).
	throughput      int64
	throughputBurst time.Duration
	models          []string
	teams           []fairshare.TeamConfig
	// engine is engine_priority: whether the pool's priorities are
	// written into the body (engine.go).
	engine engineMode
	// capFrom is capacity_from: C and K read from the engines
	// (capacity.go); nil: the configured capacity and kv_tokens.
	capFrom *capacityFrom
	// spillTo are the fallback pools (spill_to, spill.go), in order.
	spillTo []string
	// maxUsers, userActive and userIdle bound the user level
	// (fairshare.Config.MaxUsers, UserActive, UserIdle; users.go).
	maxUsers   int
	userActive time.Duration
	userIdle   time.Duration
}

// coreConfig is the fairshare configuration of pool p under c.
func (c *config) coreConfig(p *poolConfig) fairshare.Config {
	capacity, kv := p.capacity, p.kvTokens
	if c.fleetPool(p) {
		// The agreed totals may exceed the configured ones: the record's
		// configured totals bound every slice (fleetcap.go).
		capacity = fleetCeilingC
		if kv > 0 {
			kv = fleetCeilingKV
		}
	}
	throughput := p.throughput
	if c.fleetPool(p) && throughput > 0 {
		throughput = fleetCeilingX
	}
	cc := fairshare.Config{
		Capacity:        capacity,
		Teams:           p.teams,
		HalfLife:        c.halfLife,
		EntryPenalty:    c.entryPenalty,
		HolderTimeout:   c.holderTimeout,
		RequestTimeout:  c.requestTimeout,
		KVTokens:        kv,
		Throughput:      throughput,
		ThroughputBurst: p.throughputBurst,
		QueueLimit:      c.coreQueueLimit(),
		TeamQueueLimit:  c.teamQueueLimit,
		MaxQueueTime:    c.maxQueueTime,
		BatchAging:      c.coreBatchAging(),
	}
	if c.userHeader != "" {
		// Without the user level the core's configuration stays what it
		// was: no field of it set (its fingerprint and record unchanged).
		cc.Users, cc.MaxUsers, cc.UserActive, cc.UserIdle = true, p.maxUsers, p.userActive, p.userIdle
	}
	return cc
}

// coreBatchAging is the pool's batch aging: 0 when holding is off (no
// request waits, and the record keeps no field that changes nothing).
func (c *config) coreBatchAging() time.Duration {
	if c.coreQueueLimit() == 0 {
		return 0
	}
	return c.batchAging
}

// coreQueueLimit is the pool's queue limit: 0 (no queue, borrowers go at
// once) when holding is off.
func (c *config) coreQueueLimit() int {
	if c.maxQueueTime <= 0 {
		return 0
	}
	return c.queueLimit
}

// warnings are what the plugin can tell of the Envoy settings a
// configuration needs (README: Flow control): logged at configure time.
func (c *config) warnings() []string {
	var w []string
	if c.holding() && c.maxQueueTime >= maxStreamIdle {
		w = append(w, fmt.Sprintf("max_queue_time %s is not below Envoy's default stream_idle_timeout (5m): a held stream sees no events, so set the HTTP connection manager's stream_idle_timeout (or the route's idle_timeout) above max_queue_time, and request_timeout to 0 or above it", c.maxQueueTime))
	}
	return w
}

// holding reports whether borrowers that find no room are held.
func (c *config) holding() bool { return c.maxQueueTime > 0 && c.queueLimit > 0 }

// fingerprint identifies the configuration of every pool (the fairshare
// fingerprints of the pools, in order, with their names).
func (c *config) fingerprint() uint64 {
	h := uint64(14695981039346656037) // FNV-1a
	mix := func(x uint64) {
		for i := 0; i < 8; i++ {
			h ^= x & 0xff
			h *= 1099511628211
			x >>= 8
		}
	}
	for i := range c.pools {
		p := &c.pools[i]
		for j := 0; j < len(p.name); j++ {
			h ^= uint64(p.name[j])
			h *= 1099511628211
		}
		mix(c.coreConfig(p).Fingerprint())
	}
	return h
}

// hasTeam reports whether team is configured in p.
func (p *poolConfig) hasTeam(team string) bool {
	for i := range p.teams {
		if p.teams[i].Name == team {
			return true
		}
	}
	return false
}

// problems collects configuration problems, each with its field path.
type problems []string

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, path+": "+fmt.Sprintf(format, args...))
}

// members calls f, in order, for every member of the JSON object v with its
// key and its field path (path.key, or the key alone at the root, path
// ""); a key seen before is reported as a duplicate field and not passed
// on. f returns false to stop, as gjson's ForEach. It returns the keys
// seen, for the caller's required-field checks.
func members(ps *problems, path string, v gjson.Result, f func(key, fieldPath string, value gjson.Result) bool) map[string]bool {
	seen := map[string]bool{}
	v.ForEach(func(k, val gjson.Result) bool {
		key := k.String()
		fp := key
		if path != "" {
			fp = path + "." + key
		}
		if seen[key] {
			ps.add(fp, "duplicate field")
			return true
		}
		seen[key] = true
		return f(key, fp, val)
	})
	return seen
}

// configError is every problem of a configuration.
type configError struct{ problems []string }

func (e *configError) Error() string {
	return "plugin configuration: " + strings.Join(e.problems, "; ")
}

// defaultConfig is the configuration of an empty document, without pools.
func defaultConfig() config {
	return config{
		teamHeader:       DefaultTeamHeader,
		classHeader:      DefaultClassHeader,
		defaultClass:     fairshare.Interactive,
		halfLife:         DefaultHalfLife,
		entryPenalty:     DefaultEntryPenalty,
		cost:             costWeights{DefaultPromptTokenCost, DefaultCachedPromptTokenCost, DefaultCompletionTokenCost},
		defaultMaxTokens: DefaultMaxTokens,
		maxBodyBytes:     DefaultMaxBodyBytes,
		maxResponseBytes: DefaultMaxResponseBytes,
		paths:            DefaultPaths,
		requestTimeout:   DefaultRequestTimeout,
		tick:             DefaultTick,
		casRetries:       DefaultCASRetries,
		responseHeaders:  DefaultResponseHeaders,
		statusPath:       DefaultStatusPath,
		maxQueueTime:     DefaultMaxQueueTime,
		batchAging:       DefaultBatchAging,
		queueLimit:       DefaultQueueLimit,
		dispatchTick:     DefaultDispatchTick,
		holdHeadersProbe: DefaultHoldHeadersProbe,
		statusUsers:      DefaultStatusUsers,
	}
}

// parse reads and validates a plugin configuration (JSON). It reports every
// problem it finds, each with its field path, in one error; it never panics.
func parse(data []byte) (config, error) {
	c := defaultConfig()
	var ps problems
	if len(strings.TrimSpace(string(data))) == 0 {
		ps.add("$", "empty: the configuration is a JSON object with at least \"pools\"")
		return c, &configError{ps}
	}
	if !gjson.ValidBytes(data) {
		ps.add("$", "not valid JSON: %s", JSONSyntaxError(data))
		return c, &configError{ps}
	}
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		ps.add("$", "must be a JSON object")
		return c, &configError{ps}
	}
	holderTimeoutSet := false
	var userFields []string // the paths of the pools' user-level fields (checkUsers)
	seen := members(&ps, "", root, func(key, _ string, v gjson.Result) bool {
		switch key {
		case "team_header":
			c.teamHeader = headerName(&ps, key, v)
		case "class_header":
			c.classHeader = headerName(&ps, key, v)
		case "default_class":
			if s, ok := str(&ps, key, v); ok {
				cl, err := parseClass(s)
				if err != nil {
					ps.add(key, "must be \"interactive\" or \"batch\", got %q", s)
				}
				c.defaultClass = cl
			}
		case "default_team":
			if s, ok := str(&ps, key, v); ok && s != "" {
				checkName(&ps, key, s)
				c.defaultTeam = s
			}
		case "unknown_team":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case "borrow":
				case "reject":
					c.rejectUnknown = true
				default:
					ps.add(key, "must be \"borrow\" or \"reject\", got %q", s)
				}
			}
		case "half_life":
			c.halfLife = duration(&ps, key, v, 0)
		case "entry_penalty":
			c.entryPenalty = boolean(&ps, key, v, c.entryPenalty)
		case "cost":
			parseCost(&ps, key, v, &c.cost)
		case "default_max_tokens":
			c.defaultMaxTokens = integer(&ps, key, v, 1, math.MaxInt32, c.defaultMaxTokens)
		case "max_body_bytes":
			c.maxBodyBytes = integer(&ps, key, v, 1, math.MaxInt32, c.maxBodyBytes)
		case "max_response_bytes":
			c.maxResponseBytes = integer(&ps, key, v, 0, math.MaxInt32, c.maxResponseBytes)
		case "paths":
			c.paths = parsePaths(&ps, key, v)
		case "request_timeout":
			c.requestTimeout = duration(&ps, key, v, time.Millisecond)
		case "tick":
			c.tick = duration(&ps, key, v, time.Millisecond)
		case "holder_timeout":
			c.holderTimeout = duration(&ps, key, v, time.Millisecond)
			holderTimeoutSet = true
		case "cas_retries":
			c.casRetries = integer(&ps, key, v, 1, 1000, c.casRetries)
		case "failure_mode":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case failOpen:
				case failClosed:
					c.failClosed = true
				default:
					ps.add(key, "must be \"open\" or \"closed\", got %q", s)
				}
			}
		case "response_headers":
			c.responseHeaders = boolean(&ps, key, v, c.responseHeaders)
		case "status_path":
			if s, ok := str(&ps, key, v); ok {
				if s != "" && !strings.HasPrefix(s, "/") {
					ps.add(key, "must start with \"/\" (or be \"\" to disable), got %q", s)
				} else if s != "" && cleanPath(s) != s {
					ps.add(key, "must be a clean path (no query, escape, dot segment, repeated or trailing slash): %q, not %q", cleanPath(s), s)
				}
				c.statusPath = s
			}
		case "status_token":
			if s, ok := str(&ps, key, v); ok {
				c.statusToken = s
			}
		case "max_queue_time":
			c.maxQueueTime = duration(&ps, key, v, 0)
		case "queue_limit":
			c.queueLimit = integer(&ps, key, v, 0, 1<<16, c.queueLimit)
		case "team_queue_limit":
			c.teamQueueLimit = integer(&ps, key, v, 0, 1<<16, c.teamQueueLimit)
		case "dispatch_tick":
			c.dispatchTick = duration(&ps, key, v, time.Millisecond)
		case "hold_headers":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case "off":
				case "on":
					c.holdHeaders = true
				default:
					ps.add(key, "must be \"off\" or \"on\", got %q (there is no \"auto\": the plugin cannot see Envoy's allow_on_headers_stop_iteration)", s)
				}
			}
		case "hold_headers_probe":
			c.holdHeadersProbe = duration(&ps, key, v, time.Millisecond)
		case "batch_aging":
			c.batchAging = duration(&ps, key, v, 0)
		case "status_public":
			c.statusPublic = boolean(&ps, key, v, c.statusPublic)
		case "unscheduled":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case unscheduledStrip:
				case unscheduledReject:
					c.rejectUnscheduled = true
				default:
					ps.add(key, "must be \"strip\" or \"reject\", got %q", s)
				}
			}
		case "default_model":
			if s, ok := str(&ps, key, v); ok {
				c.defaultModel = s
			}
		case "unknown_model":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case unknownModelRej:
				case unknownModelLow:
					c.lowestUnknownModel = true
				default:
					ps.add(key, "must be \"reject\" or \"lowest\", got %q", s)
				}
			}
		case "mode":
			if s, ok := str(&ps, key, v); ok {
				switch s {
				case modeEnforce:
				case modeShadow:
					c.shadow = true
				default:
					ps.add(key, "must be \"enforce\" or \"shadow\", got %q", s)
				}
			}
		case "shadow_strip_priority":
			c.shadowStrip = boolean(&ps, key, v, c.shadowStrip)
		case "user_header":
			if v.Type != gjson.String || v.Str != "" { // "": the user level off
				c.userHeader = headerName(&ps, key, v)
			}
		case "user_from_body":
			c.userFromBody = boolean(&ps, key, v, c.userFromBody)
		case "status_users":
			c.statusUsers = integer(&ps, key, v, 0, maxUsersLimit, c.statusUsers)
		case "pools":
			c.pools = parsePools(&ps, key, v, &userFields)
		case "cluster":
			c.cluster = parseCluster(&ps, key, v)
		default:
			ps.add(key, "unknown field")
			ps.suggest(key, rootFields)
		}
		return true
	})
	if holderTimeoutSet {
		if c.holderTimeout > 0 && c.holderTimeout < 2*c.tick {
			ps.add("holder_timeout", "must be at least two ticks (%s), got %s", 2*c.tick, c.holderTimeout)
		}
	} else {
		c.holderTimeout = DefaultHolderTimeoutTicks * c.tick
	}
	if c.statusPath != "" {
		for _, p := range c.paths {
			if p == c.statusPath {
				ps.add("status_path", "must differ from every entry of paths, got %q", p)
			}
		}
	}
	if c.holdHeaders && !c.holding() {
		ps.add("hold_headers", "\"on\" needs flow control (max_queue_time > 0 and queue_limit > 0): without it no request is held")
	}
	if !seen["pools"] {
		ps.add("pools", "required: at least one pool")
	}
	checkEngineModes(&ps, &c)
	checkFleet(&ps, &c)
	checkSpill(&ps, &c)
	checkUsers(&ps, &c, userFields)
	if len(ps) > 0 {
		return c, &configError{ps}
	}
	return c, nil
}

// parseClass maps a class name to its class.
func parseClass(s string) (fairshare.Class, error) {
	switch s {
	case "interactive":
		return fairshare.Interactive, nil
	case "batch":
		return fairshare.Batch, nil
	}
	return fairshare.Interactive, errors.New("unknown class")
}

// className is the name of a class in metrics and headers.
func className(c fairshare.Class) string {
	if c == fairshare.Batch {
		return "batch"
	}
	return "interactive"
}

func str(ps *problems, path string, v gjson.Result) (string, bool) {
	if v.Type != gjson.String {
		ps.add(path, "must be a string, got %s", typeName(v))
		return "", false
	}
	return v.Str, true
}

// strs reads an array of strings at path, calling each with every
// element's path and value; what names the elements in the error for a
// value that is not an array ("pool names": "must be an array of pool
// names"), and an element that is not a string is reported at its own
// path. each adds its own problems.
func strs(ps *problems, path string, v gjson.Result, what string, each func(ip, s string)) {
	if !v.IsArray() {
		ps.add(path, "must be an array of %s, got %s", what, typeName(v))
		return
	}
	i := 0
	v.ForEach(func(_, e gjson.Result) bool {
		ip := path + "[" + strconv.Itoa(i) + "]"
		i++
		if s, ok := str(ps, ip, e); ok {
			each(ip, s)
		}
		return true
	})
}

func typeName(v gjson.Result) string {
	switch v.Type {
	case gjson.Null:
		return "null"
	case gjson.False, gjson.True:
		return "a boolean"
	case gjson.Number:
		return "a number"
	case gjson.String:
		return "a string"
	}
	if v.IsArray() {
		return "an array"
	}
	return "an object"
}

func boolean(ps *problems, path string, v gjson.Result, def bool) bool {
	switch v.Type {
	case gjson.True:
		return true
	case gjson.False:
		return false
	}
	ps.add(path, "must be true or false, got %s", typeName(v))
	return def
}

func integer(ps *problems, path string, v gjson.Result, lo, hi int, def int) int {
	if v.Type != gjson.Number {
		ps.add(path, "must be an integer, got %s", typeName(v))
		return def
	}
	f := v.Num
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		ps.add(path, "must be an integer in [%d, %d], got %s", lo, hi, v.Raw)
		return def
	}
	return int(f)
}

func number(ps *problems, path string, v gjson.Result, def float64) (float64, bool) {
	if v.Type != gjson.Number || math.IsNaN(v.Num) || math.IsInf(v.Num, 0) {
		ps.add(path, "must be a number, got %s", typeName(v))
		return def, false
	}
	return v.Num, true
}

// duration reads a Go duration string ("1s", "168h"); values below min are
// reported (min 0 allows 0).
func duration(ps *problems, path string, v gjson.Result, min time.Duration) time.Duration {
	s, ok := str(ps, path, v)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		ps.add(path, "must be a duration such as \"1s\" or \"168h\", got %q", s)
		return 0
	}
	if d < 0 || (min > 0 && d < min) {
		if min > 0 {
			ps.add(path, "must be at least %s, got %q", min, s)
		} else {
			ps.add(path, "must not be negative, got %q", s)
		}
		return 0
	}
	return d
}

func headerName(ps *problems, path string, v gjson.Result) string {
	s, ok := str(ps, path, v)
	if !ok {
		return ""
	}
	if s == "" || strings.HasPrefix(s, ":") {
		ps.add(path, "must be a header name, got %q", s)
		return s
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", b) >= 0 {
			ps.add(path, "must be a header name, got %q", s)
			return s
		}
	}
	// Envoy lower-cases header names.
	return strings.ToLower(s)
}

// validName reports whether s is a valid pool or team name: it is used as
// one segment of metric names, which Envoy's tag extraction splits on ".".
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

func checkName(ps *problems, path, s string) {
	if !validName(s) {
		ps.add(path, "must be 1 to 64 characters of [A-Za-z0-9_-] (it is a segment of metric names), got %q", s)
	} else if s == unknownTeamMetricName {
		ps.add(path, "%q is reserved for teams missing from the configuration", s)
	}
}

func parseCost(ps *problems, path string, v gjson.Result, c *costWeights) {
	if !v.IsObject() {
		ps.add(path, "must be an object, got %s", typeName(v))
		return
	}
	members(ps, path, v, func(key, p string, w gjson.Result) bool {
		var dst *float64
		switch key {
		case "prompt_token":
			dst = &c.prompt
		case "cached_prompt_token":
			dst = &c.cachedPrompt
		case "completion_token":
			dst = &c.completion
		default:
			ps.add(p, "unknown field")
			ps.suggest(key, costFields)
			return true
		}
		if f, ok := number(ps, p, w, *dst); ok {
			if f < 0 || f > 1e6 {
				ps.add(p, "must be in [0, 1e6], got %s", w.Raw)
				return true
			}
			*dst = f
		}
		return true
	})
}

func parsePaths(ps *problems, path string, v gjson.Result) []string {
	var out []string
	strs(ps, path, v, "strings", func(ip, s string) {
		if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, "?# ") {
			ps.add(ip, "must be a path starting with \"/\" without query, got %q", s)
			return
		}
		if c := cleanPath(s); c != s {
			ps.add(ip, "must be a clean path (requests are compared after decoding escapes, merging slashes and resolving dot segments): %q, not %q", c, s)
			return
		}
		if slices.Contains(out, s) {
			ps.add(ip, "duplicate path %q", s)
			return
		}
		out = append(out, s)
	})
	return out
}

// parsePools reads the pools at path; the paths of their user-level
// fields (max_users, user_active, user_idle, a team's users) are appended
// to userFields, for checkUsers.
func parsePools(ps *problems, path string, v gjson.Result, userFields *[]string) []poolConfig {
	if !v.IsArray() {
		ps.add(path, "must be an array of pools, got %s", typeName(v))
		return nil
	}
	var pools []poolConfig
	models := map[string]string{} // model -> path of its first pool
	names := map[string]bool{}
	i := 0
	v.ForEach(func(_, pv gjson.Result) bool {
		pp := path + "[" + strconv.Itoa(i) + "]"
		i++
		if !pv.IsObject() {
			ps.add(pp, "must be an object, got %s", typeName(pv))
			return true
		}
		p := poolConfig{maxUsers: DefaultMaxUsers, userActive: DefaultUserActive, userIdle: DefaultUserIdle}
		seen := members(ps, pp, pv, func(key, fp string, f gjson.Result) bool {
			switch key {
			case "name":
				if s, ok := str(ps, fp, f); ok {
					if !validName(s) {
						ps.add(fp, "must be 1 to 64 characters of [A-Za-z0-9_-] (it is a segment of metric names), got %q", s)
					} else if names[s] {
						ps.add(fp, "duplicate pool name %q", s)
					}
					names[s] = true
					p.name = s
				}
			case "capacity":
				p.capacity = integer(ps, fp, f, 1, 1<<20, 0)
			case "kv_tokens":
				p.kvTokens = int64(integer(ps, fp, f, 0, 1<<40, 0))
			case "throughput":
				p.throughput = int64(integer(ps, fp, f, 0, 1<<40, 0))
			case "throughput_burst":
				p.throughputBurst = duration(ps, fp, f, time.Second)
			case "models":
				if f.IsArray() && len(f.Array()) == 0 {
					ps.add(fp, "must list at least one model (\"*\" matches any)")
					return true
				}
				strs(ps, fp, f, "model names", func(mp, s string) {
					if s == "" {
						ps.add(mp, "must not be empty")
						return
					}
					if prev, dup := models[s]; dup {
						ps.add(mp, "duplicate model %q (already in %s)", s, prev)
						return
					}
					models[s] = mp
					p.models = append(p.models, s)
				})
			case "teams":
				p.teams = parseTeams(ps, fp, f, userFields)
			case "max_users":
				p.maxUsers = integer(ps, fp, f, 1, maxUsersLimit, p.maxUsers)
				*userFields = append(*userFields, fp)
			case "user_active":
				p.userActive = duration(ps, fp, f, time.Second)
				*userFields = append(*userFields, fp)
			case "user_idle":
				p.userIdle = duration(ps, fp, f, time.Second)
				*userFields = append(*userFields, fp)
			case "capacity_from":
				p.capFrom = parseCapacityFrom(ps, fp, f)
			case "spill_to":
				p.spillTo = parseSpillTo(ps, fp, f)
			case "engine_priority":
				if s, ok := str(ps, fp, f); ok {
					m, ok := parseEngineMode(s)
					if !ok {
						ps.add(fp, "must be \"auto\", \"on\" or \"off\", got %q", s)
					}
					p.engine = m
				}
			default:
				ps.add(fp, "unknown field")
				ps.suggest(key, poolFields)
			}
			return true
		})
		if !seen["name"] {
			ps.add(pp+".name", "required")
		}
		if !seen["capacity"] {
			ps.add(pp+".capacity", "required: an integer >= 1")
		}
		if !seen["models"] {
			ps.add(pp+".models", "required: at least one model (\"*\" matches any)")
		}
		if p.throughput > 0 && p.throughputBurst == 0 {
			p.throughputBurst = fairshare.DefaultThroughputBurst
		}
		if p.userActive > 0 && p.userIdle > 0 && p.userIdle < p.userActive {
			ps.add(pp+".user_idle", "must be at least user_active (%s), got %s: a user is dropped with its usage only once it no longer counts", p.userActive, p.userIdle)
		}
		if seen["throughput_burst"] && p.throughput == 0 {
			ps.add(pp+".throughput_burst", "needs throughput > 0 (the pool's work capacity in cost units per second): a burst of a reservation that is not declared")
		}
		pools = append(pools, p)
		return true
	})
	if i == 0 {
		ps.add(path, "must list at least one pool")
	}
	return pools
}

// parseTeams reads a pool's teams at path; the path of every team's
// users field is appended to userFields (checkUsers).
func parseTeams(ps *problems, path string, v gjson.Result, userFields *[]string) []fairshare.TeamConfig {
	if !v.IsObject() {
		ps.add(path, "must be an object of team name to {share, weight}, got %s", typeName(v))
		return nil
	}
	var teams []fairshare.TeamConfig
	sum := 0.0
	seen := map[string]bool{}
	v.ForEach(func(k, tv gjson.Result) bool {
		name := k.String()
		tp := path + "." + name
		if seen[name] {
			ps.add(tp, "duplicate team")
			return true
		}
		seen[name] = true
		checkName(ps, tp, name)
		if !tv.IsObject() {
			ps.add(tp, "must be an object {\"share\": ..., \"weight\": ...}, got %s", typeName(tv))
			return true
		}
		t := fairshare.TeamConfig{Name: name, Weight: 1}
		hasShare := false
		members(ps, tp, tv, func(key, fp string, fv gjson.Result) bool {
			switch key {
			case "share":
				hasShare = true
				if f, ok := number(ps, fp, fv, 0); ok {
					if !(f > 0 && f <= 1) {
						ps.add(fp, "must be in (0, 1], got %s", fv.Raw)
						return true
					}
					t.Share = f
					sum += f
				}
			case "weight":
				if f, ok := number(ps, fp, fv, 1); ok {
					if !(f > 0 && f <= 1e6) {
						ps.add(fp, "must be in (0, 1e6], got %s", fv.Raw)
						return true
					}
					t.Weight = f
				}
			case "lending_limit":
				if f, ok := number(ps, fp, fv, 0); ok {
					if !(f >= 0 && f <= 1) {
						ps.add(fp, "must be in [0, 1] (the part of the reservation lent while idle), got %s", fv.Raw)
						return true
					}
					t.LendingLimit = fairshare.Limit(f)
				}
			case "borrowing_limit":
				if f, ok := number(ps, fp, fv, 0); ok {
					if !(f >= 0 && f <= 1) {
						ps.add(fp, "must be in [0, 1] (the part of the pool borrowed above the reservation), got %s", fv.Raw)
						return true
					}
					t.BorrowingLimit = fairshare.Limit(f)
				}
			case "users":
				t.Users = parseUserShares(ps, fp, fv)
				*userFields = append(*userFields, fp)
			default:
				ps.add(fp, "unknown field")
				ps.suggest(key, teamFields)
			}
			return true
		})
		if !hasShare {
			ps.add(tp+".share", "required: a number in (0, 1]")
		}
		teams = append(teams, t)
		return true
	})
	if sum > 1+1e-9 {
		ps.add(path, "shares sum to %s, must be at most 1", strconv.FormatFloat(sum, 'g', 6, 64))
	}
	return teams
}
