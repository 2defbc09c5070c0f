package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// demoTeam is the load one team sends during the demo: Workers closed-loop
// clients, each sending one streaming request, waiting for its end, then
// thinking for an exponentially distributed time of mean Think.
type demoTeam struct {
	Name      string
	Class     string        // "interactive" or "batch"
	Workers   int           // concurrent clients
	Think     time.Duration // mean pause between two requests of a client
	StartAt   float64       // fraction of the run before the team starts
	MaxTokens int           // max_tokens of each request
	Prompt    int           // approximate prompt length in tokens
	// User is the user the team's clients name (the plugin's
	// user_header), "" for none; Users, when set, replace the team's
	// clients by each user's (usersOf).
	User  string
	Users []demoUser
}

// demoUser is the load of one user within a demo team (with the plugin's
// user_header): Workers clients of the team's class, each thinking Think
// on average between two requests of MaxTokens.
type demoUser struct {
	Name      string
	Workers   int
	Think     time.Duration
	MaxTokens int
}

// demoUsers are the users of the demo's steady team when the
// configuration divides teams among users: one user, bulk, floods (four
// times the team's clients, no pause, long answers) while three light
// teammates send a request now and then. Without the user level bulk's
// flood would take the team's reservation and its teammates' requests
// would borrow behind it; with it each light user's request is within
// share while bulk's beyond its portion go over or borrow.
func demoUsers(t demoTeam) []demoUser {
	return []demoUser{
		{Name: "bulk", Workers: 4 * t.Workers, Think: 0, MaxTokens: 4 * t.MaxTokens},
		{Name: "alice", Workers: 1, Think: 2 * t.Think, MaxTokens: t.MaxTokens},
		{Name: "bob", Workers: 1, Think: 2 * t.Think, MaxTokens: t.MaxTokens},
		{Name: "carol", Workers: 1, Think: 2 * t.Think, MaxTokens: t.MaxTokens},
	}
}

// clients returns the client groups of t: t itself, or one per user of
// t.Users (each t with the user's name, clients, pause and lengths).
func (t demoTeam) clients() []demoTeam {
	if len(t.Users) == 0 {
		return []demoTeam{t}
	}
	out := make([]demoTeam, 0, len(t.Users))
	for _, u := range t.Users {
		c := t
		c.Users, c.User, c.Workers, c.Think, c.MaxTokens = nil, u.Name, u.Workers, u.Think, u.MaxTokens
		out = append(out, c)
	}
	return out
}

// demoTeams returns the demo's three teams: search sends steady interactive
// requests within its share from the start, research floods with batch
// requests far above its share from 5% of the run (so most of its requests
// borrow), and chat joins after a quarter of the run at a moderate
// interactive load. Research starts a little after search so that the
// first frame shows the steady state, not vLLM admitting whoever arrived
// first into an empty engine.
func demoTeams() []demoTeam {
	return []demoTeam{
		{Name: "search", Class: "interactive", Workers: 5, Think: 150 * time.Millisecond, MaxTokens: 48, Prompt: 200},
		{Name: "chat", Class: "interactive", Workers: 4, Think: 300 * time.Millisecond, StartAt: 0.25, MaxTokens: 96, Prompt: 400},
		{Name: "research", Class: "batch", Workers: 28, Think: 0, StartAt: 0.05, MaxTokens: 240, Prompt: 1000},
	}
}

// requestShape says how a demo request names its team and class to the
// plugin, as the configuration reads them.
type requestShape struct {
	Path        string // e.g. /v1/chat/completions
	Model       string
	TeamHeader  string
	ClassHeader string // empty: the class is not sent
	UserHeader  string // empty: no user is sent
}

// loadGen drives the demo load through the proxies at bases, request i
// to the proxy that weights (tenths, one per base) give it.
type loadGen struct {
	client  *http.Client
	bases   []string
	weights []int
	shape   requestShape
	stats   map[string]*teamStats
	users   *userTallies // per user's figures (with the plugin's user_header); nil: none kept
	pool    string       // the pool's name, for users' keys with several pools ("" with one)
	wg      sync.WaitGroup
	seq     int64
	mu      sync.Mutex
}

// run starts every team's clients and returns at once. Clients stop sending
// new requests when stop is done; the requests in flight run until reqCtx is
// done. wait() returns when every client has stopped.
func (g *loadGen) run(stop, reqCtx context.Context, teams []demoTeam, duration time.Duration) {
	for ti, team := range teams {
		w := 0
		for _, t := range team.clients() {
			for range t.Workers {
				g.wg.Add(1)
				seed := uint64(ti)*1000 + uint64(w)
				w++
				go g.client1(stop, reqCtx, t, duration, rand.New(rand.NewPCG(seed, 0x5eed)))
			}
		}
	}
}

func (g *loadGen) wait() { g.wg.Wait() }

// base is the proxy request id goes to: the bases in turn, each as many
// times out of Σ weights as its weight.
func (g *loadGen) base(id int64) string {
	if len(g.bases) == 1 {
		return g.bases[0]
	}
	sum := 0
	for _, w := range g.weights {
		sum += w
	}
	k := int(id % int64(sum))
	for i, w := range g.weights {
		if k < w {
			return g.bases[i]
		}
		k -= w
	}
	return g.bases[0]
}

func (g *loadGen) client1(stop, reqCtx context.Context, t demoTeam, duration time.Duration, rng *rand.Rand) {
	defer g.wg.Done()
	st := g.stats[t.Name]
	// Spread the workers' first requests over 200 ms so they do not all
	// arrive in the same instant.
	delay := time.Duration(t.StartAt*float64(duration)) + time.Duration(rng.Int64N(int64(200*time.Millisecond)))
	if !sleepCtx(stop, delay) {
		return
	}
	for stop.Err() == nil {
		pause := time.Duration(rng.ExpFloat64() * float64(t.Think))
		if !g.one(reqCtx, t, st, rng) {
			pause = max(pause, errorPause) // do not hammer a failing upstream
		}
		if pause > 0 && !sleepCtx(stop, pause) {
			return
		}
	}
}

// errorPause is the least pause of a client after a failed request.
const errorPause = 250 * time.Millisecond

// sleepCtx sleeps for d or until ctx is done; it reports whether the sleep
// ended normally.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// prompt returns a deterministic prompt of about n tokens (4 bytes each).
func prompt(team string, n int, id int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s #%d] ", team, id)
	for b.Len() < 4*n {
		b.WriteString("tell me more about fair sharing of gpus. ")
	}
	return b.String()
}

// nextID returns the next request number.
func (g *loadGen) nextID() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	return g.seq
}

// one sends one streaming chat request and records its outcome. It reports
// false if the request failed.
func (g *loadGen) one(ctx context.Context, t demoTeam, st *teamStats, rng *rand.Rand) bool {
	id := g.nextID()
	// ±25% jitter on the lengths.
	maxTokens := t.MaxTokens*3/4 + rng.IntN(t.MaxTokens/2+1)
	body, _ := json.Marshal(map[string]any{
		"model":          g.shape.Model,
		"messages":       []map[string]string{{"role": "user", "content": prompt(t.Name, t.Prompt, id)}},
		"max_tokens":     maxTokens,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	return g.sendAs(ctx, id, t.Name, t.User, t.Class, body, st)
}

// send sends request id's streaming chat body as team and class and
// records its outcome in st. It reports false if the request failed.
func (g *loadGen) send(ctx context.Context, id int64, team, class string, body []byte, st *teamStats) bool {
	return g.sendAs(ctx, id, team, "", class, body, st)
}

// sendAs is send as a user of the team ("" for none).
func (g *loadGen) sendAs(ctx context.Context, id int64, team, user, class string, body []byte, st *teamStats) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base(id)+g.shape.Path, bytes.NewReader(body))
	if err != nil {
		st.begin()
		st.end(time.Now(), result{Priority: -1, Err: err}, false)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	if g.shape.TeamHeader != "" {
		req.Header.Set(g.shape.TeamHeader, team)
	}
	if g.shape.ClassHeader != "" {
		req.Header.Set(g.shape.ClassHeader, class) // the plugin's class names
	}
	if g.shape.UserHeader != "" && user != "" {
		req.Header.Set(g.shape.UserHeader, user)
	}
	st.begin()
	sent := time.Now()
	r, gotHeaders := g.exchange(req, st, sent)
	if ctx.Err() != nil && r.Err != nil {
		r.Canceled = true
	}
	st.end(time.Now(), r, gotHeaders)
	key := team
	if g.pool != "" {
		key = g.pool + "/" + team
	}
	g.users.add(key, user, r)
	return r.Err == nil
}

// exchange sends req and reads its SSE stream.
func (g *loadGen) exchange(req *http.Request, st *teamStats, sent time.Time) (result, bool) {
	r := result{Priority: -1}
	resp, err := g.client.Do(req)
	if err != nil {
		r.Err = err
		return r, false
	}
	defer resp.Body.Close()
	r.Priority, r.Borrowing = parseStanding(resp.Header)
	r.Over, _ = strconv.ParseBool(strings.TrimSpace(resp.Header.Get("x-fairshare-over")))
	r.Held = parseHeld(resp.Header)
	r.WouldHold = parseWouldHold(resp.Header)
	st.headers(time.Now(), r.Priority, r.Borrowing, r.WouldHold)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return r, true
	}
	var chunks int64
	usage := int64(-1)
	err = readSSE(resp.Body, func(data []byte) error {
		if e := gjson.GetBytes(data, "error"); e.Exists() {
			return fmt.Errorf("stream error: %s", e.Get("message").String())
		}
		if u := gjson.GetBytes(data, "usage.completion_tokens"); u.Exists() {
			usage = u.Int()
		}
		c := gjson.GetBytes(data, "choices.0.delta.content")
		if !c.Exists() {
			c = gjson.GetBytes(data, "choices.0.text")
		}
		if c.String() != "" {
			now := time.Now()
			if !r.HasTTFT {
				r.TTFT, r.HasTTFT = now.Sub(sent), true
			}
			chunks++
			st.token(now, 1)
		}
		return nil
	})
	r.Err = err
	r.Tokens = chunks
	if usage >= 0 {
		r.Tokens = usage
	}
	return r, true
}

// parseStanding reads the plugin's x-fairshare-priority and
// x-fairshare-borrowing response headers (-1 and false when absent). A
// priority of fairshare.BorrowBase or more also means borrowing.
func parseStanding(h http.Header) (priority int, borrowing bool) {
	priority = -1
	if v := h.Get("x-fairshare-priority"); v != "" {
		if p, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			priority = p
		}
	}
	if v := h.Get("x-fairshare-borrowing"); v != "" {
		borrowing, _ = strconv.ParseBool(strings.TrimSpace(v))
	} else if priority >= borrowBase {
		borrowing = true
	}
	return priority, borrowing
}

// parseWouldHold reads shadow mode's x-fairshare-would-hold response
// header: true when enforce mode would have held the request.
func parseWouldHold(h http.Header) bool {
	v, _ := strconv.ParseBool(strings.TrimSpace(h.Get("x-fairshare-would-hold")))
	return v
}

// parseHeld reads the x-fairshare-queue-time response header (seconds the
// plugin held the request at the gateway); 0 when absent or malformed.
func parseHeld(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("x-fairshare-queue-time"))
	f, err := strconv.ParseFloat(v, 64)
	if v == "" || err != nil || f < 0 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// errDone ends readSSE early without an error.
var errDone = errors.New("done")

// readSSE calls fn with the payload of every "data:" line of an event stream
// until "[DONE]", the end of the body or an error from fn.
func readSSE(body io.Reader, fn func(data []byte) error) error {
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				if string(data) == "[DONE]" {
					return nil
				}
				if ferr := fn(data); ferr != nil {
					if ferr == errDone {
						return nil
					}
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
