package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// observer sits in front of the proxy's handler with -no-load and keeps, per
// pool and team, the figures of every scheduled request that passes,
// whoever sends it: in flight, the priority and standing the plugin gave
// (its response headers), time to first token, tokens, errors. The team is
// the configured team header ("-" when absent; a team the pool does not
// list is the plugin's shared entry, _unknown), the pool the one whose
// models list the body's model (else the "*" pool, else "-": the plugin
// does not schedule it). Every configured team has a row from the start.
// Safe for concurrent use.
type observer struct {
	next  http.Handler
	cfg   configView
	start time.Time

	mu    sync.Mutex
	order []row // rows in first-seen order, configured teams first
}

// newObserver returns an observer with a row for every configured team.
func newObserver(cfg configView, start time.Time) *observer {
	o := &observer{cfg: cfg, start: start}
	for _, p := range cfg.Pools {
		for _, t := range p.Teams {
			o.order = append(o.order, row{pool: p.Name, team: t.Name, share: t.Share, stats: newTeamStats(t.Name, start)})
		}
	}
	return o
}

// rows returns the rows so far.
func (o *observer) rows() []row {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.order)
}

// stats returns the figures of team in pool, adding a row if new.
func (o *observer) stats(pool, team string) *teamStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.order {
		if r.pool == pool && r.team == team {
			return r.stats
		}
	}
	st := newTeamStats(team, o.start)
	o.order = append(o.order, row{pool: pool, team: team, stats: st})
	return st
}

// observeLimit bounds the body bytes read ahead to find the model.
const observeLimit = 64 << 10

// poolFor returns the pool the plugin schedules model in, or "-".
func (o *observer) poolFor(model string) string {
	for _, p := range o.cfg.Pools {
		if slices.Contains(p.Models, model) {
			return p.Name
		}
	}
	for _, p := range o.cfg.Pools {
		if slices.Contains(p.Models, "*") {
			return p.Name
		}
	}
	return "-"
}

// ServeHTTP records a scheduled request (POST on a configured path) around
// the proxy; everything else passes untouched.
func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !slices.Contains(o.cfg.Paths, r.URL.Path) {
		o.next.ServeHTTP(w, r)
		return
	}
	head, _ := io.ReadAll(io.LimitReader(r.Body, observeLimit))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	team := r.Header.Get(o.cfg.TeamHeader)
	pool := o.poolFor(gjson.GetBytes(head, "model").String())
	switch {
	case team == "":
		team = "-"
	case pool != "-" && o.cfg.poolNamed(pool).share(team) == 0:
		team = unknownTeam // the entry the plugin counts it in, as its status and metrics name it
	}
	st := o.stats(pool, team)
	st.begin()
	rec := &recorder{ResponseWriter: w, st: st, sent: time.Now(), res: result{Priority: -1}}
	o.next.ServeHTTP(rec, r)
	rec.finish()
	if r.Context().Err() != nil && rec.res.Err == nil && !rec.ended {
		rec.res.Err = r.Context().Err()
	}
	st.end(time.Now(), rec.res, rec.gotHeaders)
}

// recorder is the http.ResponseWriter the observer hands to the proxy: it
// passes everything on and reads the standing, the first token and the
// tokens on the way.
type recorder struct {
	http.ResponseWriter
	st         *teamStats
	sent       time.Time
	res        result
	gotHeaders bool
	status     int
	sse        bool
	line       []byte // an unfinished SSE line
	body       []byte // the start of a JSON response (usage, error)
	chunks     int64
	usage      int64 // usage.completion_tokens, -1 until seen
	ended      bool  // the stream saw data: [DONE] or a JSON body ended
}

// WriteHeader records the status and the plugin's standing headers.
func (rc *recorder) WriteHeader(code int) {
	if !rc.gotHeaders {
		rc.gotHeaders, rc.status, rc.usage = true, code, -1
		rc.res.Priority, rc.res.Borrowing = parseStanding(rc.Header())
		rc.res.Held = parseHeld(rc.Header())
		rc.res.WouldHold = parseWouldHold(rc.Header())
		rc.sse = strings.HasPrefix(rc.Header().Get("Content-Type"), "text/event-stream")
		rc.st.headers(time.Now(), rc.res.Priority, rc.res.Borrowing, rc.res.WouldHold)
	}
	rc.ResponseWriter.WriteHeader(code)
}

// Write passes p on and scans it.
func (rc *recorder) Write(p []byte) (int, error) {
	if !rc.gotHeaders {
		rc.WriteHeader(http.StatusOK)
	}
	if rc.sse {
		rc.scanSSE(p)
	} else if len(rc.body) < observeLimit {
		rc.body = append(rc.body, p[:min(len(p), observeLimit-len(rc.body))]...)
	}
	return rc.ResponseWriter.Write(p)
}

// Flush passes a flush on (streams are flushed event by event).
func (rc *recorder) Flush() {
	if f, ok := rc.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// scanSSE reads complete "data:" lines: content chunks count as tokens (the
// first one sets TTFT), a usage chunk gives the exact count.
func (rc *recorder) scanSSE(p []byte) {
	rc.line = append(rc.line, p...)
	for {
		i := bytes.IndexByte(rc.line, '\n')
		if i < 0 {
			return // an unfinished line: kept for the next write
		}
		line := rc.line[:i]
		rc.line = rc.line[i+1:]
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			rc.ended = true
			continue
		}
		if e := gjson.GetBytes(data, "error"); e.Exists() {
			rc.res.Err = fmt.Errorf("stream error: %s", e.Get("message").String())
		}
		if u := gjson.GetBytes(data, "usage.completion_tokens"); u.Exists() {
			rc.usage = u.Int()
		}
		c := gjson.GetBytes(data, "choices.0.delta.content")
		if !c.Exists() {
			c = gjson.GetBytes(data, "choices.0.text")
		}
		if c.String() != "" {
			now := time.Now()
			if !rc.res.HasTTFT {
				rc.res.TTFT, rc.res.HasTTFT = now.Sub(rc.sent), true
			}
			rc.chunks++
			rc.st.token(now, 1)
		}
	}
}

// finish settles the result once the proxy has answered.
func (rc *recorder) finish() {
	if !rc.gotHeaders {
		rc.res.Err = fmt.Errorf("no response")
		return
	}
	if !rc.sse {
		rc.ended = true
		if u := gjson.GetBytes(rc.body, "usage.completion_tokens"); u.Exists() {
			rc.usage = u.Int()
			if rc.status == http.StatusOK {
				rc.res.TTFT, rc.res.HasTTFT = time.Since(rc.sent), true // the whole answer at once
			}
		}
	}
	if rc.status != http.StatusOK && rc.res.Err == nil {
		msg := gjson.GetBytes(rc.body, "error.message").String()
		rc.res.Err = fmt.Errorf("status %d: %s", rc.status, truncate(msg, 200))
	}
	rc.res.Tokens = rc.chunks
	if rc.usage >= 0 {
		rc.res.Tokens = rc.usage
	}
	if rc.usage > 0 && !rc.sse {
		rc.st.token(time.Now(), rc.usage)
	}
}
